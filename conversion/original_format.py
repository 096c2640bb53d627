# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""The original `bosonai/higgs-audio-v3-tts-4b` checkpoint format, and its reader. One home for every fact about it.

What the original repo holds (spec §1-2; the verbatim metadata is under `shared/spec/reference/`):

    config.json                      model_type `higgs_multimodal_qwen3`: a Qwen3 `text_config`, an
                                     `audio_encoder_config` (8 codebooks of 1026), `audio_token_id` -100
    model.safetensors (+ .index)     927 bf16 tensors with the names of `MAPPING_TABLE`, the codec included
    tokenizer.json                   Qwen2 BPE, then the 84 `ADDED_TOKENS` at ids 151643..151726
    tokenizer_config.json            `TOKENIZER_CONFIG`
    higgs_audio_v2_tokenizer_config.json   the codec's config (`ORIGINAL_CODEC_CONFIG_FILE`), when the repo has it

`read_original` checks a folder against this (files, `model_type`, safetensors headers against the index, dtypes, the
tokenizer's special tokens) and returns an `OriginalCheckpoint` of headers only; `read_rows` reads tensor data.
`codec_tensor_shapes` is the one home of the codec's tensor names and shapes for a codec config (the converter checks
the checkpoint's codec against it, the export and the fixtures write it).

This module imports only the standard library at import time (torch, safetensors and the codec are imported by the
functions that read tensors or build the codec's shapes), so the command line can ask `ORIGINAL_MODEL_TYPE` without
paying for torch. It imports neither the converter nor the test fixtures; both import it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING


if TYPE_CHECKING:  # pragma: no cover
    import torch


# --------------------------------------------------------------------------------------------------------- the repo
ORIGINAL_REPO_ID: str = "bosonai/higgs-audio-v3-tts-4b"
"""The Hub id of the original checkpoint (the model card's `base_model`)."""

ORIGINAL_MODEL_TYPE: str = "higgs_multimodal_qwen3"
"""`model_type` of the original `config.json`."""

ORIGINAL_CODEC_CONFIG_FILE: str = "higgs_audio_v2_tokenizer_config.json"
"""The codec's `HiggsAudioV2TokenizerConfig` as JSON, when the repo ships it next to `config.json`."""

HUB_DOWNLOAD_PATTERNS: list[str] = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.md", "LICENSE*", "NOTICE*"]
"""What is downloaded from a Hub repo (`*.json` includes the codec config file): never pickle (`*.bin`, `*.pt`)."""

CODEC_CONFIG_BOOKKEEPING_KEYS: tuple[str, ...] = ("architectures", "dtype", "transformers_version", "_name_or_path")
"""Keys of the codec config file that carry no setting (dropped when it is read: the codec always runs in float32)."""


# The real codec configuration (Higgs Audio v2 tokenizer, 8 quantizers, hop 960). The original checkpoint does not
# always ship it (`ORIGINAL_CODEC_CONFIG_FILE`), so the converter carries it; a converted repo's `config.json` holds it.
REAL_CODEC_CONFIG: dict = {
    "acoustic_model_config": {
        "codebook_dim": 8,
        "codebook_loss_weight": 1.0,
        "codebook_size": 1024,
        "commitment_loss_weight": 0.25,
        "decoder_hidden_size": 1024,
        "downsampling_ratios": [8, 5, 4, 2, 3],
        "encoder_hidden_size": 64,
        "hidden_size": 256,
        "hop_length": 960,
        "model_type": "dac",
        "n_codebooks": 9,
        "quantizer_dropout": 0,
        "sampling_rate": 16000,
        "upsampling_ratios": [8, 5, 4, 2, 3],
    },
    "block_dilations": [1, 1],
    "channel_ratios": [1, 1],
    "codebook_dim": 64,
    "codebook_size": 1024,
    "downsample_factor": 320,
    "initializer_range": 0.02,
    "kernel_size": 3,
    "model_type": "higgs_audio_v2_tokenizer",
    "sample_rate": 24000,
    "semantic_model_config": {
        "activation_dropout": 0.1,
        "apply_spec_augment": True,
        "attention_dropout": 0.1,
        "bos_token_id": 1,
        "classifier_proj_size": 256,
        "conv_bias": False,
        "conv_dim": [512, 512, 512, 512, 512, 512, 512],
        "conv_kernel": [10, 3, 3, 3, 3, 2, 2],
        "conv_pos_batch_norm": False,
        "conv_stride": [5, 2, 2, 2, 2, 2, 2],
        "ctc_loss_reduction": "sum",
        "ctc_zero_infinity": False,
        "do_stable_layer_norm": False,
        "eos_token_id": 2,
        "feat_extract_activation": "gelu",
        "feat_extract_norm": "group",
        "feat_proj_dropout": 0.0,
        "feat_proj_layer_norm": True,
        "final_dropout": 0.1,
        "hidden_act": "gelu",
        "hidden_dropout": 0.1,
        "hidden_size": 768,
        "initializer_range": 0.02,
        "intermediate_size": 3072,
        "layer_norm_eps": 1e-05,
        "layerdrop": 0.1,
        "mask_feature_length": 10,
        "mask_feature_min_masks": 0,
        "mask_feature_prob": 0.0,
        "mask_time_length": 10,
        "mask_time_min_masks": 2,
        "mask_time_prob": 0.0,
        "model_type": "hubert",
        "num_attention_heads": 12,
        "num_conv_pos_embedding_groups": 16,
        "num_conv_pos_embeddings": 128,
        "num_feat_extract_layers": 7,
        "num_hidden_layers": 12,
        "pad_token_id": 0,
        "use_weighted_layer_sum": False,
        "vocab_size": 32,
    },
    "semantic_sample_rate": 16000,
    "strides": [1, 1],
    "target_bandwidths": [0.5, 1, 1.5, 2],
    "unit_kernel_size": 3,
}

# ------------------------------------------------------------------------------------------------------ tensor names
TEXT_EMBEDDING: str = "tied.embedding.text_embedding.weight"
AUDIO_EMBEDDING: str = "tied.embedding.modality_embeddings.0.embedding.weight"
TEXT_HEAD: str = "tied.head.text_head.weight"
AUDIO_HEAD: str = "tied.head.modality_heads.0.weight"
LAYER_PREFIX: str = "body.layers.{}."
FINAL_NORM: str = "body.norm.weight"

HEADS: tuple[tuple[str, str, str], ...] = ((TEXT_HEAD, TEXT_EMBEDDING, "text_config"),
                                           (AUDIO_HEAD, AUDIO_EMBEDDING, "audio_encoder_config"))
"""`(head, the embedding it is tied to, the config section whose tie_word_embeddings says so)`. Both heads are tied
(absent) in the real checkpoint."""

CODEC_PREFIX: str = "tied.embedding.modality_embeddings.0.model."
"""Prefix of the codec tensors (followed by `HiggsAudioV2TokenizerModel` state_dict names)."""

CODEC_EXTRA_KEY: str = "semantic_model.masked_spec_embed"
"""The one codec tensor of the original that transformers' codec does not have (HuBERT's training-only mask)."""

ORIGINAL_LAYER_SUFFIXES: tuple[str, ...] = (
    "input_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)
"""The 11 tensors of each `body.layers.{i}` (Qwen3 names), in the original's order."""

FLOAT_DTYPES: tuple[str, ...] = ("BF16", "F16", "F32", "F64")
"""The safetensors dtypes a tensor of the original may have (the real one is all BF16)."""

# ---------------------------------------------------------------------------------------------------- mapping table
_LAYER_SUFFIXES = "|".join(re.escape(suffix) for suffix in ORIGINAL_LAYER_SUFFIXES)

# fmt: off
MAPPING_TABLE: tuple[tuple[str, str | None, str], ...] = (
    # source (re.fullmatch, first match wins)      target (None: ignored)            what
    (re.escape(TEXT_EMBEDDING),                    "model.embed_tokens.weight",      "token embedding"),
    (rf"body\.layers\.(\d+)\.({_LAYER_SUFFIXES})", r"model.layers.\1.\2",            "decoder layers (Qwen3 names)"),
    (re.escape(FINAL_NORM),                        "model.norm.weight",              "final norm"),
    (re.escape(AUDIO_EMBEDDING),                   "audio_embed.weight",             "fused codebook embedding"),
    (re.escape(CODEC_PREFIX + CODEC_EXTRA_KEY),    None,                             "HuBERT's training-only mask, unused by the codec"),
    (re.escape(CODEC_PREFIX) + "(.+)",             r"codec.\1",                      "codec (HiggsAudioV2TokenizerModel names)"),
    (re.escape(TEXT_HEAD),                         "lm_head.weight",                 "untied text head"),
    (re.escape(AUDIO_HEAD),                        "audio_head.weight",              "untied audio head"),
)
# fmt: on

_COMPILED_TABLE = tuple((re.compile(pattern), target, what) for pattern, target, what in MAPPING_TABLE)


def map_key(name: str) -> tuple[str | None, str | None]:
    """`(target, None)` for a mapped key, `(None, reason)` for a key ignored on purpose, `(None, None)` when no rule
    of `MAPPING_TABLE` matches (an unknown key)."""
    for pattern, target, what in _COMPILED_TABLE:
        match = pattern.fullmatch(name)
        if match:
            return (match.expand(target), None) if target is not None else (None, what)
    return None, None


# ------------------------------------------------------------------------------------------------------- tokenizer
FIRST_ADDED_TOKEN_ID: int = 151643
"""Id of the first added token (`<|endoftext|>`); the BPE vocabulary holds ids 0..151642."""

QWEN_SPECIAL_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True), ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True), ("<|quad_start|>", True),
    ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False),
)
"""The 22 Qwen2.5 added tokens at ids 151643..151664, with their `special` flag (as in the real `tokenizer.json`)."""

