# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""The text side of long-form speech: the tag pattern (the processor checks tags with it too), a tag-aware chunker
(the model's quality drops beyond about 500 characters: `split_text` packs whole sentences into chunks, never cutting
inside or right after a `<|...|>` tag) and dialogue scripts (`[Name] text` lines, `parse_dialogue`).

```python
>>> split_text("First sentence. <|emotion:anger|>Second one! 第三句。", max_chars=20)
['First sentence.', '<|emotion:anger|>Second one! 第三句。']

```
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass


TAG_PATTERN = re.compile(r"<\|[^<>|\n]*\|>")
"""Anything that looks like a special token (`<|...|>`, one line, no nested brackets)."""

CONTROL_TAG_FAMILIES = ("emotion", "style", "sfx", "prosody", "env")
"""The inline control tags are `<|family:name|>` with one of these families; any other `<|...|>` token is structural."""


def control_tags(added: Mapping[str, int]) -> list[str]:
    """The inline control tags among a tokenizer's added tokens (`{token: id}`), in id order: THE rule of what a control
    tag is (the processor's `valid_tags` and `higgs-v3 tags`, which reads the tokenizer file without loading it)."""
    families = tuple(f"<|{family}:" for family in CONTROL_TAG_FAMILIES)
    return sorted((token for token in added if token.startswith(families) and token.endswith("|>")), key=added.get)


def nothing_to_speak(text, where: str = "the text") -> str | None:
    """The rule "there is nothing to speak", which needs no tokenizer (the command line checks it before any model
    loads; `processor.check_text` starts with it): the sentence about `where` if `text` is not a string or is blank,
    else None."""
    Where = where[:1].upper() + where[1:]
    if not isinstance(text, str):
        return f"{Where} must be a string, got {type(text).__name__}."
    return None if text.strip() else f"{Where} is empty; there is nothing to speak."


DEFAULT_MAX_CHARS = 300

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


class _Document:
    """A text with its tags masked: `masked` has the same length as `text`, every tag character replaced by a mask
    character that no boundary pattern matches, so boundaries are never found inside a tag."""

    def __init__(self, text: str):
        self.text = text
        mask = "\ue000"
        while mask in text:  # a private-use character the text does not contain
            mask = chr(ord(mask) + 1)
        masked = list(text)
        self.inside = [False] * (len(text) + 1)  # inside[i]: a cut at i would split a tag
        for start, end in (match.span() for match in TAG_PATTERN.finditer(text)):
            masked[start:end] = mask * (end - start)
            self.inside[start + 1 : end] = [True] * (end - start - 1)
        self.masked = "".join(masked)
        # after_tag[i]: text[:i] ends with a tag once trailing whitespace is dropped (a cut there strands the tag).
        self.after_tag, last = [False] * (len(text) + 1), False
        for i, character in enumerate(self.masked):
            if not character.isspace():
                last = character == mask
            self.after_tag[i + 1] = last
        closers = re.escape(_CLOSERS)
        follow = rf"(?=\s|{re.escape(mask)}|$)"
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

    def cuts(self, start: int, end: int, level: int) -> list[int]:
        """Positions strictly inside `(start, end)` where the span may be cut at `level`: not inside a tag, not right
        after a tag (tags go with what follows) and not before a combining mark."""
        if level == CHARACTER:
            candidates = range(start + 1, end)
        else:
            candidates = (
                match.end()
                for match in self.patterns[level].finditer(self.masked, start, end)
                if not (level == SENTENCE and self._is_abbreviation(match))
            )
        return [cut for cut in candidates if start < cut < end and not self.inside[cut] and not self.after_tag[cut]
                and not unicodedata.combining(self.text[cut])]

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
            if any(character.isalnum() for character in TAG_PATTERN.sub("", self.text[a:b])):  # something to say
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
        """The length the chunker measures: characters without tags (not spoken) and edge whitespace."""
        return len(TAG_PATTERN.sub("", self.text[start:end]).strip())

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


