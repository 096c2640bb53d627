"""The resampler (issue 12): torchaudio's `functional.resample` reproduced in plain torch, checked against golden
vectors that torchaudio itself made (tests/golden/make_golden.py reads torchaudio's own functions out of its wheel),
and the codes of real speech clips through `model.encode_reference` checked against what the official front end and
transformers' `HiggsAudioV2TokenizerModel` give with torchaudio's resample: the same codes, code for code."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import soundfile
import torch
from safetensors import safe_open

import higgs_v3.codec_higgs_v3 as codec_module
from higgs_v3.audio_io_higgs_v3 import prepare_reference_waveform
from higgs_v3.codec_higgs_v3 import build_codec_config, resample_audio, resample_kernel, resampled_length
from higgs_v3.testing.tiny import tiny_codec_config

from conftest import tiny_model
from oracles import seeded_codec_state


GOLDEN = Path(__file__).resolve().parent / "golden"


def golden(name: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(GOLDEN / name, framework="pt") as file:
        return {key: file.get_tensor(key) for key in file.keys()}, file.metadata()


RESAMPLE, RESAMPLE_META = golden("resample_torchaudio.safetensors")
CASES = json.loads(RESAMPLE_META["cases"])
CODES, CODES_META = golden("codes_torchaudio.safetensors")
CODEC_GAINS = json.loads(CODES_META["codecs"])  # {"plain": 1.0, "acoustic": 30.0}
CLIPS = json.loads(CODES_META["clips"])  # name -> [file, seconds or None]


# ------------------------------------------------------------------------------------------------ golden vectors
def test_golden_file_covers_the_rate_pairs_and_shapes_of_the_issue():
    pairs = {(case["orig"], case["new"]) for case in CASES}
    assert {(rate, 24000) for rate in (8000, 16000, 22050, 44100, 48000, 96000)} | {(24000, 16000)} <= pairs
    shapes = {RESAMPLE[f"{case['name']}.input"].dim() for case in CASES}
    assert shapes == {1, 2, 3}  # mono, channels, batch x channels
    for orig, new in pairs:  # lengths that are and are not multiples of the reduced input period
        period = orig // math.gcd(orig, new)
        lengths = {RESAMPLE[f"{c['name']}.input"].shape[-1] for c in CASES if (c["orig"], c["new"]) == (orig, new)}
        assert any(n % period == 0 for n in lengths), (orig, new, lengths)
        assert period == 1 or any(n % period for n in lengths), (orig, new, lengths)  # upsampling by an integer: all are


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_equals_torchaudio_golden_vectors(case):
    source, expected = RESAMPLE[f"{case['name']}.input"], RESAMPLE[f"{case['name']}.output"]
    out = resample_audio(source, case["orig"], case["new"])
    assert out.shape == expected.shape and out.dtype == expected.dtype
    tolerance = 1e-6 if case["dtype"] == "float32" else 1e-12
    assert (out - expected).abs().max().item() <= tolerance if out.numel() else True


# ------------------------------------------------------------------------------------------------ behaviour
@pytest.mark.parametrize("orig,new", [(24000, 16000), (44100, 24000), (22050, 24000), (8000, 24000), (96000, 24000)])
def test_output_length_is_ceil_of_the_ratio(orig, new):
    for length in (1, 2, 146, 147, 148, 960, 24000, 24001, 100_003):
        out = resample_audio(torch.zeros(1, length), orig, new)
        assert out.shape == (1, resampled_length(length, orig, new)) == (1, math.ceil(length * new / orig))


def test_empty_and_same_rate():
    x = torch.randn(2, 100)
    assert resample_audio(x, 24000, 24000) is x
    assert resample_audio(torch.zeros(3, 0), 44100, 24000).shape == (3, 0)


def test_leading_axes_are_independent_signals_and_dtypes_are_kept():
    x = torch.randn(2, 3, 1000, generator=torch.Generator().manual_seed(0))
    together = resample_audio(x, 48000, 24000)
    apart = torch.stack([torch.stack([resample_audio(x[b, c], 48000, 24000) for c in range(3)]) for b in range(2)])
    assert together.shape == (2, 3, 500) and torch.allclose(together, apart, atol=1e-6, rtol=0)  # conv order may differ
    for dtype in (torch.float64, torch.bfloat16):
        assert resample_audio(x.to(dtype), 48000, 24000).dtype == dtype
    assert torch.allclose(resample_audio(x.double(), 48000, 24000).float(), together, atol=1e-6)


def test_differentiable():
    x = torch.randn(1, 500, requires_grad=True)
    resample_audio(x, 16000, 24000).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_passes_a_tone_and_removes_what_the_new_rate_cannot_hold():
    t = torch.arange(48000, dtype=torch.float64) / 48000
    tone, alias = torch.sin(2 * math.pi * 1000 * t), torch.sin(2 * math.pi * 15000 * t)
    expected = torch.sin(2 * math.pi * 1000 * torch.arange(24000, dtype=torch.float64) / 24000)
    inner = slice(200, -200)
    assert (resample_audio(tone, 48000, 24000)[inner] - expected[inner]).abs().max() < 1e-4
    # 15 kHz is above the new Nyquist frequency (12 kHz): it would fold to 9 kHz at full amplitude; the filter leaves
    # under 1 % of it (torchaudio's Hann-windowed sinc with 6 zero crossings: about -45 dB there).
    assert (resample_audio(tone + alias, 48000, 24000)[inner] - expected[inner]).abs().max() < 1e-2


def test_kernels_are_cached_per_rate_pair_dtype_and_device():
    codec_module._kernel_cache.clear()
    first = resample_kernel(44100, 24000, torch.float32)
    assert resample_kernel(44100, 24000, torch.float32, "cpu") is first
    kernel, width, orig, new = first
    assert (orig, new, width) == (147, 80, 12) and kernel.shape == (80, 1, 2 * 12 + 147)
    assert resample_kernel(44100, 24000, torch.float64)[0].dtype == torch.float64
    assert resample_kernel(24000, 16000, torch.float32)[0].shape == (2, 1, 2 * 10 + 3)
    assert len(codec_module._kernel_cache) == 3
    for rate in range(1000, 41000, 1000):  # bounded: old entries go
        resample_kernel(rate, 24000, torch.float32)
    assert len(codec_module._kernel_cache) == codec_module._KERNEL_CACHE_SIZE
    # Each phase of the kernel sums to about 1: unit gain at DC.
    assert torch.allclose(first[0].sum(-1), torch.ones(80, 1), atol=2e-2)


def test_no_soxr_and_no_torchaudio_needed():
    for module in ("codec_higgs_v3", "audio_io_higgs_v3", "processing_higgs_v3", "modeling_higgs_v3"):
        source = (Path(codec_module.__file__).parent / f"{module}.py").read_text(encoding="utf-8")
        assert "import soxr" not in source and "import torchaudio" not in source, module
    setup = (Path(codec_module.__file__).parent / "setup.cfg").read_text(encoding="utf-8")
    install_requires = setup.split("install_requires =", 1)[1].split("\n\n", 1)[0]
    assert "soxr" not in install_requires and "torchaudio" not in install_requires


# ------------------------------------------------------------------------------- end to end: codes of real clips
@pytest.fixture(scope="module", params=list(CODEC_GAINS))
def codec_case(request):
    """(name, a tiny model whose codec has the golden seeded weights)."""
    model = tiny_model(codec_config=tiny_codec_config())
    shapes = {name: tuple(t.shape) for name, t in model.codec.state_dict().items()}
    model.codec.load_state_dict(seeded_codec_state(shapes, int(CODES_META["codec_seed"]), CODEC_GAINS[request.param]))
    return request.param, model


def clip_input(name: str):
    file, seconds = CLIPS[name]
    if seconds is None:
        return (GOLDEN / file,), {}
    samples, rate = soundfile.read(GOLDEN / file, dtype="float32")
    return (samples[: int(seconds * rate)],), {"sampling_rate": rate}


@pytest.mark.parametrize("clip", list(CLIPS))
def test_encode_reference_gives_the_official_codes(codec_case, clip):
    """22.05 kHz and 44.1 kHz files (and a clip under the 1 s pad, given as an array) through `encode_reference`: the
    codes equal, code for code, those of the official front end with torchaudio and transformers' codec class."""
    codec_name, model = codec_case
    args, kwargs = clip_input(clip)
    voice = model.encode_reference(*args, **kwargs)
    expected = CODES[f"{clip}.{codec_name}"]
    assert voice.codes.shape == expected.shape
    assert torch.equal(voice.codes, expected), f"{int((voice.codes != expected).sum())} of {expected.numel()} differ"