HIGGS_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|asr|>", "<|streaming_asr|>", "<|tts|>", "<|streaming_tts|>", "<|audio_cont_txt|>", "<|audio|>",
    "<|audio_end|>", "<|text|>", "<|text_end|>", "<|eoc|>", "<|user|>", "<|assistant|>", "<|system|>",
    "<|await_audio|>", "<|ref_audio|>", "<|ref_text|>",
    "<|emotion:elation|>", "<|emotion:amusement|>", "<|emotion:enthusiasm|>", "<|emotion:determination|>",
    "<|emotion:pride|>", "<|emotion:contentment|>", "<|emotion:affection|>", "<|emotion:relief|>",
    "<|emotion:contemplation|>", "<|emotion:confusion|>", "<|emotion:surprise|>", "<|emotion:awe|>",
    "<|emotion:longing|>", "<|emotion:arousal|>", "<|emotion:anger|>", "<|emotion:fear|>", "<|emotion:disgust|>",
    "<|emotion:bitterness|>", "<|emotion:sadness|>", "<|emotion:shame|>", "<|emotion:helplessness|>",
    "<|env:music|>", "<|env:noise|>", "<|style:singing|>", "<|style:shouting|>", "<|style:whispering|>",
    "<|sfx:cough|>", "<|sfx:laughter|>", "<|sfx:crying|>", "<|sfx:screaming|>", "<|sfx:burping|>",
    "<|sfx:humming|>", "<|sfx:sigh|>", "<|sfx:sniff|>", "<|sfx:sneeze|>",
    "<|prosody:speed_very_slow|>", "<|prosody:speed_slow|>", "<|prosody:speed_fast|>", "<|prosody:speed_very_fast|>",
    "<|prosody:pitch_low|>", "<|prosody:pitch_high|>", "<|prosody:pause|>", "<|prosody:long_pause|>", "<|chatml|>",
    "<|prosody:expressive_high|>", "<|prosody:expressive_low|>",
)
"""The 62 Higgs tokens in `extra_special_tokens` order, at ids 151665..151726 (all special)."""

ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = tuple(
    (FIRST_ADDED_TOKEN_ID + i, content, special)
    for i, (content, special) in enumerate(QWEN_SPECIAL_TOKENS + tuple((t, True) for t in HIGGS_SPECIAL_TOKENS))
)
"""All 84 added tokens as `(id, content, special)`, exactly as in `reference/added_tokens.tsv`."""

