# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Long texts and dialogues with Higgs Audio v3: one synthesis core that speaks a list of chunks with a stable voice
per speaker, and a progress display. The library side of `higgs-v3 speak`; the text side (the chunker, dialogue
scripts) is `chunking_higgs_v3`.

```
text ──split_text──> job 0, job 1, ..., job n-1                 (one speaker: voice key None)
script ──parse_dialogue──> lines ──split_text──> jobs            (voice key: the speaker; each job knows its line)
first job of a voiceless key ──generate──> codes ──> voice = (codes, its text) for the key's other jobs
waveform = audio 0 + pause + audio 1 + pause + ... + audio n-1
```

`synthesize_long` and `synthesize_dialogue` only build the `SpeechJob`s and the voices; `_Synthesizer.speak` does the
rest for both. A speaker without a voice (long text without a reference, a dialogue speaker with `auto_voices`) gets
the voice of their first chunk, so it stays the same. Texts are checked up front with the processor's one rule
(`processor.check_text`), so a bad tag fails before any generation. Job `i` (counting from 0 over the whole text or
script) uses seed `seed + i`; a sequence with a given seed gets the same codes alone or in any batch, so the batch size
does not change the result.

```python
>>> result = synthesize_long(model, processor, open("chapter.txt").read(), seed=0, max_seconds=40)  # doctest: +SKIP
>>> result.save("chapter.wav"); result.duration, result.real_time_factor, result.unfinished_chunks  # doctest: +SKIP
```
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .audio_io_higgs_v3 import MAX_REFERENCE_SECONDS, HiggsAudioV3Voice, atomic_output, load_reference, save_audio
from .chunking_higgs_v3 import DEFAULT_MAX_CHARS, DialogueLine, check_dialogue_voices, parse_dialogue, split_text
from .generation_higgs_v3 import MAX_NEW_TOKENS, MAX_POSITIONS
from .sampling_higgs_v3 import check_seed, draw_seed
from .streaming_higgs_v3 import HiggsAudioV3RowTracker


if TYPE_CHECKING:
    # Neither the model nor the processor is imported, even for type checking: the Hub's copy of the remote code follows
    # every relative import, and `model` / `processor` arguments may come from either import path.
    from transformers import PreTrainedModel, ProcessorMixin

    from .delay_higgs_v3 import HiggsAudioV3AudioSpec

try:
    from tqdm.auto import tqdm
except ImportError:  # pragma: no cover - tqdm comes with transformers; the progress display is optional
    tqdm = None


DEFAULT_PAUSE_SECONDS = 0.3
DEFAULT_DIALOGUE_PAUSE_SECONDS = 0.4
DEFAULT_BATCH_SIZE = 8


# =============================================================================================== jobs
@dataclass
class SpeechJob:
    """One chunk to speak: its text, its index over the whole text or script (its seed is `seed + index`), the key of
    its voice (None for long text, the speaker for dialogue) and, for dialogue, the speaker and script line. `seed`,
    when set, is the chunk's own seed instead of `seed + index` (batch synthesis: each item has its seed)."""

    text: str
    index: int
    voice_key: str | None = None
    speaker: str | None = None
    line_number: int | None = None
    seed: int | None = None


