# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""The converter's numeric verification: does the converted folder compute what the original tensors compute?

1. `verification_prompt`: a fixed clone prompt (`<|tts|> <|ref_text|> t t t <|ref_audio|> [P]*L <|text|> t t t t
   <|audio|>`) and its delayed reference rows, written out with the spec's delay formula (deliberately not with
   `delay_higgs_v3`, the code under test).
2. `reference_audio_logits`: an independent, plain float32 Qwen3 forward over the ORIGINAL tensors (original names,
   read one layer at a time, rounded to the converted dtype first, as the converted model stores them). No
   transformers model code is involved.
3. `run_in_fresh_process`: a new Python process loads the converted folder with
   `AutoModel.from_pretrained(folder, trust_remote_code=True)`, as a user would (offline, its own modules cache), and
   returns its audio logits for the prompt and its loading report.
4. `check_loading_report` and `compare_logits`: no missing or unexpected keys, heads tied as the config says, the
   codec in float32, and `max |diff| <= VERIFY_RTOL * max(1, max |reference logit|)`.

`verify_conversion` runs the four steps; each raises a `ConversionError` that says what failed.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from ..configuration_higgs_v3 import HiggsAudioV3Config
from .original_format import (
    AUDIO_EMBEDDING,
    AUDIO_HEAD,
    FINAL_NORM,
    LAYER_PREFIX,
    ORIGINAL_LAYER_SUFFIXES,
    TEXT_EMBEDDING,
    ConversionError,
    OriginalCheckpoint,
    read_rows,
    read_rows_at,
)


VERIFY_RTOL: float = 1e-3
"""Verification tolerance: `max |diff| <= VERIFY_RTOL * max(1, max |reference logit|)` (both sides in float32, so
only the order of summation differs; any mapping error changes the logits by a sizable fraction of their scale)."""

_REPORT_KEYS = ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")


# ------------------------------------------------------------------------------------------------------- the prompt
def verification_prompt(config: HiggsAudioV3Config, seed: int = 0) -> tuple[torch.LongTensor, torch.LongTensor]:
    """A fixed clone prompt and its delayed reference rows, L = 5 + num_codebooks - 1 rows built here from the delay
    formula (row r, codebook c holds frame r - c; BOC before it starts, EOC after it ends). Returns
    `input_ids [1, length]` and `rows [L, num_codebooks]`."""
    generator = torch.Generator().manual_seed(seed)
    frames, codebooks = 5, config.num_codebooks
    boc, eoc = config.audio_boc_token_id, config.audio_eoc_token_id
    raw = torch.randint(0, boc, (frames, codebooks), generator=generator)  # [T, C] real codes
    rows = torch.empty(frames + codebooks - 1, codebooks, dtype=torch.long)  # [T + C - 1, C]
    for r in range(rows.shape[0]):
        for c in range(codebooks):
            t = r - c
            rows[r, c] = boc if t < 0 else eoc if t >= frames else raw[t, c]
    text = torch.randint(0, min(config.vocab_size, 150000), (7,), generator=generator).tolist()
    ids = (
        [config.tts_token_id, config.ref_text_token_id, *text[:3], config.ref_audio_token_id]
        + [config.audio_placeholder_id] * rows.shape[0]
        + [config.text_token_id, *text[3:], config.audio_start_token_id]
    )
    return torch.tensor([ids]), rows


