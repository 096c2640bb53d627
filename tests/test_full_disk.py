"""A real full disk (issue 23, integration layer): small tmpfs file systems mounted for the test (root, or a user
namespace: `unshare -rm python -m pytest -m integration tests/test_full_disk.py`), never a fake writer. Each write ends
in one line naming what was written, where, the space needed (when known) and free, and leaves nothing half written."""

from __future__ import annotations

import contextlib
import gc
import re
import subprocess
from pathlib import Path

import pytest


pytestmark = pytest.mark.integration


@pytest.fixture
def small_disk(tmp_path):
    """`mount(size, inodes=None)`: a new tmpfs of `size` (and at most `inodes` files and folders) in `tmp_path`,
    unmounted after the test. A machine where it cannot be mounted fails the test, loudly: never a skip."""
    mounted = []

    def mount(size: str, inodes: int | None = None) -> Path:
        folder = tmp_path / f"disk{len(mounted)}"
        folder.mkdir()
        options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True,
                              text=True)
        if done.returncode != 0:
            pytest.fail(f"Cannot mount a {size} tmpfs at {folder} ({done.stderr.strip()}); these tests need root, or "
                        "a user namespace: unshare -rm python -m pytest -m integration tests/test_full_disk.py",
                        pytrace=False)
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)  # lazy: a file a test left open


def _one_error_line(capsys, prefix: str) -> str:
    """The error line, the last on stderr; the lines before it are the steps the run had started (progress)."""
    captured = capsys.readouterr()
    *steps, line = captured.err.strip().splitlines()
    assert line.startswith(f"{prefix}: error: No space left on device while writing "), captured.err
    assert all(step.startswith(("Read the original", "Writing the config")) for step in steps), captured.err
    return line


def _needed(folder: Path, weights: int) -> str:
    """The space a conversion or export of `folder` needs as its message says it: the weights plus the other files."""
    other = sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and p.suffix != ".safetensors")
    return f"{(weights + other) / 1e6:.1f} MB"


def test_convert_to_a_disk_too_small_is_refused_before_writing(tiny_original, small_disk, capsys):
    """`higgs-v3 convert` and `python -m higgs_v3.convert_checkpoint` (the same entry): the weights' size is known
    before writing, so a disk with less free space is refused with nothing written; the old output is kept."""
    from safetensors import safe_open

    from higgs_v3.cli import main as cli_main

    disk = small_disk("4M")
    (disk / "out").mkdir()
    (disk / "out" / "keep.txt").write_text("previous conversion")
    argv = ["convert", "--input", str(tiny_original), "--output", str(disk / "out"), "--overwrite", "--no-verify"]
    assert cli_main.main(argv) == 2
    line = _one_error_line(capsys, "higgs-v3 convert")
    with safe_open(tiny_original / "model.safetensors", "pt") as weights:  # bf16 output: 2 bytes a value
        count = sum(__import__("math").prod(weights.get_slice(k).get_shape()) for k in weights.keys())
    assert re.fullmatch(
        rf"higgs-v3 convert: error: No space left on device while writing the conversion's output "
        rf"'{re.escape(str(disk / 'out'))}' \(it needs about [\d.]+ MB, 4\.2 MB free there\); nothing was written; the "
        r"previous output, if any, is unchanged\. Free some space or choose a folder on another disk\.", line), line
    assert float(re.search(r"about ([\d.]+) MB", line).group(1)) >= 2 * count / 1e6  # at least the weights
    assert [p.name for p in disk.iterdir()] == ["out"] and (disk / "out" / "keep.txt").read_text() == "previous conversion"
    assert cli_main.main(argv, convert_prog="convert_checkpoint.py") == 2
    assert _one_error_line(capsys, "convert_checkpoint.py") == line.replace("higgs-v3 convert:", "convert_checkpoint.py:")


def test_a_disk_that_fills_while_converting_leaves_the_old_output(tiny_original, small_disk, capsys):
    """Space enough by the estimate, but the file system runs out of files (tmpfs `nr_inodes`) half way: the writer's
    own ENOSPC becomes the same line, the staging folder is removed and the old output is as it was."""
    from higgs_v3.cli import main as cli_main

    disk = small_disk("64M", inodes=6)  # the mount's root, out/, keep.txt, a staging folder, its owner file, 1 more
    (disk / "out").mkdir()
    (disk / "out" / "keep.txt").write_text("previous conversion")
    assert cli_main.main(["convert", "--input", str(tiny_original), "--output", str(disk / "out"), "--overwrite",
                          "--no-verify", "--without-codec"]) == 2
    line = _one_error_line(capsys, "higgs-v3 convert")
    assert "); the part written was removed; the previous output, if any, is unchanged." in line, line
    assert [p.name for p in disk.iterdir()] == ["out"] and [p.name for p in (disk / "out").iterdir()] == ["keep.txt"]


