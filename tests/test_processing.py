# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Tests of `HiggsAudioV3Processor`: prompt layouts, control tags, text and reference refusals, batches, return types,
agreement with the model config, saving and loading, and voices made by a second import of `audio_io_higgs_v3`.

Expected prompt ids are built independently from token strings (the tokenizer's own lookups and a joint tokenization
of the whole prompt string), expected delayed rows with the loop oracle of spec §4 (`oracles.delayed_by_loop`).
Audio <-> codes is the model's and is tested in `test_audio.py`; waveform and voice files in `test_audio_io.py`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from oracles import NUM_CODEBOOKS, delayed_by_loop

from higgs_v3 import processing_higgs_v3
from higgs_v3.audio_io_higgs_v3 import HiggsAudioV3Voice
from higgs_v3.configuration_higgs_v3 import HiggsAudioV3Config
from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor
from higgs_v3.testing.tiny import tiny_codec_config


C = NUM_CODEBOOKS


# ----------------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def second_audio_io(second_import):
    """`audio_io_higgs_v3` from a second import of the package (conftest's `second_import`)."""
    return second_import("audio_io_higgs_v3")


def ids_of(tokenizer, *tokens: str) -> list[int]:
    return [tokenizer.convert_tokens_to_ids(t) for t in tokens]


def text_ids(tokenizer, text: str) -> list[int]:
    return tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))


def random_codes(frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 1024, (frames, C), generator=torch.Generator().manual_seed(seed))


def tiny_model_config(**overrides) -> HiggsAudioV3Config:
    return HiggsAudioV3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                              num_key_value_heads=1, head_dim=16, **overrides)


# --------------------------------------------------------------------------------------------- prompt layouts
def test_special_ids_match_spec_and_config(processor, tokenizer):
    assert processor.prompt_token_ids == {
        "pad": 151643, "tts": 151667, "text": 151672, "audio_start": 151670, "ref_audio": 151679, "ref_text": 151680,
    }
    assert processor.prompt_token_ids["tts"] == tokenizer.convert_tokens_to_ids("<|tts|>")
    config = tiny_model_config()
    processor.check_model_config(config)  # must not raise
    built = HiggsAudioV3Processor.from_model_config(tokenizer, config)
    assert built.audio_spec == config.audio_spec
    spec = built.audio_spec
    assert (spec.num_codebooks, spec.audio_placeholder_id, spec.sampling_rate, spec.frame_rate) == (8, -100, 24000, 25)
    assert built.sampling_rate == 24000
    # A config without a codec: the real codec's frame-count parameters; with one, that codec's.
    assert built.encoded_length_kwargs == processing_higgs_v3.REAL_ENCODED_LENGTH_KWARGS
    codec = tiny_codec_config()
    codec["semantic_model_config"]["conv_stride"][0] = 6
    with_codec = HiggsAudioV3Processor.from_model_config(tokenizer, tiny_model_config(codec_config=codec))
    assert with_codec.encoded_length_kwargs == {**processing_higgs_v3.REAL_ENCODED_LENGTH_KWARGS,
                                                "conv_stride": [6, 2, 2, 2, 2, 2, 2]}


