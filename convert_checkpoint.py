# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Convert the original `bosonai/higgs-audio-v3-tts-4b` checkpoint into a verified, self-contained Transformers repo.

    python -m higgs_v3.convert_checkpoint --input bosonai/higgs-audio-v3-tts-4b --output ./higgs-audio-v3-hf
    python convert_checkpoint.py --input ORIGINAL_DIR --output OUT_DIR [--dtype bfloat16|float16|float32]
        [--revision REV] [--max-shard-size 5GB] [--overwrite] [--push-to-hub REPO_ID [--private]]

What it does, in order:

1. Reads the original folder (or downloads a Hub snapshot): `config.json` (`model_type` must be
   `higgs_multimodal_qwen3`), the safetensors headers, `tokenizer.json` (all Higgs specials required).
2. Maps every tensor name with `MAPPING_TABLE` (regexes, first match wins). Each source key is mapped, ignored on
   purpose (`IGNORED_KEYS`, with the reason), or reported as unknown; every target key the converted model needs must
   come from somewhere and have the shape the converted config implies. All problems are listed in one error.
3. Streams the tensors (a bounded chunk at a time, the source file reopened for each read so no mapping of the whole
   file stays resident) into sharded safetensors: the language model in `--dtype`, the codec in float32.
4. Writes `config.json` (a `HiggsAudioV3Config` with `auto_map` and the codec's config, which the original does not
   ship), `generation_config.json` (the official server's sampling defaults), the tokenizer files unchanged, the
   processor's files, the remote-code `.py` files, a model card and the source's LICENSE/NOTICE files.
5. Verifies: every written tensor is re-read and compared bit for bit with its source (after the dtype cast), and a
   fresh Python process loads the folder with `AutoModel.from_pretrained(..., trust_remote_code=True)` (no missing or
   unexpected keys allowed) and computes the audio logits of a fixed prompt with reference placeholders; they are
   compared with an independent float32 forward computed directly from the original tensors. The conversion fails
   when `max |diff| > VERIFY_RTOL * max(1, max |reference logit|)`.
6. Everything is written into a temporary folder next to the output and renamed at the end: a failed or interrupted
   run leaves the output as it was. No pickle is loaded anywhere.

`from_original(repo_or_dir)` converts once into a local cache and loads the model from there (the original repo has no
`auto_map`, so `AutoModel` cannot load it directly).
"""

from __future__ import annotations


if __name__ == "__main__" and not __package__:  # pragma: no cover - `python convert_checkpoint.py ...`
    # Run as a script: import this folder as the `higgs_v3` package so the relative imports below work.
    import importlib.util as _importlib_util
    import os as _os
    import sys as _sys

    _here = _os.path.dirname(_os.path.abspath(__file__))
    _spec = _importlib_util.spec_from_file_location(
        "higgs_v3", _os.path.join(_here, "__init__.py"), submodule_search_locations=[_here]
    )
    _package = _importlib_util.module_from_spec(_spec)
    _sys.modules["higgs_v3"] = _package
    _spec.loader.exec_module(_package)
    from higgs_v3.convert_checkpoint import main as _main

    raise SystemExit(_main())

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import GenerationConfig
from transformers.utils import logging

from .configuration_higgs_v3 import REAL_CODEC_CONFIG, HiggsAudioV3Config
from .tiny_higgs_v3 import CODEC_EXTRA_KEY, CODEC_PREFIX, HIGGS_SPECIAL_TOKENS, ORIGINAL_MODEL_TYPE


logger = logging.get_logger(__name__)

ORIGINAL_REPO_ID: str = "bosonai/higgs-audio-v3-tts-4b"
"""The Hub id of the original checkpoint (the model card's `base_model`)."""

SUPPORTED_TRANSFORMERS: str = ">=5.5.0,<5.25"
"""The transformers range the remote code is tested with (pinned in the model card)."""

DTYPES: dict[str, torch.dtype] = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
"""Accepted `--dtype` values for the language model (the codec is always stored in float32)."""

VERIFY_RTOL: float = 1e-3
"""Verification tolerance: `max |diff| <= VERIFY_RTOL * max(1, max |reference logit|)` (both sides in float32, so
only the order of summation differs; any mapping error changes the logits by a sizable fraction of their scale)."""

READ_CHUNK_BYTES: int = 64 * 1024 * 1024
"""Largest piece of a tensor held in memory at once while streaming (rows of the source tensor)."""

CONVERTER_VERSION: str = "1"
"""Bumped when the output of the converter changes (part of `from_original`'s cache key)."""

TOKENIZER_FILES: tuple[str, ...] = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
)
"""Tokenizer files copied byte for byte when the source has them (the first two are required)."""

HUB_DOWNLOAD_PATTERNS: list[str] = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.md", "LICENSE*", "NOTICE*"]
"""What is downloaded from a Hub repo: never pickle (`*.bin`, `*.pt`) files."""

LICENSE_FILE_PATTERN = re.compile(r"^(LICEN[CS]E|NOTICE)(\..*)?$", re.IGNORECASE)

# ------------------------------------------------------------------------------------------------------ mapping table
# (source regex, target template or None for "ignored on purpose", what it is). `re.fullmatch`, first match wins.
MAPPING_TABLE: tuple[tuple[str, str | None, str], ...] = (
    (r"tied\.embedding\.text_embedding\.weight", "model.embed_tokens.weight", "token embedding"),
    (
        r"body\.layers\.(\d+)\.(input_layernorm|post_attention_layernorm)\.weight",
        r"model.layers.\1.\2.weight",
        "decoder layer norms",
    ),
    (
        r"body\.layers\.(\d+)\.self_attn\.(q_proj|k_proj|v_proj|o_proj|q_norm|k_norm)\.weight",
        r"model.layers.\1.self_attn.\2.weight",
        "attention",
    ),
    (r"body\.layers\.(\d+)\.mlp\.(gate_proj|up_proj|down_proj)\.weight", r"model.layers.\1.mlp.\2.weight", "MLP"),
    (r"body\.norm\.weight", "model.norm.weight", "final norm"),
    (r"tied\.embedding\.modality_embeddings\.0\.embedding\.weight", "audio_embed.weight", "fused codebook embedding"),
    (re.escape(CODEC_PREFIX + CODEC_EXTRA_KEY), None, "HuBERT's training-only mask embedding, unused by the codec"),
    (re.escape(CODEC_PREFIX) + r"(.+)", r"codec.\1", "codec (HiggsAudioV2TokenizerModel names)"),
    (r"tied\.head\.text_head\.weight", "lm_head.weight", "untied text head"),
    (r"tied\.head\.modality_heads\.0\.weight", "audio_head.weight", "untied audio head"),
)

TEXT_EMBEDDING = "tied.embedding.text_embedding.weight"
AUDIO_EMBEDDING = "tied.embedding.modality_embeddings.0.embedding.weight"
TEXT_HEAD = "tied.head.text_head.weight"
AUDIO_HEAD = "tied.head.modality_heads.0.weight"

# Fields of the original `text_config` that become `HiggsAudioV3Config` fields unchanged.
TEXT_CONFIG_FIELDS: tuple[str, ...] = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "max_position_embeddings",
    "initializer_range",
    "rms_norm_eps",
    "use_cache",
    "rope_parameters",
    "attention_bias",
    "attention_dropout",
    "use_sliding_window",
    "sliding_window",
    "max_window_layers",
    "layer_types",
    "bos_token_id",
)
# Bookkeeping fields of the original configs that carry no model setting.
TEXT_CONFIG_IGNORED: frozenset[str] = frozenset(
    {"_name_or_path", "architectures", "model_type", "dtype", "transformers_version", "eos_token_id", "pad_token_id",
     "tie_word_embeddings"}
)
TOP_LEVEL_KNOWN: frozenset[str] = frozenset(
    {"_hidden_size", "_vocab_size", "architectures", "audio_encoder_config", "audio_token_id", "ignore_index",
     "model_type", "text_config", "transformers_version"}
)

_SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
    "F64": torch.float64,
}
_SAFETENSORS_NAMES: dict[torch.dtype, str] = {value: key for key, value in _SAFETENSORS_DTYPES.items()}


class ConversionError(ValueError):
    """The input cannot be converted, or the converted model failed verification. The message says why."""


# ---------------------------------------------------------------------------------------------------- data classes
@dataclass(frozen=True)
class SourceTensor:
    """One tensor of the original checkpoint: where it is and what its header says."""

    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class PlannedTensor:
    """One tensor of the converted checkpoint: its source tensor and its output dtype."""

    target: str
    source: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()


@dataclass
class OriginalCheckpoint:
    """What the converter read from an original-format folder."""

    directory: Path
    config: dict
    tensors: dict[str, SourceTensor]
    token_ids: dict[str, int]
    tokenizer_config: dict

    @property
    def size_bytes(self) -> int:
        return sum(os.path.getsize(f) for f in {t.file for t in self.tensors.values()})


@dataclass
class ConversionPlan:
    """The converted config and the full accounting of the source keys."""

    config: HiggsAudioV3Config
    tensors: list[PlannedTensor]
    ignored: dict[str, str] = field(default_factory=dict)  # source key -> reason


@dataclass
class ConversionResult:
    """What `convert` wrote and how it was verified."""

    output_dir: Path
    num_tensors: int
    shards: list[str]
    ignored: dict[str, str]
    tie_word_embeddings: bool
    max_abs_diff: float | None = None
    tolerance: float | None = None
    pushed_to: str | None = None


# ---------------------------------------------------------------------------------------------------------- reading
def resolve_input(input_path: str | os.PathLike, revision: str | None = None, cache_dir: str | None = None) -> Path:
    """A local folder as is, or a Hub repo id downloaded with `huggingface_hub.snapshot_download` (safetensors,
    JSON, jinja and text files only: no pickle)."""
    path = Path(input_path).expanduser()
    if path.is_dir():
        if revision is not None:
            raise ConversionError(
                f"--revision {revision!r} only applies to a Hub repo id, but {str(path)!r} is a local folder."
            )
        return path
    text = str(input_path)
    if path.exists() or text.startswith((".", "/", "~")) or text.count("/") != 1:
        raise ConversionError(
            f"The input {text!r} is neither an existing folder nor a Hub repo id of the form 'owner/name' "
            f"(for example {ORIGINAL_REPO_ID!r})."
        )
    import huggingface_hub

    try:
        return Path(
            huggingface_hub.snapshot_download(
                repo_id=text,
                revision=revision,
                cache_dir=cache_dir,
                allow_patterns=HUB_DOWNLOAD_PATTERNS,
            )
        )
    except Exception as error:  # network, authentication, unknown repo or revision: all end the conversion here
        raise ConversionError(
            f"Could not download {text!r} (revision {revision or 'main'}) from the Hugging Face Hub: {error}"
        ) from error


