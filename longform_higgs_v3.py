# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Long texts and dialogues with Higgs Audio v3: a tag-aware sentence chunker, long-form synthesis with a stable
voice, dialogue scripts, and a progress display. The library side of `higgs-v3 speak` (see `cli_higgs_v3`).

The model's quality drops on long inputs (fine up to about 500 characters, unreliable near 750, it can collapse near
1000), so long text is spoken in chunks of a few hundred characters:

```
text ──split_text──> chunk 1, chunk 2, ..., chunk n          (sentence boundaries; never inside a <|...|> tag)
chunk 1 ──generate──> codes 1 ──┐                              (only when the user gave no reference voice)
                                └─> voice = (codes 1, chunk 1) ──> chunks 2..n generated in batches with that voice
waveform = audio 1 + pause + audio 2 + pause + ... + audio n
```

Without a user reference the first chunk's generated audio and its text become the reference of every later chunk,
so the voice stays the same across chunks. Dialogue scripts (`[Name] text` lines) get one generation per line (long
lines are chunked the same way) with that speaker's reference, joined with pauses.

Chunk `i` (counting from 0 over the whole text or script) is generated with seed `seed + i`; `generate` gives a
sequence with a given seed the same codes alone or in any batch, so the batch size does not change the result.

Example:

```python
>>> result = synthesize_long(model, processor, open("chapter.txt").read(), seed=0, max_seconds=40)  # doctest: +SKIP
>>> result.save("chapter.wav"); result.duration, result.real_time_factor, result.unfinished_chunks  # doctest: +SKIP
>>> split_text("First sentence. <|emotion:anger|>Second one! 第三句。", max_chars=20)
['First sentence.', '<|emotion:anger|>Second one! 第三句。']

```
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .delay_higgs_v3 import speech_end_row


if TYPE_CHECKING:
    from .audio_io_higgs_v3 import HiggsAudioV3Voice
    from .modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration
    from .processing_higgs_v3 import HiggsAudioV3Processor

try:
    from tqdm.auto import tqdm
except ImportError:  # pragma: no cover - tqdm comes with transformers; the progress display is optional
    tqdm = None


# =============================================================================================== the chunker
# A control tag or any other special-token-looking `<|...|>` (the processor's pattern): never split, never counted.
TAG_PATTERN = re.compile(r"<\|[^<>|\n]*\|>")

DEFAULT_MAX_CHARS = 300
DEFAULT_PAUSE_SECONDS = 0.3
DEFAULT_DIALOGUE_PAUSE_SECONDS = 0.4
DEFAULT_BATCH_SIZE = 8

# Closing quotes and brackets that belong to the sentence they end.
_CLOSERS = "\"'”’»)]}」』）】》〉›"
# End a sentence wherever they appear (no space follows them in CJK text).
_ALWAYS_TERMINALS = "。！？｡।"
# End a sentence when whitespace, a tag or the end of the text follows ("3.14" and "e.g.x" do not end one).
_LATIN_TERMINALS = ".!?…"
# Clause marks for splitting an over-long sentence: CJK ones anywhere, Latin ones before whitespace/tag/end.
_ALWAYS_CLAUSE_MARKS = "，、；：—"
_LATIN_CLAUSE_MARKS = ",;:"
# Words that end with a period without ending the sentence (compared in lower case).
_ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "e.g", "i.e", "cf", "approx"})

SENTENCE, CLAUSE, SPACE, CHARACTER = 0, 1, 2, 3  # split levels, coarse to fine


def spoken_length(text: str) -> int:
    """The length the chunker measures: characters of `text` without control tags and without leading/trailing
    whitespace (a tag is one token and is not spoken)."""
    return len(TAG_PATTERN.sub("", text).strip())


def _is_speakable(text: str) -> bool:
    """Whether `text` has anything to say once tags are removed (a letter, digit or ideograph)."""
    return any(character.isalnum() for character in TAG_PATTERN.sub("", text))


