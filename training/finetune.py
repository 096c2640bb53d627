# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Fine-tuning Higgs Audio v3 (a voice, a language) with transformers' `Trainer`, fully or with PEFT LoRA.

The pieces, each usable alone:

- **Items** (`SpeechItem`): a transcript, its target speech and an optional reference clip with its transcript, named
  so that every error can say which one is bad. `load_speech_items` reads a folder of `name.wav` + `name.txt` pairs
  or a JSONL manifest (`audio`, `text`, optional `ref_audio`, `ref_text`; relative paths are read from the manifest's
  folder); `items_from_dataset` reads a `datasets.Dataset` with an `Audio` column (decoded here with soundfile, so
  that datasets' own decoder and its torchcodec dependency are not needed).
- **Examples** (`prepare_examples`): each target clip encoded once by the model's codec (`model.encode_target`) and
  each reference once (`model.encode_reference`), the codes cached as safetensors files (`HiggsAudioV3CodesCache`) so
  that a second run, or a second epoch, never runs the codec again; then `processor(text=..., audio_target=codes)`
  builds exactly the sequence generation produces, with labels on every generated row.
- **Batches** (`HiggsAudioV3DataCollator`): right (or left) padded, with attention mask, position ids and -100
  labels on padding, for `Trainer` or a plain loop.
- **LoRA** (`lora_config`): the backbone's attention and MLP projections only (the codec's own `q_proj` ... are
  never matched). The codec is frozen in the model itself (`requires_grad=False`, fp32), so no optimizer sees it.
- **A run** (`FinetuneRun`): what `higgs-v3 finetune` does: load, split off a held-out set, train with progress,
  held-out loss and checkpoints (resumable), save the adapter and / or the merged model as a complete repo, generate
  a short sample, push to the Hub.

This module is part of the installed package only (not remote code); `peft` and `datasets` are the `train` extra and
are imported where they are needed.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import PrinterCallback, TrainerCallback
from transformers.utils import logging

from ..audio_io_higgs_v3 import atomic_output, follow_umask
from ..generation_higgs_v3 import MAX_POSITIONS
from ..conversion.folders import check_complete, staged_folder, write_complete


try:
    import soundfile
except ImportError:  # pragma: no cover - an install requirement
    soundfile = None


logger = logging.get_logger(__name__)

AUDIO_SUFFIXES: tuple[str, ...] = (".wav", ".flac", ".ogg")
"""Audio files a dataset folder may hold (each with a `.txt` transcript of the same name)."""

DEFAULT_MAX_SECONDS: float = 30.0
"""Longer target clips are refused (or skipped) by `model.encode_target`: a training example must fit one
generation's positions. Reference clips have the reference limit (`audio_io_higgs_v3.MAX_REFERENCE_SECONDS`)."""

BACKBONE_PROJECTIONS: str = r"model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
"""LoRA's `target_modules`: the backbone's attention and MLP projections (a full match on module names), nothing of
the codec, the embeddings or the heads."""

AudioSource = str | os.PathLike | tuple[np.ndarray, int]
"""A clip: a file path, or `(samples, sampling_rate)`."""


# ================================================================================================== items
@dataclass(frozen=True)
class SpeechItem:
    """One training item. `name` is how errors and logs refer to it (`a` for `a.wav`, `m.jsonl:3` for line 3)."""

    name: str
    audio: AudioSource
    text: str
    ref_audio: AudioSource | None = None
    ref_text: str | None = None


class _Problems:
    """Bad items: raised at once (`skip_invalid=False`) or collected, counted and logged."""

    def __init__(self, skip_invalid: bool, what: str, found: list[str] | None = None):
        self.skip_invalid, self.what = skip_invalid, what
        self.found = found if found is not None else []
        self.start = len(self.found)

    def add(self, name: str, reason: str) -> None:
        if not self.skip_invalid:
            raise ValueError(f"{name}: {reason}")
        self.found.append(f"{name}: {reason}")

    def report(self, total: int) -> None:
        found = self.found[self.start :]
        if found:
            logger.warning(
                f"Skipped {len(found)} of {total} {self.what}: " + "; ".join(found[:20])
                + (f"; and {len(found) - 20} more" if len(found) > 20 else "")
            )


def _audio_problem(path: Path) -> str | None:
    if not path.is_file():
        return f"the audio file {str(path)!r} does not exist"
    return None


