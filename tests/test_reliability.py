# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Bad inputs and faults, table by table, through the surfaces a user reaches: reference audio, voice files, text and
tags, `generate` options, the `higgs-v3` command line, original checkpoints, output writers that fail (a full disk, a
read-only folder), what a killed conversion leaves, the size bounds, and (integration layer) SIGKILL / SIGINT of a
real subprocess.

Every case asserts the specific error (type and message fragment: one line, naming the file or argument) and that
nothing the user had was lost: the files of the case's folder are byte for byte as they were (or, where a write was
asked for, the previous file is intact and no temporary file is left). `docs/RELIABILITY.md` holds the table of these
cases per surface; `test_the_documented_table_is_this_module` checks its numbers against the tables below, and
`python tests/test_reliability.py` prints the table.

The unit part runs on the tiny fixtures and stays cheap (no generation with a codec, no conversion beyond the tiny one
the fault cases need); tests run as root ignore permission bits, so read-only folders are simulated there by a fake
writer that fails as the kernel would (EACCES / EROFS).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import pickle
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from safetensors.torch import save_file

from higgs_v3 import convert_checkpoint

from higgs_v3.cli import main as cli_main

from higgs_v3.conversion import cache as conversion_cache
from higgs_v3.conversion import folders
from higgs_v3.audio_io_higgs_v3 import (
    HiggsAudioV3Voice,
    prepare_reference_waveform,
    save_audio,
)
from higgs_v3.longform_higgs_v3 import dialogue_jobs, max_new_tokens_for
from higgs_v3.conversion.original_format import ADDED_TOKENS
from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor
from higgs_v3.sampling_higgs_v3 import HiggsAudioV3SeededSampler
from higgs_v3.testing.tiny import token_ids_read_once_per_content, write_tiny_original_checkpoint


SR, C = 24000, 8
ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "RELIABILITY.md"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

# The text table takes its reserved tokens from the tokenizer's added tokens (not a hard-coded list): `ADDED_TOKENS`,
# from which the tiny tokenizer is built (tests/test_tiny.py checks they are its added vocabulary and the real one's).
_ADDED_VOCAB = [content for _, content, _ in ADDED_TOKENS]
_CONTROL = {t for t in _ADDED_VOCAB if re.fullmatch(r"<\|(emotion|style|sfx|prosody|env):[^|]+\|>", t)}
RESERVED_TOKENS = sorted(t for t in _ADDED_VOCAB if t not in _CONTROL)


