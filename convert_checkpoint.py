# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Convert the original `bosonai/higgs-audio-v3-tts-4b` checkpoint into a verified, self-contained Transformers repo.

    python -m higgs_v3.convert_checkpoint --input bosonai/higgs-audio-v3-tts-4b --output ./higgs-audio-v3-hf
    python convert_checkpoint.py --input ORIGINAL_DIR --output OUT_DIR [--dtype bfloat16|float16|float32]
        [--revision REV] [--max-shard-size 2GB] [--codec-config FILE] [--overwrite] [--push-to-hub REPO_ID [--private]]
    python convert_checkpoint.py --to-original --input CONVERTED_DIR --output ORIGINAL_LAYOUT_DIR [--original DIR]
        (the other direction, for the serving engines: `conversion/export`)

Four steps, each in its own module:

1. **Read** (`conversion/original_format`): the original folder (or a Hub snapshot without pickle files): config,
   safetensors headers against the index, tokenizer specials, the codec config file when there is one.
2. **Plan** (here, `plan_conversion`): every source key mapped by `MAPPING_TABLE`, ignored on purpose with a reason,
   or an error; the codec config chosen (`--codec-config`, else `higgs_audio_v2_tokenizer_config.json` in the input
   folder, else `REAL_CODEC_CONFIG`) and checked against the codec tensors; the heads' tying decided; every target
   tensor checked against the shape the converted config implies. All problems of a step are listed in one error.
3. **Write** (`conversion/repo`): shards planned by `huggingface_hub.split_torch_state_dict_into_shards`,
   each read, checked for NaN/inf, cast (the language model to `--dtype`, the codec to float32) and written with
   `safetensors.torch.save_file`, one shard in memory at a time; then the config with `auto_map`,
   `generation_config.json`, the tokenizer files unchanged, the processor, the remote code, a model card and the
   source's LICENSE/NOTICE files.
4. **Verify**: every written tensor re-read and compared bit for bit with its source, then
   `conversion.verification.verify_conversion`: the folder, loaded in a fresh process, against an independent forward
   over the original tensors.

Everything is written into a staging folder next to the output and swapped into place at the end
(`conversion.folders.staged_folder`): a failed run leaves the output as it was, and what a killed run leaves is
cleaned up by the next. No pickle is loaded anywhere.