def test_config_mismatch_is_refused(processor, tokenizer):
    config = tiny_model_config(tts_token_id=5, frame_rate=50)
    message = (
        "The processor does not match the model config: <|tts|> is id 151667 in the tokenizer but "
        "config.tts_token_id=5; processor frame_rate=25 but config.frame_rate=50."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        processor.check_model_config(config)
    with pytest.raises(ValueError, match=re.escape(message)):  # the settings come from the config, the ids do not
        HiggsAudioV3Processor.from_model_config(tokenizer, config, audio_spec={**config.audio_spec.to_dict(),
                                                                              "frame_rate": 25})


def test_tokenizer_without_higgs_tokens_and_bad_settings_are_refused(tokenizer):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    plain = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")))
    with pytest.raises(ValueError, match=re.escape(
        "The tokenizer has no '<|endoftext|>' token; a Higgs Audio v3 tokenizer has the 84 added tokens of the "
        "original (ids 151643..151726)."
    )):
        HiggsAudioV3Processor(plain)
    with pytest.raises(ValueError, match=re.escape("sampling_rate=24000 must be a positive multiple of frame_rate=7.")):
        HiggsAudioV3Processor(tokenizer, audio_spec={"frame_rate": 7})
    with pytest.raises(ValueError, match=re.escape(
        "audio_boc_token_id=1024 and audio_eoc_token_id=1024 must be two different codes >= 0."
    )):
        HiggsAudioV3Processor(tokenizer, audio_spec={"audio_eoc_token_id": 1024})
    with pytest.raises(ValueError, match=re.escape(
        "num_codebooks must be at least 2 (the delay pattern's end needs a countdown of num_codebooks - 2 rows), got 1."
    )):
        HiggsAudioV3Processor(tokenizer, audio_spec={"num_codebooks": 1})


def test_plain_layout(processor, tokenizer):
    out = processor("Hello world, this is a test.")
    expected = ids_of(tokenizer, "<|tts|>", "<|text|>") + text_ids(tokenizer, "Hello world, this is a test.") + ids_of(
        tokenizer, "<|audio|>")
    assert out["input_ids"].tolist() == [expected]
    # The same ids from one tokenization of the whole prompt string (specials split out as single tokens).
    joint = tokenizer("<|tts|><|text|>Hello world, this is a test.<|audio|>", add_special_tokens=False).input_ids
    assert out["input_ids"][0].tolist() == joint
    assert out["attention_mask"].tolist() == [[1] * len(expected)]
    assert "audio_input_ids" not in out
    assert out["input_ids"].dtype == torch.long


def test_clone_without_transcript_layout(processor, tokenizer):
    raw = random_codes(5, seed=1)
    out = processor("Good morning!", reference_codes=raw)
    placeholders = [-100] * (5 + 7)  # L = T_ref + 7
    expected = (ids_of(tokenizer, "<|tts|>", "<|ref_audio|>") + placeholders + ids_of(tokenizer, "<|text|>")
                + text_ids(tokenizer, "Good morning!") + ids_of(tokenizer, "<|audio|>"))
    assert out["input_ids"].tolist() == [expected]
    assert torch.equal(out["audio_input_ids"], delayed_by_loop(raw))
    assert out["audio_input_ids"].shape == (12, C)
    # A numpy array of codes and a voice without transcript give the same prompt.
    for same in (processor("Good morning!", reference_codes=raw.numpy()),
                 processor("Good morning!", reference=HiggsAudioV3Voice(codes=raw))):
        assert torch.equal(same["input_ids"], out["input_ids"])
        assert torch.equal(same["audio_input_ids"], out["audio_input_ids"])


def test_clone_with_transcript_layout(processor, tokenizer):
    raw = random_codes(3, seed=2)
    voice = HiggsAudioV3Voice(codes=raw, text="She sells sea shells.")
    out = processor("The quick brown fox.", reference=voice)
    expected = (ids_of(tokenizer, "<|tts|>", "<|ref_text|>") + text_ids(tokenizer, "She sells sea shells.")
                + ids_of(tokenizer, "<|ref_audio|>") + [-100] * 10 + ids_of(tokenizer, "<|text|>")
                + text_ids(tokenizer, "The quick brown fox.") + ids_of(tokenizer, "<|audio|>"))
    assert out["input_ids"].tolist() == [expected]
    assert torch.equal(out["audio_input_ids"], delayed_by_loop(raw))
    # reference_codes + reference_text, and a voice without transcript + reference_text, give the same prompt.
    for same in (processor("The quick brown fox.", reference_codes=raw, reference_text="She sells sea shells."),
                 processor("The quick brown fox.", reference=HiggsAudioV3Voice(codes=raw),
                           reference_text="She sells sea shells.")):
        assert torch.equal(same["input_ids"], out["input_ids"])
        assert torch.equal(same["audio_input_ids"], out["audio_input_ids"])
    # An empty transcript is no transcript; a blank one is kept as given, as the official server does
    # (`reference_text or None`, then `if reference_text:` in sglang-omni's prompt builder: "  " is truthy).
    without = processor("The quick brown fox.", reference_codes=raw)["input_ids"]
    assert torch.equal(processor("The quick brown fox.", reference_codes=raw, reference_text="")["input_ids"], without)
    for blank in ("  ", "\n"):
        kept = processor("The quick brown fox.", reference_codes=raw, reference_text=blank)["input_ids"]
        assert kept.tolist() == [ids_of(tokenizer, "<|tts|>", "<|ref_text|>") + text_ids(tokenizer, blank)
                                 + without[0, 1:].tolist()]
        voice_kept = processor("The quick brown fox.", reference=HiggsAudioV3Voice(codes=raw, text=blank))
        assert torch.equal(voice_kept["input_ids"], kept)


def test_every_tag_is_one_token(processor, tokenizer):
    tags = processor.valid_tags()
    assert len(tags) == 45
    families = [t[2:].split(":")[0] for t in tags]
    assert {f: families.count(f) for f in set(families)} == {"emotion": 21, "style": 3, "sfx": 9, "prosody": 10,
                                                              "env": 2}
    assert tags[0] == "<|emotion:elation|>" and tags[-1] == "<|prosody:expressive_low|>"
    tag_ids = [tokenizer.convert_tokens_to_ids(t) for t in tags]
    assert tag_ids == sorted(tag_ids)  # in id order
    out = processor([f"Hi {tag}there" for tag in tags])  # one batch, all rows the same length
    for row, tag in enumerate(tags):
        expected = (ids_of(tokenizer, "<|tts|>", "<|text|>") + text_ids(tokenizer, "Hi ") + ids_of(tokenizer, tag)
                    + text_ids(tokenizer, "there") + ids_of(tokenizer, "<|audio|>"))
        assert out["input_ids"][row].tolist() == expected, tag
        assert tokenizer.convert_tokens_to_ids(tag) in range(151681, 151727)
        assert processor.check_text(f"Hi {tag}there") == f"Hi {tag}there"


def test_stacked_tags(processor, tokenizer):
    out = processor("<|emotion:anger|><|prosody:speed_fast|>Stop.<|prosody:pause|><|sfx:laughter|>Haha")
    expected = (ids_of(tokenizer, "<|tts|>", "<|text|>", "<|emotion:anger|>", "<|prosody:speed_fast|>")
                + text_ids(tokenizer, "Stop.") + ids_of(tokenizer, "<|prosody:pause|>", "<|sfx:laughter|>")
                + text_ids(tokenizer, "Haha") + ids_of(tokenizer, "<|audio|>"))
    assert out["input_ids"][0].tolist() == expected


# ------------------------------------------------------------------------------------------------- tag checks
def test_unknown_tag_names_closest_valid_tags(processor):
    message = (
        "Unknown control tag '<|emotion:angry|>' in the text; it would be read aloud. Closest valid tags: "
        "'<|emotion:anger|>', '<|emotion:fear|>', '<|emotion:awe|>'. processor.valid_tags() (or `higgs-v3 tags`) lists "
        "all 45."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        processor("Hello <|emotion:angry|> world")
    with pytest.raises(ValueError, match=re.escape(message)):  # the same check, called early by the CLI / long-form
        processor.check_text("Hello <|emotion:angry|> world", "the text")


def test_unknown_tag_in_batch_and_reference_text(processor):
    with pytest.raises(ValueError, match=re.escape(
        "Unknown control tag '<|sfx:laugh|>' in text 1; it would be read aloud. Closest valid tags: '<|sfx:laughter|>'"
    )):
        processor(["Fine.", "<|sfx:laugh|>Ha"])
    with pytest.raises(ValueError, match=re.escape(
        "Unknown control tag '<|prosody:pause |>' in the transcript of the reference; it would be read aloud. Closest "
        "valid tags: '<|prosody:pause|>', '<|prosody:long_pause|>', '<|prosody:speed_slow|>'. processor.valid_tags() "
        "(or `higgs-v3 tags`) lists all 45."
    )):
        processor("Fine.", reference_codes=torch.zeros(2, C, dtype=torch.long), reference_text="a <|prosody:pause |> b")
    with pytest.raises(ValueError, match=re.escape(
        "'<|tts|>' in the transcript of the reference for text 1 is a structural prompt token, which the processor "
        "places itself; remove it."
    )):
        processor(["x", "y"], reference_codes=torch.zeros(2, C, dtype=torch.long), reference_text=[None, "a <|tts|> b"])


def test_unknown_tag_without_close_match(processor):
    with pytest.raises(ValueError, match=re.escape(
        "Unknown control tag '<|zz|>' in the text; it would be read aloud. No valid tag is close to it. "
        "processor.valid_tags() (or `higgs-v3 tags`) lists all 45."
    )):
        processor("<|zz|>")


@pytest.mark.parametrize("token", ["<|tts|>", "<|audio|>", "<|ref_audio|>", "<|endoftext|>", "<|chatml|>"])
def test_structural_tokens_refused(processor, token):
    with pytest.raises(ValueError, match=re.escape(
        f"'{token}' in the text is a structural prompt token, which the processor places itself; remove it. "
        "processor.valid_tags() (or `higgs-v3 tags`) lists the control tags."
    )):
        processor(f"Say {token} this")


def test_text_refusals(processor):
    with pytest.raises(ValueError, match=re.escape("The text is empty; there is nothing to speak.")):
        processor("   ")
    with pytest.raises(ValueError, match=re.escape("Text 1 must be a string, got int.")):
        processor(["ok", 3])
    with pytest.raises(ValueError, match=re.escape("text must be a string or a non-empty list of strings, got [].")):
        processor([])
    with pytest.raises(ValueError, match=re.escape("tf is not a valid TensorType, please select one of ['pt', 'np'")):
        processor("hi", return_tensors="tf")  # transformers' own refusal (BatchEncoding)
    with pytest.raises(TypeError, match=re.escape(
        "HiggsAudioV3Processor got unexpected keyword arguments ['referense']; the options are return_tensors, "
        "sampling_rate, padding_side and normalize."
    )):
        processor("hi", referense="me.wav")  # a misspelled argument is refused, not ignored
    with pytest.raises(ValueError, match=re.escape("The transcript of the reference must be a string, got int.")):
        processor("hi", reference_codes=torch.zeros(1, C, dtype=torch.long), reference_text=5)
    # `check_text` names whatever the caller says the text is (the CLI: a file line, long-form: a chunk).
    with pytest.raises(ValueError, match=re.escape("Line 3 of script.txt is empty; there is nothing to speak.")):
        processor.check_text("\n", "line 3 of script.txt")
    with pytest.raises(ValueError, match=re.escape("Line 3 of script.txt must be a string, got NoneType.")):
        processor.check_text(None, "line 3 of script.txt")


# ---------------------------------------------------------------------------------------------- batches, refs
def test_batch_with_mixed_references_is_left_padded(processor, tokenizer):
    raw_a, raw_c = random_codes(4, seed=3), random_codes(2, seed=4)
    voice = HiggsAudioV3Voice(codes=raw_a, text="Hello there.")
    texts = ["First sentence.", "<|emotion:awe|>Second!", "Third one, a little longer than the others."]
    out = processor(texts, reference=[voice, None, None], reference_codes=[None, None, raw_c])
    singles = [
        processor(texts[0], reference=voice)["input_ids"][0].tolist(),
        processor(texts[1])["input_ids"][0].tolist(),
        processor(texts[2], reference_codes=raw_c)["input_ids"][0].tolist(),
    ]
    length = max(len(s) for s in singles)
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert out["input_ids"].shape == (3, length)
    for row, single in enumerate(singles):
        padding = length - len(single)
        assert out["input_ids"][row].tolist() == [pad] * padding + single
        assert out["attention_mask"][row].tolist() == [0] * padding + [1] * len(single)
    # Reference rows of all placeholders, batch-major, in placeholder order.
    assert torch.equal(out["audio_input_ids"], torch.cat([delayed_by_loop(raw_a), delayed_by_loop(raw_c)]))
    assert int((out["input_ids"] == -100).sum()) == out["audio_input_ids"].shape[0] == (4 + 7) + (2 + 7)


def test_single_reference_applies_to_every_text(processor):
    raw = random_codes(2, seed=5)
    out = processor(["a b", "c d"], reference=HiggsAudioV3Voice(codes=raw), reference_text="Shared words.")
    alone = processor("a b", reference_codes=raw, reference_text="Shared words.")
    assert torch.equal(out["audio_input_ids"], torch.cat([delayed_by_loop(raw)] * 2))
    assert out["input_ids"][0][out["attention_mask"][0].bool()].tolist() == alone["input_ids"][0].tolist()


def test_saved_voice_file_path_as_reference(processor, tmp_path):
    voice = HiggsAudioV3Voice(codes=random_codes(6, seed=9), text="Hi.")
    first = processor(["One.", "Two."], reference=[voice, None])
    for path in (voice.save(tmp_path / "v.safetensors"), str(voice.save(tmp_path / "v.json"))):
        for reference in ([path, None], [HiggsAudioV3Voice.load(path), None], [processor.load_voice(path), None]):
            second = processor(["One.", "Two."], reference=reference)
            assert torch.equal(first["input_ids"], second["input_ids"])
            assert torch.equal(first["audio_input_ids"], second["audio_input_ids"])


def test_return_tensors_np_and_none(processor):
    raw = torch.zeros(1, C, dtype=torch.long)
    as_pt = processor(["x", "yy"], reference_codes=[raw, None])
    as_np = processor(["x", "yy"], reference_codes=[raw, None], return_tensors="np")
    as_list = processor(["x", "yy"], reference_codes=[raw, None], return_tensors=None)
    for key in ("input_ids", "attention_mask", "audio_input_ids"):
        assert isinstance(as_pt[key], torch.Tensor) and as_pt[key].dtype == torch.long
        assert isinstance(as_np[key], np.ndarray) and as_np[key].tolist() == as_pt[key].tolist()
        assert isinstance(as_list[key], list) and as_list[key] == as_pt[key].tolist()
    assert processor.model_input_names == ["input_ids", "attention_mask", "audio_input_ids", "reference_audio",
                                          "reference_audio_lengths"]


def test_transcript_without_audio_is_dropped_with_warning(processor, monkeypatch):
    warnings = []
    monkeypatch.setattr(processing_higgs_v3.logger, "warning_once", warnings.append)
    out = processor(["Hello there.", "Bye."], reference_text=["ignored transcript", None])
    assert torch.equal(out["input_ids"], processor(["Hello there.", "Bye."])["input_ids"])
    assert warnings == [
        "A reference_text without a reference voice is dropped: the transcript only helps together with the clip it "
        "describes."
    ]
    # Dropped before it is checked: a transcript that would be refused with a voice is not refused without one.
    warnings.clear()
    processor("Hello.", reference_text="<|zz|>")
    assert len(warnings) == 1


def test_reference_argument_refusals(processor, tmp_path):
    raw = torch.zeros(2, C, dtype=torch.long)
    voice = HiggsAudioV3Voice(codes=raw, text="transcript")
    with pytest.raises(ValueError, match=re.escape(
        "The reference is given twice (reference and reference_codes); pass one of them."
    )):
        processor("x", reference=voice, reference_codes=raw)
    with pytest.raises(ValueError, match=re.escape(
        "reference has 1 entries for 2 texts; pass one entry per text (None for no reference) or a single value for "
        "all texts."
    )):
        processor(["x", "y"], reference=[voice])
    with pytest.raises(ValueError, match=re.escape(
        "reference_text has 3 entries for 2 texts; pass one entry per text (None for no reference) or a single value "
        "for all texts."
    )):
        processor(["x", "y"], reference_text=("a", "b", "c"))
    with pytest.raises(ValueError, match=re.escape(
        "The reference already carries its transcript; do not pass reference_text as well."
    )):
        processor("x", reference=voice, reference_text="again")
    with pytest.raises(ValueError, match=re.escape(
        "The reference for text 1 already carries its transcript; do not pass reference_text as well."
    )):
        processor(["x", "y"], reference=[None, voice], reference_text=[None, "again"])
    # Any other path is an audio clip (read by the processor for the model's codec); samples need their rate.
    with pytest.raises(FileNotFoundError, match=re.escape("Reference audio file 'me.wav' does not exist.")):
        processor("x", reference="me.wav")
    for value in (raw, np.zeros(24000, dtype=np.float32), {"array": np.zeros(24000, dtype=np.float32)}):
        with pytest.raises(ValueError, match=re.escape(
            "The reference is an array of samples without its sampling rate; pass it too: sampling_rate=rate, "
            "{'array': samples, 'sampling_rate': rate}, or in a chat message {'type': 'audio', 'audio': samples, "
            "'sampling_rate': rate}."
        )):
            processor("x", reference=value)
    with pytest.raises(ValueError, match=re.escape("The reference for text 1 is an array of samples without its")):
        processor(["x", "y"], reference=[None, raw], sampling_rate=[24000, None])
    with pytest.raises(ValueError, match=re.escape(
        "The reference is an audio dict without samples or a file (its keys: ['bytes', 'path', 'sampling_rate']); pass "
        "{'array': samples, 'sampling_rate': rate} (as datasets' Audio feature gives it) or {'path': file}."
    )):
        processor("x", reference={"path": None, "bytes": b"", "sampling_rate": 16000})
    with pytest.raises(ValueError, match=re.escape("The reference has dtype int64; accepted are float16/float32/")):
        processor("x", reference=raw, sampling_rate=24000)
    with pytest.raises(ValueError, match=re.escape(
        "The reference for text 1 must be a voice (model.encode_reference(clip, text=...), HiggsAudioV3Voice.load, or a "
        "saved voice file's path) or an audio clip (a file path, an http(s) URL, samples with sampling_rate, or "
        "{'array': samples, 'sampling_rate': rate}), got int."
    )):
        processor(["x", "y"], reference=[None, 3])
    missing = tmp_path / "missing.json"
    with pytest.raises(FileNotFoundError, match=re.escape(f"Voice file {str(missing)!r} does not exist.")):
        processor("x", reference=missing)
    # The codes rule (delay_higgs_v3.check_codes), one wording for every route.
    rule = "must be integer codes [..., frames, 8] with at least 1 frame, each in 0..1023; got"
    with pytest.raises(ValueError, match=re.escape(f"The codes of the reference {rule} shape (8, 3).")):
        processor("x", reference_codes=torch.zeros(8, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape(f"The codes of the reference {rule} values from 0 to 1024.")):
        processor("x", reference_codes=torch.tensor([[0] * 7 + [1024]]))
    with pytest.raises(ValueError, match=re.escape(
            f"The codes of the reference for text 1 {rule} values from -1 to 0.")):
        processor(["x", "y"], reference_codes=[None, torch.tensor([[0] * 7 + [-1]])])
    with pytest.raises(ValueError, match=re.escape(f"The codes of the reference {rule} Tensor of dtype torch.float32")):
        processor("x", reference_codes=torch.zeros(2, C))
    with pytest.raises(ValueError, match=re.escape(f"The codes of the reference {rule} shape (2, 4).")):
        processor("x", reference=HiggsAudioV3Voice(codes=torch.zeros(2, 4, dtype=torch.long)))
    with pytest.raises(ValueError, match=re.escape(
        "The codes of the reference must be raw codec codes [frames, 8] of one clip, got shape (1, 2, 8)."
    )):
        processor("x", reference_codes=torch.zeros(1, 2, C, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape(
        "The reference was encoded at 16000 Hz / 25 frames per second; this model's codec runs at 24000 Hz / 25."
    )):
        processor("x", reference=HiggsAudioV3Voice(codes=raw, sampling_rate=16000))


# ------------------------------------------------------------------------------- voices from a second import
def test_voice_from_a_second_import_gives_the_same_prompt(processor, second_audio_io):
    raw = random_codes(4, seed=6)
    other = second_audio_io.HiggsAudioV3Voice(codes=raw, text="A copy.")
    assert type(other) is not HiggsAudioV3Voice and not isinstance(other, HiggsAudioV3Voice)  # two classes, one format
    ours = HiggsAudioV3Voice(codes=raw, text="A copy.")
    for texts, reference, mine in (("Speak.", other, ours), (["Speak.", "Two."], [None, other], [None, ours])):
        out, expected = processor(texts, reference=reference), processor(texts, reference=mine)
        assert torch.equal(out["input_ids"], expected["input_ids"])
        assert torch.equal(out["audio_input_ids"], expected["audio_input_ids"])
        assert torch.equal(out["attention_mask"], expected["attention_mask"])
    # The copy's voices are checked like ours.
    with pytest.raises(ValueError, match=re.escape(
        "The reference was encoded at 16000 Hz / 25 frames per second; this model's codec runs at 24000 Hz / 25."
    )):
        processor("x", reference=second_audio_io.HiggsAudioV3Voice(codes=raw, sampling_rate=16000))
    with pytest.raises(ValueError, match=re.escape(
        "The reference already carries its transcript; do not pass reference_text as well."
    )):
        processor("x", reference=other, reference_text="again")


# ---------------------------------------------------------------------------------------- decode, save audio
def test_tokenizer_decode_defaults(processor, tokenizer):
    """As transformers' `test_tokenizer_decode_defaults`: `decode` / `batch_decode` decode text ids with the tokenizer,
    as `ProcessorMixin` does (here the prompts' ids); generated audio rows are refused, saying how audio is decoded."""
    ids = processor(["Hello there.", "Hi."])["input_ids"]
    assert processor.batch_decode(ids) == tokenizer.batch_decode(ids)
    assert processor.batch_decode(ids, skip_special_tokens=True) == ["Hello there.", "Hi."]
    assert processor.decode(ids[1]) == tokenizer.decode(ids[1]) == "<|endoftext|>" * 2 + "<|tts|><|text|>Hi.<|audio|>"
    message = ("decode / batch_decode take text token ids; got a {} array, generated audio rows ([batch,] rows, "
               "num_codebooks). generate(..., return_dict_in_generate=True) returns the waveforms in `.audio`, and "
               "model.decode_audio(out.sequences, out.lengths) decodes rows.")
    rows = torch.zeros(1, 9, C, dtype=torch.long)
    with pytest.raises(ValueError, match=re.escape(message.format((1, 9, C)))):
        processor.batch_decode(rows)
    with pytest.raises(ValueError, match=re.escape(message.format((9, C)))):
        processor.decode(rows[0], skip_special_tokens=True)


def test_save_audio_delegate_writes_at_the_processor_rate(processor, tmp_path):
    import soundfile

    wave = torch.linspace(-0.5, 0.5, 4800)
    path = processor.save_audio(wave, tmp_path / "out.wav")
    assert path == tmp_path / "out.wav"
    data, rate = soundfile.read(path, dtype="float32")
    assert rate == 24000 and data.shape == (4800,)
    assert np.allclose(data, wave.numpy(), atol=1 / 32768)
    processor.save_audio(wave, tmp_path / "out16.flac", sampling_rate=16000)
    assert soundfile.info(str(tmp_path / "out16.flac")).samplerate == 16000


# ---------------------------------------------------------------------------------------------- save / load
def _saved_processor(tokenizer, repo):
    # Non-default settings show that the settings travel with the files.
    processor = HiggsAudioV3Processor(tokenizer, audio_spec={"audio_placeholder_id": -7},
                                      encoded_length_kwargs=OTHER_CODEC)
    processor.save_pretrained(repo)
    return repo


OTHER_CODEC = {**processing_higgs_v3.REAL_ENCODED_LENGTH_KWARGS, "conv_stride": [6, 2, 2, 2, 2, 2, 2]}


def test_processor_save_load(tokenizer, tmp_path):
    repo = _saved_processor(tokenizer, tmp_path / "repo")
    config = json.loads((repo / "processor_config.json").read_text())
    assert config == {  # the settings that describe the model, nothing else
        "auto_map": {"AutoProcessor": "processing_higgs_v3.HiggsAudioV3Processor"},
        "processor_class": "HiggsAudioV3Processor",
        "audio_spec": {"num_codebooks": 8, "audio_boc_token_id": 1024, "audio_eoc_token_id": 1025,
                       "audio_placeholder_id": -7, "sampling_rate": 24000, "frame_rate": 25},
        "encoded_length_kwargs": OTHER_CODEC,
    }
    for name in os.listdir(repo):  # nothing points back to this machine (no audio_tokenizer path pointer)
        if name.endswith(".json") and name != "tokenizer.json":
            text = (repo / name).read_text()
            assert str(tmp_path) not in text and "audio_tokenizer" not in text
    # The processor's module and its relative imports are copied as remote code.
    assert {"processing_higgs_v3.py", "audio_io_higgs_v3.py", "codec_higgs_v3.py", "delay_higgs_v3.py"} <= set(
        os.listdir(repo))
    loaded = HiggsAudioV3Processor.from_pretrained(repo)
    assert loaded.audio_spec.audio_placeholder_id == -7 and loaded.tokenizer.padding_side == "left"
    assert loaded.encoded_length_kwargs == OTHER_CODEC
    original = HiggsAudioV3Processor(tokenizer, audio_spec={"audio_placeholder_id": -7})
    raw = random_codes(3, seed=7)
    out = loaded(["Hello <|sfx:laughter|>haha.", "Two."], reference_codes=[raw, None], reference_text=["Hi.", None])
    expected = original(["Hello <|sfx:laughter|>haha.", "Two."], reference_codes=[raw, None],
                        reference_text=["Hi.", None])
    assert int((out["input_ids"] == -7).sum()) == 3 + 7
    for key in ("input_ids", "attention_mask", "audio_input_ids"):
        assert torch.equal(out[key], expected[key])


@pytest.mark.integration
def test_processor_save_load_in_subprocess(tokenizer, tmp_path):
    """The remote-code route: `AutoProcessor.from_pretrained(repo, trust_remote_code=True)` in a fresh process."""
    repo = _saved_processor(tokenizer, tmp_path / "repo")
    texts = ["Hello <|sfx:laughter|>haha.", "Two."]
    raw = torch.arange(3 * C).reshape(3, C) % 1024
    script = textwrap.dedent(
        f"""
        import json, torch
        from transformers import AutoProcessor
        processor = AutoProcessor.from_pretrained({str(repo)!r}, trust_remote_code=True)
        raw = torch.arange(3 * 8).reshape(3, 8) % 1024
        out = processor({texts!r}, reference_codes=[raw, None], reference_text=["Hi.", None])
        print(json.dumps({{
            "module": type(processor).__module__,
            "audio_placeholder_id": processor.audio_spec.audio_placeholder_id,
            "frames": processor._get_encoded_length(48000, **processor.encoded_length_kwargs),
            "input_ids": out["input_ids"].tolist(),
            "attention_mask": out["attention_mask"].tolist(),
            "audio_input_ids": out["audio_input_ids"].tolist(),
        }}))
        """
    )
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["module"].startswith("transformers_modules.") and loaded["module"].endswith(".processing_higgs_v3")
    assert loaded["audio_placeholder_id"] == -7
    assert loaded["frames"] == 42  # the saved codec's count (the real codec's is 50): see test_reference_clips
    here = HiggsAudioV3Processor(tokenizer, audio_spec={"audio_placeholder_id": -7})(texts, reference_codes=[raw, None],
                                                                       reference_text=["Hi.", None])
    assert loaded["input_ids"] == here["input_ids"].tolist()
    assert loaded["attention_mask"] == here["attention_mask"].tolist()
    assert loaded["audio_input_ids"] == here["audio_input_ids"].tolist()


# ---------------------------------------------------------------------------------------------- chat template
def _turn(*items) -> dict:
    return {"role": "user", "content": list(items)}


def _text(text: str) -> dict:
    return {"type": "text", "text": text}


def _placeholders_after_ref_audio(tokenizer, prompt: str, rows: int) -> list[int]:
    """The ids of a rendered prompt: the whole string tokenized at once, `rows` placeholders after `<|ref_audio|>`."""
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ref_audio = tokenizer.convert_tokens_to_ids("<|ref_audio|>")
    if ref_audio in ids:
        at = ids.index(ref_audio) + 1
        ids = ids[:at] + [-100] * rows + ids[at:]
    return ids


def test_chat_template_renders_and_tokenizes_the_tts_prompt(processor, tokenizer, tmp_path):
    voice = HiggsAudioV3Voice(codes=random_codes(3, seed=1))
    said = HiggsAudioV3Voice(codes=random_codes(2, seed=2), text="Said.")
    voice_file = said.save(tmp_path / "said.safetensors")
    cases = [  # (conversation, the same request to processor(...), rendered prompt, reference rows)
        ([_turn(_text("Hello <|sfx:laughter|>haha."))], dict(text="Hello <|sfx:laughter|>haha."),
         "<|tts|><|text|>Hello <|sfx:laughter|>haha.<|audio|>", 0),
        ([{"role": "user", "content": "Plain string."}], dict(text="Plain string."),
         "<|tts|><|text|>Plain string.<|audio|>", 0),
        ([_turn({"type": "audio", "audio": voice}), _turn(_text("Hi."))], dict(text="Hi.", reference=voice),
         "<|tts|><|ref_audio|><|text|>Hi.<|audio|>", 3 + C - 1),
        ([_turn({"type": "audio", "audio": voice}, _text("The clip.")), _turn(_text("Hi."))],
         dict(text="Hi.", reference=voice, reference_text="The clip."),
         "<|tts|><|ref_text|>The clip.<|ref_audio|><|text|>Hi.<|audio|>", 3 + C - 1),
        ([{"role": "assistant", "content": [{"type": "audio", "path": str(voice_file)}]}, _turn(_text("Bye."))],
         dict(text="Bye.", reference=str(voice_file)), "<|tts|><|ref_text|>Said.<|ref_audio|><|text|>Bye.<|audio|>",
         2 + C - 1),
    ]
    for conversation, request, rendered, rows in cases:
        inputs = processor.apply_chat_template(conversation, tokenize=True, return_dict=True)
        expected = processor(**request)
        assert set(inputs) == set(expected), rendered
        for key in expected:
            assert torch.equal(inputs[key], expected[key]), (rendered, key)
        assert torch.equal(processor.apply_chat_template(conversation, tokenize=True), expected["input_ids"])
        shown = processor.apply_chat_template(conversation)  # a voice's own transcript is shown too
        assert shown == rendered, shown
        # The template and the processor build the same layout.
        assert inputs["input_ids"][0].tolist() == _placeholders_after_ref_audio(tokenizer, shown, rows)
    # A batch of conversations: one row each, left padded, references per row.
    batch = [cases[3][0], cases[0][0]]
    inputs = processor.apply_chat_template(batch, tokenize=True, return_dict=True)
    expected = processor(["Hi.", "Hello <|sfx:laughter|>haha."], reference=[voice, None],
                         reference_text=["The clip.", None])
    for key in expected:
        assert torch.equal(inputs[key], expected[key]), key
    assert processor.apply_chat_template(batch) == [cases[3][2], cases[0][2]]


def test_chat_template_refusals(processor, tmp_path):
    voice = HiggsAudioV3Voice(codes=random_codes(3, seed=1))
    layout = 'A TTS conversation is [{"role": "user", "content": [{"type": "audio", "audio": voice}'
    cases = [
        ([{"role": "system", "content": "Be nice."}, _turn(_text("Hi."))], "Message 0 of the conversation is a system "
         "message; TTS prompts have none."),
        ([_turn(_text("Hi."), {"type": "audio", "audio": voice})], "Message 0 of the conversation (the last) holds "
         "audio; the last message is the text to speak."),
        ([_turn(_text("Before.")), _turn(_text("Hi."))], "Message 0 of the conversation holds no audio; only a "
         "reference turn may come before the text to speak."),
        ([_turn(_text("Hi.")), _turn({"type": "audio", "audio": voice})], "Message 1 of the conversation (the last) "
         "holds audio; the last message is the text to speak."),
        ([_turn({"type": "audio", "audio": voice}, {"type": "audio", "audio": voice}), _turn(_text("Hi."))],
         "Message 0 of the conversation holds 2 audio items; one reference per prompt."),
        ([_turn({"type": "audio"}), _turn(_text("Hi."))], "The audio item of message 0 of the conversation must have "
         "exactly one of 'audio', 'path' or 'url', got []."),
        ([_turn({"type": "image", "url": "x.png"}), _turn(_text("Hi."))], "Message 0 of the conversation has content "
         "of type ['image']; only 'text' and 'audio' are accepted."),
        ([_turn(_text("a")), _turn(_text("b")), _turn(_text("c"))], "The conversation has 3 messages; at most two."),
        ([_turn({"type": "audio", "audio": np.zeros(100, dtype=np.float32)}), _turn(_text("Hi."))],
         "The reference is an array of samples without its sampling rate; pass it too"),
        ([_turn(_text("Hi <|emotion:happy|>."))], "Unknown control tag '<|emotion:happy|>' in the text"),
        ([_turn(_text("<|audio|>"))], "'<|audio|>' in the text is a structural prompt token"),
    ]
    for conversation, message in cases:
        for tokenize in (True, False):
            with pytest.raises(ValueError) as error:
                processor.apply_chat_template(conversation, tokenize=tokenize)
            assert str(error.value).startswith(message), (message, str(error.value))
        if "TTS conversation" in message or "at most two" in message:
            assert layout in str(error.value)
    with pytest.raises(ValueError, match=re.escape("does not take ['return_assistant_tokens_mask']: they need "
                                                   "transformers' own tokenization of chat turns")):
        processor.apply_chat_template([_turn(_text("Hi."))], tokenize=True, return_assistant_tokens_mask=True)
    with pytest.raises(ValueError, match=re.escape("does not take the processor options ['padding']")):
        processor.apply_chat_template([_turn(_text("Hi."))], tokenize=True, processor_kwargs={"padding": True})


def test_chat_template_jinja_kwargs(processor):
    """As transformers' `test_chat_template_jinja_kwargs`: keywords other than the processor's options are template
    variables, as in `ProcessorMixin` (`tools` too, which the TTS template ignores); the processor's options given
    directly reach `__call__`."""
    template = "{{ greeting }}" + processing_higgs_v3.TTS_CHAT_TEMPLATE
    conversation = [_turn(_text("Hi."))]
    assert processor.apply_chat_template(conversation, chat_template=template, greeting="") == (
        "<|tts|><|text|>Hi.<|audio|>")
    with pytest.raises(ValueError, match=re.escape("'<|tts|>' in the text is a structural prompt token")):  # checked
        processor.apply_chat_template(conversation, chat_template=template, greeting="Hello ", tokenize=True)
    assert processor.apply_chat_template(conversation, tools=[], add_generation_prompt=True) == (
        "<|tts|><|text|>Hi.<|audio|>")
    direct = processor.apply_chat_template(conversation, tokenize=True, return_dict=True, return_tensors="np",
                                           normalize="en")
    assert isinstance(direct["input_ids"], np.ndarray)


def test_apply_chat_template_takes_message_objects(processor):
    """Message objects as transformers 5.24 takes them (dataclasses, pydantic-style `model_dump`, a conversation
    object with `.messages`; None-valued keys dropped) render and tokenize as the same conversation of dicts."""
    import dataclasses

    voice = HiggsAudioV3Voice(codes=random_codes(3, seed=4), text="The clip.")

    @dataclasses.dataclass
    class Message:
        role: str
        content: list
        name: str | None = None

    class Dumped:  # a pydantic model's interface
        def __init__(self, **fields):
            self.fields = fields

        def model_dump(self):
            return dict(self.fields)

    class Conversation:
        def __init__(self, messages):
            self.messages = messages

    dicts = [_turn({"type": "audio", "audio": voice}), _turn(_text("Hi."))]
    objects = [Message("user", [{"type": "audio", "audio": voice}]), Dumped(role="user", content=[_text("Hi.")],
                                                                            tool_calls=None)]
    expected = processor.apply_chat_template(dicts, tokenize=True, return_dict=True)
    for conversation in (objects, Conversation(objects)):
        assert processor.apply_chat_template(conversation) == processor.apply_chat_template(dicts)
        got = processor.apply_chat_template(conversation, tokenize=True, return_dict=True)
        assert all(torch.equal(got[key], expected[key]) for key in expected)
    batch = processor.apply_chat_template([Conversation(objects), dicts])
    assert batch == [processor.apply_chat_template(dicts)] * 2


def test_chat_template_save_loading(tokenizer, tmp_path):
    """As transformers' `test_chat_template_save_loading`: a user's template is saved and loaded as it is; only the
    original repo's ChatML is replaced (`is_original_chat_template`)."""
    from higgs_v3.testing.tiny import CHAT_TEMPLATE as CHATML

    processor = HiggsAudioV3Processor(tokenizer)
    processor.chat_template = "test template"
    processor.save_pretrained(tmp_path / "repo")
    assert HiggsAudioV3Processor.from_pretrained(tmp_path / "repo").chat_template == "test template"
    assert HiggsAudioV3Processor(tokenizer, chat_template="{{ messages }}").chat_template == "{{ messages }}"
    assert processing_higgs_v3.is_original_chat_template(CHATML)
    assert not any(map(processing_higgs_v3.is_original_chat_template, (
        "test template", None, processing_higgs_v3.TTS_CHAT_TEMPLATE, "<|im_start|>" + processing_higgs_v3.TTS_CHAT_TEMPLATE)))


def test_loading_beside_a_config_gives_no_config_type_warning(tokenizer, tmp_path):
    """A repo's processor loaded by this class (no remote code): AutoTokenizer reads its config.json as the base config
    and transformers would warn that a `higgs_audio_v3` checkpoint makes a model of type ``; that warning alone is
    dropped, and only while the processor loads."""
    import logging

    HiggsAudioV3Processor(tokenizer).save_pretrained(tmp_path)
    HiggsAudioV3Config().save_pretrained(tmp_path)
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    config_log = logging.getLogger("transformers.configuration_utils")
    config_log.addHandler(handler)
    try:
        HiggsAudioV3Processor.from_pretrained(tmp_path)
        assert not [message for message in seen if "to instantiate a model of type" in message], seen
        assert processing_higgs_v3._not_the_base_config_warning not in config_log.filters  # gone after the load
        config_log.warning("You are using a model of type `x` to instantiate a model of type ``.")
        assert seen[-1:] == ["You are using a model of type `x` to instantiate a model of type ``."]
    finally:
        config_log.removeHandler(handler)


def test_chat_template_saved_loaded_and_chatml_replaced(tokenizer, tmp_path, caplog):
    processor = HiggsAudioV3Processor(tokenizer)
    assert processor.chat_template == processing_higgs_v3.TTS_CHAT_TEMPLATE
    processor.save_pretrained(tmp_path / "repo")
    assert (tmp_path / "repo" / "chat_template.jinja").read_text() == processing_higgs_v3.TTS_CHAT_TEMPLATE
    from higgs_v3.testing.tiny import CHAT_TEMPLATE as CHATML

    with caplog.at_level("WARNING"):
        replaced = HiggsAudioV3Processor(tokenizer, chat_template=CHATML)
    assert replaced.chat_template == processing_higgs_v3.TTS_CHAT_TEMPLATE
    assert "is the original repo's ChatML, which renders chat turns" in caplog.text


def test_rendered_prompts_are_taken_as_the_template_renders_them(processor):
    """`__call__` takes a prompt as the chat template renders it (what `apply_chat_template` gives it): its text and
    transcript are split out, the reference comes from the arguments; a prompt that does not match them is refused."""
    voice = HiggsAudioV3Voice(codes=random_codes(3, seed=4))
    rendered = "<|tts|><|ref_text|>The clip.<|ref_audio|><|text|>Hi <|sfx:laughter|>there.<|audio|>"
    expected = processor("Hi <|sfx:laughter|>there.", reference=voice, reference_text="The clip.")
    for key, value in processor(rendered, reference=voice).items():
        assert torch.equal(value, expected[key]), key
    plain = processor("<|tts|><|text|>Hi.<|audio|>")["input_ids"]
    assert torch.equal(plain, processor("Hi.")["input_ids"])
    mismatch = ("Text {i} is a rendered TTS prompt whose reference turn does not match the arguments: give a reference "
                "exactly when it holds <|ref_audio|>, and its transcript in <|ref_text|> or in reference_text")
    for i, (texts, options) in enumerate([
        ([rendered], {}),  # <|ref_audio|> without a reference
        (["x", "<|tts|><|text|>Hi.<|audio|>"], {"reference": voice}),  # a reference the prompt has no turn for
        ([rendered], {"reference": voice, "reference_text": "Again."}),  # two transcripts
    ]):
        with pytest.raises(ValueError, match=re.escape(mismatch.format(i=len(texts) - 1))):
            processor(texts if len(texts) > 1 else texts[0], **options)
    # A text that only looks like part of a prompt is text, and its structural tokens are refused as ever.
    with pytest.raises(ValueError, match=re.escape("'<|tts|>' in the text is a structural prompt token")):
        processor("<|tts|>Hi.")


def test_call_options_are_merged_by_transformers(processor):
    """`HiggsAudioV3ProcessorKwargs`: flat options, per-modality dicts and `common_kwargs` all reach the call, the
    defaults (left padding, "pt") where none is given; `apply_chat_template` hands `processor_kwargs` on."""
    codes = random_codes(9, seed=5)
    left = processor(["Hi.", "A longer one."], audio_target=[codes, codes])
    right = processor(["Hi.", "A longer one."], audio_target=[codes, codes], text_kwargs={"padding_side": "right"})
    assert left["attention_mask"][0, 0] == 0 and right["attention_mask"][0, 0] == 1
    as_np = processor("Hi.", common_kwargs={"return_tensors": "np"})
    assert isinstance(as_np["input_ids"], np.ndarray)
    assert isinstance(processor("Hi.")["input_ids"], torch.Tensor)  # the defaults are not changed by a call's options
    samples = np.zeros(24000, dtype=np.float32)
    clip = processor("Hi.", reference=samples, audio_kwargs={"sampling_rate": 24000})
    assert clip["reference_audio"].shape == (24000,)
    conversation = [_turn(_text("Hi."))]
    as_lists = processor.apply_chat_template(conversation, tokenize=True, return_dict=True,
                                             processor_kwargs={"return_tensors": None})
    assert isinstance(as_lists["input_ids"], list)
    assert isinstance(processor.apply_chat_template(conversation, tokenize=True, return_tensors="np"), np.ndarray)
    with pytest.raises(ValueError, match=re.escape(
            "apply_chat_template of a TTS processor does not take the processor options ['reference']")):
        processor.apply_chat_template(conversation, tokenize=True, processor_kwargs={"reference": "x.wav"})
