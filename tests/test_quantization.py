"""Quantized loads on CPU (integration layer): torchao int8 weight-only with a plain
`TorchAoConfig(Int8WeightOnlyConfig())`, and bitsandbytes 8-bit (LLM.int8) and 4-bit (NF4) with a plain
`BitsAndBytesConfig`. The backbone's projections are quantized while the codec, the fused audio embedding and the audio
head (tied to it) and the text head stay unquantized, the audio logits stay within the stated tolerance of the
unquantized model, and it generates. bitsandbytes 0.50.2 runs both on a CPU, and the quantizers of transformers 5.5 and
5.24 accept a CPU (their check, `validate_bnb_backend_availability`, asks for one available device among
`bnb.supported_torch_devices`, which includes "cpu"); the GPU loads run in `benchmarks/gpu_benchmark.py --phases
quantized` when a GPU is lent.

torchao and bitsandbytes are not dependencies of the project or its tests. Installed, torchao 0.18.0 is imported by
every `import transformers` and logs "Failed to load ..." for its CUDA kernels on stderr in every process, which would
break the exact-stderr checks of the command line (bitsandbytes 0.50.2 logs a "kernels-community" line on import). So
each test installs its package (`pip install --no-deps --target`, PyPI only, no other torch) into a folder of its own
and runs the check in a subprocess that has that folder on its path: it always runs, and nothing else sees them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


pytestmark = pytest.mark.integration

TORCHAO = "torchao==0.18.0"
BITSANDBYTES = "bitsandbytes==0.50.2"
RELATIVE_TOLERANCE = 0.05
"""max |quantized - unquantized| of the audio logits, relative to max |unquantized|: int8 per-row weight-only rounding
of the tiny model's 2 layers (measured 0.029 with torchao 0.18.0)."""

CHECK = textwrap.dedent(f"""
    import sys, warnings
    import torch, torchao
    from torchao.quantization import Int8WeightOnlyConfig
    from transformers import TorchAoConfig
    from higgs_v3.testing import tiny
    from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    folder = sys.argv[1]
    torch.manual_seed(0)
    model = HiggsAudioV3ForConditionalGeneration(tiny.tiny_config(initializer_range=0.3)).eval()
    tiny.randomize_codebooks(model.codec)
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


BNB_8BIT_TOLERANCE = 0.1
"""max |8-bit - unquantized| / max |unquantized| of the audio logits: LLM.int8 (int8 rows, fp16 activations, outlier
columns above 6.0 in fp16) of the 2 layers (measured 0.049 with bitsandbytes 0.50.2)."""
BNB_4BIT_TOLERANCE = 0.6
"""The same for NF4 (4 bits per weight, blocks of 64): rounding to 16 levels moves the random tiny model's logits far
more (measured 0.42), so the 4-bit check is also against its own rounding: `BNB_4BIT_KERNEL_TOLERANCE`."""
BNB_4BIT_KERNEL_TOLERANCE = 0.03
"""max |4-bit - dequantized| / max |dequantized|: the 4-bit model against the unquantized model with every projection
replaced by its NF4 weights dequantized (`bnb.functional.dequantize_4bit`): only the kernel's bf16 arithmetic differs
(measured 0.016)."""

BNB_CHECK = textwrap.dedent(f"""
    import copy, sys, warnings
    import torch, bitsandbytes as bnb
    from transformers import BitsAndBytesConfig
    from higgs_v3.testing import tiny
    from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    folder = sys.argv[1]
    torch.manual_seed(0)
    # Widths of 64: bitsandbytes' CPU 4-bit kernel packs blocks of 64 input features (hidden 32 fails in it).
    config = tiny.tiny_config(initializer_range=0.3, hidden_size=64, head_dim=16, intermediate_size=128)
    model = HiggsAudioV3ForConditionalGeneration(config).eval()
    tiny.randomize_codebooks(model.codec)
    model.save_pretrained(folder)
    ids = torch.tensor([[151667, 151672, 9707, 11, 1879, 151670]])
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    quantizations = {{
        8: (BitsAndBytesConfig(load_in_8bit=True), bnb.nn.Linear8bitLt, {BNB_8BIT_TOLERANCE}),
        4: (BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32),
            bnb.nn.Linear4bit, {BNB_4BIT_TOLERANCE}),
    }}
    for bits, (quantization, layer, tolerance) in quantizations.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantized = HiggsAudioV3ForConditionalGeneration.from_pretrained(folder, quantization_config=quantization)
        quantized.eval()
        converted = {{name for name, module in quantized.named_modules() if isinstance(module, layer)}}
        linears = {{name for name, module in quantized.named_modules() if isinstance(module, torch.nn.Linear)}}
        assert converted == {{name for name in linears if name.startswith("model.layers.")}}, converted
        assert all(type(p) is torch.nn.Parameter and p.dtype == torch.float32 for p in quantized.codec.parameters())
        assert not any(isinstance(m, (bnb.nn.Linear8bitLt, bnb.nn.Linear4bit)) for m in quantized.codec.modules())
        assert quantized.audio_head.weight is quantized.audio_embed.weight  # still tied, not quantized
        assert type(quantized.audio_head) is torch.nn.Linear and type(quantized.lm_head) is torch.nn.Linear
        assert torch.equal(quantized.audio_embed.weight, model.audio_embed.weight)
        assert torch.equal(quantized.lm_head.weight, model.lm_head.weight)
        reference = copy.deepcopy(model)  # the projections replaced by their dequantized weights
        for name in converted:
            module = quantized.get_submodule(name)
            if bits == 8:
                weight = module.weight.data.float() * module.weight.SCB[:, None] / 127
            else:
                weight = bnb.functional.dequantize_4bit(module.weight.data, module.weight.quant_state)
            reference.get_submodule(name).weight.data.copy_(weight)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "MatMul8bitLt: inputs will be cast from torch.float32 to float16"
            rounded, got = reference(input_ids=ids).logits, quantized(input_ids=ids).logits
            out = quantized.generate(input_ids=ids, do_sample=False, max_new_tokens=10, return_dict_in_generate=True)
        difference = float((got - expected).abs().max() / expected.abs().max())
        kernel = float((got - rounded).abs().max() / rounded.abs().max())
        assert 0 < difference <= tolerance, (bits, difference)
        assert bits == 8 or kernel <= {BNB_4BIT_KERNEL_TOLERANCE}, (bits, kernel)
        assert out.sequences.shape == (1, 10, 8) and out.audio[0].numel() > 0, out.sequences.shape
        print(f"ok {{bits}}-bit={{len(converted)}} difference={{difference:.4f}} kernel={{kernel:.4f}}")
