# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Test fixtures and demos: tiny Higgs Audio v3 checkpoints in the **original** format and in the converted layout.

The real checkpoint (`bosonai/higgs-audio-v3-tts-4b`, about 8.5 GB) cannot be downloaded in CI, so the converter and
the processor are tested against tiny checkpoints that have exactly the original on-disk format: the same file names,
tensor names, config keys and tokenizer special tokens with the same ids, only small dimensions. What that format is
lives in `conversion/original_format`; this module only writes tiny instances of it (and of the converted layout). It
imports the format module and the product; no product module imports it (the command line's `make-tiny` and
`--model tiny-random` demos load it lazily).

The tokenizer is a byte-level BPE `Qwen2Tokenizer` with a few hundred merges learned (by the small deterministic
trainer below) from a fixed English text. The real tokenizer's BPE vocabulary has ids 0..151642 and the 84 added
tokens follow at 151643..151726. Neither `tokenizers` nor transformers' `Qwen2Tokenizer` honours explicit added-token
ids: both give an added token the id `model_vocab_size + k`, whatever `tokenizer.json` says. So the tiny vocabulary is
padded with unreachable filler tokens `<|tiny_filler_N|>` (no merge produces them, encoding never emits them) up to
id 151642, and the 84 added tokens land on their real ids exactly as in the real file (`tokenizer.vocab_size` is
151643 and `len(tokenizer)` 151727, as for the real tokenizer).

On the command line: `higgs-v3 make-tiny [--original] DIR` (`cli/main`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
from collections import Counter
from pathlib import Path

from ..conversion.original_format import (
    ADDED_TOKENS,
    CODEC_EXTRA_KEY,
    CODEC_PREFIX,
    FIRST_ADDED_TOKEN_ID,
    ORIGINAL_CODEC_CONFIG_FILE,
    TEXT_EMBEDDING,
    TEXT_HEAD,
    TOKENIZER_CONFIG,
    codec_tensor_shapes,
    original_config,
    original_lm_shapes,
)


# ----------------------------------------------------------------------------------------------------------- tokenizer
# transformers' Qwen2 pre-tokenizer regex (the real `tokenizer.json` uses the same one).
QWEN_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# A ChatML template in the style of Qwen's (the original ships one; TTS never uses it).
CHAT_TEMPLATE: str = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n"
)

# Text the tiny BPE learns its merges from (fixed, so the merges are the same on every machine).
_MERGE_CORPUS = """
The quick brown fox jumps over the lazy dog. Hello world, this is a tiny text to speech model for tests.
She sells sea shells by the sea shore, and the shells she sells are surely sea shells.
In the beginning the voice was quiet; then it grew louder, clearer and warmer than anyone expected.
Numbers like 1, 2, 3, 42 and 2026 are read one digit at a time. Isn't it nice? We're here, they'll come.
Speech synthesis turns written text into spoken audio with natural rhythm, emotion and prosody.
Good morning! How are you today? I am fine, thank you very much. Let us read another sentence aloud.
"""

_NUM_MERGES = 300


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table used by byte-level BPE (Qwen2 uses the same)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(c) for c in chars)))


def _pre_tokenizer():
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )


