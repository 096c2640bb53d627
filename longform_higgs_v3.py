# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Long texts and dialogues: one synthesis core that speaks chunks with a stable voice per speaker (the library side of
`higgs-v3 speak`; the text side, chunker and scripts, is `chunking_higgs_v3`).

```
text ──split_text──> job 0, job 1, ..., job n-1                 (one speaker: voice key None)
script ──parse_dialogue──> lines ──split_text──> jobs            (voice key: the speaker)
first job of a voiceless key ──generate──> codes ──> voice = (codes, its text) for the key's other jobs
waveform = audio 0 + pause + audio 1 + pause + ... + audio n-1
```

Texts are checked up front (`processor.check_text`), before any generation. Job `i` uses seed `seed + i`, and a seeded
sequence gets the same codes alone or in any batch: the batch size does not change the result.

Bad takes are redone (`retries`, 2 by default; 0 keeps the first take): a take that ran to the limit without its end of
speech, or whose duration per character is outside `seconds_per_char` (`take_problem`), is generated again with
`retry_seed(seed, attempt)`, only the bad rows of a batch; the first good take wins (else the best: ended, lowest WER).
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .audio_io_higgs_v3 import MAX_REFERENCE_SECONDS, HiggsAudioV3Voice, audio_html, load_reference, save_audio
from .chunking_higgs_v3 import (
    DEFAULT_MAX_CHARS, TAG_PATTERN, DialogueLine, check_dialogue_voices, normalize_text, parse_dialogue, split_text,
    stream_sentences,
)
from .codec_higgs_v3 import resample_audio
from .generation_higgs_v3 import MAX_NEW_TOKENS, MAX_POSITIONS
from .sampling_higgs_v3 import check_seed, draw_seed, retry_seed
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
DEFAULT_RETRIES = 2
MAX_RETRIES = 10  # a chunk is spoken at most 11 times: every request's work is bounded
RETRIES_FIELD = "higgs_v3_retries"
"""A model's own default for `retries`, a field of its generation config (`default_retries`): the random demo model
(`tiny-random`) is saved with 0, since redoing noise only costs time; a model without it redoes `DEFAULT_RETRIES`."""
DEFAULT_SECONDS_PER_CHAR = (0.02, 0.25)
"""A take that ended is too short below 0.02 s per character (50 per second: words skipped) and too long above 0.25 s
per character plus one second, and one per control tag (4 per second: babble); normal speech is ~0.07 s per letter. A CJK character, kana or
hangul syllable counts as 3 characters (`spoken_characters`)."""


@dataclass
class SpeechJob:
    """One chunk to speak: its text, its index over the whole text or script, its voice's key (None for long text, the
    speaker for dialogue), for dialogue its speaker and script line, and its own `seed` (else `seed + index`)."""

    text: str
    index: int
    voice_key: str | None = None
    speaker: str | None = None
    line_number: int | None = None
    seed: int | None = None


def speech_jobs(processor: ProcessorMixin, text: str, max_chars: int = DEFAULT_MAX_CHARS,
                normalize: str | None = None) -> list[SpeechJob]:
    """The jobs of a long text: `processor.check_text`, `normalize_text`, then `split_text`."""
    text = normalize_text(processor.check_text(text, "the text"), normalize)
    return [SpeechJob(chunk, index) for index, chunk in enumerate(split_text(text, max_chars))]


def dialogue_jobs(processor: ProcessorMixin, script: str | Sequence[DialogueLine] | Sequence[tuple[str, str]],
                  max_chars: int = DEFAULT_MAX_CHARS, normalize: str | None = None) -> list[SpeechJob]:
    """The jobs of a dialogue: `parse_dialogue`, `processor.check_text` and `normalize_text` on every line, then
    `split_text`."""
    lines = parse_dialogue(script)
    texts = [normalize_text(processor.check_text(line.text, f"dialogue line {line.line_number}"), normalize)
             for line in lines]
    jobs: list[SpeechJob] = []
    for line, text in zip(lines, texts):
        jobs += [SpeechJob(chunk, len(jobs) + i, line.speaker, line.speaker, line.line_number)
                 for i, chunk in enumerate(split_text(text, max_chars))]
    return jobs