def split_sentences(text: str) -> list[str]:
    """Split `text` into sentences, `"".join(split_sentences(text)) == text`. A sentence ends after `。！？｡।`, after
    `.!?…` before whitespace, a tag or the end (not after "Dr." or an initial), with closing quotes or brackets, and
    at line breaks; never inside or right after a tag. Pieces with nothing to say join the next sentence."""
    if not text:
        return []
    return [text[a:b] for a, b in _Document(text).split(0, len(text), SENTENCE)]


def stream_sentences(pieces: Iterable[str], max_chars: int | None = None) -> Iterator[str]:
    """The sentences of a text that arrives in pieces (an LLM's deltas), each stripped as soon as it is complete
    (`SentenceCutter`, fed piece by piece). What is left is the last sentence, at the end of the stream."""
    cutter = SentenceCutter(max_chars)
    for piece in pieces:
        yield from cutter.feed(piece)
    yield from cutter.finish()


# an unclosed `<|` is a tag still arriving while it can still match TAG_PATTERN, within this many characters
_PENDING_TAG = re.compile(r"<\|[^<>|\n]{0,64}\|?\Z")


class SentenceCutter:
    """`stream_sentences` as a feeder: `feed(piece)` returns the sentences it completes, `finish()` the rest. The text
    not yet cut is split with `split_sentences` and every sentence but the last is complete (an "x" appended tells
    whether the last one is: "Hello. " is, "Hello." may still be "Hello.com"); nothing from an unclosed `<|` that can
    still become a tag is cut. With `max_chars`, an unfinished sentence longer than that is cut as `split_text` cuts
    it, so the text kept (and the work per piece) stays bounded."""

    def __init__(self, max_chars: int | None = None):
        self.buffer, self.max_chars = "", max_chars

    def feed(self, piece: str) -> list[str]:
        if not isinstance(piece, str):
            raise ValueError(f"A text stream yields strings (pieces of text), got {type(piece).__name__}.")
        self.buffer += piece
        tag = _PENDING_TAG.search(self.buffer, max(0, len(self.buffer) - 67))
        settled = tag.start() if tag else len(self.buffer)
        complete = split_sentences(self.buffer[:settled] + "x")[:-1]
        done = sum(map(len, complete))
        if self.max_chars and settled - done > self.max_chars:
            *cut, last = split_text(self.buffer[done:settled], self.max_chars)
            complete += cut
            done = self.buffer.rindex(last, done, settled)
        self.buffer = self.buffer[done:]
        return [sentence.strip() for sentence in complete if sentence.strip()]

    def finish(self) -> list[str]:
        rest, self.buffer = self.buffer.strip(), ""
        return [rest] if rest else []