def _read_json(path: Path, what: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConversionError(f"{what} {str(path)!r} cannot be read as JSON ({error}).") from error


def _read_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """`{name: (dtype, shape)}` of one safetensors file; a truncated or corrupted file raises a `ConversionError`."""
    try:
        with safe_open(str(path), framework="pt") as f:
            out = {}
            for name in f.keys():
                piece = f.get_slice(name)
                out[name] = (piece.get_dtype(), tuple(piece.get_shape()))
            return out
    except Exception as error:  # safetensors raises its own error type (and OSError for I/O problems)
        raise ConversionError(
            f"{str(path)!r} is not a valid safetensors file ({error}). It is probably truncated or corrupted: "
            "download it again."
        ) from error


def read_original(directory: str | os.PathLike) -> OriginalCheckpoint:
    """Read and check an original-format folder: files present, `model_type`, safetensors headers consistent with the
    index, and a tokenizer with every Higgs special token. Raises `ConversionError` with the reason."""
    directory = Path(directory)
    required = ["config.json", "tokenizer.json", "tokenizer_config.json"]
    missing = [name for name in required if not (directory / name).is_file()]
    index_path = directory / "model.safetensors.index.json"
    if not index_path.is_file() and not (directory / "model.safetensors").is_file():
        pickles = sorted(p.name for p in directory.glob("*.bin")) + sorted(p.name for p in directory.glob("*.pt"))
        if pickles:
            raise ConversionError(
                f"{str(directory)!r} has only pickle weights ({', '.join(pickles)}); this converter reads safetensors "
                "only and never loads pickle files."
            )
        missing.append("model.safetensors")
    if missing:
        raise ConversionError(
            f"{str(directory)!r} is not a complete original Higgs Audio v3 checkpoint: missing {', '.join(missing)}. "
            "Expected config.json, model.safetensors (with or without model.safetensors.index.json), tokenizer.json "
            "and tokenizer_config.json."
        )

    config = _read_json(directory / "config.json", "The config")
    model_type = config.get("model_type")
    if model_type != ORIGINAL_MODEL_TYPE:
        hint = (
            " This folder is already converted: load it with AutoModel.from_pretrained(path, trust_remote_code=True)."
            if model_type == HiggsAudioV3Config.model_type
            else ""
        )
        raise ConversionError(
            f"config.json has model_type {model_type!r}; the converter reads the original Higgs Audio v3 format, "
            f"model_type {ORIGINAL_MODEL_TYPE!r} ({ORIGINAL_REPO_ID}).{hint}"
        )
    for key in ("text_config", "audio_encoder_config"):
        if not isinstance(config.get(key), dict):
            raise ConversionError(
                f"config.json has no {key!r} section; the original format has text_config and audio_encoder_config."
            )

    # Weights: the index (when present) must name existing files and agree with their headers.
    if index_path.is_file():
        index = _read_json(index_path, "The weight index")
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ConversionError(f"{str(index_path)!r} has no weight_map.")
        files = sorted(set(weight_map.values()))
    else:
        weight_map, files = None, ["model.safetensors"]
    absent = [name for name in files if not (directory / name).is_file()]
    if absent:
        raise ConversionError(
            f"model.safetensors.index.json names {', '.join(absent)}, which is missing from {str(directory)!r}."
        )
    tensors: dict[str, SourceTensor] = {}
    for name in files:
        for key, (dtype, shape) in _read_header(directory / name).items():
            if key in tensors:
                raise ConversionError(f"Tensor {key!r} is stored twice (in {tensors[key].file.name} and {name}).")
            tensors[key] = SourceTensor(key, directory / name, dtype, shape)
    if weight_map is not None:
        not_in_files = sorted(k for k in weight_map if k not in tensors)
        not_in_index = sorted(k for k in tensors if k not in weight_map)
        wrong_file = sorted(k for k, f in weight_map.items() if k in tensors and tensors[k].file.name != f)
        if not_in_files or not_in_index or wrong_file:
            raise ConversionError(
                "model.safetensors.index.json does not match the safetensors files: "
                f"in the index but in no file: {not_in_files[:10]}; "
                f"in a file but not in the index: {not_in_index[:10]}; "
                f"in another file than the index says: {wrong_file[:10]}. The download is probably incomplete."
            )
    bad_dtypes = sorted(f"{t.name} ({t.dtype})" for t in tensors.values() if t.dtype not in _SAFETENSORS_DTYPES)
    if bad_dtypes:
        raise ConversionError(f"Only floating point tensors are expected (BF16, F16, F32, F64); got {bad_dtypes[:10]}.")

    # Tokenizer: every Higgs special must be an added token; their ids go into the config.
    tokenizer = _read_json(directory / "tokenizer.json", "The tokenizer")
    tokenizer_config = _read_json(directory / "tokenizer_config.json", "The tokenizer config")
    added = {token.get("content"): token.get("id") for token in tokenizer.get("added_tokens") or []}
    eos = tokenizer_config.get("eos_token") or "<|endoftext|>"
    eos = eos.get("content") if isinstance(eos, dict) else eos
    required_tokens = ["<|endoftext|>", *HIGGS_SPECIAL_TOKENS]
    missing_tokens = [token for token in required_tokens if token not in added]
    if missing_tokens:
        raise ConversionError(
            f"tokenizer.json lacks {len(missing_tokens)} of the required special tokens: {', '.join(missing_tokens)}. "
            "The Higgs Audio v3 tokenizer has <|endoftext|> and the 62 Higgs tokens (<|tts|>, <|audio|>, <|text|>, "
            "<|ref_audio|>, <|ref_text|>, the control tags, ...) as added tokens."
        )
    if eos not in added:
        raise ConversionError(
            f"tokenizer_config.json names eos_token {eos!r}, which is not an added token of tokenizer.json."
        )
    token_ids = {token: int(added[token]) for token in required_tokens}
    token_ids["eos"] = int(added[eos])
    pad = tokenizer_config.get("pad_token") or eos
    pad = pad.get("content") if isinstance(pad, dict) else pad
    token_ids["pad"] = int(added.get(pad, token_ids["eos"]))
    return OriginalCheckpoint(directory, config, tensors, token_ids, tokenizer_config)


def _read_rows(tensor: SourceTensor, start: int | None = None, stop: int | None = None) -> torch.Tensor:
    """Rows `start:stop` of a source tensor (all of it by default). The file is opened for this read only, so no
    memory map of the whole file stays resident between reads."""
    with safe_open(str(tensor.file), framework="pt") as f:
        if not tensor.shape:
            return f.get_tensor(tensor.name)
        return f.get_slice(tensor.name)[start:stop]


def _row_chunks(shape: tuple[int, ...], itemsize: int) -> list[tuple[int, int]]:
    """Row ranges of at most `READ_CHUNK_BYTES` (at least one row) covering dimension 0."""
    if not shape:
        return [(0, 1)]
    row_bytes = max(1, math.prod(shape[1:]) * itemsize)
    step = max(1, READ_CHUNK_BYTES // row_bytes)
    return [(start, min(start + step, shape[0])) for start in range(0, shape[0], step)] or [(0, 0)]


def _source_itemsize(tensor: SourceTensor) -> int:
    return torch.empty((), dtype=_SAFETENSORS_DTYPES[tensor.dtype]).element_size()


def _all_finite(values: torch.Tensor) -> bool:
    """No NaN and no inf (via `aminmax`, which propagates both and is much faster than `isfinite` on bf16)."""
    if values.numel() == 0:
        return True
    low, high = torch.aminmax(values)
    return bool(torch.isfinite(low) & torch.isfinite(high))


def _iter_converted(tensor: SourceTensor, dtype: torch.dtype, target: str):
    """Stream a source tensor as row chunks cast to `dtype`; NaN/inf (corruption, or a value float16 cannot hold)
    raise a `ConversionError`."""
    for start, stop in _row_chunks(tensor.shape, max(_source_itemsize(tensor), dtype.itemsize)):
        chunk = _read_rows(tensor, start, stop) if tensor.shape else _read_rows(tensor)
        if not _all_finite(chunk):
            raise ConversionError(
                f"Tensor {tensor.name!r} in {tensor.file.name} holds NaN or infinite values (rows {start}..{stop}); "
                "the file is corrupted: download it again."
            )
        converted = chunk.to(dtype)
        if not _all_finite(converted):
            raise ConversionError(
                f"Tensor {tensor.name!r} has values outside the range of {dtype} (largest |value| "
                f"{float(chunk.float().abs().max()):.4g}); convert with --dtype bfloat16 or float32 instead."
            )
        yield converted.contiguous()
        del chunk, converted


def _max_abs_difference(a: SourceTensor, b: SourceTensor) -> float:
    """max |a - b| of two same-shape source tensors, streamed in row chunks."""
    worst = 0.0
    for start, stop in _row_chunks(a.shape, 4):
        diff = (_read_rows(a, start, stop).float() - _read_rows(b, start, stop).float()).abs()
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
    return worst


# ---------------------------------------------------------------------------------------------------------- mapping
_COMPILED_TABLE = tuple((re.compile(pattern), target, what) for pattern, target, what in MAPPING_TABLE)


def map_key(name: str) -> tuple[str | None, str | None]:
    """`(target, None)` for a mapped key, `(None, reason)` for a key ignored on purpose, `(None, None)` when no rule
    of `MAPPING_TABLE` matches (an unknown key)."""
    for pattern, target, what in _COMPILED_TABLE:
        match = pattern.fullmatch(name)
        if match:
            return (match.expand(target), None) if target is not None else (None, what)
    return None, None


def _codec_shapes(codec_config: dict) -> dict[str, tuple[int, ...]]:
    from .codec_higgs_v3 import HiggsAudioV3Codec

    with torch.device("meta"):
        codec = HiggsAudioV3Codec.from_codec_config(codec_config)
    return {name: tuple(value.shape) for name, value in codec.state_dict().items()}


def _choose_codec_config(source: OriginalCheckpoint, codec_config: dict | None) -> dict | None:
    """The codec config whose tensors match the checkpoint's codec tensors exactly (names and shapes): the given one,
    else the real one, else the tiny test one. `None` when the checkpoint has no codec tensors."""
    found = {
        name[len(CODEC_PREFIX):]: t.shape
        for name, t in source.tensors.items()
        if name.startswith(CODEC_PREFIX) and name != CODEC_PREFIX + CODEC_EXTRA_KEY
    }
    if not found:
        return None
    from .codec_higgs_v3 import tiny_codec_config

    candidates = [("the given codec config", codec_config)] if codec_config is not None else [
        ("the real codec config", REAL_CODEC_CONFIG),
        ("the tiny test codec config", tiny_codec_config()),
    ]
    problems = []
    for label, candidate in candidates:
        expected = _codec_shapes(candidate)
        if expected == found:
            return json.loads(json.dumps(candidate))
        missing = sorted(set(expected) - set(found))
        unexpected = sorted(set(found) - set(expected))
        mismatched = sorted(
            f"{k} {found[k]} vs {expected[k]}" for k in set(found) & set(expected) if found[k] != expected[k]
        )
        problems.append(
            f"{label}: {len(missing)} missing (e.g. {missing[:3]}), "
            f"{len(unexpected)} unexpected (e.g. {unexpected[:3]}), "
            f"{len(mismatched)} with another shape (e.g. {mismatched[:3]})"
        )
    raise ConversionError(
        f"The {len(found)} codec tensors under {CODEC_PREFIX!r} match no known codec configuration: "
        + "; ".join(problems)
        + ". Pass the codec's HiggsAudioV2TokenizerConfig as JSON with --codec-config."
    )


def build_config(
    source: OriginalCheckpoint, codec_config: dict | None, dtype: torch.dtype, tie_word_embeddings: bool
) -> HiggsAudioV3Config:
    """The converted `HiggsAudioV3Config` from the original config, the tokenizer's ids and the codec config."""
    original, text, audio = source.config, source.config["text_config"], source.config["audio_encoder_config"]
    unknown = sorted(set(original) - TOP_LEVEL_KNOWN) + sorted(
        f"text_config.{k}" for k in set(text) - set(TEXT_CONFIG_FIELDS) - TEXT_CONFIG_IGNORED
    )
    if unknown:
        logger.warning(f"config.json has fields the converter does not know; they are not carried over: {unknown}.")
    if text.get("model_type", "qwen3") != "qwen3":
        raise ConversionError(
            f"text_config has model_type {text.get('model_type')!r}; a Qwen3 backbone ('qwen3') is expected."
        )
    checks = {
        "audio_encoder_config.encoder_type": (audio.get("encoder_type", "discrete"), "discrete"),
        "audio_encoder_config.use_delay_pattern": (audio.get("use_delay_pattern", True), True),
        "audio_encoder_config.out_dim": (audio.get("out_dim", text.get("hidden_size")), text.get("hidden_size")),
    }
    for key, (value, expected) in checks.items():
        if value != expected:
            raise ConversionError(f"config.json has {key} = {value!r}; the converter supports only {expected!r}.")
    for key in ("num_codebooks", "vocab_size"):
        if not isinstance(audio.get(key), int):
            raise ConversionError(f"config.json has no integer audio_encoder_config.{key} (got {audio.get(key)!r}).")
    ids = source.token_ids
    kwargs = {key: text[key] for key in TEXT_CONFIG_FIELDS if key in text}
    kwargs.update(
        tie_word_embeddings=tie_word_embeddings,
        eos_token_id=ids["eos"],
        pad_token_id=ids["pad"],
        num_codebooks=audio["num_codebooks"],
        codebook_size=audio["vocab_size"],
        audio_placeholder_id=original.get("audio_token_id", -100),
        tts_token_id=ids["<|tts|>"],
        audio_start_token_id=ids["<|audio|>"],
        audio_end_token_id=ids["<|audio_end|>"],
        text_token_id=ids["<|text|>"],
        ref_audio_token_id=ids["<|ref_audio|>"],
        ref_text_token_id=ids["<|ref_text|>"],
        codec_config=codec_config,
        dtype=dtype,
    )
    try:
        config = HiggsAudioV3Config(**kwargs)
    except ValueError as error:
        raise ConversionError(f"The original config does not give a valid HiggsAudioV3Config: {error}") from error
    config.architectures = ["HiggsAudioV3ForConditionalGeneration"]
    return config


def _expected_tensors(config: HiggsAudioV3Config) -> dict[str, tuple[int, ...]]:
    """Names and shapes `save_pretrained` would write for `config` (tied heads excluded), in module order."""
    from .modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    with torch.device("meta"):
        model = HiggsAudioV3ForConditionalGeneration(config)
    tied = set(getattr(model, "_tied_weights_keys", {}) or {}) if config.tie_word_embeddings else set()
    return {name: tuple(value.shape) for name, value in model.state_dict().items() if name not in tied}


def plan_conversion(
    source: OriginalCheckpoint,
    dtype: torch.dtype = torch.bfloat16,
    codec_config: dict | None = None,
    without_codec: bool = False,
) -> ConversionPlan:
    """Map every source key (or fail listing unknown, missing, unexpected and mis-shaped keys), decide the head tying,
    choose the codec config and build the converted config."""
    unknown, ignored, mapped = [], {}, {}
    for name in source.tensors:
        target, reason = map_key(name)
        if target is not None:
            mapped[name] = target
        elif reason is not None:
            ignored[name] = reason
        else:
            unknown.append(name)
    if unknown:
        raise ConversionError(
            f"The checkpoint has {len(unknown)} tensor(s) no rule of the mapping table covers: {sorted(unknown)}. "
            "Refusing to drop them silently; this is not the Higgs Audio v3 format the converter knows."
        )

    # Codec.
    has_codec = any(target.startswith("codec.") for target in mapped.values())
    if without_codec:
        for name in [n for n, t in mapped.items() if t.startswith("codec.")]:
            ignored[name] = "codec tensor left out (--without-codec)"
            del mapped[name]
        chosen_codec = None
    else:
        if not has_codec:
            raise ConversionError(
                f"The checkpoint has no codec tensors under {CODEC_PREFIX!r}; the original bundles its codec. Pass "
                "--without-codec (without_codec=True) to convert the language model alone (it then returns codes, "
                "not waveforms)."
            )
        chosen_codec = _choose_codec_config(source, codec_config)

    # Heads: tied in the real checkpoint. Present and equal to the embedding: redundant, dropped. Present and
    # different: untied, mapped with tie_word_embeddings=False, unless the config says tied (then refused).
    text_cfg, audio_cfg = source.config["text_config"], source.config["audio_encoder_config"]
    heads = [
        (TEXT_HEAD, TEXT_EMBEDDING, "text_config.tie_word_embeddings", text_cfg.get("tie_word_embeddings", True)),
        (
            AUDIO_HEAD,
            AUDIO_EMBEDDING,
            "audio_encoder_config.tie_word_embeddings",
            audio_cfg.get("tie_word_embeddings", True),
        ),
    ]
    untied = []
    for head, embedding, flag, declared_tied in heads:
        if head not in source.tensors:
            if not declared_tied:
                raise ConversionError(f"config.json sets {flag} to false, but the checkpoint has no {head!r} tensor.")
            continue
        if embedding not in source.tensors or source.tensors[head].shape != source.tensors[embedding].shape:
            shape = source.tensors[embedding].shape if embedding in source.tensors else None
            raise ConversionError(
                f"{head!r} has shape {list(source.tensors[head].shape)} but {embedding!r} has shape "
                f"{list(shape) if shape else 'none (missing)'}; a head must have its embedding's shape."
            )
        difference = _max_abs_difference(source.tensors[head], source.tensors[embedding])
        if difference == 0.0:
            ignored[head] = f"identical to {embedding} (tied)"
            del mapped[head]
        elif declared_tied:
            raise ConversionError(
                f"config.json sets {flag} to true, but {head!r} differs from {embedding!r} (max |diff| "
                f"{difference:.4g}). Refusing to guess which one the model uses; if the heads are really untied, set "
                f"{flag} to false in config.json."
            )
        else:
            untied.append(head)
    tie = not untied
    if not tie:  # both heads become real tensors; a head that was tied copies its embedding
        for head, embedding, _, _ in heads:
            if head not in mapped:
                mapped[f"{embedding}::as_head"] = "lm_head.weight" if head == TEXT_HEAD else "audio_head.weight"
                ignored.pop(head, None)

    config = build_config(source, chosen_codec, dtype, tie)
    expected = _expected_tensors(config)
    by_target: dict[str, str] = {}
    duplicates = []
    for name, target in mapped.items():
        if target in by_target:
            duplicates.append(f"{target} <- {by_target[target]} and {name}")
        by_target[target] = name
    missing = [t for t in expected if t not in by_target]
    unexpected = sorted(f"{name} -> {t}" for t, name in by_target.items() if t not in expected)
    mismatched = []
    for target, name in by_target.items():
        if target in expected:
            shape = source.tensors[name.split("::")[0]].shape
            if shape != expected[target]:
                mismatched.append(f"{name} {list(shape)} (the config implies {list(expected[target])} for {target})")
    if duplicates or missing or unexpected or mismatched:
        parts = []
        if missing:
            parts.append(f"missing (no source tensor): {missing}")
        if unexpected:
            parts.append(f"not part of a model with this config: {unexpected}")
        if mismatched:
            parts.append(f"wrong shape: {sorted(mismatched)}")
        if duplicates:
            parts.append(f"mapped twice: {duplicates}")
        raise ConversionError(
            "The checkpoint does not match its config.json (hidden_size="
            f"{config.hidden_size}, num_hidden_layers={config.num_hidden_layers}, vocab_size={config.vocab_size}, "
            f"{config.num_codebooks} x {config.codebook_size} audio codes): " + "; ".join(parts) + "."
        )
    planned = []
    for target, shape in expected.items():
        out_dtype = torch.float32 if target.startswith("codec.") else dtype
        planned.append(PlannedTensor(target, by_target[target], out_dtype, shape))
    return ConversionPlan(config=config, tensors=planned, ignored=ignored)


# ---------------------------------------------------------------------------------------------------------- writing
def parse_size(size: str | int) -> int:
    """`5GB` (10^9), `500MB`, `2GiB` (2^30), or a number of bytes -> bytes."""
    if isinstance(size, int):
        return size
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B)?\s*", str(size), re.IGNORECASE)
    if not match:
        raise ConversionError(f"--max-shard-size {size!r} is not a size; use e.g. 5GB, 500MB, 2GiB or a byte count.")
    number, unit = float(match.group(1)), (match.group(2) or "B").upper()
    factors = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
    value = int(number * factors[unit])
    if value <= 0:
        raise ConversionError(f"--max-shard-size must be positive, got {size!r}.")
    return value


def _shard(tensors: list[PlannedTensor], max_shard_bytes: int) -> list[list[PlannedTensor]]:
    shards: list[list[PlannedTensor]] = [[]]
    size = 0
    for tensor in tensors:
        if shards[-1] and size + tensor.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(tensor)
        size += tensor.nbytes
    return shards


def _source_of(source: OriginalCheckpoint, planned: PlannedTensor) -> SourceTensor:
    return source.tensors[planned.source.split("::")[0]]


def write_safetensors_streaming(path: Path, entries: list[tuple[str, torch.dtype, tuple[int, ...]]], chunks) -> None:
    """Write a safetensors file whose header is known up front (`entries`: name, dtype, shape, in data order), with the
    data coming from `chunks`, an iterable of tensors in that same order: nothing but one chunk is ever in memory."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in entries:
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        header[name] = {
            "dtype": _SAFETENSORS_NAMES[dtype],
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    written = 0
    with open(path, "wb") as f:
        f.write(len(encoded).to_bytes(8, "little"))
        f.write(encoded)
        for chunk in chunks:
            data = chunk.reshape(-1).view(torch.uint8).numpy()
            f.write(data)
            written += data.nbytes
    if written != offset:
        raise RuntimeError(f"Wrote {written} data bytes to {path} but the header announces {offset}.")


def _write_weights(source: OriginalCheckpoint, plan: ConversionPlan, output: Path, max_shard_bytes: int) -> list[str]:
    shards = _shard(plan.tensors, max_shard_bytes)
    names = (
        ["model.safetensors"]
        if len(shards) == 1
        else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    )
    for name, shard in zip(names, shards):
        entries = [(t.target, t.dtype, t.shape) for t in shard]
        chunks = (chunk for t in shard for chunk in _iter_converted(_source_of(source, t), t.dtype, t.target))
        write_safetensors_streaming(output / name, entries, chunks)
    if len(shards) > 1:
        index = {
            "metadata": {"total_size": sum(t.nbytes for t in plan.tensors)},
            "weight_map": {t.target: name for name, shard in zip(names, shards) for t in shard},
        }
        with open(output / "model.safetensors.index.json", "w", encoding="utf-8") as f:
            json.dump(index, f, indent=2)
            f.write("\n")
    return names


def official_generation_config(config: HiggsAudioV3Config) -> GenerationConfig:
    """The official server's sampling defaults: sampling at temperature 1.0, no top-k, no top-p, up to 2048 rows."""
    return GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_k=None,
        top_p=None,
        max_new_tokens=2048,
        use_cache=True,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )


