# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Audio in and out for Higgs Audio v3: references (clips and voices), the reference-length rule, writing waveforms.

`load_reference` decides what a reference is; a clip is prepared by `prepare_reference_waveform` as the official server
prepares it (sglang-omni's `prepare_higgs_reference`), so it gives the codes the model was served with. Every file is
written through `atomic_output`.
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import json
import os
import re
import secrets
import time
import wave
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, replace
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

MIN_REFERENCE_SECONDS: float = 1.0  # shorter clips are padded with zeros to this duration
MAX_REFERENCE_SECONDS: float = 100.0  # longer references are refused (the official server's limit)
REFERENCE_ADVICE = "Use a shorter clip: 5 to 30 s of clean speech is enough to clone a voice."
TARGET_ADVICE = "Split long recordings into sentences, one target each."  # a too long training target's advice

AUDIO_OUTPUT_SUFFIXES: tuple[str, ...] = (".wav", ".flac", ".ogg", ".mp3", ".aiff", ".au", ".caf", ".w64", ".rf64")
VOICE_FILE_SUFFIXES: tuple[str, ...] = (".safetensors", ".json")  # any other path given as a reference is audio
MAX_VOICE_JSON_BYTES: int = 8 * 1024 * 1024  # refused before reading (a 100 s voice takes about 0.2 MB)
REFERENCE_URL_TIMEOUT: float = 30.0  # seconds per network operation of a reference URL
REFERENCE_URL_DEADLINE: float = 120.0  # seconds for a whole reference URL download (a slow drip is given up)
MAX_REFERENCE_URL_BYTES: int = 64 * 1024 * 1024  # 100 s of 48 kHz stereo float WAV is 38 MB
MAX_REFERENCE_URL_REDIRECTS: int = 5  # redirects followed for a reference URL (to http(s) addresses only)

AudioLike = str | os.PathLike | np.ndarray | torch.Tensor  # a clip: a file, an http(s) URL, or samples

_PCM_FULL_SCALE = {np.dtype(np.int16): 32768.0, np.dtype(np.int32): 2147483648.0, np.dtype(np.int8): 128.0}
# libsndfile's log of a sample chunk larger than the file: WAV/RF64 `data`, AIFF `SSND`, AU `Data Size`, W64 `riff`.
_CHUNK_SIZE = re.compile(r"^\s*(?:data|SSND|Data Size|riff)\s*: (\d+) \(should be (\d+)\)", re.MULTILINE)


def length_problem(what: str, count: int, rate: float, unit: str = "samples",
                   max_seconds: float = MAX_REFERENCE_SECONDS, advice: str = REFERENCE_ADVICE) -> str | None:
    """The reference-length rule in its one wording: None if `count` samples (or frames) at `rate` per second last at
    most `max_seconds`, else the sentence that says so about `what`, ending with `advice` (or `TARGET_ADVICE`)."""
    if count <= max_seconds * rate:
        return None
    per_second = "Hz" if unit == "samples" else f"{unit} per second"
    return (f"{what} is {count / rate:.2f} s long ({count} {unit} at {rate:g} {per_second}); "
            f"the longest accepted is {max_seconds:g} s. {advice}")


def check_length(what: str, count: int, rate: float, unit: str = "samples",
                 max_seconds: float = MAX_REFERENCE_SECONDS, advice: str = REFERENCE_ADVICE) -> None:
    """`length_problem` as a `ValueError`."""
    if problem := length_problem(what, count, rate, unit, max_seconds, advice):
        raise ValueError(problem)


def _soundfile():
    if soundfile is None:
        raise ImportError("Reading and writing audio files needs the `soundfile` package: run `pip install soundfile`.")
    return soundfile


def is_audio_url(value) -> bool:
    """Whether a reference is an `http://` or `https://` address (fetched into memory)."""
    return isinstance(value, str) and value.strip().lower().startswith(("http://", "https://"))


def audio_url_problem(url: str) -> str | None:
    """Why `url` cannot be fetched as a reference clip, or None: it must parse (`urllib.parse.urlsplit`, its port
    included), be `http` or `https` and name a host. Checked before any download starts, and for every redirect."""
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
    except ValueError as error:
        return f"Reference audio URL {url!r} is not a valid URL ({error}); give an http(s) address of an audio file."
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return f"Reference audio URL {url!r} is not an http(s) address with a host; only those are fetched."
    return None


def fetch_audio_url(url: str, deadline: float | None = None) -> bytes:
    """The bytes at `url`, checked first (`audio_url_problem`), within `deadline` seconds in all (default
    `REFERENCE_URL_DEADLINE`; `REFERENCE_URL_TIMEOUT` per network operation) and `MAX_REFERENCE_URL_BYTES`, nothing
    written to disk; a `ValueError` naming it otherwise. The download runs in a thread (`_download`) this one waits for."""
    import threading

    if problem := audio_url_problem(url):
        raise ValueError(problem)
    limit, deadline, outcome = MAX_REFERENCE_URL_BYTES, REFERENCE_URL_DEADLINE if deadline is None else deadline, []
    worker = threading.Thread(target=_download, args=(url, time.monotonic() + deadline, outcome), daemon=True)
    worker.start()
    worker.join(deadline)
    data = outcome[0] if outcome else TimeoutError(f"not downloaded within {deadline:g} s")
    if isinstance(data, BaseException):
        reason = f"HTTP {data.code} {data.reason}" if hasattr(data, "code") else (getattr(data, "reason", None) or data)
        raise ValueError(f"Could not fetch reference audio URL {url!r} ({' '.join(str(reason).split())}); check the "
                         "address and the network, or download the clip and pass its file path.")
    if data is None or len(data) > limit:
        raise ValueError(f"Reference audio URL {url!r} serves more than {limit} bytes ({limit / 2**20:g} MiB, the most "
                         "fetched); a reference clip needs no more than 30 s of clean speech: download it, trim it and "
                         "pass the file.")
    return data


def _download(url: str, until: float, outcome: list) -> None:
    """`fetch_audio_url`'s worker: appends the bytes at `url` (None when it declares more than the limit), or the
    error (any: it is delivered, never lost in the thread); stops reading at `until` (a `time.monotonic()` time), so a
    slow drip is given up, not read on. Redirects go to http(s) addresses only, `MAX_REFERENCE_URL_REDIRECTS` at most
    (urllib's own handler follows `ftp://` and ten)."""
    import urllib.error
    import urllib.request

    class Redirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, req, fp, code, msg, headers, newurl):
            if len(getattr(req, "redirect_dict", {})) >= MAX_REFERENCE_URL_REDIRECTS:
                raise urllib.error.URLError(f"more than {MAX_REFERENCE_URL_REDIRECTS} redirects, the most followed")
            if problem := audio_url_problem(newurl):
                raise urllib.error.URLError(f"redirected to {newurl!r}, which is not fetched: {problem}")
            return super().redirect_request(req, fp, code, msg, headers, newurl)

    try:
        request = urllib.request.Request(url.strip(), headers={"User-Agent": "higgs-v3"})
        timeout = max(0.01, min(REFERENCE_URL_TIMEOUT, until - time.monotonic()))
        with urllib.request.build_opener(Redirects).open(request, timeout=timeout) as response:
            declared, data = response.headers.get("Content-Length", ""), bytearray()
            if declared.isdigit() and int(declared) > MAX_REFERENCE_URL_BYTES:
                return outcome.append(None)
            while len(data) <= MAX_REFERENCE_URL_BYTES and time.monotonic() < until and (part := response.read1(65536)):
                data += part
            outcome.append(bytes(data))
    except Exception as error:  # noqa: BLE001 - the waiting thread reports it, naming the URL
        outcome.append(error)