TOKENIZER_CONFIG: dict = {
    "add_prefix_space": False,
    "backend": "tokenizers",
    "bos_token": None,
    "clean_up_tokenization_spaces": False,
    "eos_token": "<|endoftext|>",
    "errors": "replace",
    "extra_special_tokens": list(HIGGS_SPECIAL_TOKENS),
    "is_local": True,
    "model_max_length": 131072,
    "pad_token": "<|endoftext|>",
    "split_special_tokens": False,
    "tokenizer_class": "Qwen2Tokenizer",
    "unk_token": None,
}
"""The real `tokenizer_config.json`, field for field (transformers 5 format: no `added_tokens_decoder`)."""


# ---------------------------------------------------------------------------------------------------- config.json
def original_config(
    *,
    hidden_size: int = 2560,
    num_layers: int = 36,
    num_attention_heads: int = 32,
    num_key_value_heads: int = 8,
    head_dim: int = 128,
    intermediate_size: int = 9728,
    vocab_size: int = 151936,
    num_codebooks: int = 8,
    codebook_size: int = 1026,
    tie_word_embeddings: bool = True,
) -> dict:
    """The original `config.json` as a dict: with the defaults it equals the real one key for key
    (`reference/config.json`); other arguments change only the dimensions (and the tie flags for untied heads)."""
    return {
        "_hidden_size": hidden_size,
        "_vocab_size": vocab_size,
        "architectures": ["HiggsMultimodalQwen3ForConditionalGeneration"],
        "audio_encoder_config": {
            "_name_or_path": "", "architectures": None, "chunk_size_feed_forward": 0, "dtype": None,
            "encoder_type": "discrete", "id2label": {"0": "LABEL_0", "1": "LABEL_1"}, "is_encoder_decoder": False,
            "label2id": {"LABEL_0": 0, "LABEL_1": 1}, "max_chunk_size": 50, "mel_per_sample": 8,
            "model_type": "higgs_audio_encoder", "num_codebooks": num_codebooks, "out_dim": hidden_size,
            "output_attentions": False, "output_hidden_states": False, "problem_type": None,
            "qwen3_aut_config": None, "return_dict": True, "tie_word_embeddings": tie_word_embeddings,
            "use_delay_pattern": True, "vocab_size": codebook_size, "whisper_config": None,
        },
        "audio_token_id": -100,
        "ignore_index": -100,
        "model_type": ORIGINAL_MODEL_TYPE,
        "text_config": {
            "_name_or_path": "/ceph/models/Qwen3-4B-Base", "architectures": ["Qwen3ForCausalLM"],
            "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": FIRST_ADDED_TOKEN_ID,
            "dtype": "bfloat16", "eos_token_id": FIRST_ADDED_TOKEN_ID, "head_dim": head_dim, "hidden_act": "silu",
            "hidden_size": hidden_size,
            "initializer_range": 0.02, "intermediate_size": intermediate_size,
            "layer_types": ["full_attention"] * num_layers, "max_position_embeddings": 32768,
            "max_window_layers": num_layers, "model_type": "qwen3", "num_attention_heads": num_attention_heads,
            "num_hidden_layers": num_layers, "num_key_value_heads": num_key_value_heads, "pad_token_id": None,
            "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
            "sliding_window": None, "tie_word_embeddings": tie_word_embeddings, "use_cache": True,
            "use_sliding_window": False, "vocab_size": vocab_size,
        },
        "transformers_version": "5.5.0",
    }


