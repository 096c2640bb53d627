# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Writing a converted Higgs Audio v3 repo: the weights shard by shard, the other files, the completeness check and the
upload. The converter (`convert_checkpoint.py`) plans what goes where; this module writes it.

- Weights: `huggingface_hub.split_torch_state_dict_into_shards` plans the shards on meta tensors (`shard_split`);
  `write_weights` reads, checks (NaN/inf) and casts one shard's tensors at a time and writes them with
  `safetensors.torch.save_file`, then the index from the split; `verify_written_tensors` re-reads them bit for bit.
- The rest (`write_repo_files`): `config.json` with `auto_map`, `generation_config.json`
  (`generation_higgs_v3.default_generation_config`), the remote code (`remote_code_files`), the tokenizer files byte
  for byte (the chat template excepted: the TTS one replaces ChatML), the processor's files, the source's
  LICENSE/NOTICE files; `write_model_card` writes `README.md`.
- `check_output_folder`: every file a `trust_remote_code=True` load needs is there. The Hub: `hub_offline_reason` (a
  short probe instead of retries; its home is `original_format`, whose download uses it), `check_hub_push` (before
  converting), `push_folder_to_hub`
  (`HfApi.upload_folder`; a failed upload is a `PushError`).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..configuration_higgs_v3 import HiggsAudioV3Config
from ..generation_higgs_v3 import default_generation_config
from .original_format import (  # HUB_PROBE_SECONDS, hub_offline_reason: re-exported
    HUB_PROBE_SECONDS,
    hub_offline_reason,
    ORIGINAL_REPO_ID,
    ConversionError,
    OriginalCheckpoint,
    PushError,
    SourceTensor,
    read_header,
    read_json,
    read_rows,
)


SUPPORTED_TRANSFORMERS: str = ">=5.5.0,<5.25"
"""The transformers range the remote code is tested with (pinned in the model card)."""

ORIGINAL_CHAT_TEMPLATE_FILE = "original_chat_template.jinja"
"""Where a converted repo keeps the original's chat template (ChatML), which `chat_template.jinja` replaces."""
TOKENIZER_FILES: tuple[str, ...] = (
    "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt",
)
"""Tokenizer files copied byte for byte when the source has them (the first two are required)."""

LICENSE_FILE_PATTERN = re.compile(r"^(LICEN[CS]E|NOTICE)(\..*)?$", re.IGNORECASE)

AS_HEAD: str = "::as_head"
"""Suffix of a planned source key whose embedding is copied into an untied head."""

_TORCH_DTYPES: dict[str, torch.dtype] = {
    "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
}

WEIGHT_DTYPES: dict[str, torch.dtype] = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
"""The `--dtype` values of the converter (the language model's; the codec stays float32) and of the export (every
tensor's): one table for both directions, read with `weight_dtype`."""


@dataclass(frozen=True)
class PlannedTensor:
    """One tensor of the converted checkpoint: its name, its source key (`EMBEDDING::as_head` for an embedding copied
    into an untied head), its output dtype and shape."""

    target: str
    source: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def source_key(self) -> str:
        return self.source.removesuffix(AS_HEAD)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


# ---------------------------------------------------------------------------------------------------------- weights
def weight_dtype(dtype: str) -> torch.dtype:
    """The torch dtype of a `--dtype` name (`WEIGHT_DTYPES`); a `ConversionError` naming the accepted ones."""
    if dtype not in WEIGHT_DTYPES:
        raise ConversionError(f"dtype {dtype!r} is not supported; use one of {', '.join(WEIGHT_DTYPES)}.")
    return WEIGHT_DTYPES[dtype]


def check_shard_size(max_shard_size: int | str) -> None:
    """Refuse a `--max-shard-size` that `huggingface_hub` cannot parse or that is below 2 bytes (probed with two
    one-byte meta tensors, which it puts into one shard for any usable size)."""
    from huggingface_hub import split_torch_state_dict_into_shards

    probe = {name: torch.empty(1, dtype=torch.uint8, device="meta") for name in ("a", "b")}
    accepted = "use e.g. 5GB or 500MB (units KB, MB, GB, TB, powers of 10) or a number of bytes"
    try:
        too_small = split_torch_state_dict_into_shards(probe, max_shard_size=max_shard_size).is_sharded
    except (ValueError, TypeError) as error:
        raise ConversionError(f"--max-shard-size {max_shard_size!r} is not a size ({error}); {accepted}.") from error
    if too_small:
        raise ConversionError(f"--max-shard-size {max_shard_size!r} is not a positive size; {accepted}.")