def speech_jobs(processor: ProcessorMixin, text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[SpeechJob]:
    """The jobs of a long text: `processor.check_text` on the whole text (a `ValueError` before any generation), then
    `split_text`."""
    text = processor.check_text(text, "the text")
    return [SpeechJob(chunk, index) for index, chunk in enumerate(split_text(text, max_chars))]


def dialogue_jobs(
    processor: ProcessorMixin,
    script: str | Sequence[DialogueLine] | Sequence[tuple[str, str]],
    max_chars: int = DEFAULT_MAX_CHARS,
) -> list[SpeechJob]:
    """The jobs of a dialogue: `script` read with `parse_dialogue`, every line checked with `processor.check_text`
    (a `ValueError` before any generation), then split with `split_text`."""
    lines = parse_dialogue(script)
    texts = [processor.check_text(line.text, f"dialogue line {line.line_number}") for line in lines]
    jobs: list[SpeechJob] = []
    for line, text in zip(lines, texts):
        jobs += [SpeechJob(chunk, len(jobs) + i, line.speaker, line.speaker, line.line_number)
                 for i, chunk in enumerate(split_text(text, max_chars))]
    return jobs


# =============================================================================================== voices
def resolve_voice(
    model: PreTrainedModel,
    processor: ProcessorMixin,
    spec: object,
    transcript: str | None = None,
    sampling_rate: int | None = None,
    where: str = "the reference",
) -> HiggsAudioV3Voice:
    r"""
    A `HiggsAudioV3Voice` from anything `audio_io_higgs_v3.load_reference` takes (a voice of any import, a saved voice
    file, or a clip: path, http(s) URL, samples with `sampling_rate`, audio dict; a clip is encoded once with
    `model.encode_reference`), or a tuple `(that, transcript)`. A blank transcript is none; the voice's transcript is
    checked with `processor.check_text`.
    """
    if isinstance(spec, tuple) and len(spec) == 2:
        spec, transcript = spec
    transcript = None if isinstance(transcript, str) and not transcript.strip() else transcript
    reference = load_reference(spec, transcript, sampling_rate, where, model.config.audio_spec.sampling_rate)
    if not isinstance(reference, HiggsAudioV3Voice):  # a prepared clip: the model's codec encodes it once
        reference = HiggsAudioV3Voice.from_any(model.encode_reference(
            reference.waveform, text=reference.text, sampling_rate=model.config.audio_spec.sampling_rate))
    if reference.text is not None:
        processor.check_text(reference.text, f"the transcript of {where}")
    return reference


def _voice_from_chunk(chunk: ChunkResult, spec: HiggsAudioV3AudioSpec) -> HiggsAudioV3Voice | None:
    """The voice made of a generated chunk (its codes and its text), or None when it produced no frame. At most
    `MAX_REFERENCE_SECONDS` of it, as for any reference clip: a chunk that ran away to a long limit would otherwise
    make every later prompt too long for the model's positions."""
    if chunk.num_frames == 0:
        return None
    codes = chunk.codes[: round(MAX_REFERENCE_SECONDS * spec.frame_rate)]
    return HiggsAudioV3Voice(codes, chunk.text, sampling_rate=spec.sampling_rate, frame_rate=spec.frame_rate)


# =============================================================================================== progress
class SpeechProgress:
    r"""
    A progress display across several `generate` calls: seconds of audio produced so far and the real-time factor
    (generation time / audio duration; below 1 is faster than real time), on a tqdm bar (stderr by default).

    `streamer()` gives the `streamer=` of one `generate` call: a `HiggsAudioV3RowTracker` that counts the complete
    codec frames of every sequence while it runs; the display is refreshed at most every `refresh_seconds`.
    """

    def __init__(self, spec: HiggsAudioV3AudioSpec, total_chunks: int, enabled: bool = True, file=None,
                 refresh_seconds: float = 0.2):
        self.spec = spec
        self.total_chunks = total_chunks
        self.refresh_seconds = refresh_seconds
        self.chunks_done = 0
        self.done_frames = 0  # frames of the finished generate calls
        self.start_time = time.perf_counter()
        self._last_refresh = 0.0
        self.bar = None
        if enabled and tqdm is not None:
            self.bar = tqdm(total=None, file=file if file is not None else sys.stderr, desc="speaking: ",
                            bar_format="{desc}{n:.1f} s of audio [{elapsed}{postfix}]", dynamic_ncols=True, leave=True)

    def streamer(self) -> _ProgressStreamer:
        return _ProgressStreamer(self)

    def due(self) -> bool:
        """Whether the display is shown and was last refreshed at least `refresh_seconds` ago."""
        return self.bar is not None and time.perf_counter() - self._last_refresh >= self.refresh_seconds

    def show(self, frames: int) -> None:
        """Display `frames` codec frames produced in total."""
        if self.bar is None:
            return
        self._last_refresh = time.perf_counter()
        seconds = self.spec.seconds(frames)
        rtf = f"{(self._last_refresh - self.start_time) / seconds:.2f}" if seconds > 0 else "-"
        self.bar.n = round(seconds, 2)
        self.bar.set_postfix_str(f"{self.chunks_done}/{self.total_chunks} chunks done, RTF {rtf}", refresh=False)
        self.bar.refresh()

    def call_done(self, num_chunks: int, frames: int) -> None:
        """A `generate` call of `num_chunks` chunks ended with `frames` frames in total (exact, from its output)."""
        self.chunks_done += num_chunks
        self.done_frames += frames
        self.show(self.done_frames)

    def close(self) -> None:
        if self.bar is not None:
            self.show(self.done_frames)
            self.bar.close()


class _ProgressStreamer(HiggsAudioV3RowTracker):
    """The rows of one `generate` call, counted as complete frames for a `SpeechProgress`."""

    def __init__(self, progress: SpeechProgress):
        super().__init__(progress.spec)
        self.progress = progress

    def frames(self) -> int:
        """Complete frames of every sequence of the call so far."""
        return int(self.complete_frames().sum())

    def on_rows(self) -> None:
        if self.progress.due():
            self.progress.show(self.progress.done_frames + self.frames())


# =============================================================================================== results
@dataclass
class ChunkResult:
    r"""
    One generated chunk.

    text (`str`): the chunk's text. codes (`torch.LongTensor` `[frames, num_codebooks]`): raw codec codes.
    waveform (`torch.FloatTensor` `[frames * samples_per_frame]`): its audio (CPU, float32). finished (`bool`): whether
    the model ended the speech itself; False means it was cut at the length limit. seed (`int`): its sampling seed.
    frame_rate (`int`): codec frames per second. speaker / line_number: for dialogue chunks, the speaker and the script
    line (None otherwise).
    """

    text: str
    codes: torch.LongTensor
    waveform: torch.FloatTensor
    finished: bool
    seed: int
    frame_rate: int
    speaker: str | None = None
    line_number: int | None = None

    @property
    def num_frames(self) -> int:
        return self.codes.shape[0]

    @property
    def duration(self) -> float:
        """Seconds of audio."""
        return self.num_frames / self.frame_rate


@dataclass
class SpeechResult:
    r"""
    The output of `synthesize_long` / `synthesize_dialogue`.

    waveform (`torch.FloatTensor` `[samples]`): every chunk's audio in order, with `pause_seconds` of silence between
    consecutive chunks (CPU, float32). sampling_rate (`int`): 24000. chunks (`list[ChunkResult]`): the chunks (at least
    one). pause_seconds (`float`): the silence between chunks. generation_seconds (`float`): time spent generating
    (and decoding). max_new_tokens (`int`): the per-chunk row limit. voices (`dict`): the voice used per speaker
    (`None` key for long-form speech), a `HiggsAudioV3Voice` or None when a chunk was spoken without reference.
    """

    waveform: torch.FloatTensor
    sampling_rate: int
    chunks: list[ChunkResult]
    pause_seconds: float
    generation_seconds: float
    max_new_tokens: int
    voices: dict = field(default_factory=dict)

    @property
    def duration(self) -> float:
        """Seconds of audio, pauses included."""
        return self.waveform.shape[-1] / self.sampling_rate

    @property
    def speech_duration(self) -> float:
        """Seconds of generated audio, pauses not included."""
        return sum(chunk.duration for chunk in self.chunks)

    @property
    def real_time_factor(self) -> float:
        """Generation time / seconds of generated audio (pauses not counted); below 1 is faster than real time."""
        return self.generation_seconds / self.speech_duration if self.speech_duration > 0 else float("inf")

    @property
    def unfinished_chunks(self) -> list[int]:
        """0-based indices of the chunks cut at the length limit (the model's runaway failure)."""
        return [i for i, chunk in enumerate(self.chunks) if not chunk.finished]

    @property
    def voice(self) -> HiggsAudioV3Voice | None:
        """The voice of long-form speech (the user's reference or the first chunk's), or None."""
        return self.voices.get(None)

    def line_waveforms(self) -> list[tuple[str | None, torch.FloatTensor]]:
        """One waveform per dialogue line (chunks of one line joined with the pause), as `(speaker, waveform)`; for
        long-form speech, one per chunk."""
        groups: list[list[ChunkResult]] = []
        for chunk in self.chunks:
            if groups and chunk.line_number is not None and groups[-1][0].line_number == chunk.line_number:
                groups[-1].append(chunk)
            else:
                groups.append([chunk])
        return [(group[0].speaker, _join(group, self.pause_seconds, self.sampling_rate)) for group in groups]

    def save(self, path: str | os.PathLike) -> Path:
        """Write the waveform (format from the extension, `.wav` as 16-bit PCM)."""
        return save_audio(self.waveform, path, sampling_rate=self.sampling_rate)

    def codes_state_dict(self) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """The codes for saving with safetensors: `codes` `[sum of frames, num_codebooks]` (chunks concatenated) and
        `chunk_frames` `[chunks]`, plus string metadata (texts, speakers, finished flags, seeds, rates, pause)."""
        tensors = {
            "codes": torch.cat([chunk.codes for chunk in self.chunks]).contiguous(),
            "chunk_frames": torch.tensor([chunk.num_frames for chunk in self.chunks], dtype=torch.long),
        }
        metadata = {
            "format": "higgs_audio_v3_codes",
            "texts": json.dumps([chunk.text for chunk in self.chunks], ensure_ascii=False),
            "speakers": json.dumps([chunk.speaker for chunk in self.chunks], ensure_ascii=False),
            "finished": json.dumps([chunk.finished for chunk in self.chunks]),
            "seeds": json.dumps([chunk.seed for chunk in self.chunks]),
            "sampling_rate": str(self.sampling_rate),
            "frame_rate": str(self.chunks[0].frame_rate),
            "pause_seconds": repr(self.pause_seconds),
        }
        return tensors, metadata

    def save_codes(self, path: str | os.PathLike) -> Path:
        """Write `codes_state_dict()` to a `.safetensors` file (beside it first, then renamed into place)."""
        from safetensors.torch import save_file

        path = Path(path)
        if path.suffix.lower() != ".safetensors":
            raise ValueError(f"Codes are saved as .safetensors; got the file name {path.name!r}.")
        tensors, metadata = self.codes_state_dict()
        with atomic_output(path) as temporary:
            save_file(tensors, str(temporary), metadata=metadata)
        return path


def _join(chunks: Sequence[ChunkResult], pause_seconds: float, sampling_rate: int) -> torch.FloatTensor:
    """The chunks' waveforms with `round(pause_seconds * sampling_rate)` zeros between consecutive ones."""
    silence = torch.zeros(round(pause_seconds * sampling_rate))
    parts = [part for chunk in chunks for part in (silence, chunk.waveform)][1:]
    return torch.cat(parts)


# =============================================================================================== the synthesis core
def rows_for_max_seconds(
    max_seconds: float,
    spec: HiggsAudioV3AudioSpec,
    positions: int | None = MAX_POSITIONS,
    *,
    name: str = "max_seconds",
    positions_name: str = "max_positions",
) -> int:
    """The one home of the audio limit per chunk (`synthesize_long(max_seconds=...)`, `higgs-v3 speak --max-seconds`):
    `max_seconds` must be a positive, finite number of seconds that `positions` positions hold (one request: prompt
    plus rows; `None`: no bound), else a `ValueError` naming `name` (and `positions_name`). Returns its rows
    (`spec.rows_for_seconds`: its frames plus the delay pattern's rows)."""
    longest = None if positions is None else spec.seconds(spec.frames(positions))
    problem = None
    if isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float)) or not 0 < max_seconds < math.inf:
        problem = f"{name} must be a positive number of seconds, got {max_seconds!r}."
    elif longest is not None and max_seconds > longest:
        problem = (f"{name} {max_seconds:g} is more than one chunk can hold: prompt plus audio rows are at most "
                   f"{positions} positions ({positions_name}), at most {longest:g} s of audio per chunk; long text is "
                   "split into chunks anyway.")
    if problem:
        raise ValueError(problem)
    return spec.rows_for_seconds(max_seconds)