def split_text(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[str]:
    """Chunks of at most `max_chars` spoken characters (tags and edge whitespace not counted), one generation each,
    stripped; joined they give back `text` up to whitespace (none for blank text). Whole sentences are packed greedily;
    a longer one is cut at clause marks (`, ; :` before a space, `，、；：—` anywhere), then spaces, then characters,
    never inside or right after a tag (a chunk's tags go with the text they apply to)."""
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars must be a positive number of characters, got {max_chars!r}.")
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


_SPEAKER_LINE = re.compile(r"^\s*\[([^\[\]\n]+)\]\s*(.*)$")


@dataclass
class DialogueLine:
    """One line of a dialogue script: who speaks, what, and where it was in the script (1-based line number)."""

    speaker: str
    text: str
    line_number: int


def parse_dialogue(script: str | Sequence[DialogueLine] | Sequence[tuple[str, str]]) -> list[DialogueLine]:
    r"""
    A dialogue script's lines: one `[Name] text` per line, blank lines skipped, a line without `[Name]` continuing the
    previous one; `DialogueLine`s (of any import, by their fields) or `(speaker, text)` pairs as they are.

    >>> [(line.speaker, line.text) for line in parse_dialogue("[Ann] Hi there.\n[Bob] Hello!\nHow are you?")]
    [('Ann', 'Hi there.'), ('Bob', 'Hello! How are you?')]
    """
    lines, problem, text = [], None, isinstance(script, str)
    for number, line in enumerate(script.splitlines() if text else script, start=1):
        match = _SPEAKER_LINE.match(line) if text else None
        if not text and hasattr(line, "speaker") and hasattr(line, "text"):
            lines.append(DialogueLine(str(line.speaker), line.text, getattr(line, "line_number", number)))
        elif not text and isinstance(line, (tuple, list)) and len(line) == 2:
            lines.append(DialogueLine(str(line[0]), line[1], number))
        elif not text:
            problem = (f"Dialogue line {number} is {type(line).__name__} {line!r:.60}; give (speaker, text) pairs, "
                       "DialogueLines or a '[Name] text' script.")
        elif match is not None and not match.group(1).strip():
            problem = f"Dialogue line {number} has an empty speaker name in brackets; write [Name] text."
        elif match is not None:
            lines.append(DialogueLine(match.group(1).strip(), match.group(2).strip(), number))
        elif line.strip() and not lines:
            problem = (f"Dialogue line {number} ({line.strip()[:40]!r}) has no speaker; every line of a dialogue "
                       "script starts with [Name], e.g. '[Alice] Hello there.'")
        elif line.strip():
            lines[-1].text = f"{lines[-1].text} {line.strip()}".strip()
        if problem:
            break
    for line in [] if problem else lines:
        if problem := nothing_to_speak(line.text, f"dialogue line {line.line_number} ([{line.speaker}])"):
            break
    if problem is None and not lines:
        problem = "The dialogue script is empty; write one '[Name] text' line per turn."
    if problem:
        raise ValueError(problem)
    return lines


def check_dialogue_voices(lines: Sequence, voices: Mapping[str, object], auto_voices: bool) -> list[str]:
    """Check that every voice belongs to a speaker and, unless `auto_voices`, that every speaker has a voice. `lines`
    are `DialogueLine`s (or anything with `speaker` and `line_number`). Returns the speakers without a voice, in order
    of appearance."""
    speakers = list(dict.fromkeys(line.speaker for line in lines))
    unknown = [name for name in voices if name not in speakers]
    missing = [name for name in speakers if name not in voices]
    if unknown or (missing and not auto_voices):
        first = None if unknown else next(line for line in lines if line.speaker == missing[0])
        raise ValueError(
            f"Voices were given for {', '.join(map(repr, unknown))}, who never speak; the script's speakers are "
            f"{', '.join(map(repr, speakers))}." if unknown else
            f"Speaker {missing[0]!r} (line {first.line_number}) has no voice; give one per speaker (e.g. --voice "
            f"{missing[0]}=clip.wav:transcript, or a saved voice file), or let each voiceless speaker's first line "
            "make their voice (auto_voices=True / --auto-voices). Speakers without a voice: "
            f"{', '.join(map(repr, missing))}."
        )
    return missing


_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"  # 1234, 1,234, 3.14
_SPELLED = re.compile(
    rf"(?P<currency>[$€£])(?P<amount>{_NUMBER})(?:\s+(?P<scale>thousand|million|billion|trillion)\b)?"
    r"|(?<![\w.:])(?P<hours>\d{1,2}):(?P<minutes>[0-5]\d)(?![\w:])(?:\s?(?P<meridiem>[ap])(?:m\b|\.m\.))?"
    r"|(?<![\w.])(?P<ordinal>\d+)(?:st|nd|rd|th)\b"
    rf"|(?<![\w.])(?P<percent>-?{_NUMBER})\s?%"
    r"|(?<![\w.,])(?P<year>1[1-9]\d\d|20\d\d)(?P<decade>s)?(?![\w%]|[.,]\d)"
    rf"|(?<![\w.])(?P<number>-?{_NUMBER})(?!\w|\.\d)",  # not a part of "1.2.3" or "3D"
    re.IGNORECASE,
)
MAX_SPELLED_DIGITS: int = 15
"""`normalize_text` says a whole number of at most this many digits as a number (up to "nine hundred ... trillion"); a
longer one (an ID, a serial, a digit string) digit by digit, as a reader would (num2words cannot say 307 digits)."""
_CURRENCIES = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
               "£": ("pound", "pounds", "penny", "pence")}