def _read_folder(folder: Path, problems: _Problems) -> tuple[list[SpeechItem], int]:
    audio = {p.stem: p for p in sorted(folder.iterdir()) if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file()}
    texts = {p.stem: p for p in sorted(folder.glob("*.txt"))}
    items = []
    for name in sorted(set(audio) | set(texts)):
        if name not in audio:
            problems.add(name, f"{str(texts[name])!r} has no audio file ({name}.wav, .flac or .ogg) next to it")
            continue
        if name not in texts:
            problems.add(name, f"{str(audio[name])!r} has no transcript ({str(folder / (name + '.txt'))!r} is missing)")
            continue
        text = texts[name].read_text(encoding="utf-8").strip()
        if not text:
            problems.add(name, f"the transcript {str(texts[name])!r} is empty")
            continue
        items.append(SpeechItem(name=name, audio=str(audio[name]), text=text))
    return items, len(set(audio) | set(texts))


def _read_manifest(manifest: Path, problems: _Problems) -> tuple[list[SpeechItem], int]:
    base, items, total = manifest.parent, [], 0
    for number, line in enumerate(manifest.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        total += 1
        name = f"{manifest.name}:{number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as error:
            problems.add(name, f"not a JSON object ({error.msg})")
            continue
        if not isinstance(entry, dict):
            problems.add(name, "not a JSON object")
            continue
        missing = [key for key in ("audio", "text") if not isinstance(entry.get(key), str) or not entry[key].strip()]
        if missing:
            problems.add(name, "the entry has no " + " and no ".join(f'"{key}"' for key in missing)
                         + ' (each line needs "audio" and "text"; "ref_audio" and "ref_text" are optional)')
            continue
        paths = {key: base / entry[key] for key in ("audio", "ref_audio") if isinstance(entry.get(key), str)}
        problem = next((p for p in map(_audio_problem, paths.values()) if p), None)
        if problem:
            problems.add(name, problem)
            continue
        items.append(SpeechItem(
            name=name,
            audio=str(paths["audio"]),
            text=entry["text"].strip(),
            ref_audio=str(paths["ref_audio"]) if "ref_audio" in paths else None,
            ref_text=entry.get("ref_text") or None,
        ))
    return items, total


def load_speech_items(
    source: str | os.PathLike, skip_invalid: bool = False, skipped: list[str] | None = None
) -> list[SpeechItem]:
    """Training items from a folder of `name.wav` + `name.txt` pairs (`.flac` / `.ogg` too) or a JSONL manifest
    (one object per line: `audio`, `text`, optional `ref_audio`, `ref_text`; relative paths from its folder).

    A bad item (no transcript, an empty one, a missing audio file, a line that is not a JSON object) raises a
    `ValueError` naming it, or with `skip_invalid=True` is skipped, and the skipped items are counted and named in one
    warning (and appended to `skipped`, when given, as "name: reason"). No item at all is an error either way."""
    source = Path(source)
    problems = _Problems(skip_invalid, "items", skipped)
    if source.is_dir():
        items, total = _read_folder(source, problems)
    elif source.is_file() and source.suffix == ".jsonl":
        items, total = _read_manifest(source, problems)
    else:
        raise ValueError(
            f"--data {str(source)!r} is neither a folder of name.wav + name.txt pairs nor a .jsonl manifest"
            + ("" if source.exists() else " (it does not exist)") + "."
        )
    problems.report(total)
    if not items:
        raise ValueError(f"{str(source)!r} holds no usable training item ({total} found, {len(problems.found)} skipped).")
    return items


def _decode_audio_cell(cell, name: str) -> tuple[np.ndarray, int]:
    """A datasets `Audio` cell, undecoded (`{"bytes", "path"}`) or decoded (`{"array", "sampling_rate"}`)."""
    if isinstance(cell, dict) and cell.get("array") is not None:
        return np.asarray(cell["array"], dtype=np.float32), int(cell["sampling_rate"])
    if isinstance(cell, dict) and (cell.get("bytes") or cell.get("path")):
        source = io.BytesIO(cell["bytes"]) if cell.get("bytes") else cell["path"]
        try:
            samples, rate = soundfile.read(source, dtype="float32", always_2d=True)  # [N, channels]
        except Exception as error:  # soundfile's LibsndfileError / RuntimeError for unreadable data
            raise ValueError(f"{name}: could not read its audio ({error}).") from error
        return np.ascontiguousarray(samples.T), int(rate)
    raise ValueError(f"{name}: the audio cell is {type(cell).__name__}, not an Audio feature value.")


def items_from_dataset(
    dataset,
    audio_column: str = "audio",
    text_column: str = "text",
    ref_audio_column: str | None = None,
    ref_text_column: str | None = None,
) -> list[SpeechItem]:
    """Items from a `datasets.Dataset` whose `audio_column` is an `Audio` feature (or dicts with `array` and
    `sampling_rate`). The column is read undecoded and decoded with soundfile here, so datasets' own decoder (which
    needs `torchcodec`) is never used. Items are named `row N`."""
    from datasets import Audio

    for column in filter(None, (audio_column, text_column, ref_audio_column, ref_text_column)):
        if column not in dataset.column_names:
            raise ValueError(f"The dataset has no column {column!r}; its columns are {dataset.column_names}.")
    for column in filter(None, (audio_column, ref_audio_column)):
        if isinstance(dataset.features[column], Audio):
            dataset = dataset.cast_column(column, Audio(decode=False))
    items = []
    for index, row in enumerate(dataset):
        name = f"row {index}"
        items.append(SpeechItem(
            name=name,
            audio=_decode_audio_cell(row[audio_column], name),
            text=row[text_column],
            ref_audio=_decode_audio_cell(row[ref_audio_column], name) if ref_audio_column and row[ref_audio_column] else None,
            ref_text=row[ref_text_column] if ref_text_column else None,
        ))
    return items


# ================================================================================================== codes
def _codec_fingerprint(model) -> str:
    """Identifies the codec whose codes a cache holds: its config and a sample of every weight."""
    digest = hashlib.sha256(json.dumps(model.config.codec_config, sort_keys=True, default=str).encode())
    for name, parameter in model.codec.state_dict().items():
        digest.update(name.encode())
        digest.update(parameter.detach().flatten()[:8].float().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


class HiggsAudioV3CodesCache:
    """Codes of encoded clips as safetensors files in `directory` (None: no cache), one per clip, keyed by the codec,
    the kind of encoding (target / reference) and the clip (a file's path, size and modification time, or an array's
    bytes). `hits` and `encoded` count what a run used."""

    def __init__(self, directory: str | os.PathLike | None):
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self.hits = self.encoded = 0

    @staticmethod
    def key(fingerprint: str, kind: str, audio: AudioSource) -> str:
        digest = hashlib.sha256(f"{fingerprint}|{kind}|".encode())
        if isinstance(audio, tuple):
            samples, rate = audio
            digest.update(f"{rate}|{samples.shape}|{samples.dtype}".encode())
            digest.update(np.ascontiguousarray(samples).tobytes())
        else:
            stat = os.stat(audio)
            digest.update(f"{os.path.abspath(audio)}|{stat.st_size}|{stat.st_mtime_ns}".encode())
        return digest.hexdigest()[:32]

    def codes(self, key: str, encode: Callable[[], torch.LongTensor]) -> torch.LongTensor:
        """The cached codes of `key`, or `encode()`'s, written to the cache (atomically: a killed run leaves the old
        entry or none, never part of one). An entry that cannot be read (damaged, truncated, without `codes`) is
        logged as a warning and encoded again."""
        from safetensors.torch import load_file, save_file

        path = self.directory / f"{key}.safetensors" if self.directory is not None else None
        if path is not None and path.is_file():
            try:
                codes = load_file(str(path))["codes"]
            except Exception as error:  # safetensors' SafetensorError for a damaged file, OSError, KeyError
                reason = " ".join(str(error).split()) or type(error).__name__
                logger.warning(f"The cached codes {str(path)!r} cannot be read ({reason}); encoding the clip again.")
            else:
                self.hits += 1
                return codes
        codes = encode()
        self.encoded += 1
        if path is not None:
            with atomic_output(path) as temporary:
                save_file({"codes": codes.contiguous()}, str(temporary))
        return codes


def _encode_target(model, audio: AudioSource, max_seconds: float) -> torch.LongTensor:
    """`model.encode_target`: the clip's codes, its length refused over `max_seconds` (and under the frames a target
    needs) with the library's own wording."""
    samples, rate = audio if isinstance(audio, tuple) else (audio, None)
    return model.encode_target(samples, sampling_rate=rate, max_seconds=max_seconds)


def _encode_reference(model, audio: AudioSource) -> torch.LongTensor:
    """`model.encode_reference`: a reference clip's codes, refused as any reference clip is (`MAX_REFERENCE_SECONDS`)."""
    samples, rate = audio if isinstance(audio, tuple) else (audio, None)
    return model.encode_reference(samples, sampling_rate=rate).codes


class HiggsAudioV3SpeechDataset(torch.utils.data.Dataset):
    """Prepared training examples (unpadded `input_ids` `[L]`, `audio_input_ids` `[N, C]`, `audio_labels` `[L, C]`),
    with the names of their items. Batch them with `HiggsAudioV3DataCollator`."""

    def __init__(self, examples: list[dict[str, torch.Tensor]], names: list[str], encoded: int = 0, cache_hits: int = 0):
        self.examples, self.names = examples, names
        self.encoded, self.cache_hits = encoded, cache_hits  # clips the codec encoded / read from the codes cache

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.examples[index]

    def split(self, held_out: int) -> tuple[HiggsAudioV3SpeechDataset, HiggsAudioV3SpeechDataset | None]:
        """The last `held_out` examples as a second dataset (None when `held_out` is 0)."""
        if held_out <= 0:
            return self, None
        cut = len(self) - held_out
        return (HiggsAudioV3SpeechDataset(self.examples[:cut], self.names[:cut]),
                HiggsAudioV3SpeechDataset(self.examples[cut:], self.names[cut:]))


@torch.no_grad()
def prepare_examples(
    model,
    processor,
    items: Sequence[SpeechItem],
    cache_dir: str | os.PathLike | None = None,
    max_seconds: float = DEFAULT_MAX_SECONDS,
    skip_invalid: bool = False,
    skipped: list[str] | None = None,
) -> HiggsAudioV3SpeechDataset:
    """Encode every item's clips once (cached in `cache_dir`) and build its training example with
    `processor(text=..., audio_target=codes, reference_codes=..., reference_text=...)`.

    A bad item raises a `ValueError` that names it, in the words of the check that refused it (`processor.check_text`:
    an invalid tag or an empty transcript; `model.encode_target`: an unreadable target clip, one longer than
    `max_seconds` or shorter than the 8 frames a target needs; `model.encode_reference`: a reference clip as any
    reference; an example over generation's `MAX_POSITIONS`), or with `skip_invalid=True` is skipped and counted in one
    warning (and appended to `skipped`, when given, as "name: reason")."""
    model._require_codec("Preparing training examples from audio")  # the model's one refusal of a codec-less model
    cache = HiggsAudioV3CodesCache(cache_dir)
    fingerprint = _codec_fingerprint(model)
    problems = _Problems(skip_invalid, "items", skipped)
    examples, names = [], []
    for item in items:
        try:
            processor.check_text(item.text, f"the transcript of {item.name}")
            if item.ref_text is not None:
                processor.check_text(item.ref_text, f"the reference transcript of {item.name}")
            # The codes of a target are those of `encode_target(clip, max_seconds)`: the limit is part of their key.
            codes = cache.codes(cache.key(fingerprint, f"target<={max_seconds:g}s", item.audio),
                                lambda: _encode_target(model, item.audio, max_seconds))
            reference = None
            if item.ref_audio is not None:
                reference = cache.codes(cache.key(fingerprint, "reference", item.ref_audio),
                                        lambda: _encode_reference(model, item.ref_audio))
            batch = processor(text=item.text, audio_target=codes, reference_codes=reference,
                              reference_text=item.ref_text if reference is not None else None)
        except ValueError as error:
            problems.add(item.name, str(error).rstrip("."))
            continue
        if batch["input_ids"].shape[1] > MAX_POSITIONS:
            problems.add(item.name, f"prompt plus speech take {batch['input_ids'].shape[1]} positions; one generation "
                                    f"takes at most {MAX_POSITIONS}: use a shorter clip or reference")
            continue
        examples.append({key: batch[key][0] for key in ("input_ids", "audio_input_ids", "audio_labels")})
        names.append(item.name)
    problems.report(len(items))
    logger.info(f"Prepared {len(examples)} examples: {cache.encoded} clips encoded, {cache.hits} read from the cache.")
    if not examples:
        raise ValueError(f"None of the {len(items)} items could be prepared for training.")
    return HiggsAudioV3SpeechDataset(examples, names, encoded=cache.encoded, cache_hits=cache.hits)


# ================================================================================================== batches
@dataclass
class HiggsAudioV3DataCollator:
    """Pads prepared examples into a batch for `Trainer(data_collator=...)` or a `DataLoader(collate_fn=...)`:
    `input_ids`, `attention_mask`, `position_ids` `[B, L]`, `audio_input_ids` `[B, N, C]` with
    `audio_input_ids_mask` `[B, N]`, `audio_labels` `[B, L, C]` (-100 on padding), all accepted by the model's
    `forward`. `padding_side` "right" (default) or "left"; position ids count from each example's first token either
    way, so the side changes nothing in the loss."""

    processor: object
    padding_side: str = "right"

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        return self.processor.pad_training_examples(features, self.padding_side)


# ================================================================================================== LoRA
def lora_config(rank: int = 16, alpha: int | None = None, dropout: float = 0.0):
    """A `peft.LoraConfig` on the backbone's attention and MLP projections (`BACKBONE_PROJECTIONS`), `alpha`
    defaulting to `2 * rank`. Use with `peft.get_peft_model(model, lora_config())`."""
    try:
        from peft import LoraConfig
    except ImportError as error:
        raise ImportError("LoRA needs the `peft` package: pip install 'higgs-v3[train]'.") from error
    return LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, lora_dropout=dropout, target_modules=BACKBONE_PROJECTIONS,
                      bias="none")


def trainable_parameters(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if p.requires_grad), total


# ================================================================================================== a run
@dataclass
class FinetuneRun:
    """What `higgs-v3 finetune` does, as a value: the options, then `run()`.

    The output folder receives Trainer's `checkpoint-N` folders (resumable), `adapter/` (LoRA only: the PEFT adapter,
    for `PeftModel.from_pretrained` on the base model), `model/` (the full model, LoRA merged: weights, remote code,
    tokenizer and processor, loadable with `trust_remote_code=True`; the folder `push_to_hub` uploads), `sample.wav`
    (a short sample of the tuned model) and `codes_cache/` (the encoded clips). `adapter/` and `model/` are written in a
    staging folder beside them and swapped into place whole (`conversion/folders`); `model/` also gets the base
    folder's `original_chat_template.jinja` and LICENSE / NOTICE files, so that `higgs-v3 export --to-original` of the
    tuned model restores the original chat template."""

    data: str
    model: str
    output: str
    lora: bool = False
    epochs: float = 3.0
    max_steps: int = -1
    learning_rate: float | None = None
    batch_size: int = 1
    gradient_accumulation_steps: int = 1
    held_out: float = 0.1
    max_seconds: float = DEFAULT_MAX_SECONDS
    skip_invalid: bool = False
    gradient_checkpointing: bool = False
    bf16: bool = False
    save_steps: int = 200
    resume: bool = False
    lora_rank: int = 16
    seed: int = 0
    sample_text: str | None = None
    sample_seconds: float = 10.0
    push_to_hub: str | None = None
    push_adapter: bool = False
    device: str = "auto"
    progress: bool = True
    log: Callable[[str], None] = field(default=logger.info, repr=False)

    def validate(self) -> None:
        if self.push_adapter and not self.lora:
            raise ValueError("--push-adapter pushes a LoRA adapter: add --lora (or push the full model without it).")
        if self.device not in ("auto", "cpu"):
            raise ValueError(
                f"--device {self.device!r}: fine-tuning runs on the Trainer's device (a GPU when one is visible; choose "
                "it with CUDA_VISIBLE_DEVICES) or, with --device cpu, on the CPU."
            )
        if not 0 <= self.held_out < 1:
            raise ValueError(f"--held-out must be a fraction in [0, 1), got {self.held_out}.")
        if self.resume:
            resume_checkpoint(self.output)  # refuses a folder without a complete checkpoint
            recorded = read_run_record(self.output).get("model")
            if recorded is not None and recorded != model_identity(self.model):
                raise ValueError(f"--resume: {self.output!r} was fine-tuned from --model {recorded!r}, not "
                                 f"{model_identity(self.model)!r}; resume with --model {recorded!r}, or pick another "
                                 "--output to tune the other model.")
        if not self.resume and Path(self.output, "model").exists():
            raise ValueError(f"{self.output!r} already holds a fine-tuned model; pick another --output or --resume.")

    def finished_summary(self) -> dict | None:
        """With `resume`, a `max_steps` at or below the newest checkpoint's step and `model/` saved: the run is done,
        and this is its summary (`run`'s keys: its last training and held-out losses from the checkpoint's log), so
        nothing is trained, saved or replaced. None when there is something to do."""
        if not self.resume or self.max_steps <= 0:
            return None
        checkpoint, _ = resume_checkpoint(self.output)
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        step = int(state["global_step"])
        if step < self.max_steps:
            return None
        if not Path(self.output, "model").is_dir():
            if step > self.max_steps:
                raise ValueError(f"--resume: {checkpoint.name} is already past --max-steps {self.max_steps}; give "
                                 f"--max-steps {step} to save its model, or more to train further.")
            return None  # the last checkpoint was written, the model not yet: `run` saves it
        history = state.get("log_history", [])
        losses = [entry["loss"] for entry in history if "loss" in entry]
        held_out = [entry["eval_loss"] for entry in history if "eval_loss" in entry]
        self.log(f"Nothing to do: {checkpoint.name} is at step {step}, at or past --max-steps {self.max_steps}, and "
                 f"{Path(self.output, 'model')} is saved (kept as it is). Raise --max-steps to train further.")
        return {"train_loss": losses[-1] if losses else None, "steps": step, "seconds": 0.0, "resumed_step": step,
                "steps_now": 0, "model": str(Path(self.output, "model")), "skipped": [], "sample": None,
                **({"eval_loss": held_out[-1]} if held_out else {}),
                **({"adapter": str(Path(self.output, "adapter"))} if Path(self.output, "adapter").is_dir() else {})}

    def run(self) -> dict:
        """Train, save, sample and push; returns a summary (losses, steps, paths, throughput). The options and the
        data's items are checked before any model is loaded."""
        from transformers import set_seed

        from ..cli.models import load_processor, resolve_model

        self.validate()
        if (done := self.finished_summary()) is not None:
            return done
        if not self.resume:
            write_run_record(self.output, {"model": model_identity(self.model)})
        set_seed(self.seed)
        skipped: list[str] = []
        items = load_speech_items(self.data, skip_invalid=self.skip_invalid, skipped=skipped)
        if self.push_to_hub:  # the Hub and the login, before hours of training
            from ..conversion.repo import check_hub_push

            check_hub_push(self.push_to_hub, done="trained")
        source = resolve_model(self.model, log=self.log)
        processor = load_processor(source)
        model = self._load_model(source)
        train_set, eval_set = self._examples(model, processor, items, skipped)
        if self.lora:
            from peft import get_peft_model

            model = get_peft_model(model, lora_config(self.lora_rank))
        trainable, total = trainable_parameters(model)
        self.log(f"Training {trainable:,} of {total:,} parameters ({'LoRA' if self.lora else 'full'}).")
        summary = {**self._train(model, processor, train_set, eval_set), "skipped": skipped}
        model, saved = self._save(model.eval(), processor, source)
        summary.update(saved)
        output = Path(self.output)
        summary["sample"] = self._sample(model, processor, items[0].text, output) if self.sample_seconds > 0 else None
        if self.push_to_hub:
            summary["pushed"] = self._push(output)
        return summary

    @staticmethod
    def _load_model(source: Path):
        """The model to tune, in float32, its codec frozen (the model freezes it; checked)."""
        from ..modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

        model = HiggsAudioV3ForConditionalGeneration.from_pretrained(str(source), dtype=torch.float32)
        if model.codec is not None and any(p.requires_grad for p in model.codec.parameters()):
            raise RuntimeError("The codec's parameters require gradients after loading; it must stay frozen.")
        return model

    def _examples(self, model, processor, items: list[SpeechItem], skipped: list[str]):
        """The training and held-out examples (`prepare_examples`, codes cached in `output/codes_cache`)."""
        dataset = prepare_examples(model, processor, items, cache_dir=Path(self.output) / "codes_cache",
                                   max_seconds=self.max_seconds, skip_invalid=self.skip_invalid, skipped=skipped)
        for reason in skipped:
            self.log(f"Skipped {reason}.")
        held_out = math.floor(len(dataset) * self.held_out) if len(dataset) > 1 else 0
        train_set, eval_set = dataset.split(held_out)
        self.log(f"{len(train_set)} training and {held_out} held-out examples ({dataset.encoded} clips encoded, "
                 f"{dataset.cache_hits} from the cache).")
        return train_set, eval_set

    def _train(self, model, processor, train_set, eval_set) -> dict:
        """transformers' `Trainer` with this run's options (resumed from the last checkpoint with `resume`); the
        training loss, steps and seconds, and the held-out loss when there is a held-out set."""
        import time

        from transformers import Trainer, TrainingArguments

        args = TrainingArguments(
            output_dir=str(self.output),
            num_train_epochs=self.epochs,
            max_steps=self.max_steps,
            learning_rate=self.learning_rate or (1e-4 if self.lora else 1e-5),
            per_device_train_batch_size=self.batch_size,
            per_device_eval_batch_size=self.batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            gradient_checkpointing=self.gradient_checkpointing,
            bf16=self.bf16,
            eval_strategy="epoch" if eval_set is not None else "no",
            save_strategy="steps",
            save_steps=self.save_steps,
            logging_steps=1 if self.max_steps > 0 and self.max_steps < 20 else 10,
            report_to="none",
            disable_tqdm=True,  # our `_Progress` shows the bar and the losses on stderr
            seed=self.seed,
            use_cpu=self.device == "cpu",
            remove_unused_columns=False,
            label_names=["audio_labels"],
        )
        trainer = Trainer(model=model, args=args, train_dataset=train_set, eval_dataset=eval_set,
                          data_collator=HiggsAudioV3DataCollator(processor),
                          callbacks=[_Progress(self.log, bar=self.progress), CheckpointMarker()])
        trainer.remove_callback(PrinterCallback)  # it prints raw log dicts to stdout
        checkpoint, resumed_step = self._resume_from(), 0
        if checkpoint is not None:
            state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
            resumed_step = int(state["global_step"])
        started = time.perf_counter()
        try:
            result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint is not None else None)
        except Exception as error:
            self._disk_full(error, trainer.state.global_step)
            raise
        summary = {"train_loss": result.training_loss, "steps": result.global_step,
                   "seconds": time.perf_counter() - started, "examples": len(train_set),
                   "resumed_step": resumed_step, "steps_now": result.global_step - resumed_step}
        if checkpoint is not None and summary["steps_now"] == 0:  # a finished run: its last logged loss
            losses = [entry["loss"] for entry in state.get("log_history", []) if "loss" in entry]
            summary["train_loss"] = losses[-1] if losses else None
        if eval_set is not None:
            summary["eval_loss"] = trainer.evaluate()["eval_loss"]  # logged by `_Progress`
        return summary

    def _disk_full(self, error: Exception, step: int) -> None:
        """A full disk while Trainer wrote `checkpoint-<step>`: the partial checkpoint removed, and the one-line
        `conversion.folders.disk_full_error` raised instead of the writer's own error."""
        import shutil

        from ..conversion.folders import disk_full_error, folder_size, is_disk_full

        partial = Path(self.output) / f"checkpoint-{step}"
        if not is_disk_full(error, partial):
            return
        wrote = folder_size(partial) if partial.is_dir() else 0
        if wrote and check_complete(partial) is not None:
            shutil.rmtree(partial, ignore_errors=True)
        raise disk_full_error(partial, "the checkpoint", None, "the partial checkpoint was removed; --resume continues "
                              "from the newest complete one", wrote) from error

    def _resume_from(self) -> Path | None:
        """With `resume`, the newest complete checkpoint (`resume_checkpoint`), logged with the ones it passes over."""
        if not self.resume:
            return None
        checkpoint, ignored = resume_checkpoint(self.output)
        for line in ignored:
            self.log(f"Ignoring {line}.")
        self.log(f"Resuming from {checkpoint.name}, the newest complete checkpoint.")
        return checkpoint

    def _save(self, model, processor, source: Path):
        """`adapter/` (LoRA), then `model/` (LoRA merged), each written whole (`conversion.folders.staged_folder`).
        Returns the model as saved (merged) and the folders written."""
        output, saved = Path(self.output), {}
        if self.lora:
            with staged_folder(output / "adapter", "saving") as staging:
                model.save_pretrained(str(staging))
            saved["adapter"] = str(output / "adapter")
            model = model.merge_and_unload()
        weights = sum(tensor.numel() * tensor.element_size() for tensor in model.state_dict().values())
        with staged_folder(output / "model", "saving", needed=weights) as staging:
            save_full_repo(model, processor, staging, base=source)
        saved["model"] = str(output / "model")
        return model, saved

    def _sample(self, model, processor, default_text: str, output: Path) -> str | None:
        text = self.sample_text or default_text
        inputs = processor(text=text).to(model.device)
        limit = model.config.audio_spec.rows_for_seconds(self.sample_seconds)  # or the repo's own limit if lower
        limit = min(limit, model.generation_config.max_new_tokens or limit)
        out = model.generate(**inputs, seed=self.seed, max_new_tokens=limit, return_dict_in_generate=True)
        if not out.audio:
            return None
        path = processor.save_audio(out.audio[0], output / "sample.wav")
        self.log(f"Sample: {text!r} -> {path} ({out.audio[0].shape[0] / processor.sampling_rate:.2f} s, "
                 f"finished={bool(out.finished[0])}).")
        return str(path)

    def _push(self, output: Path) -> str:
        from huggingface_hub import HfApi

        from ..conversion.repo import push_folder_to_hub

        if self.push_adapter:
            api = HfApi()
            api.create_repo(repo_id=self.push_to_hub, exist_ok=True)
            commit = api.upload_folder(repo_id=self.push_to_hub, folder_path=str(output / "adapter"),
                                       commit_message="Add a Higgs Audio v3 LoRA adapter")
            return str(getattr(commit, "commit_url", commit))
        return push_folder_to_hub(output / "model", self.push_to_hub)