def shard_split(tensors: list[PlannedTensor], max_shard_size: int | str):
    """`huggingface_hub`'s `StateDictSplit` for the planned tensors (computed on meta tensors: no data)."""
    from huggingface_hub import split_torch_state_dict_into_shards

    meta = {t.target: torch.empty(t.shape, dtype=t.dtype, device="meta") for t in tensors}
    return split_torch_state_dict_into_shards(meta, max_shard_size=max_shard_size)


def _all_finite(values: torch.Tensor) -> bool:
    """No NaN and no inf (via `aminmax`, which propagates both and is much faster than `isfinite` on bf16)."""
    if values.numel() == 0:
        return True
    low, high = torch.aminmax(values)
    return bool(torch.isfinite(low) & torch.isfinite(high))


def _checked(tensor: SourceTensor, values: torch.Tensor, planned: PlannedTensor) -> torch.Tensor:
    """`values` of `tensor` cast to `planned.dtype`: NaN/inf (corruption, or a value the output dtype cannot hold)
    raise a `ConversionError`. An embedding copied into a head is a copy (safetensors refuses shared memory)."""
    if not _all_finite(values):
        raise ConversionError(
            f"Tensor {tensor.name!r} in {tensor.file.name} holds NaN or infinite values; the file is corrupted: "
            "download it again."
        )
    converted = values.to(planned.dtype)
    if not _all_finite(converted):
        raise ConversionError(
            f"Tensor {tensor.name!r} has values outside the range of {planned.dtype} (largest |value| "
            f"{float(values.float().abs().max()):.4g}); convert with --dtype bfloat16 or float32 instead."
        )
    return converted.clone() if planned.source.endswith(AS_HEAD) else converted.contiguous()