def max_new_tokens_for(
    model: PreTrainedModel, max_seconds: float | None, max_positions: int | None = MAX_POSITIONS
) -> int | None:
    """Rows for `max_seconds` of audio (`rows_for_max_seconds`); None for None. The bound is what `generate` allows
    one request with the same `max_positions`: that many positions (default `MAX_POSITIONS`, the official server's
    limit), or, lifted (`max_positions=None`), the model's `max_position_embeddings`."""
    if max_seconds is None:
        return None
    if max_positions is not None:
        return rows_for_max_seconds(max_seconds, model.config.audio_spec, max_positions)
    embeddings = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    return rows_for_max_seconds(max_seconds, model.config.audio_spec, embeddings,
                                positions_name="the model's max_position_embeddings; max_positions=None")


class _Synthesizer:
    """Speaks `SpeechJob`s through `model.generate` in batches: the core of `synthesize_long` and
    `synthesize_dialogue`. Its options are checked once, when it is built, before any voice is encoded; the codec is
    the model's to check (`encode_reference`, `generate(output_audio=True)`)."""

    def __init__(self, model, processor, *, pause_seconds, batch_size, seed, max_seconds, progress, generate_kwargs):
        problem = None
        if isinstance(pause_seconds, bool) or not isinstance(pause_seconds, (int, float)) or not 0 <= pause_seconds < math.inf:
            problem = f"pause_seconds must be a non-negative number of seconds, got {pause_seconds!r}."
        elif isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            problem = f"batch_size must be a positive integer, got {batch_size!r}."
        if problem:
            raise ValueError(problem)
        self.model, self.processor, self.spec = model, processor, model.config.audio_spec
        self.pause_seconds, self.batch_size, self.progress = float(pause_seconds), batch_size, progress
        self.base_seed = draw_seed() if seed is None else check_seed(seed)
        self.generate_kwargs = dict(generate_kwargs)
        if max_seconds is not None:
            self.generate_kwargs["max_new_tokens"] = max_new_tokens_for(
                model, max_seconds, self.generate_kwargs.get("max_positions", MAX_POSITIONS))
        limit = self.generate_kwargs.get("max_new_tokens")
        self.max_new_tokens = int(limit if limit is not None else model.generation_config.max_new_tokens or MAX_NEW_TOKENS)
        self.generation_seconds = 0.0

    def speak(self, jobs: list[SpeechJob], voices: Mapping) -> SpeechResult:
        """Generate every job with the voice `voices[job.voice_key]`. A key whose voice is None (or absent) gets the
        voice of its first job, which is generated first without reference; the other jobs follow in batches."""
        check_seed(self.base_seed + jobs[-1].index, f"the last chunk's seed (seed + {jobs[-1].index})")
        voices = dict(voices)
        firsts: dict = {}
        for job in jobs:
            if voices.get(job.voice_key) is None:
                firsts.setdefault(job.voice_key, job)
        display = None
        if self.progress:  # True, or a file-like object to draw on
            display = SpeechProgress(self.spec, len(jobs), file=self.progress if hasattr(self.progress, "write") else None)
        try:
            chunks = self._run(list(firsts.values()), voices, display)
            voices.update({key: _voice_from_chunk(chunks[job.index], self.spec) for key, job in firsts.items()})
            chunks.update(self._run([job for job in jobs if job.index not in chunks], voices, display))
        finally:
            if display:
                display.close()
        ordered = [chunks[job.index] for job in jobs]
        return SpeechResult(
            waveform=_join(ordered, self.pause_seconds, self.spec.sampling_rate),
            sampling_rate=self.spec.sampling_rate,
            chunks=ordered,
            pause_seconds=self.pause_seconds,
            generation_seconds=self.generation_seconds,
            max_new_tokens=self.max_new_tokens,
            voices=voices,
        )

    def _run(self, jobs: list[SpeechJob], voices: dict, display: SpeechProgress | None) -> dict[int, ChunkResult]:
        """One `generate` call per `batch_size` jobs; the chunks by job index."""
        chunks = {}
        for start in range(0, len(jobs), self.batch_size):
            batch = jobs[start : start + self.batch_size]
            began = time.perf_counter()
            inputs = self.processor([job.text for job in batch], reference=[voices.get(job.voice_key) for job in batch])
            seeds = [self.base_seed + job.index if job.seed is None else job.seed for job in batch]
            output = self.model.generate(
                **inputs.to(self.model.device), seed=seeds, return_dict_in_generate=True, output_audio=True,
                streamer=display.streamer() if display else None, **self.generate_kwargs,
            )
            frames, finished = output.audio_code_lengths.tolist(), output.finished.tolist()
            for i, job in enumerate(batch):
                chunks[job.index] = ChunkResult(
                    job.text, output.audio_codes[i, : frames[i]].detach().cpu(),
                    output.audio[i].detach().float().cpu().reshape(-1), bool(finished[i]), seeds[i],
                    self.spec.frame_rate, job.speaker, job.line_number,
                )
            self.generation_seconds += time.perf_counter() - began
            if display:
                display.call_done(len(batch), sum(frames))
        return chunks