class _Progress(TrainerCallback):
    """Progress on stderr: a bar with the latest loss (when `bar`), and one line per logging step (`step N/M: loss
    X`, and the held-out loss after each evaluation) through `log`. Replaces Trainer's printing of log dicts."""

    def __init__(self, log: Callable[[str], None], bar: bool):
        self.log, self.bar, self.tqdm = log, bar, None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.bar:
            from tqdm.auto import tqdm

            self.tqdm = tqdm(total=state.max_steps, initial=state.global_step, desc="fine-tuning", file=sys.stderr,
                             dynamic_ncols=True)

    def on_step_end(self, args, state, control, **kwargs):
        if self.tqdm is not None:
            self.tqdm.update(state.global_step - self.tqdm.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "loss" in logs:
            if self.tqdm is not None:
                self.tqdm.set_postfix(loss=f"{logs['loss']:.4f}")
            self._line(f"step {state.global_step}/{state.max_steps}: loss {logs['loss']:.4f}")
        if "eval_loss" in logs:
            self._line(f"step {state.global_step}/{state.max_steps}: held-out loss {logs['eval_loss']:.4f}")

    def _line(self, message: str) -> None:
        if self.tqdm is not None:  # above the bar, not after it
            self.tqdm.write(message, file=sys.stderr)
        else:
            self.log(message)

    def on_train_end(self, args, state, control, **kwargs):
        if self.tqdm is not None:
            self.tqdm.close()
            self.tqdm = None


class CheckpointMarker(TrainerCallback):
    """Marks each `checkpoint-N` complete once Trainer has written all of it: `conversion.folders.write_complete`
    (the sizes of its files; hashing tens of GB at every save would cost minutes) after the trainer state, the last
    file Trainer writes. A checkpoint without the marker, or whose files differ from it, was cut short (a kill, a full
    disk) and is never resumed from."""

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            follow_umask(checkpoint)  # Trainer saves with safetensors, which leaves 0600
            write_complete(checkpoint, checksums=False)  # sizes


RUN_RECORD = ".higgs_v3_finetune.json"
"""In a fine-tuning output folder: what `--resume` must not change (`{"model": model_identity(--model)}`)."""


def model_identity(name: str) -> str:
    """`--model` as a run records it: an existing folder as its absolute path (however it was spelled), else the name
    (`tiny-random`, a Hub repo id)."""
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else name


def read_run_record(output: str | os.PathLike) -> dict:
    """The run record of `output` (empty when there is none: a run of an older version)."""
    try:
        return json.loads(Path(output, RUN_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def write_run_record(output: str | os.PathLike, record: dict) -> None:
    Path(output).mkdir(parents=True, exist_ok=True)
    with atomic_output(Path(output, RUN_RECORD)) as temporary:
        temporary.write_text(json.dumps(record) + "\n", encoding="utf-8")


def resume_checkpoint(output: str | os.PathLike) -> tuple[Path, list[str]]:
    """The newest complete `checkpoint-N` of `output` (marked by `CheckpointMarker`, its files as marked), and one
    line for each newer one passed over (`"checkpoint-8: it has no completion marker ..."`). A `ValueError` when
    there is none."""
    found = sorted((int(p.name.split("-")[1]), p) for p in Path(output).glob("checkpoint-*")
                   if p.is_dir() and p.name.split("-")[1].isdigit())
    ignored = []
    for _, checkpoint in reversed(found):
        problem = check_complete(checkpoint)
        if problem is None:
            return checkpoint, ignored
        ignored.append(f"{checkpoint.name}: {problem}")
    raise ValueError(f"--resume: {str(output)!r} has no complete checkpoint-N folder to resume from"
                     + (f" ({'; '.join(ignored)})" if ignored else "") + ".")


def save_full_repo(model, processor, folder: str | os.PathLike, base: str | os.PathLike | None = None) -> Path:
    """Save a (merged) model as a complete repo: weights, config, generation config and remote code
    (`save_pretrained`), the tokenizer and processor files; checked as the converter checks its output.

    `base`, the folder of the model that was fine-tuned: its `original_chat_template.jinja` (the original ChatML
    template the converter kept, which `higgs-v3 export --to-original` restores) and its LICENSE / NOTICE files are
    copied along, when it has them. A model card (`README.md`) names the base and carries its license terms."""
    import shutil

    from ..conversion.repo import (LICENSE_FILE_PATTERN, ORIGINAL_CHAT_TEMPLATE_FILE, check_output_folder,
                                   write_finetuned_model_card)

    folder = Path(folder)
    model.save_pretrained(str(folder))
    processor.save_pretrained(str(folder))
    if base is not None and Path(base).is_dir():
        for path in sorted(Path(base).iterdir()):
            if path.is_file() and (path.name == ORIGINAL_CHAT_TEMPLATE_FILE or LICENSE_FILE_PATTERN.match(path.name)):
                shutil.copyfile(path, folder / path.name)
    base_folder = Path(base) if base is not None and Path(base).is_dir() else None
    write_finetuned_model_card(folder, base_folder, str(base) if base is not None else "an unnamed base model")
    check_output_folder(folder)
    return folder


__all__ = [
    "AUDIO_SUFFIXES",
    "BACKBONE_PROJECTIONS",
    "CheckpointMarker",
    "DEFAULT_MAX_SECONDS",
    "FinetuneRun",
    "HiggsAudioV3CodesCache",
    "HiggsAudioV3DataCollator",
    "HiggsAudioV3SpeechDataset",
    "SpeechItem",
    "items_from_dataset",
    "load_speech_items",
    "lora_config",
    "prepare_examples",
    "model_identity",
    "read_run_record",
    "resume_checkpoint",
    "save_full_repo",
    "trainable_parameters",
    "write_run_record",
]