def remote_code_files() -> list[Path]:
    """The `.py` files a converted repo needs next to `config.json`: the modules `auto_map` names (config, model,
    and the processor when it exists) and everything they import relatively, recursively."""
    from transformers.dynamic_module_utils import get_relative_import_files

    here = Path(__file__).resolve().parent
    roots = [here / "configuration_higgs_v3.py", here / "modeling_higgs_v3.py"]
    if (here / "processing_higgs_v3.py").is_file():
        roots.append(here / "processing_higgs_v3.py")
    files = set(roots)
    for root in roots:
        files.update(Path(p).resolve() for p in get_relative_import_files(str(root)))
    return sorted(files)


def save_processor_files(output_dir: str | os.PathLike, config: HiggsAudioV3Config) -> list[str]:
    """Write the processor's own files (`processor_config.json`, with its `auto_map`) into `output_dir`, whose
    tokenizer files stay exactly as they are. The processor is built from those tokenizer files and `config`. Returns
    the names written (none when `processing_higgs_v3.py` is not available)."""
    try:
        from .processing_higgs_v3 import HiggsAudioV3Processor
    except ImportError:
        return []
    from transformers import AutoTokenizer

    output_dir = Path(output_dir)
    with tempfile.TemporaryDirectory(prefix="higgs_v3_processor_") as scratch:
        # The tokenizer is read from a folder with the tokenizer files only (no config.json, so no remote code).
        tokenizer_dir, saved_dir = Path(scratch) / "tokenizer", Path(scratch) / "saved"
        tokenizer_dir.mkdir()
        for name in TOKENIZER_FILES:
            if (output_dir / name).is_file():
                shutil.copyfile(output_dir / name, tokenizer_dir / name)
        processor = HiggsAudioV3Processor.from_model_config(AutoTokenizer.from_pretrained(str(tokenizer_dir)), config)
        processor.save_pretrained(str(saved_dir))
        written = []
        for path in sorted(saved_dir.iterdir()):
            if path.name in TOKENIZER_FILES or path.suffix == ".py" or not path.is_file():
                continue  # the tokenizer files stay byte-identical; code files are copied separately
            shutil.copyfile(path, output_dir / path.name)
            written.append(path.name)
    return written


