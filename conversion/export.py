# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Export a converted (or fine-tuned, or LoRA-merged) Higgs Audio v3 repo back to the original checkpoint layout, the
one the serving engines read (vllm-omni, sglang-omni, the official server).

    python -m higgs_v3.convert_checkpoint --to-original --input ./higgs-audio-v3-hf --output ./higgs-audio-v3-original
    higgs-v3 convert --to-original --input ./my-finetuned-model --output ./my-finetuned-original [--original DIR]

What is written (the format is `conversion/original_format`'s, so it is read back by the converter's own reader):

    config.json                      model_type `higgs_multimodal_qwen3`, `original_config` with the repo's dimensions
                                     and every backbone field (`TEXT_CONFIG_FIELDS`) taken from the converted config
    model.safetensors (+ .index)     the original tensor names (`original_name`, the inverse of `MAPPING_TABLE`, checked
                                     against it name by name), every tensor in `--dtype` (default bf16, the original's),
                                     the codec under `tied.embedding.modality_embeddings.0.model.`; the index always,
                                     as the original has one
    tokenizer.json, tokenizer_config.json, chat_template.jinja, ...   copied from the repo byte for byte (a
                                     tokenizer_config.json re-saved with a processor loses its `auto_map` and
                                     `processor_class`, which point at remote code); chat_template.jinja is the
                                     original's: `original_chat_template.jinja` (kept by the converter) when the repo
                                     has it; when the repo has only the TTS template (a processor's save_pretrained
                                     writes no original's), `--original DIR`'s, else none is written (a warning, and a
                                     line in the result's `filled`); any other template is copied
    higgs_audio_v2_tokenizer_config.json   the codec's config, when the repo has a codec
    LICENSE*, NOTICE*                copied

The converter drops one tensor, the codec's training-only `semantic_model.masked_spec_embed` (HuBERT's mask
embedding, unused at inference). The export writes it back: copied from the original checkpoint when `original=` /
`--original DIR` names it (then an original -> converted -> original round trip is bit for bit), else zeros.

Like the converter, the folder is assembled next to the output (`<output>_exporting_<hex>`, claimed by its process),
checked (read back with `read_original`, every name mapped back to its converted name by `map_key`, every tensor
compared bit for bit with its source) and only then swapped into place; what a killed export leaves is cleaned up by
the next export or conversion, and an output lost between the two renames is restored (`conversion/folders`).
Peak memory is about one shard (`max_shard_size`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers.utils import logging

from ..configuration_higgs_v3 import HiggsAudioV3Config
from .repo import (
    LICENSE_FILE_PATTERN,
    ORIGINAL_CHAT_TEMPLATE_FILE,
    TOKENIZER_FILES,
    PlannedTensor,
    check_shard_size,
    shard_split,
    weight_dtype,
)
from .original_format import (
    AUDIO_EMBEDDING,
    AUDIO_HEAD,
    CODEC_EXTRA_KEY,
    CODEC_PREFIX,
    FINAL_NORM,
    LAYER_PREFIX,
    ORIGINAL_CODEC_CONFIG_FILE,
    ORIGINAL_LAYER_SUFFIXES,
    ORIGINAL_MODEL_TYPE,
    TEXT_CONFIG_FIELDS,
    TEXT_EMBEDDING,
    TEXT_HEAD,
    ConversionError,
    SourceTensor,
    codec_tensor_shapes,
    map_key,
    original_config,
    original_lm_shapes,
    read_header,
    read_json,
    read_original,
    read_rows,
)
from .folders import check_outside, output_folder, staged_folder
from ..processing_higgs_v3 import TTS_CHAT_TEMPLATE


logger = logging.get_logger(__name__)


CODEC_CONFIG_BOOKKEEPING: dict = {"architectures": ["HiggsAudioV2TokenizerModel"], "dtype": "float32"}
"""What the codec config file carries besides the settings (as the codec's own `save_pretrained` writes it)."""

TOKENIZER_CONFIG_DROPPED: tuple[str, ...] = ("auto_map", "processor_class", "local_files_only")
"""Keys a processor's `save_pretrained` adds to `tokenizer_config.json` (our remote code, a loading option)."""

CHAT_TEMPLATE_FILE = "chat_template.jinja"

_LAYER_SUFFIXES = "|".join(re.escape(suffix) for suffix in ORIGINAL_LAYER_SUFFIXES)

# fmt: off
INVERSE_TABLE: tuple[tuple[str, str], ...] = (
    # converted name (re.fullmatch)                  original name (re.Match.expand template)
    (r"model\.embed_tokens\.weight",                  TEXT_EMBEDDING),
    (rf"model\.layers\.(\d+)\.({_LAYER_SUFFIXES})",   LAYER_PREFIX.format(r"\1") + r"\2"),
    (r"model\.norm\.weight",                          FINAL_NORM),
    (r"audio_embed\.weight",                          AUDIO_EMBEDDING),
    (r"codec\.(.+)",                                  CODEC_PREFIX + r"\1"),
    (r"lm_head\.weight",                              TEXT_HEAD),
    (r"audio_head\.weight",                           AUDIO_HEAD),
)
# fmt: on
_COMPILED_INVERSE = tuple((re.compile(pattern), template) for pattern, template in INVERSE_TABLE)


def original_name(converted: str) -> str:
    """The original checkpoint's name of a converted tensor name (`model.layers.3.mlp.up_proj.weight` ->
    `body.layers.3.mlp.up_proj.weight`). The result is checked against `MAPPING_TABLE` (it must map back to
    `converted`), so the two tables cannot drift apart. A name no rule covers raises a `ConversionError`."""
    for pattern, template in _COMPILED_INVERSE:
        match = pattern.fullmatch(converted)
        if match:
            name = match.expand(template)
            if map_key(name)[0] != converted:
                raise ConversionError(
                    f"The export table maps {converted!r} to {name!r}, which the converter's MAPPING_TABLE maps to "
                    f"{map_key(name)[0]!r}: the two tables disagree."
                )
            return name
    raise ConversionError(
        f"The repo has a tensor {converted!r} that has no place in the original checkpoint layout (known: the "
        "backbone model.*, audio_embed, audio_head, lm_head and codec.*). A LoRA adapter must be merged first "
        "(model.merge_and_unload()) and saved with save_pretrained."
    )


@dataclass
class ExportResult:
    """What `export_to_original` wrote: the folder, the tensor count, the shard files, the tensors (and the chat
    template) written without a source in the repo (name -> how they were filled) and the dtype."""

    output_dir: Path
    num_tensors: int
    shards: list[str]
    filled: dict[str, str] = field(default_factory=dict)
    dtype: str = "bfloat16"


@dataclass(frozen=True)
class _Planned:
    name: str  # original name
    source: SourceTensor | None  # None: zeros
    shape: tuple[int, ...]
    converted: str | None = None  # the repo's name (None: not from the repo)


# ---------------------------------------------------------------------------------------------------------- reading
def _read_converted(directory: Path) -> tuple[HiggsAudioV3Config, dict[str, SourceTensor]]:
    """The converted repo's config and tensor headers; a `ConversionError` for anything that is not one."""
    if not (directory / "config.json").is_file():
        hint = (" It looks like a PEFT adapter: merge it into the model (model.merge_and_unload()), then save that with "
                "save_pretrained." if (directory / "adapter_config.json").is_file() else "")
        raise ConversionError(f"{str(directory)!r} has no config.json; expected a converted Higgs Audio v3 repo.{hint}")
    raw = read_json(directory / "config.json", "The config")
    if raw.get("model_type") != HiggsAudioV3Config.model_type:
        hint = " It is already in the original layout." if raw.get("model_type") == ORIGINAL_MODEL_TYPE else ""
        raise ConversionError(
            f"config.json in {str(directory)!r} has model_type {raw.get('model_type')!r}; the export reads a converted "
            f"repo (model_type {HiggsAudioV3Config.model_type!r}).{hint}"
        )
    try:
        config = HiggsAudioV3Config.from_dict({k: v for k, v in raw.items() if k != "transformers_version"})
    except (ValueError, TypeError) as error:
        raise ConversionError(f"config.json in {str(directory)!r} is not a valid HiggsAudioV3Config: {error}") from error
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index, "The weight index").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ConversionError(f"{str(index)!r} has no weight_map.")
        files = sorted(set(weight_map.values()))
    elif (directory / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise ConversionError(
            f"{str(directory)!r} has no model.safetensors or model.safetensors.index.json (the export reads safetensors "
            "only; save the model with save_pretrained)."
        )
    missing = [name for name in files if not (directory / name).is_file()]
    if missing:
        raise ConversionError(f"model.safetensors.index.json names {', '.join(missing)}, missing from {str(directory)!r}.")
    tensors: dict[str, SourceTensor] = {}
    for name in files:
        tensors.update(read_header(directory / name))
    return config, {_LEGACY_WEIGHT_NORM.sub(_parametrization_name, name): t for name, t in tensors.items()}


# transformers 5.5's `save_pretrained` writes a weight-normed convolution under torch's legacy names (`weight_g`,
# `weight_v`); the codec's state_dict and the original use the parametrization names.
_LEGACY_WEIGHT_NORM = re.compile(r"^(codec\..+)\.weight_([gv])$")


def _parametrization_name(match: re.Match) -> str:
    return f"{match.group(1)}.parametrizations.weight.original{0 if match.group(2) == 'g' else 1}"


def export_config(config: HiggsAudioV3Config, dtype: str = "bfloat16") -> dict:
    """The original `config.json` for a converted config: `original_config` with its dimensions, the tie flags, the
    backbone fields of `TEXT_CONFIG_FIELDS` and the placeholder id taken from `config`."""
    import transformers

    exported = original_config(
        hidden_size=config.hidden_size, num_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads, num_key_value_heads=config.num_key_value_heads,
        head_dim=config.head_dim, intermediate_size=config.intermediate_size, vocab_size=config.vocab_size,
        num_codebooks=config.num_codebooks, codebook_size=config.codebook_size,
        tie_word_embeddings=config.tie_word_embeddings,
    )
    values = config.to_dict()
    text = exported["text_config"]
    text.update({key: values[key] for key in TEXT_CONFIG_FIELDS if key in values})
    text["dtype"] = dtype
    exported["audio_token_id"] = config.audio_placeholder_id
    exported["transformers_version"] = transformers.__version__
    return exported


def _plan(
    config: HiggsAudioV3Config, tensors: dict[str, SourceTensor], original: Path | None
) -> tuple[list[_Planned], dict[str, str]]:
    """Every tensor of the original layout for `config`, in the original's order, with its source; the tensors filled
    without a source in the repo. All problems (missing, unexpected, wrong shape) are listed in one error."""
    lm = original_lm_shapes(export_config(config))
    heads = {TEXT_HEAD: TEXT_EMBEDDING, AUDIO_HEAD: AUDIO_EMBEDDING}
    expected = dict(lm)
    if config.codec_config is not None:
        expected.update({CODEC_PREFIX + name: shape
                         for name, shape in codec_tensor_shapes(config.codec_config, original=True).items()})
    by_original = {original_name(converted): tensor for converted, tensor in tensors.items()}
    problems: list[str] = []
    for head, embedding in heads.items():
        if head in by_original and head not in expected:  # a tied head saved anyway: it must equal its embedding
            tensor = by_original.pop(head)
            if embedding not in by_original or not torch.equal(read_rows(tensor), read_rows(by_original[embedding])):
                problems.append(f"{tensor.name} differs from its embedding although tie_word_embeddings is true")
    problems += [f"missing {name}" for name in expected if name not in by_original and name != CODEC_PREFIX + CODEC_EXTRA_KEY]
    problems += [f"unexpected {name} (not part of a model with this config)" for name in by_original if name not in expected]
    problems += [f"{name} has shape {list(t.shape)}, the config implies {list(expected[name])}"
                 for name, t in by_original.items() if name in expected and t.shape != expected[name]]
    if problems:
        raise ConversionError(f"The repo's tensors do not match its config.json: {'; '.join(problems[:20])}.")
    filled: dict[str, str] = {}
    extra = CODEC_PREFIX + CODEC_EXTRA_KEY
    if config.codec_config is not None:
        by_original[extra] = _extra_from_original(original, expected[extra]) if original is not None else None
        filled[extra] = (f"copied from {original}" if original is not None
                         else "zeros (the converted repo does not carry it; training-only, unused at inference)")
    order = [*lm, *(name for name in expected if name not in lm)]
    converted_of = {original_name(converted): converted for converted in tensors}
    return [_Planned(name, by_original[name], expected[name], converted_of.get(name) if name not in filled else None)
            for name in order], filled


def _extra_from_original(original: Path, shape: tuple[int, ...]) -> SourceTensor:
    """The codec's training-only tensor from the original checkpoint at `original` (checked for its shape)."""
    checkpoint = read_original(original)
    tensor = checkpoint.tensors.get(CODEC_PREFIX + CODEC_EXTRA_KEY)
    if tensor is None or tensor.shape != shape:
        found = "none" if tensor is None else list(tensor.shape)
        raise ConversionError(
            f"The original checkpoint {str(original)!r} has no {CODEC_PREFIX + CODEC_EXTRA_KEY} of shape {list(shape)} "
            f"(found {found}); is it the checkpoint this repo was converted from?"
        )
    return tensor


# ---------------------------------------------------------------------------------------------------------- writing
class _Files:
    """One `safe_open` handle per safetensors file for the duration of a pass (opening one per tensor costs about a
    millisecond each: most of a tiny export). Tensors are read one at a time and released by the caller."""

    def __init__(self):
        self._stack = contextlib.ExitStack()
        self._handles: dict[Path, object] = {}

    def __enter__(self) -> _Files:
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def read(self, tensor: SourceTensor) -> torch.Tensor:
        from safetensors import safe_open

        if tensor.file not in self._handles:
            self._handles[tensor.file] = self._stack.enter_context(safe_open(str(tensor.file), framework="pt"))
        return self._handles[tensor.file].get_tensor(tensor.name)


def _values(planned: _Planned, dtype: torch.dtype, files: _Files) -> torch.Tensor:
    """The tensor to write: its source cast to `dtype` (zeros without a source); NaN/inf refused."""
    if planned.source is None:
        return torch.zeros(planned.shape, dtype=dtype)
    values = files.read(planned.source)
    converted = values.to(dtype).contiguous()
    low, high = torch.aminmax(converted) if converted.numel() else (torch.zeros(()), torch.zeros(()))
    if not bool(torch.isfinite(low) & torch.isfinite(high)):
        raise ConversionError(
            f"Tensor {planned.source.name!r} holds NaN or infinite values once cast to {dtype} (largest |value| "
            f"{float(values.float().abs().max()):.4g}); export with another --dtype, or check the model."
        )
    return converted


def _write_weights(planned: list[_Planned], dtype: torch.dtype, output: Path, max_shard_size: int | str) -> list[str]:
    """huggingface_hub's shard plan, one shard in memory at a time; the index is always written."""
    from safetensors.torch import save_file

    split = shard_split([PlannedTensor(p.name, p.name, dtype, p.shape) for p in planned], max_shard_size)
    by_name = {p.name: p for p in planned}
    for filename, names in split.filename_to_tensors.items():
        with _Files() as files:
            shard = {name: _values(by_name[name], dtype, files) for name in names}
        save_file(shard, str(output / filename), metadata={"format": "pt"})
        del shard  # before the next shard is read
    weight_map = {p.name: split.tensor_to_filename[p.name] for p in planned}  # in the original's order
    total = sum(math.prod(p.shape) * dtype.itemsize for p in planned)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (output / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return list(split.filename_to_tensors)


def _write_other_files(source: Path, config: HiggsAudioV3Config, output: Path, dtype: str,
                       original: Path | None = None) -> dict[str, str]:
    """The original config, the tokenizer files, the chat template (`_chat_template`), the codec config file and the
    license files. Returns the files not taken from the repo (name -> how they were filled)."""
    (output / "config.json").write_text(json.dumps(export_config(config, dtype), indent=2) + "\n", encoding="utf-8")
    missing = [name for name in ("tokenizer.json", "tokenizer_config.json") if not (source / name).is_file()]
    if missing:
        raise ConversionError(
            f"{str(source)!r} has no {' and no '.join(missing)}; the original layout needs the tokenizer. Save the "
            "processor into the folder too (processor.save_pretrained(folder)), or copy the tokenizer files from the "
            "converted repo the model came from."
        )
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, output / name)
    filled = _chat_template(source, output, original)
    tokenizer_config = read_json(output / "tokenizer_config.json", "The tokenizer config")
    if any(key in tokenizer_config for key in TOKENIZER_CONFIG_DROPPED):
        kept = {k: v for k, v in tokenizer_config.items() if k not in TOKENIZER_CONFIG_DROPPED}
        (output / "tokenizer_config.json").write_text(json.dumps(kept, indent=2, ensure_ascii=False) + "\n",
                                                      encoding="utf-8")
    if config.codec_config is not None:
        import transformers

        codec = {**config.codec_config, **CODEC_CONFIG_BOOKKEEPING, "transformers_version": transformers.__version__}
        (output / ORIGINAL_CODEC_CONFIG_FILE).write_text(json.dumps(codec, indent=2, sort_keys=True) + "\n",
                                                         encoding="utf-8")
    for path in sorted(source.iterdir()):
        if path.is_file() and LICENSE_FILE_PATTERN.match(path.name):
            shutil.copyfile(path, output / path.name)
    return filled


def _chat_template(source: Path, output: Path, original: Path | None) -> dict[str, str]:
    """Put the original's chat template into `output` (where the tokenizer files were copied): the repo's
    `original_chat_template.jinja` (kept by the converter); when the repo has only the TTS template
    (`TTS_CHAT_TEMPLATE`, e.g. saved by a processor's `save_pretrained`), `original`'s `chat_template.jinja`, else no
    template and a warning (the TTS template is not the original's: it renders no ChatML). Returns
    `{CHAT_TEMPLATE_FILE: how}` when the template does not come from the repo, else `{}`."""
    template = output / CHAT_TEMPLATE_FILE
    if (source / ORIGINAL_CHAT_TEMPLATE_FILE).is_file():  # the converter replaced the original's template: restore it
        shutil.copyfile(source / ORIGINAL_CHAT_TEMPLATE_FILE, template)
        return {}
    if not template.is_file() or template.read_text(encoding="utf-8") != TTS_CHAT_TEMPLATE:
        return {}  # none, or the repo's own (not the TTS one): copied as it is
    if original is not None and (original / CHAT_TEMPLATE_FILE).is_file():
        shutil.copyfile(original / CHAT_TEMPLATE_FILE, template)
        return {CHAT_TEMPLATE_FILE: f"copied from {original}"}
    template.unlink()
    where = (f"; {str(original)!r} has no {CHAT_TEMPLATE_FILE} either" if original is not None
             else "; pass --original DIR (original=) to copy the original checkpoint's")
    how = (f"not written (the repo has the TTS template only, not the original's, and no "
           f"{ORIGINAL_CHAT_TEMPLATE_FILE}{where})")
    logger.warning(f"{CHAT_TEMPLATE_FILE}: {how}.")
    return {CHAT_TEMPLATE_FILE: how}


def _verify(planned: list[_Planned], dtype: torch.dtype, output: Path) -> None:
    """The folder read back with the converter's reader; every tensor's name maps back to its converted name and its
    values equal its source cast to `dtype`, bit for bit."""
    written = read_original(output).tensors
    if set(written) != {p.name for p in planned}:
        raise ConversionError(f"The written shards hold {len(written)} tensors, the plan has {len(planned)}.")
    with _Files() as files:
        for p in planned:
            _verify_one(p, dtype, written[p.name], files)


def _verify_one(p: _Planned, dtype: torch.dtype, written: SourceTensor, files: _Files) -> None:
    """One written tensor: its dtype and shape, its name mapping back to its converted name, its values."""
    values = files.read(written)
    if tuple(values.shape) != p.shape or values.dtype != dtype:
        raise ConversionError(f"{p.name} was written as {values.dtype} {tuple(values.shape)}, expected {dtype} {p.shape}.")
    if p.converted is not None and map_key(p.name)[0] != p.converted:
        raise ConversionError(f"{p.name} does not map back to {p.converted} (MAPPING_TABLE).")
    expected = torch.zeros(p.shape, dtype=dtype) if p.source is None else files.read(p.source).to(dtype)
    if not torch.equal(values, expected):
        raise ConversionError(f"{p.name} in {written.file.name} differs from its source.")


# ---------------------------------------------------------------------------------------------------------- export
def export_to_original(
    input_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    dtype: str = "bfloat16",
    max_shard_size: int | str = "5GB",
    overwrite: bool = False,
    original: str | os.PathLike | None = None,
    progress: Callable[[str], None] | None = None,
) -> ExportResult:
    """Write the converted repo at `input_dir` (a converter output, or a fine-tuned / LoRA-merged model saved with
    `save_pretrained` next to its tokenizer files) in the original checkpoint layout into `output_dir`.

    `dtype`: every tensor's dtype (`bfloat16`, the original's, by default). `original`: the original checkpoint the
    repo came from, for the one tensor the converter drops (else zeros), and for the chat template when the repo has
    only the TTS one (else none is written, with a warning). A non-empty `output_dir` is refused unless `overwrite`;
    what a killed export left beside it is cleaned up first. `progress`, when given, hears one line per step once the
    input is read. Raises `ConversionError` with the reason.

    >>> result = export_to_original("higgs-audio-v3-hf", "higgs-audio-v3-original")  # doctest: +SKIP
    >>> result.num_tensors  # doctest: +SKIP
    927
    """
    torch_dtype = weight_dtype(dtype)  # every tensor's, the codec's included (the original is all bf16)
    check_shard_size(max_shard_size)
    source = Path(input_dir).expanduser()
    if not source.is_dir():
        raise ConversionError(f"The input {str(input_dir)!r} is not a folder; give a converted Higgs Audio v3 repo.")
    output = output_folder(output_dir, overwrite)  # after the cleanup of a killed run's leftovers
    check_outside(source, output)
    config, tensors = _read_converted(source)
    original_dir = Path(original).expanduser() if original is not None else None
    planned, filled = _plan(config, tensors, original_dir)

    needed = sum(math.prod(p.shape) for p in planned) * torch_dtype.itemsize + sum(  # the weights and other files
        path.stat().st_size for path in source.iterdir() if path.is_file() and path.suffix != ".safetensors")
    progress = progress or (lambda message: None)
    with staged_folder(output, "exporting", overwrite=overwrite, needed=needed) as staging:
        progress(f"Read {str(source)!r}; writing {len(planned)} tensors in the original layout into {staging.name}...")
        shards = _write_weights(planned, torch_dtype, staging, max_shard_size)
        progress("Writing the config, tokenizer and codec config...")
        filled.update(_write_other_files(source, config, staging, dtype, original_dir))
        progress("Verifying: reading every written tensor back...")
        _verify(planned, torch_dtype, staging)
    return ExportResult(output, len(planned), shards, filled, dtype)


__all__ = [
    "CHAT_TEMPLATE_FILE",
    "CODEC_CONFIG_BOOKKEEPING",
    "ExportResult",
    "INVERSE_TABLE",
    "TOKENIZER_CONFIG_DROPPED",
    "export_config",
    "export_to_original",
    "original_name",
]
