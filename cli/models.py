# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""What a model name means, and loading it: the command line's `--model`.

A name is `tiny-random` (a tiny randomly initialised model built once from `testing/tiny` into
`$HIGGS_V3_CACHE/tiny-random`, default `$HF_HOME/higgs_v3/tiny-random`, so the commands run with no download), a
folder with a converted checkpoint, a folder with an original one (converted once into the converter's cache), or a
Hub repo id (downloaded; converted once when it holds the original format). Only the standard library is imported at
module level: torch and transformers come with the first model actually loaded. A name that means nothing raises a
`ValueError` that says what is accepted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from ..conversion.original_format import ORIGINAL_MODEL_TYPE, read_json  # standard library only


DEFAULT_MODEL = "bosonai/higgs-audio-v3-tts-4b"
TINY_RANDOM = "tiny-random"
# The random demo model never ends its speech by itself, so its generation config caps a chunk at 3 s of audio.
TINY_RANDOM_MAX_SECONDS = 3
# Nor would another seed end it: its bad takes are not redone unless retries / --retries asks (redoing noise only costs
# time). Saved into its generation config (`longform_higgs_v3.RETRIES_FIELD`), so the library, the command line and the
# server all take it from the model (`default_retries`).
TINY_RANDOM_RETRIES = 0


# ------------------------------------------------------------------------------------------------- the tiny random model
def cache_dir() -> Path:
    """`$HIGGS_V3_CACHE`, else `$HF_HOME/higgs_v3` (next to the converter's cache)."""
    if os.environ.get("HIGGS_V3_CACHE"):
        return Path(os.environ["HIGGS_V3_CACHE"]).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HOME) / "higgs_v3"


def tiny_random_dir() -> Path:
    """Where `--model tiny-random` lives: `$HIGGS_V3_TINY_RANDOM`, else `cache_dir() / "tiny-random"`."""
    if os.environ.get("HIGGS_V3_TINY_RANDOM"):
        return Path(os.environ["HIGGS_V3_TINY_RANDOM"]).expanduser()
    return cache_dir() / TINY_RANDOM


def _tiny_fingerprint(seed: int) -> str:
    """A hash of the seed, the demo limit and every module of this package: a code change rebuilds the model."""
    digest = hashlib.sha256(f"seed={seed}|max_seconds={TINY_RANDOM_MAX_SECONDS}".encode())
    package = Path(__file__).resolve().parents[1]
    modules = [*package.glob("*.py"), *(p for p in package.glob("*/*.py") if (p.parent / "__init__.py").is_file())]
    for path in sorted(modules):  # the package's modules and its sub-packages'
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def write_tiny_random(directory: str | os.PathLike, seed: int = 0, with_codec: bool = True) -> Path:
    """`testing.tiny.make_tiny_random_model` plus a demo generation config: at most `TINY_RANDOM_MAX_SECONDS` of
    audio per generation (random weights never emit the end of speech) and `TINY_RANDOM_RETRIES` redone takes."""
    from transformers import GenerationConfig

    from ..configuration_higgs_v3 import HiggsAudioV3Config
    from ..conversion.folders import follow_umask
    from ..longform_higgs_v3 import RETRIES_FIELD
    from ..testing.tiny import make_tiny_random_model

    directory = make_tiny_random_model(directory, seed=seed, with_codec=with_codec)
    generation_config = GenerationConfig.from_pretrained(directory)
    spec = HiggsAudioV3Config.from_pretrained(directory).audio_spec
    generation_config.max_new_tokens = spec.rows_for_seconds(TINY_RANDOM_MAX_SECONDS)
    setattr(generation_config, RETRIES_FIELD, TINY_RANDOM_RETRIES)
    generation_config.save_pretrained(directory)
    follow_umask(directory)  # safetensors' writer leaves 0600: another user could not load it
    return Path(directory)


def check_tiny_random_target(target: Path, stamp: Path) -> None:
    """The demo model is (re)built into `target` only when it is absent, empty, or a demo model built before (`stamp`
    in it): a file or another folder named by `HIGGS_V3_TINY_RANDOM` is refused, untouched (a rebuild replaces it)."""
    named = "$HIGGS_V3_TINY_RANDOM" if os.environ.get("HIGGS_V3_TINY_RANDOM") else "The tiny random model's folder"
    if target.exists() and not target.is_dir():
        raise ValueError(f"{named} ({str(target)!r}) is a file; it must name a folder for the tiny random demo model "
                         "(absent, empty, or built there before). The file was left as it is.")
    if target.is_dir() and not stamp.is_file() and any(target.iterdir()):
        raise ValueError(f"{named} ({str(target)!r}) is a folder that holds something else than the tiny random demo "
                         "model; name an absent or empty folder (building the model there would replace it). The "
                         "folder was left as it is.")


