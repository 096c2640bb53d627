# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Audio in and out for Higgs Audio v3: reference-clip loading and validation, reusable voices, writing waveforms.

- `prepare_reference_waveform` turns a path, an http(s) URL (fetched into memory), a numpy array or a torch tensor into
  the 24 kHz mono float32 waveform the codec encodes: integer PCM scaled to [-1, 1], channels mixed to mono (mean),
  resampled with torchaudio's sinc algorithm (`codec_higgs_v3.resample_audio`), padded with zeros at the end to at least
  1 s; empty, non-finite and over-long clips are refused with a `ValueError`. This is the official server's front end
  (sglang-omni's `prepare_higgs_reference` and the codec's `encode_reference`), so a clip gives the codes the model was
  served with.
- `HiggsAudioV3Voice` is an encoded reference (raw codec codes `[frames, num_codebooks]` plus the transcript), saved
  as safetensors or JSON (never pickle: voice files are shared between users) and passed to later processor calls.
- `save_audio` writes a waveform with soundfile. Every file written here goes through `atomic_output`: a temporary
  file beside the target, renamed into place (`os.replace`), so a failed or interrupted write leaves the previous
  file as it was and no partial file behind.

`soundfile` is imported inside `try/except ImportError` so that loading this module as Hub remote code does not demand
it; the functions that need it say what to install.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import secrets
from collections.abc import Iterator
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
REFERENCE_ADVICE = "Trim it: 5 to 30 s of clean speech is enough to clone a voice."
"""What a refusal of a too long reference clip advises (`prepare_reference_waveform(too_long_advice=...)`)."""
TARGET_ADVICE = "Split long recordings into sentences, one target each."
"""What a refusal of a too long training target advises (`model.encode_target`, `processor(audio_target=...)`)."""

AUDIO_OUTPUT_SUFFIXES: tuple[str, ...] = (".wav", ".flac", ".ogg", ".mp3", ".aiff", ".au", ".caf", ".w64", ".rf64")
"""File names `save_audio` writes (the format follows the extension; `.wav` is 16-bit PCM)."""

MAX_VOICE_JSON_BYTES: int = 8 * 1024 * 1024
"""A `.json` voice file larger than this is refused before it is read (a 100 s voice takes about 0.2 MB)."""

REFERENCE_URL_TIMEOUT: float = 30.0
"""Seconds a reference clip's URL may take per network operation (connect, each read) before it is refused."""

MAX_REFERENCE_URL_BYTES: int = 64 * 1024 * 1024
"""A reference clip's URL serving more bytes than this is refused (100 s of 48 kHz stereo float WAV is 38 MB)."""

_MAX_JSON_DEPTH = 4  # a voice record is {"codes": [[...]]}: anything nested deeper is not a voice

AudioLike = str | os.PathLike | np.ndarray | torch.Tensor
"""A reference clip: a file path (wav/flac/ogg/... via libsndfile), an `http(s)://` URL of such a file, or samples as a
numpy array or torch tensor."""

# Integer PCM formats and their full scale (the value that maps to 1.0).
_PCM_FULL_SCALE: dict[np.dtype, float] = {
    np.dtype(np.int16): 32768.0,
    np.dtype(np.int32): 2147483648.0,
    np.dtype(np.int8): 128.0,
}


# --------------------------------------------------------------------------------------------------- reference audio
def _unreadable_audio(path: str | os.PathLike, error: BaseException, kind: str = "file") -> ValueError:
    reason = " ".join(str(error).split()) or type(error).__name__
    return ValueError(
        f"Could not read reference audio {kind} {str(path)!r} ({reason}); accepted are the formats libsndfile reads, "
        "e.g. wav, flac and ogg."
    )


def _read_audio_file(
    path: str | os.PathLike, max_seconds: float = MAX_REFERENCE_SECONDS, advice: str = REFERENCE_ADVICE
) -> tuple[np.ndarray, int]:
    """`path` -> (samples `[channels, N]` float32 in [-1, 1], sample rate). The length is read from the file's header
    first: a file longer than `max_seconds` is refused before any sample is read."""
    if soundfile is None:
        raise ImportError("Reading audio files needs the `soundfile` package: run `pip install soundfile`.")
    if os.path.isdir(path):
        raise IsADirectoryError(f"Reference audio file {str(path)!r} is a folder; give an audio file (wav, flac, ogg).")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Reference audio file {str(path)!r} does not exist.")
    return _decode_audio(os.fspath(path), path, "file", max_seconds, advice)


