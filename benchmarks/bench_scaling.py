"""Scaling figures (issue 17), three parts:

1. `memory`: the real model's weight memory per placement, **computed** from its shapes (the original config and the
   real codec config; no weights needed): one device, the codec on its own device, tensor parallel over 2 ranks,
   torchao int8 weight-only, bitsandbytes 8-bit and 4-bit NF4 (with the codec on the device or the CPU). Plus the KV
   cache per 1000 positions of one sequence and the codec decoder's activation per stage per second of audio.
2. `load`: peak resident memory of a fresh process that loads the tiny model, unquantized vs torchao int8 weight-only
   (the latter when torchao is installed; it is not a dependency, see tests/test_quantization.py).
3. `batch`: `higgs-v3 batch` throughput (seconds of audio per second of wall time inside the run, model loading
   excluded) of one process vs two processes (`accelerate launch`), same manifest, same machine, one after the other.

    python benchmarks/bench_scaling.py                 # all three (~1 min on 2 CPU cores)
    python benchmarks/bench_scaling.py --only memory   # the computed table alone (instant)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
GIB = 1024**3
LINEAR_SUFFIXES = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight",
                   "up_proj.weight", "down_proj.weight")


def real_model_parts() -> dict[str, int]:
    """Element counts of the real model by part: the layers' projections, the norms, the token embedding, the fused
    audio embedding (the audio head is tied to it, the text head to the token embedding), the codec; and the rows of
    the projections (one int8 scale per output row)."""
    from higgs_v3.conversion.original_format import (
        AUDIO_EMBEDDING, REAL_CODEC_CONFIG, TEXT_EMBEDDING, codec_tensor_shapes, original_config, original_lm_shapes,
    )

    shapes = original_lm_shapes(original_config())
    parts = {"linear": 0, "linear_rows": 0, "norms": 0, "embed_tokens": 0, "audio_embed": 0}
    for name, shape in shapes.items():
        if name == TEXT_EMBEDDING:
            parts["embed_tokens"] += math.prod(shape)
        elif name == AUDIO_EMBEDDING:
            parts["audio_embed"] += math.prod(shape)
        elif name.endswith(LINEAR_SUFFIXES):
            parts["linear"] += math.prod(shape)
            parts["linear_rows"] += shape[0]
        else:
            parts["norms"] += math.prod(shape)
    parts["codec"] = sum(math.prod(shape) for shape in codec_tensor_shapes(REAL_CODEC_CONFIG).values())
    config = original_config()["text_config"]
    parts["kv_per_position"] = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"]
    return parts


def placements(parts: dict[str, int]) -> dict[str, dict[str, float]]:
    """GiB of weights per device for each placement (bf16 language model, fp32 codec, as the converter writes it)."""
    lm_other = parts["norms"] + parts["embed_tokens"] + parts["audio_embed"]
    lm = 2 * (parts["linear"] + lm_other)
    codec = 4 * parts["codec"]
    tp_rank = 2 * (parts["linear"] / 2 + parts["embed_tokens"] / 2 + parts["audio_embed"] + parts["norms"]) + codec
    int8 = parts["linear"] + 2 * parts["linear_rows"] + 2 * lm_other + codec  # int8 weights, one bf16 scale per row
    # bitsandbytes: LLM.int8 keeps int8 weights and one fp32 scale per output row (`SCB`); NF4 packs two 4-bit codes a
    # byte and keeps one fp32 absmax per block of 64 weights (no double quantization). Every projection's input width
    # (2560, 4096, 9728) is a multiple of 64.
    bnb8 = parts["linear"] + 4 * parts["linear_rows"] + 2 * lm_other
    nf4 = parts["linear"] / 2 + 4 * parts["linear"] / 64 + 2 * lm_other
    return {
        "one device (bf16 LM, fp32 codec)": {"device 0": (lm + codec) / GIB},
        "codec on its own device (or the CPU)": {"device 0": lm / GIB, "codec device": codec / GIB},
        "tensor parallel, 2 ranks": {"each rank": tp_rank / GIB},
        "torchao int8 weight-only (projections int8)": {"device 0": int8 / GIB},
        "bitsandbytes 8-bit (LLM.int8)": {"device 0": (bnb8 + codec) / GIB},
        "bitsandbytes 8-bit, codec on the CPU": {"device 0": bnb8 / GIB, "cpu": codec / GIB},
        "bitsandbytes 4-bit NF4": {"device 0": (nf4 + codec) / GIB},
        "bitsandbytes 4-bit NF4, codec on the CPU": {"device 0": nf4 / GIB, "cpu": codec / GIB},
    }


def codec_decode_stages() -> list[dict]:
    """The real codec's decoder, stage by stage (the DAC decoder after `fc2`: a convolution at the frame rate, then one
    block per upsampling ratio, each halving the channels): channels, samples per second of audio, and the MiB one fp32
    activation of that stage takes per second of audio. Computed from the codec config."""
    from higgs_v3.conversion.original_format import REAL_CODEC_CONFIG

    acoustic = REAL_CODEC_CONFIG["acoustic_model_config"]
    rate = REAL_CODEC_CONFIG["sample_rate"] / math.prod(acoustic["upsampling_ratios"])  # 25 frames per second
    stages = [{"stage": "conv1", "channels": acoustic["decoder_hidden_size"], "rate": rate}]
    for index, ratio in enumerate(acoustic["upsampling_ratios"]):
        rate *= ratio
        channels = acoustic["decoder_hidden_size"] // 2 ** (index + 1)
        stages.append({"stage": f"block {index} (x{ratio})", "channels": channels, "rate": rate})
    for stage in stages:
        stage["mib_per_audio_second"] = 4 * stage["channels"] * stage["rate"] / 2**20
    return stages


def memory_report() -> dict:
    parts = real_model_parts()
    table = placements(parts)
    print("Real model weights per placement, COMPUTED from shapes (GiB; no KV cache, no activations):")
    for name, devices in table.items():
        print(f"  {name:46s} " + ", ".join(f"{device} {gib:.2f}" for device, gib in devices.items()))
    kv = 2 * parts["kv_per_position"] * 1000 / GIB
    print(f"  KV cache, bf16: {kv:.3f} GiB per 1000 positions of one sequence (computed)")
    stages = codec_decode_stages()
    print("Codec decoder, one fp32 activation per stage (MiB per second of audio, computed): "
          + ", ".join(f"{s['stage']} {s['channels']} x {s['rate']:g}/s = {s['mib_per_audio_second']:.2f}"
                      for s in stages))
    return {"parts": parts, "placements": table, "kv_gib_per_1000_positions": kv, "codec_decode_stages": stages}


_LOAD = """
import resource, sys, warnings
warnings.filterwarnings("ignore")
import torch
from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration as M
kwargs = {}
if sys.argv[2] == "int8":
    from torchao.quantization import Int8WeightOnlyConfig
    from transformers import TorchAoConfig
    kwargs["quantization_config"] = TorchAoConfig(Int8WeightOnlyConfig())
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
model = M.from_pretrained(sys.argv[1], **kwargs)
print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def load_report(work: Path) -> dict:
    import torch

    from higgs_v3.testing import tiny
    from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    torch.manual_seed(0)
    HiggsAudioV3ForConditionalGeneration(tiny.tiny_config()).save_pretrained(work / "tiny")
    import importlib.util

    kinds = ("unquantized", "int8") if importlib.util.find_spec("torchao") else ("unquantized",)
    if len(kinds) == 1:
        print("torchao is not installed: the int8 load is left out (pip install --no-deps torchao==0.18.0).")
    results = {}
    for kind in kinds:
        done = subprocess.run([sys.executable, "-c", _LOAD, str(work / "tiny"), kind], capture_output=True, text=True,
                              env=_env(), check=True)
        before, after = map(int, done.stdout.split()[-2:])
        results[kind] = {"peak_rss_mib": after / 1024, "load_mib": (after - before) / 1024}
    print("Tiny model (with its codec), peak RSS of a fresh process that loads it (MiB, MEASURED): "
          + ", ".join(f"{kind} {r['peak_rss_mib']:.0f} (+{r['load_mib']:.0f} for the load)" for kind, r in results.items()))
    return results


