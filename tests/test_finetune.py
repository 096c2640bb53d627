"""Fine-tuning (issue 16): training examples from `processor(text=..., audio_target=...)`, teacher forcing against
generation, the collator, the data loaders and their refusals. The Trainer / PEFT / command-line runs are in
`test_finetune_integration.py` (integration layer)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import soundfile
import torch
from transformers import LogitsProcessor

from conftest import tiny_model
from higgs_v3.audio_io_higgs_v3 import HiggsAudioV3Voice
from higgs_v3.training.finetune import (
    HiggsAudioV3DataCollator,
    load_speech_items,
    prepare_examples,
)
from oracles import AUDIO, BOC, EOC, NUM_CODEBOOKS, PAD, PLACEHOLDER, REF_AUDIO, REF_TEXT, TEXT, TTS, delayed_by_loop


C = NUM_CODEBOOKS


def random_codes(frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 1024, (frames, C), generator=torch.Generator().manual_seed(seed))


def text_ids(tokenizer, text: str) -> list[int]:
    return tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))


class SpeakCodes(LogitsProcessor):
    """Steers greedy generation to speak `frames` frames ending on time: codebook c is forced to EOC from row
    `frames + c` on, BOC / EOC are banned everywhere else (the delay-pattern processor then forces the delay window's
    BOC). The raw logits (`output_logits`) are the model's own."""

    def __init__(self, prompt_length: int, frames: int):
        self.prompt_length, self.frames = prompt_length, frames

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.prompt_length
        codebook = torch.arange(scores.shape[0]) % C
        ended = (step - codebook >= self.frames)[:, None]
        forced = torch.full_like(scores, -1e9)
        forced[:, EOC] = 0.0
        banned = scores.clone()
        banned[:, BOC:] = -1e9
        return torch.where(ended, forced, banned)


# ---------------------------------------------------------------------------------------------- example layout
def test_training_example_layout_plain_and_clone(processor, tokenizer):
    target, reference = random_codes(9, 0), random_codes(3, 1)
    rows = delayed_by_loop(target)  # [9 + 7, C]: BOC triangle, EOC after each codebook's end, the terminal row
    batch = processor(text="Hello there.", audio_target=target)
    prompt = [TTS, TEXT, *text_ids(tokenizer, "Hello there."), AUDIO]
    assert batch["input_ids"][0].tolist() == prompt + [PLACEHOLDER] * rows.shape[0]
    assert torch.equal(batch["audio_input_ids"][0], rows)
    assert batch["audio_input_ids_mask"].tolist() == [[1] * rows.shape[0]]
    labels = batch["audio_labels"][0]
    assert (labels[: len(prompt)] == -100).all() and torch.equal(labels[len(prompt):], rows)
    assert labels[-1, :-1].eq(EOC).all() and labels[-1, -1] == target[-1, -1]  # the terminal row is a label

    clone = processor(text="Hi.", audio_target=target, reference_codes=reference, reference_text="Ref.")
    ref_rows = delayed_by_loop(reference)
    prompt = [TTS, REF_TEXT, *text_ids(tokenizer, "Ref."), REF_AUDIO, *[PLACEHOLDER] * ref_rows.shape[0], TEXT,
              *text_ids(tokenizer, "Hi."), AUDIO]
    assert clone["input_ids"][0].tolist() == prompt + [PLACEHOLDER] * rows.shape[0]
    assert torch.equal(clone["audio_input_ids"][0], torch.cat([ref_rows, rows]))
    labels = clone["audio_labels"][0]
    assert (labels[: len(prompt)] == -100).all() and torch.equal(labels[len(prompt):], rows)  # no reference label