The command line (options, the summary, `--push-to-hub`, `--to-original`) is `higgs-v3 convert` (`cli/convert`);
running this file is the same command. `from_original` (a conversion kept in a local cache, then loaded) is
`conversion/cache`'s.
"""

from __future__ import annotations


if __name__ == "__main__":  # pragma: no cover - `python convert_checkpoint.py`, `python -m higgs_v3.convert_checkpoint`
    # The script is the command line's `convert` under this file's name. Run as a file, this folder is imported as the
    # `higgs_v3` package first.
    import sys as _sys

    if not __package__:
        import importlib.util as _importlib_util
        import os as _os

        _here = _os.path.dirname(_os.path.abspath(__file__))
        _spec = _importlib_util.spec_from_file_location(
            "higgs_v3", _os.path.join(_here, "__init__.py"), submodule_search_locations=[_here]
        )
        _package = _importlib_util.module_from_spec(_spec)
        _sys.modules["higgs_v3"] = _package
        _spec.loader.exec_module(_package)
    from higgs_v3.cli.main import main as _main

    raise SystemExit(_main(["convert", *_sys.argv[1:]], convert_prog="convert_checkpoint.py"))

import copy
import functools
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers.utils import logging

from .configuration_higgs_v3 import HiggsAudioV3Config, check_codec_config
from .conversion.repo import (
    AS_HEAD,
    PlannedTensor,
    check_output_folder,
    check_shard_size,
    shard_split,
    verify_written_tensors,
    weight_dtype,
    write_model_card,
    write_repo_files,
    write_weights,
)
from .conversion.folders import check_outside, output_folder, staged_folder
from .conversion.original_format import (
    CODEC_PREFIX,
    HEADS,
    ORIGINAL_CODEC_CONFIG_FILE,
    ORIGINAL_REPO_ID,
    REAL_CODEC_CONFIG,
    TEXT_CONFIG_FIELDS,
    TEXT_CONFIG_IGNORED,
    TOP_LEVEL_KNOWN,
    ConversionError,
    OriginalCheckpoint,
    SourceTensor,
    codec_tensor_shapes,
    map_key,
    read_original,
    read_rows,
    resolve_input,
)
from .conversion.verification import verify_conversion


logger = logging.get_logger(__name__)

DEFAULT_MAX_SHARD_SIZE: str = "2GB"
"""Largest safetensors shard by default. Shards are written one at a time, so the converter's peak memory is about one
shard (2 GB against the real checkpoint's 8.5 GB); smaller shards lower it further."""

CONVERTER_VERSION: str = "2"
"""Bumped when the output of the converter changes (part of the key of `from_original`'s cache, `conversion/cache`)."""

READ_CHUNK_BYTES: int = 64 * 1024 * 1024
"""Largest piece of a tensor held at once when a head is compared with its embedding (rows of the source tensor)."""


@dataclass
class ConversionPlan:
    """The converted config, the planned tensors (in module order) and the source keys ignored on purpose."""

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


# ------------------------------------------------------------------------------------------------------------- plan
def _account_keys(source: OriginalCheckpoint) -> tuple[dict[str, str], dict[str, str]]:
    """Key accounting: `({source key: target}, {source key: reason ignored})`; an unknown key is an error."""
    mapped, ignored, unknown = {}, {}, []
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
    return mapped, ignored


def _codec_candidate(source: OriginalCheckpoint, codec_config: dict | None) -> tuple[str, dict]:
    """`(what it is, config)`: the given config, else the input folder's codec config file, else the real one."""
    if codec_config is not None:
        return "the given codec config (--codec-config / codec_config=)", codec_config
    if source.codec_config is not None:
        return f"{ORIGINAL_CODEC_CONFIG_FILE} in the input folder", source.codec_config
    return "the real codec config (conversion.original_format.REAL_CODEC_CONFIG)", REAL_CODEC_CONFIG


def _choose_codec(
    source: OriginalCheckpoint, mapped: dict[str, str], ignored: dict[str, str], codec_config: dict | None,
    without_codec: bool,
) -> dict | None:
    """Codec choice: the codec config (see `_codec_candidate`) whose tensors are exactly the checkpoint's codec
    tensors (names and shapes), else an error that lists the differences. With `without_codec`: `None`, and the codec
    keys move from `mapped` to `ignored`."""
    codec_keys = [name for name, target in mapped.items() if target.startswith("codec.")]
    if without_codec:
        for name in codec_keys:
            ignored[name] = "codec tensor left out (--without-codec)"
            del mapped[name]
        return None
    if not codec_keys:
        raise ConversionError(
            f"The checkpoint has no codec tensors under {CODEC_PREFIX!r}; the original bundles its codec. Pass "
            "--without-codec (without_codec=True) to convert the language model alone (it then returns codes, "
            "not waveforms)."
        )
    label, candidate = _codec_candidate(source, codec_config)
    try:
        expected = codec_tensor_shapes(check_codec_config(candidate))
    except (ValueError, TypeError, KeyError) as error:
        raise ConversionError(f"{label[0].upper()}{label[1:]} is not a valid codec config: {error}") from error
    found = {mapped[name].removeprefix("codec."): source.tensors[name].shape for name in codec_keys}
    if found != expected:
        differences = {
            "missing": sorted(set(expected) - set(found)),
            "unexpected": sorted(set(found) - set(expected)),
            "with another shape": sorted(
                f"{k} {found[k]} (the config gives {expected[k]})" for k in set(found) & set(expected)
                if found[k] != expected[k]
            ),
        }
        listed = "; ".join(f"{len(v)} {kind} (e.g. {v[:3]})" for kind, v in differences.items() if v)
        raise ConversionError(
            f"The {len(found)} codec tensors under {CODEC_PREFIX!r} do not match {label}: {listed}. Pass the codec's "
            f"config (a HiggsAudioV2TokenizerConfig as JSON) with --codec-config FILE (codec_config= in Python), or "
            f"put it into the input folder as {ORIGINAL_CODEC_CONFIG_FILE}."
        )
    return copy.deepcopy(candidate)


def _max_abs_difference(a: SourceTensor, b: SourceTensor) -> float:
    """max |a - b| of two same-shape tensors, read in row chunks of at most `READ_CHUNK_BYTES` as float32."""
    step = max(1, READ_CHUNK_BYTES // max(1, 4 * math.prod(a.shape[1:])))
    worst = 0.0
    for start in range(0, a.shape[0], step):
        diff = (read_rows(a, start, start + step).float() - read_rows(b, start, start + step).float()).abs()
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
    return worst


def _tie_heads(source: OriginalCheckpoint, mapped: dict[str, str], ignored: dict[str, str]) -> bool:
    """Head tying (tied, i.e. absent, in the real checkpoint). A head present and equal to its embedding is redundant
    (ignored); present and different, it is untied, unless the config says tied (refused). Once one head is untied,
    both become real tensors: a tied one is a copy of its embedding. Updates `mapped` and `ignored`; returns
    `tie_word_embeddings`."""
    untied = False
    for head, embedding, section in HEADS:
        flag, declared_tied = f"{section}.tie_word_embeddings", source.config[section].get("tie_word_embeddings", True)
        if head not in source.tensors:
            if not declared_tied:
                raise ConversionError(f"config.json sets {flag} to false, but the checkpoint has no {head!r} tensor.")
            continue
        shape = source.tensors[embedding].shape if embedding in source.tensors else None
        if shape != source.tensors[head].shape:
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
            untied = True
    if untied:
        for head, embedding, _ in HEADS:
            if head not in mapped:
                mapped[embedding + AS_HEAD] = map_key(head)[0]
                ignored.pop(head, None)
    return not untied


def _check_supported(text: dict, audio: dict) -> None:
    """A Qwen3 backbone, discrete delayed codes of integer sizes, the audio width equal to the hidden size."""
    if text.get("model_type", "qwen3") != "qwen3":
        raise ConversionError(
            f"text_config has model_type {text.get('model_type')!r}; a Qwen3 backbone ('qwen3') is expected."
        )
    checks = {
        "audio_encoder_config.encoder_type": (audio.get("encoder_type", "discrete"), "discrete"),
        "audio_encoder_config.use_delay_pattern": (audio.get("use_delay_pattern", True), True),
    }
    for key, (value, expected) in checks.items():
        if value != expected:
            raise ConversionError(f"config.json has {key} = {value!r}; the converter supports only {expected!r}.")
    out_dim, hidden_size = audio.get("out_dim", text.get("hidden_size")), text.get("hidden_size")
    if out_dim != hidden_size:  # either one may be the changed one: name both, not "supports only <hidden_size>"
        raise ConversionError(
            f"config.json has audio_encoder_config.out_dim = {out_dim!r} but text_config.hidden_size = "
            f"{hidden_size!r}; the two must be equal (the audio codes are embedded at the backbone's width), so one "
            "of them was changed: the checkpoint's tensors have the real width."
        )
    for key in ("num_codebooks", "vocab_size"):
        if not isinstance(audio.get(key), int):
            raise ConversionError(f"config.json has no integer audio_encoder_config.{key} (got {audio.get(key)!r}).")


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
    _check_supported(text, audio)
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
    return dict(_model_shapes(config.to_json_string(use_diff=False)))


@functools.lru_cache(maxsize=4)
def _model_shapes(config_json: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    from .modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    config = HiggsAudioV3Config.from_dict(json.loads(config_json))
    with torch.device("meta"):  # no memory, no initialisation
        model = HiggsAudioV3ForConditionalGeneration(config)
    tied = set(getattr(model, "_tied_weights_keys", {}) or {}) if config.tie_word_embeddings else set()
    return tuple((name, tuple(value.shape)) for name, value in model.state_dict().items() if name not in tied)


def _plan_targets(
    source: OriginalCheckpoint, mapped: dict[str, str], config: HiggsAudioV3Config, dtype: torch.dtype
) -> list[PlannedTensor]:
    """Target-shape check: every tensor a model with `config` has comes from exactly one source tensor of the shape
    it needs, and nothing else is mapped. Returns the plan in module order (the codec in float32)."""
    expected = _expected_tensors(config)
    by_target: dict[str, str] = {}
    twice = []
    for name, target in mapped.items():
        if target in by_target:
            twice.append(f"{target} <- {by_target[target]} and {name}")
        by_target[target] = name
    problems = {
        "missing (no source tensor)": [t for t in expected if t not in by_target],
        "not part of a model with this config": sorted(f"{n} -> {t}" for t, n in by_target.items()
                                                       if t not in expected),
        "wrong shape": sorted(
            f"{name} {list(source.tensors[name.removesuffix(AS_HEAD)].shape)} (the config implies "
            f"{list(expected[target])} for {target})"
            for target, name in by_target.items()
            if target in expected and source.tensors[name.removesuffix(AS_HEAD)].shape != expected[target]
        ),
        "mapped twice": twice,
    }
    if any(problems.values()):
        raise ConversionError(
            f"The checkpoint does not match its config.json (hidden_size={config.hidden_size}, num_hidden_layers="
            f"{config.num_hidden_layers}, vocab_size={config.vocab_size}, {config.num_codebooks} x "
            f"{config.codebook_size} audio codes): " + "; ".join(f"{k}: {v}" for k, v in problems.items() if v) + "."
        )
    return [
        PlannedTensor(target, by_target[target], torch.float32 if target.startswith("codec.") else dtype, shape)
        for target, shape in expected.items()
    ]


def plan_conversion(
    source: OriginalCheckpoint,
    dtype: torch.dtype = torch.bfloat16,
    codec_config: dict | None = None,
    without_codec: bool = False,
) -> ConversionPlan:
    """Key accounting, codec choice, head tying, the converted config and the target-shape check, in that order;
    each step raises a `ConversionError` that lists everything wrong with it. Reads tensor data only to compare a
    head with its embedding."""
    mapped, ignored = _account_keys(source)
    chosen_codec = _choose_codec(source, mapped, ignored, codec_config, without_codec)
    tie = _tie_heads(source, mapped, ignored)
    config = build_config(source, chosen_codec, dtype, tie)
    return ConversionPlan(config=config, tensors=_plan_targets(source, mapped, config, dtype), ignored=ignored)


def _check_options(dtype: str, max_shard_size: int | str) -> torch.dtype:
    """The torch dtype for `--dtype`; a `ConversionError` for an unknown dtype or an unusable shard size."""
    torch_dtype = weight_dtype(dtype)
    check_shard_size(max_shard_size)
    return torch_dtype


def _write_and_verify(
    source: OriginalCheckpoint, plan: ConversionPlan, staging: Path, split, *, verify: bool, dtype: str,
    base_model: str, repo_id: str | None, progress: Callable[[str], None] = lambda message: None,
) -> tuple[list[str], float | None, float | None]:
    """Write the weights (as `split` says) and every other file into `staging`, check the folder, verify (re-read
    bit for bit, then the numeric check) and write the model card, saying each step to `progress`. Returns
    `(shards, max_abs_diff, tolerance)`."""
    progress(f"Read the original checkpoint {str(source.directory)!r}; writing {len(plan.tensors)} tensors "
             f"({split.metadata['total_size'] / 1e9:.2f} GB in {dtype}, {len(split.filename_to_tensors)} shard(s)) into "
             f"{staging.name}...")
    shards = write_weights(source, plan.tensors, staging, split)
    progress("Writing the config, tokenizer, processor and code...")
    copied_license = write_repo_files(source.directory, plan.config, staging)
    check_output_folder(staging)
    max_abs_diff = tolerance = None
    if verify:
        progress("Verifying: reading every written tensor back...")
        verify_written_tensors(source, plan.tensors, staging, shards)
        progress("Verifying: the converted model's audio logits against the original's (both models loaded)...")
        max_abs_diff, tolerance = verify_conversion(source, plan.config, staging, weight_dtype(dtype))
    write_model_card(staging, source.directory, plan.config, dtype=dtype, base_model=base_model,
                     max_abs_diff=max_abs_diff, copied_license=copied_license, repo_id=repo_id)
    return shards, max_abs_diff, tolerance


def convert(
    input_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    revision: str | None = None,
    dtype: str = "bfloat16",
    max_shard_size: str | int = DEFAULT_MAX_SHARD_SIZE,
    overwrite: bool = False,
    verify: bool = True,
    codec_config: dict | None = None,
    without_codec: bool = False,
    repo_id: str | None = None,
    base_model: str = ORIGINAL_REPO_ID,
    cache_dir: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> ConversionResult:
    """Convert an original Higgs Audio v3 checkpoint (local folder or Hub id) into a Transformers repo at `output_dir`.

    The output is assembled in a temporary folder next to `output_dir`, verified (unless `verify=False`), and only
    then renamed into place; a non-empty `output_dir` is refused unless `overwrite`. `codec_config` overrides the
    codec config (default: the input folder's `higgs_audio_v2_tokenizer_config.json`, else the real one). `repo_id`:
    the Hub repo the model card's usage names (the folder is uploaded by `conversion.repo.push_folder_to_hub`).
    `progress`, when given, is called with one line per step once the input is read and planned (writing, each
    verification), so a refused input is only its error. Raises `ConversionError` with the reason.

    >>> result = convert("path/to/higgs-audio-v3-tts-4b", "higgs-audio-v3-hf")  # doctest: +SKIP
    >>> result.max_abs_diff <= result.tolerance  # doctest: +SKIP
    True
    """
    torch_dtype = _check_options(dtype, max_shard_size)
    output = output_folder(output_dir, overwrite)  # after the cleanup of a killed run's leftovers
    progress = progress or (lambda message: None)
    source_dir = resolve_input(input_path, revision=revision, cache_dir=cache_dir).resolve()
    check_outside(source_dir, output)
    source = read_original(source_dir)
    plan = plan_conversion(source, torch_dtype, codec_config=codec_config, without_codec=without_codec)
    split = shard_split(plan.tensors, max_shard_size)

    needed = split.metadata["total_size"] + sum(  # the weights, and about as much as the other files take now
        path.stat().st_size for path in source_dir.iterdir() if path.is_file() and path.suffix != ".safetensors")
    with staged_folder(output, "converting", overwrite=overwrite, needed=needed) as staging:
        shards, max_abs_diff, tolerance = _write_and_verify(
            source, plan, staging, split, verify=verify, dtype=dtype, base_model=base_model, repo_id=repo_id,
            progress=progress,
        )
    return ConversionResult(output, len(plan.tensors), shards, plan.ignored, plan.config.tie_word_embeddings,
                            max_abs_diff, tolerance)


__all__ = [
    "ConversionError",
    "ConversionPlan",
    "ConversionResult",
    "build_config",
    "convert",
    "plan_conversion",
]

