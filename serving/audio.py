# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""The response formats of the speech API, written by the installed libsndfile (soundfile): OpenAI's names, each a
libsndfile format and subtype. What this install cannot write is refused by name (`format_problem`), never replaced.

| name | written as | streamed as it is generated (`stream_format`) |
|---|---|---|
| `wav` | RIFF WAV, 16-bit PCM | yes: a header with unknown sizes (0xFFFFFFFF), then 16-bit PCM |
| `pcm` | raw 16-bit little-endian PCM, mono, at the model's rate (24 kHz) | yes |
| `flac`, `mp3`, `opus` (Ogg) | libsndfile's FLAC, MPEG layer III, Ogg Opus | no: sent whole |
| `aac` | not written by libsndfile | refused |
"""

from __future__ import annotations

import io
import struct

import numpy as np


FORMATS: dict[str, tuple[str, str] | None] = {
    "mp3": ("MP3", "MPEG_LAYER_III"),
    "opus": ("OGG", "OPUS"),
    "aac": None,
    "flac": ("FLAC", "PCM_16"),
    "wav": ("WAV", "PCM_16"),
    "pcm": ("RAW", "PCM_16"),
}
"""OpenAI's response formats -> (libsndfile format, subtype); None: libsndfile has no writer for it."""

STREAMED_FORMATS = ("wav", "pcm")
MEDIA_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac", "wav": "audio/wav",
               "pcm": "audio/L16"}


def writable_formats() -> list[str]:
    """The response formats this install's libsndfile writes (read from `soundfile` at run time)."""
    import soundfile

    formats = soundfile.available_formats()
    return [name for name, pair in FORMATS.items()
            if pair is not None and pair[0] in formats and pair[1] in soundfile.available_subtypes(pair[0])]


def format_problem(name: str, streamed: bool) -> str | None:
    """Why `name` cannot be the response format (`streamed`: sent as it is generated), or None."""
    if name not in FORMATS:
        accepted = ", ".join(writable_formats())
        return f"response_format {name!r} is not one of OpenAI's formats; accepted here: {accepted}."
    if name not in writable_formats():
        return (f"response_format {name!r} is not written by this server's libsndfile; accepted here: "
                f"{', '.join(writable_formats())}.")
    if streamed and name not in STREAMED_FORMATS:
        return (f"response_format {name!r} is sent whole; stream_format sends audio as it is generated in "
                f"{' or '.join(STREAMED_FORMATS)} only (omit stream_format for {name}).")
    return None


def encode(waveform: np.ndarray, name: str, sampling_rate: int) -> bytes:
    """A mono float waveform `[samples]` as one file of format `name` (16-bit where the format has samples)."""
    import soundfile

    kind, subtype = FORMATS[name]
    buffer = io.BytesIO()
    options = {"endian": "LITTLE"} if kind == "RAW" else {}
    soundfile.write(buffer, np.asarray(waveform, dtype=np.float32), sampling_rate, format=kind, subtype=subtype,
                    **options)
    return buffer.getvalue()


def wav_stream_header(sampling_rate: int) -> bytes:
    """A 16-bit mono WAV header with unknown sizes (0xFFFFFFFF, as streaming servers send it); 16-bit PCM follows."""
    unknown = 0xFFFFFFFF
    return (b"RIFF" + struct.pack("<I", unknown) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, sampling_rate,
            sampling_rate * 2, 2, 16) + b"data" + struct.pack("<I", unknown))


__all__ = ["FORMATS", "MEDIA_TYPES", "STREAMED_FORMATS", "encode", "format_problem", "wav_stream_header",
           "writable_formats"]
