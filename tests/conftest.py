"""Shared tiny models for the tests (seconds on 2 CPU cores)."""

from __future__ import annotations

import pytest
import torch

from higgs_v3 import HiggsAudioV3Config, HiggsAudioV3ForConditionalGeneration


def tiny_config(**overrides) -> HiggsAudioV3Config:
    """A 2-layer Qwen3 with the real vocabulary and audio constants; no codec unless `codec_config` is given."""
    values = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        attn_implementation="eager",
    )
    values.update(overrides)
    return HiggsAudioV3Config(**values)


def tiny_model(seed: int = 0, **overrides) -> HiggsAudioV3ForConditionalGeneration:
    # The default init (std 0.02) gives near-uniform audio logits and a model that repeats its last row; std 0.3
    # gives varied greedy paths with well separated maxima, so exact comparisons are meaningful.
    overrides.setdefault("initializer_range", 0.3)
    torch.manual_seed(seed)
    return HiggsAudioV3ForConditionalGeneration(tiny_config(**overrides)).eval()


@pytest.fixture(scope="module")
def model() -> HiggsAudioV3ForConditionalGeneration:
    return tiny_model()