class _Document:
    """A text with its tags masked: `masked` has the same length as `text`, every tag character replaced by a mask
    character that no boundary pattern matches, so boundaries are never found inside a tag."""

    def __init__(self, text: str):
        self.text = text
        mask = "\ue000"
        while mask in text:  # a private-use character the text does not contain
            mask = chr(ord(mask) + 1)
        self.mask = mask
        self.tag_spans = [match.span() for match in TAG_PATTERN.finditer(text)]
        masked = list(text)
        inside = [False] * (len(text) + 1)  # inside[i]: a cut at i would split a tag
        for start, end in self.tag_spans:
            masked[start:end] = mask * (end - start)
            for i in range(start + 1, end):
                inside[i] = True
        self.masked = "".join(masked)
        self.inside = inside
        # after_tag[i]: text[:i] ends with a tag once trailing whitespace is dropped (a cut there strands the tag).
        after_tag, last = [False] * (len(text) + 1), False
        for i, character in enumerate(self.masked):
            if not character.isspace():
                last = character == mask
            after_tag[i + 1] = last
        self.after_tag = after_tag
        escaped_mask = re.escape(mask)
        closers = re.escape(_CLOSERS)
        follow = rf"(?=\s|{escaped_mask}|$)"
        self.patterns = {
            SENTENCE: re.compile(
                rf"[{re.escape(_ALWAYS_TERMINALS)}][{closers}]*\s*"
                rf"|[{re.escape(_LATIN_TERMINALS)}]+[{closers}]*{follow}\s*"
                rf"|\s*\n\s*"
            ),
            CLAUSE: re.compile(
                rf"[{re.escape(_ALWAYS_CLAUSE_MARKS)}]+[{closers}]*\s*"
                rf"|[{re.escape(_LATIN_CLAUSE_MARKS)}]+[{closers}]*{follow}\s*"
            ),
            SPACE: re.compile(r"\s+"),
        }

    def _is_abbreviation(self, match: re.Match) -> bool:
        """A single period after a known abbreviation or an initial ("Dr. Smith", "J. R. R. Tolkien")."""
        if match.group(0).rstrip(_CLOSERS + " \t\r\n\f\v") != ".":
            return False
        word = re.search(r"(\w+(?:\.\w+)*)$", self.masked[max(0, match.start() - 32) : match.start()])
        if word is None:
            return False
        word = word.group(1)
        return word.lower() in _ABBREVIATIONS or (len(word) == 1 and word.isupper())

    def _valid(self, cut: int, start: int, end: int) -> bool:
        """A cut strictly inside `[start, end)`, not inside a tag, not right after a tag (tags go with what follows)
        and not before a combining mark."""
        return (
            start < cut < end
            and not self.inside[cut]
            and not self.after_tag[cut]
            and not unicodedata.combining(self.text[cut])
        )

    def cuts(self, start: int, end: int, level: int) -> list[int]:
        """Positions in `(start, end)` where the span may be cut at `level`."""
        if level == CHARACTER:
            candidates = range(start + 1, end)
        else:
            candidates = (
                match.end()
                for match in self.patterns[level].finditer(self.masked, start, end)
                if not (level == SENTENCE and self._is_abbreviation(match))
            )
        return [cut for cut in candidates if self._valid(cut, start, end)]

    def split(self, start: int, end: int, level: int) -> list[tuple[int, int]]:
        """`[start, end)` cut at every boundary of `level`. Above the character level, pieces with nothing to say are
        merged into the next piece (the last one into the previous piece), so a lone tag or "..." never becomes its own
        piece; single characters are left for `pack` to join (merging them could exceed the size limit)."""
        bounds = [start, *self.cuts(start, end, level), end]
        pieces = [(a, b) for a, b in zip(bounds, bounds[1:])]
        if level == CHARACTER:
            return pieces
        merged: list[tuple[int, int]] = []
        pending = None  # start of silent pieces waiting for the next piece
        for a, b in pieces:
            if pending is not None:
                a, pending = pending, None
            if _is_speakable(self.text[a:b]):
                merged.append((a, b))
            else:
                pending = a
        if pending is not None:
            if merged:
                merged[-1] = (merged[-1][0], end)
            else:
                merged.append((pending, end))
        return merged

    def length(self, start: int, end: int) -> int:
        return spoken_length(self.text[start:end])

    def pack(self, units: list[tuple[int, int]], max_chars: int) -> list[tuple[int, int]]:
        """Greedily join consecutive units while the joined span stays within `max_chars`."""
        packed: list[tuple[int, int]] = []
        for start, end in units:
            if packed and self.length(packed[-1][0], end) <= max_chars:
                packed[-1] = (packed[-1][0], end)
            else:
                packed.append((start, end))
        return packed

    def fit(self, start: int, end: int, level: int, max_chars: int) -> list[tuple[int, int]]:
        """Pieces of `[start, end)` within `max_chars`, cutting at `level` and finer levels only where needed."""
        if self.length(start, end) <= max_chars or level > CHARACTER:
            return [(start, end)]
        parts = self.split(start, end, level)
        if len(parts) == 1:
            return self.fit(start, end, level + 1, max_chars)
        units = [piece for a, b in parts for piece in self.fit(a, b, level + 1, max_chars)]
        return self.pack(units, max_chars)