# ============================================================================================== helpers
def snapshot(folder: Path) -> dict[str, bytes | tuple]:
    """Every file under `folder` (hidden ones included) with its bytes (size and mtime for the large sparse ones)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.stat().st_size < 2**24 else
            (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


@contextlib.contextmanager
def nothing_lost(folder: Path, allowed_new: tuple[str, ...] = ()):
    """The files of `folder` are as they were after the block; new files only where `allowed_new` names them."""
    before = snapshot(folder)
    yield
    after = snapshot(folder)
    assert {k: v for k, v in after.items() if k in before} == before, "a file the user had was changed or removed"
    extra = sorted(set(after) - set(before) - set(allowed_new))
    assert not extra, f"left behind: {extra}"


def assert_one_line(message: str, *fragments: str) -> None:
    assert "\n" not in message.strip(), message
    assert "Traceback" not in message and ": internal error:" not in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def expect(error_type, *fragments: str):
    """`pytest.raises(error_type)`, then one line containing every fragment."""

    @contextlib.contextmanager
    def check():
        with pytest.raises(error_type) as caught:
            yield caught
        assert_one_line(str(caught.value), *fragments)

    return check()


def audio_bytes(ext: str, seconds: float = 0.5, rate: int = SR, channels: int = 1, subtype: str | None = None,
                values: np.ndarray | None = None) -> bytes:
    samples = values if values is not None else np.sin(np.arange(int(seconds * rate)) / 7.0) * 0.3
    samples = np.repeat(samples[:, None], channels, axis=1) if channels > 1 else samples
    buffer = Path(tempfile.mkdtemp()) / f"clip.{ext}"
    soundfile.write(buffer, samples.astype(np.float32), rate, subtype=subtype)
    data = buffer.read_bytes()
    shutil.rmtree(buffer.parent)
    return data


def sparse_wav(path: Path, seconds: float, rate: int, channels: int) -> Path:
    """A WAV whose header announces `seconds` of 16-bit audio, as a sparse file (no disk used for the samples)."""
    data = int(seconds * rate) * channels * 2
    header = b"RIFF" + struct.pack("<I", 36 + data) + b"WAVEfmt " + struct.pack(
        "<IHHIIHH", 16, 1, channels, rate, rate * channels * 2, channels * 2, 16) + b"data" + struct.pack("<I", data)
    with open(path, "wb") as file:
        file.write(header)
        file.truncate(len(header) + data)
    return path


def voice_safetensors(path: Path, codes=None, **metadata) -> Path:
    codes = torch.zeros(3, C, dtype=torch.long) if codes is None else codes
    fields = {"format": "higgs_audio_v3_voice", "version": "1", "text": json.dumps("Hi."), "sampling_rate": "24000",
              "frame_rate": "25"}
    fields.update({k: v for k, v in metadata.items() if v is not None})
    for key in [k for k, v in metadata.items() if v is None]:
        fields.pop(key)
    save_file({"codes": codes}, str(path), metadata=fields)
    return path


def voice_json(path: Path, **record) -> Path:
    base = {"format": "higgs_audio_v3_voice", "version": 1, "text": "Hi.", "sampling_rate": 24000, "frame_rate": 25,
            "codes": [[0] * C] * 3}
    base.update({k: v for k, v in record.items() if v is not None})
    for key in [k for k, v in record.items() if v is None]:
        base.pop(key)
    path.write_text(json.dumps(base))
    return path


@pytest.fixture(scope="module")
def processor(tokenizer):
    return HiggsAudioV3Processor(tokenizer)


# ============================================================================================== reference audio
def _write(name: str, data: bytes):
    def build(folder):
        (folder / name).write_bytes(data)
        return folder / name
    return build


def _truncated(ext: str, fraction: float):
    return lambda folder: _write(f"clip.{ext}", (lambda b: b[: int(len(b) * fraction)])(audio_bytes(ext)))(folder)


def _corrupt_body(ext: str):
    def build(folder):
        data = audio_bytes(ext)
        return _write(f"clip.{ext}", data[:60] + bytes((b * 7 + 3) % 256 for b in data[60:]))(folder)
    return build


def _header_only(ext: str, size: int = 44):
    return lambda folder: _write(f"clip.{ext}", audio_bytes(ext)[:size])(folder)


def _folder_named(name: str):
    def build(folder):
        (folder / name).mkdir()
        return folder / name
    return build


UNREADABLE = "Could not read reference audio file"
AUDIO_CASES: dict[str, tuple] = {
    # name: (build(folder) -> path, error type, fragments; "{path}" is the file)
    **{f"{ext} truncated to {int(f * 100)}%": (_truncated(ext, f), ValueError, ("{path}",))
       for ext in ("wav", "flac", "ogg", "mp3", "aiff", "au", "w64") for f in (0.5, 0.1)},
    **{f"{ext} header only": (_header_only(ext), ValueError, ("{path}",)) for ext in ("wav", "flac", "ogg", "mp3", "aiff")},
    **{f"{ext} corrupt body": (_corrupt_body(ext), ValueError, (UNREADABLE, "{path}")) for ext in ("flac", "ogg", "mp3")},
    "empty file": (_write("clip.wav", b""), ValueError, (UNREADABLE, "{path}")),
    "random bytes": (_write("clip.wav", bytes(range(256)) * 40), ValueError, (UNREADABLE, "{path}")),
    "text file named .wav": (_write("clip.wav", b"Hello, this is not audio.\n" * 50), ValueError, (UNREADABLE,)),
    "pickle named .wav": (_write("clip.wav", pickle.dumps({"samples": [0.0] * 100})), ValueError, (UNREADABLE,)),
    "safetensors named .flac": (lambda f: voice_safetensors(f / "clip.flac"), ValueError, (UNREADABLE,)),
    "a folder named clip.wav": (_folder_named("clip.wav"), IsADirectoryError, ("is a folder", "{path}")),
    "missing file": (lambda f: f / "gone.wav", FileNotFoundError, ("does not exist", "{path}")),
    "NaN samples": (_write("clip.wav", audio_bytes("wav", subtype="FLOAT", values=np.full(12000, np.nan))), ValueError,
                    ("NaN or infinite", "{path}")),
    "infinite samples": (_write("clip.wav", audio_bytes("wav", subtype="FLOAT", values=np.full(12000, np.inf))),
                         ValueError, ("NaN or infinite", "{path}")),
    "no samples": (_write("clip.wav", audio_bytes("wav", values=np.zeros(0))), ValueError, ("is empty", "{path}")),
    "101 s at 8 kHz": (_write("clip.wav", audio_bytes("wav", seconds=101, rate=8000, subtype="PCM_U8")), ValueError,
                       ("the longest accepted is 100 s", "{path}")),
    "10 min, 96 kHz, 6 channels (sparse)": (lambda f: sparse_wav(f / "clip.wav", 600, 96000, 6), ValueError,
                                            ("600.00 s long", "{path}")),
    "22 h (sparse)": (lambda f: sparse_wav(f / "clip.wav", 22 * 3600, 8000, 1), ValueError, ("79200.00 s", "{path}")),
}


@pytest.mark.parametrize("case", sorted(AUDIO_CASES))
def test_reference_audio(case, tmp_path, monkeypatch):
    build, error_type, fragments = AUDIO_CASES[case]
    path = build(tmp_path)
    read = soundfile.read
    if "sparse" in case or "101 s" in case:  # refused from the header: not one sample may be read
        monkeypatch.setattr(soundfile, "read", lambda *a, **k: pytest.fail("samples read before the length check"))
    with nothing_lost(tmp_path), expect(error_type, *(f.replace("{path}", repr(str(path))) for f in fragments)):
        prepare_reference_waveform(path)
    monkeypatch.setattr(soundfile, "read", read)


def test_reference_audio_rate_mismatch(tmp_path):
    path = tmp_path / "clip.wav"
    path.write_bytes(audio_bytes("wav"))
    with nothing_lost(tmp_path), expect(ValueError, "sampling_rate=16000 was given but", "is sampled at 24000 Hz"):
        prepare_reference_waveform(path, sampling_rate=16000)


# ============================================================================================== voice files
NOT_A_VOICE = "Could not load voice file"


def _torch_saved(folder):
    torch.save({"codes": torch.zeros(3, C)}, folder / "v.safetensors")
    return folder / "v.safetensors"


def _voice_cut(suffix: str, size: int | float):
    def build(folder):
        path = voice_safetensors(folder / "full.safetensors") if suffix == ".safetensors" else voice_json(folder / "full.json")
        data = path.read_bytes()
        path.unlink()
        cut = folder / f"v{suffix}"
        cut.write_bytes(data[: int(len(data) * size) if isinstance(size, float) else size])
        return cut
    return build


VOICE_CASES: dict[str, tuple] = {
    "pickle named .safetensors": (_write("v.safetensors", pickle.dumps({"codes": [[0] * C]})), ValueError,
                                  (NOT_A_VOICE, "not a readable safetensors file")),
    "torch.save named .safetensors": (_torch_saved, ValueError, (NOT_A_VOICE, "not a readable safetensors file")),
    "empty .safetensors": (_write("v.safetensors", b""), ValueError, (NOT_A_VOICE,)),
    **{f".safetensors cut to {size}": (_voice_cut(".safetensors", size), ValueError, (NOT_A_VOICE,))
       for size in (4, 8, 40, 0.5, 0.9)},
    **{f".json cut to {size}": (_voice_cut(".json", size), ValueError, (NOT_A_VOICE,)) for size in (1, 0.5, 0.9)},
    "random bytes .safetensors": (_write("v.safetensors", bytes(range(256)) * 4), ValueError, (NOT_A_VOICE,)),
    "other tensors": (lambda f: save_file({"weight": torch.zeros(2)}, str(f / "v.safetensors")) or f / "v.safetensors",
                      ValueError, (NOT_A_VOICE, "holds tensors ['weight']")),
    "no format marker": (lambda f: voice_safetensors(f / "v.safetensors", format=None), ValueError,
                         (NOT_A_VOICE, "format is None")),
    "another format": (lambda f: voice_safetensors(f / "v.safetensors", format="higgs_audio_v3_codes"), ValueError,
                       (NOT_A_VOICE, "format is 'higgs_audio_v3_codes'")),
    "missing version (.safetensors)": (lambda f: voice_safetensors(f / "v.safetensors", version=None), ValueError,
                                       (NOT_A_VOICE, "its version is None")),
    "missing version (.json)": (lambda f: voice_json(f / "v.json", version=None), ValueError,
                                (NOT_A_VOICE, "its version is None")),
    "version 'one'": (lambda f: voice_safetensors(f / "v.safetensors", version="one"), ValueError,
                      ("its version is 'one'",)),
    "version 2.5 (.json)": (lambda f: voice_json(f / "v.json", version=2.5), ValueError, ("its version is 2.5",)),
    "newer version": (lambda f: voice_json(f / "v.json", version=2), ValueError,
                      ("is a version 2 voice file; this code reads versions up to 1",)),
    "frame rate 'fast'": (lambda f: voice_safetensors(f / "v.safetensors", frame_rate="fast"), ValueError,
                          ("its frame_rate is 'fast'",)),
    "sampling rate 0": (lambda f: voice_json(f / "v.json", sampling_rate=0), ValueError, ("its sampling_rate is 0",)),
    "text metadata not JSON": (lambda f: voice_safetensors(f / "v.safetensors", text="{unclosed"), ValueError,
                               ("its 'text' metadata is not JSON",)),
    "text a list (.json)": (lambda f: voice_json(f / "v.json", text=["Hi."]), ValueError, ("its 'text' is list",)),
    "float codes": (lambda f: voice_safetensors(f / "v.safetensors", codes=torch.zeros(3, C)), ValueError,
                    ("must be an integer tensor",)),
    "negative codes": (lambda f: voice_json(f / "v.json", codes=[[-1] * C]), ValueError, ("must be non-negative",)),
    "1-D codes": (lambda f: voice_safetensors(f / "v.safetensors", codes=torch.zeros(C, dtype=torch.long)), ValueError,
                  ("shape [frames, num_codebooks]",)),
    "zero frames": (lambda f: voice_safetensors(f / "v.safetensors", codes=torch.zeros(0, C, dtype=torch.long)),
                    ValueError, ("at least one frame",)),
    "ragged codes (.json)": (lambda f: voice_json(f / "v.json", codes=[[0] * C, [0] * 3]), ValueError,
                             ("are not a rectangle of integers",)),
    "string codes (.json)": (lambda f: voice_json(f / "v.json", codes=[["a"] * C]), ValueError,
                             ("its 'codes' is not a list of frames",)),
    "huge integer codes (.json)": (lambda f: voice_json(f / "v.json", codes=[[10**30] * C]), ValueError,
                                   ("are not a rectangle of integers",)),
    "codes not a list (.json)": (lambda f: voice_json(f / "v.json", codes="0 0 0"), ValueError,
                                 ("its 'codes' is not a list of frames",)),
    "top-level list (.json)": (_write("v.json", b"[[0, 0]]"), ValueError, ("no 'codes' field",)),
    "not UTF-8 (.json)": (_write("v.json", b"\xff\xfe{}"), ValueError, ("it is not UTF-8 JSON",)),
    "nested 100000 deep (.json)": (_write("v.json", b"[" * 100000 + b"]" * 100000), ValueError,
                                   ("nested too deeply",)),
    "nested 50 deep in codes (.json)": (lambda f: _write("v.json", (
        '{"format": "higgs_audio_v3_voice", "version": 1, "codes": ' + "[" * 50 + "]" * 50 + "}").encode())(f),
        ValueError, ("its 'codes' is not a list of frames",)),
    "2501 frames (.safetensors header)": (lambda f: voice_safetensors(
        f / "v.safetensors", codes=torch.zeros(2501, C, dtype=torch.long)), ValueError,
        ("is 100.04 s long (2501 frames at 25 frames per second); the longest accepted is 100 s",)),
    "22 h of frames (.json, 9 MB)": (_write("v.json", b" " * (9 * 1024 * 1024)), ValueError, ("9437184 bytes",)),
    "a folder named v.safetensors": (_folder_named("v.safetensors"), IsADirectoryError, ("is a folder",)),
    "missing file": (lambda f: f / "gone.safetensors", FileNotFoundError, ("does not exist",)),
}


@pytest.mark.parametrize("case", sorted(VOICE_CASES))
def test_voice_file(case, tmp_path, monkeypatch):
    build, error_type, fragments = VOICE_CASES[case]
    path = build(tmp_path)
    if "header" in case:  # the frame count is read from the header: the codes are never loaded
        from safetensors import safe_open

        def no_get_tensor(*args, **kwargs):
            pytest.fail("codes read before the length check")

        handle = type(safe_open(str(path), framework="pt"))
        monkeypatch.setattr(handle, "get_tensor", no_get_tensor, raising=False)
    with nothing_lost(tmp_path), expect(error_type, str(path), *fragments):
        HiggsAudioV3Voice.load(path)


PROCESSOR_VOICE_CASES: dict[str, tuple] = {
    # refused by the processor when used as a reference: (build, error type, fragments)
    "codes of the BOC range": (lambda f: voice_json(f / "v.json", codes=[[1024] * C]), ValueError,
                               ("values from 1024 to 1024", "each in 0..1023")),
    "four codebooks": (lambda f: voice_json(f / "v.json", codes=[[0] * 4]), ValueError,
                       ("[..., frames, 8]", "shape (1, 4)")),
    "16 kHz voice": (lambda f: voice_json(f / "v.json", sampling_rate=16000), ValueError,
                     ("was encoded at 16000 Hz",)),
    "transcript with <tool_call>": (lambda f: voice_json(f / "v.json", text="Hi <tool_call> there."), ValueError,
                                    ("'<tool_call>' in the transcript of the reference is a special token",)),
    "transcript with <|tts|>": (lambda f: voice_json(f / "v.json", text="<|tts|>Hi."), ValueError,
                                ("structural prompt token",)),
    "transcript with an unclosed tag": (lambda f: voice_json(f / "v.json", text="Hi <|emotion:anger there."),
                                        ValueError, ("never closed", "'<|emotion:anger|>'")),
    # any other path is a clip, which the processor reads for the model's codec: a damaged one is refused there
    "text under an audio name as a clip": (_write("v.wav", b"not audio at all\n" * 8), ValueError,
                                           ("Could not read reference audio file", "v.wav")),
}


@pytest.mark.parametrize("case", sorted(PROCESSOR_VOICE_CASES))
def test_voice_used_as_reference(case, processor, tmp_path):
    build, error_type, fragments = PROCESSOR_VOICE_CASES[case]
    path = build(tmp_path)
    with nothing_lost(tmp_path), expect(error_type, *fragments):
        processor("Hello.", reference=str(path))


# ============================================================================================== text and tags
TEXT_CASES: dict[str, tuple] = {
    # name: (text, fragments)
    **{f"reserved token {token}": (f"Say {token} this.", (repr(token),)) for token in RESERVED_TOKENS},
    "<tool_call> at the start": ("<tool_call>{\"name\": \"x\"}</tool_call> Hi.", ("'<tool_call>'", "special token")),
    "</tool_call> alone": ("Done </tool_call>", ("'</tool_call>'",)),
    "unclosed emotion tag": ("<|emotion:elation Hello.", ("never closed", "did you mean '<|emotion:elation|>'")),
    "unclosed at the end": ("Hello <|", ("'<|'", "never closed")),
    "unclosed before a valid tag": ("Hi <|sfx:laughter <|emotion:anger|>Go.", ("'<|sfx:laughter'", "never closed")),
    "misspelled tag": ("<|emotion:angr|>Go.", ("Unknown control tag '<|emotion:angr|>'", "'<|emotion:anger|>'")),
    "unknown family": ("<|mood:happy|>Hi.", ("Unknown control tag '<|mood:happy|>'",)),
    "empty tag": ("<||>Hi.", ("Unknown control tag '<||>'",)),
    "empty text": ("", ("is empty",)),
    "whitespace text": (" \n\t ", ("is empty",)),
    "bytes text": (b"Hello.", ("text must be a string or a non-empty list of strings, got b'Hello.'",)),
    "number text": (42, ("text must be a string or a non-empty list of strings, got 42",)),
    "None in a batch": (["Hi.", None], ("Text 1 must be a string, got NoneType",)),
    "empty batch": ([], ("non-empty list of strings",)),
}


@pytest.mark.parametrize("case", sorted(TEXT_CASES))
def test_text(case, processor):
    text, fragments = TEXT_CASES[case]
    with expect(ValueError, *fragments):
        processor(text)


TEXT_ROUTE_CASES = {
    "reference_text with <tool_call>": lambda p: p("Hi.", reference_codes=torch.zeros(3, C, dtype=torch.long),
                                                   reference_text="<tool_call>"),
    "dialogue line with <tool_call>": lambda p: dialogue_jobs(p, "[Ann] Hi.\n[Bob] <tool_call> go."),
    "dialogue line of another import's DialogueLine": lambda p: dialogue_jobs(
        p, [type("OtherDialogueLine", (), {"speaker": "Ann", "text": "Hi <|im_start|>", "line_number": 1})()]),
    "dialogue pair of three": lambda p: dialogue_jobs(p, [("Ann", "Hi.", "extra")]),
    "check_text of a voice transcript": lambda p: p.check_text("Hello </tool_call>", "the transcript of a voice"),
    "a 22-hour voice built in memory": lambda p: p("Hi.", reference=HiggsAudioV3Voice(
        codes=torch.zeros(22 * 3600 * 25, C, dtype=torch.long))),
    "reference_codes of 2501 frames": lambda p: p("Hi.", reference_codes=torch.zeros(2501, C, dtype=torch.long)),
}
_ROUTE_FRAGMENTS = {
    "reference_text with <tool_call>": ("'<tool_call>' in the transcript of the reference",),
    "dialogue line with <tool_call>": ("'<tool_call>' in dialogue line 2",),
    "dialogue line of another import's DialogueLine": ("'<|im_start|>' in dialogue line 1",),
    "dialogue pair of three": ("Dialogue line 1 is tuple",),
    "check_text of a voice transcript": ("'</tool_call>' in the transcript of a voice",),
    "a 22-hour voice built in memory": ("is 79200.00 s long (1980000 frames at 25 frames per second); the longest "
                                        "accepted is 100 s",),
    "reference_codes of 2501 frames": ("is 100.04 s long (2501 frames", "the longest accepted is 100 s"),
}


@pytest.mark.parametrize("case", sorted(TEXT_ROUTE_CASES))
def test_text_through_every_route(case, processor):
    with expect(ValueError, *_ROUTE_FRAGMENTS[case]):
        TEXT_ROUTE_CASES[case](processor)


def test_a_long_processor_text_warns_once_and_points_to_synthesize_long(processor, caplog):
    from transformers.utils import logging as transformers_logging

    transformers_logging.warning_once.cache_clear()  # another test may have spent the one warning already
    transformers_logging.get_logger("higgs_v3").propagate = True
    with caplog.at_level("WARNING"):
        count = lambda text: len(processor.tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
        at_limit = "!" * 1024  # one token per character in the tiny tokenizer
        assert count(at_limit) == 1024 and count(at_limit + "!") == 1025
        short = processor(at_limit)
        assert not [r for r in caplog.records if "synthesize_long" in r.getMessage()]
        long = processor(at_limit + "!")
        processor("other " * 2000)
    warned = [r.getMessage() for r in caplog.records if "synthesize_long" in r.getMessage()]
    assert short["input_ids"].shape[1] == 1024 + 3 and long["input_ids"].shape[1] == 1025 + 3
    assert warned == [
        "A text of more than 1024 tokens is spoken as one generation; the model was trained on sentence-sized chunks "
        "and tends to run away or skip words on long ones. Use processor.synthesize_long(model, text), "
        "which splits it into chunks and keeps the voice."
    ]


# ============================================================================================== generate options
GENERATE_CASES: dict[str, tuple[dict, str]] = {
    "max_new_tokens 0": ({"max_new_tokens": 0}, "max_new_tokens"),
    "max_new_tokens 1.5": ({"max_new_tokens": 1.5}, "max_new_tokens must be a positive number of audio rows, got 1.5"),
    "max_new_tokens True": ({"max_new_tokens": True}, "got True"),
    "max_new_tokens 'x'": ({"max_new_tokens": "x"}, "got 'x'"),
    "max_new_tokens past the positions": ({"max_new_tokens": 10**9, "max_positions": None},
                                          "passes the model's max_position_embeddings=32768"),
    "temperature -1": ({"temperature": -1.0}, "temperature"),
    "temperature 0": ({"temperature": 0.0}, "temperature"),
    "temperature 'hot'": ({"temperature": "hot"}, "temperature"),
    "temperature nan": ({"temperature": float("nan")}, "temperature"),
    "top_k -1": ({"top_k": -1}, "top_k"),
    "top_k 1.5": ({"top_k": 1.5}, "top_k"),
    "top_p 0": ({"top_p": 0.0}, "top_p must be a number in (0, 1]"),
    "top_p 1.5": ({"top_p": 1.5}, "top_p must be a number in (0, 1]"),
    "top_p nan": ({"top_p": float("nan")}, "top_p must be a number in (0, 1]"),
    "min_p 2": ({"min_p": 2.0}, "min_p must be a number in [0, 1], got 2.0"),
    "min_p 'a'": ({"min_p": "a"}, "min_p must be a number in [0, 1], got 'a'"),
    "top_k 'x'": ({"top_k": "x"}, "top_k"),
    "seed -1": ({"seed": -1}, "seed must be an integer in [0, 2**62)"),
    "seed 2**62": ({"seed": 2**62}, "seed must be an integer in [0, 2**62)"),
    "seed 'a'": ({"seed": "a"}, "seed must be an int or a list of ints"),
    "seed 1.5": ({"seed": 1.5}, "seed must be an int or a list of ints"),
    "two seeds for one text": ({"seed": [1, 2]}, "one seed per sequence (1)"),
    "do_sample 'yes'": ({"do_sample": "yes"}, "do_sample must be True or False"),
    "num_beams 2": ({"num_beams": 2}, "does not support num_beams=2"),
    "num_return_sequences 2": ({"num_return_sequences": 2}, "does not support num_return_sequences=2"),
    "repetition_penalty": ({"repetition_penalty": 1.2}, "does not support repetition_penalty=1.2"),
    "max_length": ({"max_length": 10}, "Pass max_new_tokens instead"),
    "inputs_embeds": ({"inputs_embeds": torch.zeros(1, 4, 8)}, "not `inputs`/`inputs_embeds`"),
    "output_audio without a codec": ({"output_audio": True}, "output_audio=True needs the codec"),
    "audio_input_ids of 5 codebooks": ({"audio_input_ids": torch.zeros(3, 5, dtype=torch.long)},
                                       "The reference rows (audio_input_ids) must be integer codes [..., frames, 8]"),
    "a streamer without put()": ({"streamer": object()}, "streamer must have put() and end()"),
    "a logits processor that is a number": ({"logits_processor": [1]}, "logits_processor must be a list of callables"),
    "stopping_criteria not a list": ({"stopping_criteria": "stop"}, "stopping_criteria must be a list of callables"),
    "generation_config a string": ({"generation_config": "greedy"}, "generation_config must be a transformers"),
    "max_positions 0": ({"max_positions": 0}, "max_positions must be a positive number"),
    "max_positions 'x'": ({"max_positions": "x"}, "max_positions must be a positive number"),
    "attention_mask of another length": ({"attention_mask": torch.ones(1, 3, dtype=torch.long)},
                                         "attention_mask has shape (1, 3); it must match input_ids (1, 4)"),
    "1-D input_ids": ({"input_ids": torch.tensor([1, 2])}, "input_ids of shape [batch, length], got (2,)"),
    "empty input_ids": ({"input_ids": torch.zeros(1, 0, dtype=torch.long)}, "at least one prompt position"),
    "empty input_ids with its attention_mask": ({"input_ids": torch.zeros(1, 0, dtype=torch.long),
                                                 "attention_mask": torch.zeros(1, 0, dtype=torch.long)},
                                                "at least one prompt position"),
}


@pytest.mark.parametrize("case", sorted(GENERATE_CASES))
def test_generate_options(case, model):
    kwargs, fragment = GENERATE_CASES[case]
    kwargs = {"input_ids": torch.tensor([[151667, 151672, 9707, 151670]]), "max_new_tokens": 3, "seed": 0, **kwargs}
    with expect(ValueError, fragment):
        model.generate(**kwargs)


# ============================================================================================== command line
@pytest.fixture
def user_folder(tmp_path, monkeypatch, processor):
    """A user's folder (a clip, a voice, a text file, an old output) as the working directory; the model is never
    loaded (`load_model` fails the test): every case must be refused before it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "me.wav").write_bytes(audio_bytes("wav"))
    HiggsAudioV3Voice(codes=torch.zeros(3, C, dtype=torch.long), text="Hi.").save(tmp_path / "v.safetensors")
    (tmp_path / "text.txt").write_text("Hello there.")
    (tmp_path / "old.wav").write_bytes(audio_bytes("wav", seconds=0.3))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    monkeypatch.setattr(cli_main, "resolve_model", lambda name, log=None: tmp_path)
    monkeypatch.setattr(cli_main, "load_processor", lambda path: processor)
    monkeypatch.setattr(cli_main, "load_model", lambda *a: pytest.fail("the model was loaded before the refusal"))
    return tmp_path