def write_weights(source: OriginalCheckpoint, tensors: list[PlannedTensor], output: Path, split) -> list[str]:
    """Write the shards of `split` (a `StateDictSplit`) one at a time with `safetensors.torch.save_file`: a shard's
    source tensors are read (each from a mapping of its own), checked and cast one by one, the shard written and
    released before the next shard is read: about one converted shard in memory at once. Then `model.safetensors.index.json` from the split when it is sharded. Returns the shard file
    names."""
    from safetensors.torch import save_file

    planned = {t.target: t for t in tensors}
    for filename, names in split.filename_to_tensors.items():
        sources = [source.tensors[planned[name].source_key] for name in names]
        shard = {name: _checked(tensor, read_rows(tensor), planned[name]) for name, tensor in zip(names, sources)}
        save_file(shard, str(output / filename), metadata={"format": "pt"})
        del shard  # before the next shard is read
    if split.is_sharded:
        index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
        (output / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return list(split.filename_to_tensors)


def verify_written_tensors(
    source: OriginalCheckpoint, tensors: list[PlannedTensor], output: Path, shards: list[str]
) -> None:
    """Re-read every written tensor (one at a time) and compare it bit for bit with its source cast to its dtype."""
    written = {name: tensor for shard in shards for name, tensor in read_header(output / shard).items()}
    if set(written) != {t.target for t in tensors}:
        raise ConversionError(f"The written shards hold {len(written)} tensors, the plan has {len(tensors)}.")
    for planned in tensors:
        tensor, original = written[planned.target], source.tensors[planned.source_key]
        if tensor.shape != planned.shape or _TORCH_DTYPES.get(tensor.dtype) != planned.dtype:
            raise ConversionError(
                f"{planned.target} was written as {tensor.dtype} {tensor.shape}, expected {planned.dtype} "
                f"{planned.shape}."
            )
        if not torch.equal(read_rows(tensor), read_rows(original).to(planned.dtype)):
            raise ConversionError(f"{planned.target} in {tensor.file.name} differs from its source {original.name}.")


# ------------------------------------------------------------------------------------------------------ other files
def remote_code_files() -> list[Path]:
    """The `.py` files a converted repo needs next to `config.json`: the modules `auto_map` names (config, model,
    and the processor when it exists) and everything they import relatively, recursively."""
    from transformers.dynamic_module_utils import get_relative_import_files

    here = Path(__file__).resolve().parents[1]  # the package root: the remote code
    roots = [here / "configuration_higgs_v3.py", here / "modeling_higgs_v3.py"]
    if (here / "processing_higgs_v3.py").is_file():
        roots.append(here / "processing_higgs_v3.py")
    files = set(roots)
    for root in roots:
        files.update(Path(p).resolve() for p in get_relative_import_files(str(root)))
    return sorted(files)


def save_processor_files(output_dir: str | os.PathLike, config: HiggsAudioV3Config, tokenizer=None) -> list[str]:
    """Write the processor's own files (`processor_config.json`, with its `auto_map`) and the TTS chat template
    (`chat_template.jinja`: `processing_higgs_v3.TTS_CHAT_TEMPLATE`, in place of the original's ChatML, which renders
    no TTS prompt; the original's is kept as `original_chat_template.jinja`) into `output_dir`, whose other tokenizer
    files stay exactly as they are. The processor is built
    from those tokenizer files and `config` (or from `tokenizer`, when the caller has those files loaded already).
    Returns the names written (none when `processing_higgs_v3.py` is not available)."""
    try:
        from ..processing_higgs_v3 import TTS_CHAT_TEMPLATE, HiggsAudioV3Processor
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
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        processor = HiggsAudioV3Processor.from_model_config(tokenizer, config)
        processor.save_pretrained(str(saved_dir))
        written = []
        for path in sorted(saved_dir.iterdir()):
            if path.name in TOKENIZER_FILES or path.suffix == ".py" or not path.is_file():
                continue  # the tokenizer files stay byte-identical; code files are copied separately
            shutil.copyfile(path, output_dir / path.name)
            written.append(path.name)
    template = output_dir / "chat_template.jinja"
    if template.is_file() and template.read_text(encoding="utf-8") != TTS_CHAT_TEMPLATE:
        # The original's template is kept under a name transformers does not read, for the export back to the
        # original layout (conversion.export), which the serving engines read.
        os.replace(template, output_dir / ORIGINAL_CHAT_TEMPLATE_FILE)
        written.append(ORIGINAL_CHAT_TEMPLATE_FILE)
    template.write_text(TTS_CHAT_TEMPLATE, encoding="utf-8")
    return sorted(written + ["chat_template.jinja"])


def _license_front_matter(source_dir: Path, copied_license: bool) -> tuple[str, str]:
    """`(license_name, license_link)`: from the source model card's front matter when it says, else defaults."""
    name, link = "higgs-audio-v3-license", f"https://huggingface.co/{ORIGINAL_REPO_ID}/blob/main/LICENSE"
    readme = source_dir / "README.md"
    front = re.match(r"^---\n(.*?)\n---", readme.read_text(encoding="utf-8", errors="replace"), re.DOTALL) if (
        readme.is_file()
    ) else None
    for key, value in re.findall(r"^(license_name|license_link):\s*(.+?)\s*$", front.group(1) if front else "", re.M):
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
pip install "transformers{transformers_range}" torch safetensors soundfile
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

Long texts (split into chunks, one stable voice) and dialogues, and the chat template:

```python
speech = processor.synthesize_long(model, open("chapter.txt").read(), seed=0)
speech.save("chapter.wav")
talk = processor.synthesize_dialogue(model, "[Ann] Hi Bob!\\n[Bob] Hello Ann.", auto_voices=True)

voice = model.encode_reference("me.wav", text="What I say in it.")  # clone a voice
conversation = [
    {{"role": "user", "content": [{{"type": "audio", "audio": voice}}]}},
    {{"role": "user", "content": [{{"type": "text", "text": "Hello in my voice."}}]}},
]
inputs = processor.apply_chat_template(conversation, tokenize=True, return_dict=True)
output = model.generate(**inputs, seed=0, return_dict_in_generate=True, monitor_progress=True)
```

Or with the pipeline:

```python
from transformers import pipeline

tts = pipeline("text-to-speech", model="{repo_id}", trust_remote_code=True)
speech = tts("Hello! This is Higgs Audio v3.")
sf.write("hello.wav", speech["audio"], speech["sampling_rate"])
```

Sampling defaults (`generation_config.json`) are those of the official server: temperature 1.0, no top-k, no top-p,
up to {max_new_tokens} code rows (about {max_seconds} s of audio). Voice cloning takes a reference clip and, optionally,
its transcript.

Supported transformers versions: `{transformers_range}` (tested with the oldest and the newest of that range).
"""


def write_model_card(
    output: Path,
    source_dir: Path,
    config: HiggsAudioV3Config,
    *,
    dtype: str,
    base_model: str,
    max_abs_diff: float | None,
    copied_license: bool,
    repo_id: str | None = None,
) -> None:
    """Write the model card `README.md` (front matter, license terms, usage with `repo_id` or a path placeholder)."""
    license_name, license_link = _license_front_matter(source_dir, copied_license)
    max_new_tokens = default_generation_config(config).max_new_tokens
    verification = (
        "This folder was written without the numerical verification (`--no-verify`)."
        if max_abs_diff is None
        else "The conversion was verified numerically: the audio logits of a fixed prompt with reference audio "
        f"placeholders match a float32 forward computed directly from the original tensors (max |diff| "
        f"{max_abs_diff:.2e})."
    )
    text = MODEL_CARD.format(
        repo_id=repo_id or "path/to/this/folder",
        license_name=license_name,
        license_link=license_link,
        base_model=base_model,
        dtype=dtype,
        verification=verification,
        max_new_tokens=max_new_tokens,
        max_seconds=round(max_new_tokens / config.frame_rate),
        transformers_range=SUPPORTED_TRANSFORMERS,
    )
    (output / "README.md").write_text(text, encoding="utf-8")


FINETUNED_MODEL_CARD = """---
library_name: transformers
pipeline_tag: text-to-speech
license: other
license_name: {license_name}
license_link: {license_link}
tags:
- text-to-speech
- audio
- higgs-audio
- custom_code
---

# Higgs Audio v3 TTS, fine-tuned

Fine-tuned from `{base_model}` with higgs-v3 (the weights, the tokenizer, the processor, the codec and the model code,
`trust_remote_code=True`). The weights derive from Boson AI's and come under the original license ({license_name},
see [LICENSE]({license_link})): **non-commercial use only**. The model code in the `.py` files is Apache-2.0.