def ensure_tiny_random(log=None) -> Path:
    """The tiny random demo model, built once into `tiny_random_dir()` (rebuilt when this package's code changed), with
    `conversion.folders.staged_folder` (so no process ever sees half a model) under a lock on its parent folder (so
    concurrent processes build it once)."""
    target = tiny_random_dir()
    stamp, fingerprint = target / ".higgs_v3_tiny_random", _tiny_fingerprint(seed=0)

    def current() -> bool:
        return stamp.is_file() and stamp.read_text().strip() == fingerprint

    if current():  # before any import of torch (the writers'): `higgs-v3 tags` needs none
        return target
    from ..conversion.folders import folder_lock, staged_folder

    check_tiny_random_target(target, stamp)
    with folder_lock(target.parent):
        if current():  # built by a concurrent run while this one waited
            return target
        check_tiny_random_target(target, stamp)
        if log is not None:
            log(f"Building the tiny random demo model in {target} (once; a few seconds)...")
        with staged_folder(target, "building") as staging:
            write_tiny_random(staging, seed=0)
            (staging / stamp.name).write_text(fingerprint + "\n")
    return target


def tiny_random() -> str:
    """The folder of the tiny demo model, by name in a notebook (`higgs_v3.tiny_random()`; `--model tiny-random` on
    the command line): random weights, so **its audio is noise**; built once on first use (`ensure_tiny_random`),
    offline. Load it as any converted repo: `AutoModel.from_pretrained(path, trust_remote_code=True)`, and the
    processor or `pipeline("text-to-speech", model=path, trust_remote_code=True)` likewise."""
    return str(ensure_tiny_random())


# ------------------------------------------------------------------------------------------------- model names
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def resolve_model(name: str, log=None) -> Path:
    """A folder with a converted checkpoint for `name`: 'tiny-random', a converted or original folder (an original
    one is converted once into the converter's cache), or a Hub repo id (downloaded, converted when original)."""
    if name == TINY_RANDOM:
        return ensure_tiny_random(log)
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"Model {name!r} is a file; give a folder with a checkpoint (config.json), a Hub repo id or "
                           f"{TINY_RANDOM!r}.")
        if not (path / "config.json").is_file():
            raise ValueError(f"Model folder {name!r} has no config.json; give a folder with a converted or original Higgs "
                           "Audio v3 checkpoint.")
        if read_json(path / "config.json", "The model config").get("model_type") == ORIGINAL_MODEL_TYPE:
            return _convert_original(str(path), log)
        return path
    if not _HUB_ID.match(name):
        raise ValueError(f"Unknown model {name!r}: it is not {TINY_RANDOM!r}, an existing folder, or a Hub repo id "
                       "(owner/name).")
    from huggingface_hub import hf_hub_download, snapshot_download

    from ..conversion.repo import hub_offline_reason

    offline = hub_offline_reason()  # a reason when the Hub cannot be used: then the local cache only, no retries
    what = f"the default model {name!r}" if name == DEFAULT_MODEL else f"model {name!r}"
    try:
        config_path = Path(hf_hub_download(name, "config.json", local_files_only=offline is not None))
    except Exception as error:  # unknown repo, no access, not cached: one line each
        if offline is not None:
            raise ValueError(
                f"Cannot load {what}: {offline}, and it is not in the local Hugging Face cache. Connect and run again, "
                f"or give a local folder with --model (or {TINY_RANDOM!r} for the demo model)."
            ) from error
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"Cannot load {what} from the Hub ({reason}).") from error
    if read_json(config_path, "The model config").get("model_type") == ORIGINAL_MODEL_TYPE:
        return _convert_original(name, log)
    return Path(snapshot_download(name, local_files_only=offline is not None))


def _convert_original(name: str, log) -> Path:
    from ..conversion.cache import converted_path

    return converted_path(name, progress=log)  # which says so only when it converts


