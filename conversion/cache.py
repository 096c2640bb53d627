# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""`from_original`: an original checkpoint converted once into a local cache and loaded from there; and what the auto
classes say about an original folder.

The original repo (`bosonai/higgs-audio-v3-tts-4b`) has no `auto_map`, so `AutoModel` cannot load it.
`converted_path(repo_or_dir)` converts it once (`convert_checkpoint.convert`, verified) into
`$HF_HOME/higgs_v3/converted/<name>-<key>`, the key naming the converter version, the dtype, the codec config and the
source's files; an entry ends with a completion marker (`conversion.folders.write_complete`), so a damaged entry is
reported and converted again, and concurrent calls convert an entry once (`conversion.folders.folder_lock`).
`from_original` loads the model (and with `with_processor=True` the processor) from that folder.

Once this module is imported (`higgs_v3.from_original` imports it), `AutoProcessor` / `AutoModel` /
`AutoModelForTextToWaveform.from_pretrained` on an original folder raise an error pointing to `from_original`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from transformers import PretrainedConfig
from transformers.utils import logging

from ..convert_checkpoint import CONVERTER_VERSION, convert
from .folders import check_complete, clean_stale_siblings, folder_lock, write_complete
from .original_format import ORIGINAL_MODEL_TYPE, resolve_input


logger = logging.get_logger(__name__)


def default_cache_dir() -> Path:
    """Where `from_original` keeps converted checkpoints: `$HF_HOME/higgs_v3/converted`."""
    from huggingface_hub import constants

    return Path(constants.HF_HOME) / "higgs_v3" / "converted"