# =============================================================================================== the entry points
def synthesize_long(
    model: PreTrainedModel,
    processor: ProcessorMixin,
    text: str,
    *,
    reference: object | None = None,
    reference_text: str | None = None,
    sampling_rate: int | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
    pause_seconds: float = DEFAULT_PAUSE_SECONDS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    seed: int | None = None,
    max_seconds: float | None = None,
    progress: bool | object = False,
    **generate_kwargs,
) -> SpeechResult:
    r"""
    Speak a text of any length: split it with `split_text`, generate the chunks (in batches), join them with pauses.

    Without `reference`, chunk 0 is generated first and its codes and text become the reference voice of every later
    chunk, so the voice stays the same; with `reference`, every chunk uses it. Chunk `i` uses seed `seed + i`.

    Args:
        model: a `HiggsAudioV3ForConditionalGeneration` with its codec.
        processor: its `HiggsAudioV3Processor` (either may come from the installed package or from remote code).
        text: the text, with inline control tags if any (checked up front by `processor.check_text`).
        reference: the voice: anything `resolve_voice` takes (a voice, a voice file, a clip encoded once for all
            chunks, or `(clip, transcript)`).
        reference_text: transcript of the reference clip (gives the "clone with transcript" layout).
        sampling_rate: sample rate of an array `reference`.
        max_chars (`int`, defaults to 300): the largest chunk in spoken characters.
        pause_seconds (`float`, defaults to 0.3): silence between chunks.
        batch_size (`int`, defaults to 8): chunks per `generate` call.
        seed (`int`, *optional*): base seed (default: `generation_higgs_v3.draw_seed()`, from torch's global RNG).
        max_seconds (`float`, *optional*): audio limit per chunk (`max_new_tokens_for`; default: the model's limit).
        progress: True for a tqdm bar on stderr (or a file-like object to draw it on).
        generate_kwargs: passed to `model.generate` (`temperature`, `top_k`, `top_p`, `min_p`, `do_sample`, ...).

    Returns:
        `SpeechResult`: `waveform` `[sum(frames_i) * samples_per_frame + (n - 1) * round(pause_seconds * sampling_rate)]`,
        the chunks with their codes, texts and `finished` flags, `voice`, `real_time_factor`, `unfinished_chunks`.
    """
    jobs = speech_jobs(processor, text, max_chars)
    synthesizer = _Synthesizer(model, processor, pause_seconds=pause_seconds, batch_size=batch_size, seed=seed,
                               max_seconds=max_seconds, progress=progress, generate_kwargs=generate_kwargs)
    if reference is None and reference_text is not None:
        raise ValueError("reference_text was given without a reference voice or clip; pass reference as well.")
    voice = None if reference is None else resolve_voice(model, processor, reference, reference_text, sampling_rate)
    return synthesizer.speak(jobs, {None: voice})