# -------------------------------------------------------------------------------------- the independent forward
def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope(text: dict, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Default RoPE `cos, sin` of shape `[length, 1, head_dim]` (float64 angles, float32 values)."""
    rope = text.get("rope_parameters") or {"rope_type": "default", "rope_theta": text.get("rope_theta", 10000.0)}
    if rope.get("rope_type", "default") != "default":
        raise ConversionError(f"The verification forward supports default RoPE only, the config has {rope}.")
    head_dim = text["head_dim"]
    inv_freq = 1.0 / (float(rope["rope_theta"]) ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [L, D/2]
    angles = torch.cat((angles, angles), -1)  # [L, D]
    return angles.cos().float()[:, None, :], angles.sin().float()[:, None, :]


def _embed_prompt(
    source: OriginalCheckpoint, input_ids: torch.LongTensor, rows: torch.LongTensor, dtype: torch.dtype
) -> torch.Tensor:
    """`[L, hidden]`: the token embedding row of each id; at each placeholder the fused embedding of the next
    reference row (the sum over codebooks c of audio embedding row `c * codebook_size + code`), replacing the token
    embedding."""
    audio = source.config["audio_encoder_config"]
    codebooks, codebook_size = audio["num_codebooks"], audio["vocab_size"]
    placeholder = source.config.get("audio_token_id", -100)
    ids = input_ids[0].tolist()
    text_rows = read_rows_at(source.tensors[TEXT_EMBEDDING], [token for token in ids if token != placeholder])
    audio_rows = read_rows_at(source.tensors[AUDIO_EMBEDDING], (rows + torch.arange(codebooks) * codebook_size)
                              .flatten().tolist())  # [L_ref * C, hidden]
    text = iter(text_rows.to(dtype).float())
    fused = iter(audio_rows.to(dtype).float().view(rows.shape[0], codebooks, -1).sum(1))  # [L_ref, hidden]
    return torch.stack([next(fused) if token == placeholder else next(text) for token in ids])


def reference_audio_logits(
    source: OriginalCheckpoint, input_ids: torch.LongTensor, rows: torch.LongTensor, dtype: torch.dtype
) -> torch.Tensor:
    """Audio logits `[length, num_codebooks, codebook_size]` of one prompt (`input_ids [1, length]`, reference
    `rows [L, num_codebooks]`), computed in float32 straight from the original tensors, each rounded to `dtype`
    first. A deliberately plain Qwen3 forward: RMSNorm, q/k norms, default RoPE, GQA, causal softmax, SiLU MLP. The
    weights are read one layer at a time."""
    text, audio = source.config["text_config"], source.config["audio_encoder_config"]
    eps, head_dim = text["rms_norm_eps"], text["head_dim"]
    num_heads, num_kv = text["num_attention_heads"], text["num_key_value_heads"]
    hidden = _embed_prompt(source, input_ids, rows, dtype)  # [L, H]
    length = hidden.shape[0]
    cos, sin = _rope(text, length)  # [L, 1, D]
    causal = torch.full((length, length), float("-inf")).triu(1)  # [L, L]
    for i in range(text["num_hidden_layers"]):
        w = {suffix: read_rows(source.tensors[LAYER_PREFIX.format(i) + suffix]).to(dtype).float()
             for suffix in ORIGINAL_LAYER_SUFFIXES}  # this layer's weights, rounded to the converted dtype
        x = _rms_norm(hidden, w["input_layernorm.weight"], eps)
        q = (x @ w["self_attn.q_proj.weight"].T).view(length, num_heads, head_dim)  # [L, nH, D]
        k = (x @ w["self_attn.k_proj.weight"].T).view(length, num_kv, head_dim)  # [L, nKV, D]
        v = (x @ w["self_attn.v_proj.weight"].T).view(length, num_kv, head_dim)
        q = _rms_norm(q, w["self_attn.q_norm.weight"], eps)
        k = _rms_norm(k, w["self_attn.k_norm.weight"], eps)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        k = k.repeat_interleave(num_heads // num_kv, dim=1)  # query head h uses kv head h // (nH / nKV)
        v = v.repeat_interleave(num_heads // num_kv, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(head_dim) + causal  # [nH, L, L]
        attended = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(length, num_heads * head_dim)
        hidden = hidden + attended @ w["self_attn.o_proj.weight"].T
        x = _rms_norm(hidden, w["post_attention_layernorm.weight"], eps)
        gate = torch.nn.functional.silu(x @ w["mlp.gate_proj.weight"].T)
        hidden = hidden + (gate * (x @ w["mlp.up_proj.weight"].T)) @ w["mlp.down_proj.weight"].T
    hidden = _rms_norm(hidden, read_rows(source.tensors[FINAL_NORM]).to(dtype).float(), eps)
    tied = audio.get("tie_word_embeddings", True) or AUDIO_HEAD not in source.tensors
    head = read_rows(source.tensors[AUDIO_EMBEDDING if tied else AUDIO_HEAD]).to(dtype).float()  # [C * V, H]
    return (hidden @ head.T).view(length, audio["num_codebooks"], audio["vocab_size"])


# ------------------------------------------------------------------------------------------ the converted folder
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
    logits = model(input_ids=inputs["input_ids"], audio_input_ids=inputs["rows"]).logits  # [C, L, V]: one prompt
    logits = logits.transpose(0, 1).float().contiguous()  # [L, C, V]
save_file({"logits": logits}, output_path)
print("HIGGS_V3_VERIFY " + json.dumps(report))
"""


def run_in_fresh_process(
    folder: Path, input_ids: torch.LongTensor, rows: torch.LongTensor
) -> tuple[torch.Tensor, dict]:
    """Load `folder` with `AutoModel.from_pretrained(..., trust_remote_code=True)` in a new Python process (offline,
    its own modules cache) and return its audio logits `[length, num_codebooks, codebook_size]` for the prompt and its
    loading report (the keys of `_REPORT_KEYS`, the heads' tying, the codec's dtypes)."""
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


def check_loading_report(report: dict, config: HiggsAudioV3Config) -> None:
    """No missing, unexpected or mis-shaped keys; heads tied exactly when `config` says so; the codec in float32."""
    problems = {key: report[key] for key in _REPORT_KEYS if report.get(key)}
    if problems:
        raise ConversionError(f"Verification failed: loading the converted folder reported {problems}.")
    tied = config.tie_word_embeddings
    if report["tied_audio_head"] != tied or report["tied_text_head"] != tied:
        raise ConversionError(
            f"Verification failed: the loaded heads are tied={report['tied_audio_head']}/{report['tied_text_head']} "
            f"(audio/text) but the conversion says tie_word_embeddings={tied}."
        )
    if config.codec_config is not None and report["codec_dtypes"] != ["torch.float32"]:
        raise ConversionError(f"Verification failed: the codec loaded in {report['codec_dtypes']}, expected float32.")


def compare_logits(logits: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
    """`(max_abs_diff, tolerance)` of the converted model's logits against the reference forward (same shape);
    a `ConversionError` when the shapes differ or `max_abs_diff` exceeds the tolerance."""
    if logits.shape != reference.shape:
        raise ConversionError(
            f"Verification failed: logits of shape {tuple(logits.shape)}, expected {tuple(reference.shape)}."
        )
    max_abs_diff = float((logits.float() - reference).abs().max())
    tolerance = VERIFY_RTOL * max(1.0, float(reference.abs().max()))
    if not max_abs_diff <= tolerance:  # also catches NaN
        raise ConversionError(
            f"Verification failed: the converted model's audio logits differ from the original tensors' forward by "
            f"max |diff| = {max_abs_diff:.3g}, above the tolerance {tolerance:.3g}."
        )
    return max_abs_diff, tolerance


def verify_conversion(
    source: OriginalCheckpoint, config: HiggsAudioV3Config, folder: Path, dtype: torch.dtype
) -> tuple[float, float]:
    """Load the converted `folder` in a fresh process and compare its audio logits for `verification_prompt(config)`
    with `reference_audio_logits` of the original tensors rounded to `dtype`. Returns `(max_abs_diff, tolerance)`;
    raises `ConversionError` on any loading problem or above the tolerance."""
    input_ids, rows = verification_prompt(config)
    logits, report = run_in_fresh_process(folder, input_ids, rows)
    check_loading_report(report, config)
    return compare_logits(logits, reference_audio_logits(source, input_ids, rows, dtype))


__all__ = [
    "VERIFY_RTOL",
    "check_loading_report",
    "compare_logits",
    "reference_audio_logits",
    "run_in_fresh_process",
    "verification_prompt",
    "verify_conversion",
]