def test_transformers_class_gives_the_same_codes_and_the_acoustic_branch_matters(codec_case, transformers_tokenizer_class):
    """transformers' class on our prepared waveforms gives the golden codes for both codecs on every clip, and the
    amplified codec is a real test of the acoustic input (its half-frame padding included): silencing its acoustic
    encoder changes most codes."""
    codec_name, model = codec_case
    theirs = transformers_tokenizer_class(build_codec_config(tiny_codec_config())).eval()
    theirs.load_state_dict(model.codec.state_dict(), strict=False)
    waveforms = {clip: prepare_reference_waveform(*clip_input(clip)[0], **clip_input(clip)[1])[None, None] for clip in CLIPS}
    with torch.no_grad():
        for clip, waveform in waveforms.items():  # [1, 1, N] at 24 kHz
            assert torch.equal(theirs.encode(waveform, return_dict=False)[0].T, CODES[f"{clip}.{codec_name}"])
        state = theirs.state_dict()
        state["acoustic_encoder.conv2.weight"] = torch.zeros_like(state["acoustic_encoder.conv2.weight"])
        theirs.load_state_dict(state)
        changed = [theirs.encode(w, return_dict=False)[0].T != CODES[f"{clip}.{codec_name}"] for clip, w in waveforms.items()]
    share = torch.cat([c.flatten() for c in changed]).float().mean().item()
    if codec_name == "acoustic":
        assert share > 0.3, share