def synthesize_dialogue(
    model: PreTrainedModel,
    processor: ProcessorMixin,
    script: str | Sequence[DialogueLine] | Sequence[tuple[str, str]],
    voices: Mapping[str, object] | None = None,
    *,
    auto_voices: bool = False,
    max_chars: int = DEFAULT_MAX_CHARS,
    pause_seconds: float = DEFAULT_DIALOGUE_PAUSE_SECONDS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    seed: int | None = None,
    max_seconds: float | None = None,
    progress: bool | object = False,
    **generate_kwargs,
) -> SpeechResult:
    r"""
    Speak a dialogue: one generation per line (long lines chunked with `split_text`) with that speaker's voice, joined
    with pauses into one waveform; `result.line_waveforms()` gives one waveform per line.

    Args:
        model / processor: as in `synthesize_long`.
        script: `[Name] text` lines (see `parse_dialogue`), or `DialogueLine`s, or `(speaker, text)` pairs.
        voices: speaker name -> voice (anything `resolve_voice` takes).
        auto_voices (`bool`, defaults to False): a speaker without a voice gets one from their first generated chunk
            (as long-form speech does); when False, such a speaker is an error (it is usually a typo in a name).
        max_chars, pause_seconds (defaults to 0.4), batch_size, seed, max_seconds, progress, generate_kwargs: as in
            `synthesize_long`. The first chunk of each voiceless speaker is generated first, then every other chunk.

    Returns:
        `SpeechResult` whose chunks carry `speaker` and `line_number`; `voices` maps each speaker to their voice.
    """
    jobs = dialogue_jobs(processor, script, max_chars)
    synthesizer = _Synthesizer(model, processor, pause_seconds=pause_seconds, batch_size=batch_size, seed=seed,
                               max_seconds=max_seconds, progress=progress, generate_kwargs=generate_kwargs)
    voices = dict(voices or {})
    missing = check_dialogue_voices(jobs, voices, auto_voices)
    resolved = {name: resolve_voice(model, processor, spec, where=f"the voice of {name!r}") for name, spec in voices.items()}
    return synthesizer.speak(jobs, {**resolved, **dict.fromkeys(missing)})


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_DIALOGUE_PAUSE_SECONDS",
    "DEFAULT_PAUSE_SECONDS",
    "ChunkResult",
    "SpeechJob",
    "SpeechProgress",
    "SpeechResult",
    "dialogue_jobs",
    "max_new_tokens_for",
    "rows_for_max_seconds",
    "resolve_voice",
    "speech_jobs",
    "synthesize_dialogue",
    "synthesize_long",
]