def test_training_batch_padding_both_sides(processor):
    targets = [random_codes(8, 2), random_codes(12, 3)]
    singles = [processor(text=t, audio_target=c) for t, c in zip(["A b.", "Longer text here."], targets)]
    for side in ("right", "left"):
        batch = processor(text=["A b.", "Longer text here."], audio_target=targets, padding_side=side)
        length = batch["input_ids"].shape[1]
        for i, single in enumerate(singles):
            n = single["input_ids"].shape[1]
            keep = slice(0, n) if side == "right" else slice(length - n, length)
            pad = slice(n, length) if side == "right" else slice(0, length - n)
            assert torch.equal(batch["input_ids"][i, keep], single["input_ids"][0])
            assert torch.equal(batch["audio_labels"][i, keep], single["audio_labels"][0])
            assert batch["attention_mask"][i, keep].eq(1).all() and batch["attention_mask"][i, pad].eq(0).all()
            assert batch["input_ids"][i, pad].eq(PAD).all() and batch["audio_labels"][i, pad].eq(-100).all()
            assert batch["position_ids"][i, keep].tolist() == list(range(n))
            rows = int(batch["audio_input_ids_mask"][i].sum())
            assert torch.equal(batch["audio_input_ids"][i, :rows], single["audio_input_ids"][0])


def test_target_refusals(processor, tmp_path):
    with pytest.raises(ValueError, match=r"The codes of the audio_target must be .* with at least 8 frames"):
        processor(text="Hi.", audio_target=random_codes(7, 0))
    with pytest.raises(ValueError, match=r"'x.wav', an audio file: the processor does not run the codec"):
        processor(text="Hi.", audio_target="x.wav")
    with pytest.raises(ValueError, match=r"is a waveform: the processor does not run the codec.*model.encode_target"):
        processor(text="Hi.", audio_target=(np.zeros(24000, dtype=np.float32), 24000))
    with pytest.raises(ValueError, match=r"The codes of the audio_target must be .* got values from \d+ to 1025"):
        processor(text="Hi.", audio_target=delayed_by_loop(random_codes(9, 0)))
    with pytest.raises(ValueError) as error:  # a target's own advice, not a reference's ("5 to 30 s ... is enough")
        processor(text="Hi.", audio_target=random_codes(2501, 0))
    assert str(error.value) == ("The audio_target is 100.04 s long (2501 frames at 25 frames per second); the longest "
                                "accepted is 100 s. Split long recordings into sentences, one target each.")
    with pytest.raises(ValueError, match=r"Unknown control tag '<\|emotion:angri\|>' in the text"):
        processor(text="<|emotion:angri|>Hi.", audio_target=random_codes(9, 0))
    with pytest.raises(ValueError, match=r"padding_side must be 'left' or 'right', got 'middle'"):
        processor(text="Hi.", audio_target=random_codes(9, 0), padding_side="middle")
    as_lists = processor(text="Hi.", audio_target=random_codes(9, 0), return_tensors=None)
    as_numpy = processor(text="Hi.", audio_target=random_codes(9, 0), return_tensors="np")
    as_torch = processor(text="Hi.", audio_target=random_codes(9, 0))
    for key, value in as_torch.items():
        assert as_lists[key] == value.tolist() and (as_numpy[key] == value.numpy()).all(), key
    saved = HiggsAudioV3Voice(codes=random_codes(9, 4)).save(tmp_path / "t.safetensors")
    assert torch.equal(processor(text="Hi.", audio_target=saved)["audio_input_ids"][0], delayed_by_loop(random_codes(9, 4)))