def _license_front_matter(source_dir: Path, copied_license: bool) -> tuple[str, str]:
    """`(license_name, license_link)`: from the source model card's front matter when it says, else defaults."""
    name, link = "higgs-audio-v3-license", f"https://huggingface.co/{ORIGINAL_REPO_ID}/blob/main/LICENSE"
    readme = source_dir / "README.md"
    if readme.is_file():
        text = readme.read_text(encoding="utf-8", errors="replace")
        match = re.match(r"^---\n(.*?)\n---", text, re.DOTALL)
        if match:
            for key, value in re.findall(r"^(license_name|license_link):\s*(.+?)\s*$", match.group(1), re.MULTILINE):
                if key == "license_name":
                    name = value.strip("'\"")
                else:
                    link = value.strip("'\"")
    if copied_license and link.startswith("https://huggingface.co/" + ORIGINAL_REPO_ID):
        link = "LICENSE"
    return name, link


MODEL_CARD = """---
library_name: transformers
pipeline_tag: text-to-speech
license: other
license_name: {license_name}
license_link: {license_link}
base_model: {base_model}
tags:
- text-to-speech
- audio
- higgs-audio
- qwen3
- custom_code
---

# Higgs Audio v3 TTS for Transformers

This repository holds the weights of [{base_model}](https://huggingface.co/{base_model}) converted to a native
Hugging Face Transformers layout ({dtype} language model, float32 codec, safetensors) together with the model code
(`trust_remote_code=True`), the tokenizer, the processor and the bundled audio codec. Nothing else is downloaded at
load time. {verification}

## License: non-commercial

The weights are Boson AI's and come under the original license ({license_name}, see [LICENSE]({license_link})). It
allows **non-commercial use only**: research, personal and other non-commercial purposes. Using these weights or
the audio they produce commercially needs a separate license from Boson AI. This conversion changes the file layout
only; the original license applies to it unchanged and takes precedence over this summary. The model code in the
`.py` files is Apache-2.0.

## Usage

```bash
pip install "transformers{transformers_range}" torch safetensors soundfile soxr
```

```python
import soundfile as sf
from transformers import AutoModel, AutoProcessor

model = AutoModel.from_pretrained("{repo_id}", trust_remote_code=True, dtype="auto")
processor = AutoProcessor.from_pretrained("{repo_id}", trust_remote_code=True)

inputs = processor(text="<|emotion:contentment|>Hello! This is Higgs Audio v3.", return_tensors="pt")
output = model.generate(**inputs, seed=0, return_dict_in_generate=True)
sf.write("hello.wav", output.audio[0].float().numpy(), model.config.sampling_rate)
```

Or with the pipeline:

```python
from transformers import pipeline

tts = pipeline("text-to-speech", model="{repo_id}", trust_remote_code=True)
speech = tts("Hello! This is Higgs Audio v3.")
sf.write("hello.wav", speech["audio"], speech["sampling_rate"])
```

Sampling defaults (`generation_config.json`) are those of the official server: temperature 1.0, no top-k, no top-p,
up to 2048 code rows (about 82 s of audio). Voice cloning takes a reference clip and, optionally, its transcript.

Supported transformers versions: `{transformers_range}` (tested with the oldest and the newest of that range).
"""


