"""`benchmarks/bench_scaling.py`'s computed memory table: its element counts equal the real checkpoint's verbatim tensor
list (`tests/reference/checkpoint_tensors.tsv`), and each placement's bytes follow from them by hand."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import pytest


HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "benchmarks"))
bench_scaling = importlib.import_module("bench_scaling")


def test_computed_counts_equal_the_real_checkpoint_and_the_placements_follow():
    lm = codec = 0
    for line in (HERE / "reference" / "checkpoint_tensors.tsv").read_text().splitlines():
        name, shape, _ = line.split("\t")
        count = math.prod(int(size) for size in shape.strip("[]").split(","))
        if name.startswith("tied.embedding.modality_embeddings.0.model."):
            codec += count if not name.endswith("masked_spec_embed") else 0  # dropped by the converter
        else:
            lm += count
    parts = bench_scaling.real_model_parts()
    assert parts["linear"] + parts["norms"] + parts["embed_tokens"] + parts["audio_embed"] == lm == 4_043_480_576
    assert parts["codec"] == codec == 201_400_553
    assert parts["linear_rows"] == 36 * (4096 + 1024 + 1024 + 2560 + 9728 + 9728 + 2560)
    assert parts["kv_per_position"] == 2 * 36 * 8 * 128
    table = bench_scaling.placements(parts)
    gib = 1024**3
    assert table["one device (bf16 LM, fp32 codec)"]["device 0"] == pytest.approx((2 * lm + 4 * codec) / gib)
    assert table["codec on its own device (or the CPU)"] == pytest.approx({"device 0": 2 * lm / gib,
                                                                           "codec device": 4 * codec / gib})
    rank = 2 * (parts["linear"] / 2 + parts["embed_tokens"] / 2 + parts["audio_embed"] + parts["norms"]) + 4 * codec
    assert table["tensor parallel, 2 ranks"]["each rank"] == pytest.approx(rank / gib)
    int8 = parts["linear"] + 2 * parts["linear_rows"] + 2 * (lm - parts["linear"]) + 4 * codec
    assert table["torchao int8 weight-only (projections int8)"]["device 0"] == pytest.approx(int8 / gib)
    bnb8 = parts["linear"] + 4 * parts["linear_rows"] + 2 * (lm - parts["linear"])  # int8 + one fp32 scale per row
    nf4 = parts["linear"] * (0.5 + 4 / 64) + 2 * (lm - parts["linear"])  # 4 bits + one fp32 absmax per 64 weights
    assert table["bitsandbytes 8-bit (LLM.int8)"]["device 0"] == pytest.approx((bnb8 + 4 * codec) / gib)
    on_cpu = 4 * codec / gib
    assert table["bitsandbytes 8-bit, codec on the CPU"] == pytest.approx({"device 0": bnb8 / gib, "cpu": on_cpu})
    assert table["bitsandbytes 4-bit NF4"]["device 0"] == pytest.approx((nf4 + 4 * codec) / gib)
    assert table["bitsandbytes 4-bit NF4, codec on the CPU"] == pytest.approx({"device 0": nf4 / gib, "cpu": on_cpu})


def test_codec_decoder_stages_follow_the_upsampling_ratios():
    """25 frames/s x 8 x 5 x 4 x 2 x 3 = 24000 samples/s; 1024 channels halved by each block."""
    stages = bench_scaling.codec_decode_stages()
    assert [(s["channels"], s["rate"]) for s in stages] == [(1024, 25), (512, 200), (256, 1000), (128, 4000),
                                                           (64, 8000), (32, 24000)]
    assert stages[-1]["mib_per_audio_second"] == pytest.approx(32 * 24000 * 4 / 2**20)
