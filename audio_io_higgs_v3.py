# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Audio in and out for Higgs Audio v3: reference-clip loading and validation, reusable voices, writing waveforms.

- `prepare_reference_waveform` turns a path, a numpy array or a torch tensor into the 24 kHz mono float32 waveform
  the codec encodes: integer PCM scaled to [-1, 1], channels mixed to mono (mean), resampled with torchaudio's sinc
  algorithm (`codec_higgs_v3.resample_audio`), padded with zeros at the end to at least 1 s; empty, non-finite and
  over-long clips are refused with a `ValueError`. This is the official server's front end (sglang-omni's
  `prepare_higgs_reference` and the codec's `encode_reference`), so a clip gives the codes the model was served with.
- `HiggsAudioV3Voice` is an encoded reference (raw codec codes `[frames, num_codebooks]` plus the transcript), saved
  as safetensors or JSON (never pickle: voice files are shared between users) and passed to later processor calls.
- `save_audio` writes a waveform with soundfile.

`soundfile` is imported inside `try/except ImportError` so that loading this module as Hub remote code does not demand
it; the functions that need it say what to install.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from transformers.utils import logging


try:
    import soundfile
except ImportError:  # pragma: no cover - soundfile is an install requirement; the Hub loader must not demand it
    soundfile = None

from .codec_higgs_v3 import resample_audio
from .delay_higgs_v3 import HiggsAudioV3AudioSpec


_RATES = HiggsAudioV3AudioSpec()  # the default sampling and frame rates, from their one home


logger = logging.get_logger(__name__)

MIN_REFERENCE_SECONDS: float = 1.0
"""Shorter reference clips are padded with zeros at the end to this duration."""

MAX_REFERENCE_SECONDS: float = 100.0
"""Longer reference clips are refused (the official server's limit; 5 to 30 s of clean speech is plenty)."""

AudioLike = str | os.PathLike | np.ndarray | torch.Tensor
"""A reference clip: a file path (wav/flac/ogg/... via libsndfile), or samples as a numpy array or torch tensor."""

# Integer PCM formats and their full scale (the value that maps to 1.0).
_PCM_FULL_SCALE: dict[np.dtype, float] = {
    np.dtype(np.int16): 32768.0,
    np.dtype(np.int32): 2147483648.0,
    np.dtype(np.int8): 128.0,
}