def write_model_card(
    output: Path,
    source_dir: Path,
    *,
    dtype: str,
    base_model: str,
    max_abs_diff: float | None,
    copied_license: bool,
    repo_id: str | None = None,
) -> None:
    """Write the model card `README.md` (front matter, license terms, usage with `repo_id` or a path placeholder)."""
    license_name, license_link = _license_front_matter(source_dir, copied_license)
    text = MODEL_CARD.format(
        repo_id=repo_id or "path/to/this/folder",
        license_name=license_name,
        license_link=license_link,
        base_model=base_model,
        dtype=dtype,
        verification=(
            "This folder was written without the numerical verification (`--no-verify`)."
            if max_abs_diff is None
            else "The conversion was verified numerically: the audio logits of a fixed prompt with reference audio "
            "placeholders match a float32 forward computed directly from the original tensors (max |diff| "
            f"{max_abs_diff:.2e})."
        ),
        transformers_range=SUPPORTED_TRANSFORMERS,
    )
    (output / "README.md").write_text(text, encoding="utf-8")


def check_output_folder(output: Path) -> None:
    """Raise a `ConversionError` unless `output` holds a complete converted repo: config with `auto_map`, every code
    file the config's and the processor's `auto_map` name (and their relative imports, recursively), weights,
    tokenizer and generation config."""
    from transformers.dynamic_module_utils import get_relative_imports

    problems = []
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if not (output / name).is_file():
            problems.append(f"{name} is missing")
    config = _read_json(output / "config.json", "The converted config") if (output / "config.json").is_file() else {}
    auto_map = config.get("auto_map") or {}
    for key in ("AutoConfig", "AutoModel", "AutoModelForTextToWaveform"):
        if key not in auto_map:
            problems.append(f"auto_map has no {key}")
    modules = {reference.split(".")[0] + ".py" for reference in auto_map.values()}
    if (output / "processor_config.json").is_file():
        processor_map = _read_json(output / "processor_config.json", "The processor config").get("auto_map") or {}
        modules.update(reference.split(".")[0] + ".py" for reference in processor_map.values())
    pending, seen = sorted(modules), set()
    while pending:
        module = pending.pop(0)
        if module in seen:
            continue
        seen.add(module)
        if not (output / module).is_file():
            problems.append(f"code file {module} is missing")
            continue
        pending.extend(f"{name}.py" for name in get_relative_imports(str(output / module)))
    if not (output / "model.safetensors").is_file() and not (output / "model.safetensors.index.json").is_file():
        problems.append("no model.safetensors or model.safetensors.index.json")
    if problems:
        raise ConversionError(f"The converted folder {str(output)!r} is incomplete: {'; '.join(problems)}.")