def _check_max_chars(max_chars: int) -> None:
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars must be a positive number of characters, got {max_chars!r}.")


def split_sentences(text: str) -> list[str]:
    """Split `text` into sentences; `"".join(split_sentences(text)) == text` (whitespace stays with the sentence it
    follows).

    A sentence ends after `。！？｡।` (anywhere), after `.!?…` followed by whitespace, a tag or the end of the text (not
    after an abbreviation such as "Dr." or an initial), with any closing quotes or brackets, and at line breaks.
    Never inside a `<|...|>` tag, and never right after one: a tag at the start of a sentence stays with it. Pieces with
    nothing to say (a lone tag, "...") join the next sentence.
    """
    document = _Document(text)
    if not text:
        return []
    return [text[a:b] for a, b in document.split(0, len(text), SENTENCE)]


def split_text(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[str]:
    r"""
    Split `text` into chunks of at most `max_chars` spoken characters (`spoken_length`: tags and edge whitespace are
    not counted), for one generation each.

    Whole sentences (`split_sentences`) are packed greedily into chunks. A sentence longer than `max_chars` is cut at
    clause marks (`, ; :` before a space, `，、；：—` anywhere), a clause still too long at spaces, and a word still
    too long (CJK text without punctuation) between characters. No cut is ever made inside a `<|...|>` tag or right
    after one, so every chunk but the last starts its tags with the text they apply to. Chunks are stripped of edge
    whitespace; joined, they give back `text` up to whitespace.

    Args:
        text: the text, with inline control tags if any.
        max_chars (`int`, defaults to 300): the largest chunk, in spoken characters.

    Returns:
        `list[str]`: the chunks in order (empty for a text that is only whitespace).
    """
    _check_max_chars(max_chars)
    if not text.strip():
        return []
    document = _Document(text)
    units = [
        piece
        for start, end in document.split(0, len(text), SENTENCE)
        for piece in document.fit(start, end, CLAUSE, max_chars)
    ]
    chunks = [text[a:b].strip() for a, b in document.pack(units, max_chars)]
    return [chunk for chunk in chunks if chunk]


# =============================================================================================== dialogue scripts
_SPEAKER_LINE = re.compile(r"^\s*\[([^\[\]\n]+)\]\s*(.*)$")


@dataclass
class DialogueLine:
    """One line of a dialogue script: who speaks, what, and where it was in the script (1-based line number)."""

    speaker: str
    text: str
    line_number: int


def parse_dialogue(script: str) -> list[DialogueLine]:
    r"""
    Parse a dialogue script: one `[Name] text` per line. Blank lines are skipped; a line without `[Name]` continues the
    previous speaker's line (joined with a space).

    >>> [(line.speaker, line.text) for line in parse_dialogue("[Ann] Hi there.\n[Bob] Hello!\nHow are you?")]
    [('Ann', 'Hi there.'), ('Bob', 'Hello! How are you?')]
    """
    lines: list[DialogueLine] = []
    for number, raw in enumerate(script.splitlines(), start=1):
        if not raw.strip():
            continue
        match = _SPEAKER_LINE.match(raw)
        if match is None:
            if not lines:
                raise ValueError(
                    f"Dialogue line {number} ({raw.strip()[:40]!r}) has no speaker; every line of a dialogue script starts "
                    "with [Name], e.g. '[Alice] Hello there.'"
                )
            lines[-1].text = f"{lines[-1].text} {raw.strip()}".strip()
            continue
        speaker, text = match.group(1).strip(), match.group(2).strip()
        if not speaker:
            raise ValueError(f"Dialogue line {number} has an empty speaker name in brackets; write [Name] text.")
        lines.append(DialogueLine(speaker=speaker, text=text, line_number=number))
    for line in lines:
        if not line.text:
            raise ValueError(f"Dialogue line {line.line_number} ([{line.speaker}]) has no text; there is nothing to speak.")
    if not lines:
        raise ValueError("The dialogue script is empty; write one '[Name] text' line per turn.")
    return lines


def check_dialogue_voices(lines: Sequence[DialogueLine], voices: Mapping[str, object], auto_voices: bool) -> list[str]:
    """Check that every voice belongs to a speaker and, unless `auto_voices`, that every speaker has a voice. Returns
    the speakers without a voice, in order of appearance."""
    speakers = list(dict.fromkeys(line.speaker for line in lines))
    unknown = [name for name in voices if name not in speakers]
    if unknown:
        raise ValueError(
            f"Voices were given for {', '.join(map(repr, unknown))}, who never speak; the script's speakers are "
            f"{', '.join(map(repr, speakers))}."
        )
    missing = [name for name in speakers if name not in voices]
    if missing and not auto_voices:
        first = next(line for line in lines if line.speaker == missing[0])
        raise ValueError(
            f"Speaker {missing[0]!r} (line {first.line_number}) has no voice; give one per speaker (e.g. "
            f"--voice {missing[0]}=clip.wav:transcript, or a saved voice file), or let each voiceless speaker's first "
            f"line make their voice (auto_voices=True / --auto-voices). Speakers without a voice: "
            f"{', '.join(map(repr, missing))}."
        )
    return missing


# =============================================================================================== progress
class SpeechProgress:
    r"""
    A progress display across several `generate` calls: seconds of audio produced so far and the real-time factor
    (generation time / audio duration; below 1 is faster than real time), on a tqdm bar (stderr by default).

    `streamer(total_chunks_done)` gives the `streamer=` for one `generate` call. It counts, per sequence, the rows
    emitted before codebook 0's end-of-codes (the codec frames), as `(batch,)` tensors; the display is refreshed at
    most every `refresh_seconds`.
    """

    def __init__(
        self,
        num_codebooks: int,
        audio_eoc_token_id: int,
        frame_rate: int,
        total_chunks: int,
        enabled: bool = True,
        file=None,
        refresh_seconds: float = 0.2,
    ):
        self.num_codebooks = num_codebooks
        self.audio_eoc_token_id = audio_eoc_token_id
        self.frame_rate = frame_rate
        self.total_chunks = total_chunks
        self.refresh_seconds = refresh_seconds
        self.chunks_done = 0
        self.done_frames = 0  # frames of the finished generate calls
        self.start_time = time.perf_counter()
        self._last_refresh = 0.0
        self.bar = None
        if enabled and tqdm is not None:
            self.bar = tqdm(
                total=None,
                file=file if file is not None else sys.stderr,
                bar_format="{desc}{n:.1f} s of audio [{elapsed}{postfix}]",
                desc="speaking: ",
                dynamic_ncols=True,
                leave=True,
            )

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start_time

    def streamer(self) -> _ProgressStreamer:
        return _ProgressStreamer(self)

    def show(self, frames: int, force: bool = False) -> None:
        """Display `frames` codec frames produced in total."""
        if self.bar is None:
            return
        now = time.perf_counter()
        if not force and now - self._last_refresh < self.refresh_seconds:
            return
        self._last_refresh = now
        seconds = frames / self.frame_rate
        rtf = f"{self.elapsed / seconds:.2f}" if seconds > 0 else "-"
        self.bar.n = round(seconds, 2)
        self.bar.set_postfix_str(f"{self.chunks_done}/{self.total_chunks} chunks done, RTF {rtf}", refresh=False)
        self.bar.refresh()

    def call_done(self, num_chunks: int, frames: int) -> None:
        """A `generate` call of `num_chunks` chunks ended with `frames` frames in total (exact, from its output)."""
        self.chunks_done += num_chunks
        self.done_frames += frames
        self.show(self.done_frames, force=True)

    def close(self) -> None:
        if self.bar is not None:
            self.show(self.done_frames, force=True)
            self.bar.close()


try:
    from transformers.generation import BaseStreamer as _BaseStreamer
except ImportError:  # pragma: no cover - transformers is a requirement
    _BaseStreamer = object


class _ProgressStreamer(_BaseStreamer):
    """Counts frames while `generate` runs: `put` receives each new delayed row `[batch, num_codebooks]` (or several,
    `[batch, k, num_codebooks]`). A sequence that ended speech at row `r` (`delay_higgs_v3.speech_end_row`, the
    generation stopping rule) has `r` frames; an unfinished one has `rows - (num_codebooks - 1)` complete frames."""

    def __init__(self, progress: SpeechProgress):
        self.progress = progress
        self.rows = 0
        self.end_row: torch.Tensor | None = None  # [B]

    def put(self, value: torch.Tensor) -> None:
        if value.dim() == 2:
            value = value[:, None]  # [B, 1, C]
        end_row = speech_end_row(
            value[:, :, 0], self.progress.audio_eoc_token_id, self.progress.num_codebooks, first_row=self.rows
        )
        self.end_row = end_row if self.end_row is None else torch.minimum(self.end_row, end_row)
        self.rows += value.shape[1]
        if self.progress.bar is not None and time.perf_counter() - self.progress._last_refresh >= self.progress.refresh_seconds:
            self.progress.show(self.progress.done_frames + self.frames())

    def frames(self) -> int:
        if self.end_row is None:
            return 0
        complete = max(self.rows - (self.progress.num_codebooks - 1), 0)
        return int(torch.clamp(self.end_row, max=complete).sum())

    def end(self) -> None:
        pass


# =============================================================================================== results
@dataclass
class ChunkResult:
    r"""
    One generated chunk.

    text (`str`): the chunk's text. codes (`torch.LongTensor` `[frames, num_codebooks]`): raw codec codes.
    waveform (`torch.FloatTensor` `[frames * samples_per_frame]`): its audio (CPU, float32). finished (`bool`): whether
    the model ended the speech itself; False means it was cut at the length limit. seed (`int`): its sampling seed.
    speaker / line_number: for dialogue chunks, the speaker and the script line (None otherwise).
    """

    text: str
    codes: torch.LongTensor
    waveform: torch.FloatTensor
    finished: bool
    seed: int
    frame_rate: int = 25
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
    consecutive chunks (CPU, float32). sampling_rate (`int`): 24000. chunks (`list[ChunkResult]`): the chunks.
    pause_seconds (`float`): the silence between chunks. generation_seconds (`float`): time spent generating (and
    decoding). max_new_tokens (`int`): the per-chunk row limit. voices (`dict`): the voice used per speaker (`None` key
    for long-form speech), a `HiggsAudioV3Voice` or None when a chunk was spoken without reference.
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
    def voice(self):
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
        return [
            (group[0].speaker, _join([c.waveform for c in group], self.pause_seconds, self.sampling_rate)) for group in groups
        ]

    def save(self, path: str | os.PathLike) -> Path:
        """Write the waveform (format from the extension, `.wav` as 16-bit PCM)."""
        from .audio_io_higgs_v3 import save_audio

        return save_audio(self.waveform, path, sampling_rate=self.sampling_rate)

    def codes_state_dict(self) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """The codes for saving with safetensors: `codes` `[sum of frames, num_codebooks]` (chunks concatenated) and
        `chunk_frames` `[chunks]`, plus string metadata (texts, speakers, finished flags, seeds, rates, pause)."""
        import json

        codes = torch.cat([chunk.codes for chunk in self.chunks]) if self.chunks else torch.zeros(0, 8, dtype=torch.long)
        tensors = {
            "codes": codes.contiguous(),
            "chunk_frames": torch.tensor([chunk.num_frames for chunk in self.chunks], dtype=torch.long),
        }
        metadata = {
            "format": "higgs_audio_v3_codes",
            "texts": json.dumps([chunk.text for chunk in self.chunks], ensure_ascii=False),
            "speakers": json.dumps([chunk.speaker for chunk in self.chunks], ensure_ascii=False),
            "finished": json.dumps([chunk.finished for chunk in self.chunks]),
            "seeds": json.dumps([chunk.seed for chunk in self.chunks]),
            "sampling_rate": str(self.sampling_rate),
            "frame_rate": str(self.chunks[0].frame_rate if self.chunks else 25),
            "pause_seconds": repr(self.pause_seconds),
        }
        return tensors, metadata

    def save_codes(self, path: str | os.PathLike) -> Path:
        """Write `codes_state_dict()` to a `.safetensors` file."""
        from safetensors.torch import save_file

        path = Path(path)
        if path.suffix.lower() != ".safetensors":
            raise ValueError(f"Codes are saved as .safetensors; got the file name {path.name!r}.")
        tensors, metadata = self.codes_state_dict()
        save_file(tensors, str(path), metadata=metadata)
        return path


def _join(waveforms: Sequence[torch.Tensor], pause_seconds: float, sampling_rate: int) -> torch.FloatTensor:
    """Concatenate waveforms with `round(pause_seconds * sampling_rate)` zeros between consecutive ones."""
    if not waveforms:
        return torch.zeros(0)
    silence = torch.zeros(round(pause_seconds * sampling_rate))
    parts = []
    for i, waveform in enumerate(waveforms):
        if i:
            parts.append(silence)
        parts.append(waveform.reshape(-1).float().cpu())
    return torch.cat(parts)


# =============================================================================================== generation
@dataclass
class _Job:
    """One chunk to generate: its text, its index (for the seed), who speaks it and with which voice (None: none yet,
    or a voice key into the voices table)."""

    index: int
    text: str
    voice_key: object = None
    speaker: str | None = None
    line_number: int | None = None


def max_new_tokens_for(model: HiggsAudioV3ForConditionalGeneration, max_seconds: float | None) -> int | None:
    """Rows for `max_seconds` of audio: `ceil(max_seconds * frame_rate) + num_codebooks - 1` (the delay pattern adds
    `num_codebooks - 1` rows); None for None."""
    if max_seconds is None:
        return None
    if isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float)) or not max_seconds > 0 or math.isinf(max_seconds):
        raise ValueError(f"max_seconds must be a positive number of seconds, got {max_seconds!r}.")
    return math.ceil(max_seconds * model.config.frame_rate) + model.config.num_codebooks - 1


