"""The items of an evaluation: a Seed-TTS-eval list (`utt|prompt_text|prompt_wav|text` per line, the official test
sets' `meta.lst`) or a JSONL manifest (`{"utt", "text", "prompt_wav", "prompt_text", "seed"}` per line), turned into a
`higgs-v3 batch` manifest (one item per utterance: the prompt clip is its reference, the prompt text its transcript).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


JSONL_KEYS = {"utt": "the utterance id (required)", "text": "the text to speak (required)",
              "prompt_wav": "the prompt clip (required)", "prompt_text": "its transcript", "seed": "an integer"}
"""The keys of a JSONL evaluation manifest."""


MAX_ITEM_CHARACTERS: int = 450
"""The most spoken characters (`longform_higgs_v3.spoken_characters`: CJK counts 3) of an item's text: about 30 s of
speech, the window an ASR model such as Whisper transcribes at once. An evaluation item is one utterance
(Seed-TTS-eval's are one or two sentences); long texts are what `higgs-v3 speak` and `batch` are for."""


def split_list_line(line: str) -> list[str]:
    """The `|`-separated fields of a Seed-TTS-eval list line; a `|` inside a control tag (`<|sfx:laughter|>`, any
    `chunking_higgs_v3.TAG_PATTERN` match) is part of the text, not a separator."""
    from ..chunking_higgs_v3 import TAG_PATTERN

    fields, start, tags = [], 0, [match.span() for match in TAG_PATTERN.finditer(line)]
    for index, character in enumerate(line):
        if character == "|" and not any(a <= index < b for a, b in tags):
            fields.append(line[start:index])
            start = index + 1
    return [*fields, line[start:]]


@dataclass(frozen=True)
class EvalItem:
    """One utterance: its id, the text to speak, the prompt clip (a resolved path) and its transcript, the line it came
    from and its seed (None: `--seed` plus its index, as `higgs-v3 batch` assigns it)."""

    utt: str
    text: str
    prompt_wav: str
    prompt_text: str | None
    line: int
    seed: int | None = None


def _item(fields: dict, folder: Path, where: str, number: int) -> EvalItem:
    for key in ("utt", "text", "prompt_wav"):
        if not isinstance(fields.get(key), str) or not fields[key].strip():
            raise ValueError(f"{where}: '{key}' must be a non-empty string, got {fields.get(key)!r}.")
    utt = fields["utt"].strip()
    if "/" in utt or "\\" in utt or utt.startswith("."):
        raise ValueError(f"{where}: utterance id {utt!r} must be a plain name (it names the audio file).")
    from ..longform_higgs_v3 import spoken_characters

    if (count := spoken_characters(fields["text"])) > MAX_ITEM_CHARACTERS:
        raise ValueError(f"{where}: utterance {utt!r} has {count} spoken characters; an evaluation item is one "
                         f"utterance of at most {MAX_ITEM_CHARACTERS} (about 30 s of speech, what the ASR model "
                         "transcribes at once). Speak long texts with higgs-v3 speak or batch.")
    prompt_text = fields.get("prompt_text")
    if prompt_text is not None and not isinstance(prompt_text, str):
        raise ValueError(f"{where}: 'prompt_text' must be a string, got {prompt_text!r}.")
    prompt = (folder / Path(fields["prompt_wav"].strip()).expanduser()).resolve()
    if not prompt.is_file():
        raise ValueError(f"{where}: the prompt clip {fields['prompt_wav']!r} does not exist (relative paths are read "
                         f"from the list's folder, {str(folder)!r}).")
    return EvalItem(utt, fields["text"], str(prompt), prompt_text or None, number, fields.get("seed"))


def read_items(path: str | os.PathLike) -> list[EvalItem]:
    """The items of `path`: a `.jsonl` manifest, else a Seed-TTS-eval list (`utt|prompt_text|prompt_wav|text`; a fifth
    field, the ground-truth clip of some lists, is ignored). Blank lines are skipped; ids must be unique. A
    `ValueError` naming the line, `OSError` when the file cannot be read."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as error:
        raise ValueError(f"The evaluation list {str(path)!r} is not UTF-8 text ({error}).") from error
    items, seen = [], {}
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{path.name} line {number}"
        if path.suffix.lower() == ".jsonl":
            try:
                fields = json.loads(raw)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where} is not valid JSON ({error.msg}).") from None
            if not isinstance(fields, dict) or set(fields) - set(JSONL_KEYS):
                raise ValueError(f"{where} must be a JSON object with the keys {', '.join(JSONL_KEYS)}; got "
                                 f"{raw[:80]!r}.")
        else:
            parts = split_list_line(raw)
            if len(parts) not in (4, 5):
                raise ValueError(f"{where} has {len(parts)} '|'-separated fields; a Seed-TTS-eval list has "
                                 "utt|prompt_text|prompt_wav|text (and optionally a fifth, ignored).")
            fields = dict(zip(("utt", "prompt_text", "prompt_wav", "text"), parts))
        item = _item(fields, path.parent.resolve(), where, number)
        if item.utt in seen:
            raise ValueError(f"{where}: utterance {item.utt!r} is already line {seen[item.utt]}; ids must be unique.")
        seen[item.utt] = number
        items.append(item)
    if not items:
        raise ValueError(f"The evaluation list {str(path)!r} has no items.")
    return items


def batch_manifest(items: list[EvalItem], path: Path) -> Path:
    """The `higgs-v3 batch` manifest of `items` (`<utt>.wav` each, the prompt as reference), written atomically.
    Returns its path."""
    from ..audio_io_higgs_v3 import atomic_output

    lines = []
    for item in items:
        entry = {"text": item.text, "output": f"{item.utt}.wav", "reference": item.prompt_wav}
        entry |= {"reference_text": item.prompt_text} if item.prompt_text else {}
        entry |= {"seed": item.seed} if item.seed is not None else {}
        lines.append(json.dumps(entry, ensure_ascii=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path) as temporary:
        temporary.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


__all__ = ["JSONL_KEYS", "MAX_ITEM_CHARACTERS", "EvalItem", "batch_manifest", "read_items", "split_list_line"]
