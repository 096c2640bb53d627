# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Tiny Higgs Audio v3 checkpoints for tests and demos, in the **original** format and in the converted layout.

The real checkpoint (`bosonai/higgs-audio-v3-tts-4b`, about 8.5 GB) cannot be downloaded in CI, so the converter and
the processor are tested against tiny checkpoints that have exactly the original on-disk format: the same file names,
tensor names, config keys and tokenizer special tokens with the same ids, only small dimensions.

The tokenizer is a byte-level BPE `Qwen2Tokenizer` with a few hundred merges learned (by the small deterministic
trainer below) from a fixed English text. The real tokenizer's BPE vocabulary has ids 0..151642 and the 84 added
tokens follow at 151643..151726. Neither `tokenizers` nor transformers' `Qwen2Tokenizer` honours explicit added-token
ids: both give an added token the id `model_vocab_size + k`, whatever `tokenizer.json` says. So the tiny vocabulary is
padded with unreachable filler tokens `<|tiny_filler_N|>` (no merge produces them, encoding never emits them) up to
id 151642, and the 84 added tokens land on their real ids exactly as in the real file (`tokenizer.vocab_size` is
151643 and `len(tokenizer)` 151727, as for the real tokenizer).

Command line:

    python -m higgs_v3.tiny_higgs_v3 original OUT_DIR [--seed 0] [--no-codec]
    python -m higgs_v3.tiny_higgs_v3 random OUT_DIR [--seed 0] [--no-codec]
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path


# ----------------------------------------------------------------------------------------------------------- tokenizer
FIRST_ADDED_TOKEN_ID: int = 151643
"""Id of the first added token (`<|endoftext|>`); the BPE vocabulary holds ids 0..151642."""

QWEN_SPECIAL_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
)
"""The 22 Qwen2.5 added tokens at ids 151643..151664, with their `special` flag (as in the real `tokenizer.json`)."""

HIGGS_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|asr|>",
    "<|streaming_asr|>",
    "<|tts|>",
    "<|streaming_tts|>",
    "<|audio_cont_txt|>",
    "<|audio|>",
    "<|audio_end|>",
    "<|text|>",
    "<|text_end|>",
    "<|eoc|>",
    "<|user|>",
    "<|assistant|>",
    "<|system|>",
    "<|await_audio|>",
    "<|ref_audio|>",
    "<|ref_text|>",
    "<|emotion:elation|>",
    "<|emotion:amusement|>",
    "<|emotion:enthusiasm|>",
    "<|emotion:determination|>",
    "<|emotion:pride|>",
    "<|emotion:contentment|>",
    "<|emotion:affection|>",
    "<|emotion:relief|>",
    "<|emotion:contemplation|>",
    "<|emotion:confusion|>",
    "<|emotion:surprise|>",
    "<|emotion:awe|>",
    "<|emotion:longing|>",
    "<|emotion:arousal|>",
    "<|emotion:anger|>",
    "<|emotion:fear|>",
    "<|emotion:disgust|>",
    "<|emotion:bitterness|>",
    "<|emotion:sadness|>",
    "<|emotion:shame|>",
    "<|emotion:helplessness|>",
    "<|env:music|>",
    "<|env:noise|>",
    "<|style:singing|>",
    "<|style:shouting|>",
    "<|style:whispering|>",
    "<|sfx:cough|>",
    "<|sfx:laughter|>",
    "<|sfx:crying|>",
    "<|sfx:screaming|>",
    "<|sfx:burping|>",
    "<|sfx:humming|>",
    "<|sfx:sigh|>",
    "<|sfx:sniff|>",
    "<|sfx:sneeze|>",
    "<|prosody:speed_very_slow|>",
    "<|prosody:speed_slow|>",
    "<|prosody:speed_fast|>",
    "<|prosody:speed_very_fast|>",
    "<|prosody:pitch_low|>",
    "<|prosody:pitch_high|>",
    "<|prosody:pause|>",
    "<|prosody:long_pause|>",
    "<|chatml|>",
    "<|prosody:expressive_high|>",
    "<|prosody:expressive_low|>",
)
"""The 62 Higgs tokens in `extra_special_tokens` order, at ids 151665..151726 (all special)."""

ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = tuple(
    (FIRST_ADDED_TOKEN_ID + i, content, special)
    for i, (content, special) in enumerate(QWEN_SPECIAL_TOKENS + tuple((t, True) for t in HIGGS_SPECIAL_TOKENS))
)
"""All 84 added tokens as `(id, content, special)`, exactly as in `reference/added_tokens.tsv`."""

