"""torchao int8 weight-only on CPU (integration layer): the tiny model loads quantized with a plain
`TorchAoConfig(Int8WeightOnlyConfig())`, the backbone's projections become int8 while the codec, the fused audio
embedding and the audio head (tied to it) and the text head stay unquantized, the audio logits stay within the stated
tolerance of the unquantized model, and it generates. GPU-only paths (bitsandbytes) are not tested here.

torchao is not a dependency of the project or its tests: installed, torchao 0.18.0 is imported by every
`import transformers` and logs "Failed to load ..." for its CUDA kernels on stderr in every process, which would break
the exact-stderr checks of the command line. So this test installs it (`pip install --no-deps --target`, PyPI only, no
other torch) into a folder of its own and runs the check in a subprocess that has that folder on its path: it always
runs, and nothing else sees torchao."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


pytestmark = pytest.mark.integration

TORCHAO = "torchao==0.18.0"
RELATIVE_TOLERANCE = 0.05
"""max |quantized - unquantized| of the audio logits, relative to max |unquantized|: int8 per-row weight-only rounding
of the tiny model's 2 layers (measured 0.029 with torchao 0.18.0)."""

CHECK = textwrap.dedent(f"""
    import sys, warnings
    import torch, torchao
    from torchao.quantization import Int8WeightOnlyConfig
    from transformers import TorchAoConfig
    from higgs_v3 import tiny_higgs_v3
    from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    folder = sys.argv[1]
    torch.manual_seed(0)
    model = HiggsAudioV3ForConditionalGeneration(tiny_higgs_v3.tiny_config(initializer_range=0.3)).eval()
    tiny_higgs_v3.randomize_codebooks(model.codec)
    model.save_pretrained(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = HiggsAudioV3ForConditionalGeneration.from_pretrained(
            folder, quantization_config=TorchAoConfig(Int8WeightOnlyConfig())).eval()
    int8 = {{name for name, module in quantized.named_modules()
            if isinstance(module, torch.nn.Linear) and type(module.weight).__name__ != "Parameter"}}
    linears = {{name for name, module in quantized.named_modules() if isinstance(module, torch.nn.Linear)}}
    assert int8 == {{name for name in linears if name.startswith("model.layers.")}}, (torchao.__version__, int8)
    assert all(type(p).__name__ == "Parameter" and p.dtype == torch.float32 for p in quantized.codec.parameters())
    assert quantized.audio_head.weight is quantized.audio_embed.weight  # still tied, not quantized
    ids = torch.tensor([[151667, 151672, 9707, 11, 1879, 151670]])
    with torch.no_grad():
        expected, got = model(input_ids=ids, logits_to_keep=0).logits, quantized(input_ids=ids, logits_to_keep=0).logits
    difference = float((got - expected).abs().max() / expected.abs().max())
    assert 0 < difference <= {RELATIVE_TOLERANCE}, difference
    rows = quantized.generate(input_ids=ids, do_sample=False, max_new_tokens=10)
    assert rows.shape == (1, 10, 8), rows.shape
    print(f"ok int8={{len(int8)}} difference={{difference:.4f}}")
""")


@pytest.fixture(scope="module")
def torchao_path(tmp_path_factory) -> Path:
    """torchao installed into a folder of its own (never into the environment)."""
    target = tmp_path_factory.mktemp("torchao")
    result = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), TORCHAO],
                            capture_output=True, text=True)
    assert result.returncode == 0, f"could not install {TORCHAO} from PyPI (needed for this test):\n{result.stderr}"
    return target


def test_int8_weight_only_keeps_the_audio_tensors_and_the_codec_unquantized(torchao_path, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(torchao_path), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path / "tiny")], capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.startswith("ok int8=14 "), result.stdout
