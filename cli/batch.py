# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Batch synthesis of a manifest: many texts to many audio files, resumable, data-parallel over processes.

```
higgs-v3 batch manifest.jsonl --out-dir out/ --model path/to/converted-repo           # one process
accelerate launch --num_processes 4 -m higgs_v3.cli batch manifest.jsonl --out-dir out/   # 4 GPUs
```

The manifest has one JSON object per line (blank lines are skipped):

    {"text": "Hello there.", "output": "hello", "seed": 7, "voice": "ann.safetensors"}
    {"text": "A long chapter ...", "output": "chapter-01.wav", "reference": "me.wav", "reference_text": "..."}

`text` (required; any length: it is chunked as `higgs-v3 speak` chunks it), `output` (required: a file name in
`--out-dir`, `.wav` added when it has no audio suffix), `seed` (default: see below), `voice` (a saved voice file),
`reference` (a clip: a file or an http(s) URL) with optional `reference_text`. Relative paths are read from the
manifest's folder. Every line is checked (text, tags, files, seeds, names; the seed of the text's last chunk too) before
anything is generated.

Each item is spoken as `synthesize_long(text, seed=seed, reference=...)` would speak it: chunk `k` uses seed
`seed + k`. A line without `seed` gets a default one that no other chunk of the manifest uses
(`assign_default_seeds`): `--seed` plus its index when that range of seeds is free, else the next free one; it
depends only on the manifest, `--seed` and the chunking (`--max-chars`), so a rerun gets the same. The draw is keyed
by seed, so an item's audio does not depend on the process it ran on or the number of processes; the batch it shared
changes its logits only by float rounding (docs/RELIABILITY.md, "Batch invariance"), which can flip a code of a long
item at another `--batch-size`; with `--batch-invariant` (`generate(batch_invariant=True)`'s numerics) it changes
nothing. The chunks of the items are decoded `--batch-size` at a time on a decode session (`serving/session.py`,
step-level batching: a chunk joins as another ends, so items of unequal lengths keep the batch full), and each finished
item is written at once, atomically
(`audio_io_higgs_v3.atomic_output`: a temporary file, flushed to disk, then `os.replace`): its audio, then its record (`.higgs_v3_batch/<output>.json`: duration, finished
flag, seed, chunks, each chunk's kept seed and number of takes, and the run's recipe; bad takes are redone as
`synthesize_long` redoes them, `--retries` times at most). An item is complete when both are there and the record
matches the manifest line and the run's recipe (`batch_recipe`: the model's weights fingerprint, dtype,
`--max-seconds`, chunk size and sampling settings; a voice or reference file is known by the sha256 of its bytes); a
rerun skips complete items, so a run that was killed or crashed is finished by running it again, and nothing is
generated twice, while an item made by another model, dtype or limit, or with a voice file since replaced, is spoken
again (the summary says how many, and what changed). With `--keep-going`, an item whose voice cannot be made (a
damaged file, a dead URL) is skipped and listed at the end (exit code 1) instead of stopping the run; saved voices are
checked before any generation.