# ---------------------------------------------------------------------------------------------- teacher forcing
@pytest.mark.parametrize("with_reference", [False, True], ids=["plain", "clone"])
def test_teacher_forcing_equals_generation(processor, with_reference):
    """Greedy generation, then one forward over the training example built from its codes: the example's rows are
    the generated rows exactly, and its logits at every generated step are the logits generation saw."""
    model = tiny_model()
    frames = 10
    reference = dict(reference_codes=random_codes(4, 5), reference_text="Ref words.") if with_reference else {}
    prompt = processor(text="Say this.", **reference)
    out = model.generate(**prompt, do_sample=False, max_new_tokens=40, return_dict_in_generate=True, output_logits=True,
                         logits_processor=[SpeakCodes(prompt["input_ids"].shape[1], frames)])
    assert out.finished.tolist() == [True] and out.lengths.tolist() == [frames + C - 1]
    codes = out.audio_codes[0]  # [frames, C]
    example = processor(text="Say this.", audio_target=codes, **reference)
    prompt_length = prompt["input_ids"].shape[1]
    assert torch.equal(example["audio_input_ids"][0, -(frames + C - 1):], out.sequences[0])
    with torch.no_grad():
        forward = model(**example)
    steps = torch.stack(out.logits, dim=1)[0]  # [rows, C, V]
    logits = forward.logits.transpose(0, 1)  # [C, L, V] (one example) -> [L, C, V]
    assert torch.allclose(logits[prompt_length - 1 : -1], steps, atol=1e-4, rtol=1e-4)
    # The loss is the cross-entropy of exactly those logits against the generated rows.
    expected = torch.stack([torch.nn.functional.cross_entropy(steps[:, c], out.sequences[0, :, c]) for c in range(C)])
    assert torch.allclose(forward.audio_loss_per_codebook, expected, atol=1e-4)


# ---------------------------------------------------------------------------------------------- collator
def test_collator_pads_examples_for_trainer_and_loops(processor):
    examples = [
        {k: v[0] for k, v in processor(text=t, audio_target=random_codes(n, n)).items() if k != "attention_mask"}
        for t, n in (("One.", 8), ("Two words here.", 11))
    ]
    collator = HiggsAudioV3DataCollator(processor)
    batch = collator(examples)
    expected = processor(text=["One.", "Two words here."], audio_target=[random_codes(8, 8), random_codes(11, 11)],
                         padding_side="right")
    assert batch.keys() == expected.keys()
    for key in batch:
        assert torch.equal(batch[key], expected[key]), key
    model = tiny_model()
    loss = model(**batch).loss  # the batch goes to forward as is, padded rows masked out
    assert torch.isfinite(loss)
    left = HiggsAudioV3DataCollator(processor, padding_side="left")(examples)
    assert torch.allclose(model(**left).loss, loss, atol=1e-5)  # position ids make the padding side irrelevant


# ---------------------------------------------------------------------------------------------- loaders
def write_wav(path, seconds: float, rate: int = 24000, seed: int = 0):
    samples = 0.1 * np.random.default_rng(seed).standard_normal(int(seconds * rate)).astype(np.float32)
    soundfile.write(path, samples, rate)
    return path