def normalize_text(text: str, language: str | None = None) -> str:
    """`text` with its numbers spelled out for `language` (None: unchanged; "en": English, with num2words): currency
    ($ € £, cents, "$2.5 million"), times ("10:30 pm"), ordinals ("21st"), percentages, years 1100-2099 and decades
    ("1990s"), other numbers ("1,234", "-3.14"); a number of more than `MAX_SPELLED_DIGITS` digits is read digit by
    digit. Control tags (`TAG_PATTERN`) are never changed. Needs num2words (`pip install num2words`, or the `normalize`
    extra)."""
    if language is None:
        return text
    if language != "en":
        raise ValueError(f"normalize must be None (off) or 'en' (English numbers, dates and currency spelled out), "
                         f"got {language!r}.")
    try:
        from num2words import num2words
    except ImportError as error:
        raise ImportError("normalize='en' needs num2words: pip install num2words (or higgs-v3[normalize]).") from error
    tags = TAG_PATTERN.findall(text) + [""]
    pieces = [_SPELLED.sub(lambda match: _spelled(match, num2words), piece) for piece in TAG_PATTERN.split(text)]
    return "".join(piece + tag for piece, tag in zip(pieces, tags))


def _spelled(match: re.Match, words) -> str:
    found = match.groupdict()
    if found["currency"]:
        return _money(found["currency"], found["amount"], found["scale"], words)
    if found["hours"]:
        hours, minutes = int(found["hours"]), int(found["minutes"])
        said = words(hours) + ("" if minutes == 0 else f" {'oh ' if minutes < 10 else ''}{words(minutes)}")
        meridiem = f" {found['meridiem'].upper()}M" if found["meridiem"] else " o'clock" if minutes == 0 else ""
        return said + meridiem
    if found["ordinal"]:
        digits = found["ordinal"]
        if len(digits.lstrip("0")) > MAX_SPELLED_DIGITS:  # the digits, the last one as an ordinal
            return f"{_whole(digits[:-1], words)} {words(int(digits[-1]), to='ordinal')}"
        return words(int(digits), to="ordinal")
    if found["percent"]:
        return _number(found["percent"], words) + " percent"
    if found["year"]:
        said = words(int(found["year"]), to="year")
        return said if not found["decade"] else said[:-1] + "ies" if said.endswith("y") else said + "s"
    return _number(found["number"], words)


def _whole(digits: str, words) -> str:
    """A whole number: in words up to `MAX_SPELLED_DIGITS` digits, else its digits one by one."""
    if len(digits.lstrip("0")) > MAX_SPELLED_DIGITS:
        return " ".join(words(int(digit)) for digit in digits)
    return words(int(digits))


def _number(text: str, words) -> str:
    """A cardinal: "minus" for a leading "-", commas dropped, the digits after the point one by one."""
    whole, _, fraction = text.lstrip("-").replace(",", "").partition(".")
    said = _whole(whole, words) + (" point " + " ".join(words(int(digit)) for digit in fraction) if fraction else "")
    return "minus " + said if text.startswith("-") else said


def _money(symbol: str, amount: str, scale: str | None, words) -> str:
    one, many, cent, cents = _CURRENCIES[symbol]
    whole, _, fraction = amount.replace(",", "").partition(".")
    if scale or len(fraction) not in (0, 2):  # "$2.5 million", "$1.234": the number, then the currency
        return f"{_number(amount, words)}{' ' + scale.lower() if scale else ''} {many}"
    units, hundredths = int(whole), int(fraction or 0)
    said = [f"{_whole(whole, words)} {one if units == 1 else many}"] if units or not hundredths else []
    said += [f"{words(hundredths)} {cent if hundredths == 1 else cents}"] if hundredths else []
    return " and ".join(said)


__all__ = [
    "CONTROL_TAG_FAMILIES",
    "DEFAULT_MAX_CHARS",
    "MAX_SPELLED_DIGITS",
    "TAG_PATTERN",
    "DialogueLine",
    "SentenceCutter",
    "check_dialogue_voices",
    "control_tags",
    "normalize_text",
    "nothing_to_speak",
    "parse_dialogue",
    "split_sentences",
    "split_text",
    "stream_sentences",
]