def original_lm_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the language-model tensors of an original checkpoint with `config` (the original
    `config.json` dict), in the original's order; heads only when the config says untied."""
    text, audio = config["text_config"], config["audio_encoder_config"]
    hidden, head_dim, mlp = text["hidden_size"], text["head_dim"], text["intermediate_size"]
    q, kv = text["num_attention_heads"] * head_dim, text["num_key_value_heads"] * head_dim
    per_layer = dict(zip(ORIGINAL_LAYER_SUFFIXES, [
        (hidden,), (q, hidden), (kv, hidden), (kv, hidden), (hidden, q), (head_dim,), (head_dim,), (hidden,),
        (mlp, hidden), (mlp, hidden), (hidden, mlp),
    ]))
    rows = {TEXT_EMBEDDING: text["vocab_size"], AUDIO_EMBEDDING: audio["num_codebooks"] * audio["vocab_size"]}
    shapes = {name: (count, hidden) for name, count in rows.items()}
    for i in range(text["num_hidden_layers"]):
        shapes.update({LAYER_PREFIX.format(i) + suffix: shape for suffix, shape in per_layer.items()})
    shapes[FINAL_NORM] = (hidden,)
    for head, embedding, section in HEADS:
        if not config[section].get("tie_word_embeddings", True):
            shapes[head] = (rows[embedding], hidden)
    return shapes