def test_folder_and_manifest_loaders(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    for name in ("b", "a"):
        write_wav(folder / f"{name}.wav", 0.5)
        (folder / f"{name}.txt").write_text(f" Line {name}.\n", encoding="utf-8")
    items = load_speech_items(folder)
    assert [(i.name, i.text, i.audio) for i in items] == [
        ("a", "Line a.", str(folder / "a.wav")), ("b", "Line b.", str(folder / "b.wav"))
    ]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(
        json.dumps({"audio": "data/a.wav", "text": "A."}) + "\n\n"
        + json.dumps({"audio": str(folder / "b.wav"), "text": "B.", "ref_audio": "data/a.wav", "ref_text": "R."}) + "\n",
        encoding="utf-8",
    )
    items = load_speech_items(manifest)
    assert [(i.name, i.audio, i.ref_audio, i.ref_text) for i in items] == [
        ("m.jsonl:1", str(folder / "a.wav"), None, None), ("m.jsonl:3", str(folder / "b.wav"), str(folder / "a.wav"), "R.")
    ]


def test_bad_items_name_the_item_or_are_counted(tmp_path, processor, caplog):
    folder = tmp_path / "data"
    folder.mkdir()
    write_wav(folder / "good.wav", 0.5)
    (folder / "good.txt").write_text("Good.", encoding="utf-8")
    write_wav(folder / "notext.wav", 0.5)
    with pytest.raises(ValueError, match=r"notext: .*notext.wav. has no transcript \(.*notext.txt. is missing\)"):
        load_speech_items(folder)
    with caplog.at_level(logging.WARNING, logger="higgs_v3.training.finetune"):
        items = load_speech_items(folder, skip_invalid=True)
    assert [i.name for i in items] == ["good"]
    assert "Skipped 1 of 2 items" in caplog.text

    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"audio": "data/good.wav"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"m.jsonl:1: the entry has no \"text\""):
        load_speech_items(manifest)
    manifest.write_text('{"audio": "data/good.wav", "text": "x"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"m.jsonl:1: not a JSON object"):
        load_speech_items(manifest)


# ---------------------------------------------------------------------------------------------- examples from audio
@pytest.fixture(scope="module")
def codec_model():
    from higgs_v3.testing.tiny import tiny_codec_config

    return tiny_model(codec_config=tiny_codec_config())


def test_prepare_examples_encodes_once_and_caches(tmp_path, processor, codec_model):
    folder = tmp_path / "data"
    folder.mkdir()
    for name, seconds in (("a", 0.5), ("b", 0.8)):
        write_wav(folder / f"{name}.wav", seconds, seed=len(name))
        (folder / f"{name}.txt").write_text(f"Line {name}.", encoding="utf-8")
    items = load_speech_items(folder)
    dataset = prepare_examples(codec_model, processor, items, cache_dir=tmp_path / "cache")
    assert (len(dataset), dataset.encoded, dataset.cache_hits) == (2, 2, 0)
    for example, item in zip(dataset, items):  # the example is the processor's, built from the codec's codes
        codes = codec_model.encode_target(item.audio)
        assert codes.shape[0] == processor._get_encoded_length(soundfile.info(item.audio).frames,
                                                               **processor.encoded_length_kwargs)
        expected = processor(text=item.text, audio_target=codes)
        assert torch.equal(example["audio_labels"], expected["audio_labels"][0])
        assert torch.equal(example["input_ids"], expected["input_ids"][0])
    again = prepare_examples(codec_model, processor, items, cache_dir=tmp_path / "cache")
    assert (again.encoded, again.cache_hits) == (0, 2)  # the second epoch / run never runs the codec
    assert all(torch.equal(a["audio_input_ids"], b["audio_input_ids"]) for a, b in zip(again, dataset))
    # A cached target is encode_target's under its limit: a lower limit refuses the longer clip, as without a cache.
    with pytest.raises(ValueError, match=r"^b: Reference audio file .* is 0\.80 s long .*the longest accepted is 0\.6 s"):
        prepare_examples(codec_model, processor, items, cache_dir=tmp_path / "cache", max_seconds=0.6)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"audio": "data/b.wav", "text": "Line b.", "ref_audio": "data/a.wav",
                                    "ref_text": "Line a."}) + "\n", encoding="utf-8")
    cloned = prepare_examples(codec_model, processor, load_speech_items(manifest), cache_dir=tmp_path / "cache")
    assert (cloned.encoded, cloned.cache_hits) == (1, 1)  # the reference is encoded as a reference (padded to 1 s)
    voice = codec_model.encode_reference(str(folder / "a.wav"), text="Line a.")
    expected = processor(text="Line b.", audio_target=codec_model.encode_target(str(folder / "b.wav")), reference=voice)
    for key in ("input_ids", "audio_input_ids", "audio_labels"):
        assert torch.equal(cloned[0][key], expected[key][0]), key
    assert all(p.dtype == torch.float32 for p in codec_model.codec.parameters())