# --------------------------------------------------------------------------------------------------- reference audio
def _read_audio_file(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """`path` -> (samples `[channels, N]` float32 in [-1, 1], sample rate)."""
    if soundfile is None:
        raise ImportError("Reading audio files needs the `soundfile` package: run `pip install soundfile`.")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Reference audio file {str(path)!r} does not exist.")
    try:
        samples, file_rate = soundfile.read(os.fspath(path), dtype="float32", always_2d=True)  # [N, channels]
    except Exception as error:  # soundfile raises LibsndfileError (a RuntimeError) for unknown or broken files
        raise ValueError(
            f"Could not read reference audio file {str(path)!r} ({error}); accepted are the formats libsndfile "
            "reads, e.g. wav, flac and ogg."
        ) from error
    return np.ascontiguousarray(samples.T), int(file_rate)


def _to_float_samples(samples: np.ndarray) -> np.ndarray:
    """Scale integer PCM to [-1, 1]; floats are kept (as float32 or float64). Other dtypes are refused."""
    dtype = samples.dtype
    if dtype in _PCM_FULL_SCALE:
        return samples.astype(np.float32) / _PCM_FULL_SCALE[dtype]
    if dtype == np.uint8:
        return (samples.astype(np.float32) - 128.0) / 128.0
    if np.issubdtype(dtype, np.floating):
        return samples if dtype == np.float64 else samples.astype(np.float32)
    raise ValueError(
        f"Reference audio has dtype {dtype}; accepted are float16/float32/float64 samples in [-1, 1] and integer PCM "
        "(int8, uint8, int16, int32), which is scaled to [-1, 1]."
    )


def _to_channels_first(samples: np.ndarray) -> np.ndarray:
    """`[N]`, `[C, N]`, `[N, C]` or `[1, C, N]` -> `[C, N]` (for 2-D input the shorter axis is the channel axis)."""
    if samples.ndim == 3 and samples.shape[0] == 1:
        samples = samples[0]
    if samples.ndim == 1:
        return samples[None, :]
    if samples.ndim == 2:
        return samples if samples.shape[0] <= samples.shape[1] else samples.T
    raise ValueError(
        f"Reference audio must be 1-D [samples] or 2-D [channels, samples] / [samples, channels]; got shape "
        f"{tuple(samples.shape)}."
    )


def prepare_reference_waveform(
    audio: AudioLike,
    sampling_rate: int | None = None,
    target_sampling_rate: int = _RATES.sampling_rate,
    min_seconds: float = MIN_REFERENCE_SECONDS,
    max_seconds: float = MAX_REFERENCE_SECONDS,
) -> torch.FloatTensor:
    """Load and validate a reference clip; return the 24 kHz mono float32 waveform `[N]` the codec encodes.

    Args:
        audio: a file path (read with soundfile: wav, flac, ogg, ...), or samples as a numpy array / torch tensor of
            shape `[N]`, `[channels, N]` or `[N, channels]` (the shorter axis of a 2-D array is the channel axis).
            Integer PCM (int8/uint8/int16/int32) is scaled to [-1, 1]; floats are expected in [-1, 1].
        sampling_rate: sample rate of `audio` in Hz. Required for arrays; for files it is read from the file (a
            value given here must then agree with it).
        target_sampling_rate: the codec's rate; the clip is resampled to it as torchaudio's `resample` does (the official
            server's resampler).
        min_seconds: shorter clips are padded with zeros at the end to this duration.
        max_seconds: longer clips are refused (the official server accepts up to 100 s).

    Returns:
        `torch.FloatTensor` of shape `[max(N', ceil(min_seconds * target_sampling_rate))]`, N' the resampled length.

    Raises:
        ValueError: unreadable file, missing or invalid `sampling_rate`, unsupported dtype or shape, empty clip, NaN
            or infinite samples, clip longer than `max_seconds`.
    """
    if isinstance(audio, (str, os.PathLike)):
        samples, file_rate = _read_audio_file(audio)
        if sampling_rate is not None and sampling_rate != file_rate:
            raise ValueError(
                f"sampling_rate={sampling_rate} was given but {str(audio)!r} is sampled at {file_rate} Hz; leave "
                "sampling_rate unset for files (it is read from the file)."
            )
        sampling_rate = file_rate
    elif isinstance(audio, (np.ndarray, torch.Tensor)):
        if isinstance(audio, torch.Tensor):
            audio = audio.detach().cpu()
            audio = (audio.float() if audio.dtype in (torch.bfloat16, torch.float16) else audio).numpy()
        if sampling_rate is None:
            raise ValueError(
                "sampling_rate is required when the reference audio is an array: pass the rate of its samples in Hz "
                "(for files it is read from the file)."
            )
        samples = _to_channels_first(_to_float_samples(np.asarray(audio)))
    else:
        raise ValueError(
            f"Reference audio must be a file path, a numpy array or a torch tensor; got {type(audio).__name__}."
        )
    if isinstance(sampling_rate, bool) or not isinstance(sampling_rate, (int, np.integer)) or sampling_rate <= 0:
        raise ValueError(f"sampling_rate must be a positive integer number of Hz, got {sampling_rate!r}.")
    sampling_rate = int(sampling_rate)

    if samples.size == 0:
        raise ValueError("Reference audio is empty (0 samples).")
    finite = np.isfinite(samples)
    if not finite.all():
        raise ValueError(
            f"Reference audio has NaN or infinite values ({int((~finite).sum())} of {samples.size}); pass a clean "
            "signal."
        )
    num_samples = samples.shape[-1]
    if num_samples > max_seconds * sampling_rate:
        raise ValueError(
            f"Reference audio is {num_samples / sampling_rate:.2f} s long ({num_samples} samples at {sampling_rate} "
            f"Hz); the longest accepted is {max_seconds:g} s. Trim it: 5 to 30 s of clean "
            "speech is enough to clone a voice."
        )
    peak = float(np.abs(samples).max())
    if peak > 1.0:
        logger.warning_once(
            f"Reference audio peaks at {peak:.4g}, outside [-1, 1]: float samples are expected in [-1, 1] (integer "
            "PCM is scaled automatically). Normalize the clip if it sounds distorted."
        )

    mono = torch.from_numpy(np.ascontiguousarray(samples.mean(axis=0), dtype=np.float32))  # [N]
    waveform = resample_audio(mono, sampling_rate, target_sampling_rate)  # [N'], torchaudio's algorithm (codec_higgs_v3)
    min_samples = int(np.ceil(min_seconds * target_sampling_rate))
    if waveform.shape[0] < min_samples:
        waveform = torch.nn.functional.pad(waveform, (0, min_samples - waveform.shape[0]))
    return waveform


# ------------------------------------------------------------------------------------------------------------ output
def save_audio(waveform: np.ndarray | torch.Tensor, path: str | os.PathLike, sampling_rate: int = _RATES.sampling_rate) -> Path:
    """Write a mono waveform (`[N]` or `[1, N]`, float in [-1, 1]) to `path`; the format follows the extension
    (`.wav` is written as 16-bit PCM, `.flac`, `.ogg`, ...). Returns the path."""
    if soundfile is None:
        raise ImportError("Writing audio files needs the `soundfile` package: run `pip install soundfile`.")
    if isinstance(waveform, torch.Tensor):
        waveform = waveform.detach().to(device="cpu", dtype=torch.float32).numpy()
    waveform = np.asarray(waveform, dtype=np.float32)
    if waveform.ndim == 2 and waveform.shape[0] == 1:
        waveform = waveform[0]
    if waveform.ndim != 1:
        raise ValueError(
            f"save_audio writes one mono waveform of shape [samples] or [1, samples]; got shape {waveform.shape}."
        )
    soundfile.write(os.fspath(path), waveform, int(sampling_rate))
    return Path(path)


# ------------------------------------------------------------------------------------------------------------ voices
VOICE_FILE_SUFFIXES: tuple[str, ...] = (".safetensors", ".json")
"""File names a saved voice may have (`HiggsAudioV3Voice.save`); any other path given as a reference is audio."""

VOICE_FORMAT = "higgs_audio_v3_voice"
VOICE_FORMAT_VERSION = 1


@dataclass
class HiggsAudioV3Voice:
    r"""
    A reusable voice: the **raw** codec codes of a reference clip (`[frames, num_codebooks]`, values in
    `0 .. codebook_size - 1` of the codec, no delay pattern, no BOC/EOC) and, optionally, its transcript. Passing the
    transcript gives the "clone with transcript" prompt layout, which usually copies the voice more closely.

    Saved as `.safetensors` (codes as a tensor, the rest as string metadata) or `.json`; never pickled, so a voice
    file from someone else cannot run code.

    Example:

    ```python
    >>> import torch
    >>> voice = HiggsAudioV3Voice(codes=torch.zeros(50, 8, dtype=torch.long), text="Hello there.")
    >>> voice.num_frames, voice.duration
    (50, 2.0)
    ```
    """

    codes: torch.LongTensor
    text: str | None = None
    sampling_rate: int = _RATES.sampling_rate
    frame_rate: int = _RATES.frame_rate
    # The format marker that `from_any` recognises: the same class imported twice (the installed `higgs_v3` package and
    # a Hub repo's remote code `transformers_modules....`) is two classes, so voices are checked by contract, not type.
    voice_format: ClassVar[str] = VOICE_FORMAT

    def __post_init__(self):
        codes = self.codes
        if isinstance(codes, np.ndarray):
            codes = torch.from_numpy(codes)
        integer = (torch.int64, torch.int32, torch.int16, torch.uint8)
        if not isinstance(codes, torch.Tensor) or codes.dtype not in integer:
            raise ValueError(
                "HiggsAudioV3Voice.codes must be an integer tensor of raw codec codes [frames, num_codebooks]; got "
                f"{type(self.codes).__name__} of dtype {getattr(self.codes, 'dtype', None)}."
            )
        if codes.dim() != 2 or codes.shape[0] == 0:
            raise ValueError(
                "HiggsAudioV3Voice.codes must have shape [frames, num_codebooks] with at least one frame; got shape "
                f"{tuple(codes.shape)}."
            )
        if int(codes.min()) < 0:
            raise ValueError(
                f"HiggsAudioV3Voice.codes must be non-negative codec codes; the smallest is {int(codes.min())}."
            )
        if self.text is not None and not isinstance(self.text, str):
            raise ValueError(f"HiggsAudioV3Voice.text must be a string or None, got {type(self.text).__name__}.")
        self.codes = codes.detach().to(device="cpu", dtype=torch.long).contiguous()

    @classmethod
    def from_any(cls, value, where: str = "the reference") -> HiggsAudioV3Voice:
        """`value` as a voice of this class: a `HiggsAudioV3Voice` from any import of this module (checked by its
        `voice_format` marker and fields, not its type) or a path to a saved voice file (`.safetensors` / `.json`)."""
        if isinstance(value, cls):
            return value
        if getattr(value, "voice_format", None) == VOICE_FORMAT:
            return cls(codes=value.codes, text=value.text, sampling_rate=value.sampling_rate, frame_rate=value.frame_rate)
        if isinstance(value, (str, os.PathLike)) and Path(value).suffix.lower() in VOICE_FILE_SUFFIXES:
            return cls.load(value)
        if isinstance(value, (str, os.PathLike)):
            raise ValueError(
                f"{where[:1].upper() + where[1:]} is the path {str(value)!r}, which is not a saved voice file (.safetensors "
                "/ .json). An audio clip is encoded into a voice first: voice = model.encode_reference(clip, text=...)."
            )
        raise ValueError(
            f"{where[:1].upper() + where[1:]} must be a HiggsAudioV3Voice (from model.encode_reference or "
            f"HiggsAudioV3Voice.load) or the path of a saved voice file (.safetensors / .json), got "
            f"{type(value).__name__}. Encode an audio clip with model.encode_reference(clip, text=...)."
        )

    @property
    def num_frames(self) -> int:
        """Codec frames of the clip."""
        return self.codes.shape[0]

    @property
    def num_codebooks(self) -> int:
        """Codes per frame."""
        return self.codes.shape[1]

    @property
    def duration(self) -> float:
        """Length of the encoded clip in seconds."""
        return self.num_frames / self.frame_rate

    def save(self, path: str | os.PathLike) -> Path:
        """Write the voice to `path` (`.safetensors` or `.json`, chosen by the extension) and return the path."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix == ".safetensors":
            from safetensors.torch import save_file

            metadata = {
                "format": VOICE_FORMAT,
                "version": str(VOICE_FORMAT_VERSION),
                "text": json.dumps(self.text),
                "sampling_rate": str(self.sampling_rate),
                "frame_rate": str(self.frame_rate),
            }
            save_file({"codes": self.codes}, str(path), metadata=metadata)
        elif suffix == ".json":
            record = {
                "format": VOICE_FORMAT,
                "version": VOICE_FORMAT_VERSION,
                "text": self.text,
                "sampling_rate": self.sampling_rate,
                "frame_rate": self.frame_rate,
                "codes": self.codes.tolist(),
            }
            path.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
        else:
            raise ValueError(f"A voice is saved as .safetensors or .json; got the file name {path.name!r}.")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> HiggsAudioV3Voice:
        """Read a voice written by `save` (`.safetensors` or `.json`)."""
        path = Path(path)
        suffix = path.suffix.lower()
        if not path.is_file():
            raise FileNotFoundError(f"Voice file {str(path)!r} does not exist.")
        if suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as f:
                metadata = f.metadata() or {}
                keys = list(f.keys())
                if keys != ["codes"]:
                    raise ValueError(
                        f"{str(path)!r} is not a Higgs Audio v3 voice file: it holds tensors {keys}, expected "
                        "['codes']."
                    )
                codes = f.get_tensor("codes")
            record = {
                "format": metadata.get("format"),
                "version": metadata.get("version"),
                "text": json.loads(metadata["text"]) if "text" in metadata else None,
                "sampling_rate": metadata.get("sampling_rate", _RATES.sampling_rate),
                "frame_rate": metadata.get("frame_rate", _RATES.frame_rate),
            }
        elif suffix == ".json":
            record = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(record, dict) or "codes" not in record:
                raise ValueError(f"{str(path)!r} is not a Higgs Audio v3 voice file: no 'codes' field.")
            codes = torch.tensor(record["codes"], dtype=torch.long)
        else:
            raise ValueError(f"A voice is loaded from .safetensors or .json; got the file name {path.name!r}.")
        if record.get("format") != VOICE_FORMAT:
            raise ValueError(
                f"{str(path)!r} is not a Higgs Audio v3 voice file: format is {record.get('format')!r}, expected "
                f"{VOICE_FORMAT!r}."
            )
        if int(record.get("version")) > VOICE_FORMAT_VERSION:
            raise ValueError(
                f"{str(path)!r} is a version {record.get('version')} voice file; this code reads versions up to "
                f"{VOICE_FORMAT_VERSION}. Update higgs-v3."
            )
        return cls(
            codes=codes,
            text=record.get("text"),
            sampling_rate=int(record.get("sampling_rate")),
            frame_rate=int(record.get("frame_rate")),
        )


__all__ = [
    "VOICE_FILE_SUFFIXES",
    "MAX_REFERENCE_SECONDS",
    "MIN_REFERENCE_SECONDS",
    "AudioLike",
    "HiggsAudioV3Voice",
    "prepare_reference_waveform",
    "save_audio",
]