def codec_tensor_shapes(codec_config: dict, original: bool = False) -> dict[str, tuple[int, ...]]:
    """The codec's tensor names and shapes for `codec_config` (its state_dict, in module order, built on the meta
    device): what a converted repo stores under `codec.`. With `original`, the original checkpoint's codec section
    (under `CODEC_PREFIX`): the same plus `CODEC_EXTRA_KEY` last, as the original stores it."""
    shapes = dict(_codec_shapes(json.dumps(codec_config, sort_keys=True)))
    if original:
        shapes[CODEC_EXTRA_KEY] = (codec_config["semantic_model_config"]["hidden_size"],)  # HuBERT's mask embedding
    return shapes


@functools.lru_cache(maxsize=8)
def _codec_shapes(codec_config_json: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    import torch

    from ..codec_higgs_v3 import HiggsAudioV3Codec

    with torch.device("meta"):
        codec = HiggsAudioV3Codec.from_codec_config(json.loads(codec_config_json))
    return tuple((name, tuple(value.shape)) for name, value in codec.state_dict().items())


# Fields of the original `text_config` that become `HiggsAudioV3Config` fields unchanged.
TEXT_CONFIG_FIELDS: tuple[str, ...] = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "initializer_range", "rms_norm_eps",
    "use_cache", "rope_parameters", "attention_bias", "attention_dropout", "use_sliding_window", "sliding_window",
    "max_window_layers", "layer_types", "bos_token_id",
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


# ----------------------------------------------------------------------------------------------------------- reader
class ConversionError(ValueError):
    """The input cannot be converted, or the converted model failed verification. The message says why."""


class PushError(RuntimeError):
    """A complete folder could not be uploaded to the Hub (the network, the Hub): not a fault of the input. The message
    says how to upload it later (`conversion.repo.push_folder_to_hub`)."""


@dataclass(frozen=True)
class SourceTensor:
    """One tensor of a safetensors file: where it is and what its header says (`dtype` is the safetensors name)."""

    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]


@dataclass
class OriginalCheckpoint:
    """What `read_original` found in an original-format folder: its config, tensor headers, the token ids the
    converted config needs (`<|endoftext|>`, every Higgs token, `eos`, `pad`) and the codec config file (or None)."""

    directory: Path
    config: dict
    tensors: dict[str, SourceTensor]
    token_ids: dict[str, int]
    tokenizer_config: dict
    codec_config: dict | None = None