# ----------------------------------------------------------------------------------------------------- verification
def verification_prompt(config: HiggsAudioV3Config, seed: int = 0) -> tuple[torch.LongTensor, torch.LongTensor]:
    """A fixed clone prompt and its delayed reference rows: `<|tts|> <|ref_text|> t t t <|ref_audio|> [P]*L <|text|>
    t t t t <|audio|>` with L = 5 + num_codebooks - 1 rows (built here from the delay formula, BOC/EOC included).
    Returns `input_ids [1, length]` and `rows [L, num_codebooks]`."""
    generator = torch.Generator().manual_seed(seed)
    frames, codebooks = 5, config.num_codebooks
    raw = torch.randint(0, config.audio_boc_token_id, (frames, codebooks), generator=generator)
    rows = torch.empty(frames + codebooks - 1, codebooks, dtype=torch.long)
    for r in range(rows.shape[0]):
        for c in range(codebooks):
            t = r - c
            rows[r, c] = config.audio_boc_token_id if t < 0 else config.audio_eoc_token_id if t >= frames else raw[t, c]
    text = torch.randint(0, min(config.vocab_size, 150000), (7,), generator=generator).tolist()
    ids = (
        [config.tts_token_id, config.ref_text_token_id, *text[:3], config.ref_audio_token_id]
        + [config.audio_placeholder_id] * rows.shape[0]
        + [config.text_token_id, *text[3:], config.audio_start_token_id]
    )
    return torch.tensor([ids]), rows


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def reference_audio_logits(
    source: OriginalCheckpoint, input_ids: torch.LongTensor, rows: torch.LongTensor, dtype: torch.dtype
) -> torch.Tensor:
    """Audio logits `[length, num_codebooks, codebook_size]` of one prompt, computed in float32 straight from the
    original tensors (original names, loaded one layer at a time and rounded to `dtype` first, as the converted model
    stores them). An independent, deliberately plain Qwen3 forward: no transformers model code is involved."""
    text, audio = source.config["text_config"], source.config["audio_encoder_config"]
    rope = text.get("rope_parameters") or {"rope_type": "default", "rope_theta": text.get("rope_theta", 10000.0)}
    if rope.get("rope_type", "default") != "default":
        raise ConversionError(f"The verification forward supports default RoPE only, the config has {rope}.")
    eps, head_dim = text["rms_norm_eps"], text["head_dim"]
    num_heads, num_kv = text["num_attention_heads"], text["num_key_value_heads"]
    codebooks, codebook_size = audio["num_codebooks"], audio["vocab_size"]

    def weight(name: str) -> torch.Tensor:
        return _read_rows(source.tensors[name]).to(dtype).float()

    def embedding_row(name: str, row: int) -> torch.Tensor:
        return _read_rows(source.tensors[name], row, row + 1)[0].to(dtype).float()

    ids = input_ids[0].tolist()
    audio_rows = iter(rows.tolist())
    placeholder = source.config.get("audio_token_id", -100)
    embeds = []
    for token in ids:
        if token == placeholder:  # fused embedding of the next reference row (replaces the token embedding)
            row = next(audio_rows)
            embeds.append(sum(embedding_row(AUDIO_EMBEDDING, c * codebook_size + row[c]) for c in range(codebooks)))
        else:
            embeds.append(embedding_row(TEXT_EMBEDDING, token))
    hidden = torch.stack(embeds)  # [L, H]
    length = hidden.shape[0]

    inv_freq = 1.0 / (float(rope["rope_theta"]) ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [L, D/2]
    cos = torch.cat((angles, angles), -1).cos().float()[:, None, :]  # [L, 1, D]
    sin = torch.cat((angles, angles), -1).sin().float()[:, None, :]
    causal = torch.full((length, length), float("-inf")).triu(1)  # [L, L]

    for i in range(text["num_hidden_layers"]):
        p = f"body.layers.{i}."
        x = _rms_norm(hidden, weight(p + "input_layernorm.weight"), eps)
        q = (x @ weight(p + "self_attn.q_proj.weight").T).view(length, num_heads, head_dim)  # [L, nH, D]
        k = (x @ weight(p + "self_attn.k_proj.weight").T).view(length, num_kv, head_dim)  # [L, nKV, D]
        v = (x @ weight(p + "self_attn.v_proj.weight").T).view(length, num_kv, head_dim)
        q = _rms_norm(q, weight(p + "self_attn.q_norm.weight"), eps)
        k = _rms_norm(k, weight(p + "self_attn.k_norm.weight"), eps)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        k = k.repeat_interleave(num_heads // num_kv, dim=1)  # query head h uses kv head h // (nH / nKV)
        v = v.repeat_interleave(num_heads // num_kv, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(head_dim) + causal  # [nH, L, L]
        attended = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(length, num_heads * head_dim)
        hidden = hidden + attended @ weight(p + "self_attn.o_proj.weight").T
        x = _rms_norm(hidden, weight(p + "post_attention_layernorm.weight"), eps)
        gate = torch.nn.functional.silu(x @ weight(p + "mlp.gate_proj.weight").T)
        hidden = hidden + (gate * (x @ weight(p + "mlp.up_proj.weight").T)) @ weight(p + "mlp.down_proj.weight").T
    hidden = _rms_norm(hidden, weight("body.norm.weight"), eps)
    tied = audio.get("tie_word_embeddings", True) or AUDIO_HEAD not in source.tensors
    head = weight(AUDIO_EMBEDDING if tied else AUDIO_HEAD)  # [C * V, H]
    return (hidden @ head.T).view(length, codebooks, codebook_size)


_CHILD_SCRIPT = r"""
import json, sys
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel

folder, inputs_path, output_path = sys.argv[1:4]
model, info = AutoModel.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32, output_loading_info=True)
model.eval()
keys = ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")
report = {key: sorted(str(x) for x in info.get(key, [])) for key in keys}
report["class"] = type(model).__name__
report["tied_audio_head"] = model.audio_head.weight is model.audio_embed.weight
report["tied_text_head"] = model.lm_head.weight is model.get_input_embeddings().weight
report["codec_dtypes"] = sorted({str(p.dtype) for p in model.codec.parameters()}) if model.codec is not None else None
inputs = load_file(inputs_path)
with torch.no_grad():
    logits = model(input_ids=inputs["input_ids"], audio_input_ids=inputs["rows"]).logits[0].float().contiguous()
save_file({"logits": logits}, output_path)
print("HIGGS_V3_VERIFY " + json.dumps(report))
"""


def run_in_fresh_process(
    folder: Path, input_ids: torch.LongTensor, rows: torch.LongTensor
) -> tuple[torch.Tensor, dict]:
    """Load `folder` with `AutoModel.from_pretrained(..., trust_remote_code=True)` in a new Python process (offline,
    its own modules cache) and return its audio logits for the prompt and its loading report."""
    from safetensors.torch import load_file, save_file

    with tempfile.TemporaryDirectory(prefix="higgs_v3_verify_") as scratch:
        inputs_path = os.path.join(scratch, "inputs.safetensors")
        output_path = os.path.join(scratch, "logits.safetensors")
        save_file({"input_ids": input_ids.contiguous(), "rows": rows.contiguous()}, inputs_path)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": os.path.join(scratch, "modules")}
        done = subprocess.run(
            [sys.executable, "-c", _CHILD_SCRIPT, str(folder), inputs_path, output_path],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise ConversionError(
                "Verification failed: the converted folder does not load and run with AutoModel.from_pretrained("
                f"..., trust_remote_code=True) in a fresh process:\n{done.stderr[-4000:]}"
            )
        lines = [line for line in done.stdout.splitlines() if line.startswith("HIGGS_V3_VERIFY ")]
        report = json.loads(lines[-1][len("HIGGS_V3_VERIFY "):])
        return load_file(output_path)["logits"], report


def verify_written_tensors(source: OriginalCheckpoint, plan: ConversionPlan, output: Path, shards: list[str]) -> None:
    """Re-read every written tensor and compare it bit for bit with its source cast to the output dtype."""
    headers = {}
    for name in shards:
        for key, (dtype, shape) in _read_header(output / name).items():
            headers[key] = SourceTensor(key, output / name, dtype, shape)
    if set(headers) != {t.target for t in plan.tensors}:
        raise ConversionError(f"The written shards hold {len(headers)} tensors, the plan has {len(plan.tensors)}.")
    for planned in plan.tensors:
        written, original = headers[planned.target], _source_of(source, planned)
        if written.shape != planned.shape or _SAFETENSORS_DTYPES.get(written.dtype) != planned.dtype:
            raise ConversionError(
                f"{planned.target} was written as {written.dtype} {written.shape}, "
                f"expected {planned.dtype} {planned.shape}."
            )
        for start, stop in _row_chunks(planned.shape, 4):
            expected = _read_rows(original, start, stop).to(planned.dtype)
            if not torch.equal(_read_rows(written, start, stop), expected):
                raise ConversionError(
                    f"{planned.target} in {written.file.name} differs from its source {original.name}."
                )


def verify_conversion(
    source: OriginalCheckpoint, plan: ConversionPlan, output: Path, dtype: torch.dtype
) -> tuple[float, float]:
    """Compare the converted folder (loaded in a fresh process) with the reference forward on the original tensors.
    Returns `(max_abs_diff, tolerance)`; raises `ConversionError` above the tolerance or on any loading problem."""
    input_ids, rows = verification_prompt(plan.config)
    logits, report = run_in_fresh_process(output, input_ids, rows)
    keys = ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")
    problems = {key: report[key] for key in keys if report[key]}
    if problems:
        raise ConversionError(f"Verification failed: loading the converted folder reported {problems}.")
    tied = plan.config.tie_word_embeddings
    if report["tied_audio_head"] != tied or report["tied_text_head"] != tied:
        raise ConversionError(
            f"Verification failed: the loaded heads are tied={report['tied_audio_head']}/{report['tied_text_head']} "
            f"(audio/text) but the conversion says tie_word_embeddings={tied}."
        )
    if plan.config.codec_config is not None and report["codec_dtypes"] != ["torch.float32"]:
        raise ConversionError(f"Verification failed: the codec loaded in {report['codec_dtypes']}, expected float32.")
    reference = reference_audio_logits(source, input_ids, rows, dtype)
    if logits.shape != reference.shape:
        raise ConversionError(
            f"Verification failed: logits of shape {tuple(logits.shape)}, expected {tuple(reference.shape)}."
        )
    max_abs_diff = float((logits - reference).abs().max())
    tolerance = VERIFY_RTOL * max(1.0, float(reference.abs().max()))
    if not max_abs_diff <= tolerance:
        raise ConversionError(
            f"Verification failed: the converted model's audio logits differ from the original tensors' forward by "
            f"max |diff| = {max_abs_diff:.3g}, above the tolerance {tolerance:.3g}."
        )
    return max_abs_diff, tolerance


# ---------------------------------------------------------------------------------------------------------- convert
def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def convert(
    input_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    revision: str | None = None,
    dtype: str = "bfloat16",
    max_shard_size: str | int = "5GB",
    overwrite: bool = False,
    verify: bool = True,
    codec_config: dict | None = None,
    without_codec: bool = False,
    push_to_hub: str | None = None,
    private: bool = False,
    token: str | None = None,
    base_model: str = ORIGINAL_REPO_ID,
    cache_dir: str | None = None,
) -> ConversionResult:
    """Convert an original Higgs Audio v3 checkpoint (local folder or Hub id) into a Transformers repo at `output_dir`.

    The output is assembled in a temporary folder next to `output_dir`, verified (unless `verify=False`), and only
    then renamed into place; a non-empty `output_dir` is refused unless `overwrite`. `push_to_hub` uploads the result
    in one commit. Raises `ConversionError` with the reason when the input is not convertible or verification fails.

    >>> result = convert("path/to/higgs-audio-v3-tts-4b", "higgs-audio-v3-hf")  # doctest: +SKIP
    >>> result.max_abs_diff <= result.tolerance  # doctest: +SKIP
    True
    """
    if dtype not in DTYPES:
        raise ConversionError(f"dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}.")
    torch_dtype = DTYPES[dtype]
    max_shard_bytes = parse_size(max_shard_size)
    output = Path(output_dir).expanduser().absolute()
    if output.exists() and not output.is_dir():
        raise ConversionError(f"The output {str(output)!r} exists and is not a folder.")
    if output.is_dir() and not _is_empty_dir(output) and not overwrite:
        raise ConversionError(
            f"The output folder {str(output)!r} is not empty; pass --overwrite (overwrite=True) to replace it."
        )

    source_dir = resolve_input(input_path, revision=revision, cache_dir=cache_dir).resolve()
    if output.resolve() == source_dir or source_dir.is_relative_to(output.resolve()):
        raise ConversionError(
            f"The output folder {str(output)!r} contains the input {str(source_dir)!r}; choose another output."
        )
    source = read_original(source_dir)
    plan = plan_conversion(source, torch_dtype, codec_config=codec_config, without_codec=without_codec)

    output.parent.mkdir(parents=True, exist_ok=True)
    staging = output.parent / f"{output.name}_converting_{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        shards = _write_weights(source, plan, staging, max_shard_bytes)
        plan.config.save_pretrained(staging)  # config.json (+ configuration file via the auto class)
        for path in remote_code_files():
            shutil.copyfile(path, staging / path.name)
        official_generation_config(plan.config).save_pretrained(staging)
        for name in TOKENIZER_FILES:
            if (source_dir / name).is_file():
                shutil.copyfile(source_dir / name, staging / name)
        save_processor_files(staging, plan.config)
        licenses = [p for p in sorted(source_dir.iterdir()) if p.is_file() and LICENSE_FILE_PATTERN.match(p.name)]
        for path in licenses:
            shutil.copyfile(path, staging / path.name)
        check_output_folder(staging)
        max_abs_diff = tolerance = None
        if verify:
            verify_written_tensors(source, plan, staging, shards)
            max_abs_diff, tolerance = verify_conversion(source, plan, staging, torch_dtype)
        write_model_card(
            staging,
            source_dir,
            dtype=dtype,
            base_model=base_model,
            max_abs_diff=max_abs_diff,
            copied_license=any(p.name.upper().startswith("LICEN") for p in licenses),
            repo_id=push_to_hub,
        )
        # Swap into place: the old output (if any) is removed only once the new one is complete.
        if output.is_dir() and not _is_empty_dir(output) and not overwrite:
            raise ConversionError(
                f"The output folder {str(output)!r} became non-empty during the conversion; not replacing it."
            )
        retired = None
        if output.exists():
            retired = output.parent / f"{output.name}_replaced_{uuid.uuid4().hex[:8]}"
            os.rename(output, retired)
        os.rename(staging, output)
        if retired is not None:
            shutil.rmtree(retired, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise

    result = ConversionResult(
        output_dir=output,
        num_tensors=len(plan.tensors),
        shards=shards,
        ignored=plan.ignored,
        tie_word_embeddings=plan.config.tie_word_embeddings,
        max_abs_diff=max_abs_diff,
        tolerance=tolerance,
    )
    if push_to_hub:
        result.pushed_to = push_folder_to_hub(output, push_to_hub, private=private, token=token)
    return result


# -------------------------------------------------------------------------------------------------------------- hub
def push_folder_to_hub(
    folder: str | os.PathLike, repo_id: str, *, private: bool = False, token: str | None = None
) -> str:
    """Upload every file of a converted folder to `repo_id` in one commit (the repo is created if needed). The
    folder is checked first (auto_map and every code file present). Returns the commit URL."""
    from huggingface_hub import CommitOperationAdd, HfApi

    folder = Path(folder)
    check_output_folder(folder)
    api = HfApi(token=token)
    api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    operations = [
        CommitOperationAdd(path_in_repo=p.relative_to(folder).as_posix(), path_or_fileobj=str(p)) for p in files
    ]
    commit = api.create_commit(
        repo_id=repo_id,
        repo_type="model",
        operations=operations,
        commit_message="Add Higgs Audio v3 converted to Transformers (weights, code, tokenizer, processor)",
    )
    return str(getattr(commit, "commit_url", commit))


# ---------------------------------------------------------------------------------------------------- from_original
def default_cache_dir() -> Path:
    """Where `from_original` keeps converted checkpoints: `$HF_HOME/higgs_v3/converted`."""
    from huggingface_hub import constants

    return Path(constants.HF_HOME) / "higgs_v3" / "converted"


def _cache_key(source_dir: Path, dtype: str) -> str:
    digest = hashlib.sha256(f"{CONVERTER_VERSION}|{dtype}|{source_dir.resolve()}".encode())
    for path in sorted(source_dir.iterdir()):
        if path.is_file() and (path.suffix in (".json", ".safetensors", ".jinja")):
            stat = path.stat()
            digest.update(f"|{path.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def converted_path(
    repo_or_dir: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    *,
    revision: str | None = None,
    dtype: str = "bfloat16",
    verify: bool = True,
) -> Path:
    """Convert an original checkpoint once into `cache_dir` (default `default_cache_dir()`) and return the converted
    folder; later calls with the same source (same files, same revision) return the cached folder at once."""
    source_dir = resolve_input(repo_or_dir, revision=revision).resolve()
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache / f"{source_dir.name}-{_cache_key(source_dir, dtype)}"
    if (target / "config.json").is_file():
        return target
    convert(source_dir, target, dtype=dtype, overwrite=True, verify=verify)
    return target


def from_original(
    repo_or_dir: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    *,
    revision: str | None = None,
    dtype: str = "bfloat16",
    verify: bool = True,
    **from_pretrained_kwargs,
):
    """Load the original checkpoint (Hub id such as `bosonai/higgs-audio-v3-tts-4b`, or a local folder) as a
    `HiggsAudioV3ForConditionalGeneration`: converted and verified once into a local cache, then loaded from there.

    >>> model = from_original("bosonai/higgs-audio-v3-tts-4b")  # doctest: +SKIP
    >>> processor = AutoProcessor.from_pretrained(converted_path("bosonai/higgs-audio-v3-tts-4b"))  # doctest: +SKIP
    """
    from .modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    path = converted_path(repo_or_dir, cache_dir, revision=revision, dtype=dtype, verify=verify)
    from_pretrained_kwargs.setdefault("dtype", "auto")
    return HiggsAudioV3ForConditionalGeneration.from_pretrained(path, **from_pretrained_kwargs)


# ------------------------------------------------------------------------------------------------------ command line
def main(argv: list[str] | None = None, prog: str = "convert_checkpoint.py") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Convert the original Higgs Audio v3 checkpoint into a verified Transformers repo.",
    )
    parser.add_argument("--input", required=True, help=f"original folder or Hub repo id (e.g. {ORIGINAL_REPO_ID})")
    parser.add_argument("--revision", default=None, help="Hub revision (branch, tag or commit) of --input")
    parser.add_argument("--output", required=True, help="folder to write (must be empty unless --overwrite)")
    parser.add_argument(
        "--dtype", default="bfloat16", choices=sorted(DTYPES), help="language model dtype (the codec stays float32)"
    )
    parser.add_argument("--max-shard-size", default="5GB", help="largest safetensors shard, e.g. 5GB or 500MB")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    parser.add_argument("--push-to-hub", default=None, metavar="REPO_ID", help="upload the result in one commit")
    parser.add_argument("--private", action="store_true", help="create the Hub repo as private")
    parser.add_argument("--codec-config", default=None, help="JSON file with the codec config (default: inferred)")
    parser.add_argument("--without-codec", action="store_true", help="convert the language model only")
    parser.add_argument("--no-verify", action="store_true", help="skip the verification (not recommended)")
    args = parser.parse_args(argv)
    try:
        codec_config = _read_json(Path(args.codec_config), "The codec config") if args.codec_config else None
        result = convert(
            args.input,
            args.output,
            revision=args.revision,
            dtype=args.dtype,
            max_shard_size=args.max_shard_size,
            overwrite=args.overwrite,
            verify=not args.no_verify,
            codec_config=codec_config,
            without_codec=args.without_codec,
            push_to_hub=args.push_to_hub,
            private=args.private,
        )
    except ConversionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"Converted {result.num_tensors} tensors into {result.output_dir} ({', '.join(result.shards)}).")
    for name, reason in sorted(result.ignored.items()):
        print(f"  ignored {name}: {reason}")
    if result.max_abs_diff is not None:
        print(
            f"Verified: max |diff| of the audio logits = {result.max_abs_diff:.3e} "
            f"(tolerance {result.tolerance:.3e})."
        )
    else:
        print("Not verified (--no-verify).")
    if result.pushed_to:
        print(f"Pushed to {result.pushed_to}")
    return 0



__all__ = [
    "ConversionError",
    "ConversionPlan",
    "ConversionResult",
    "DTYPES",
    "HUB_DOWNLOAD_PATTERNS",
    "MAPPING_TABLE",
    "OriginalCheckpoint",
    "check_output_folder",
    "VERIFY_RTOL",
    "convert",
    "converted_path",
    "default_cache_dir",
    "from_original",
    "map_key",
    "official_generation_config",
    "plan_conversion",
    "push_folder_to_hub",
    "read_original",
    "reference_audio_logits",
    "remote_code_files",
    "save_processor_files",
    "verification_prompt",
    "write_safetensors_streaming",
]


if __name__ == "__main__":
    raise SystemExit(main())