""")


def _install(tmp_path_factory, requirement: str) -> Path:
    """`requirement` installed into a folder of its own (never into the environment)."""
    target = tmp_path_factory.mktemp(requirement.split("=")[0])
    result = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                             requirement], capture_output=True, text=True)
    assert result.returncode == 0, f"could not install {requirement} from PyPI (needed for this test):\n{result.stderr}"
    return target


def _run_check(check: str | Path, path: Path, *args: str) -> subprocess.CompletedProcess:
    """Python code (or a script file) run in a subprocess with `path` first on its module path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(path), os.environ.get("PYTHONPATH")])))
    program = [str(check)] if isinstance(check, Path) else ["-c", check]
    return subprocess.run([sys.executable, *program, *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def torchao_path(tmp_path_factory) -> Path:
    return _install(tmp_path_factory, TORCHAO)


@pytest.fixture(scope="module")
def bitsandbytes_path(tmp_path_factory) -> Path:
    return _install(tmp_path_factory, BITSANDBYTES)


def test_int8_weight_only_keeps_the_audio_tensors_and_the_codec_unquantized(torchao_path, tmp_path):
    result = _run_check(CHECK, torchao_path, str(tmp_path / "tiny"))
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.startswith("ok int8=14 "), result.stdout


def test_bitsandbytes_8_and_4_bit_keep_the_audio_tensors_and_the_codec_unquantized(bitsandbytes_path, tmp_path):
    """Both loads in one process (the imports cost more than the checks)."""
    result = _run_check(BNB_CHECK, bitsandbytes_path, str(tmp_path / "tiny"))
    assert result.returncode == 0, result.stderr[-4000:]
    lines = result.stdout.splitlines()
    assert [line.split(" difference")[0] for line in lines] == ["ok 8-bit=14", "ok 4-bit=14"], result.stdout


def test_gpu_benchmark_smaller_gpu_phases_run_on_a_cpu(bitsandbytes_path, tmp_path):
    """`benchmarks/gpu_benchmark.py --phases placement quantized`, the checks a lent GPU runs, on the tiny model on the
    CPU (where the codec's "other device" is the same CPU and the codec-on-CPU bnb variant is left out)."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_benchmark.py"
    result = _run_check(script, bitsandbytes_path, "--tiny", "--device", "cpu", "--rounds", "1",
                        "--rows", "11", "--e2e-rows", "11", "--prompt-length", "16", "--phases", "placement",
                        "quantized", "--no-plot", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    data = json.loads((tmp_path / "gpu_benchmark.json").read_text())
    assert data["phases"] == [] and data["skipped"] == []
    placement = data["placement"]
    assert placement["agree"] and placement["identical_codes"] and placement["device_map_identical_codes"]
    assert placement["audio_difference"] == 0.0 and placement["device_map_codec_devices"] == ["cpu"]
    quantized = {q["variant"]: q for q in data["quantized"]}
    assert sorted(quantized) == ["bnb 4-bit nf4", "bnb 8-bit"]
    for q in quantized.values():
        assert q["agree"] and q["quantized_layers"] == q["expected_layers"] == 14, q
        assert q["audio_tensors_and_codec_unquantized"] and q["audio_s"] == (11 - 7) * 960 / 24000
