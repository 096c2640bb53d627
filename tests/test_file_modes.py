# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Files the package writes follow the umask (safetensors' writer leaves 0600, which a service account serving a
fine-tuned model cannot read), and a file this user cannot read is reported as such, not as a missing or damaged one.
Tests run as root, where permission bits are ignored, so unreadable files are simulated (unit) or read by a process
without the capabilities that bypass them (`setpriv`, integration)."""

from __future__ import annotations

import builtins
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from higgs_v3.audio_io_higgs_v3 import atomic_output, follow_umask
from higgs_v3.conversion import folders
from higgs_v3.conversion.original_format import permission_problem, read_header


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_safetensors_writes_0600_and_follow_umask_widens_it(tmp_path, umask_022):
    path = tmp_path / "w.safetensors"
    save_file({"w": torch.zeros(2)}, str(path))
    assert mode(path) == 0o600  # the writer's own mode: why follow_umask exists
    follow_umask(path)
    assert mode(path) == 0o644
    path.chmod(0o755)  # bits already set are kept
    follow_umask(path)
    assert mode(path) == 0o755


def test_staged_folder_output_follows_the_umask(tmp_path, umask_022):
    output = tmp_path / "model"
    with folders.staged_folder(output, "saving") as staging:
        save_file({"w": torch.zeros(2)}, str(staging / "model.safetensors"))
        (staging / "sub").mkdir(mode=0o700)
    assert (mode(output), mode(output / "model.safetensors"), mode(output / "sub")) == (0o755, 0o644, 0o755)


def test_atomic_output_follows_the_umask(tmp_path, umask_022):
    with atomic_output(tmp_path / "voice.safetensors") as temporary:
        save_file({"codes": torch.zeros(2)}, str(temporary))
    assert mode(tmp_path / "voice.safetensors") == 0o644


def test_make_tiny_files_follow_the_umask(tmp_path, umask_022, monkeypatch, capsys):
    from higgs_v3.cli import main as cli_main
    from higgs_v3.testing import tiny

    small = tiny.write_tiny_original_checkpoint  # the smallest dimensions: the file modes are what is checked
    monkeypatch.setattr(tiny, "write_tiny_original_checkpoint", lambda folder, **kwargs: small(
        folder, **kwargs, hidden_size=16, num_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
        intermediate_size=16))
    assert cli_main.main(["make-tiny", "--original", "--no-codec", str(tmp_path / "original")]) == 0
    folder = tmp_path / "original"
    assert {path.name: oct(mode(path)) for path in folder.iterdir() if mode(path) != 0o644} == {}
    assert (folder / "model.safetensors").is_file()


def _unreadable(monkeypatch, path: Path):
    """`open(path)` fails as it does for a 0600 file of another user (root ignores the bits)."""
    real_open = builtins.open

    def fake_open(file, *args, **kwargs):
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)


EXPECTED = ("Permission denied reading '{path}' (mode 0600, owner uid {uid}): this user cannot read it. Make it "
            "readable (chmod a+r, or write it under umask 022) or run as its owner.")


def test_an_unreadable_checkpoint_is_a_permission_error_not_a_damaged_file(tmp_path, monkeypatch):
    path = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(2)}, str(path))
    import safetensors

    def no_such_file(name, *args, **kwargs):  # what safetensors says of a file it may not read
        raise FileNotFoundError(f"No such file or directory: {name}")

    monkeypatch.setattr(safetensors, "safe_open", no_such_file)
    _unreadable(monkeypatch, path)
    with pytest.raises(PermissionError) as raised:
        read_header(path)
    assert str(raised.value) == EXPECTED.format(path=path, uid=os.getuid())
    assert permission_problem(tmp_path / "missing") is None


def test_load_model_names_an_unreadable_weights_file(tmp_path, monkeypatch):
    from higgs_v3.cli import models
    from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    path = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(2)}, str(path))
    monkeypatch.setattr(models, "check_generation_config", lambda folder: None)

    def no_such_file(*args, **kwargs):
        raise FileNotFoundError(f"No such file or directory: {path}")

    monkeypatch.setattr(HiggsAudioV3ForConditionalGeneration, "from_pretrained", no_such_file)
    _unreadable(monkeypatch, path)
    with pytest.raises(PermissionError) as raised:
        models.load_model(tmp_path, "cpu", "float32")
    assert str(raised.value) == EXPECTED.format(path=path, uid=os.getuid())


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_another_users_0600_weights_are_reported_as_unreadable(tiny_random_repo, tmp_path):
    """A real unreadable file: owned by another user, read by root without the capabilities that bypass the bits."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_random_repo, folder)
    weights = folder / "model.safetensors"
    weights.chmod(0o600)
    os.chown(weights, 65534, -1)
    command = ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search",
               "--", sys.executable, "-m", "higgs_v3.cli", "speak", "--model", str(folder), "Hi.", "-o",
               str(tmp_path / "out.wav")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "higgs-v3: error: " + EXPECTED.format(path=weights, uid=65534)


def test_an_output_folder_that_cannot_be_written_is_not_called_a_full_disk(tmp_path, monkeypatch):
    """/sys refuses a new folder (EPERM) and reports 0 bytes free: the writer says it is not writable."""
    import errno

    real_mkdir = Path.mkdir

    def refusing_mkdir(self, *args, **kwargs):
        if self.parent == tmp_path / "virtual":
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(self))
        return real_mkdir(self, *args, **kwargs)

    (tmp_path / "virtual").mkdir()
    monkeypatch.setattr(Path, "mkdir", refusing_mkdir)
    monkeypatch.setattr(folders, "_free_bytes", lambda path: 0)
    output = tmp_path / "virtual" / "converted"
    with pytest.raises(OSError) as raised:
        with folders.staged_folder(output, "converting", needed=17_000_000):
            pytest.fail("the block ran")
    assert str(raised.value) == (f"Cannot write the output {str(output)!r}: its folder {str(output.parent)!r} is not "
                                 "writable (Operation not permitted); nothing was written. Choose an output folder you "
                                 "can write to.")
    assert raised.value.errno == errno.EPERM and list((tmp_path / "virtual").iterdir()) == []


@pytest.mark.integration
@pytest.mark.skipif(not os.path.isdir("/sys/kernel"), reason="needs a Linux /sys")
def test_converting_into_sys_says_it_is_not_writable(tiny_original, tmp_path):
    result = subprocess.run([sys.executable, "-m", "higgs_v3.cli", "convert", "--input", str(tiny_original), "--output",
                             "/sys/higgs-v3-test"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "higgs-v3 convert: error: Cannot write the output '/sys/higgs-v3-test': its folder '/sys' is not writable "
        "(Operation not permitted); nothing was written. Choose an output folder you can write to.")