def _check_common(pause_seconds: float, batch_size: int) -> None:
    if isinstance(pause_seconds, bool) or not isinstance(pause_seconds, (int, float)) or not 0 <= pause_seconds < math.inf:
        raise ValueError(f"pause_seconds must be a non-negative number of seconds, got {pause_seconds!r}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")


def _base_seed(seed: int | None) -> int:
    if seed is None:
        return int(torch.randint(0, 2**62, (), dtype=torch.long))  # from torch's global RNG, as generate() does
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**62:
        raise ValueError(f"seed must be an integer in [0, 2**62), got {seed!r}.")
    return seed


class _Synthesizer:
    """Runs `_Job`s through `model.generate` in batches; shared by long-form speech and dialogue."""

    def __init__(self, model, processor, *, batch_size, seed, max_new_tokens, progress, generate_kwargs, total_chunks):
        if getattr(model, "codec", None) is None:
            raise ValueError(
                "This model has no codec (config.codec_config is None), so it cannot make audio; load a converted "
                "checkpoint that includes the codec."
            )
        self.model = model
        self.processor = processor
        self.batch_size = batch_size
        self.base_seed = _base_seed(seed)
        self.generate_kwargs = dict(generate_kwargs)
        if max_new_tokens is not None:
            self.generate_kwargs["max_new_tokens"] = max_new_tokens
        limit = self.generate_kwargs.get("max_new_tokens")
        self.max_new_tokens = int(limit if limit is not None else (model.generation_config.max_new_tokens or 2048))
        self.progress = None
        if progress:
            self.progress = SpeechProgress(
                model.config.num_codebooks,
                model.config.audio_eoc_token_id,
                model.config.frame_rate,
                total_chunks,
                file=progress if hasattr(progress, "write") else None,
            )
        self.generation_seconds = 0.0

    def run(self, jobs: Sequence[_Job], voices: Mapping) -> list[ChunkResult]:
        """Generate `jobs` in batches of `batch_size`, each with the voice `voices[job.voice_key]` (None: no reference)."""
        results = []
        for start in range(0, len(jobs), self.batch_size):
            batch = jobs[start : start + self.batch_size]
            results.extend(self._generate([job for job in batch], [voices.get(job.voice_key) for job in batch]))
        return results

    def _generate(self, jobs: list[_Job], references: list) -> list[ChunkResult]:
        began = time.perf_counter()
        inputs = self.processor([job.text for job in jobs], reference=references).to(self.model.device)
        seeds = [self.base_seed + job.index for job in jobs]
        output = self.model.generate(
            **inputs,
            seed=seeds,
            return_dict_in_generate=True,
            output_audio=True,
            streamer=self.progress.streamer() if self.progress is not None else None,
            **self.generate_kwargs,
        )
        frames = output.audio_code_lengths.tolist()
        finished = output.finished.tolist()
        results = []
        for i, job in enumerate(jobs):
            results.append(
                ChunkResult(
                    text=job.text,
                    codes=output.audio_codes[i, : frames[i]].detach().cpu(),
                    waveform=output.audio[i].detach().float().cpu().reshape(-1),
                    finished=bool(finished[i]),
                    seed=seeds[i],
                    frame_rate=self.model.config.frame_rate,
                    speaker=job.speaker,
                    line_number=job.line_number,
                )
            )
        self.generation_seconds += time.perf_counter() - began
        if self.progress is not None:
            self.progress.call_done(len(jobs), sum(frames))
        return results

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()