def _damage(info, frames_read: int | None) -> str | None:
    """Why an audio file is damaged, or None: a header without rate or channels, or (once read) a sample chunk larger
    than the file (an unfinished header, size 0 or 0xFFFFFFFF, is no damage) or fewer samples than announced."""
    if info.samplerate <= 0 or info.channels <= 0:
        return f"its header announces {info.samplerate} Hz and {info.channels} channels"
    match = _CHUNK_SIZE.search(info.extra_info or "")
    if frames_read is not None and match and 0 < int(match.group(2)) < int(match.group(1)) < 0xFFFFFF00:
        return f"its header announces {match.group(1)} bytes of samples but the file holds {match.group(2)}"
    slack = max(0.05 * info.samplerate, 0.1 * info.frames)  # the header's count is an estimate in some formats
    if frames_read is not None and info.frames > 0 and frames_read < info.frames - slack:
        return f"its header announces {info.frames} samples but {frames_read} could be read"
    return None


def _read_audio(source: str | os.PathLike, label: str, max_seconds: float, advice: str) -> tuple[np.ndarray, int]:
    """The one reader of files and URLs: (samples `[channels, N]` float32, rate); the header first, so a too long
    clip is refused before any sample is read. Refusals name `label`."""
    sf = _soundfile()
    url = is_audio_url(source)
    if url:
        data = io.BytesIO(fetch_audio_url(source))
    elif not os.path.isfile(source):
        folder = os.path.isdir(source)
        raise (IsADirectoryError if folder else FileNotFoundError)(
            f"{label} " + ("is a folder; give an audio file (wav, flac, ogg)." if folder else "does not exist."))
    info, samples = None, None
    source = data if url else os.fspath(source)
    try:
        info = sf.info(source)
        header_ok = _damage(info, None) is None  # else refused below, as a too long clip is: no sample is read
        if header_ok and not length_problem(label, info.frames, info.samplerate, max_seconds=max_seconds):
            if url:
                data.seek(0)
            samples, rate = sf.read(source, dtype="float32", always_2d=True)  # [N, C]
    except Exception as error:  # soundfile raises LibsndfileError (a RuntimeError) or TypeError for non-audio files
        reason = " ".join(str(error).split()) or type(error).__name__
        raise ValueError(f"Could not read r{label[1:]} ({reason}); accepted are the formats libsndfile reads, e.g. "
                         "wav, flac and ogg.") from error
    damage = _damage(info, None if samples is None else samples.shape[0])
    if damage:
        raise ValueError(f"{label} is damaged: {damage}. Export the clip again.")
    check_length(label, info.frames, info.samplerate, max_seconds=max_seconds, advice=advice)
    return np.ascontiguousarray(samples.T), int(rate)