```python
from transformers import AutoModel, AutoProcessor

model = AutoModel.from_pretrained("path/to/this/folder", trust_remote_code=True, dtype="auto")
processor = AutoProcessor.from_pretrained("path/to/this/folder", trust_remote_code=True)
output = model.generate(**processor("Hello in the new voice."), seed=0, return_dict_in_generate=True)
```
"""


def write_finetuned_model_card(output: Path, base: Path | None, base_model: str) -> None:
    """The model card `README.md` of a fine-tuned repo: the base's license terms (its card's front matter, else the
    original's), what it was fine-tuned from, and how to load it."""
    copied_license = (output / "LICENSE").is_file()
    license_name, license_link = _license_front_matter(base if base is not None else output, copied_license)
    text = FINETUNED_MODEL_CARD.format(license_name=license_name, license_link=license_link, base_model=base_model)
    (output / "README.md").write_text(text, encoding="utf-8")


def check_output_folder(output: Path) -> None:
    """Raise a `ConversionError` unless `output` holds a complete converted repo: config with `auto_map`, every code
    file the config's and the processor's `auto_map` name (and their relative imports, recursively), weights,
    tokenizer and generation config."""
    from transformers.dynamic_module_utils import get_relative_imports

    problems = [f"{name} is missing" for name in ("config.json", "generation_config.json", "tokenizer.json",
                                                  "tokenizer_config.json") if not (output / name).is_file()]
    config = read_json(output / "config.json", "The converted config") if (output / "config.json").is_file() else {}
    auto_map = config.get("auto_map") or {}
    problems += [f"auto_map has no {key}" for key in ("AutoConfig", "AutoModel", "AutoModelForTextToWaveform")
                 if key not in auto_map]
    references = list(auto_map.values())
    if (output / "processor_config.json").is_file():
        processor_config = read_json(output / "processor_config.json", "The processor config")
        references += (processor_config.get("auto_map") or {}).values()
    pending, seen = sorted({reference.split(".")[0] + ".py" for reference in references}), set()
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