def _voice_from_chunk(chunk: ChunkResult, processor: HiggsAudioV3Processor) -> HiggsAudioV3Voice | None:
    """The voice made of a generated chunk (its codes and its text), or None when it produced no frame."""
    from .audio_io_higgs_v3 import HiggsAudioV3Voice

    if chunk.num_frames == 0:
        return None
    return HiggsAudioV3Voice(
        codes=chunk.codes, text=chunk.text, sampling_rate=processor.sampling_rate, frame_rate=processor.frame_rate
    )


def resolve_voice(
    model: HiggsAudioV3ForConditionalGeneration,
    processor: HiggsAudioV3Processor,
    spec: object,
    transcript: str | None = None,
    sampling_rate: int | None = None,
) -> HiggsAudioV3Voice:
    r"""
    A `HiggsAudioV3Voice` from any way of naming one:

    - a `HiggsAudioV3Voice` (a transcript given here is added when it has none);
    - a path to a saved voice (`.safetensors` or `.json`, see `HiggsAudioV3Voice.save`);
    - a reference clip (a path to an audio file, or an array with `sampling_rate`), encoded with the model's codec;
    - a tuple `(clip_or_voice, transcript)`.
    """
    from .audio_io_higgs_v3 import HiggsAudioV3Voice

    if isinstance(spec, tuple):
        if len(spec) != 2:
            raise ValueError(f"A voice tuple is (audio_or_voice, transcript); got {len(spec)} items.")
        spec, transcript = spec
    if transcript is not None and not transcript.strip():
        transcript = None
    if isinstance(spec, (str, os.PathLike)) and Path(spec).suffix.lower() in (".safetensors", ".json"):
        spec = HiggsAudioV3Voice.load(spec)
    if isinstance(spec, HiggsAudioV3Voice):
        if transcript is not None:
            if spec.text is not None:
                raise ValueError("The voice already carries its transcript; do not pass another reference text.")
            processor.check_control_tags(transcript, "the reference text")
            spec = HiggsAudioV3Voice(
                codes=spec.codes, text=transcript, sampling_rate=spec.sampling_rate, frame_rate=spec.frame_rate
            )
        return spec
    return processor.encode_reference(spec, text=transcript, sampling_rate=sampling_rate, codec=model.codec)