def test_a_too_long_target_clip_gets_a_targets_advice(tmp_path, codec_model):
    """`encode_target` refuses a clip over its limit (file: from the header; samples: before resampling) with a
    target's advice, not a reference's ("5 to 30 s of clean speech is enough to clone a voice")."""
    path = write_wav(tmp_path / "long.wav", 2.0)
    with pytest.raises(ValueError) as error:
        codec_model.encode_target(str(path), max_seconds=1.5)
    assert str(error.value) == (f"Reference audio file {str(path)!r} is 2.00 s long (48000 samples at 24000 Hz); the "
                                "longest accepted is 1.5 s. Split long recordings into sentences, one target each.")
    with pytest.raises(ValueError) as error:
        codec_model.encode_target(np.zeros(32000, dtype=np.float32), sampling_rate=16000, max_seconds=1.5)
    assert str(error.value) == ("Reference audio is 2.00 s long (32000 samples at 16000 Hz); the longest accepted is "
                                "1.5 s. Split long recordings into sentences, one target each.")


def test_dataset_with_audio_column(processor, codec_model, tmp_path):
    from datasets import Audio, Dataset

    from higgs_v3.training.finetune import items_from_dataset

    path = write_wav(tmp_path / "a.wav", 0.5)
    dataset = Dataset.from_dict({"audio": [str(path)], "sentence": ["Words."]}).cast_column("audio", Audio())
    items = items_from_dataset(dataset, text_column="sentence")
    assert items[0].name == "row 0" and items[0].audio[1] == 24000 and items[0].audio[0].shape == (1, 12000)
    example = prepare_examples(codec_model, processor, items)[0]
    expected = processor(text="Words.", audio_target=codec_model.encode_target(str(path)))
    assert torch.equal(example["audio_labels"], expected["audio_labels"][0])
    with pytest.raises(ValueError, match=r"The dataset has no column 'text'; its columns are \['audio', 'sentence'\]"):
        items_from_dataset(dataset)


def test_bad_clips_name_the_item(tmp_path, processor, codec_model, caplog):
    from higgs_v3.training.finetune import SpeechItem

    (tmp_path / "broken.wav").write_bytes(b"not audio at all")
    items = [
        SpeechItem("short", str(write_wav(tmp_path / "short.wav", 0.2)), "Short."),
        SpeechItem("long", str(write_wav(tmp_path / "long.wav", 2.5)), "Long."),
        SpeechItem("broken", str(tmp_path / "broken.wav"), "Broken."),
        SpeechItem("tag", str(write_wav(tmp_path / "ok.wav", 0.5)), "<|emotion:angri|>Hi."),
        SpeechItem("good", str(tmp_path / "ok.wav"), "Fine."),
    ]
    expected = {
        "short": r"short: Target audio is 0.200 s long; a training target needs at least 8 codec frames \(0.32 s\)",
        "long": r"long: Reference audio file '.*long.wav' is 2.50 s long \(60000 samples at 24000 Hz\); the longest "
                r"accepted is 2 s. Split long recordings into sentences, one target each$",
        "broken": r"broken: Could not read reference audio file '.*broken.wav'",
        "tag": r"tag: Unknown control tag '<\|emotion:angri\|>' in the transcript of tag",
    }
    for item in items[:4]:
        with pytest.raises(ValueError, match=expected[item.name]):
            prepare_examples(codec_model, processor, [item], max_seconds=2.0)
    with caplog.at_level(logging.WARNING, logger="higgs_v3.training.finetune"):
        dataset = prepare_examples(codec_model, processor, items, max_seconds=2.0, skip_invalid=True)
    assert dataset.names == ["good"]
    assert "Skipped 4 of 5 items: short: " in caplog.text and "broken: Could not read" in caplog.text


