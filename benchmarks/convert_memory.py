# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Peak memory of `convert_checkpoint` on a synthetic original-format checkpoint.

    python benchmarks/convert_memory.py [--layers 24] [--hidden 1024] [--max-shard-size 5GB] [--no-verify] [--keep]

Writes a random checkpoint in the original format (the real vocabulary and the REAL codec shapes, a wider/deeper
backbone than the tiny test checkpoints) into a temporary folder, in a subprocess, then converts it in another
subprocess and prints (this process imports neither torch nor the converter: Linux counts a parent's resident memory
at the time of the fork into the child's `ru_maxrss`):

- the converter process's peak RSS (`ru_maxrss` of that process: reading, checking, casting and writing one shard
  at a time, the bit-for-bit re-read and the reference forward) divided by the checkpoint size and by the largest
  shard the converter wrote. The writer holds one shard's converted tensors plus its source tensors, so the figure
  to expect is about one shard (the whole checkpoint when it fits into one shard, as with the default 5GB);
- the verification child's peak RSS: it loads the whole converted model with `AutoModel.from_pretrained` in float32,
  so it needs about twice the bf16 checkpoint by design (not part of the converter's figure; by the same accounting
  it is at least the converter's RSS at the moment the converter started it);
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



def write_synthetic_original(directory: Path, *, hidden: int, layers: int, seed: int = 0) -> int:
    """A random original-format checkpoint (bf16, one `model.safetensors`, the real codec and its config file);
    returns its size in bytes. Run in a process of its own (`--write-synthetic`): it holds every tensor at once."""
    import torch
    from safetensors.torch import save_file

    from higgs_v3.conversion.original_format import (
        CODEC_PREFIX, REAL_CODEC_CONFIG, codec_tensor_shapes, original_config, original_lm_shapes,
    )
    from higgs_v3.testing.tiny import random_lm_tensor, write_codec_config_file, write_original_metadata

    config = original_config(
        hidden_size=hidden,
        num_layers=layers,
        num_attention_heads=hidden // 128,
        num_key_value_heads=max(1, hidden // 256),
        head_dim=128,
        intermediate_size=3 * hidden,
    )
    generator = torch.Generator().manual_seed(seed)
    tensors = {name: random_lm_tensor(name, shape, generator) for name, shape in original_lm_shapes(config).items()}
    for name, shape in codec_tensor_shapes(REAL_CODEC_CONFIG, original=True).items():
        tensors[CODEC_PREFIX + name] = (0.02 * torch.randn(shape, generator=generator)).to(torch.bfloat16)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    write_original_metadata(directory, config, {name: "model.safetensors" for name in tensors}, total)
    write_codec_config_file(directory, REAL_CODEC_CONFIG)
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


def measure(original: Path, output: Path, extra: list[str]) -> dict | None:
    """Run the converter in a subprocess; its `MEASURE` record, or None (after printing why) when it failed."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, "--input", str(original), "--output", str(output), *extra],
        capture_output=True,
        text=True,
    )
    print(done.stdout.strip())
    measured = json.loads(done.stdout.split("MEASURE ", 1)[1]) if "MEASURE " in done.stdout else None
    if done.returncode != 0 or measured is None or measured["exit"] != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        return None
    return measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--max-shard-size", default="5GB", help="passed to the converter")
    parser.add_argument("--no-verify", action="store_true", help="passed to the converter")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--write-synthetic", default=None, metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_synthetic:
        write_synthetic_original(Path(args.write_synthetic), hidden=args.hidden, layers=args.layers)
        return 0

    work = Path(tempfile.mkdtemp(prefix="higgs_v3_convert_memory_"))
    try:
        original, output = work / "original", work / "converted"
        original.mkdir()
        started = time.time()
        subprocess.run([sys.executable, __file__, "--write-synthetic", str(original), "--hidden", str(args.hidden),
                        "--layers", str(args.layers)], check=True)
        size = os.path.getsize(original / "model.safetensors")
        print(f"synthetic original checkpoint: {size / 1e9:.3f} GB ({time.time() - started:.0f} s to write)")
        extra = ["--max-shard-size", args.max_shard_size] + (["--no-verify"] if args.no_verify else [])
        measured = measure(original, output, extra)
        if measured is None:
            return 1
        largest_shard = max(p.stat().st_size for p in output.glob("*.safetensors"))
        self_bytes, child_bytes, base_bytes = (measured[k] * 1024 for k in ("self_kib", "children_kib", "import_kib"))
        above = self_bytes - base_bytes
        print(f"conversion{'' if args.no_verify else ' + verification'}: {measured['seconds']:.0f} s, "
              f"{len(list(output.glob('*.safetensors')))} shard(s), the largest {largest_shard / 1e9:.3f} GB")
        print(f"baseline (imports only):           {base_bytes / 1e9:.3f} GB")
        print(f"converter process peak RSS:        {self_bytes / 1e9:.3f} GB = {self_bytes / size:.3f} x checkpoint")
        print(f"  of which above the baseline:     {above / 1e9:.3f} GB = {above / size:.3f} x checkpoint = "
              f"{above / largest_shard:.3f} x the largest shard")
        if not args.no_verify:
            print(f"verification child peak RSS:       {child_bytes / 1e9:.3f} GB (full model in float32, by design)")
        return 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