def synthesize_long(
    model: HiggsAudioV3ForConditionalGeneration,
    processor: HiggsAudioV3Processor,
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

    Without `reference`, chunk 1 is generated first and its codes and text become the reference voice of every later
    chunk, so the voice stays the same; with `reference`, every chunk uses it. Chunk `i` uses seed `seed + i`.

    Args:
        model: a `HiggsAudioV3ForConditionalGeneration` with its codec.
        processor: its `HiggsAudioV3Processor`.
        text: the text, with inline control tags if any (unknown tags raise the processor's `ValueError`).
        reference: the voice: a `HiggsAudioV3Voice`, a saved voice file, a reference clip (path or array) or a tuple
            `(clip, transcript)`; see `resolve_voice`.
        reference_text: transcript of the reference clip (gives the "clone with transcript" layout).
        sampling_rate: sample rate of an array `reference`.
        max_chars (`int`, defaults to 300): the largest chunk in spoken characters.
        pause_seconds (`float`, defaults to 0.3): silence between chunks.
        batch_size (`int`, defaults to 8): chunks per `generate` call.
        seed (`int`, *optional*): base seed (default: drawn from torch's global RNG).
        max_seconds (`float`, *optional*): limit per chunk; `max_new_tokens = ceil(max_seconds * 25) + 7`.
        progress: True for a tqdm bar on stderr (or a file-like object to draw it on).
        generate_kwargs: passed to `model.generate` (`temperature`, `top_k`, `top_p`, `min_p`, `do_sample`, ...).

    Returns:
        `SpeechResult`: `waveform` `[sum(frames_i) * 960 + (n - 1) * round(pause_seconds * 24000)]`, the chunks with
        their codes, texts and `finished` flags, `voice`, `real_time_factor`, `unfinished_chunks`.
    """
    _check_common(pause_seconds, batch_size)
    if not isinstance(text, str):
        raise ValueError(f"The text must be a string, got {type(text).__name__}.")
    if not text.strip():
        raise ValueError("The text is empty; there is nothing to speak.")
    processor.check_control_tags(text, "the text")
    chunks = split_text(text, max_chars)
    voice = None
    if reference is not None:
        voice = resolve_voice(model, processor, reference, reference_text, sampling_rate)
    elif reference_text is not None:
        raise ValueError("reference_text was given without a reference voice or clip; pass reference as well.")
    max_new_tokens = max_new_tokens_for(model, max_seconds)
    synthesizer = _Synthesizer(
        model, processor, batch_size=batch_size, seed=seed, max_new_tokens=max_new_tokens, progress=progress,
        generate_kwargs=generate_kwargs, total_chunks=len(chunks),
    )
    try:
        jobs = [_Job(index=i, text=chunk, voice_key="voice") for i, chunk in enumerate(chunks)]
        voices = {"voice": voice}
        results = []
        if voice is None:
            results = synthesizer.run(jobs[:1], voices)  # the first chunk alone: it gives the voice of the rest
            voices["voice"] = _voice_from_chunk(results[0], processor)
            jobs = jobs[1:]
        results += synthesizer.run(jobs, voices)
    finally:
        synthesizer.close()
    waveform = _join([chunk.waveform for chunk in results], pause_seconds, processor.sampling_rate)
    return SpeechResult(
        waveform=waveform,
        sampling_rate=processor.sampling_rate,
        chunks=results,
        pause_seconds=float(pause_seconds),
        generation_seconds=synthesizer.generation_seconds,
        max_new_tokens=synthesizer.max_new_tokens,
        voices={None: voices["voice"]},
    )


def synthesize_dialogue(
    model: HiggsAudioV3ForConditionalGeneration,
    processor: HiggsAudioV3Processor,
    script: str | Sequence[tuple[str, str]],
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
        script: `[Name] text` lines (see `parse_dialogue`), or a list of `(speaker, text)` pairs.
        voices: speaker name -> voice (anything `resolve_voice` takes: a `HiggsAudioV3Voice`, a voice file, a clip path,
            `(clip, transcript)`).
        auto_voices (`bool`, defaults to False): a speaker without a voice gets one from their first generated line
            (as long-form speech does); when False, such a speaker is an error (it is usually a typo in a name).
        max_chars, pause_seconds (defaults to 0.4), batch_size, seed, max_seconds, progress, generate_kwargs: as in
            `synthesize_long`. Every line with a known voice is generated in batches; with `auto_voices`, the first
            line of each voiceless speaker is generated first.

    Returns:
        `SpeechResult` whose chunks carry `speaker` and `line_number`; `voices` maps each speaker to their voice.
    """
    _check_common(pause_seconds, batch_size)
    if isinstance(script, str):
        lines = parse_dialogue(script)
    else:
        lines = [DialogueLine(speaker=str(s), text=t, line_number=i + 1) for i, (s, t) in enumerate(script)]
        for line in lines:
            if not isinstance(line.text, str) or not line.text.strip():
                raise ValueError(f"Dialogue line {line.line_number} ([{line.speaker}]) has no text; there is nothing to speak.")
        if not lines:
            raise ValueError("The dialogue script is empty; write one '[Name] text' line per turn.")
    voices = dict(voices or {})
    missing = check_dialogue_voices(lines, voices, auto_voices)
    for line in lines:
        processor.check_control_tags(line.text, f"dialogue line {line.line_number}")
    resolved = {name: resolve_voice(model, processor, spec) for name, spec in voices.items()}
    resolved.update({name: None for name in missing})

    jobs: list[_Job] = []
    for line in lines:
        for text in split_text(line.text, max_chars):
            jobs.append(_Job(len(jobs), text, voice_key=line.speaker, speaker=line.speaker, line_number=line.line_number))
    max_new_tokens = max_new_tokens_for(model, max_seconds)
    synthesizer = _Synthesizer(
        model, processor, batch_size=batch_size, seed=seed, max_new_tokens=max_new_tokens, progress=progress,
        generate_kwargs=generate_kwargs, total_chunks=len(jobs),
    )
    try:
        # Voiceless speakers: their first chunk, generated without reference, gives their voice.
        firsts = [next(job for job in jobs if job.speaker == name) for name in missing]
        results = {job.index: chunk for job, chunk in zip(firsts, synthesizer.run(firsts, {}))}
        for name, job in zip(missing, firsts):
            resolved[name] = _voice_from_chunk(results[job.index], processor)
        rest = [job for job in jobs if job.index not in results]
        results.update({job.index: chunk for job, chunk in zip(rest, synthesizer.run(rest, resolved))})
    finally:
        synthesizer.close()
    ordered = [results[job.index] for job in jobs]
    waveform = _join([chunk.waveform for chunk in ordered], pause_seconds, processor.sampling_rate)
    return SpeechResult(
        waveform=waveform,
        sampling_rate=processor.sampling_rate,
        chunks=ordered,
        pause_seconds=float(pause_seconds),
        generation_seconds=synthesizer.generation_seconds,
        max_new_tokens=synthesizer.max_new_tokens,
        voices=resolved,
    )


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_DIALOGUE_PAUSE_SECONDS",
    "DEFAULT_MAX_CHARS",
    "DEFAULT_PAUSE_SECONDS",
    "TAG_PATTERN",
    "ChunkResult",
    "DialogueLine",
    "SpeechProgress",
    "SpeechResult",
    "max_new_tokens_for",
    "check_dialogue_voices",
    "parse_dialogue",
    "resolve_voice",
    "split_sentences",
    "split_text",
    "spoken_length",
    "synthesize_dialogue",
    "synthesize_long",
]