def batch_report(work: Path, items: int) -> dict:
    manifest = work / "manifest.jsonl"
    words = "one two three four five six seven eight nine ten".split()
    manifest.write_text("".join(json.dumps({"text": f"Sentence {words[i % 10]} of the batch.", "output": f"item{i}"})
                                + "\n" for i in range(items)), encoding="utf-8")
    options = ["batch", str(manifest), "--model", "tiny-random", "--device", "cpu", "--max-seconds", "1",
               "--batch-size", "2", "--no-progress"]
    runs = {
        "1 process": [sys.executable, "-m", "higgs_v3.cli", *options, "--out-dir", str(work / "one")],
        "2 processes": [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m",
                        "higgs_v3.cli", *options, "--out-dir", str(work / "two")],
    }
    results = {}
    for name, command in runs.items():
        done = subprocess.run(command, capture_output=True, text=True, env=_env(), check=True)
        match = re.search(r"([\d.]+) s of audio in ([\d.]+) s", done.stdout)
        audio, wall = float(match.group(1)), float(match.group(2))
        results[name] = {"audio_seconds": audio, "wall_seconds": wall, "audio_per_second": audio / wall}
    ratio = results["2 processes"]["audio_per_second"] / results["1 process"]["audio_per_second"]
    print(f"Batch synthesis, {items} items, tiny-random (MEASURED, same machine, one after the other): "
          + ", ".join(f"{name} {r['audio_per_second']:.2f} s of audio per s" for name, r in results.items())
          + f"; 2 / 1 processes = {ratio:.2f}x")
    return {**results, "ratio": ratio}


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT.parent), os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["memory", "load", "batch"], default=None)
    parser.add_argument("--items", type=int, default=16, help="manifest items of the batch run (default 16)")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)
    figures = {}
    with tempfile.TemporaryDirectory(prefix="bench_scaling_") as scratch:
        if args.only in (None, "memory"):
            figures["memory"] = memory_report()
        if args.only in (None, "load"):
            figures["load"] = load_report(Path(scratch))
        if args.only in (None, "batch"):
            figures["batch"] = batch_report(Path(scratch), args.items)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