Data parallel: under `accelerate launch` (or `torchrun`) every process reads the manifest, the pending items are listed
before any process writes, and `PartialState.split_between_processes` gives each process its share. Each process shows
its own progress bar; at the end the main process writes `results.jsonl` (one line per item, manifest order, all
processes' items) and prints the summary.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


RECORDS_DIR = ".higgs_v3_batch"
"""Folder inside `--out-dir` with one record per completed item."""

RESULTS_FILE = "results.jsonl"
"""The results manifest written at the end of a run (every complete item, manifest order)."""

MANIFEST_KEYS: dict[str, str] = {
    "text": "the text to speak (required)",
    "output": "the output file name (required)",
    "seed": "the item's seed (an integer)",
    "voice": "a saved voice file",
    "reference": "a reference clip (a file or an http(s) URL)",
    "reference_text": "the transcript of the reference clip",
}
"""The keys a manifest line may have."""

TAKE_OPTIONS = ("retries", "seconds_per_char", "verify", "max_wer")
"""The long-form core's options for bad takes (`synthesize_long`'s), passed through `run_batch`'s keywords."""

AUDIO_SUFFIXES: tuple[str, ...] = (".wav", ".flac", ".ogg")
"""Output suffixes written as such; any other name gets `.wav` appended."""

@dataclass(frozen=True)
class BatchItem:
    """One manifest line, checked: its 1-based line number, its text, its output file name, seed and voice source
    (`voice`: a saved voice file, or `reference` a clip with an optional `reference_text`; paths resolved)."""

    line: int
    text: str
    output: str
    seed: int
    voice: str | None = None
    reference: str | None = None
    reference_text: str | None = None
    default_seed: bool = False
    """True when the line has no `seed`: `seed` is then `--seed` plus the item's index until `assign_default_seeds`
    moves it past the seeds that other items' chunks use."""
    source_sha256: str | None = None
    """The sha256 of the voice or reference file's bytes (a file replaced at the same path is another voice); None
    without one, or for a URL (known by its address)."""

    def record_key(self) -> dict:
        """What a record must match for the item to count as complete (with the run's `batch_recipe`)."""
        return {"text": self.text, "seed": self.seed, "voice": self.voice, "reference": self.reference,
                "reference_text": self.reference_text, "source_sha256": self.source_sha256}


@dataclass
class BatchSummary:
    """What a run did: items in the manifest, written now (per process), already complete, seconds of audio written
    now, wall time, and the outputs whose speech was cut at the length limit (over all complete items)."""

    total: int
    written: dict[int, list[str]] = field(default_factory=dict)  # process index -> outputs written by it
    skipped: int = 0
    audio_seconds: float = 0.0
    wall_seconds: float = 0.0
    unfinished: list[str] = field(default_factory=list)
    redone: dict[str, int] = field(default_factory=dict)  # what changed ("model", "dtype" ...) -> items spoken again
    failed: list[str] = field(default_factory=list)  # with --keep-going: "line N (output): reason"

    def line(self) -> str:
        count = sum(len(names) for names in self.written.values())
        per_process = ", ".join(f"process {rank}: {len(names)}" for rank, names in sorted(self.written.items()))
        unfinished = (f"{len(self.unfinished)} cut at the length limit: {', '.join(self.unfinished[:10])}"
                      if self.unfinished else "none cut at the length limit")
        redone = (" (spoken again as what produced them changed: "
                  + ", ".join(f"{what} {count}" for what, count in self.redone.items()) + ")") if self.redone else ""
        failed = (f"; {len(self.failed)} failed and skipped: " + "; ".join(self.failed[:10])
                  + (f"; and {len(self.failed) - 10} more" if len(self.failed) > 10 else "")) if self.failed else ""
        return (f"Batch: {self.total} items, {count} written now ({per_process}){redone}, {self.skipped} already "
                f"complete; {self.audio_seconds:.2f} s of audio in {self.wall_seconds:.2f} s; {unfinished}{failed}.")


# ============================================================================================= the manifest
def _output_name(value, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: 'output' must be a non-empty file name, got {value!r}.")
    name = value.strip()
    if "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
        raise ValueError(f"{where}: 'output' {value!r} must be a plain file name (no folder, not hidden); the file is "
                         "written into --out-dir.")
    return name if Path(name).suffix.lower() in AUDIO_SUFFIXES else name + ".wav"


def _source_file(value, key: str, manifest: Path, where: str, loaded: set[str]) -> str | None:
    """A line's `voice` or `reference`: None, an http(s) URL of a clip (fetched when the item is spoken, as the API
    fetches it), or a file read from the manifest's folder and loaded as the library loads it (a voice with
    `HiggsAudioV3Voice.load`, a clip with `prepare_reference_waveform`), so that a bad one is refused before any
    model work, naming the line. Returns the resolved path (or the URL)."""
    from ..audio_io_higgs_v3 import HiggsAudioV3Voice, is_audio_url, prepare_reference_waveform

    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: '{key}' must be a file path, got {value!r}.")
    if key == "reference" and is_audio_url(value):
        return value.strip()
    file = (manifest.parent / Path(value).expanduser()).resolve()
    if not file.is_file():
        raise ValueError(f"{where}: the {key} file {value!r} does not exist (relative paths are read from the "
                         f"manifest's folder, {str(manifest.parent.resolve())!r}).")
    if str(file) not in loaded:
        try:
            HiggsAudioV3Voice.load(file) if key == "voice" else prepare_reference_waveform(file)
        except (ValueError, OSError) as error:
            raise ValueError(f"{where}: {' '.join(str(error).split())}") from error
        loaded.add(str(file))
    return str(file)


def read_manifest(path: str | os.PathLike, base_seed: int = 0) -> list[BatchItem]:
    """The items of a JSONL manifest, each line checked (keys, types, seeds, files loaded, unique outputs). Relative
    paths are read from the manifest's folder. A line without `seed` gets `base_seed` plus its index (0-based, over the items),
    flagged `default_seed` (`run_batch` moves it with `assign_default_seeds` where other chunks use it). Raises
    `ValueError` naming the line, or `OSError` when the manifest cannot be read."""
    from ..audio_io_higgs_v3 import is_audio_url
    from ..sampling_higgs_v3 import check_seed

    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise ValueError(f"The manifest {str(path)!r} is not UTF-8 text ({error}).") from error
    items: list[BatchItem] = []
    outputs: dict[str, int] = {}
    loaded: set[str] = set()  # voice and clip files already loaded (many lines may share one)
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{path.name} line {number}"
        try:
            entry = json.loads(raw)
        except json.JSONDecodeError as error:
            raise ValueError(f"{where} is not valid JSON ({error.msg}).") from None
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a JSON object, got a {type(entry).__name__}.")
        unknown = sorted(set(entry) - set(MANIFEST_KEYS))
        if unknown:
            raise ValueError(f"{where} has unknown key(s) {unknown}; accepted: {', '.join(MANIFEST_KEYS)}.")
        text = entry.get("text")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{where}: 'text' must be a non-empty string, got {text!r}.")
        output = _output_name(entry.get("output"), where)
        if output in outputs:
            raise ValueError(f"{where}: output {output!r} is already written by line {outputs[output]}; each item needs "
                             "its own output name.")
        outputs[output] = number
        default_seed = "seed" not in entry
        seed = check_seed(entry.get("seed", base_seed + len(items)), f"{where}: 'seed'")
        if entry.get("voice") is not None and entry.get("reference") is not None:
            raise ValueError(f"{where} has both 'voice' and 'reference'; give one.")
        if entry.get("reference_text") is not None and entry.get("reference") is None:
            raise ValueError(f"{where} has 'reference_text' without 'reference' (a saved voice carries its transcript).")
        files = {key: _source_file(entry.get(key), key, path, where, loaded) for key in ("voice", "reference")}
        reference_text = entry.get("reference_text")
        if reference_text is not None and not isinstance(reference_text, str):
            raise ValueError(f"{where}: 'reference_text' must be a string, got {reference_text!r}.")
        source = files.get("voice") or files.get("reference")
        items.append(BatchItem(number, text, output, seed, files.get("voice"), files.get("reference"), reference_text,
                               default_seed, _sha256(source) if source and not is_audio_url(source) else None))
    if not items:
        raise ValueError(f"The manifest {str(path)!r} has no items (one JSON object per line).")
    return items


# ============================================================================================= records
def _record_path(out_dir: Path, item: BatchItem) -> Path:
    return out_dir / RECORDS_DIR / f"{item.output}.json"


def _sha256(path: str) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def model_fingerprint(model) -> str:
    """What identifies the weights a run speaks with, whatever the dtype they were loaded in: the config and 64 values
    spread over every tensor, rounded to bfloat16 (a float32 and a bfloat16 load of one checkpoint agree; a fine-tuned
    or another model does not)."""
    import hashlib

    import torch

    config = {key: value for key, value in model.config.to_diff_dict().items() if key not in ("dtype", "torch_dtype")}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    for name, tensor in model.state_dict().items():
        try:
            flat = tensor.detach().reshape(-1)
            sample = flat[:: max(1, flat.numel() // 64)][:64]
            sample = sample.to("cpu", torch.bfloat16) if sample.is_floating_point() else sample.to("cpu")
            values = (sample.view(torch.int16) if sample.dtype == torch.bfloat16 else sample).numpy().tobytes()
        except (RuntimeError, TypeError, NotImplementedError):  # a tensor subclass (quantized) without these ops
            values = f"{tuple(tensor.shape)} {tensor.dtype}".encode()
        digest.update(name.encode() + values)
    return digest.hexdigest()[:16]


SAMPLING_FIELDS: tuple[str, ...] = ("do_sample", "temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                                    "max_new_tokens")
"""The generation config's fields that change what a seed speaks (recorded in the recipe)."""


def batch_recipe(model, max_seconds: float | None, max_chars: int, generate_kwargs: dict) -> dict:
    """What produced a run's audio besides each line: the model (`model_fingerprint`; its path only shown), dtype,
    `--max-seconds`, the chunk size and the sampling settings (the generation config's `SAMPLING_FIELDS` and the
    options given). An item whose record has another recipe is spoken again."""
    config = model.generation_config
    sampling = {key: getattr(config, key, None) for key in SAMPLING_FIELDS}
    sampling.update({key: value for key, value in generate_kwargs.items() if isinstance(value, (int, float, str, bool))})
    return {"model": model_fingerprint(model), "dtype": str(model.dtype).removeprefix("torch."),
            "max_seconds": max_seconds, "max_chars": max_chars, "sampling": sampling}


RECIPE_NAMES = {"model": "model", "dtype": "dtype", "max_seconds": "max-seconds", "max_chars": "chunk size",
                "sampling": "sampling", "source_sha256": "voice file", "text": "text", "seed": "seed",
                "voice": "voice", "reference": "reference", "reference_text": "reference text"}
"""How the summary names what changed."""


def _item_state(out_dir: Path, item: BatchItem, recipe: dict) -> tuple[dict | None, list[str]]:
    """`(record, [])` when the item is complete (its audio, and a record of its line and of `recipe`); `(None, what
    changed)` when it must be spoken again because its line or recipe changed; `(None, [])` when it was never
    finished (no audio or record, or a damaged record)."""
    path = _record_path(out_dir, item)
    if not path.is_file() or not (out_dir / item.output).is_file():
        return None, []
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, []  # a damaged record: the item is generated again
    if not isinstance(record, dict):
        return None, []
    old = {**{key: record.get(key) for key in item.record_key()}, **(record.get("recipe") or {})}
    new = {**item.record_key(), **recipe}
    changed = [RECIPE_NAMES.get(key, key) for key in new if old.get(key) != new[key]]
    return (record, []) if not changed else (None, changed)


def _read_record(out_dir: Path, item: BatchItem, recipe: dict) -> dict | None:
    """The item's record when the item is complete (`_item_state`), else None."""
    return _item_state(out_dir, item, recipe)[0]


# ============================================================================================= the run
def _voice_for(model, processor, item: BatchItem):
    from ..longform_higgs_v3 import resolve_voice

    where = f"the voice of line {item.line}"
    if item.voice is not None:
        return resolve_voice(model, processor, item.voice, where=where)
    if item.reference is not None:
        return resolve_voice(model, processor, item.reference, item.reference_text, where=where)
    return None


def _voices(model, processor, items: list[BatchItem], known: dict, failed: list[str] | None) -> list[BatchItem]:
    """Each item's voice into `known` (by output; resolved once), and the items whose voice could be made. A voice
    that cannot (a damaged file, a dead URL) raises, or with `failed` (--keep-going) is reported there and its item
    left out."""
    usable = []
    for item in items:
        if item.output not in known:
            try:
                known[item.output] = voice = _voice_for(model, processor, item)
                if voice is not None:  # its codes as the prompt takes them (codebooks, range, length), up front
                    processor._codes(voice, f"the voice of line {item.line}")
            except (ValueError, OSError) as error:
                if failed is None:
                    raise
                failed.append(f"line {item.line} ({item.output}): {' '.join(str(error).split())}")
                continue
        usable.append(item)
    return usable


def _speak_group(model, processor, group: list[BatchItem], voices: dict, *, batch_size: int, max_chars: int,
                 max_seconds, generate_kwargs: dict):
    """The items of `group` spoken together: their chunks go through the longform synthesis core in `generate` calls
    of `batch_size`, each chunk with its item's voice (`voices`, by output; or its item's first chunk's) and seed
    `item.seed + k`; bad takes redone as `synthesize_long` redoes them (`TAKE_OPTIONS` in `generate_kwargs`: the
    long-form core's). Returns `[(item, waveform, chunks)]` in group order."""
    from ..longform_higgs_v3 import DEFAULT_PAUSE_SECONDS, SpeechJob, _Synthesizer, speech_jobs

    jobs = []
    for position, item in enumerate(group):
        for k, job in enumerate(speech_jobs(processor, item.text, max_chars)):
            jobs.append(SpeechJob(job.text, len(jobs), voice_key=item.output, speaker=item.output,
                                  line_number=position, seed=item.seed + k))
    takes = {name: generate_kwargs[name] for name in TAKE_OPTIONS if name in generate_kwargs}
    generate_kwargs = {name: value for name, value in generate_kwargs.items() if name not in TAKE_OPTIONS}
    synthesizer = _Synthesizer(model, processor, pause_seconds=DEFAULT_PAUSE_SECONDS, batch_size=batch_size, seed=0,
                               max_seconds=max_seconds, progress=False, generate_kwargs=generate_kwargs, **takes)
    result = synthesizer.speak(jobs, {item.output: voices[item.output] for item in group})
    waveforms = result.line_waveforms()  # one per item: its chunks joined with the pause, in group order
    by_item = [[chunk for chunk in result.chunks if chunk.line_number == position] for position in range(len(group))]
    return [(item, waveform, chunks) for item, (_, waveform), chunks in zip(group, waveforms, by_item)]


class _SessionSpeaker:
    """Items spoken on one decode session of `batch_size` requests (`serving/session.py`): a chunk joins at the next
    step and leaves when it ends, so a manifest of unequal lengths keeps the batch full. Each chunk is a request with
    its item's voice (a voiceless item's first chunk is spoken first; its take is the voice of the rest, as
    `synthesize_long`'s) and seed `item.seed + k`; a bad take is redone as `synthesize_long` redoes it (`judge_take`,
    then a new request with `retry_seed(seed, k)`, `_better_take`). Each waveform is decoded alone as its take ends,
    on this thread: when a chunk is admitted depends on the codes alone, never on a thread's timing, so a rerun
    decodes the same batches (and without `batch_invariant` gets the same float rounding)."""

    def __init__(self, model, processor, voices: dict, failed: list | None, *, batch_size: int, max_chars: int,
                 max_seconds, generate_kwargs: dict):
        from ..longform_higgs_v3 import DEFAULT_PAUSE_SECONDS, _Synthesizer
        from ..serving.session import DecodeSession

        takes = {name: generate_kwargs[name] for name in TAKE_OPTIONS if name in generate_kwargs}
        options = {name: value for name, value in generate_kwargs.items() if name not in TAKE_OPTIONS}
        self.batch_invariant = bool(options.pop("batch_invariant", False))
        self.rules = _Synthesizer(model, processor, pause_seconds=DEFAULT_PAUSE_SECONDS, batch_size=batch_size,
                                  seed=0, max_seconds=max_seconds, progress=False, generate_kwargs=options, **takes)
        self.model, self.processor, self.voices, self.failed = model, processor, voices, failed
        self.max_chars = max_chars
        self.session = DecodeSession(model, batch_size, self.batch_invariant)
        self.ready: list = []  # (item, k, job, attempt, kept) waiting for a row
        self.chunks: dict[str, dict[int, object]] = {}  # item output -> its kept chunks so far
        self.jobs: dict[str, list] = {}  # item output -> its chunks' jobs
        self.done: list = []  # (item, waveform, chunks), in the order items completed

    def speak(self, items: list[BatchItem]):
        """Yields `(item, waveform, chunks)` as each item's last chunk is kept."""
        pending, failure = list(items), None
        while pending or self.ready or not self.session.idle:
            while pending and len(self.ready) < self.session.free:
                try:
                    self._start(pending.pop(0))
                except Exception as error:  # noqa: BLE001 - a voice that cannot be made stops the run at its line,
                    failure, pending = error, []  # once the items started before it are written
            while self.ready and self.session.free:
                self._add(*self.ready.pop(0))
            self.session.step()
            done, self.done = self.done, []
            yield from done
        if failure is not None:
            raise failure

    def _start(self, item: BatchItem) -> None:
        from ..longform_higgs_v3 import speech_jobs

        if not _voices(self.model, self.processor, [item], self.voices, self.failed):
            return  # its voice could not be made (--keep-going: reported)
        self.jobs[item.output] = jobs = speech_jobs(self.processor, item.text, self.max_chars)
        self.chunks[item.output] = {}
        first = jobs if self.voices[item.output] is not None else jobs[:1]  # voiceless: the rest after its voice
        self.ready += [(item, k, job, 0, None) for k, job in enumerate(first)]

    def _add(self, item: BatchItem, k: int, job, attempt: int, kept) -> None:
        from ..sampling_higgs_v3 import retry_seed
        from ..serving.session import DecodeRequest

        seed = item.seed + k if attempt == 0 else retry_seed(item.seed + k, attempt)
        inputs = self.processor([job.text], reference=[self.voices[item.output]])
        self.session.add(DecodeRequest(inputs, seed=seed, options=self.rules.generate_kwargs,
                                       context=(item, k, job, attempt, kept), on_end=self._ended))

    def _ended(self, request) -> None:
        if request.error is not None:
            raise request.error  # no request of a checked manifest fails alone: the run stops, as generate's would
        self._finish(request)

    def _finish(self, request) -> None:
        """The take's waveform decoded alone, judged; kept, or its redo first in line."""
        from ..longform_higgs_v3 import ChunkResult, _better_take, _join, _voice_from_chunk, judge_take

        (item, k, job, attempt, kept), output, rules = request.context, request.output, self.rules
        spec = self.model.config.audio_spec
        frames = int(output.audio_code_lengths[0])
        waveform = self.model.codec.decode_frames(output.audio_codes, output.audio_code_lengths,
                                                  alone=self.batch_invariant)[0]
        take = judge_take(ChunkResult(job.text, output.audio_codes[0, :frames].cpu(), waveform.float().cpu(),
                                      bool(output.finished[0]), request.seed, spec.frame_rate, item.output, None),
                          rules.seconds_per_char, rules.verify, rules.max_wer, spec.sampling_rate)
        take = take if kept is None else _better_take(kept, take)
        if take.problem is not None and attempt < rules.retries:
            self.ready.insert(0, (item, k, job, attempt + 1, take))  # redone first
            return
        chunks = self.chunks[item.output]
        chunks[k] = take
        jobs = self.jobs[item.output]
        if k == 0 and self.voices[item.output] is None and len(jobs) > 1:
            self.voices[item.output] = _voice_from_chunk(take, spec)
            self.ready += [(item, j, job, 0, None) for j, job in enumerate(jobs) if j > 0]
        if len(chunks) == len(jobs):
            ordered = [chunks[j] for j in range(len(jobs))]
            self.done.append((item, _join(ordered, rules.pause_seconds, spec.sampling_rate), ordered))


def run_batch(
    model,
    processor,
    items: list[BatchItem],
    out_dir: str | os.PathLike,
    *,
    batch_size: int = 8,
    max_chars: int | None = None,
    max_seconds: float | None = None,
    state=None,
    progress: bool = True,
    keep_going: bool = False,
    normalize: str | None = None,
    scheduling: str = "session",
    **generate_kwargs,
) -> BatchSummary:
    """Speak every pending item of `items` into `out_dir` (see the module docstring), this process's share of them when
    `state` (an `accelerate.PartialState`) has several processes. An item is pending when it has no complete record of
    its line and of this run's `batch_recipe` (a changed model, dtype, limit or voice file speaks it again). The saved
    voices of this process's items are checked before any generation; with `keep_going`, an item whose voice cannot be
    made (a damaged voice or clip, a dead URL) is skipped and reported (`summary.failed`) instead of stopping the run.
    With `normalize="en"` the texts' numbers are spelled out first (`normalize_text`: the records hold the spoken
    text). `scheduling`: "session" (step-level batching: `batch_size` chunks decoded at once, a chunk joining as
    another ends) or "static" (the former: `generate` calls of `batch_size` chunks, each running until its longest
    chunk ends; kept for comparison, `benchmarks/bench_serve.py`). Returns the summary (complete on the main process:
    the written lists of every process)."""
    from dataclasses import replace

    from ..chunking_higgs_v3 import DEFAULT_MAX_CHARS, normalize_text

    began = time.perf_counter()
    out_dir = Path(out_dir)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
    if scheduling not in ("session", "static"):
        raise ValueError(f"scheduling must be 'session' or 'static', got {scheduling!r}.")
    max_chars = max_chars or DEFAULT_MAX_CHARS
    items = [replace(item, text=normalize_text(item.text, normalize)) for item in items]
    items = _checked_items(processor, items, max_chars)
    (out_dir / RECORDS_DIR).mkdir(parents=True, exist_ok=True)
    recipe = batch_recipe(model, max_seconds, max_chars, generate_kwargs)
    states = [_item_state(out_dir, item, recipe) for item in items]
    pending = [item for item, (record, _) in zip(items, states) if record is None]
    redone: dict[str, int] = {}
    for what in (what for _, changed in states for what in changed):
        redone[what] = redone.get(what, 0) + 1
    rank, world, mine = _share(state, pending)
    written, seconds, voices, failed = [], 0.0, {}, [] if keep_going else None
    mine = _voices(model, processor, [item for item in mine if item.voice is not None], voices, failed) + [
        item for item in mine if item.voice is None]  # saved voices: cheap, checked before any generation
    mine.sort(key=lambda item: item.line)
    bar = _progress_bar(len(mine), rank, world) if progress else None
    try:
        for item, waveform, chunks in _spoken(model, processor, mine, voices, failed, scheduling, batch_size=batch_size,
                                              max_chars=max_chars, max_seconds=max_seconds,
                                              generate_kwargs=generate_kwargs):
            seconds += _write_item(out_dir, item, waveform, chunks, model.config.sampling_rate, rank, recipe)
            written.append(item.output)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    all_written, seconds, all_failed = _gather(state, world, rank, written, seconds, failed or [])
    summary = BatchSummary(total=len(items), written=all_written, skipped=len(items) - len(pending),
                           audio_seconds=seconds, redone=redone, failed=all_failed)
    if rank == 0:
        summary.unfinished = _write_results(out_dir, items, recipe)
    summary.wall_seconds = time.perf_counter() - began
    return summary


def _spoken(model, processor, items: list[BatchItem], voices: dict, failed, scheduling: str, **options):
    """`(item, waveform, chunks)` of every item whose voice can be made, as each completes (see `run_batch`)."""
    if scheduling == "session":
        yield from _SessionSpeaker(model, processor, voices, failed, **options).speak(items)
        return
    for start in range(0, len(items), options["batch_size"]):
        group = _voices(model, processor, items[start:start + options["batch_size"]], voices, failed)
        yield from _speak_group(model, processor, group, voices, **options) if group else []


def _checked_items(processor, items: list[BatchItem], max_chars: int) -> list[BatchItem]:
    """Before any generation: every text and transcript (`processor.check_text`), then the default seeds placed
    (`assign_default_seeds`) and the seed of every item's last chunk checked. Returns the items with their seeds."""
    for item in items:
        processor.check_text(item.text, f"the text of line {item.line}")
        if item.reference_text is not None:
            processor.check_text(item.reference_text, f"the reference text of line {item.line}")
    items = assign_default_seeds(processor, items, max_chars)
    for item in items:
        _check_chunk_seeds(processor, item, max_chars)
    return items


def _share(state, pending: list[BatchItem]) -> tuple[int, int, list[BatchItem]]:
    """`(rank, world, this process's pending items)`: all of them in one process; with several, every process waits
    until all have listed the same pending items (before any writes), then takes its share."""
    if state is None:
        return 0, 1, pending
    state.wait_for_everyone()
    if state.num_processes == 1:
        return state.process_index, 1, pending
    with state.split_between_processes(pending) as share:
        return state.process_index, state.num_processes, list(share)


def _gather(state, world: int, rank: int, written: list[str], seconds: float, failed: list[str]
            ) -> tuple[dict[int, list[str]], float, list[str]]:
    """Every process's written outputs (by rank), the seconds of audio they wrote and their failed items, on the main
    process."""
    if state is None or world == 1:
        return {rank: written}, seconds, failed
    from accelerate.utils import gather_object

    gathered = gather_object([(rank, written, seconds, failed)])
    state.wait_for_everyone()
    return ({r: names for r, names, _, _ in gathered}, sum(s for _, _, s, _ in gathered),
            [line for *_, lines in gathered for line in lines])


def _write_results(out_dir: Path, items: list[BatchItem], recipe: dict) -> list[str]:
    """`results.jsonl`: the record of every complete item, in manifest order, written atomically. Returns the outputs
    whose speech was cut at the length limit."""
    from ..audio_io_higgs_v3 import atomic_output

    records = [record for record in (_read_record(out_dir, item, recipe) for item in items) if record is not None]
    with atomic_output(out_dir / RESULTS_FILE) as temporary:
        temporary.write_text("\n".join(json.dumps(record, ensure_ascii=False) for record in records) + "\n",
                             encoding="utf-8")
    return [record["output"] for record in records if not record["finished"]]


def assign_default_seeds(processor, items: list[BatchItem], max_chars: int) -> list[BatchItem]:
    """`items` with the seed of each line without one (`default_seed`) moved where no other chunk's seed is.

    An item with `n` chunks (`speech_jobs` with `max_chars`) uses the seeds `seed .. seed + n - 1`. The explicit
    seeds' ranges are taken first; then, in manifest order, each default item gets the first seed from its provisional
    one (`--seed` plus its index) upwards, and past the previous default item's range, whose whole range is free. So
    the default seeds differ from each other and from every explicit item's chunk seeds, stay `--seed` plus the index
    where nothing is in the way, and depend on the manifest, `--seed` and `max_chars` only (a rerun gets the same).
    Explicit seeds are kept as written, even when they overlap each other. A `ValueError` naming the line when a
    default range would pass the seed limit."""
    from dataclasses import replace

    from ..longform_higgs_v3 import speech_jobs
    from ..sampling_higgs_v3 import SEED_LIMIT

    counts = [len(speech_jobs(processor, item.text, max_chars)) for item in items]
    taken = sorted((item.seed, item.seed + count) for item, count in zip(items, counts) if not item.default_seed)
    resolved, floor = [], None
    for item, count in zip(items, counts):
        if not item.default_seed:
            resolved.append(item)
            continue
        seed = item.seed if floor is None else max(item.seed, floor)
        moved = True
        while moved:  # past every explicit range it overlaps ([start, stop) ranges, sorted by start)
            moved = False
            for start, stop in taken:
                if start < seed + count and seed < stop:
                    seed, moved = stop, True
        if seed + count > SEED_LIMIT:
            raise ValueError(
                f"Line {item.line} has no seed and its default one ({seed}, the first free after --seed plus its "
                f"index) leaves no room for its {count} chunks below 2**{SEED_LIMIT.bit_length() - 1}; give a "
                "smaller --seed or a seed on the line."
            )
        floor = seed + count
        resolved.append(replace(item, seed=seed))
    return resolved


def _check_chunk_seeds(processor, item: BatchItem, max_chars: int) -> None:
    """Chunk `k` of the item is spoken with seed `item.seed + k` (`_speak_group`, with the same chunker): the seed of
    its last chunk must be a valid seed too (`check_seed`). A `ValueError` naming the manifest line otherwise."""
    from ..longform_higgs_v3 import speech_jobs
    from ..sampling_higgs_v3 import check_seed

    check_seed(item.seed, f"The seed of line {item.line}")
    last = len(speech_jobs(processor, item.text, max_chars)) - 1
    check_seed(item.seed + last, f"The seed of line {item.line}'s last chunk (seed + {last})")


def _write_item(out_dir: Path, item: BatchItem, waveform, chunks, sampling_rate: int, rank: int,
                recipe: dict | None = None) -> float:
    """The item's audio (`save_audio`, itself atomic), then its record (its line, and the run's `recipe`), written
    atomically. Returns its duration in seconds."""
    from ..audio_io_higgs_v3 import atomic_output, save_audio

    save_audio(waveform, out_dir / item.output, sampling_rate)
    duration = waveform.shape[-1] / sampling_rate
    record = {
        "output": item.output, "line": item.line, **item.record_key(), "duration": round(duration, 6),
        "finished": all(chunk.finished for chunk in chunks), "chunks": len(chunks),
        "unfinished_chunks": [k for k, chunk in enumerate(chunks) if not chunk.finished],
        "chunk_seeds": [chunk.seed for chunk in chunks], "chunk_attempts": [len(chunk.attempts) for chunk in chunks],
        "failed_chunks": [k for k, chunk in enumerate(chunks) if chunk.problem is not None], "process": rank,
        "recipe": recipe,
    }
    with atomic_output(_record_path(out_dir, item)) as temporary:
        temporary.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return duration


def _progress_bar(total: int, rank: int, world: int):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm comes with transformers
        return None
    label = f"process {rank}/{world}: " if world > 1 else "items: "
    return tqdm(total=total, desc=label, position=rank, file=sys.stderr, leave=True, dynamic_ncols=True)


# ============================================================================================= the command
def cmd_batch(args) -> int:
    """`higgs-v3 batch` (its options: `cli/main`): `batch_from_args`, then the summary on the main process."""
    summary, main_process = batch_from_args(args)
    if main_process:
        print(summary.line())
    return 1 if summary.failed else 0


def batch_from_args(args) -> tuple[BatchSummary, bool]:
    """Read and check the manifest, load the model on this process's device, run (`run_batch`). Returns the summary
    and whether this is the main process (`higgs-v3 eval` synthesizes through it too)."""
    from ..delay_higgs_v3 import HiggsAudioV3AudioSpec
    from ..generation_higgs_v3 import MAX_POSITIONS
    from ..longform_higgs_v3 import rows_for_max_seconds
    from ..sampling_higgs_v3 import check_seed

    check_launch()
    check_seed(args.seed, "--seed")
    if args.max_seconds is not None:  # longform's bound of one chunk (the codec's rates, the default positions)
        rows_for_max_seconds(args.max_seconds, HiggsAudioV3AudioSpec(), MAX_POSITIONS, name="--max-seconds")
    items = read_manifest(args.manifest, base_seed=args.seed)
    out_dir = Path(args.out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out-dir {args.out_dir!r} is a file; give a folder.")
    if getattr(args, "verify", None):  # found (or named as missing) before the model loads
        from ..evaluation.scoring import resolve_scorer

        resolve_scorer(args.verify, "ASR model", "--verify")

    from accelerate import PartialState

    from .models import TINY_RANDOM, TINY_RANDOM_MAX_SECONDS, load_model, load_processor, resolve_model

    device = args.device
    state = PartialState(cpu=device == "cpu" or (device == "auto" and not _has_accelerator()))
    if state.num_processes > 1 and device == "auto":
        device = str(state.device)  # each process on its own device
    path = resolve_model(args.model, lambda message: print(message, file=sys.stderr))
    processor = load_processor(path)
    model = load_model(path, device, args.dtype)
    max_seconds = args.max_seconds
    if args.model == TINY_RANDOM and max_seconds is None:
        max_seconds = TINY_RANDOM_MAX_SECONDS
    summary = run_batch(model, processor, items, out_dir, batch_size=args.batch_size, max_seconds=max_seconds,
                        state=state, progress=not args.no_progress, keep_going=getattr(args, "keep_going", False),
                        normalize=getattr(args, "normalize", None), batch_invariant=getattr(args, "batch_invariant", False),
                        **_take_options(args, model))
    return summary, state.is_main_process


def _take_options(args, model) -> dict:
    """`run_batch`'s options for bad takes from the command's: `--retries` (unset: the model's default,
    `longform_higgs_v3.default_retries`: 0 for the demo model), and `--verify`'s ASR pipeline (loaded on the model's
    device) with `--max-wer`."""
    options = {} if getattr(args, "retries", None) is None else {"retries": args.retries}
    if getattr(args, "verify", None):
        from ..evaluation.scoring import load_asr

        options |= {"verify": load_asr(args.verify, str(model.device), "--verify"), "max_wer": args.max_wer}
    return options


def check_launch() -> None:
    """Refuse the one process that `accelerate launch --num_processes N` (N > 1) starts on a machine without several
    GPUs unless given `--multi_gpu`: its simple launcher sets MASTER_ADDR for the N processes but starts one (no
    WORLD_SIZE), which would silently do all the work alone."""
    if os.environ.get("ACCELERATE_MIXED_PRECISION") and os.environ.get("MASTER_ADDR") and "WORLD_SIZE" not in os.environ:
        raise ValueError("accelerate launch started ONE process although --num_processes asked for more (its default "
                         "launcher does so on a machine without several GPUs); add --multi_gpu to start them all (on a "
                         "CPU they use torch's gloo backend), or run without --num_processes.")


def _has_accelerator() -> bool:
    import torch

    return torch.cuda.is_available() or bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


__all__ = [
    "AUDIO_SUFFIXES",
    "BatchItem",
    "BatchSummary",
    "MANIFEST_KEYS",
    "RECORDS_DIR",
    "RESULTS_FILE",
    "assign_default_seeds",
    "batch_from_args",
    "batch_recipe",
    "check_launch",
    "cmd_batch",
    "model_fingerprint",
    "read_manifest",
    "run_batch",
]