def _device(name: str):
    import torch

    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError) as error:
        raise ValueError(f"Unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps.") from error
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"Device {name!r} was asked for but CUDA is not available; use --device cpu.")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"Device {name!r} was asked for but MPS is not available; use --device cpu.")
    return device


def added_tokens(path: Path) -> dict[str, int] | None:
    """`{token: id}` of the added tokens in the model folder's `tokenizer.json`, read as JSON (no tokenizer, no torch);
    None when the folder has no such file (the processor then says what the tokenizer holds)."""
    file = Path(path) / "tokenizer.json"
    if not file.is_file():
        return None
    tokens = read_json(file, "The tokenizer file").get("added_tokens", [])
    return {token["content"]: int(token["id"]) for token in tokens if isinstance(token, dict) and "content" in token}


def load_processor(path: Path):
    """The installed package's processor of the folder `path`; a damaged tokenizer or processor file is a
    `ValueError` that names the folder."""
    try:
        return _load_processor(path)
    except ValueError as error:
        reason = " ".join(str(error).split())
        if str(path) in reason:
            raise
        raise ValueError(f"Could not read the tokenizer or processor files in {str(path)!r} ({reason}).") from error


def _load_processor(path: Path):
    from ..processing_higgs_v3 import HiggsAudioV3Processor

    if (path / "processor_config.json").is_file():
        return HiggsAudioV3Processor.from_pretrained(str(path), trust_remote_code=False)
    from transformers import AutoTokenizer

    from ..configuration_higgs_v3 import HiggsAudioV3Config

    tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    return HiggsAudioV3Processor.from_model_config(tokenizer, HiggsAudioV3Config.from_pretrained(str(path)))


def auto_dtype(device) -> str:
    """The language model's dtype for `--dtype auto` on `device` (a `torch.device`): bfloat16 on CUDA, float32
    elsewhere (on a CPU, bfloat16 matmuls are several times slower than float32 for small models, and MPS support
    for bfloat16 varies). The codec runs in float32 either way."""
    return "bfloat16" if device.type == "cuda" else "float32"


def check_generation_config(path: Path) -> None:
    """Refuse a `generation_config.json` in `path` that cannot be read as a JSON object: transformers' `from_pretrained`
    takes an unreadable one for a missing one and silently generates with its default settings instead (greedy, 20
    new tokens), not the repo's. An `OSError` naming the file; no file is fine (the model's defaults apply)."""
    file = Path(path) / "generation_config.json"
    if not file.is_file():
        return
    try:
        value = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise OSError(f"{str(file)!r} cannot be read as JSON ({error}); fix it, or delete it to generate with the "
                      "model's default settings (transformers would silently drop the repo's).") from error
    if not isinstance(value, dict):
        raise OSError(f"{str(file)!r} holds a JSON {type(value).__name__}, not an object of generation settings; fix "
                      "it, or delete it to generate with the model's default settings.")


def load_model(path: Path, device: str, dtype: str):
    """The installed package's model class (no remote code is run) on `device`, in `dtype` ("auto": `auto_dtype`).
    A damaged `generation_config.json` is refused (`check_generation_config`), not replaced by defaults."""
    from ..modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    check_generation_config(path)
    target = _device(device)
    dtype = auto_dtype(target) if dtype == "auto" else dtype
    try:
        model = HiggsAudioV3ForConditionalGeneration.from_pretrained(str(path), dtype=dtype)
    except Exception as error:
        from ..conversion.original_format import first_permission_problem

        if isinstance(error, OSError | ValueError) or type(error).__name__ == "SafetensorError":
            if (problem := first_permission_problem(path)) is not None:  # safetensors calls it a missing file
                raise problem from error
        if type(error).__name__ != "SafetensorError":  # safetensors' own error for a truncated or foreign file
            raise
        reason = " ".join(str(error).split())
        raise OSError(f"The weights in {str(path)!r} are damaged ({reason}); convert or download them again.") from error
    return model.to(target).eval()


__all__ = [
    "DEFAULT_MODEL",
    "TINY_RANDOM",
    "TINY_RANDOM_RETRIES",
    "TINY_RANDOM_MAX_SECONDS",
    "added_tokens",
    "auto_dtype",
    "cache_dir",
    "check_generation_config",
    "check_tiny_random_target",
    "ensure_tiny_random",
    "load_model",
    "load_processor",
    "resolve_model",
    "tiny_random",
    "tiny_random_dir",
    "write_tiny_random",
]
