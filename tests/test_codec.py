# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Tests of the bundled codec (`codec_higgs_v3.py`): shapes, frame counts, names, fp32, resampling, parity."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from transformers import HiggsAudioV2TokenizerConfig

from conftest import tiny_config
from higgs_v3.codec_higgs_v3 import HiggsAudioV3Codec, build_codec_config, resample_audio
from higgs_v3.conversion.original_format import REAL_CODEC_CONFIG
from higgs_v3.processing_higgs_v3 import REAL_ENCODED_LENGTH_KWARGS, HiggsAudioV3Processor
from higgs_v3.testing.tiny import codec_state_dict_names, tiny_codec_config


REFERENCE = Path(__file__).resolve().parent / "reference"  # verbatim copy of the spec's reference/ files
CODEC_PREFIX = "tied.embedding.modality_embeddings.0.model."


@pytest.fixture(scope="module")
def codec() -> HiggsAudioV3Codec:
    torch.manual_seed(0)
    codec = HiggsAudioV3Codec.from_codec_config(tiny_codec_config()).eval()
    with torch.no_grad():  # random codebooks, so that codes are not all 0 (the init zeroes them)
        for level in codec.quantizer.quantizers:
            level.codebook.embed.normal_()
    return codec


def processor_frames(num_samples: int) -> int:
    """The frames the processor lays out for a clip of `num_samples` samples (the real codec's strides)."""
    return HiggsAudioV3Processor._get_encoded_length(num_samples, **REAL_ENCODED_LENGTH_KWARGS)