def _samples(audio, sampling_rate, label: str) -> tuple[np.ndarray | None, str | None]:
    """Samples in memory (`[N]`, `[C, N]`, `[N, C]`: the shorter axis is the channels, or `[1, C, N]`) as `[C, N]`
    floats (integer PCM scaled to [-1, 1]), or why they cannot be used (about `label`)."""
    if not isinstance(audio, (np.ndarray, torch.Tensor)):
        return None, (f"{label} must be a file path, an http(s) URL, a numpy array or a torch tensor; got "
                      f"{type(audio).__name__}")
    if sampling_rate is None:
        return None, (f"{label} is an array of samples without its sampling rate; pass it too: sampling_rate=rate, "
                      "{'array': samples, 'sampling_rate': rate}, or in a chat message {'type': 'audio', 'audio': "
                      "samples, 'sampling_rate': rate}")
    if isinstance(audio, torch.Tensor):
        audio = audio.detach().cpu()
        audio = (audio.float() if audio.dtype in (torch.bfloat16, torch.float16) else audio).numpy()
    samples = audio[0] if audio.ndim == 3 and audio.shape[0] == 1 else audio
    if samples.dtype in _PCM_FULL_SCALE or samples.dtype == np.uint8:
        offset = 128.0 if samples.dtype == np.uint8 else 0.0
        samples = (samples.astype(np.float32) - offset) / _PCM_FULL_SCALE.get(samples.dtype, 128.0)
    elif not np.issubdtype(samples.dtype, np.floating):
        return None, (f"{label} has dtype {samples.dtype}; accepted are float16/float32/float64 samples in [-1, 1] "
                      "and integer PCM (int8, uint8, int16, int32), which is scaled to [-1, 1]")
    elif samples.dtype != np.float64:
        samples = samples.astype(np.float32)
    if samples.ndim not in (1, 2):
        return None, (f"{label} must be 1-D [samples] or 2-D [channels, samples] / [samples, channels]; got shape "
                      f"{tuple(audio.shape)}")
    if isinstance(sampling_rate, bool) or not isinstance(sampling_rate, (int, np.integer)) or sampling_rate <= 0:
        return None, f"sampling_rate must be a positive integer number of Hz, got {sampling_rate!r}"
    if samples.ndim == 1 or samples.shape[0] > samples.shape[1]:
        samples = samples[None, :] if samples.ndim == 1 else samples.T
    return samples, None


