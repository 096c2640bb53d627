"""Issue 23's edges (unit layer): resuming fine-tuning from the newest complete checkpoint, `--push-to-hub` checked
before training, ... Each test failed on the code before its fix."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest


# ------------------------------------------------------------------------------------------ fine-tuning checkpoints
def _checkpoint(output, step: int, complete: bool):
    from higgs_v3.training.finetune import CheckpointMarker

    folder = output / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w" * 64)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}), encoding="utf-8")
    if complete:  # as Trainer calls it after writing the checkpoint
        CheckpointMarker().on_save(SimpleNamespace(output_dir=str(output)),
                                   SimpleNamespace(global_step=step, is_world_process_zero=True), None)
    return folder


def test_resume_takes_the_newest_complete_checkpoint(tmp_path):
    """A kill or a full disk while Trainer writes `checkpoint-6` leaves it without the marker `CheckpointMarker` writes
    last (or with a file cut short): `--resume` takes `checkpoint-4` and names the ones it passes over."""
    from higgs_v3.training.finetune import FinetuneRun, resume_checkpoint

    _checkpoint(tmp_path, 2, complete=True)
    four = _checkpoint(tmp_path, 4, complete=True)
    _checkpoint(tmp_path, 6, complete=False)
    cut = _checkpoint(tmp_path, 5, complete=True)
    (cut / "model.safetensors").write_bytes(b"w" * 10)  # the marker is there, a file is shorter than it says
    assert resume_checkpoint(tmp_path) == (four, [
        "checkpoint-6: it has no completion marker (it was not written to the end)",
        "checkpoint-5: model.safetensors has 10 bytes, 64 were written",
    ])
    lines = []
    run = FinetuneRun(data="d", model="m", output=str(tmp_path), resume=True, log=lines.append)
    assert run._resume_from() == four
    assert lines == ["Ignoring checkpoint-6: it has no completion marker (it was not written to the end).",
                     "Ignoring checkpoint-5: model.safetensors has 10 bytes, 64 were written.",
                     "Resuming from checkpoint-4, the newest complete checkpoint."]


def test_resume_without_a_complete_checkpoint_is_refused_before_any_model_work(tmp_path, monkeypatch, capsys):
    from higgs_v3.cli import main as cli_main
    from higgs_v3.cli import models

    _checkpoint(tmp_path / "out", 3, complete=False)
    (tmp_path / "data").mkdir()
    monkeypatch.setattr(models, "resolve_model", lambda *a, **k: pytest.fail("the model was resolved"))
    assert cli_main.main(["finetune", "--data", str(tmp_path / "data"), "--output", str(tmp_path / "out"),
                          "--resume"]) == 2
    assert capsys.readouterr().err == (
        f"higgs-v3: error: --resume: {str(tmp_path / 'out')!r} has no complete checkpoint-N folder to resume from "
        "(checkpoint-3: it has no completion marker (it was not written to the end)).\n")


def test_push_to_hub_is_checked_before_training(tmp_path, monkeypatch, capsys):
    """Offline, `finetune --push-to-hub` stops before any model is resolved (it used to train, then fail uploading)."""
    import huggingface_hub.constants

    from higgs_v3.cli import main as cli_main
    from higgs_v3.cli import models

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(models, "resolve_model", lambda *a, **k: pytest.fail("the model was resolved"))
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.wav").write_bytes(b"RIFF")
    (data / "a.txt").write_text("Hello.", encoding="utf-8")
    assert cli_main.main(["finetune", "--data", str(data), "--output", str(tmp_path / "out"),
                          "--push-to-hub", "me/tuned"]) == 2
    assert capsys.readouterr().err == (
        "higgs-v3: error: --push-to-hub me/tuned needs the Hub, but HF_HUB_OFFLINE is set; nothing was trained. "
        "Connect and run again, or run without --push-to-hub and upload the folder later.\n")


# ------------------------------------------------------------------------------------------------- audio writes
def test_an_audio_write_into_a_missing_folder_names_it(tmp_path):
    """libsndfile said only "System error."; the bytes are now written by Python, so the OS's reason is known."""
    import numpy as np

    from higgs_v3.audio_io_higgs_v3 import save_audio

    target = tmp_path / "gone" / "a.wav"
    with pytest.raises(OSError) as error:
        save_audio(np.zeros(2400, dtype=np.float32), target)
    assert str(error.value) == (f"Could not write {str(target)!r} (its folder {str(tmp_path / 'gone')!r} does not "
                                "exist); the previous file, if any, is unchanged.")