def _decode_audio(
    source, name: str | os.PathLike, kind: str, max_seconds: float, advice: str = REFERENCE_ADVICE
) -> tuple[np.ndarray, int]:
    """Decode a file path or an in-memory file (`io.BytesIO`) with soundfile, refusals naming the reference audio
    `kind` ("file" or "URL") `name`: the header first (length, rate, channels), then the samples."""
    label = f"Reference audio {kind} {str(name)!r}"
    try:
        info = soundfile.info(source)
    except Exception as error:  # soundfile raises LibsndfileError (a RuntimeError) or TypeError for non-audio files
        raise _unreadable_audio(name, error, kind) from error
    if info.samplerate <= 0 or info.channels <= 0:
        raise ValueError(f"{label} has {info.samplerate} Hz and {info.channels} channels in its header; it is damaged.")
    if info.frames > max_seconds * info.samplerate:
        raise ValueError(
            f"{label} is {info.frames / info.samplerate:.2f} s long ({info.frames} samples "
            f"at {info.samplerate} Hz); the longest accepted is {max_seconds:g} s. {advice}"
        )
    if isinstance(source, io.IOBase):
        source.seek(0)
    try:
        samples, file_rate = soundfile.read(source, dtype="float32", always_2d=True)  # [N, channels]
    except Exception as error:  # a header that reads but a body that does not (truncated, corrupt)
        raise _unreadable_audio(name, error, kind) from error
    truncation = _truncation(info, samples.shape[0])
    if truncation is not None:
        raise ValueError(f"{label} is truncated: {truncation}. Export the clip again.")
    return np.ascontiguousarray(samples.T), int(file_rate)


def is_audio_url(value) -> bool:
    """Whether a reference is an `http://` or `https://` address (fetched by `prepare_reference_waveform`)."""
    return isinstance(value, str) and value.strip().lower().startswith(("http://", "https://"))