def prepare_reference_waveform(
    audio: AudioLike, sampling_rate: int | None = None, target_sampling_rate: int = _RATES.sampling_rate,
    min_seconds: float = MIN_REFERENCE_SECONDS, max_seconds: float = MAX_REFERENCE_SECONDS,
    too_long_advice: str = REFERENCE_ADVICE, where: str = "reference audio",
) -> torch.FloatTensor:
    """Load and check a reference clip: the mono float32 waveform `[max(N', ceil(min_seconds * target_sampling_rate))]`
    at `target_sampling_rate` that the codec encodes (`model.encode_reference`, the processor's clips).

    `audio` is a file (as libsndfile reads it), an `http(s)://` URL of one (fetched into memory, bounded) or samples
    (numpy or torch, `[N]`, `[channels, N]` or `[N, channels]`, integer PCM scaled) at `sampling_rate` (required for
    samples; for files it is read, and a value given must agree). Resampled as torchaudio does, padded with zeros to
    `min_seconds`; unreadable, empty, non-finite or too long clips (`check_length`, ending with `too_long_advice`) are
    one-line refusals (`FileNotFoundError` / `IsADirectoryError` for paths, else `ValueError`) naming the file or
    `where`.
    """
    if isinstance(audio, (str, os.PathLike)):  # a file or an http(s) URL: its rate is read from it
        label = f"Reference audio {'URL' if is_audio_url(audio) else 'file'} {str(audio)!r}"
        samples, rate = _read_audio(audio, label, max_seconds, too_long_advice)
        problem = None if sampling_rate in (None, rate) else (
            f"sampling_rate={sampling_rate} was given but {str(audio)!r} is sampled at {rate} Hz; leave sampling_rate "
            f"unset for {'URLs' if is_audio_url(audio) else 'files'} (it is read from the file)")
    else:
        label, rate = where[:1].upper() + where[1:], sampling_rate
        samples, problem = _samples(audio, sampling_rate, label)
    if problem is None and samples.size == 0:
        problem = f"{label} is empty (0 samples)"
    elif problem is None and not (finite := np.isfinite(samples)).all():
        problem = f"{label} has NaN or infinite values ({int((~finite).sum())} of {samples.size}); pass a clean signal"
    if problem:
        raise ValueError(problem + ".")
    check_length(label, samples.shape[-1], int(rate), max_seconds=max_seconds, advice=too_long_advice)
    if (peak := float(np.abs(samples).max())) > 1.0:
        logger.warning_once(
            f"Reference audio peaks at {peak:.4g}, outside [-1, 1]: float samples are expected in [-1, 1] (integer "
            "PCM is scaled automatically). Normalize the clip if it sounds distorted."
        )
    mono = torch.from_numpy(np.ascontiguousarray(samples.mean(axis=0), dtype=np.float32))  # [N]
    waveform = resample_audio(mono, int(rate), target_sampling_rate)  # [N'], torchaudio's algorithm (codec_higgs_v3)
    padding = int(np.ceil(min_seconds * target_sampling_rate)) - waveform.shape[0]
    return torch.nn.functional.pad(waveform, (0, padding)) if padding > 0 else waveform


@dataclass(frozen=True)
class ReferenceClip:
    """A clip as `load_reference` prepared it: the waveform `[N]` (None with `read=False`) and its transcript."""

    waveform: torch.FloatTensor | None
    text: str | None = None


def is_clip(reference) -> bool:
    """Whether a reference is a clip rather than a voice: a path but a voice file's, an http(s) URL, samples, or an
    audio dict (`{"array": samples, "sampling_rate": rate}` as `datasets`' Audio gives it, or `{"path": file}`)."""
    if isinstance(reference, (str, os.PathLike)):
        return is_audio_url(reference) or Path(reference).suffix.lower() not in VOICE_FILE_SUFFIXES
    if isinstance(reference, dict) and reference.get("array") is None and reference.get("path") is not None:
        return is_clip(reference["path"])  # {"path": "voice.safetensors"} is a saved voice
    return isinstance(reference, (dict, np.ndarray, torch.Tensor))


def load_reference(
    reference, text: str | None = None, sampling_rate: int | None = None, where: str = "the reference",
    target_sampling_rate: int = _RATES.sampling_rate, read: bool = True,
) -> HiggsAudioV3Voice | ReferenceClip:
    """The one front end for references (the processor's and long-form speech's). A voice (of any import, by its
    `voice_format` marker, or a saved voice file) comes back as this module's `HiggsAudioV3Voice` with `text` as its
    transcript (refused when it has one); a clip (`is_clip`) as a `ReferenceClip` with the waveform of
    `prepare_reference_waveform` (`read=False`: files and URLs are not read). Refusals name `where`."""
    Where = where[:1].upper() + where[1:]
    if text is not None and not isinstance(text, str):
        raise ValueError(f"The transcript of {where} (reference_text) must be a string, got {type(text).__name__} "
                         f"{text!r:.40}.")
    if not is_clip(reference):
        if isinstance(reference, dict):  # {"path": a saved voice file}
            reference = reference["path"]
        if not isinstance(reference, (str, os.PathLike)) and getattr(reference, "voice_format", None) != VOICE_FORMAT:
            raise ValueError(
                f"{Where} must be a voice (model.encode_reference(clip, text=...), HiggsAudioV3Voice.load, or a saved "
                "voice file's path) or an audio clip (a file path, an http(s) URL, samples with sampling_rate, or "
                f"{{'array': samples, 'sampling_rate': rate}}), got {type(reference).__name__}."
            )
        voice = HiggsAudioV3Voice.from_any(reference, where)
        if text is not None and voice.text is not None:
            raise ValueError(f"{Where} already carries its transcript; do not pass reference_text as well.")
        return voice if text is None else replace(voice, text=text)
    audio, rate = reference, None if isinstance(reference, (str, os.PathLike)) else sampling_rate
    if isinstance(reference, dict):  # a file's rate is read from it; a rate given with it must agree
        audio = reference.get("array") if reference.get("array") is not None else reference.get("path")
        rate = reference.get("sampling_rate", None if isinstance(audio, (str, os.PathLike)) else sampling_rate)
    if audio is None:
        raise ValueError(f"{Where} is an audio dict without samples or a file (its keys: "
                         f"{sorted(map(str, reference))}); pass {{'array': samples, 'sampling_rate': rate}} (as "
                         "datasets' Audio feature gives it) or {'path': file}.")
    if not read and isinstance(audio, (str, os.PathLike)):  # samples are checked (and prepared) all the same
        return ReferenceClip(None, text)
    return ReferenceClip(prepare_reference_waveform(audio, rate, target_sampling_rate, where=where), text)