def resolve_voice(model: PreTrainedModel, processor: ProcessorMixin, spec: object, transcript: str | None = None,
                  sampling_rate: int | None = None, where: str = "the reference") -> HiggsAudioV3Voice:
    """A voice from anything `load_reference` takes (a clip encoded once with `model.encode_reference`) or a pair
    `(that, transcript)`; a blank transcript is none, the voice's is checked with `processor.check_text`."""
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
    """The voice of a generated chunk (codes and text; None without a frame), at most `MAX_REFERENCE_SECONDS` as any
    reference: a chunk that ran away would make every later prompt too long."""
    if chunk.num_frames == 0:
        return None
    codes = chunk.codes[: round(MAX_REFERENCE_SECONDS * spec.frame_rate)]
    return HiggsAudioV3Voice(codes, chunk.text, sampling_rate=spec.sampling_rate, frame_rate=spec.frame_rate)


class SpeechProgress:
    """A tqdm display across `generate` calls (stderr by default): seconds of audio so far and the real-time factor,
    redrawn at most every `mininterval` (tqdm's own throttle). `streamer()` is one call's `streamer=`, counting complete
    frames."""

    def __init__(self, spec: HiggsAudioV3AudioSpec, total_chunks: int, enabled: bool = True, file=None):
        self.spec, self.total_chunks, self.bar = spec, total_chunks, None
        self.chunks_done, self.done_frames = 0, 0  # of the finished generate calls
        self.start_time = time.perf_counter()
        if enabled and tqdm is not None:
            self.bar = tqdm(total=None, file=file if file is not None else sys.stderr, desc="speaking: ",
                            bar_format="{desc}{n:.1f} s of audio [{elapsed}{postfix}]", dynamic_ncols=True, leave=True)

    def streamer(self) -> _ProgressStreamer:
        return _ProgressStreamer(self)

    def show(self, frames: int) -> None:
        if self.bar is not None:
            seconds = self.spec.seconds(frames)
            rtf = f"{(time.perf_counter() - self.start_time) / seconds:.2f}" if seconds > 0 else "-"
            self.bar.set_postfix_str(f"{self.chunks_done}/{self.total_chunks} chunks done, RTF {rtf}", refresh=False)
            self.bar.update(round(seconds, 2) - self.bar.n)

    def call_done(self, num_chunks: int, frames: int) -> None:
        """A `generate` call ended: `num_chunks` more chunks done, `frames` more frames kept (exact, from its output;
        a retry adds the kept takes' change, negative when a shorter take replaces a runaway)."""
        self.chunks_done += num_chunks
        self.done_frames += frames
        self.show(self.done_frames)

    def close(self) -> None:
        if self.bar is not None:
            self.show(self.done_frames)
            self.bar.close()


class _ProgressStreamer(HiggsAudioV3RowTracker):
    """One `generate` call's rows, counted as complete frames for a `SpeechProgress`."""

    def __init__(self, progress: SpeechProgress):
        super().__init__(progress.spec)
        self.progress = progress

    def on_rows(self) -> None:
        self.progress.show(self.progress.done_frames + int(self.complete_frames().sum()))


@dataclass
class ChunkResult:
    """One generated chunk: its text, raw codes `[frames, num_codebooks]`, waveform `[frames * samples_per_frame]`
    (CPU float32), whether the model ended it (False: cut at the limit), its seed, and for dialogue its speaker and
    line."""

    text: str
    codes: torch.LongTensor
    waveform: torch.FloatTensor
    finished: bool
    seed: int
    frame_rate: int
    speaker: str | None = None
    line_number: int | None = None
    problem: str | None = None
    """Why the kept take is bad (`take_problem`), None when it is good."""
    wer: float | None = None
    """With `verify=`: the kept take's word error rate against its text."""
    attempts: list[dict] = field(default_factory=list)
    """Every take, in order: `{"seed", "finished", "seconds", "problem", "wer"}`; `seed` is the kept one's."""

    @property
    def num_frames(self) -> int:
        return self.codes.shape[0]

    @property
    def duration(self) -> float:
        return self.num_frames / self.frame_rate