@pytest.mark.parametrize("name", ["a" * 240 + ".wav", "b" * 246 + ".wav", "c" * 250 + ".flac", "é" * 125 + ".wav"],
                         ids=["244", "250", "255", "254 bytes of UTF-8"])
def test_legal_long_output_names_are_written(tmp_path, name):
    """A name the file system takes (up to 255 bytes) is written: the temporary name beside it is cut to fit."""
    import numpy as np
    import soundfile

    from higgs_v3.audio_io_higgs_v3 import save_audio

    samples = np.linspace(-0.5, 0.5, 2400, dtype=np.float32)
    assert save_audio(samples, tmp_path / name) == tmp_path / name
    written, rate = soundfile.read(tmp_path / name, dtype="float32")
    assert rate == 24000 and np.abs(written - samples).max() <= 1 / 32768
    assert [p.name for p in tmp_path.iterdir()] == [name]


# ------------------------------------------------------------------------------------------------- batch reruns
def test_the_model_fingerprint_ignores_the_dtype_and_sees_new_weights():
    import torch
    from conftest import tiny_model

    from higgs_v3.cli.batch import model_fingerprint

    model = tiny_model()
    half = tiny_model().to(torch.bfloat16)
    half.config.dtype = torch.bfloat16  # as a bfloat16 load sets it
    assert model_fingerprint(model) == model_fingerprint(half)
    tuned = tiny_model()
    with torch.no_grad():
        tuned.model.layers[0].mlp.up_proj.weight.mul_(1.5)  # a fine-tuning step, say
    assert model_fingerprint(tuned) != model_fingerprint(model)


def test_a_record_of_another_recipe_or_voice_file_is_not_complete(tmp_path):
    """What made an item is in its record (`batch_recipe`, the voice file's sha256): a rerun with another model, dtype,
    --max-seconds or sampling, or with the voice file replaced at the same path, speaks it again and says what
    changed; the same recipe finds it complete."""
    import numpy as np

    from higgs_v3.cli import batch as batch_cli

    (tmp_path / batch_cli.RECORDS_DIR).mkdir()
    recipe = {"model": "f00d", "dtype": "float32", "max_seconds": None, "max_chars": 300, "sampling": {"top_k": 50}}
    item = batch_cli.BatchItem(1, "Hi.", "a.wav", 9, "/v/ann.safetensors", None, None, source_sha256="ab12")
    take = SimpleNamespace(finished=True, seed=9, attempts=[{}], problem=None)
    batch_cli._write_item(tmp_path, item, np.zeros(2400, dtype=np.float32), [take], 24000, 0, recipe)
    record, changed = batch_cli._item_state(tmp_path, item, recipe)
    assert record["recipe"] == recipe and changed == []
    other = {**recipe, "model": "beef", "dtype": "bfloat16", "max_seconds": 3.0, "sampling": {"top_k": 20}}
    assert batch_cli._item_state(tmp_path, item, other) == (None, ["model", "dtype", "max-seconds", "sampling"])
    replaced = batch_cli.BatchItem(1, "Hi.", "a.wav", 9, "/v/ann.safetensors", None, None, source_sha256="cd34")
    assert batch_cli._item_state(tmp_path, replaced, recipe) == (None, ["voice file"])
    summary = batch_cli.BatchSummary(total=3, written={0: ["a.wav", "b.wav"]}, skipped=1, redone={"dtype": 2},
                                     failed=["line 3 (c.wav): Could not fetch reference audio URL ..."])
    assert summary.line() == (
        "Batch: 3 items, 2 written now (process 0: 2) (spoken again as what produced them changed: dtype 2), 1 already "
        "complete; 0.00 s of audio in 0.00 s; none cut at the length limit; 1 failed and skipped: line 3 (c.wav): "
        "Could not fetch reference audio URL ....")


# ------------------------------------------------------------------------------------------------- text inputs
@pytest.mark.parametrize("value, shown", [(None, "NoneType None"), (["a", "b"], "list ['a', 'b']"), (5, "int 5")])
def test_a_chat_text_item_must_hold_a_string(processor, value, shown):
    """It was spoken as its printed form ("None", "['a', 'b']")."""
    conversation = [{"role": "user", "content": [{"type": "text", "text": value}]}]
    with pytest.raises(ValueError) as error:
        processor.apply_chat_template(conversation, tokenize=True, return_dict=True)
    assert str(error.value).startswith(f"A text item of message 0 of the conversation holds {shown}; 'text' must be a "
                                       "string. ")