def _read_audio_url(
    url: str,
    max_seconds: float = MAX_REFERENCE_SECONDS,
    timeout: float | None = None,
    max_bytes: int | None = None,
    advice: str = REFERENCE_ADVICE,
) -> tuple[np.ndarray, int]:
    """Fetch `url` (at most `REFERENCE_URL_TIMEOUT` seconds per network operation, at most `MAX_REFERENCE_URL_BYTES`
    bytes, read into memory: nothing is written to disk) and decode it as `_read_audio_file` decodes a file.
    Refusals are one-line `ValueError`s naming the URL: unreachable (with the reason), too large, not audio."""
    import http.client
    import urllib.error
    import urllib.request

    if soundfile is None:
        raise ImportError("Reading audio files needs the `soundfile` package: run `pip install soundfile`.")
    timeout = REFERENCE_URL_TIMEOUT if timeout is None else timeout
    max_bytes = MAX_REFERENCE_URL_BYTES if max_bytes is None else max_bytes
    too_large = (
        f"Reference audio URL {url!r} serves more than {max_bytes} bytes ({max_bytes / 2**20:g} MiB, the most "
        f"fetched); a reference clip needs no more than 30 s of clean speech: download it, trim it and pass the file."
    )
    request = urllib.request.Request(url.strip(), headers={"User-Agent": "higgs-v3"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http(s) only, checked above
            declared = response.headers.get("Content-Length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise ValueError(too_large)
            data = response.read(max_bytes + 1)
    except urllib.error.HTTPError as error:
        raise ValueError(f"Could not fetch reference audio URL {url!r} (HTTP {error.code} {error.reason}); check the "
                         "address, or download the clip and pass its file path.") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
        reason = getattr(error, "reason", None) or error
        reason = " ".join(str(reason).split()) or type(error).__name__
        raise ValueError(f"Could not fetch reference audio URL {url!r} ({reason}); check the address and the network, "
                         "or download the clip and pass its file path.") from None
    if len(data) > max_bytes:
        raise ValueError(too_large)
    return _decode_audio(io.BytesIO(data), url, "URL", max_seconds, advice)


# libsndfile's log of a sample chunk larger than the file: WAV/RF64 `data`, AIFF `SSND`, AU `Data Size`, W64 `riff`.
_CHUNK_SIZE = re.compile(r"^\s*(?:data|SSND|Data Size|riff)\s*: (\d+) \(should be (\d+)\)", re.MULTILINE)


def _truncation(info, frames_read: int) -> str | None:
    """Why a file that libsndfile reads is cut short, or None: a sample chunk larger than what the file holds (an
    unfinished header, size 0 or 0xFFFFFFFF, is not a truncation), or fewer samples than the header announces."""
    match = _CHUNK_SIZE.search(info.extra_info or "")
    if match and 0 < int(match.group(2)) < int(match.group(1)) < 0xFFFFFF00:
        return f"its header announces {match.group(1)} bytes of samples but the file holds {match.group(2)}"
    if info.frames > 0 and frames_read < info.frames - max(0.05 * info.samplerate, 0.1 * info.frames):  # estimates: 10 %
        return f"its header announces {info.frames} samples but {frames_read} could be read"
    return None


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


def clip_source(clip, sampling_rate: int | None, where: str) -> tuple[object, int | None]:
    """`(audio, rate)` for `prepare_reference_waveform` of a clip as the processor and long-form take it: an audio
    dict unpacked, samples given their rate (from the dict, else `sampling_rate`); samples without a rate are refused.
    Reads nothing."""
    where = where[:1].upper() + where[1:]
    if isinstance(clip, dict):
        audio = clip.get("array") if clip.get("array") is not None else clip.get("path")
        if audio is None:
            raise ValueError(
                f"{where} is an audio dict without samples or a file (its keys: {sorted(map(str, clip))}); pass "
                "{'array': samples, 'sampling_rate': rate} (as datasets' Audio feature gives it) or {'path': file}."
            )
        if isinstance(audio, (str, os.PathLike)):  # a file's rate is read from it; a rate given with it must agree
            return audio, clip.get("sampling_rate")
        clip, sampling_rate = audio, clip.get("sampling_rate", sampling_rate)
    if isinstance(clip, (str, os.PathLike)):
        return clip, None  # `sampling_rate` is for samples: files and URLs carry their own
    if sampling_rate is None:
        raise ValueError(
            f"{where} is an array of samples without its sampling rate; pass it too: processor(text, "
            "reference=samples, sampling_rate=rate), reference={'array': samples, 'sampling_rate': rate}, or in a "
            "chat message {'type': 'audio', 'audio': samples, 'sampling_rate': rate}."
        )
    return clip, sampling_rate


def prepare_reference_waveform(
    audio: AudioLike,
    sampling_rate: int | None = None,
    target_sampling_rate: int = _RATES.sampling_rate,
    min_seconds: float = MIN_REFERENCE_SECONDS,
    max_seconds: float = MAX_REFERENCE_SECONDS,
    too_long_advice: str = REFERENCE_ADVICE,
) -> torch.FloatTensor:
    """Load and validate a reference clip; return the 24 kHz mono float32 waveform `[N]` the codec encodes.

    Args:
        audio: a file path (read with soundfile: wav, flac, ogg, ...), an `http(s)://` URL of such a file (fetched
            into memory, see `REFERENCE_URL_TIMEOUT` and `MAX_REFERENCE_URL_BYTES`), or samples as a numpy array / torch
            tensor of
            shape `[N]`, `[channels, N]` or `[N, channels]` (the shorter axis of a 2-D array is the channel axis).
            Integer PCM (int8/uint8/int16/int32) is scaled to [-1, 1]; floats are expected in [-1, 1].
        sampling_rate: sample rate of `audio` in Hz. Required for arrays; for files it is read from the file (a
            value given here must then agree with it).
        target_sampling_rate: the codec's rate; the clip is resampled to it as torchaudio's `resample` does (the official
            server's resampler).
        min_seconds: shorter clips are padded with zeros at the end to this duration.
        max_seconds: longer clips are refused (the official server accepts up to 100 s).
        too_long_advice: the sentence that refusal ends with (`REFERENCE_ADVICE`; `model.encode_target` gives a
            training target's).

    Returns:
        `torch.FloatTensor` of shape `[max(N', ceil(min_seconds * target_sampling_rate))]`, N' the resampled length.

    Raises:
        ValueError: unreadable file, unreachable / too large URL, missing or invalid `sampling_rate`, unsupported
            dtype or shape, empty clip, NaN or infinite samples, clip longer than `max_seconds`.
    """
    label = "Reference audio"  # named in every refusal below; a file by its path
    if isinstance(audio, (str, os.PathLike)):  # a file or an http(s) URL: its rate is read from it
        url = is_audio_url(audio)
        label = f"Reference audio {'URL' if url else 'file'} {str(audio)!r}"
        samples, file_rate = (
            _read_audio_url(audio, max_seconds, advice=too_long_advice) if url
            else _read_audio_file(audio, max_seconds, too_long_advice)
        )
        if sampling_rate is not None and sampling_rate != file_rate:
            raise ValueError(
                f"sampling_rate={sampling_rate} was given but {str(audio)!r} is sampled at {file_rate} Hz; leave "
                f"sampling_rate unset for {'URLs' if url else 'files'} (it is read from the file)."
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
            f"Reference audio must be a file path, an http(s) URL, a numpy array or a torch tensor; got "
            f"{type(audio).__name__}."
        )
    if isinstance(sampling_rate, bool) or not isinstance(sampling_rate, (int, np.integer)) or sampling_rate <= 0:
        raise ValueError(f"sampling_rate must be a positive integer number of Hz, got {sampling_rate!r}.")
    sampling_rate = int(sampling_rate)

    if samples.size == 0:
        raise ValueError(f"{label} is empty (0 samples).")
    finite = np.isfinite(samples)
    if not finite.all():
        raise ValueError(
            f"{label} has NaN or infinite values ({int((~finite).sum())} of {samples.size}); pass a clean "
            "signal."
        )
    num_samples = samples.shape[-1]
    if num_samples > max_seconds * sampling_rate:
        raise ValueError(
            f"{label} is {num_samples / sampling_rate:.2f} s long ({num_samples} samples at {sampling_rate} "
            f"Hz); the longest accepted is {max_seconds:g} s. {too_long_advice}"
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
@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path` (same folder and suffix, a hidden name); when the block ends without an
    error the file written there is flushed to disk and renamed to `path` with `os.replace`, so `path` holds the old
    file or the new one, never part of one. On any error (a full disk, an interruption) the temporary file is removed
    and `path` is left as it was.

    >>> with atomic_output("speech.wav") as temporary:  # doctest: +SKIP
    ...     soundfile.write(temporary, waveform, 24000)
    """
    path = Path(path)
    temporary = path.with_name(f".{path.stem}.tmp-{os.getpid()}-{secrets.token_hex(4)}{path.suffix}")
    try:
        yield temporary
        with open(temporary, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            temporary.unlink()
        if type(error).__name__ in _WRITER_ERRORS:  # libsndfile's and safetensors' own errors for a failed write
            reason = " ".join(str(error).split()) or type(error).__name__
            raise OSError(f"Could not write {str(path)!r} ({reason}); the previous file, if any, is unchanged.") from error
        raise


_WRITER_ERRORS = ("LibsndfileError", "SafetensorError")


def check_audio_output(path: str | os.PathLike) -> Path:
    """`path` if its extension is one of `AUDIO_OUTPUT_SUFFIXES`, else a `ValueError` naming the accepted ones."""
    path = Path(path)
    if path.suffix.lower() not in AUDIO_OUTPUT_SUFFIXES:
        found = repr(path.suffix) if path.suffix else "no extension"
        raise ValueError(
            f"Cannot write audio file {str(path)!r}: {found} is not an audio format written here; use one of "
            f"{', '.join(AUDIO_OUTPUT_SUFFIXES)}."
        )
    return path


def save_audio(waveform: np.ndarray | torch.Tensor, path: str | os.PathLike, sampling_rate: int = _RATES.sampling_rate) -> Path:
    """Write a mono waveform (`[N]` or `[1, N]`, float in [-1, 1]) to `path`; the format follows the extension
    (`AUDIO_OUTPUT_SUFFIXES`: `.wav` is written as 16-bit PCM, `.flac`, `.ogg`, ...). The file is written beside
    `path` and renamed into place (`atomic_output`): a failed write leaves an existing file as it was. Returns the
    path."""
    if soundfile is None:
        raise ImportError("Writing audio files needs the `soundfile` package: run `pip install soundfile`.")
    path = check_audio_output(path)
    if isinstance(waveform, torch.Tensor):
        waveform = waveform.detach().to(device="cpu", dtype=torch.float32).numpy()
    waveform = np.asarray(waveform, dtype=np.float32)
    if waveform.ndim == 2 and waveform.shape[0] == 1:
        waveform = waveform[0]
    if waveform.ndim != 1:
        raise ValueError(
            f"save_audio writes one mono waveform of shape [samples] or [1, samples]; got shape {waveform.shape}."
        )
    with atomic_output(path) as temporary:
        soundfile.write(os.fspath(temporary), waveform, int(sampling_rate))
    return path


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
        """Write the voice to `path` (`.safetensors` or `.json`, chosen by the extension) and return the path. The
        file is written beside `path` and renamed into place (`atomic_output`)."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in VOICE_FILE_SUFFIXES:
            raise ValueError(f"A voice is saved as .safetensors or .json; got the file name {path.name!r}.")
        with atomic_output(path) as temporary:
            if suffix == ".safetensors":
                from safetensors.torch import save_file

                metadata = {
                    "format": VOICE_FORMAT,
                    "version": str(VOICE_FORMAT_VERSION),
                    "text": json.dumps(self.text),
                    "sampling_rate": str(self.sampling_rate),
                    "frame_rate": str(self.frame_rate),
                }
                save_file({"codes": self.codes}, str(temporary), metadata=metadata)
            else:
                record = {
                    "format": VOICE_FORMAT,
                    "version": VOICE_FORMAT_VERSION,
                    "text": self.text,
                    "sampling_rate": self.sampling_rate,
                    "frame_rate": self.frame_rate,
                    "codes": self.codes.tolist(),
                }
                temporary.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, max_seconds: float = MAX_REFERENCE_SECONDS) -> HiggsAudioV3Voice:
        """Read a voice written by `save` (`.safetensors` or `.json`). Anything else (another file under that name, a
        damaged or truncated file, a voice longer than `max_seconds`, read from the safetensors header before the
        codes) is refused with a `ValueError` that names the file."""
        path = Path(path)
        suffix = path.suffix.lower()
        if path.is_dir():
            raise IsADirectoryError(f"Voice file {str(path)!r} is a folder; give a file saved by HiggsAudioV3Voice.save.")
        if not path.is_file():
            raise FileNotFoundError(f"Voice file {str(path)!r} does not exist.")
        if suffix not in VOICE_FILE_SUFFIXES:
            raise ValueError(f"A voice is loaded from .safetensors or .json; got the file name {path.name!r}.")
        try:
            record, codes = (_read_safetensors_voice if suffix == ".safetensors" else _read_json_voice)(path, max_seconds)
            voice = cls(
                codes=codes,
                text=record.get("text"),
                sampling_rate=_header_int(record, "sampling_rate", _RATES.sampling_rate),
                frame_rate=_header_int(record, "frame_rate", _RATES.frame_rate),
            )
        except _NotAVoice as error:
            raise ValueError(f"{str(path)!r} is not a Higgs Audio v3 voice file: {error}") from None
        except _VoiceFileError:
            raise
        except ValueError as error:
            raise ValueError(f"{str(path)!r} is not a valid Higgs Audio v3 voice file: {error}") from error
        if voice.num_frames > max_seconds * voice.frame_rate:
            raise _VoiceFileError(_too_long(path, voice.num_frames, voice.frame_rate, max_seconds))
        return voice


class _NotAVoice(Exception):
    """Why a file is not a voice file (`HiggsAudioV3Voice.load` names the file)."""


class _VoiceFileError(ValueError):
    """A refusal of a voice file whose message names the file already."""


def _too_long(path: Path, frames: int, frame_rate: int, max_seconds: float) -> str:
    return (
        f"Voice file {str(path)!r} holds {frames} frames ({frames / frame_rate:.1f} s); the longest reference accepted "
        f"is {max_seconds:g} s. Encode a shorter clip: 5 to 30 s of clean speech is enough to clone a voice."
    )


def _header_int(record: dict, key: str, default: int) -> int:
    value = record.get(key, default)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise _NotAVoice(f"its {key} is {value!r}, not a whole number.") from None
    if number <= 0:
        raise _NotAVoice(f"its {key} is {number}; it must be positive.")
    return number


def _check_record(record: dict, path: Path) -> None:
    """The format marker and the version of a voice file's record."""
    if record.get("format") != VOICE_FORMAT:
        raise _NotAVoice(f"format is {record.get('format')!r}, expected {VOICE_FORMAT!r}.")
    version = record.get("version")
    if isinstance(version, bool) or not isinstance(version, (int, str)) or not str(version).isdigit():
        raise _NotAVoice(f"its version is {version!r}, expected a whole number (this code reads versions up to "
                         f"{VOICE_FORMAT_VERSION}).")
    if int(version) > VOICE_FORMAT_VERSION:
        raise _VoiceFileError(f"{str(path)!r} is a version {int(version)} voice file; this code reads versions up to "
                              f"{VOICE_FORMAT_VERSION}. Update higgs-v3.")


def _read_safetensors_voice(path: Path, max_seconds: float) -> tuple[dict, torch.Tensor]:
    """(record, codes) of a `.safetensors` voice; its frames are checked in the header before the codes are read."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            keys = list(f.keys())
            if keys != ["codes"]:
                raise _NotAVoice(f"it holds tensors {keys}, expected ['codes'].")
            record = {key: metadata.get(key) for key in ("format", "version", "sampling_rate", "frame_rate")}
            _check_record(record, path)
            shape = f.get_slice("codes").get_shape()
            frame_rate = _header_int(record, "frame_rate", _RATES.frame_rate)
            if len(shape) == 2 and shape[0] > max_seconds * frame_rate:
                raise _VoiceFileError(_too_long(path, shape[0], frame_rate, max_seconds))
            codes = f.get_tensor("codes")
    except (_NotAVoice, _VoiceFileError):
        raise
    except Exception as error:  # safetensors' SafetensorError (a pickle or other file under this name, truncation)
        reason = " ".join(str(error).split()) or type(error).__name__
        raise _NotAVoice(f"it is not a readable safetensors file ({reason}).") from None
    try:
        record["text"] = json.loads(metadata["text"]) if "text" in metadata else None
    except (ValueError, RecursionError):
        raise _NotAVoice("its 'text' metadata is not JSON.") from None
    return record, codes


def _depth(value, limit: int) -> bool:
    """Whether a JSON value nests deeper than `limit` lists/objects (iterative: no recursion limit)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def _read_json_voice(path: Path, max_seconds: float) -> tuple[dict, torch.Tensor]:
    """(record, codes) of a `.json` voice; files over `MAX_VOICE_JSON_BYTES` are refused before they are read."""
    size = path.stat().st_size
    if size > MAX_VOICE_JSON_BYTES:
        raise _VoiceFileError(_too_long(path, -1, 1, max_seconds).replace("holds -1 frames (-1.0 s)", f"is {size} bytes"))
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise _NotAVoice("its JSON is nested too deeply.") from None
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _NotAVoice(f"it is not UTF-8 JSON ({' '.join(str(error).split())}).") from None
    if not isinstance(record, dict) or "codes" not in record:
        raise _NotAVoice("no 'codes' field.")
    _check_record(record, path)
    if _depth(record, _MAX_JSON_DEPTH):
        raise _NotAVoice("its JSON is nested deeper than a voice record ({\"codes\": [[...], ...], ...}).")
    if record.get("text") is not None and not isinstance(record.get("text"), str):
        raise _NotAVoice(f"its 'text' is {type(record['text']).__name__}, expected a string or null.")
    rows = record["codes"]
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        raise _NotAVoice("its 'codes' is not a list of frames (lists of integer codes).")
    try:
        codes = torch.tensor(rows, dtype=torch.long)
    except (TypeError, ValueError, RuntimeError, OverflowError) as error:
        raise _NotAVoice(f"its 'codes' are not a rectangle of integers ({' '.join(str(error).split())}).") from None
    return record, codes


__all__ = [
    "AUDIO_OUTPUT_SUFFIXES",
    "MAX_REFERENCE_URL_BYTES",
    "MAX_VOICE_JSON_BYTES",
    "REFERENCE_ADVICE",
    "REFERENCE_URL_TIMEOUT",
    "TARGET_ADVICE",
    "VOICE_FILE_SUFFIXES",
    "atomic_output",
    "check_audio_output",
    "clip_source",
    "is_audio_url",
    "MAX_REFERENCE_SECONDS",
    "MIN_REFERENCE_SECONDS",
    "AudioLike",
    "HiggsAudioV3Voice",
    "prepare_reference_waveform",
    "save_audio",
]
