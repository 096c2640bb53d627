# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Peak memory of `convert_checkpoint` on a synthetic original-format checkpoint of at least 1 GB.

    python benchmarks/convert_memory.py [--layers 24] [--hidden 1024] [--keep]

Writes a random checkpoint in the original format (the real vocabulary and the REAL codec shapes, a wider/deeper
backbone than the tiny test checkpoints; written tensor by tensor, so this script stays small too) into a temporary
folder, converts it in a subprocess (with the built-in verification) and prints:

- the converter process's peak RSS (`ru_maxrss` of that process: reading, casting, writing, the re-read check and the
  streamed reference forward) divided by the checkpoint size (target <= 0.6);
- the verification child's peak RSS: it loads the whole converted model with `AutoModel.from_pretrained` in float32,
  so it needs about twice the bf16 checkpoint by design (it is not part of the streaming claim);
- the baseline RSS of a process that only imports the converter (Python, torch, transformers).

Everything is deleted afterwards (unless `--keep`). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from higgs_v3.configuration_higgs_v3 import REAL_CODEC_CONFIG
from higgs_v3.convert_checkpoint import _codec_shapes, write_safetensors_streaming
from higgs_v3.tiny_higgs_v3 import (
    CODEC_EXTRA_KEY,
    CODEC_PREFIX,
    original_config,
    original_lm_shapes,
    random_lm_tensor,
    write_original_metadata,
)


def write_synthetic_original(directory: Path, *, hidden: int, layers: int, seed: int = 0) -> int:
    """A random original-format checkpoint (bf16, one `model.safetensors`); returns its size in bytes."""
    config = original_config(
        hidden_size=hidden,
        num_layers=layers,
        num_attention_heads=hidden // 128,
        num_key_value_heads=max(1, hidden // 256),
        head_dim=128,
        intermediate_size=3 * hidden,
    )
    shapes = dict(original_lm_shapes(config))
    codec = _codec_shapes(REAL_CODEC_CONFIG)
    codec[CODEC_EXTRA_KEY] = (REAL_CODEC_CONFIG["semantic_model_config"]["hidden_size"],)
    shapes.update({CODEC_PREFIX + name: shape for name, shape in codec.items()})
    generator = torch.Generator().manual_seed(seed)

    def chunks():
        for name, shape in shapes.items():
            if len(shape) >= 2 and shape[0] > 16384:  # the token embedding, in row blocks
                for start in range(0, shape[0], 16384):
                    rows = (min(16384, shape[0] - start), *shape[1:])
                    yield random_lm_tensor(name, rows, generator)
            elif name.startswith(CODEC_PREFIX):
                yield (0.02 * torch.randn(shape, generator=generator)).to(torch.bfloat16)
            else:
                yield random_lm_tensor(name, shape, generator)

    entries = [(name, torch.bfloat16, shape) for name, shape in shapes.items()]
    write_safetensors_streaming(directory / "model.safetensors", entries, chunks())
    total = sum(2 * torch.Size(shape).numel() for shape in shapes.values())
    write_original_metadata(directory, config, {name: "model.safetensors" for name in shapes}, total)
    return os.path.getsize(directory / "model.safetensors")


_MEASURE = r"""
import json, resource, sys, time
start = time.time()
from higgs_v3.convert_checkpoint import main
imported = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
code = main(sys.argv[1:])
print("MEASURE " + json.dumps({
    "exit": code,
    "seconds": time.time() - start,
    "import_kib": imported,
    "self_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    "children_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="higgs_v3_convert_memory_"))
    try:
        original, output = work / "original", work / "converted"
        original.mkdir()
        started = time.time()
        size = write_synthetic_original(original, hidden=args.hidden, layers=args.layers)
        print(f"synthetic original checkpoint: {size / 1e9:.3f} GB ({time.time() - started:.0f} s to write)")
        if size < 1e9:
            print("warning: the checkpoint is under 1 GB; raise --layers or --hidden")
        done = subprocess.run(
            [sys.executable, "-c", _MEASURE, "--input", str(original), "--output", str(output)],
            capture_output=True,
            text=True,
        )
        print(done.stdout.strip())
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        measured = json.loads(done.stdout.split("MEASURE ", 1)[1])
        if measured["exit"] != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        kib = 1024
        self_bytes, child_bytes, base_bytes = (measured[k] * kib for k in ("self_kib", "children_kib", "import_kib"))
        print(f"conversion + verification: {measured['seconds']:.0f} s")
        print(f"baseline (imports only):           {base_bytes / 1e9:.3f} GB")
        above = self_bytes - base_bytes
        print(f"converter process peak RSS:        {self_bytes / 1e9:.3f} GB = {self_bytes / size:.3f} x checkpoint "
              "(target <= 0.6)")
        print(f"  of which above the baseline:     {above / 1e9:.3f} GB = {above / size:.3f} x checkpoint")
        print(f"verification child peak RSS:       {child_bytes / 1e9:.3f} GB (full model in float32, by design)")
        return 0 if self_bytes / size <= 0.6 else 2
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