def _link(kind: str, source: str, name: str):
    def build(folder):
        (os.link if kind == "hard" else os.symlink)(folder / source, folder / name)
    return build


def _files(**named: bytes):
    def build(folder):
        for name, data in named.items():
            (folder / name).write_bytes(data)
    return build


CLI_CASES: dict[str, tuple] = {
    # name: (argv, fragment of the one stderr line, optional build(folder) run first)
    "-o x.raw": (["speak", "Hi", "-o", "x.raw"], "'.raw' is not an audio format written here; use one of .wav"),
    "-o without extension": (["speak", "Hi", "-o", "speech"], "no extension is not an audio format"),
    "-o .m4a": (["speak", "Hi", "-o", "x.m4a"], "'.m4a' is not an audio format"),
    "-o a folder": (["speak", "Hi", "-o", "notes"], "it is a folder"),
    "-o in a missing folder": (["speak", "Hi", "-o", "gone/x.wav"], "the folder"),
    "-o onto --ref-audio": (["speak", "Hi", "--ref-audio", "me.wav", "-o", "me.wav"], "is also an input of this command"),
    "-o onto --ref-audio by another path": (["speak", "Hi", "--ref-audio", "me.wav", "-o", "notes/../me.wav"],
                                            "is also an input"),
    "-o onto a symlink of --ref-audio": (["speak", "Hi", "--ref-audio", "me.wav", "-o", "link.wav"], "is also an input",
                                         _link("soft", "me.wav", "link.wav")),
    "-o onto a hard link of --ref-audio": (["speak", "Hi", "--ref-audio", "me.wav", "-o", "hard.wav"],
                                           "is also an input", _link("hard", "me.wav", "hard.wav")),
    "-o onto --text-file (not audio)": (["speak", "--text-file", "text.txt", "-o", "text.txt"], "not an audio format"),
    "-o onto a --text-file named .wav": (["speak", "--text-file", "script.wav", "-o", "script.wav"], "is also an input",
                                         _files(**{"script.wav": b"Hello there."})),
    "--save-codes onto --voice": (["speak", "Hi", "--voice", "v.safetensors", "--save-codes", "v.safetensors"],
                                  "--save-codes 'v.safetensors' is also an input"),
    "--save-voice onto --voice": (["speak", "Hi", "--voice", "v.safetensors", "--save-voice", "v.safetensors"],
                                  "--save-voice 'v.safetensors' is also an input"),
    "--save-codes onto a dialogue voice": (["speak", "--dialogue", "[Ann] Hi.", "--voice", "Ann=v.safetensors",
                                            "--save-codes", "v.safetensors"], "is also an input"),
    "--save-voice equal to --save-codes": (["speak", "Hi", "--save-codes", "c.safetensors", "--save-voice",
                                            "c.safetensors"], "is also the file of --save-codes"),
    "--split-dir would overwrite the clip": (["speak", "Hi", "--ref-audio", "split/001.wav", "--split-dir", "split"],
                                             "would write '001.wav', which is an input",
                                             lambda f: (f / "split").mkdir() or (f / "split" / "001.wav").write_bytes(
                                                 audio_bytes("wav"))),
    "--split-dir a file": (["speak", "Hi", "--split-dir", "text.txt"], "is a file, not a folder"),
    "--save-codes x.npy": (["speak", "Hi", "--save-codes", "x.npy"], "must end with .safetensors"),
    "--save-voice x.wav": (["speak", "Hi", "--save-voice", "x.wav"], "must end with .safetensors or .json"),
    "--max-seconds 4e7": (["speak", "Hi", "--max-seconds", "4e7"], "--max-seconds 4e+07 is more than one chunk can hold"),
    "--max-seconds 164": (["speak", "Hi", "--max-seconds", "164"], "at most 163.56 s"),
    "--max-seconds 0": (["speak", "Hi", "--max-seconds", "0"], "--max-seconds must be more than zero"),
    "--max-seconds nan": (["speak", "Hi", "--max-seconds", "nan"], "--max-seconds must be more than zero"),
    "--max-seconds inf": (["speak", "Hi", "--max-seconds", "inf"], "--max-seconds must be more than zero"),
    "--seed -1": (["speak", "Hi", "--seed", "-1"], "--seed must be an integer in [0, 2**62)"),
    "--seed 2**62": (["speak", "Hi", "--seed", str(2**62)], "--seed must be an integer in [0, 2**62)"),
    "--seed 1.5": (["speak", "Hi", "--seed", "1.5"], "--seed must be a whole number"),
    "--temperature 0": (["speak", "Hi", "--temperature", "0"], "--temperature must be more than zero"),
    "--top-k 0": (["speak", "Hi", "--top-k", "0"], "--top-k must be at least 1"),
    "--top-p 2": (["speak", "Hi", "--top-p", "2"], "--top-p must be in (0, 1]"),
    "--min-p -1": (["speak", "Hi", "--min-p", "-1"], "--min-p must be in (0, 1]"),
    "--batch-size 0": (["speak", "Hi", "--batch-size", "0"], "--batch-size must be at least 1"),
    "--max-chars 0": (["speak", "Hi", "--max-chars", "0"], "--max-chars must be at least 1"),
    "--pause -1": (["speak", "Hi", "--pause", "-1"], "--pause must be zero or more"),
    "--dtype int8": (["speak", "Hi", "--dtype", "int8"], "invalid choice: 'int8'"),
    "unknown option": (["speak", "Hi", "--volume", "11"], "unrecognized arguments: --volume 11"),
    "unknown command": (["sing", "Hi"], "invalid choice: 'sing'"),
    "--ref-audio missing": (["speak", "Hi", "--ref-audio", "gone.wav"], "'gone.wav' does not exist"),
    "--ref-audio a folder": (["speak", "Hi", "--ref-audio", "notes"], "'notes' is a folder"),
    "--ref-audio text": (["speak", "Hi", "--ref-audio", "text.txt"], "Could not read reference audio file 'text.txt'"),
    "--ref-audio truncated flac": (["speak", "Hi", "--ref-audio", "cut.flac"], "'cut.flac'",
                                   _files(**{"cut.flac": audio_bytes("flac")[:30]})),
    "--ref-audio 22 h (header)": (["speak", "Hi", "--ref-audio", "long.wav"], "'long.wav' is 79200.00 s long",
                                  lambda f: sparse_wav(f / "long.wav", 22 * 3600, 8000, 1)),
    "--voice pickle": (["speak", "Hi", "--voice", "p.safetensors"], "not a readable safetensors file",
                       _files(**{"p.safetensors": pickle.dumps([1, 2])})),
    "--voice truncated": (["speak", "Hi", "--voice", "t.safetensors"], "Could not load voice file 't.safetensors'",
                          lambda f: (f / "t.safetensors").write_bytes((f / "v.safetensors").read_bytes()[:100])),
    "--voice without version": (["speak", "Hi", "--voice", "n.json"], "its version is None",
                                lambda f: voice_json(f / "n.json", version=None)),
    "--voice too long": (["speak", "Hi", "--voice", "long.safetensors"], "is 104.00 s long (2600 frames",
                         lambda f: voice_safetensors(f / "long.safetensors", codes=torch.zeros(2600, C, dtype=torch.long))),
    "dialogue voice pickle": (["speak", "--dialogue", "[Ann] Hi.", "--voice", "Ann=p.json"], "'p.json'",
                              _files(**{"p.json": pickle.dumps([1])})),
    "--text-file missing": (["speak", "--text-file", "gone.txt"], "'gone.txt' does not exist"),
    "--text-file a folder": (["speak", "--text-file", "notes"], "'notes' is a folder"),
    "--text-file not UTF-8": (["speak", "--text-file", "latin.txt"], "as UTF-8 text",
                              _files(**{"latin.txt": "Grüße".encode("latin-1")})),
    "--text-file empty": (["speak", "--text-file", "empty.txt"], "The text is empty", _files(**{"empty.txt": b" \n"})),
    "text with <tool_call>": (["speak", "Call <tool_call> now."], "'<tool_call>' in the text is a special token"),
    "text with an unclosed tag": (["speak", "<|emotion:anger Go."], "never closed"),
    "text with <|im_start|>": (["speak", "<|im_start|>Hi."], "structural prompt token"),
    "--ref-text with </tool_call>": (["speak", "Hi", "--ref-audio", "me.wav", "--ref-text", "</tool_call>"],
                                     "'</tool_call>' in the reference text"),
    "dialogue without speakers": (["speak", "--dialogue", "Hello."], "has no speaker"),
    "dialogue speaker without voice": (["speak", "--dialogue", "[Ann] Hi."], "Ann"),
    "--ref-text without a clip": (["speak", "Hi", "--ref-text", "Hello"], "--ref-text is the transcript"),
    "--auto-voices without --dialogue": (["speak", "Hi", "--auto-voices"], "--auto-voices applies to --dialogue only"),
    "--model a missing folder": (["speak", "Hi", "--model", "./nowhere"], "nowhere"),
    "convert without --output": (["convert", "--input", "x"], "the following arguments are required: --output"),
    "convert a missing input": (["convert", "--input", "./nothing", "--output", "out"], "The input './nothing'"),
    "convert into a file": (["convert", "--input", "notes", "--output", "text.txt"], "exists and is not a folder"),
    "convert bad dtype": (["convert", "--input", "notes", "--output", "o", "--dtype", "int4"], "invalid choice: 'int4'"),
    "convert bad shard size": (["convert", "--input", "notes", "--output", "o", "--max-shard-size", "lots"], "lots"),
    "convert missing codec config": (["convert", "--input", "notes", "--output", "o", "--codec-config", "gone.json"],
                                     "gone.json"),
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_command_line(case, user_folder, capsys):
    argv, fragment, *build = CLI_CASES[case]
    if case == "--model a missing folder":  # the real resolution, without the fixture's stand-in
        from higgs_v3.cli.models import resolve_model

        cli_main.resolve_model = resolve_model
    if build:
        build[0](user_folder)
    with nothing_lost(user_folder):
        code = cli_main.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert_one_line(err, fragment)


# ============================================================================================== original checkpoints
@pytest.fixture(scope="module", autouse=True)
def tokenizer_parsed_once():
    """`read_original` parses the same tiny tokenizer several times here: once per content is enough."""
    with token_ids_read_once_per_content():
        yield


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Path:
    return write_tiny_original_checkpoint(tmp_path_factory.mktemp("orig") / "orig", with_codec=False)


def _replace(name: str, data):
    def damage(folder: Path):
        (folder / name).unlink(missing_ok=True)
        (folder / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    return damage


def _remove(*names: str):
    return lambda folder: [(folder / name).unlink() for name in names]


def _cut(name: str, fraction: float):
    def damage(folder: Path):
        data = (folder / name).read_bytes()
        _replace(name, data[: int(len(data) * fraction)])(folder)
    return damage


def _edit_config(**changes):
    def damage(folder: Path):
        config = json.loads((folder / "config.json").read_text())
        for dotted, value in changes.items():
            target = config
            *path, key = dotted.split("__")
            for part in path:
                target = target[part]
            target[key] = value
        _replace("config.json", json.dumps(config))(folder)
    return damage


CHECKPOINT_CASES: dict[str, tuple] = {
    # name: (damage(folder), fragment, extra options)
    "no config.json": (_remove("config.json"), "missing config.json"),
    "config.json not JSON": (_replace("config.json", "{oops"), "cannot be read as JSON"),
    "config.json a list": (_replace("config.json", "[]"), "holds a JSON list, not an object"),
    "config.json nested 100000 deep": (_replace("config.json", "[" * 100000 + "]" * 100000), "cannot be read as JSON"),
    "config.json empty": (_replace("config.json", ""), "cannot be read as JSON"),
    "weights cut in half": (_cut("model.safetensors", 0.5), "is not a valid safetensors file"),
    "weights cut to 8 bytes": (_cut("model.safetensors", 8 / 10**9), "is not a valid safetensors file"),
    "weights empty": (_replace("model.safetensors", b""), "is not a valid safetensors file"),
    "weights a pickle": (_replace("model.safetensors", pickle.dumps({"w": 1})), "is not a valid safetensors file"),
    "only pickle weights": (lambda f: (_remove("model.safetensors", "model.safetensors.index.json")(f),
                                       (f / "pytorch_model.bin").write_bytes(pickle.dumps(1))), "never loads pickle"),
    "index names a missing shard": (_replace("model.safetensors.index.json",
                                             json.dumps({"weight_map": {"x": "model-00001.safetensors"}})),
                                    "names model-00001.safetensors, which is missing"),
    "index not JSON": (_replace("model.safetensors.index.json", "nope"), "cannot be read as JSON"),
    "no tokenizer.json": (_remove("tokenizer.json"), "missing tokenizer.json"),
    "tokenizer.json without the specials": (_replace("tokenizer.json", "{}"), "lacks 63 of the required special tokens"),
    "tokenizer_config.json broken": (_replace("tokenizer_config.json", "{"), "cannot be read as JSON"),
    "codec config file broken": (_replace("higgs_audio_v2_tokenizer_config.json", "{bad"), "cannot be read as JSON"),
    "no codec without --without-codec": (lambda f: None, "Pass --without-codec", ["--dtype", "float32"]),
    "hidden size changed": (_edit_config(text_config__hidden_size=7), "config.json has audio_encoder_config.out_dim "
                            "= 32 but text_config.hidden_size = 7; the two must be equal", ["--without-codec"]),
    "vocabulary size changed": (_edit_config(text_config__vocab_size=12), "", ["--without-codec"]),
    "output is a file": (lambda f: None, "exists and is not a folder", ["--without-codec", "--output", "file.txt"]),
    "output not empty": (lambda f: None, "is not empty; pass --overwrite", ["--without-codec", "--output", "full"]),
    "output holds the input": (lambda f: None, "contains the input", ["--without-codec", "--output", ".", "--overwrite"]),
    "bad --max-shard-size": (lambda f: None, "--max-shard-size 'lots' is not a size", ["--max-shard-size", "lots"]),
}


@pytest.mark.parametrize("case", sorted(CHECKPOINT_CASES))
def test_original_checkpoint(case, original, tmp_path, monkeypatch, capsys):
    damage, fragment, *extra = CHECKPOINT_CASES[case]
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "source"
    source.mkdir()
    for path in original.iterdir():
        os.symlink(path, source / path.name)  # the original stays intact; only the damaged file is a real copy
    damage(source)
    (tmp_path / "file.txt").write_text("mine")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    options = ["--input", str(source), "--output", "out", "--no-verify", *(extra[0] if extra else [])]
    with nothing_lost(tmp_path):
        code = cli_main.main(["convert", *options], convert_prog="convert_checkpoint.py")
    err = capsys.readouterr().err
    assert code == 2, err
    assert_one_line(err, "convert_checkpoint.py: error: ", fragment)


# ============================================================================================== converted model folders
@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, processor) -> Path:
    """A converted-layout folder: the tiny config and its generation config, a weights file (its header is what the
    damaged cases break; the loader fails on it before any tensor is compared), the processor files."""
    from conftest import tiny_config

    from higgs_v3.generation_higgs_v3 import default_generation_config

    folder = tmp_path_factory.mktemp("model") / "tiny"
    tiny_config().save_pretrained(folder)
    default_generation_config(tiny_config()).save_pretrained(folder)
    save_file({"model.norm.weight": torch.ones(8)}, str(folder / "model.safetensors"), metadata={"format": "pt"})
    processor.save_pretrained(folder)
    return folder


MODEL_FOLDER_CASES: dict[str, tuple] = {
    # name: (file, damage(bytes) -> bytes, loader, error type, fragment)
    "weights cut in half": ("model.safetensors", lambda b: b[: len(b) // 2], "model", OSError, "are damaged"),
    "weights cut to 8 bytes": ("model.safetensors", lambda b: b[:8], "model", OSError, "are damaged"),
    "weights a pickle": ("model.safetensors", lambda b: pickle.dumps({"w": 1}), "model", OSError, "are damaged"),
    "config.json not JSON": ("config.json", lambda b: b"{", "model", OSError, "config.json"),
    # transformers only warns, and builds a Higgs Audio v3 config from the other model's fields
    "config.json of another model_type": ("config.json", lambda b: json.dumps({**json.loads(b), "model_type": "llama"})
                                          .encode(), "model", ValueError, "holds a config of model_type 'llama'"),
    # transformers reads these as a missing file: generation would silently use its defaults, not the repo's
    "generation_config.json not JSON": ("generation_config.json", lambda b: b"{", "model", OSError,
                                        "generation_config.json' cannot be read as JSON"),
    "generation_config.json a list": ("generation_config.json", lambda b: b"[1]", "model", OSError,
                                      "generation_config.json' holds a JSON list"),
    "tokenizer.json not JSON": ("tokenizer.json", lambda b: b"{", "processor", ValueError,
                                "Could not read the tokenizer or processor files in"),
    "processor_config.json not JSON": ("processor_config.json", lambda b: b"{", "processor", OSError,
                                       "processor_config.json"),
    "tokenizer_config.json not JSON": ("tokenizer_config.json", lambda b: b"[1,", "processor", ValueError,
                                       "Could not read the tokenizer or processor files in"),
}


@pytest.mark.parametrize("case", sorted(MODEL_FOLDER_CASES))
def test_converted_model_folder(case, model_folder, tmp_path):
    from higgs_v3.cli.models import load_model, load_processor

    name, damage, loader, error_type, fragment = MODEL_FOLDER_CASES[case]
    folder = tmp_path / "model"
    folder.mkdir()
    for path in model_folder.iterdir():
        os.symlink(path, folder / path.name)
    data = (model_folder / name).read_bytes()
    (folder / name).unlink()
    (folder / name).write_bytes(damage(data))
    with nothing_lost(tmp_path), expect(error_type, fragment, str(folder)):
        load_model(folder, "cpu", "float32") if loader == "model" else load_processor(folder)


# ============================================================================================== failing writers
class DiskFull:
    """A writer that writes part of its output and then fails as a full disk does (ENOSPC)."""

    def __init__(self, error=errno.ENOSPC):
        self.error = error
        self.calls = 0

    def fail(self, path) -> None:
        self.calls += 1
        with open(path, "wb") as file:
            file.write(b"partial")
        raise OSError(self.error, os.strerror(self.error), str(path))


def _libsndfile_full(folder, monkeypatch):
    """libsndfile's own error on a full disk (a RuntimeError): an OSError naming the file, the old file kept."""
    def fail(file, *args, **kwargs):  # save_audio encodes in memory, then writes the bytes
        raise soundfile.LibsndfileError(1, "Error : system error (No space left on device)")

    monkeypatch.setattr(soundfile, "write", fail)
    with expect(OSError, "Could not write", "old.wav", "No space left on device", "previous file"):
        save_audio(np.zeros(2400, dtype=np.float32), folder / "old.wav")


def _safetensors_full(folder, monkeypatch):
    import safetensors.torch
    from safetensors import SafetensorError

    def fail(tensors, path, metadata=None):
        Path(path).write_bytes(b"partial")
        raise SafetensorError("Error while serializing: IoError(No space left on device)")

    monkeypatch.setattr(safetensors.torch, "save_file", fail)
    with expect(OSError, "Could not write", "voice.safetensors", "No space left on device"):
        HiggsAudioV3Voice(codes=torch.ones(2, C, dtype=torch.long)).save(folder / "voice.safetensors")


def _save_audio_full(folder, monkeypatch, error=errno.ENOSPC):
    disk = DiskFull(error)
    monkeypatch.setattr(Path, "write_bytes", lambda path, *a, **k: disk.fail(path))  # save_audio's bytes
    with expect(OSError, os.strerror(error)):
        save_audio(np.zeros(2400, dtype=np.float32), folder / "old.wav")
    assert disk.calls == 1


def _voice_save_full(suffix):
    def run(folder, monkeypatch):
        disk = DiskFull()
        if suffix == ".safetensors":
            import safetensors.torch

            monkeypatch.setattr(safetensors.torch, "save_file", lambda t, path, metadata=None: disk.fail(path))
        else:
            monkeypatch.setattr(Path, "write_text", lambda self, *a, **k: disk.fail(self))
        target = folder / f"voice{suffix}"
        with expect(OSError, "No space left"):
            HiggsAudioV3Voice(codes=torch.ones(2, C, dtype=torch.long)).save(target)
    return run


def _codes_save_full(folder, monkeypatch):
    import safetensors.torch

    from higgs_v3.longform_higgs_v3 import ChunkResult, SpeechResult

    disk = DiskFull()
    monkeypatch.setattr(safetensors.torch, "save_file", lambda t, path, metadata=None: disk.fail(path))
    chunk = ChunkResult("Hi.", torch.zeros(2, C, dtype=torch.long), torch.zeros(1920), True, 0, 25)
    result = SpeechResult(torch.zeros(1920), SR, [chunk], 0.3, 0.1, 10)
    with expect(OSError, "No space left"):
        cli_main.save_codes(result, folder / "codes.safetensors")


def _cli_write_full(folder, monkeypatch, capsys):
    """The CLI's writing step on a full disk: exit 2 with one line, the old -o intact, no temporary file."""
    from higgs_v3.longform_higgs_v3 import ChunkResult, SpeechResult

    args = cli_main.build_parser().parse_args(["speak", "Hi", "-o", str(folder / "old.wav"), "-q"])
    request = cli_main.SpeakRequest.from_args(args)
    chunk = ChunkResult("Hi.", torch.zeros(2, C, dtype=torch.long), torch.zeros(1920), True, 0, 25)
    result = SpeechResult(torch.zeros(1920), SR, [chunk], 0.3, 0.1, 10)
    disk = DiskFull()
    monkeypatch.setattr(Path, "write_bytes", lambda path, *a, **k: disk.fail(path))  # save_audio's bytes
    monkeypatch.setattr(cli_main, "cmd_speak", lambda a: request.write(result) and 0)
    code = cli_main.main(["speak", "Hi", "-o", str(folder / "old.wav")])
    err = capsys.readouterr().err
    assert code == 2 and disk.calls == 1
    assert_one_line(err, "higgs-v3: error: ", "No space left on device")


def _read_only_folder(kind):
    """A read-only folder: chmod where permission bits apply; as root (bits ignored) the writer fails as on a
    read-only mount (EROFS)."""
    def run(folder, monkeypatch):
        target = folder / "ro"
        target.mkdir()
        (target / "old.wav").write_bytes(audio_bytes("wav", seconds=0.2))
        if IS_ROOT:
            disk = DiskFull(errno.EROFS)
            monkeypatch.setattr(Path, "write_bytes", lambda self, *a, **k: disk.fail(self))
            monkeypatch.setattr(Path, "write_text", lambda self, *a, **k: disk.fail(self))
            fragment = "Read-only file system"
        else:
            target.chmod(0o555)
            fragment = "Permission denied"
        try:
            with expect(OSError, fragment):
                if kind == "audio":
                    save_audio(np.zeros(2400, dtype=np.float32), target / "old.wav")
                else:
                    HiggsAudioV3Voice(codes=torch.ones(2, C, dtype=torch.long)).save(target / "v.json")
        finally:
            target.chmod(0o755)
    return run


def _cli_probe_refuses(kind):
    """The CLI probes its output folder up front (root ignores permission bits: a fake failing file creation)."""
    def run(folder, monkeypatch, capsys):
        if kind == "read-only":
            monkeypatch.setattr(tempfile, "NamedTemporaryFile",
                                lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EROFS, os.strerror(errno.EROFS))))
            fragment = "creating a file in"
        else:  # a format libsndfile cannot write here, although the extension is accepted
            monkeypatch.setattr(soundfile, "write",
                                lambda *a, **k: (_ for _ in ()).throw(soundfile.LibsndfileError(1, "Format not supported")))
            fragment = "a test write in its format fails"
        monkeypatch.chdir(folder)
        monkeypatch.setattr(cli_main, "load_model", lambda *a: pytest.fail("model loaded"))
        code = cli_main.main(["speak", "Hi", "-o", "old.wav"])
        err = capsys.readouterr().err
        assert code == 2
        assert_one_line(err, fragment)
    return run


def _convert_full(stage):
    """A conversion that fails while writing (a full disk in the weights, or in the completion marker of a cache
    entry), or is interrupted: the previous output is intact and no staging folder is left."""
    def run(folder, monkeypatch, original):
        output = folder / "converted"
        output.mkdir()
        (output / "keep.txt").write_text("previous conversion")

        def small_output(source, plan, staging, split, **kwargs):  # what is written does not matter here
            (staging / "config.json").write_text("{}")
            return ["model.safetensors"], None, None

        monkeypatch.setattr(convert_checkpoint, "_write_and_verify", small_output)
        if stage == "weights":
            disk = DiskFull()
            monkeypatch.setattr(convert_checkpoint, "_write_and_verify", lambda source, plan, staging, split, **k:
                                disk.fail(staging / "model.safetensors"))
            with expect(OSError, "No space left"):
                convert_checkpoint.convert(original, output, overwrite=True, verify=False, without_codec=True)
        elif stage == "interrupt":
            def interrupted(*args, **kwargs):
                raise KeyboardInterrupt

            monkeypatch.setattr(convert_checkpoint, "_write_and_verify", interrupted)
            code = cli_main.main(["convert", "--input", str(original), "--output", str(output), "--overwrite",
                                  "--without-codec", "--no-verify"])
            assert code == 130
        elif stage == "swap":  # the second rename fails: the old output comes back on the next run
            rename = os.rename

            def failing_rename(source, target):
                if "_converting_" in str(source):
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
                return rename(source, target)

            monkeypatch.setattr(os, "rename", failing_rename)
            with expect(OSError, "Input/output error"):
                convert_checkpoint.convert(original, output, overwrite=True, verify=False, without_codec=True)
            monkeypatch.setattr(os, "rename", rename)
            assert not output.exists()  # lost for the moment: the next run restores it
            folders.clean_stale_siblings(output)
        assert (output / "keep.txt").read_text() == "previous conversion"
        assert sorted(p.name for p in folder.iterdir()) == ["converted"]
    return run


WRITER_CASES = {
    "save_audio on a full disk": _save_audio_full,
    "save_audio on a full disk (libsndfile's error)": _libsndfile_full,
    "voice on a full disk (safetensors' error)": _safetensors_full,
    "save_audio with an I/O error": lambda f, m: _save_audio_full(f, m, errno.EIO),
    "save_audio over quota": lambda f, m: _save_audio_full(f, m, errno.EDQUOT),
    "voice .safetensors on a full disk": _voice_save_full(".safetensors"),
    "voice .json on a full disk": _voice_save_full(".json"),
    "codes on a full disk": _codes_save_full,
    "CLI output on a full disk": _cli_write_full,
    "save_audio into a read-only folder": _read_only_folder("audio"),
    "voice into a read-only folder": _read_only_folder("voice"),
    "CLI output folder not writable": _cli_probe_refuses("read-only"),
    "CLI output format not writable": _cli_probe_refuses("format"),
    "conversion on a full disk": _convert_full("weights"),
    "conversion interrupted (Ctrl-C)": _convert_full("interrupt"),
    "conversion's swap fails between the renames": _convert_full("swap"),
}


@pytest.mark.parametrize("case", sorted(WRITER_CASES))
def test_failing_writer(case, tmp_path, monkeypatch, capsys, request):
    run = WRITER_CASES[case]
    (tmp_path / "old.wav").write_bytes(audio_bytes("wav", seconds=0.3))
    (tmp_path / "voice.json").write_text("previous voice")
    (tmp_path / "voice.safetensors").write_bytes(b"previous voice")
    (tmp_path / "codes.safetensors").write_bytes(b"previous codes")
    parameters = run.__code__.co_varnames[: run.__code__.co_argcount]
    extra = {"capsys": capsys} if "capsys" in parameters else {}
    if "original" in parameters:
        extra["original"] = request.getfixturevalue("original")
        folder = tmp_path / "conversion"
        folder.mkdir()
        run(folder, monkeypatch, **extra)
        return
    with nothing_lost(tmp_path, allowed_new=("ro/old.wav",)):
        run(tmp_path, monkeypatch, **extra)


# ============================================================================================== conversion leftovers
def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def _leftover(folder: Path, name: str, owner: dict | None | str = None, age: float = 0.0) -> Path:
    path = folder / name
    path.mkdir()
    (path / "model.safetensors").write_bytes(b"x" * 1000)
    if isinstance(owner, dict):
        (path / folders.OWNER_FILE).write_text(json.dumps(owner))
    elif isinstance(owner, str):
        (path / folders.OWNER_FILE).write_text(owner)
    if age:
        os.utime(path, (time.time() - age, time.time() - age))
    return path


def _host():
    import socket

    return socket.gethostname()


LEFTOVER_CASES: dict[str, tuple] = {
    # name: (make leftovers(folder, output), names expected afterwards, output content expected)
    "staging of a dead process": (lambda f, o: _leftover(f, "out_converting_aa11", {"pid": _dead_pid(), "host": _host()}),
                                  ["out"], "current"),
    "staging of a live process": (lambda f, o: _leftover(f, "out_converting_bb22", {"pid": os.getppid(), "host": _host()}),
                                  ["out", "out_converting_bb22"], "current"),
    "staging of another host": (lambda f, o: _leftover(f, "out_converting_cc33", {"pid": 1, "host": "elsewhere"}),
                                ["out", "out_converting_cc33"], "current"),
    "staging without owner, fresh": (lambda f, o: _leftover(f, "out_converting_dd44"), ["out", "out_converting_dd44"],
                                     "current"),
    "staging without owner, old": (lambda f, o: _leftover(f, "out_converting_ee55", age=3600), ["out"], "current"),
    "staging with a damaged owner file": (lambda f, o: _leftover(f, "out_converting_ff66", "{pid"), ["out"], "current"),
    "replaced after a finished swap": (lambda f, o: _leftover(f, "out_replaced_1234"), ["out"], "current"),
    "killed between the renames": (lambda f, o: (shutil.rmtree(o), (f / "old").mkdir(), (f / "old" / "state.txt")
                                                 .write_text("old"), os.rename(f / "old", f / "out_replaced_9999"),
                                                 _leftover(f, "out_converting_9999", {"pid": _dead_pid(), "host": _host()})),
                                   ["out"], "old"),
    "replaced while its run is live": (lambda f, o: (_leftover(f, "out_replaced_7777"), _leftover(
        f, "out_converting_7777", {"pid": os.getppid(), "host": _host()})),
        ["out", "out_converting_7777", "out_replaced_7777"], "current"),
    "another output's leftovers": (lambda f, o: _leftover(f, "other_converting_1111", {"pid": _dead_pid(), "host": _host()}),
                                   ["other_converting_1111", "out"], "current"),
}


@pytest.mark.parametrize("case", sorted(LEFTOVER_CASES))
def test_conversion_leftovers(case, tmp_path):
    make, expected, content = LEFTOVER_CASES[case]
    output = tmp_path / "out"
    output.mkdir()
    (output / "state.txt").write_text("current")
    make(tmp_path, output)
    folders.clean_stale_siblings(output)
    assert sorted(p.name for p in tmp_path.iterdir()) == expected
    assert (output / "state.txt").read_text() == content


def _damage_cache(kind):
    def damage(entry: Path):
        marker = entry / folders.COMPLETE_FILE
        if kind == "missing file":
            (entry / "model.safetensors").unlink()
        elif kind == "truncated file":
            data = (entry / "model.safetensors").read_bytes()
            (entry / "model.safetensors").write_bytes(data[: len(data) // 2])
        elif kind == "no marker":
            marker.unlink()
        elif kind == "damaged marker":
            marker.write_text("{not json")
        elif kind == "missing config":
            (entry / "config.json").unlink()
    return damage


CACHE_CASES = {kind: _damage_cache(kind) for kind in
               ("missing file", "truncated file", "no marker", "damaged marker", "missing config")}


@pytest.mark.parametrize("case", sorted(CACHE_CASES))
def test_damaged_cache_entry_is_reported_and_rebuilt(case, original, tmp_path, monkeypatch, caplog):
    calls = []

    def fake_conversion(source, target, **kwargs):  # the conversion itself is tested in test_convert.py
        calls.append(target)
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        (target / "config.json").write_text('{"model_type": "higgs_audio_v3"}')
        (target / "model.safetensors").write_bytes(bytes(range(256)) * 64)

    monkeypatch.setattr(conversion_cache, "convert", fake_conversion)
    cache = tmp_path / "cache"
    entry = conversion_cache.converted_path(original, cache)
    assert conversion_cache.converted_path(original, cache) == entry and len(calls) == 1  # complete: reused
    CACHE_CASES[case](entry)
    from transformers.utils import logging as transformers_logging

    transformers_logging.get_logger("higgs_v3").propagate = True
    with caplog.at_level("WARNING"):
        assert conversion_cache.converted_path(original, cache) == entry
    assert len(calls) == 2
    warnings = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0] and str(entry) in warnings[0], caplog.text
    assert folders.check_complete(entry, checksums=True) is None


def test_concurrent_conversions_into_one_cache_convert_once(original, tmp_path, monkeypatch):
    """Two callers asking for one missing entry at once: the second waits on the cache lock and reuses the first's
    entry instead of converting again (or replacing it while it is read)."""
    import threading

    calls = []

    def slow_conversion(source, target, **kwargs):
        calls.append(target)
        time.sleep(0.3)
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")

    monkeypatch.setattr(conversion_cache, "convert", slow_conversion)
    results = []
    threads = [threading.Thread(target=lambda: results.append(conversion_cache.converted_path(original, tmp_path)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(set(results)) == 1 and len(results) == 2


# ============================================================================================== bounds
def _sampler_memory():
    sampler = HiggsAudioV3SeededSampler(torch.tensor([1, 2]), C, prompt_length=4)
    scores = torch.zeros(2 * C, 1026)
    for step in (0, 10**6):  # a step a million rows in: the table is still one block
        sampler(torch.zeros(2 * C, 4 + step, dtype=torch.long) if step < 10 else _StepIds(2 * C, 4 + step), scores)
        assert sampler.uniforms.shape == (HiggsAudioV3SeededSampler.block_steps, 2 * C)


class _StepIds:
    """Stands in for `input_ids` at a late step: the sampler reads only its shape."""

    def __init__(self, rows, length):
        self.shape = (rows, length)


def _max_new_tokens_clipped(model):
    out = model.generate(input_ids=torch.tensor([[151667, 151672, 9707, 151670]]), max_new_tokens=10**6, seed=0,
                         max_positions=12, return_dict_in_generate=True)
    assert out.sequences.shape[1] <= 12 - 4


def _max_seconds_refused(model):
    with expect(ValueError, "max_seconds 4e+07 is more than one chunk can hold", "4096 positions (max_positions)",
                "163.56 s"):
        max_new_tokens_for(model, 4e7)
    # Lifted (max_positions=None, as generate takes it): the bound is the model's position embeddings instead.
    spec, embeddings = model.config.audio_spec, model.config.get_text_config().max_position_embeddings
    assert embeddings > 4096
    assert max_new_tokens_for(model, 200.0, max_positions=None) == spec.rows_for_seconds(200.0) > 4096
    longest = spec.seconds(spec.frames(embeddings))
    with expect(ValueError, f"max_seconds 4e+07 is more than one chunk can hold: prompt plus audio rows are at most "
                f"{embeddings} positions (the model's max_position_embeddings; max_positions=None), at most "
                f"{longest:g} s"):
        max_new_tokens_for(model, 4e7, max_positions=None)


BOUND_CASES = {
    "sampler table independent of max_new_tokens": lambda model: _sampler_memory(),
    "max_new_tokens 10**6 clipped to the positions": _max_new_tokens_clipped,
    "max_seconds past the positions refused": _max_seconds_refused,
}


@pytest.mark.parametrize("case", sorted(BOUND_CASES))
def test_bounds(case, model):
    BOUND_CASES[case](model)


# ============================================================================================== real interruptions
def _environment(tmp_path: Path) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HIGGS_V3_CACHE": str(tmp_path / "cache"), "HIGGS_V3_DEBUG": "",
            "PYTHONPATH": str(ROOT.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _wait_for(condition, process, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, "the process ended before the signal"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.integration
def test_sigkill_mid_conversion_then_the_next_run_cleans_up(original, tmp_path):
    """SIGKILL of a real `convert_checkpoint.py --overwrite` once its staging folder is written, before it replaces the
    output: the old output stays; the next run removes the dead run's staging folder and replaces the output."""
    output = tmp_path / "out"
    output.mkdir()
    (output / "keep.txt").write_text("previous")
    args = ["--input", str(original), "--output", str(output), "--overwrite", "--without-codec", "--no-verify"]
    # The script, held where the kill must land (it says so on stdout, then waits): no race with the writing.
    held = ("import runpy, sys, threading; from higgs_v3.conversion import folders; "
            "folders.swap_into_place = lambda *_: (print('staged', flush=True), threading.Event().wait()); "
            f"runpy.run_path({str(ROOT / 'convert_checkpoint.py')!r}, "
            "run_name='__main__')")
    process = subprocess.Popen([sys.executable, "-c", held, *args], env=_environment(tmp_path),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    staging = lambda: [p for p in tmp_path.iterdir() if "_converting_" in p.name]  # noqa: E731
    assert process.stdout.readline() == "staged\n", process.stderr.read()
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert (output / "keep.txt").read_text() == "previous"
    assert len(staging()) == 1  # the dead run's leftover
    with contextlib.redirect_stdout(io.StringIO()):  # the next run, in this process (a fresh one costs seconds)
        assert cli_main.main(["convert", *args]) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["out"]
    assert (output / "config.json").is_file() and not (output / "keep.txt").exists()
    assert not (output / folders.OWNER_FILE).exists()


@pytest.mark.integration
def test_sigint_mid_generation_keeps_the_old_output(tmp_path):
    """SIGINT (Ctrl-C) of a real `higgs-v3 speak` while it generates: exit 130 with one line, the old -o intact, no
    temporary file."""
    (tmp_path / "speech.wav").write_bytes(audio_bytes("wav", seconds=0.3))
    before = snapshot(tmp_path)
    text = " ".join(f"Sentence number {i} is here." for i in range(400))
    args = [str(Path(sys.executable).with_name("higgs-v3")), "speak", text, "--model", "tiny-random", "-o",
            "speech.wav", "--batch-size", "1", "--max-chars", "20", "--seed", "0"]
    # Ctrl-C as a terminal delivers it: a test worker may run with SIGINT ignored (pytest-xdist's, in CI), which a
    # child inherits and Python then keeps (no KeyboardInterrupt at all); restored to the default before the exec.
    process = subprocess.Popen(args, cwd=tmp_path, env=_environment(tmp_path), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen: list[str] = []

    def speaking() -> bool:
        line = process.stderr.readline()
        seen.append(line)
        return "speaking" in line or "s of audio" in line

    _wait_for(speaking, process, seconds=300)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, "".join(seen) + err
    assert err.strip().splitlines()[-1] == "higgs-v3: interrupted"
    after = {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("cache/")}
    assert after == before


# ============================================================================================== the documented table
def case_counts() -> dict[str, int]:
    """Bad inputs and faults tried per surface (the rows of docs/RELIABILITY.md)."""
    return {
        "reference audio files": len(AUDIO_CASES) + 1,
        "voice files": len(VOICE_CASES) + len(PROCESSOR_VOICE_CASES),
        "text, tags and prompt references": len(TEXT_CASES) + len(TEXT_ROUTE_CASES),
        "generate options": len(GENERATE_CASES),
        "command line": len(CLI_CASES),
        "original checkpoints": len(CHECKPOINT_CASES),
        "converted model folders": len(MODEL_FOLDER_CASES),
        "failing writers (full disk, read-only, interrupted)": len(WRITER_CASES),
        "conversion leftovers, damaged and concurrent caches": len(LEFTOVER_CASES) + len(CACHE_CASES) + 1,
        "size bounds": len(BOUND_CASES),
        "signals to a real subprocess (integration)": 2,
    }


def markdown_table() -> str:
    counts = case_counts()
    header = ("| surface | bad inputs tried | clear errors | tracebacks | silent wrong outputs | unbounded cases | "
              "losses |\n|---|---:|---:|---:|---:|---:|---:|\n")
    rows = "".join(f"| {name} | {n} | {n} | 0 | 0 | 0 | 0 |\n" for name, n in counts.items())
    total = sum(counts.values())
    return header + rows + f"| **total** | **{total}** | **{total}** | **0** | **0** | **0** | **0** |\n"


def test_the_documented_table_is_this_module():
    """docs/RELIABILITY.md shows the table these cases produce (`python tests/test_reliability.py` prints it); every
    case above asserts a clear error and that nothing was lost, so a failing case fails the run, not the table."""
    assert sum(case_counts().values()) >= 150
    assert markdown_table() in DOC.read_text(encoding="utf-8")


if __name__ == "__main__":
    print(markdown_table(), end="")