def write_repo_files(source_dir: Path, config: HiggsAudioV3Config, output: Path) -> bool:
    """Everything but the weights and the card into `output`: config, remote code, generation config, tokenizer
    files (byte for byte, but for the TTS chat template in place of ChatML), processor files and the source's
    LICENSE/NOTICE files. Returns whether a LICENSE was
    copied (the card then links to it)."""
    config.save_pretrained(output)
    for path in remote_code_files():
        shutil.copyfile(path, output / path.name)
    default_generation_config(config).save_pretrained(output)
    for name in TOKENIZER_FILES:
        if (source_dir / name).is_file():
            shutil.copyfile(source_dir / name, output / name)
    save_processor_files(output, config)
    licenses = [p for p in sorted(source_dir.iterdir()) if p.is_file() and LICENSE_FILE_PATTERN.match(p.name)]
    for path in licenses:
        shutil.copyfile(path, output / path.name)
    return any(p.name.upper().startswith("LICEN") for p in licenses)


# -------------------------------------------------------------------------------------------------------------- hub
def check_hub_push(repo_id: str, token: str | None = None, done: str = "converted") -> str:
    """Before a long conversion (or fine-tuning: `done="trained"`): the Hub answers and a token is there and valid
    (`HfApi.whoami`). Returns the user name; raises a `ConversionError` that says what to do."""
    from huggingface_hub import HfApi, get_token

    offline = hub_offline_reason()
    if offline is not None:
        raise ConversionError(f"--push-to-hub {repo_id} needs the Hub, but {offline}; nothing was {done}. Connect "
                              "and run again, or run without --push-to-hub and upload the folder later.")
    if token is None and get_token() is None:
        raise ConversionError(f"--push-to-hub {repo_id} needs a Hugging Face login, and there is none; nothing was "
                              f"{done}. Run `hf auth login` (or set HF_TOKEN) and run again.")
    try:
        user = HfApi(token=token).whoami()
    except Exception as error:  # an invalid token, or the Hub failing now
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConversionError(f"--push-to-hub {repo_id}: the Hub refused the login check ({reason}); nothing was "
                              f"{done}. Run `hf auth login` (or set HF_TOKEN) and run again.") from error
    return str(user.get("name", "")) if isinstance(user, dict) else ""


def upload_later_hint(folder: str | os.PathLike, repo_id: str) -> str:
    """How to upload a complete converted folder after a failed push (the `hf` command line, or Python)."""
    return (
        f"The converted folder {str(folder)!r} is complete; upload it later with `hf upload {repo_id} {folder} .` "
        f"or, in Python, higgs_v3.conversion.repo.push_folder_to_hub({str(folder)!r}, {repo_id!r})."
    )


def push_folder_to_hub(
    folder: str | os.PathLike, repo_id: str, *, private: bool = False, token: str | None = None
) -> str:
    """Upload a converted folder to `repo_id` in one commit with `HfApi.upload_folder` (the repo is created if
    needed). The folder is checked first (auto_map and every code file present: a `ConversionError`); a failed upload
    is a `PushError` that says how to upload the complete folder later. Returns the commit URL."""
    from huggingface_hub import HfApi

    folder = Path(folder)
    check_output_folder(folder)
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo_id,
            repo_type="model",
            folder_path=str(folder),
            commit_message="Add Higgs Audio v3 converted to Transformers (weights, code, tokenizer, processor)",
        )
    except Exception as error:  # the Hub's errors are many; the folder is complete either way
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise PushError(f"The upload to {repo_id} failed ({reason}). {upload_later_hint(folder, repo_id)}") from error
    return str(getattr(commit, "commit_url", commit))


__all__ = [
    "AS_HEAD",
    "HUB_PROBE_SECONDS",
    "LICENSE_FILE_PATTERN",
    "ORIGINAL_CHAT_TEMPLATE_FILE",
    "PlannedTensor",
    "SUPPORTED_TRANSFORMERS",
    "TOKENIZER_FILES",
    "WEIGHT_DTYPES",
    "check_hub_push",
    "check_output_folder",
    "check_shard_size",
    "hub_offline_reason",
    "push_folder_to_hub",
    "remote_code_files",
    "save_processor_files",
    "shard_split",
    "upload_later_hint",
    "verify_written_tensors",
    "weight_dtype",
    "write_model_card",
    "write_repo_files",
    "write_weights",
]