def test_export_to_original_on_a_full_disk(tiny_random_repo, small_disk, capsys):
    from higgs_v3.cli import main as cli_main

    disk = small_disk("2M")
    assert cli_main.main(["convert", "--to-original", "--input", str(tiny_random_repo),
                          "--output", str(disk / "original")]) == 2
    line = _one_error_line(capsys, "higgs-v3 convert")
    assert f"while writing the export's output '{disk / 'original'}' (it needs about " in line
    assert "2.1 MB free there); nothing was written;" in line
    assert list(disk.iterdir()) == []


def test_a_checkpoint_cut_by_a_full_disk_is_removed_with_one_line(small_disk, tmp_path):
    """Trainer's checkpoint write failing on a full disk (torch's own zip-writer error, on a real full tmpfs): the
    partial `checkpoint-N` is removed and the error says so (the run resumes from the newest complete one)."""
    import torch

    from higgs_v3.training.finetune import FinetuneRun

    disk = small_disk("1M")
    partial = disk / "checkpoint-3"
    partial.mkdir()
    with pytest.raises(RuntimeError) as written:  # what Trainer's torch.save of the optimizer raises
        torch.save({"state": torch.zeros(1_000_000)}, partial / "optimizer.pt")
    wrote = sum(p.stat().st_size for p in partial.iterdir())
    run = FinetuneRun(data="d", model="m", output=str(disk))
    with pytest.raises(OSError) as error:
        run._disk_full(written.value, 3)
    assert re.fullmatch(
        rf"No space left on device while writing the checkpoint '{re.escape(str(partial))}' \({wrote / 1e6:.1f} MB "
        r"were written when the disk filled, [\d.]+ (bytes|KB|MB) free there\); the partial checkpoint was removed; "
        r"--resume continues from the newest complete one\. Free some space or choose a folder on another disk\.",
        str(error.value)), str(error.value)
    assert list(disk.iterdir()) == []
    del written, error  # their tracebacks hold torch's writer, whose open file would keep the mount busy
    gc.collect()
    run._disk_full(ValueError("an ordinary error"), 3)  # not a full disk: left to the caller to raise


def test_audio_on_a_full_disk_names_the_file_and_keeps_the_old_one(small_disk):
    import numpy as np

    from higgs_v3.audio_io_higgs_v3 import save_audio

    disk = small_disk("1M")
    save_audio(np.zeros(2400, dtype=np.float32), disk / "old.wav")
    before = (disk / "old.wav").read_bytes()
    with pytest.raises(OSError) as error:  # 60 s of 16-bit 24 kHz: 2.9 MB
        save_audio(np.zeros(24000 * 60, dtype=np.float32), disk / "old.wav")
    assert str(error.value) == (f"Could not write {str(disk / 'old.wav')!r} (No space left on device); the previous "
                                "file, if any, is unchanged.")
    assert [p.name for p in disk.iterdir()] == ["old.wav"] and (disk / "old.wav").read_bytes() == before


def test_a_voice_upload_on_a_full_disk_is_507_and_the_next_one_works(small_disk, tokenizer):
    import io

    import numpy as np
    import soundfile
    from fastapi.testclient import TestClient

    from conftest import tiny_tts_model
    from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor
    from higgs_v3.serving.app import ServeSettings, create_app

    disk = small_disk("64k")
    filler = disk / "filler"
    (disk / "voices").mkdir()
    with open(filler, "wb", buffering=0) as out, contextlib.suppress(OSError):  # the disk, full
        while True:
            out.write(b"\0" * 4096)
    model = tiny_tts_model(max_new_tokens=8)
    processor = HiggsAudioV3Processor.from_model_config(tokenizer, model.config)
    clip = io.BytesIO()
    soundfile.write(clip, (np.sin(np.arange(24000) / 9) * 0.3).astype(np.float32), 24000, format="WAV")
    upload = {"audio_sample": ("me.wav", clip.getvalue(), "audio/wav")}
    with TestClient(create_app(model, processor, ServeSettings("tiny", disk / "voices"))) as client:
        full = client.post("/v1/audio/voices", data={"name": "me"}, files=upload)
        assert full.status_code == 507, full.text
        error = full.json()["error"]
        assert error["code"] == "insufficient_storage" and re.fullmatch(
            r"No space left on device while writing voice 'me' \(it needs about [0-9.]+ KB, 0 bytes free there\); "
            r"nothing was saved\. Free some space or start the server with a --voices-dir on another disk\.",
            error["message"]), error["message"]
        assert sorted(p.name for p in (disk / "voices").iterdir()) == []  # nothing half written
        filler.unlink()
        assert client.post("/v1/audio/voices", data={"name": "me"}, files=upload).status_code == 201