def expected_frames(num_samples: int) -> int:
    """Frames for the real strides, by hand: 16 kHz length M, HuBERT frames floor((M - 80) / 320) + 1, every second."""
    resampled = -(-2 * num_samples // 3)  # ceil(N * 16000 / 24000)
    hubert_frames = (resampled + 320 - 400) // 320 + 1
    return -(-hubert_frames // 2)


# ------------------------------------------------------------------------------------------------- API
def test_sizes_and_fp32(codec):
    assert (codec.config.sample_rate, codec.config.hop_length, codec.config.num_quantizers) == (24000, 960, 8)
    assert codec.config.codebook_size == 1024
    assert {p.dtype for p in codec.parameters()} == {torch.float32}


def test_tiny_config_passes_model_validation():
    config = tiny_config(codec_config=tiny_codec_config())
    assert config.codec_config["acoustic_model_config"]["downsampling_ratios"] == [8, 5, 4, 2, 3]


@pytest.mark.parametrize("frames", [1, 3, 7])
def test_decode_length(codec, frames):
    codes = torch.randint(0, 1024, (2, 8, frames))
    with torch.no_grad():
        audio = codec.decode(codes)
    assert audio.shape == (2, 1, frames * 960)
    assert audio.dtype == torch.float32


def test_encode_frame_count_for_several_lengths(codec):
    # Values by hand from the formula in the codec's doc: T = floor((ceil(2N/3) + 560) / 640); the processor counts
    # the same without a codec.
    by_hand = {960: 1, 1078: 1, 1079: 2, 1920: 2, 12345: 13, 24000: 25, 48001: 50}
    for num_samples, frames in by_hand.items():
        assert expected_frames(num_samples) == frames
        assert processor_frames(num_samples) == frames
        codes = codec.encode(torch.randn(2, 1, num_samples))
        assert codes.shape == (2, 8, frames), num_samples
        assert codes.dtype == torch.int64
        assert 0 <= int(codes.min()) and int(codes.max()) < 1024
    # Not all codes equal: the branches really ran.
    assert codes.unique().numel() > 8


def test_frame_formula_and_branch_agreement_up_to_100_s(codec):
    """For every length from one hop to 100 s: the processor's count is the closed form, and the acoustic encoder (maybe
    padded, as `XcodecModel.encode` does) yields the same frame count, so the two branches always concatenate."""
    n = np.arange(960, 2_400_001, dtype=np.int64)
    semantic = expected_frames(n)
    assert (semantic == (-(-2 * n // 3) + 560) // 640).all()
    assert all(processor_frames(int(k)) == int(semantic[k - 960]) for k in (960, 1079, 2_399_999, 2_400_000))
    convs = [m for m in codec.acoustic_encoder.modules() if isinstance(m, nn.Conv1d)]

    def acoustic(length: np.ndarray) -> np.ndarray:
        for conv in convs:
            span = conv.dilation[0] * (conv.kernel_size[0] - 1) + 1
            length = (length + 2 * conv.padding[0] - span) // conv.stride[0] + 1
        return length

    unpadded, padded = acoustic(n), acoustic(n + 2 * (960 // 2))
    assert ((unpadded == semantic) | (padded == semantic)).all()
    assert (semantic[n % 960 == 0] == n[n % 960 == 0] // 960).all()


def test_round_trip_keeps_length_for_multiples_of_hop(codec):
    audio = torch.randn(1, 1, 5 * 960)
    with torch.no_grad():
        assert codec.decode(codec.encode(audio)).shape == (1, 1, 5 * 960)


def test_encode_casts_input_to_codec_dtype(codec):
    audio = torch.randn(1, 1, 1920)
    assert torch.equal(codec.encode(audio.to(torch.float64)), codec.encode(audio.to(torch.float64).float()))


# ---------------------------------------------------------------------------------------------- config
def test_real_config_gives_8_quantizers_and_transformers_default_16():
    config = build_codec_config(REAL_CODEC_CONFIG)
    assert (config.num_quantizers, config.hop_length, config.frame_rate, config.hidden_size) == (8, 960, 25, 1024)
    assert config.semantic_downsample_factor == 2
    # The trap the model's config refuses: without `target_bandwidths`, transformers' default (up to 4 kbps)
    # would give 16 quantizers at 25 frames/s.
    without_bandwidths = {k: v for k, v in copy.deepcopy(REAL_CODEC_CONFIG).items() if k != "target_bandwidths"}
    assert HiggsAudioV2TokenizerConfig(**without_bandwidths).num_quantizers == 16


def test_real_json_and_real_codec_config_agree():
    import json

    real = json.loads((REFERENCE / "higgs_audio_v2_tokenizer_config.json").read_text())
    assert codec_state_dict_names(real) == codec_state_dict_names(REAL_CODEC_CONFIG)
    assert build_codec_config(real).num_quantizers == 8


def test_build_codec_config_does_not_mutate_and_names_the_sub_configs():
    """The builder trusts a complete config (`HiggsAudioV3Config` refuses an incomplete one: test_modeling.py)."""
    config = tiny_codec_config()
    del config["semantic_model_config"]["model_type"]
    snapshot = repr(config)
    built = build_codec_config(config)
    assert repr(config) == snapshot
    assert (built.acoustic_model_config.model_type, built.semantic_model_config.model_type) == ("dac", "hubert")


# ----------------------------------------------------------------------------------------------- names
def test_state_dict_names_equal_codec_state_dict_names(codec):
    assert list(codec.state_dict()) == codec_state_dict_names(tiny_codec_config())


def test_real_config_on_meta_matches_reference_tensor_list():
    reference = {}
    for line in (REFERENCE / "checkpoint_tensors.tsv").read_text().splitlines():
        name, shape, _dtype = line.split("\t")
        if name.startswith(CODEC_PREFIX):
            reference[name[len(CODEC_PREFIX):]] = [int(d) for d in shape.strip("[]").split(",") if d.strip()]
    assert len(reference) == 528
    del reference["semantic_model.masked_spec_embed"]  # stored by the original, ignored by transformers
    with torch.device("meta"):
        real = HiggsAudioV3Codec.from_codec_config(REAL_CODEC_CONFIG)
    ours = {name: list(tensor.shape) for name, tensor in real.state_dict().items()}
    assert len(ours) == 527
    assert ours == reference
    assert sorted(codec_state_dict_names(REAL_CODEC_CONFIG)) == sorted(reference)
    assert {t.dtype for t in real.state_dict().values()} == {torch.float32}


# ------------------------------------------------------------------------------------------------ fp32
def test_codec_stays_fp32_in_bf16_model(tmp_path):
    from higgs_v3 import HiggsAudioV3ForConditionalGeneration

    config = tiny_config(codec_config=tiny_codec_config())
    torch.manual_seed(0)
    model = HiggsAudioV3ForConditionalGeneration(config)
    model.save_pretrained(tmp_path)
    loaded = HiggsAudioV3ForConditionalGeneration.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert loaded.model.embed_tokens.weight.dtype == torch.bfloat16
    assert {t.dtype for t in loaded.codec.state_dict().values()} == {torch.float32}, (
        "the codec was cast to bf16: declare `_keep_in_fp32_modules_strict = ['codec']` on the model"
    )
    original = model.codec.state_dict()
    assert all(torch.equal(original[name], tensor) for name, tensor in loaded.codec.state_dict().items())
    with torch.no_grad():
        assert loaded.codec.decode(torch.zeros(1, 8, 2, dtype=torch.long)).dtype == torch.float32


def test_the_codec_pins_its_own_float32_and_is_frozen():
    """A cast asked of the codec itself (or of a module holding it) leaves its tensors float32, bit for bit; a device
    move is taken; `from_codec_config` returns it frozen."""
    torch.manual_seed(0)
    codec = HiggsAudioV3Codec.from_codec_config(tiny_codec_config())
    assert not any(p.requires_grad for p in codec.parameters())
    before = {name: tensor.clone() for name, tensor in codec.state_dict().items()}
    holder = nn.ModuleDict({"codec": codec, "other": nn.Linear(2, 2)})
    for cast in (lambda m: m.to(torch.bfloat16), lambda m: m.half(), lambda m: m.to("cpu", torch.float16),
                 lambda m: m.to(torch.float64)):
        cast(holder)
        assert holder["other"].weight.dtype != torch.float32  # the rest of the holder was cast
        assert all(t.dtype == torch.float32 and torch.equal(t, before[name]) for name, t in codec.state_dict().items()
                   if t.is_floating_point())
    codec.to("meta")  # a move is taken
    assert {t.device.type for t in codec.state_dict().values()} == {"meta"}


def test_from_codec_config_is_fp32_under_bf16_default_dtype():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("meta"):
            codec = HiggsAudioV3Codec.from_codec_config(tiny_codec_config())
    finally:
        torch.set_default_dtype(previous)
    assert {t.dtype for t in codec.state_dict().values()} == {torch.float32}


# -------------------------------------------------------------------------------------------- resample
# (the resampler itself: tests/test_resample.py; here, what the codec needs of it)
def sine(frequency: float, rate: int, length: int, dtype=torch.float32) -> torch.Tensor:
    return torch.sin(2 * math.pi * frequency * torch.arange(length, dtype=torch.float64) / rate).to(dtype)


@pytest.mark.parametrize("length", [24000, 24001, 24002, 1002, 7])
def test_resample_length_is_exact(length):
    assert resample_audio(torch.randn(1, 1, length), 24000, 16000).shape == (1, 1, math.ceil(length * 2 / 3))


def test_resample_keeps_frequency_energy_and_timing():
    tone = sine(1000.0, 24000, 24000)  # 1 s of 1 kHz
    resampled = resample_audio(tone[None, None], 24000, 16000)[0, 0]  # [16000]
    interior = slice(400, 16000 - 400)
    # Sample by sample against the tone sampled at 16 kHz: same frequency, amplitude and phase (no delay), up to the
    # gentle passband droop of torchaudio's short filter (6 zero crossings: 0.05 % at 1 kHz).
    assert (resampled[interior] - sine(1000.0, 16000, 16000)[interior]).abs().max() < 1e-3
    rms = resampled[interior].pow(2).mean().sqrt()
    assert abs(float(rms) - 1 / math.sqrt(2)) < 1e-3
    spectrum = torch.fft.rfft(resampled.double()).abs()  # bins of 1 Hz over 1 s
    assert int(spectrum.argmax()) == 1000


# ---------------------------------------------------------------------------------------------- parity
def paired_models(transformers_tokenizer_class, codec):
    theirs = transformers_tokenizer_class(build_codec_config(tiny_codec_config())).eval()
    theirs.load_state_dict(codec.state_dict(), strict=True)
    return theirs


def test_outputs_match_transformers_class(transformers_tokenizer_class, codec):
    """transformers' class (with our resampler in torchaudio's place: tests/test_resample.py shows they agree) gives
    our codes and waveforms."""
    theirs = paired_models(transformers_tokenizer_class, codec)
    audio = torch.randn(2, 1, 2 * 24000 + 37)
    with torch.no_grad():
        expected = theirs.encode(audio, return_dict=False)
        codes = codec.encode(audio)
        assert torch.equal(codes, expected)
        torch.testing.assert_close(codec.decode(codes), theirs.decode(expected, return_dict=False), rtol=0, atol=0)