@dataclass
class SpeechResult:
    """The output of `synthesize_long` / `synthesize_dialogue`: the audio (`audio`, as the generation output and the
    pipeline name it; `waveform` is the same tensor: every chunk's audio with `pause_seconds` of silence between them,
    CPU float32), the chunks, the time spent generating, the per-chunk row limit, and the voice used per speaker (key
    None for long text; None when spoken without reference). In a notebook it shows as an audio player."""

    waveform: torch.FloatTensor
    sampling_rate: int
    chunks: list[ChunkResult]
    pause_seconds: float
    generation_seconds: float
    max_new_tokens: int
    voices: dict = field(default_factory=dict)

    @property
    def audio(self) -> torch.FloatTensor:
        """The waveform (the name the generation output and the pipeline use; `waveform` is its alias)."""
        return self.waveform

    @property
    def duration(self) -> float:
        return self.waveform.shape[-1] / self.sampling_rate

    @property
    def speech_duration(self) -> float:
        """Seconds of generated audio, pauses not included."""
        return sum(chunk.duration for chunk in self.chunks)

    @property
    def real_time_factor(self) -> float:
        """Generation time / speech duration; below 1 is faster than real time."""
        return self.generation_seconds / self.speech_duration if self.speech_duration > 0 else float("inf")

    @property
    def unfinished_chunks(self) -> list[int]:
        """0-based indices of the chunks cut at the length limit (the model's runaway failure)."""
        return [i for i, chunk in enumerate(self.chunks) if not chunk.finished]

    @property
    def failed_chunks(self) -> list[int]:
        """0-based indices of the chunks whose every take was bad (ran away, duration per character, WER)."""
        return [i for i, chunk in enumerate(self.chunks) if chunk.problem is not None]

    @property
    def voice(self) -> HiggsAudioV3Voice | None:
        """The voice of long-form speech (the user's reference or the first chunk's), or None."""
        return self.voices.get(None)

    def line_waveforms(self) -> list[tuple[str | None, torch.FloatTensor]]:
        """`(speaker, waveform)` per dialogue line (its chunks joined with the pause); per chunk for long text."""
        groups: list[list[ChunkResult]] = []
        for chunk in self.chunks:
            if groups and chunk.line_number is not None and groups[-1][0].line_number == chunk.line_number:
                groups[-1].append(chunk)
            else:
                groups.append([chunk])
        return [(group[0].speaker, _join(group, self.pause_seconds, self.sampling_rate)) for group in groups]

    def save(self, path: str | os.PathLike) -> Path:
        return save_audio(self.waveform, path, sampling_rate=self.sampling_rate)

    def _repr_html_(self) -> str:
        notes = [f"{len(self.chunks)} chunk(s) generated in {self.generation_seconds:.1f} s (real-time factor "
                 f"{self.real_time_factor:.2f})."]
        if self.unfinished_chunks:
            notes.append(f"Chunk(s) {', '.join(map(str, self.unfinished_chunks))} ran into the length limit "
                         f"({self.max_new_tokens} rows) without ending: the model's runaway failure, usually a silent "
                         "tail. Try another seed or shorter chunks.")
        return audio_html("Speech", [self.waveform], self.sampling_rate, notes=notes)


def _join(chunks: Sequence[ChunkResult], pause_seconds: float, sampling_rate: int) -> torch.FloatTensor:
    silence = torch.zeros(round(pause_seconds * sampling_rate))
    parts = [part for chunk in chunks for part in (silence, chunk.waveform)][1:]
    return torch.cat(parts)