def read_json(path: Path, what: str) -> dict:
    """A JSON object from `path`; a `ConversionError` naming `what` and the file when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise ConversionError(f"{what} {str(path)!r} cannot be read as JSON ({error}).") from error
    if not isinstance(value, dict):
        raise ConversionError(f"{what} {str(path)!r} holds a JSON {type(value).__name__}, not an object.")
    return value


def read_codec_config_file(path: str | os.PathLike) -> dict:
    """A codec config (`HiggsAudioV2TokenizerConfig` as JSON) without its bookkeeping keys."""
    config = read_json(Path(path), "The codec config")
    return {key: value for key, value in config.items() if key not in CODEC_CONFIG_BOOKKEEPING_KEYS}


def permission_problem(path: str | os.PathLike) -> PermissionError | None:
    """A `PermissionError` that says so when the existing file `path` cannot be opened for reading by this process
    (some readers, safetensors' among them, report that as a missing file or a damaged one), else None."""
    path = Path(path)
    try:
        with open(path, "rb"):
            return None
    except PermissionError:
        info = path.stat()
        return PermissionError(
            f"Permission denied reading {str(path)!r} (mode {info.st_mode & 0o777:04o}, owner uid {info.st_uid}): this "
            "user cannot read it. Make it readable (chmod a+r, or write it under umask 022) or run as its owner.")
    except OSError:
        return None


def first_permission_problem(folder: str | os.PathLike) -> PermissionError | None:
    """`permission_problem` of the first unreadable file directly in `folder` (None when all can be read)."""
    with contextlib.suppress(OSError):
        for path in sorted(Path(folder).iterdir()):
            if path.is_file() and (problem := permission_problem(path)) is not None:
                return problem
    return None


def read_header(path: Path) -> dict[str, SourceTensor]:
    """The tensors of one safetensors file (headers only); a truncated or corrupted file raises a `ConversionError`."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            slices = {name: f.get_slice(name) for name in f.keys()}
            return {name: SourceTensor(name, path, s.get_dtype(), tuple(s.get_shape())) for name, s in slices.items()}
    except Exception as error:  # safetensors raises its own error type (and OSError for I/O problems)
        if (problem := permission_problem(path)) is not None:  # safetensors calls it a missing or damaged file
            raise problem from error
        raise ConversionError(
            f"{str(path)!r} is not a valid safetensors file ({error}). It is probably truncated or corrupted: "
            "download it again."
        ) from error


def read_rows(tensor: SourceTensor, start: int | None = None, stop: int | None = None) -> torch.Tensor:
    """Rows `start:stop` of a tensor (all of it by default), in its stored dtype. The file is opened for this read
    only: safetensors may hand back a view of a memory map, and this way each tensor holds a mapping of its own,
    released with it, so no mapping of the whole file stays resident while a converted copy is kept."""
    from safetensors import safe_open

    with safe_open(str(tensor.file), framework="pt") as f:
        if not tensor.shape or (start is None and stop is None):
            return f.get_tensor(tensor.name)
        return f.get_slice(tensor.name)[start:stop]


def read_rows_at(tensor: SourceTensor, indices: list[int]) -> torch.Tensor:
    """Rows `indices` (in that order, repeats allowed) of a tensor, stacked to `[len(indices), ...]`; the file is
    opened once and only those rows are read."""
    import torch
    from safetensors import safe_open

    with safe_open(str(tensor.file), framework="pt") as f:
        piece = f.get_slice(tensor.name)
        return torch.cat([piece[index:index + 1] for index in indices])


# -------------------------------------------------------------------------------------------------------------- hub
HUB_PROBE_SECONDS: float = 3.0
"""How long `hub_offline_reason` waits for the Hub's endpoint to accept a connection."""


def hub_offline_reason(timeout: float = HUB_PROBE_SECONDS) -> str | None:
    """Why the Hub cannot be used now (`HF_HUB_OFFLINE` is set, or its endpoint did not accept a TCP connection within
    `timeout` seconds), or None. The probe replaces `huggingface_hub`'s retries (about ten, over 30-40 s) with one
    short wait; behind a proxy (`HTTPS_PROXY` / `ALL_PROXY`) it is skipped, as a direct connection says nothing there."""
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    if any(os.environ.get(key) for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    endpoint = urlparse(constants.ENDPOINT)
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (443 if endpoint.scheme == "https" else 80)
    if _can_connect(host, port, timeout):
        return None
    return f"the Hub ({constants.ENDPOINT}) did not answer within {timeout:g} s"


def _can_connect(host: str, port: int, timeout: float) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def resolve_input(input_path: str | os.PathLike, revision: str | None = None, cache_dir: str | None = None) -> Path:
    """A local folder as is, or a Hub repo id downloaded with `huggingface_hub.snapshot_download`
    (`HUB_DOWNLOAD_PATTERNS` only: no pickle)."""
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

    offline = hub_offline_reason()  # one short probe, not huggingface_hub's retries (tens of seconds) offline
    try:
        return Path(
            huggingface_hub.snapshot_download(
                repo_id=text, revision=revision, cache_dir=cache_dir, allow_patterns=HUB_DOWNLOAD_PATTERNS,
                **({"local_files_only": True} if offline else {}),
            )
        )
    except Exception as error:  # network, authentication, unknown repo or revision: all end the conversion here
        if offline:  # one line, without huggingface_hub's chained tracebacks
            raise ConversionError(
                f"Could not download {text!r} (revision {revision or 'main'}) from the Hugging Face Hub: {offline}, "
                f"and it is not in the local Hugging Face cache. Download it once while online (`hf download {text}`) "
                "or give a local folder with the checkpoint."
            ) from None
        raise ConversionError(
            f"Could not download {text!r} (revision {revision or 'main'}) from the Hugging Face Hub: {error}"
        ) from error


def _check_files(directory: Path) -> None:
    """The required files are there; pickle-only weights are refused by name."""
    required = ("config.json", "tokenizer.json", "tokenizer_config.json")
    missing = [name for name in required if not (directory / name).is_file()]
    if not (directory / "model.safetensors.index.json").is_file() and not (directory / "model.safetensors").is_file():
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


def _check_config(config: dict) -> None:
    """`model_type` is the original's and both sections are there."""
    model_type = config.get("model_type")
    if model_type != ORIGINAL_MODEL_TYPE:
        hint = (
            " This folder is already converted: load it with AutoModel.from_pretrained(path, trust_remote_code=True)."
            if model_type == "higgs_audio_v3"
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


def _read_tensors(directory: Path) -> dict[str, SourceTensor]:
    """Every tensor header of the weight files, checked against the index (when there is one) and for dtype."""
    index_path = directory / "model.safetensors.index.json"
    weight_map = read_json(index_path, "The weight index").get("weight_map") if index_path.is_file() else None
    if index_path.is_file() and (not isinstance(weight_map, dict) or not weight_map):
        raise ConversionError(f"{str(index_path)!r} has no weight_map.")
    files = sorted(set(weight_map.values())) if weight_map else ["model.safetensors"]
    absent = [name for name in files if not (directory / name).is_file()]
    if absent:
        raise ConversionError(
            f"model.safetensors.index.json names {', '.join(absent)}, which is missing from {str(directory)!r}."
        )
    tensors: dict[str, SourceTensor] = {}
    for name in files:
        for key, tensor in read_header(directory / name).items():
            if key in tensors:
                raise ConversionError(f"Tensor {key!r} is stored twice (in {tensors[key].file.name} and {name}).")
            tensors[key] = tensor
    if weight_map is not None:
        _check_index(weight_map, tensors)
    bad_dtypes = sorted(f"{t.name} ({t.dtype})" for t in tensors.values() if t.dtype not in FLOAT_DTYPES)
    if bad_dtypes:
        raise ConversionError(
            f"Only floating point tensors are expected ({', '.join(FLOAT_DTYPES)}); got {bad_dtypes[:10]}."
        )
    return tensors


def _check_index(weight_map: dict[str, str], tensors: dict[str, SourceTensor]) -> None:
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


def _read_token_ids(directory: Path) -> tuple[dict[str, int], dict]:
    """The ids of `<|endoftext|>`, every Higgs token, `eos` and `pad` (all must be added tokens of tokenizer.json),
    and the tokenizer config."""
    tokenizer = read_json(directory / "tokenizer.json", "The tokenizer")
    tokenizer_config = read_json(directory / "tokenizer_config.json", "The tokenizer config")
    added = {token.get("content"): token.get("id") for token in tokenizer.get("added_tokens") or []}
    required = ["<|endoftext|>", *HIGGS_SPECIAL_TOKENS]
    missing = [token for token in required if token not in added]
    if missing:
        raise ConversionError(
            f"tokenizer.json lacks {len(missing)} of the required special tokens: {', '.join(missing)}. "
            "The Higgs Audio v3 tokenizer has <|endoftext|> and the 62 Higgs tokens (<|tts|>, <|audio|>, <|text|>, "
            "<|ref_audio|>, <|ref_text|>, the control tags, ...) as added tokens."
        )

    def token_name(key: str, default: str) -> str:
        value = tokenizer_config.get(key) or default
        return value.get("content") if isinstance(value, dict) else value

    eos = token_name("eos_token", "<|endoftext|>")
    if eos not in added:
        raise ConversionError(
            f"tokenizer_config.json names eos_token {eos!r}, which is not an added token of tokenizer.json."
        )
    token_ids = {token: int(added[token]) for token in required}
    token_ids["eos"] = int(added[eos])
    token_ids["pad"] = int(added.get(token_name("pad_token", eos), token_ids["eos"]))
    return token_ids, tokenizer_config


def read_original(directory: str | os.PathLike) -> OriginalCheckpoint:
    """Read and check an original-format folder: files present, `model_type`, safetensors headers consistent with the
    index, float dtypes, a tokenizer with every Higgs special token, and the codec config file when there is one.
    Reads headers and JSON only (no tensor data). Raises `ConversionError` with the reason."""
    directory = Path(directory)
    _check_files(directory)
    config = read_json(directory / "config.json", "The config")
    _check_config(config)
    tensors = _read_tensors(directory)
    token_ids, tokenizer_config = _read_token_ids(directory)
    codec_file = directory / ORIGINAL_CODEC_CONFIG_FILE
    codec_config = read_codec_config_file(codec_file) if codec_file.is_file() else None
    return OriginalCheckpoint(directory, config, tensors, token_ids, tokenizer_config, codec_config)


__all__ = [
    "ADDED_TOKENS",
    "HUB_PROBE_SECONDS",
    "AUDIO_EMBEDDING",
    "AUDIO_HEAD",
    "CODEC_CONFIG_BOOKKEEPING_KEYS",
    "CODEC_EXTRA_KEY",
    "CODEC_PREFIX",
    "ConversionError",
    "first_permission_problem",
    "hub_offline_reason",
    "permission_problem",
    "FINAL_NORM",
    "FIRST_ADDED_TOKEN_ID",
    "FLOAT_DTYPES",
    "HEADS",
    "HIGGS_SPECIAL_TOKENS",
    "HUB_DOWNLOAD_PATTERNS",
    "LAYER_PREFIX",
    "MAPPING_TABLE",
    "ORIGINAL_CODEC_CONFIG_FILE",
    "ORIGINAL_LAYER_SUFFIXES",
    "ORIGINAL_MODEL_TYPE",
    "ORIGINAL_REPO_ID",
    "OriginalCheckpoint",
    "PushError",
    "QWEN_SPECIAL_TOKENS",
    "REAL_CODEC_CONFIG",
    "SourceTensor",
    "TEXT_CONFIG_FIELDS",
    "TEXT_CONFIG_IGNORED",
    "TEXT_EMBEDDING",
    "TEXT_HEAD",
    "TOKENIZER_CONFIG",
    "TOP_LEVEL_KNOWN",
    "codec_tensor_shapes",
    "map_key",
    "original_config",
    "original_lm_shapes",
    "read_codec_config_file",
    "read_header",
    "read_json",
    "read_original",
    "read_rows",
    "read_rows_at",
    "resolve_input",
]