# The real `tokenizer_config.json`, field for field (transformers 5 format: no `added_tokens_decoder`).
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


def build_tiny_tokenizer():
    """The tiny byte-level BPE as a `tokenizers.Tokenizer`, with the 84 added tokens at their real ids."""
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
    return tokenizer


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
    build_tiny_tokenizer().save(str(directory / "tokenizer.json"), pretty=False)
    with open(directory / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(TOKENIZER_CONFIG, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return directory


# ------------------------------------------------------------------------------------------ original-format checkpoint
ORIGINAL_MODEL_TYPE: str = "higgs_multimodal_qwen3"
"""`model_type` of the original `config.json`."""

CODEC_PREFIX: str = "tied.embedding.modality_embeddings.0.model."
"""Prefix of the codec tensors in the original checkpoint (followed by `HiggsAudioV2TokenizerModel` names)."""

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
    "Tiny Higgs Audio v3 test checkpoint (random weights), generated by higgs-v3's tiny_higgs_v3.py.\n"
    "It stands in for the original repository's LICENSE file; the real weights are under Boson AI's license.\n"
)


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
    (`reference/config.json`); tiny checkpoints change only the dimensions (and the tie flags for untied heads)."""
    return {
        "_hidden_size": hidden_size,
        "_vocab_size": vocab_size,
        "architectures": ["HiggsMultimodalQwen3ForConditionalGeneration"],
        "audio_encoder_config": {
            "_name_or_path": "",
            "architectures": None,
            "chunk_size_feed_forward": 0,
            "dtype": None,
            "encoder_type": "discrete",
            "id2label": {"0": "LABEL_0", "1": "LABEL_1"},
            "is_encoder_decoder": False,
            "label2id": {"LABEL_0": 0, "LABEL_1": 1},
            "max_chunk_size": 50,
            "mel_per_sample": 8,
            "model_type": "higgs_audio_encoder",
            "num_codebooks": num_codebooks,
            "out_dim": hidden_size,
            "output_attentions": False,
            "output_hidden_states": False,
            "problem_type": None,
            "qwen3_aut_config": None,
            "return_dict": True,
            "tie_word_embeddings": tie_word_embeddings,
            "use_delay_pattern": True,
            "vocab_size": codebook_size,
            "whisper_config": None,
        },
        "audio_token_id": -100,
        "ignore_index": -100,
        "model_type": ORIGINAL_MODEL_TYPE,
        "text_config": {
            "_name_or_path": "/ceph/models/Qwen3-4B-Base",
            "architectures": ["Qwen3ForCausalLM"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": 151643,
            "dtype": "bfloat16",
            "eos_token_id": 151643,
            "head_dim": head_dim,
            "hidden_act": "silu",
            "hidden_size": hidden_size,
            "initializer_range": 0.02,
            "intermediate_size": intermediate_size,
            "layer_types": ["full_attention"] * num_layers,
            "max_position_embeddings": 32768,
            "max_window_layers": num_layers,
            "model_type": "qwen3",
            "num_attention_heads": num_attention_heads,
            "num_hidden_layers": num_layers,
            "num_key_value_heads": num_key_value_heads,
            "pad_token_id": None,
            "rms_norm_eps": 1e-06,
            "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
            "sliding_window": None,
            "tie_word_embeddings": tie_word_embeddings,
            "use_cache": True,
            "use_sliding_window": False,
            "vocab_size": vocab_size,
        },
        "transformers_version": "5.5.0",
    }


def original_lm_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the language-model tensors of an original checkpoint with `config` (the original
    `config.json` dict), in the original's order; heads only when the config says untied."""
    text, audio = config["text_config"], config["audio_encoder_config"]
    hidden, head_dim = text["hidden_size"], text["head_dim"]
    q, kv = text["num_attention_heads"] * head_dim, text["num_key_value_heads"] * head_dim
    mlp = text["intermediate_size"]
    audio_rows = audio["num_codebooks"] * audio["vocab_size"]
    per_layer = {
        "input_layernorm.weight": (hidden,),
        "self_attn.q_proj.weight": (q, hidden),
        "self_attn.k_proj.weight": (kv, hidden),
        "self_attn.v_proj.weight": (kv, hidden),
        "self_attn.o_proj.weight": (hidden, q),
        "self_attn.q_norm.weight": (head_dim,),
        "self_attn.k_norm.weight": (head_dim,),
        "post_attention_layernorm.weight": (hidden,),
        "mlp.gate_proj.weight": (mlp, hidden),
        "mlp.up_proj.weight": (mlp, hidden),
        "mlp.down_proj.weight": (hidden, mlp),
    }
    shapes = {
        "tied.embedding.text_embedding.weight": (text["vocab_size"], hidden),
        "tied.embedding.modality_embeddings.0.embedding.weight": (audio_rows, hidden),
    }
    for i in range(text["num_hidden_layers"]):
        for suffix in ORIGINAL_LAYER_SUFFIXES:
            shapes[f"body.layers.{i}.{suffix}"] = per_layer[suffix]
    shapes["body.norm.weight"] = (hidden,)
    if not text.get("tie_word_embeddings", True):
        shapes["tied.head.text_head.weight"] = (text["vocab_size"], hidden)
    if not audio.get("tie_word_embeddings", True):
        shapes["tied.head.modality_heads.0.weight"] = (audio_rows, hidden)
    return shapes


def random_lm_tensor(name: str, shape: tuple[int, ...], generator, dtype=None):
    """A random original-format LM tensor whose scale keeps a tiny model's logits of order one (norm weights near 1,
    matrices with std `1 / sqrt(fan_in)`, the token embedding with std 1), so a wrong mapping shows in the logits."""
    import torch

    dtype = dtype or torch.bfloat16
    if name.endswith("norm.weight"):
        values = 1.0 + 0.1 * torch.randn(shape, generator=generator)
    elif name == "tied.embedding.text_embedding.weight" or name == "tied.head.text_head.weight":
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

    from .codec_higgs_v3 import HiggsAudioV3Codec

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        codec = HiggsAudioV3Codec.from_codec_config(codec_config)
        randomize_codebooks(codec)
        semantic_hidden = codec_config["semantic_model_config"]["hidden_size"]
        masked_spec_embed = torch.rand(semantic_hidden)
    tensors = {name: value.detach().to(torch.bfloat16).contiguous() for name, value in codec.state_dict().items()}
    tensors[CODEC_EXTRA_KEY] = masked_spec_embed.to(torch.bfloat16)
    return tensors


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
) -> Path:
    """Write a tiny checkpoint in the original `bosonai/higgs-audio-v3-tts-4b` format into `directory` and return it.

    Files: `config.json` (the real structure and keys, small dimensions), `model.safetensors` (every tensor bf16,
    original names), `model.safetensors.index.json`, `tokenizer.json`, `tokenizer_config.json`,
    `chat_template.jinja` and `LICENSE`. With `with_codec` the codec tensors (`codec_config`, by default
    `codec_higgs_v3.tiny_codec_config()`) are included under `tied.embedding.modality_embeddings.0.model.`.
    `untied_heads` adds distinct `tied.head.text_head.weight` / `tied.head.modality_heads.0.weight` tensors and sets
    both `tie_word_embeddings` flags to false. The same arguments give byte-identical tensors.
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
        if codec_config is None:
            from .codec_higgs_v3 import tiny_codec_config

            codec_config = tiny_codec_config()
        for name, value in tiny_codec_tensors(codec_config, seed=seed).items():
            tensors[CODEC_PREFIX + name] = value
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    total_size = sum(t.numel() * t.element_size() for t in tensors.values())
    write_original_metadata(directory, config, {name: "model.safetensors" for name in tensors}, total_size)
    return directory


# ------------------------------------------------------------------------------------------- converted "tiny random"
def tiny_config(*, with_codec: bool = True, **overrides):
    """A tiny `HiggsAudioV3Config` (the real vocabulary and token ids, tiny widths; the tiny codec when
    `with_codec`)."""
    from .configuration_higgs_v3 import HiggsAudioV3Config

    codec_config = None
    if with_codec:
        from .codec_higgs_v3 import tiny_codec_config

        codec_config = tiny_codec_config()
    kwargs = {
        "hidden_size": TINY_DIMS["hidden_size"],
        "num_hidden_layers": TINY_DIMS["num_layers"],
        "num_attention_heads": TINY_DIMS["num_attention_heads"],
        "num_key_value_heads": TINY_DIMS["num_key_value_heads"],
        "head_dim": TINY_DIMS["head_dim"],
        "intermediate_size": TINY_DIMS["intermediate_size"],
        "max_window_layers": TINY_DIMS["num_layers"],
        "codec_config": codec_config,
    }
    kwargs.update(overrides)
    return HiggsAudioV3Config(**kwargs)


def make_tiny_random_model(directory: str | os.PathLike, *, seed: int = 0, with_codec: bool = True) -> Path:
    """Write the "tiny random" model in the converted layout (what `--model tiny-random` loads): a randomly
    initialised `HiggsAudioV3ForConditionalGeneration` with `tiny_config()` saved with `save_pretrained` (fp32,
    remote code and `auto_map` included), the official `generation_config.json`, and the tokenizer (and processor)
    files. The same seed gives byte-identical tensors."""
    import torch

    from .modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = HiggsAudioV3ForConditionalGeneration(tiny_config(with_codec=with_codec)).eval()
        if model.codec is not None:
            randomize_codebooks(model.codec)
    import shutil

    from .convert_checkpoint import official_generation_config, remote_code_files, save_processor_files

    model.generation_config = official_generation_config(model.config)
    model.save_pretrained(directory)
    write_tiny_tokenizer(directory)
    save_processor_files(directory, model.config)
    for path in remote_code_files():  # the processor's modules too (save_pretrained copies the model's only)
        shutil.copyfile(path, directory / path.name)
    return directory


# ------------------------------------------------------------------------------------------------------ command line
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m higgs_v3.tiny_higgs_v3",
        description="Write a tiny Higgs Audio v3 checkpoint: 'original' (the original repo format, for the "
        "converter) or 'random' (the converted layout, loadable with AutoModel and trust_remote_code=True).",
    )
    parser.add_argument("kind", choices=["original", "random"])
    parser.add_argument("output", help="output folder (created; existing files are overwritten)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-codec", action="store_true", help="leave the codec out")
    args = parser.parse_args(argv)
    if args.kind == "original":
        path = write_tiny_original_checkpoint(args.output, seed=args.seed, with_codec=not args.no_codec)
    else:
        path = make_tiny_random_model(args.output, seed=args.seed, with_codec=not args.no_codec)
    print(f"Wrote a tiny {args.kind} Higgs Audio v3 checkpoint to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "ADDED_TOKENS",
    "randomize_codebooks",
    "CHAT_TEMPLATE",
    "CODEC_EXTRA_KEY",
    "CODEC_PREFIX",
    "FIRST_ADDED_TOKEN_ID",
    "HIGGS_SPECIAL_TOKENS",
    "ORIGINAL_LAYER_SUFFIXES",
    "ORIGINAL_MODEL_TYPE",
    "QWEN_SPECIAL_TOKENS",
    "TINY_DIMS",
    "TOKENIZER_CONFIG",
    "build_tiny_tokenizer",
    "make_tiny_random_model",
    "original_config",
    "original_lm_shapes",
    "random_lm_tensor",
    "tiny_codec_tensors",
    "tiny_config",
    "write_original_metadata",
    "write_tiny_original_checkpoint",
    "write_tiny_tokenizer",
]