def rows_for_max_seconds(max_seconds: float, spec: HiggsAudioV3AudioSpec, positions: int | None = MAX_POSITIONS, *,
                         name: str = "max_seconds", positions_name: str = "max_positions") -> int:
    """The one home of the audio limit per chunk (`max_seconds=`, `higgs-v3 speak --max-seconds`): a positive number
    of seconds that `positions` positions hold (prompt plus rows; None: no bound), else a `ValueError` naming `name`.
    Returns its rows (`spec.rows_for_seconds`)."""
    longest = None if positions is None else spec.seconds(spec.frames(positions))
    if isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float)) or not 0 < max_seconds < math.inf:
        raise ValueError(f"{name} must be a positive number of seconds, got {max_seconds!r}.")
    if longest is not None and max_seconds > longest:
        raise ValueError(f"{name} {max_seconds:g} is more than one chunk can hold: prompt plus audio rows are at most "
                         f"{positions} positions ({positions_name}), at most {longest:g} s of audio per chunk; long "
                         "text is split into chunks anyway.")
    return spec.rows_for_seconds(max_seconds)


def max_new_tokens_for(model: PreTrainedModel, max_seconds: float, max_positions: int | None = MAX_POSITIONS) -> int:
    """Rows for `max_seconds` (`rows_for_max_seconds`), bounded as `generate` bounds a request with the same
    `max_positions` (None: the model's `max_position_embeddings`)."""
    if max_positions is not None:
        return rows_for_max_seconds(max_seconds, model.config.audio_spec, max_positions)
    embeddings = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    return rows_for_max_seconds(max_seconds, model.config.audio_spec, embeddings,
                                positions_name="the model's max_position_embeddings; max_positions=None")