def _learn_merges(text: str, num_merges: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Byte-level BPE on `text`: the 256 byte symbols (GPT-2 order) then `num_merges` merges, ties broken by the
    smallest pair, so the result does not depend on the `tokenizers` version."""
    alphabet = list(_bytes_to_unicode().values())
    vocab = {symbol: i for i, symbol in enumerate(alphabet)}
    words = Counter(piece for piece, _ in _pre_tokenizer().pre_tokenize_str(text))
    splits = {word: list(word) for word in words}
    merges: list[tuple[str, str]] = []
    for _ in range(num_merges):
        pairs: Counter = Counter()
        for word, count in words.items():
            symbols = splits[word]
            for a, b in zip(symbols, symbols[1:]):
                pairs[(a, b)] += count
        if not pairs:
            break
        best_count = max(pairs.values())
        best = min(pair for pair, count in pairs.items() if count == best_count)
        merges.append(best)
        merged = best[0] + best[1]
        vocab.setdefault(merged, len(vocab))
        for word, symbols in splits.items():
            i, out = 0, []
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            splits[word] = out
    return vocab, merges


@functools.lru_cache(maxsize=1)
def _tiny_tokenizer_json() -> str:
    """`tokenizer.json` of the tiny tokenizer (learned once per process: it is the same every time)."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, processors
    from tokenizers.models import BPE

    vocab, merges = _learn_merges(_MERGE_CORPUS, _NUM_MERGES)
    for token_id in range(len(vocab), FIRST_ADDED_TOKEN_ID):
        vocab[f"<|tiny_filler_{token_id}|>"] = token_id  # unreachable: no merge produces it
    tokenizer = Tokenizer(
        BPE(
            vocab=vocab,
            merges=merges,
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = _pre_tokenizer()
    tokenizer.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    for token_id, content, special in ADDED_TOKENS:
        added = tokenizer.add_tokens([AddedToken(content, special=special, normalized=False)])
        if added != 1 or tokenizer.token_to_id(content) != token_id:
            raise RuntimeError(f"Added token {content!r} did not land on its real id {token_id}.")
    return tokenizer.to_str(pretty=False)


def write_tiny_tokenizer(directory: str | os.PathLike) -> Path:
    """Write `tokenizer.json` and `tokenizer_config.json` in the original format into `directory` (created if
    needed) and return the directory.

    >>> from transformers import AutoTokenizer
    >>> tok = AutoTokenizer.from_pretrained(write_tiny_tokenizer(tmp_dir))  # doctest: +SKIP
    >>> tok.convert_tokens_to_ids("<|tts|>")  # doctest: +SKIP
    151667
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(_tiny_tokenizer_json(), encoding="utf-8")
    with open(directory / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(TOKENIZER_CONFIG, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return directory


@functools.lru_cache(maxsize=1)
def loaded_tiny_tokenizer():
    """The tiny tokenizer as `AutoTokenizer` loads `write_tiny_tokenizer`'s files (a `Qwen2Tokenizer`), loaded once per
    process (0.3 s: its 151643-entry vocabulary) and shared: do not change it."""
    import tempfile

    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="higgs_v3_tiny_tokenizer_") as directory:
        return AutoTokenizer.from_pretrained(write_tiny_tokenizer(directory))


@contextlib.contextmanager
def token_ids_read_once_per_content():
    """While the block runs, `conversion.original_format.read_original` parses a tokenizer once per content: its token
    ids are kept by the sha256 of `tokenizer.json` and `tokenizer_config.json` (the same bytes give the same ids; a
    changed or damaged copy is parsed, and refused, as it is). A test-side speed-up: the tiny tokenizer's 151643-entry
    vocabulary takes about 0.1 s to parse, and the converter's tests read the same files dozens of times."""
    import hashlib

    from ..conversion import original_format

    read, kept = original_format._read_token_ids, {}

    def read_once(directory: Path):
        try:
            key = b"".join(hashlib.sha256((directory / name).read_bytes()).digest()
                           for name in ("tokenizer.json", "tokenizer_config.json"))
        except OSError:  # unreadable: the reader says so, naming the file
            return read(directory)
        if key not in kept:
            kept[key] = read(directory)
        return copy.deepcopy(kept[key])

    original_format._read_token_ids = read_once
    try:
        yield
    finally:
        original_format._read_token_ids = read


# ------------------------------------------------------------------------------------------ original-format checkpoint
TINY_DIMS: dict = {
    "hidden_size": 32,
    "num_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "intermediate_size": 64,
}
"""Dimensions of the tiny checkpoints (the vocabulary stays 151936 so token ids match the real ones)."""

LICENSE_STUB: str = (
    "Tiny Higgs Audio v3 test checkpoint (random weights), generated by higgs-v3's testing/tiny.py.\n"
    "It stands in for the original repository's LICENSE file; the real weights are under Boson AI's license.\n"
)


TINY_CODEC_OVERRIDES: dict = {
    "codebook_dim": 8,
    "acoustic_model_config": {
        "codebook_dim": 4, "codebook_size": 16, "decoder_hidden_size": 64, "encoder_hidden_size": 4, "hidden_size": 16,
        "n_codebooks": 1,
    },
    "semantic_model_config": {
        "conv_dim": [16] * 7, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2,
        "num_conv_pos_embedding_groups": 4, "num_conv_pos_embeddings": 16, "num_hidden_layers": 2,
    },
}
"""What the tiny codec changes in `REAL_CODEC_CONFIG`: widths and depths only (sub-configs updated key by key)."""


def tiny_codec_config() -> dict:
    """`REAL_CODEC_CONFIG` shrunk by `TINY_CODEC_OVERRIDES`: the real strides (24 kHz, hop 960, 8 quantizers,
    codebook 1024) with tiny widths. A fresh dict."""
    from ..conversion.original_format import REAL_CODEC_CONFIG

    config = copy.deepcopy(REAL_CODEC_CONFIG)
    for key, value in copy.deepcopy(TINY_CODEC_OVERRIDES).items():
        if isinstance(value, dict):
            config[key].update(value)
        else:
            config[key] = value
    return config


def codec_state_dict_names(codec_config: dict) -> list[str]:
    """The codec's parameter and buffer names for `codec_config`, in module order (`codec_tensor_shapes`)."""
    return list(codec_tensor_shapes(codec_config))


def random_lm_tensor(name: str, shape: tuple[int, ...], generator, dtype=None):
    """A random original-format LM tensor whose scale keeps a tiny model's logits of order one (norm weights near 1,
    matrices with std `1 / sqrt(fan_in)`, the token embedding with std 1), so a wrong mapping shows in the logits."""
    import torch

    dtype = dtype or torch.bfloat16
    if name.endswith("norm.weight"):
        values = 1.0 + 0.1 * torch.randn(shape, generator=generator)
    elif name in (TEXT_EMBEDDING, TEXT_HEAD):
        values = torch.randn(shape, generator=generator)
    else:
        values = torch.randn(shape, generator=generator) / shape[-1] ** 0.5
    return values.to(dtype)


def randomize_codebooks(codec) -> None:
    """Give a freshly built codec random VQ codebooks (in place; uses torch's global RNG). X-Codec initialises them
    to zeros, which would encode every frame to code 0 and make every code decode alike: tests would check nothing."""
    import torch

    for name, buffer in codec.named_buffers():
        if name.endswith("codebook.embed"):
            buffer.copy_(torch.randn_like(buffer))
    for name, buffer in codec.named_buffers():
        if name.endswith("codebook.embed_avg"):
            buffer.copy_(codec.get_buffer(name[: -len("_avg")]))
        elif name.endswith("codebook.cluster_size"):
            buffer.fill_(1.0)


def tiny_codec_tensors(codec_config: dict, seed: int = 0) -> dict:
    """The codec's tensors for the original checkpoint (without the prefix): a freshly initialised
    `HiggsAudioV3Codec` (seeded, so identical on every run) plus `semantic_model.masked_spec_embed`, all in bf16."""
    import torch

    from ..codec_higgs_v3 import HiggsAudioV3Codec

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        codec = HiggsAudioV3Codec.from_codec_config(codec_config)
        randomize_codebooks(codec)
        semantic_hidden = codec_config["semantic_model_config"]["hidden_size"]
        masked_spec_embed = torch.rand(semantic_hidden)
    tensors = {name: value.detach().to(torch.bfloat16).contiguous() for name, value in codec.state_dict().items()}
    tensors[CODEC_EXTRA_KEY] = masked_spec_embed.to(torch.bfloat16)
    return tensors


def write_codec_config_file(directory: str | os.PathLike, codec_config: dict) -> Path:
    """Write `codec_config` as the original repo's `higgs_audio_v2_tokenizer_config.json` (keys sorted, with the
    bookkeeping keys of the real file) and return its path."""
    path = Path(directory) / ORIGINAL_CODEC_CONFIG_FILE
    bookkeeping = {"architectures": ["HiggsAudioV2TokenizerModel"], "dtype": "float32",
                   "transformers_version": "5.3.0.dev0"}
    path.write_text(json.dumps({**codec_config, **bookkeeping}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def write_original_metadata(directory: str | os.PathLike, config: dict, weight_map: dict[str, str], total_size: int):
    """Write the non-weight files of an original-format repo: `config.json`, `model.safetensors.index.json`, the
    tokenizer files, `chat_template.jinja` and a LICENSE stub."""
    directory = Path(directory)
    with open(directory / "config.json", "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(directory / "model.safetensors.index.json", "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total_size}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")
    write_tiny_tokenizer(directory)
    (directory / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    (directory / "LICENSE").write_text(LICENSE_STUB, encoding="utf-8")


def write_tiny_original_checkpoint(
    directory: str | os.PathLike,
    *,
    seed: int = 0,
    with_codec: bool = True,
    hidden_size: int = TINY_DIMS["hidden_size"],
    num_layers: int = TINY_DIMS["num_layers"],
    num_attention_heads: int = TINY_DIMS["num_attention_heads"],
    num_key_value_heads: int = TINY_DIMS["num_key_value_heads"],
    head_dim: int = TINY_DIMS["head_dim"],
    intermediate_size: int = TINY_DIMS["intermediate_size"],
    untied_heads: bool = False,
    codec_config: dict | None = None,
    write_codec_config: bool = True,
) -> Path:
    """Write a tiny checkpoint in the original `bosonai/higgs-audio-v3-tts-4b` format into `directory` and return it.

    Files: `config.json` (the real structure and keys, small dimensions), `model.safetensors` (every tensor bf16,
    original names), `model.safetensors.index.json`, `tokenizer.json`, `tokenizer_config.json`,
    `chat_template.jinja` and `LICENSE`. With `with_codec` the codec tensors (`codec_config`, by default
    `tiny_codec_config()`) are included under `tied.embedding.modality_embeddings.0.model.`, and the codec config as
    `higgs_audio_v2_tokenizer_config.json` unless `write_codec_config=False` (the converter then falls back to the
    real codec config and refuses the tiny codec: what the fallback tests need). `untied_heads` adds distinct
    `tied.head.text_head.weight` / `tied.head.modality_heads.0.weight` tensors and sets both `tie_word_embeddings`
    flags to false. The same arguments give byte-identical tensors.
    """
    import torch
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = original_config(
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        head_dim=head_dim,
        intermediate_size=intermediate_size,
        tie_word_embeddings=not untied_heads,
    )
    generator = torch.Generator().manual_seed(seed)
    tensors = {name: random_lm_tensor(name, shape, generator) for name, shape in original_lm_shapes(config).items()}
    if with_codec:
        codec_config = codec_config if codec_config is not None else tiny_codec_config()
        tensors.update({CODEC_PREFIX + name: value for name, value in tiny_codec_tensors(codec_config, seed).items()})
        if write_codec_config:
            write_codec_config_file(directory, codec_config)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    total_size = sum(t.numel() * t.element_size() for t in tensors.values())
    write_original_metadata(directory, config, {name: "model.safetensors" for name in tensors}, total_size)
    return directory


# ------------------------------------------------------------------------------------------- converted "tiny random"
def tiny_config(*, with_codec: bool = True, **overrides):
    """A tiny `HiggsAudioV3Config` (the real vocabulary and token ids, tiny widths; the tiny codec when
    `with_codec`)."""
    from ..configuration_higgs_v3 import HiggsAudioV3Config

    kwargs = {
        "hidden_size": TINY_DIMS["hidden_size"],
        "num_hidden_layers": TINY_DIMS["num_layers"],
        "num_attention_heads": TINY_DIMS["num_attention_heads"],
        "num_key_value_heads": TINY_DIMS["num_key_value_heads"],
        "head_dim": TINY_DIMS["head_dim"],
        "intermediate_size": TINY_DIMS["intermediate_size"],
        "max_window_layers": TINY_DIMS["num_layers"],
        "codec_config": tiny_codec_config() if with_codec else None,
    }
    kwargs.update(overrides)
    return HiggsAudioV3Config(**kwargs)


def make_tiny_random_model(directory: str | os.PathLike, *, seed: int = 0, with_codec: bool = True) -> Path:
    """Write the "tiny random" model in the converted layout (what `--model tiny-random` loads): a randomly
    initialised `HiggsAudioV3ForConditionalGeneration` with `tiny_config()` saved with `save_pretrained` (fp32,
    remote code and `auto_map` included), the official `generation_config.json`, and the tokenizer (and processor)
    files. The same seed gives byte-identical tensors."""
    import shutil

    import torch

    from ..conversion.repo import remote_code_files, save_processor_files
    from ..generation_higgs_v3 import default_generation_config
    from ..modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = HiggsAudioV3ForConditionalGeneration(tiny_config(with_codec=with_codec)).eval()
        if model.codec is not None:
            randomize_codebooks(model.codec)
    model.generation_config = default_generation_config(model.config)
    model.save_pretrained(directory)
    write_tiny_tokenizer(directory)
    save_processor_files(directory, model.config, loaded_tiny_tokenizer())  # the files just written, loaded once
    for path in remote_code_files():  # the processor's modules too (save_pretrained copies the model's only)
        shutil.copyfile(path, directory / path.name)
    return directory


__all__ = [
    "CHAT_TEMPLATE",
    "LICENSE_STUB",
    "TINY_CODEC_OVERRIDES",
    "TINY_DIMS",
    "codec_state_dict_names",
    "loaded_tiny_tokenizer",
    "make_tiny_random_model",
    "random_lm_tensor",
    "randomize_codebooks",
    "tiny_codec_config",
    "tiny_codec_tensors",
    "tiny_config",
    "token_ids_read_once_per_content",
    "write_codec_config_file",
    "write_original_metadata",
    "write_tiny_original_checkpoint",
    "write_tiny_tokenizer",
]