# ---------------------------------------------------------------------------------------------- review fixes
def test_codec_stays_frozen_through_save_and_from_pretrained(tmp_path, processor, codec_model):
    """transformers rebuilds a loaded model's parameters after `__init__`: the codec is frozen again, in fp32 and
    bf16 loads, with `output_loading_info=True` too, and in the repo's own code (`AutoModel`, trust_remote_code),
    while the language model stays trainable."""
    from transformers import AutoModel

    from higgs_v3 import HiggsAudioV3ForConditionalGeneration
    from higgs_v3.training.finetune import save_full_repo

    assert not any(p.requires_grad for p in codec_model.codec.parameters())
    folder = save_full_repo(codec_model, processor, tmp_path / "saved")
    remote = AutoModel.from_pretrained(folder, trust_remote_code=True)
    assert type(remote).__module__.startswith("transformers_modules.")
    assert not any(p.requires_grad for p in remote.codec.parameters())
    for options in ({}, {"dtype": torch.bfloat16}, {"output_loading_info": True}):
        loaded = HiggsAudioV3ForConditionalGeneration.from_pretrained(folder, **options)
        loaded = loaded[0] if isinstance(loaded, tuple) else loaded
        assert not any(p.requires_grad for p in loaded.codec.parameters()), options
        assert all(p.requires_grad for n, p in loaded.named_parameters() if not n.startswith("codec.")), options
        assert all(p.dtype == torch.float32 for p in loaded.codec.parameters()), options


def test_codes_cache_writes_atomically_and_re_encodes_a_damaged_entry(tmp_path, caplog, monkeypatch):
    import safetensors.torch

    from higgs_v3.training.finetune import HiggsAudioV3CodesCache

    cache, codes, calls = HiggsAudioV3CodesCache(tmp_path / "cache"), random_codes(5, 7), []

    def encode():
        calls.append(1)
        return codes

    def broken_save(tensors, filename):  # dies half way through the file, as a kill or a full disk would
        with open(filename, "wb") as file:
            file.write(b"\x10\x00\x00")
        raise OSError("No space left on device")

    real_save = safetensors.torch.save_file
    monkeypatch.setattr(safetensors.torch, "save_file", broken_save)
    with pytest.raises(OSError, match="No space left on device"):
        cache.codes("k", encode)
    assert list((tmp_path / "cache").iterdir()) == []  # no partial entry, no temporary file
    monkeypatch.setattr(safetensors.torch, "save_file", real_save)

    assert torch.equal(cache.codes("k", encode), codes) and (cache.encoded, cache.hits) == (2, 0)
    entry = tmp_path / "cache" / "k.safetensors"
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["k.safetensors"]
    assert torch.equal(cache.codes("k", encode), codes) and (cache.encoded, cache.hits, len(calls)) == (2, 1, 2)

    entry.write_bytes(entry.read_bytes()[:20])  # truncated by an older run killed while writing
    with caplog.at_level(logging.WARNING, logger="higgs_v3.training.finetune"):
        assert torch.equal(cache.codes("k", encode), codes)
    assert (cache.encoded, cache.hits) == (3, 1)
    assert f"The cached codes {str(entry)!r} cannot be read (" in caplog.text and "encoding the clip again" in caplog.text
    assert torch.equal(safetensors.torch.load_file(str(entry))["codes"], codes)  # rewritten whole
    assert torch.equal(cache.codes("k", encode), codes) and (cache.encoded, cache.hits) == (3, 2)