class _Synthesizer:
    """Speaks `SpeechJob`s through `model.generate` in batches. Its options are checked once, when it is built, before
    any voice is encoded; the codec is the model's to check (`encode_reference`, `generate(output_audio=True)`)."""

    def __init__(self, model, processor, *, pause_seconds, batch_size, seed, max_seconds, progress, generate_kwargs,
                 retries=None, seconds_per_char=DEFAULT_SECONDS_PER_CHAR, verify=None, max_wer=0.5):
        self.retries, self.seconds_per_char, self.verify, self.max_wer = check_take_options(
            default_retries(model) if retries is None else retries, seconds_per_char, verify, max_wer)
        number = isinstance(pause_seconds, (int, float)) and not isinstance(pause_seconds, bool)
        if not number or not 0 <= pause_seconds < math.inf:
            raise ValueError(f"pause_seconds must be a non-negative number of seconds, got {pause_seconds!r}.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
        self.model, self.processor, self.spec = model, processor, model.config.audio_spec
        self.pause_seconds, self.batch_size, self.progress = float(pause_seconds), batch_size, progress
        self.base_seed = draw_seed() if seed is None else check_seed(seed)
        self.generate_kwargs = dict(generate_kwargs)
        if max_seconds is not None:
            self.generate_kwargs["max_new_tokens"] = max_new_tokens_for(
                model, max_seconds, self.generate_kwargs.get("max_positions", MAX_POSITIONS))
        limit = self.generate_kwargs.get("max_new_tokens")
        self.max_new_tokens = int(model.generation_config.max_new_tokens or MAX_NEW_TOKENS if limit is None else limit)
        self.generation_seconds = 0.0

    def speak(self, jobs: list[SpeechJob], voices: Mapping) -> SpeechResult:
        """Every job with the voice `voices[job.voice_key]`; a key without one gets its first job's voice (that job
        generated first, without reference)."""
        check_seed(self.base_seed + jobs[-1].index, f"the last chunk's seed (seed + {jobs[-1].index})")
        voices = dict(voices)
        firsts: dict = {}
        for job in jobs:
            if voices.get(job.voice_key) is None:
                firsts.setdefault(job.voice_key, job)
        display = None
        if self.progress:  # True, or a file-like object to draw on
            file = self.progress if hasattr(self.progress, "write") else None
            display = SpeechProgress(self.spec, len(jobs), file=file)
        try:
            chunks = self._run(list(firsts.values()), voices, display)
            voices.update({key: _voice_from_chunk(chunks[job.index], self.spec) for key, job in firsts.items()})
            chunks.update(self._run([job for job in jobs if job.index not in chunks], voices, display))
        finally:
            if display:
                display.close()
        ordered, rate = [chunks[job.index] for job in jobs], self.spec.sampling_rate
        return SpeechResult(_join(ordered, self.pause_seconds, rate), rate, ordered, self.pause_seconds,
                            self.generation_seconds, self.max_new_tokens, voices)

    def _run(self, jobs: list[SpeechJob], voices: dict, display: SpeechProgress | None) -> dict[int, ChunkResult]:
        """One `generate` call per `batch_size` jobs, then one per retry of its bad takes; the chunks by job index. The
        display counts the kept takes."""
        chunks = {}
        for start in range(0, len(jobs), self.batch_size):
            batch = jobs[start : start + self.batch_size]
            seeds = {job.index: self.base_seed + job.index if job.seed is None else job.seed for job in batch}
            chunks.update(self._takes(batch, [seeds[job.index] for job in batch], voices, display))
            if display:
                display.call_done(len(batch), sum(chunks[job.index].num_frames for job in batch))
            for attempt in range(1, self.retries + 1):
                bad = [job for job in batch if chunks[job.index].problem is not None]
                if not bad:
                    break
                retakes = self._takes(bad, [retry_seed(seeds[job.index], attempt) for job in bad], voices, display)
                before = sum(chunks[job.index].num_frames for job in bad)
                for job in bad:
                    chunks[job.index] = _better_take(chunks[job.index], retakes[job.index])
                if display:
                    display.call_done(0, sum(chunks[job.index].num_frames for job in bad) - before)
        return chunks

    def _takes(self, batch: list[SpeechJob], seeds: list[int], voices: dict, display: SpeechProgress | None
               ) -> dict[int, ChunkResult]:
        """One `generate` call: a take of each job with its seed, judged (`take_problem`, `verify`)."""
        began = time.perf_counter()
        inputs = self.processor([job.text for job in batch], reference=[voices.get(job.voice_key) for job in batch])
        output = self.model.generate(
            **inputs.to(self.model.device), seed=seeds, return_dict_in_generate=True, output_audio=True,
            streamer=display.streamer() if display else None, **self.generate_kwargs,
        )
        frames, finished = output.audio_code_lengths.tolist(), output.finished.tolist()
        takes = {}
        for i, job in enumerate(batch):
            take = ChunkResult(job.text, output.audio_codes[i, : frames[i]].detach().cpu(),
                               output.audio[i].detach().float().cpu().reshape(-1), bool(finished[i]), seeds[i],
                               self.spec.frame_rate, job.speaker, job.line_number)
            takes[job.index] = judge_take(take, self.seconds_per_char, self.verify, self.max_wer,
                                          self.spec.sampling_rate)
        self.generation_seconds += time.perf_counter() - began
        return takes


def judge_take(take: ChunkResult, seconds_per_char=DEFAULT_SECONDS_PER_CHAR, verify=None, max_wer=0.5,
               sampling_rate: int | None = None) -> ChunkResult:
    """`take` judged (the library's takes and `higgs-v3 serve`'s): its `problem` (`take_problem`; with `verify`, an
    ASR pipeline, a WER above `max_wer` of its waveform at `sampling_rate`) and its one record in `attempts`."""
    take.problem = take_problem(take.finished, take.duration, take.text, seconds_per_char)
    if verify is not None and take.problem is None:
        take.wer = transcript_wer(verify, take.waveform, sampling_rate, take.text)
        take.problem = f"WER {take.wer:.2f} above {max_wer:g}" if take.wer > max_wer else None
    take.attempts = [{"seed": take.seed, "finished": take.finished, "seconds": round(take.duration, 3),
                      "problem": take.problem, "wer": take.wer}]
    return take


def _better_take(kept: ChunkResult, new: ChunkResult) -> ChunkResult:
    """The take kept after a retry, with both attempt lists: the first good one, else the best (ended, lowest WER)."""
    def rank(take: ChunkResult) -> tuple:
        return take.problem is not None, not take.finished, take.wer or 0.0

    best = new if rank(new) < rank(kept) else kept
    best.attempts = kept.attempts + new.attempts
    return best


def spoken_characters(text: str) -> int:
    """The characters of `text` that take time to say: letters and digits outside control tags (`TAG_PATTERN`), a CJK
    character, kana or hangul syllable counted as 3 (a syllable, about three Latin letters' time)."""
    return sum(3 if _WIDE.match(c) else 1 for c in TAG_PATTERN.sub(" ", text) if c.isalnum())


_WIDE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def take_problem(finished: bool, seconds: float, text: str,
                 seconds_per_char: tuple[float, float] | None = DEFAULT_SECONDS_PER_CHAR) -> str | None:
    """Why a take of `text` lasting `seconds` is bad, or None: it ran to the limit (`finished` False), or it ended
    below `low * n` seconds or above `high * n + 1 + t` (`seconds_per_char = (low, high)`, n: `spoken_characters`, t:
    its control tags, a second each for a sound or a pause)."""
    if not finished:
        return "ran to the length limit without its end of speech"
    if seconds_per_char is not None:
        (low, high), count = seconds_per_char, spoken_characters(text)
        if seconds < low * count or seconds > high * count + 1.0 + len(TAG_PATTERN.findall(text)):
            return (f"{seconds:.2f} s for {count} characters is outside [{low:g}, {high:g}] s per character "
                    "(seconds_per_char)")
    return None


def default_retries(model) -> int:
    """`retries` when a caller leaves it unset (None): the model's own default (`RETRIES_FIELD` of its generation
    config, 0 for the demo model), else `DEFAULT_RETRIES`. THE home of that default: the library, the command line and
    the server all ask here."""
    value = getattr(getattr(model, "generation_config", None), RETRIES_FIELD, None)
    return DEFAULT_RETRIES if value is None else value


def check_take_options(retries, seconds_per_char, verify, max_wer) -> tuple:
    """The retry options, checked once (a `ValueError` naming the first bad one): `retries` an integer in
    [0, MAX_RETRIES],
    `seconds_per_char` None or `(low, high)` with 0 <= low < high, `verify` None or a callable ASR pipeline, `max_wer`
    a number >= 0. Returns them (`seconds_per_char` as a tuple)."""
    def number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < math.inf

    bounds = tuple(seconds_per_char) if isinstance(seconds_per_char, (tuple, list)) else None
    problem = None
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
        problem = f"retries must be an integer from 0 (no retry) to {MAX_RETRIES}, got {retries!r}"
    elif seconds_per_char is not None and not (bounds and len(bounds) == 2 and all(map(number, bounds))
                                               and bounds[0] < bounds[1]):
        problem = f"seconds_per_char must be None or (low, high) seconds with 0 <= low < high, got {seconds_per_char!r}"
    elif verify is not None and not callable(verify):
        problem = ("verify must be a transformers ASR pipeline (pipeline('automatic-speech-recognition', model=...)), "
                   f"got a {type(verify).__name__}")
    elif not number(max_wer):
        problem = f"max_wer must be a number >= 0, got {max_wer!r}"
    if problem:
        raise ValueError(problem + ".")
    return retries, bounds, verify, max_wer


_PUNCTUATION = re.compile(r"[^\w\s']|_")


def wer_words(text: str) -> list[str]:
    """THE text normaliser of every WER here (`verify=`, `higgs-v3 eval`), after Seed-TTS-eval's: control tags
    dropped, punctuation removed (apostrophes kept), lower case, and each CJK character, kana or hangul syllable a word
    of its own (so Chinese is scored as CER). Returns the words."""
    text = _PUNCTUATION.sub(" ", TAG_PATTERN.sub(" ", text)).lower()
    return _WIDE.sub(lambda match: f" {match.group()} ", text).split()


def word_error_rate(reference: str, hypothesis: str) -> float:
    """jiwer's WER of `hypothesis` against `reference`, both through `wer_words` (a blank reference: 0.0 when the
    hypothesis is blank too, else 1.0). Needs jiwer (`pip install jiwer`, or the `eval` extra)."""
    try:
        import jiwer
    except ImportError as error:
        raise ImportError("Word error rates (verify=, higgs-v3 eval) need jiwer: pip install jiwer (or higgs-v3[eval])."
                          ) from error
    truth, words = " ".join(wer_words(reference)), " ".join(wer_words(hypothesis))
    return float(jiwer.wer(truth, words)) if truth else float(bool(words))


def transcript_wer(asr, waveform: torch.Tensor, sampling_rate: int, text: str) -> float:
    """`word_error_rate(text, what asr hears)`: the take resampled to the pipeline's rate (`resample_audio`)."""
    rate = asr.feature_extractor.sampling_rate
    samples = resample_audio(waveform.float(), sampling_rate, rate).numpy()
    return word_error_rate(text, asr({"raw": samples, "sampling_rate": rate})["text"])


def synthesize_long(
    model: PreTrainedModel, processor: ProcessorMixin, text: str, *, reference: object | None = None,
    reference_text: str | None = None, sampling_rate: int | None = None, max_chars: int = DEFAULT_MAX_CHARS,
    pause_seconds: float = DEFAULT_PAUSE_SECONDS, batch_size: int = DEFAULT_BATCH_SIZE, seed: int | None = None,
    max_seconds: float | None = None, progress: bool | object = False, retries: int | None = None,
    seconds_per_char: tuple[float, float] | None = DEFAULT_SECONDS_PER_CHAR, verify=None, max_wer: float = 0.5,
    normalize: str | None = None, **generate_kwargs,
) -> SpeechResult:
    """Speak a text of any length: split with `split_text`, the chunks generated in batches (`batch_size`, 8) and joined
    with `pause_seconds` (0.3) of silence. Without `reference` (anything `resolve_voice` takes, with `reference_text`
    and the `sampling_rate` of samples), chunk 0 becomes every later chunk's voice. `model` and `processor` may come
    from either import path; `max_chars` (300) bounds a chunk, `max_seconds` its audio (`max_new_tokens_for`); `seed`
    defaults to `draw_seed()`; `progress` is True (a tqdm bar on stderr) or a file to draw it on; `generate_kwargs`
    go to `model.generate`. A bad take (`take_problem` with `seconds_per_char`; with `verify`, an ASR pipeline, a WER
    above `max_wer`) is redone up to `retries` times (unset: `default_retries(model)`, 2, or 0 for the random demo
    model) with `retry_seed`s; `ChunkResult.attempts` lists the takes.
    `normalize="en"` spells out numbers, dates and currency (`normalize_text`; off by default)."""
    jobs = speech_jobs(processor, text, max_chars, normalize)
    synthesizer = _Synthesizer(model, processor, pause_seconds=pause_seconds, batch_size=batch_size, seed=seed,
                               max_seconds=max_seconds, progress=progress, generate_kwargs=generate_kwargs,
                               retries=retries, seconds_per_char=seconds_per_char, verify=verify, max_wer=max_wer)
    if reference is None and reference_text is not None:
        raise ValueError("reference_text was given without a reference voice or clip; pass reference as well.")
    voice = None if reference is None else resolve_voice(model, processor, reference, reference_text, sampling_rate)
    return synthesizer.speak(jobs, {None: voice})


def synthesize_stream(
    model: PreTrainedModel, processor: ProcessorMixin, pieces: Iterable[str], *, reference: object | None = None,
    reference_text: str | None = None, sampling_rate: int | None = None, max_chars: int = DEFAULT_MAX_CHARS,
    pause_seconds: float = DEFAULT_PAUSE_SECONDS, seed: int | None = None, max_seconds: float | None = None,
    retries: int | None = None, seconds_per_char: tuple[float, float] | None = DEFAULT_SECONDS_PER_CHAR,
    verify=None, max_wer: float = 0.5, normalize: str | None = None, **generate_kwargs,
) -> Iterator[torch.FloatTensor]:
    """Speak a text while it is still arriving (`pieces`: an LLM's deltas): each sentence is spoken as soon as it is
    complete (`stream_sentences`; a long one cut with `split_text` once it holds more than `max_chars`, as the
    WebSocket's cutter cuts it, so the text held and the work per piece stay bounded), and its waveform yielded (CPU
    float32 `[samples]`), `pause_seconds` of silence before every one but the first. Chunk `k` uses seed `seed + k`;
    without `reference`, the first chunk becomes the voice of the rest, as in `synthesize_long`, whose other options
    these are (a bad take is redone before its sentence is yielded; `normalize` applies to each sentence)."""
    synthesizer = _Synthesizer(model, processor, pause_seconds=pause_seconds, batch_size=1, seed=seed,
                               max_seconds=max_seconds, progress=False, generate_kwargs=generate_kwargs,
                               retries=retries, seconds_per_char=seconds_per_char, verify=verify, max_wer=max_wer)
    voice = None if reference is None else resolve_voice(model, processor, reference, reference_text, sampling_rate)
    index = 0
    for sentence in stream_sentences(pieces, max_chars):  # bounded: a sentence without an end is cut at max_chars
        sentence = normalize_text(processor.check_text(sentence, f"sentence {index + 1} of the stream"), normalize)
        for text in split_text(sentence, max_chars):
            chunk = synthesizer._run([SpeechJob(text, index)], {None: voice}, None)[index]
            voice = voice if voice is not None else _voice_from_chunk(chunk, synthesizer.spec)
            if index:
                yield torch.zeros(round(synthesizer.pause_seconds * synthesizer.spec.sampling_rate))
            yield chunk.waveform
            index += 1


def synthesize_dialogue(
    model: PreTrainedModel, processor: ProcessorMixin, script: str | Sequence[DialogueLine] | Sequence[tuple[str, str]],
    voices: Mapping[str, object] | None = None, *, auto_voices: bool = False, max_chars: int = DEFAULT_MAX_CHARS,
    pause_seconds: float = DEFAULT_DIALOGUE_PAUSE_SECONDS, batch_size: int = DEFAULT_BATCH_SIZE,
    seed: int | None = None, max_seconds: float | None = None, progress: bool | object = False,
    retries: int | None = None, seconds_per_char: tuple[float, float] | None = DEFAULT_SECONDS_PER_CHAR,
    verify=None, max_wer: float = 0.5, normalize: str | None = None, **generate_kwargs,
) -> SpeechResult:
    r"""
    Speak a dialogue (`parse_dialogue`: `[Name] text` lines, `DialogueLine`s or `(speaker, text)` pairs), each line with
    its speaker's voice (`voices`: name -> anything `resolve_voice` takes); `line_waveforms()` gives one per line. With
    `auto_voices` a voiceless speaker gets their first chunk's voice, else is refused (usually a typo in a name). The
    other options are `synthesize_long`'s (`pause_seconds` defaults to 0.4).
    """
    jobs = dialogue_jobs(processor, script, max_chars, normalize)
    synthesizer = _Synthesizer(model, processor, pause_seconds=pause_seconds, batch_size=batch_size, seed=seed,
                               max_seconds=max_seconds, progress=progress, generate_kwargs=generate_kwargs,
                               retries=retries, seconds_per_char=seconds_per_char, verify=verify, max_wer=max_wer)
    voices = dict(voices or {})
    missing = check_dialogue_voices(jobs, voices, auto_voices)
    resolved = {name: resolve_voice(model, processor, spec, where=f"the voice of {name!r}")
                for name, spec in voices.items()}
    return synthesizer.speak(jobs, {**resolved, **dict.fromkeys(missing)})


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_DIALOGUE_PAUSE_SECONDS",
    "DEFAULT_PAUSE_SECONDS",
    "DEFAULT_RETRIES",
    "MAX_RETRIES",
    "RETRIES_FIELD",
    "DEFAULT_SECONDS_PER_CHAR",
    "ChunkResult",
    "SpeechJob",
    "SpeechProgress",
    "SpeechResult",
    "default_retries",
    "dialogue_jobs",
    "judge_take",
    "max_new_tokens_for",
    "rows_for_max_seconds",
    "resolve_voice",
    "speech_jobs",
    "spoken_characters",
    "synthesize_dialogue",
    "synthesize_long",
    "synthesize_stream",
    "take_problem",
    "transcript_wer",
    "wer_words",
    "word_error_rate",
]