def current_umask() -> int:
    """The process's umask (read from `/proc/self/status` where Linux has it, else set and restored at once)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        status = Path("/proc/self/status").read_text().splitlines()
        return int(next(line for line in status if line.startswith("Umask:")).split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: str | os.PathLike) -> None:
    """Give the file `path` (or every file and folder under the folder `path`) the permissions a new file gets under the
    umask (0644 files and 0755 folders under umask 022), as `open` and `mkdir` would have. Writers that go through a
    private temporary file (safetensors' `save_file`, hence `save_pretrained`) leave mode 0600, which another user (a
    service account serving the model) cannot read. Bits already set are kept; nothing is narrowed."""
    path, mask = Path(path), current_umask()
    for entry in (path, *path.rglob("*")) if path.is_dir() else (path,):
        if entry.is_symlink():
            continue
        wanted = (0o777 if entry.is_dir() else 0o666) & ~mask
        mode = entry.stat().st_mode & 0o7777
        if mode | wanted != mode:
            os.chmod(entry, mode | wanted)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """THE atomic file writer: a temporary path beside `path` (hidden name, same suffix), flushed to disk and renamed
    to `path` (`os.replace`) when the block ends without an error, else removed: `path` is the old file or the new one.

    >>> with atomic_output("speech.wav") as temporary:  # doctest: +SKIP
    ...     soundfile.write(temporary, waveform, 24000)
    """
    path = Path(path)
    tail = f".tmp-{os.getpid()}-{secrets.token_hex(4)}{path.suffix}"  # the name's stem cut to fit 255 bytes
    temporary = path.with_name(f".{path.stem.encode()[:254 - len(tail.encode())].decode(errors='ignore')}{tail}")
    try:
        yield temporary
        with open(temporary, "rb+") as written:
            os.fsync(written.fileno())
        follow_umask(temporary)
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            temporary.unlink()
        os_reason = error.strerror if isinstance(error, OSError) and error.strerror else None
        if os_reason or type(error).__name__ in ("LibsndfileError", "SafetensorError"):  # a failed write
            reason = (f"its folder {str(path.parent)!r} does not exist" if not path.parent.is_dir() else
                      os_reason or " ".join(str(error).split()) or type(error).__name__)
            failure = OSError(f"Could not write {str(path)!r} ({reason}); the previous file, if any, is unchanged.")
            failure.errno = getattr(error, "errno", None)
            raise failure from error
        raise


def check_audio_output(path: str | os.PathLike) -> Path:
    """`path` if its extension is one of `AUDIO_OUTPUT_SUFFIXES`, else a `ValueError` naming the accepted ones."""
    path = Path(path)
    if path.suffix.lower() not in AUDIO_OUTPUT_SUFFIXES:
        found = repr(path.suffix) if path.suffix else "no extension"
        raise ValueError(f"Cannot write audio file {str(path)!r}: {found} is not an audio format written here; use one "
                         f"of {', '.join(AUDIO_OUTPUT_SUFFIXES)}.")
    return path


def save_audio(waveform: np.ndarray | torch.Tensor, path: str | os.PathLike,
               sampling_rate: int = _RATES.sampling_rate) -> Path:
    """Write a mono waveform (`[N]` or `[1, N]`, in [-1, 1]) to `path` (`atomic_output`; the format from the extension,
    `.wav` as 16-bit PCM). Returns the path. Several at once (as CSM's `processor.save_audio`): a list of waveforms
    (`out.audio`) and a list of as many paths; every path is checked before any file is written; returns the paths."""
    if isinstance(path, (list, tuple)):
        if not isinstance(waveform, (list, tuple)) or len(waveform) != len(path):
            got = f"{len(waveform)} waveforms" if isinstance(waveform, (list, tuple)) else type(waveform).__name__
            raise ValueError(f"save_audio writes one waveform per path: got {len(path)} paths and {got}; give a list "
                             "of waveforms (such as out.audio) and a list of as many paths.")
        paths = [check_audio_output(one) for one in path]
        return [save_audio(one, target, sampling_rate) for one, target in zip(waveform, paths)]
    sf, path = _soundfile(), check_audio_output(path)
    if isinstance(waveform, torch.Tensor):
        waveform = waveform.detach().to(device="cpu", dtype=torch.float32).numpy()
    waveform = np.asarray(waveform, dtype=np.float32)
    waveform = waveform[0] if waveform.ndim == 2 and waveform.shape[0] == 1 else waveform
    if waveform.ndim != 1:
        raise ValueError(f"save_audio writes one mono waveform of shape [samples] or [1, samples]; got shape "
                         f"{waveform.shape}. Several waveforms: give a list of them and a list of as many paths.")
    with atomic_output(path) as temporary:  # encoded in memory: a failed write is the OS's error, not libsndfile's
        sf.write(encoded := io.BytesIO(), waveform, int(sampling_rate), format=path.suffix[1:].upper())
        temporary.write_bytes(encoded.getbuffer())
    return path


def audio_html(title: str, waveforms: list, sampling_rate: int, labels: list[str] | None = None,
               notes: list[str] = ()) -> str:
    """THE notebook player (`_repr_html_` of a `SpeechResult`, a generation output and a voice; no IPython needed): an
    HTML `<audio>` player per 1-D waveform, its 16-bit PCM WAV embedded in base64, with its duration and sampling rate,
    then `notes` (the run's warnings) in words. As IPython's `Audio`, the player is normalised to its peak (a quiet
    take is heard, a loud one is not clipped; the peak is said when it is not 1): the display only, never the data."""
    parts = [f"<div><b>{html.escape(title)}</b>"]
    for index, waveform in enumerate(waveforms):
        samples = torch.as_tensor(waveform).detach().to(device="cpu", dtype=torch.float32).reshape(-1).numpy()
        samples = np.nan_to_num(samples, nan=0.0, posinf=1.0, neginf=-1.0)
        peak = float(np.abs(samples).max()) if samples.size else 0.0
        pcm = np.round((samples / peak if peak > 0 else samples) * 32767).astype("<i2")
        level = f", played normalised (peak {peak:.3g})" if peak not in (0.0, 1.0) else ""
        buffer = io.BytesIO()
        with wave.open(buffer, "wb") as file:
            file.setparams((1, 2, int(sampling_rate), len(pcm), "NONE", "not compressed"))  # mono, 16-bit
            file.writeframes(pcm.tobytes())
        label = html.escape(labels[index]) + ": " if labels else ""
        parts.append(f"<div>{label}{len(samples) / sampling_rate:.2f} s at {int(sampling_rate)} Hz{level}<br>"
                     "<audio controls "
                     f'src="data:audio/wav;base64,{base64.b64encode(buffer.getvalue()).decode()}"></audio></div>')
    parts += [f"<div>{html.escape(note)}</div>" for note in notes]
    return "".join(parts) + "</div>"


VOICE_FORMAT = "higgs_audio_v3_voice"
VOICE_FORMAT_VERSION = 1


@dataclass
class HiggsAudioV3Voice:
    r"""
    A reusable voice: a reference clip's raw codec codes (`[frames, num_codebooks]`) and its optional transcript, saved
    as `.safetensors` or `.json` (never pickled). Imported twice (the installed package, a Hub repo's remote code) it is
    two classes: voices are recognised by their `voice_format` marker, not their type.

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
    voice_format: ClassVar[str] = VOICE_FORMAT

    def __post_init__(self):
        codes = torch.from_numpy(self.codes) if isinstance(self.codes, np.ndarray) else self.codes
        problem = None
        integer = (torch.int64, torch.int32, torch.int16, torch.uint8)
        if not isinstance(codes, torch.Tensor) or codes.dtype not in integer:
            problem = (f"codes must be an integer tensor of raw codec codes [frames, num_codebooks]; got "
                       f"{type(self.codes).__name__} of dtype {getattr(self.codes, 'dtype', None)}")
        elif codes.dim() != 2 or codes.shape[0] == 0:
            problem = ("codes must have shape [frames, num_codebooks] with at least one frame; got shape "
                       f"{tuple(codes.shape)}")
        elif int(codes.min()) < 0:
            problem = f"codes must be non-negative codec codes; the smallest is {int(codes.min())}"
        elif self.text is not None and not isinstance(self.text, str):
            problem = f"text must be a string or None, got {type(self.text).__name__}"
        if problem:
            raise ValueError(f"HiggsAudioV3Voice.{problem}.")
        self.codes = codes.detach().to(device="cpu", dtype=torch.long).contiguous()

    @classmethod
    def from_any(cls, value, where: str = "the reference") -> HiggsAudioV3Voice:
        """`value` as this class: a voice of any import of this module (by its marker) or a saved voice file's path."""
        if isinstance(value, cls):
            return value
        if getattr(value, "voice_format", None) == VOICE_FORMAT:
            return cls(value.codes, value.text, value.sampling_rate, value.frame_rate)
        path = isinstance(value, (str, os.PathLike))
        if path and Path(value).suffix.lower() in VOICE_FILE_SUFFIXES:
            return cls.load(value)
        Where = where[:1].upper() + where[1:]
        raise ValueError(
            f"{Where} is the path {str(value)!r}, which is not a saved voice file (.safetensors / .json). An audio "
            "clip is encoded into a voice first: voice = model.encode_reference(clip, text=...)." if path else
            f"{Where} must be a HiggsAudioV3Voice (from model.encode_reference or HiggsAudioV3Voice.load) or the path "
            f"of a saved voice file (.safetensors / .json), got {type(value).__name__}. Encode an audio clip with "
            "model.encode_reference(clip, text=...)."
        )

    @property
    def num_frames(self) -> int:
        return self.codes.shape[0]

    @property
    def num_codebooks(self) -> int:
        return self.codes.shape[1]

    @property
    def duration(self) -> float:
        return self.num_frames / self.frame_rate

    def decode(self, model=None) -> torch.FloatTensor:
        """The voice as audio (a 1-D float32 waveform at `sampling_rate`): its codes decoded by `model`'s codec, by
        default the codec of the model whose `encode_reference` made it (this is what the model hears of the clip)."""
        if model is not None:
            codec = model._require_codec("Decoding a voice")
        else:
            codec = self._codec() if getattr(self, "_codec", None) is not None else None
        if codec is None:
            raise ValueError("This voice was not made by model.encode_reference in this session (or that model is "
                             "gone): decode it with a model, voice.decode(model).")
        return codec.decode_frames(self.codes[None])[0]

    def _repr_html_(self) -> str:
        """A notebook player of `decode()` (when the model that made it is known), with the transcript."""
        notes = [f"Transcript: {self.text}" if self.text else "No transcript."]
        known = getattr(self, "_codec", None) is not None and self._codec() is not None
        if not known:
            notes.append("Its audio plays once decoded with a model: voice.decode(model).")
        title = f"Voice: {self.num_frames} codec frames ({self.duration:.2f} s)"
        return audio_html(title, [self.decode()] if known else [], self.sampling_rate, notes=notes)

    def with_codec(self, codec) -> HiggsAudioV3Voice:
        """This voice, remembering (weakly) the codec that made it, for `decode()` and the notebook player."""
        self._codec = weakref.ref(codec)
        return self

    def save(self, path: str | os.PathLike) -> Path:
        """Write the voice to `path` (`.safetensors` or `.json`) with `atomic_output`; returns the path."""
        path = Path(path)
        if path.suffix.lower() not in VOICE_FILE_SUFFIXES:
            raise ValueError(f"A voice is saved as .safetensors or .json; got the file name {path.name!r}.")
        record = {"format": VOICE_FORMAT, "version": VOICE_FORMAT_VERSION, "text": self.text,
                  "sampling_rate": self.sampling_rate, "frame_rate": self.frame_rate}
        with atomic_output(path) as temporary:
            if path.suffix.lower() == ".safetensors":
                from safetensors.torch import save_file

                metadata = {key: json.dumps(value) if key == "text" else str(value) for key, value in record.items()}
                save_file({"codes": self.codes}, str(temporary), metadata=metadata)
            else:
                record["codes"] = self.codes.tolist()
                temporary.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, max_seconds: float = MAX_REFERENCE_SECONDS) -> HiggsAudioV3Voice:
        """Read a voice written by `save`; anything else (another format, a damaged file, a newer version, a voice over
        `max_seconds`, read from a safetensors header first) is one `ValueError` naming the file and the problem."""
        path = Path(path)
        if not path.is_file():
            raise (IsADirectoryError if path.is_dir() else FileNotFoundError)(f"Voice file {str(path)!r} " + (
                "is a folder; give a file saved by HiggsAudioV3Voice.save." if path.is_dir() else "does not exist."))
        if path.suffix.lower() not in VOICE_FILE_SUFFIXES:
            raise ValueError(f"A voice is loaded from .safetensors or .json; got the file name {path.name!r}.")
        record = (_safetensors_record if path.suffix.lower() == ".safetensors" else _json_record)(path, max_seconds)
        problem = record if isinstance(record, str) else None
        if problem is None:
            try:
                rates = {key: int(record.get(key) or getattr(_RATES, key)) for key in ("sampling_rate", "frame_rate")}
                voice = cls(codes=record["codes"], text=record.get("text"), **rates)
                problem = length_problem("it", voice.num_frames, voice.frame_rate, "frames", max_seconds)
            except ValueError as error:
                problem = str(error)
        if problem:
            raise ValueError(f"Could not load voice file {str(path)!r}: {problem}")
        return voice


def _record_problem(record: dict) -> str | None:
    """What is wrong with a voice file's fields but its codes (format marker, version, rates, text), or None."""
    version = record.get("version")
    if record.get("format") != VOICE_FORMAT:
        return f"its format is {record.get('format')!r}, expected {VOICE_FORMAT!r} (not a Higgs Audio v3 voice file)."
    if isinstance(version, bool) or not isinstance(version, (int, str)) or not str(version).isdigit():
        return f"its version is {version!r}, expected a whole number (this code reads up to {VOICE_FORMAT_VERSION})."
    if int(version) > VOICE_FORMAT_VERSION:
        return (f"it is a version {int(version)} voice file; this code reads versions up to {VOICE_FORMAT_VERSION}. "
                "Update higgs-v3.")
    for key in ("sampling_rate", "frame_rate"):
        value = record.get(key)
        if value is not None and (isinstance(value, bool) or not str(value).isdigit() or int(value) <= 0):
            return f"its {key} is {value!r}, expected a positive whole number."
    if record.get("text") is not None and not isinstance(record["text"], str):
        return f"its 'text' is {type(record['text']).__name__}, expected a string or null."
    return None


def _safetensors_record(path: Path, max_seconds: float) -> dict | str:
    """The fields of a `.safetensors` voice (its length from the header, before the codes are read), or the problem."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as file:
            metadata, keys = file.metadata() or {}, list(file.keys())
            record = {key: metadata.get(key) for key in ("format", "version", "sampling_rate", "frame_rate", "text")}
            problem = f"it holds tensors {keys}, expected ['codes']." if keys != ["codes"] else _record_problem(record)
            shape = file.get_slice("codes").get_shape() if problem is None else ()
            if len(shape) == 2:  # the length from the header: a too long voice is refused before its codes are read
                rate = int(record["frame_rate"] or _RATES.frame_rate)
                problem = length_problem("it", shape[0], rate, "frames", max_seconds)
            if problem is None:
                record["codes"] = file.get_tensor("codes")
    except Exception as error:  # safetensors' SafetensorError (a pickle or other file under this name, truncation)
        return f"it is not a readable safetensors file ({' '.join(str(error).split()) or type(error).__name__})."
    try:
        record["text"] = None if record["text"] is None else json.loads(record["text"])  # JSON: null or a string
    except (ValueError, RecursionError):
        return "its 'text' metadata is not JSON."
    return problem or _record_problem(record) or record


def _json_record(path: Path, max_seconds: float) -> dict | str:
    """The fields of a `.json` voice (over `MAX_VOICE_JSON_BYTES`: refused unread), or the problem."""
    if (size := path.stat().st_size) > MAX_VOICE_JSON_BYTES:
        return f"it is {size} bytes; a voice file holds at most {MAX_VOICE_JSON_BYTES} (a 100 s voice, about 0.2 MB)."
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        return "its JSON is nested too deeply."
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return f"it is not UTF-8 JSON ({' '.join(str(error).split())})."
    if not isinstance(record, dict) or "codes" not in record:
        return "no 'codes' field."
    if problem := _record_problem(record):
        return problem
    rows = record["codes"]  # a list of frames, each a list of integer codes: nothing nested deeper reaches torch
    if not isinstance(rows, list) or not all(isinstance(r, list) and all(type(c) is int for c in r) for r in rows):
        return "its 'codes' is not a list of frames (lists of integer codes)."
    try:
        record["codes"] = torch.tensor(rows, dtype=torch.long)
    except (TypeError, ValueError, RuntimeError, OverflowError) as error:
        return f"its 'codes' are not a rectangle of integers ({' '.join(str(error).split())})."
    return record


__all__ = [
    "AUDIO_OUTPUT_SUFFIXES",
    "MAX_REFERENCE_SECONDS",
    "MAX_REFERENCE_URL_BYTES",
    "MAX_REFERENCE_URL_REDIRECTS",
    "MAX_VOICE_JSON_BYTES",
    "MIN_REFERENCE_SECONDS",
    "REFERENCE_ADVICE",
    "REFERENCE_URL_DEADLINE",
    "REFERENCE_URL_TIMEOUT",
    "TARGET_ADVICE",
    "VOICE_FILE_SUFFIXES",
    "AudioLike",
    "HiggsAudioV3Voice",
    "ReferenceClip",
    "atomic_output",
    "audio_html",
    "check_audio_output",
    "check_length",
    "audio_url_problem",
    "fetch_audio_url",
    "current_umask",
    "follow_umask",
    "is_audio_url",
    "is_clip",
    "length_problem",
    "load_reference",
    "prepare_reference_waveform",
    "save_audio",
]