def test_tuned_model_folder_is_written_whole_with_the_original_template(tmp_path, processor):
    """`save_full_repo(..., base=)` copies the base's original_chat_template.jinja and LICENSE / NOTICE files (so that
    `export --to-original` of a tuned model restores the original template); the run saves it with
    `conversion.folders.staged_folder`, into a staging folder swapped in at the end: a failed save leaves the previous
    folder untouched and no staging folder behind."""
    from higgs_v3.conversion.folders import staged_folder
    from higgs_v3.conversion.repo import ORIGINAL_CHAT_TEMPLATE_FILE
    from higgs_v3.training.finetune import save_full_repo

    base = tmp_path / "base"
    base.mkdir()
    (base / ORIGINAL_CHAT_TEMPLATE_FILE).write_text("{{ original }}", encoding="utf-8")
    (base / "LICENSE").write_text("license text", encoding="utf-8")
    (base / "NOTICE.md").write_text("notice text", encoding="utf-8")
    (base / "README.md").write_text("not copied", encoding="utf-8")
    model, folder = tiny_model(), tmp_path / "out" / "model"
    folder.parent.mkdir()
    with staged_folder(folder, "saving") as staging:
        save_full_repo(model, processor, staging, base=base)
    assert (folder / ORIGINAL_CHAT_TEMPLATE_FILE).read_text(encoding="utf-8") == "{{ original }}"
    assert (folder / "LICENSE").read_text() == "license text" and (folder / "NOTICE.md").read_text() == "notice text"
    assert (folder / "model.safetensors").is_file()
    card = (folder / "README.md").read_text(encoding="utf-8")  # its own card, not the base's, with the base's license
    assert card.startswith("---\nlibrary_name: transformers\npipeline_tag: text-to-speech\nlicense: other\n"
                           "license_name: higgs-audio-v3-license\nlicense_link: LICENSE\n")
    assert f"Fine-tuned from `{base}` with higgs-v3" in card and "not copied" not in card
    assert sorted(p.name for p in folder.parent.iterdir()) == ["model"]  # staging folder renamed, owner file gone
    assert not (folder / ".higgs_v3_owner.json").exists()

    before = (folder / "model.safetensors").read_bytes()
    with pytest.raises(KeyboardInterrupt), staged_folder(folder, "saving") as staging:
        (staging / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt
    assert (folder / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in folder.parent.iterdir()) == ["model"]

    without = tmp_path / "plain"
    save_full_repo(model, processor, without, base=tmp_path / "out")  # a base without them: nothing copied
    assert not (without / ORIGINAL_CHAT_TEMPLATE_FILE).exists() and not (without / "LICENSE").exists()
    assert ("license_link: https://huggingface.co/bosonai/higgs-audio-v3-tts-4b/blob/main/LICENSE\n"
            in (without / "README.md").read_text(encoding="utf-8"))  # no license file: the original's terms, linked


@pytest.mark.parametrize("argv, message", [
    (["--data", "gone"], "--data 'gone' is neither a folder of name.wav + name.txt pairs nor a .jsonl manifest (it "
                         "does not exist)."),
    (["--held-out", "1.5"], "--held-out must be a fraction in [0, 1), got 1.5."),
    (["--device", "cuda"], "--device 'cuda': fine-tuning runs on the Trainer's device (a GPU when one is visible; "
                           "choose it with CUDA_VISIBLE_DEVICES) or, with --device cpu, on the CPU."),
    (["--push-adapter"], "--push-adapter pushes a LoRA adapter: add --lora (or push the full model without it)."),
], ids=["missing data", "held-out", "device", "push-adapter"])
def test_finetune_refusals_come_before_any_model_work(monkeypatch, capsys, tmp_path, argv, message):
    """`higgs-v3 finetune` refuses bad options and data with `FinetuneRun`'s checks (one wording each, as the Python
    API gives them), before any model is resolved or loaded."""
    from higgs_v3.cli import main as cli_main
    from higgs_v3.cli import models

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    monkeypatch.setattr(models, "resolve_model", lambda *a, **k: pytest.fail("the model was resolved"))
    data = [] if "--data" in argv else ["--data", "data"]
    assert cli_main.main(["finetune", *data, "--output", "out", *argv]) == 2
    assert capsys.readouterr().err == f"higgs-v3: error: {message}\n"


def test_finetune_out_of_memory_hint_names_finetune_options(monkeypatch, capsys, tmp_path):
    from higgs_v3.cli import main as cli_main

    class OutOfMemoryError(RuntimeError):  # torch.OutOfMemoryError is matched by name
        pass

    def out_of_memory(args):
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(cli_main, "cmd_finetune", out_of_memory)
    assert cli_main.main(["finetune", "--data", str(tmp_path), "--output", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == (
        "higgs-v3: error: out of memory (CUDA out of memory. Tried to allocate 2.00 GiB); try --batch-size 1, a "
        "smaller --max-seconds, --bf16, --gradient-checkpointing or --lora.\n"
    )


def _resumable_output(out, step: int, model: str, saved: bool = True):
    """An output folder as a finished run leaves it: `checkpoint-<step>` (complete, its log with losses), the run
    record, and `model/` when `saved`."""
    from higgs_v3.conversion.folders import write_complete
    from higgs_v3.training.finetune import model_identity, write_run_record

    checkpoint = out / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    history = [{"loss": 0.5, "step": step - 1}, {"eval_loss": 0.7, "step": step}, {"loss": 0.25, "step": step}]
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": history}))
    write_complete(checkpoint, checksums=False)
    write_run_record(out, {"model": model_identity(model)})
    if saved:
        (out / "model").mkdir()
        (out / "model" / "model.safetensors").write_bytes(b"the saved model")


def test_resume_refuses_a_changed_model_naming_both(monkeypatch, capsys, tmp_path):
    from higgs_v3.cli import main as cli_main
    from higgs_v3.cli import models

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "base").mkdir()
    _resumable_output(tmp_path / "out", 4, "base")
    monkeypatch.setattr(models, "resolve_model", lambda *a, **k: pytest.fail("the model was resolved"))
    assert cli_main.main(["finetune", "--data", "data", "--output", "out", "--resume", "--model", "tiny-random"]) == 2
    assert capsys.readouterr().err == (
        f"higgs-v3: error: --resume: 'out' was fine-tuned from --model {str(tmp_path / 'base')!r}, not 'tiny-random'; "
        f"resume with --model {str(tmp_path / 'base')!r}, or pick another --output to tune the other model.\n")


def test_resume_at_or_past_max_steps_does_nothing(monkeypatch, capsys, tmp_path):
    """A finished run resumed with --max-steps at or below its step: it says so and trains, saves and replaces
    nothing (model/ byte for byte as it was); without model/ past the step, it says what to give."""
    from higgs_v3.cli import main as cli_main
    from higgs_v3.cli import models

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    _resumable_output(tmp_path / "out", 6, "tiny-random")
    monkeypatch.setattr(models, "resolve_model", lambda *a, **k: pytest.fail("the model was resolved"))
    before = sorted((p.relative_to(tmp_path / "out"), p.stat().st_mtime_ns) for p in (tmp_path / "out").rglob("*"))
    for steps in ("6", "3"):
        argv = ["finetune", "--data", "data", "--output", "out", "--resume", "--model", "tiny-random"]
        assert cli_main.main([*argv, "--max-steps", steps]) == 0
        captured = capsys.readouterr()
        assert captured.err == (f"Nothing to do: checkpoint-6 is at step 6, at or past --max-steps {steps}, and "
                                "out/model is saved (kept as it is). Raise --max-steps to train "
                                "further.\n")
        assert captured.out == ("Nothing to train: the run had finished at step 6 (last training loss 0.2500, held-out "
                                "loss 0.7000); model in out/model.\n")
    after = sorted((p.relative_to(tmp_path / "out"), p.stat().st_mtime_ns) for p in (tmp_path / "out").rglob("*"))
    assert after == before
    import shutil

    shutil.rmtree(tmp_path / "out" / "model")  # killed after the last checkpoint, before the model was saved
    assert cli_main.main([*argv, "--max-steps", "3"]) == 2
    assert capsys.readouterr().err == ("higgs-v3: error: --resume: checkpoint-6 is already past --max-steps 3; give "
                                       "--max-steps 6 to save its model, or more to train further.\n")
