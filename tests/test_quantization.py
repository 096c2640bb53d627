"""torchao int8 weight-only on CPU (integration layer): the tiny model loads quantized with a plain
`TorchAoConfig(Int8WeightOnlyConfig())`, the backbone's projections become int8 while the codec, the fused audio
embedding and the audio head (tied to it) and the text head stay unquantized, the audio logits stay within the stated
tolerance of the unquantized model, and it generates. GPU-only paths (bitsandbytes) are not tested here.

Opt-in: torchao is NOT a test dependency. Installed, torchao 0.18.0 is imported by every `import transformers` and logs
"Failed to load ..." for its CUDA kernels on stderr in every process, which breaks the exact-stderr checks of the
command line. Install it (`pip install --no-deps torchao==0.18.0`, no other torch) to run this file; without it the
test is skipped and says so."""

from __future__ import annotations

import warnings

import pytest
import torch

from higgs_v3 import tiny_higgs_v3
from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration


pytestmark = pytest.mark.integration

RELATIVE_TOLERANCE = 0.05
"""max |quantized - unquantized| of the audio logits, relative to max |unquantized|: int8 per-row weight-only rounding
of the tiny model's 2 layers (measured 0.029 with torchao 0.18.0)."""


def test_int8_weight_only_keeps_the_audio_tensors_and_the_codec_unquantized(tmp_path):
    torchao = pytest.importorskip("torchao", reason="opt-in: pip install --no-deps torchao==0.18.0 (see the docstring)")
    from torchao.quantization import Int8WeightOnlyConfig
    from transformers import TorchAoConfig

    torch.manual_seed(0)
    model = HiggsAudioV3ForConditionalGeneration(tiny_higgs_v3.tiny_config(initializer_range=0.3)).eval()
    tiny_higgs_v3.randomize_codebooks(model.codec)
    model.save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = HiggsAudioV3ForConditionalGeneration.from_pretrained(
            tmp_path, quantization_config=TorchAoConfig(Int8WeightOnlyConfig())).eval()
    int8 = {name for name, module in quantized.named_modules()
            if isinstance(module, torch.nn.Linear) and type(module.weight).__name__ != "Parameter"}
    linears = {name for name, module in quantized.named_modules() if isinstance(module, torch.nn.Linear)}
    assert int8 == {name for name in linears if name.startswith("model.layers.")}, torchao.__version__
    assert all(type(p).__name__ == "Parameter" and p.dtype == torch.float32 for p in quantized.codec.parameters())
    assert quantized.audio_head.weight is quantized.audio_embed.weight  # still tied, not quantized
    ids = torch.tensor([[151667, 151672, 9707, 11, 1879, 151670]])
    with torch.no_grad():
        expected, got = model(input_ids=ids, logits_to_keep=0).logits, quantized(input_ids=ids, logits_to_keep=0).logits
    difference = (got - expected).abs().max() / expected.abs().max()
    assert 0 < difference <= RELATIVE_TOLERANCE
    rows = quantized.generate(input_ids=ids, do_sample=False, max_new_tokens=10)
    assert rows.shape == (1, 10, 8)