def _cache_key(source_dir: Path, dtype: str, codec_config: dict | None) -> str:
    """Converter version, dtype, codec config, the source path and its files' names, sizes and mtimes."""
    codec = json.dumps(codec_config, sort_keys=True)
    digest = hashlib.sha256(f"{CONVERTER_VERSION}|{dtype}|{codec}|{source_dir.resolve()}".encode())
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
    codec_config: dict | None = None,
    verify: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Convert an original checkpoint once into `cache_dir` (default `default_cache_dir()`) and return the converted
    folder; later calls with the same source (same files, same revision), dtype and codec config return the cached
    folder at once. An entry ends with a completion marker (sizes and sha256 of its files,
    `conversion/folders`): an entry without it, or with a file missing or of another size, is reported in one
    warning and converted again; concurrent calls for one entry convert it once (a lock on the cache folder).
    `progress`, when given, hears that a conversion starts (only then: a cached entry is returned silently) and
    each of its steps (`convert`'s)."""
    source_dir = resolve_input(repo_or_dir, revision=revision).resolve()
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache / f"{source_dir.name}-{_cache_key(source_dir, dtype, codec_config)}"
    if target.exists() and check_complete(target) is None:
        clean_stale_siblings(target)  # what a killed earlier call left beside a complete entry
        return target
    with folder_lock(cache):  # concurrent calls for one entry convert it once
        clean_stale_siblings(target)
        if target.exists():
            problem = check_complete(target)
            if problem is None:  # converted by a concurrent call while this one waited
                return target
            logger.warning(f"The cached conversion {str(target)!r} is damaged ({problem}); converting it again.")
        if progress is not None:
            progress(f"{source_dir.name} is an original checkpoint: converting it once into the local cache "
                     f"{str(target)!r} (this takes a while; later runs load it from there)...")
        convert(source_dir, target, dtype=dtype, overwrite=True, verify=verify, codec_config=codec_config,
                progress=progress)
        write_complete(target)
    return target


def from_original(
    repo_or_dir: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    *,
    revision: str | None = None,
    dtype: str = "bfloat16",
    codec_config: dict | None = None,
    verify: bool = True,
    with_processor: bool = False,
    progress: bool = True,
    **from_pretrained_kwargs,
):
    """Load the original checkpoint (Hub id such as `bosonai/higgs-audio-v3-tts-4b`, or a local folder) as a
    `HiggsAudioV3ForConditionalGeneration`: converted and verified once into a local cache, then loaded from there.
    With `with_processor=True`, returns the pair `(model, processor)` (the `HiggsAudioV3Processor` of the same
    converted folder); else the model alone. The first call's conversion says each step on stderr (`progress=False`:
    silent).

    >>> model, processor = from_original("bosonai/higgs-audio-v3-tts-4b", with_processor=True)  # doctest: +SKIP
    >>> model.generate(**processor("Hello there."), return_dict_in_generate=True).audio  # doctest: +SKIP
    """
    from ..modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    path = converted_path(repo_or_dir, cache_dir, revision=revision, dtype=dtype, codec_config=codec_config,
                          verify=verify, progress=_to_stderr if progress else None)
    from_pretrained_kwargs.setdefault("dtype", "auto")
    model = HiggsAudioV3ForConditionalGeneration.from_pretrained(path, **from_pretrained_kwargs)
    if not with_processor:
        return model
    from ..processing_higgs_v3 import HiggsAudioV3Processor

    return model, HiggsAudioV3Processor.from_pretrained(path)


def _to_stderr(message: str) -> None:
    """`from_original`'s progress: a conversion takes minutes on the real checkpoint, so each step is a line on stderr
    (as transformers' own progress bars are), never on stdout."""
    print(f"from_original: {message}", file=sys.stderr, flush=True)


# *** Higgs v3 specific: the original repo has no `auto_map`, so `AutoProcessor.from_pretrained` on it would quietly
# return a plain tokenizer (which builds no TTS prompt). Once this module is imported (`higgs_v3.from_original` imports
# it), its model type is known to the auto classes and `AutoProcessor` / `AutoModel` raise an error that says what to
# do.
# Without this package imported, transformers cannot know the original format (nothing of ours is in that repo). ***
class HiggsAudioV3OriginalFormatConfig(PretrainedConfig):
    """The original checkpoint's config as the auto classes see it (`model_type` "higgs_multimodal_qwen3"): only a
    marker, so that `AutoProcessor` can refuse the folder (see `HiggsAudioV3OriginalFormatProcessor`)."""

    model_type = ORIGINAL_MODEL_TYPE


def _original_format_error(name: str, what: str) -> ValueError:
    return ValueError(
        f"{name!r} is an original Higgs Audio v3 checkpoint, which has no {what}: load it with "
        f"`model, processor = higgs_v3.from_original({name!r}, with_processor=True)` (converted once into a local "
        "cache), or convert it with convert_checkpoint.py and load the converted folder."
    )


class HiggsAudioV3OriginalFormatProcessor:
    """What `AutoProcessor.from_pretrained` finds for an original-format checkpoint: an error pointing to
    `from_original` and the converter."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        raise _original_format_error(str(pretrained_model_name_or_path), "processor")


class HiggsAudioV3OriginalFormatModel:
    """What `AutoModel` / `AutoModelForTextToWaveform` find for an original-format checkpoint: the same error (in place
    of transformers' list of every configuration class it knows)."""

    config_class = HiggsAudioV3OriginalFormatConfig

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        raise _original_format_error(str(pretrained_model_name_or_path), "model code for transformers (no auto_map)")


def _register_original_format() -> None:
    from transformers import AutoConfig, AutoModel, AutoModelForTextToWaveform, AutoProcessor

    try:
        AutoConfig.register(ORIGINAL_MODEL_TYPE, HiggsAudioV3OriginalFormatConfig)
        AutoProcessor.register(HiggsAudioV3OriginalFormatConfig, HiggsAudioV3OriginalFormatProcessor)
        AutoModel.register(HiggsAudioV3OriginalFormatConfig, HiggsAudioV3OriginalFormatModel)
        AutoModelForTextToWaveform.register(HiggsAudioV3OriginalFormatConfig, HiggsAudioV3OriginalFormatModel)
    except ValueError:  # already registered (a second import of this package)
        pass


_register_original_format()
# *** end Higgs v3 specific ***


__all__ = [
    "HiggsAudioV3OriginalFormatConfig",
    "HiggsAudioV3OriginalFormatModel",
    "HiggsAudioV3OriginalFormatProcessor",
    "converted_path",
    "default_cache_dir",
    "from_original",
]