def test_a_lone_surrogate_is_refused_where_text_enters(processor, tmp_path):
    """From a JSON "\\ud800" escape or bytes decoded with surrogateescape (a non-UTF-8 command line): the tokenizer
    raised a TypeError ("internal error"); now the text's one check refuses it, also for a manifest line."""
    from higgs_v3.cli.batch import _checked_items, read_manifest

    with pytest.raises(ValueError) as error:
        processor(text="Hi \udcff there.")
    assert str(error.value) == ("The text holds a lone surrogate ('\\udcff' at character 3), which is not valid Unicode "
                                "text; remove it or fix how the text was decoded.")
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"text": "Hi \\ud800.", "output": "a"}\n', encoding="utf-8")
    with pytest.raises(ValueError) as error:
        _checked_items(processor, read_manifest(manifest), 300)
    assert str(error.value).startswith("The text of line 1 holds a lone surrogate ('\\ud800' at character 3)")


def test_a_reference_text_that_is_not_a_string_is_refused(model, processor):
    import torch

    from higgs_v3.audio_io_higgs_v3 import HiggsAudioV3Voice
    from higgs_v3.longform_higgs_v3 import synthesize_long

    voice = HiggsAudioV3Voice(codes=torch.zeros(30, 8, dtype=torch.long))
    with pytest.raises(ValueError) as error:
        synthesize_long(model, processor, "Hi.", reference=voice, reference_text=5)
    assert str(error.value) == "The transcript of the reference (reference_text) must be a string, got int 5."


# ------------------------------------------------------------------------------------------------- new users
def test_the_processor_class_loads_a_folder_without_the_remote_code_prompt(tiny_random_repo, monkeypatch):
    """`HiggsAudioV3Processor.from_pretrained(folder)` (from_original, the tensor-parallel snippet) made transformers
    ask `Do you wish to run the custom code? [y/N]` and wait 15 s; the class is that code, so nothing is asked."""
    import builtins

    from higgs_v3 import HiggsAudioV3Processor

    monkeypatch.setattr(builtins, "input", lambda *a: pytest.fail(f"transformers asked: {a}"))
    processor = HiggsAudioV3Processor.from_pretrained(tiny_random_repo)
    assert type(processor) is HiggsAudioV3Processor and processor.tokenizer is not None


@pytest.mark.parametrize("command", ["batch", "finetune"])
def test_one_process_from_accelerate_asked_for_more_is_refused(monkeypatch, capsys, tmp_path, command):
    """`accelerate launch --num_processes 2` without GPUs (and without --multi_gpu) starts one process, which did all
    the work alone, silently; the environment of its simple launcher (MASTER_ADDR, no WORLD_SIZE) is refused."""
    from higgs_v3.cli import main as cli_main
    from higgs_v3.cli import models

    monkeypatch.setattr(models, "resolve_model", lambda *a, **k: pytest.fail("the model was resolved"))
    for key, value in {"ACCELERATE_MIXED_PRECISION": "no", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    argv = {"batch": ["batch", "m.jsonl", "--out-dir", str(tmp_path)],
            "finetune": ["finetune", "--data", str(tmp_path), "--output", str(tmp_path / "o")]}[command]
    assert cli_main.main(argv) == 2
    assert capsys.readouterr().err == (
        "higgs-v3: error: accelerate launch started ONE process although --num_processes asked for more (its default "
        "launcher does so on a machine without several GPUs); add --multi_gpu to start them all (on a CPU they use "
        "torch's gloo backend), or run without --num_processes.\n")


def test_a_voice_the_prompt_would_refuse_is_found_before_generation(model, processor, tmp_path):
    """A saved voice that loads but that the prompt refuses (4 codebooks for an 8-codebook model) is refused when the
    run starts (with --keep-going: listed, its item left out), not when its line's group is reached."""
    import torch

    from higgs_v3.audio_io_higgs_v3 import HiggsAudioV3Voice
    from higgs_v3.cli.batch import BatchItem, _voices

    HiggsAudioV3Voice(codes=torch.zeros(30, 4, dtype=torch.long)).save(tmp_path / "four.safetensors")
    item = BatchItem(2, "Hi.", "a.wav", 1, str(tmp_path / "four.safetensors"))
    with pytest.raises(ValueError, match="the voice of line 2"):
        _voices(model, processor, [item], {}, None)
    failed = []
    assert _voices(model, processor, [item], {}, failed) == []
    assert len(failed) == 1 and failed[0].startswith("line 2 (a.wav): ") and "the voice of line 2" in failed[0]
