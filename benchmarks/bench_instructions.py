# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Decode-step cost in CPU instructions, counted by valgrind's callgrind: the deterministic companion of
`bench_decode.py`'s timings on a machine too noisy for 5% effects (tiny width, batch 1, greedy).

    python benchmarks/bench_instructions.py                 # about 15 minutes on 2 cores (valgrind is slow)
    python benchmarks/bench_instructions.py --short 12 --long 52 --jobs 1

Every variant runs in its own process under `valgrind --tool=callgrind`, once generating --short rows and once --long
rows after the same warm-up call; the instructions per step are (long - short) / (long - short rows), so imports, model
building and the prefill cancel out. Python's hash seed is fixed and its garbage collector is off in those processes.
The counts do not depend on what else runs on the machine, but they are not exact either: on 2026-12-03 one
variant's per-step count moved by up to 3% between runs (allocator and library internals), so compare several runs.
Variants: ours, `qwen3` (plain text decoding with an end-of-text id that never fires) and `qwen3_noeos` (no
end-of-text id), as in `bench_decode.py`.
Instructions are not time (cache misses and branch mispredictions are not in them), so this complements, not
replaces, the timed benchmark. Needs valgrind (Debian: `apt-get install valgrind`). Writes bench_instructions.json
(no plot; --rounds, --threads and --clock do not apply).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import _harness as H


VARIANTS = ("ours", "qwen3", "qwen3_noeos")
PROMPT_LENGTH = 31
WARMUP_ROWS = 12
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def parse_args(argv):
    parser = H.common_parser(__doc__, rounds=1)
    parser.add_argument("--short", type=int, default=12, help="rows of the short run")
    parser.add_argument("--long", type=int, default=92, help="rows of the long run")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind processes at once")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "ROWS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    H.check_positive(short=args.short, long=args.long, jobs=args.jobs)
    if args.long <= args.short:
        parser.error(f"--long ({args.long}) must exceed --short ({args.short}).")
    return args


def run_child(variant: str, rows: int) -> int:
    """Inside the measured process: build the tiny pair, warm up, then generate `rows` rows with `variant`."""
    import gc

    import torch

    gc.disable()  # a collection landing in one run but not the other would dominate the difference
    H.setup(1)
    ours = H.build_ours("tiny", torch.float32)
    baseline = H.build_qwen3_baseline(ours)
    inputs = H.ours_prompt(ours.config, 1, PROMPT_LENGTH)
    ids = H.text_prompt(1, PROMPT_LENGTH, vocab=ours.config.audio_vocab_size)
    runs = {
        "ours": lambda n: H.run_ours(ours, inputs, n, "greedy"),
        "qwen3": lambda n: H.run_qwen3(baseline, ids, n, "greedy", eos=True),
        "qwen3_noeos": lambda n: H.run_qwen3(baseline, ids, n, "greedy", eos=False),
    }
    if variant not in runs:
        raise ValueError(f"variant must be one of {sorted(runs)}, got {variant!r}.")
    with torch.inference_mode():
        runs[variant](WARMUP_ROWS)
        produced = runs[variant](rows)
    if produced != rows:
        raise RuntimeError(f"{variant} produced {produced} rows instead of {rows}.")
    return 0


def parse_collected(valgrind_output: str) -> int:
    """The total instruction count of a callgrind run (its 'Collected : N' line)."""
    match = _COLLECTED.search(valgrind_output)
    if match is None:
        raise RuntimeError(f"No 'Collected' line in valgrind's output:\n{valgrind_output[-2000:]}")
    return int(match.group(1))


def count_instructions(variant: str, rows: int) -> int:
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
               "--child", variant, str(rows)]
    environment = {**os.environ, "PYTHONHASHSEED": "0"}
    result = subprocess.run(command, capture_output=True, text=True, env=environment)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return parse_collected(result.stderr)


def per_step(counts: dict[tuple[str, int], int], short: int, long: int) -> dict[str, float]:
    """Instructions per decode step of each variant from its short and long runs."""
    return {v: (counts[(v, long)] - counts[(v, short)]) / (long - short) for v in VARIANTS if (v, long) in counts}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args.child[0], int(args.child[1]))
    H.setup(1)  # as in the measured processes (and what the JSON's machine record reports)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind).", file=sys.stderr)
        return 1
    jobs = [(variant, rows) for variant in VARIANTS for rows in (args.short, args.long)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: count_instructions(*job), jobs)))
    steps = per_step(counts, args.short, args.long)
    rows = [{"variant": v, "instructions": steps[v] / 1e6, "ratio": steps["ours"] / steps[v]} for v in VARIANTS]
    print(f"Instructions per decode step (tiny fp32, batch 1, greedy; {args.long} - {args.short} rows), callgrind:")
    print(H.format_table(rows, [("variant", "variant", ""), ("instructions", "M instr/step", ".3f"),
                                ("ratio", "ours / variant", ".3f")]))
    payload = {"settings": {"short": args.short, "long": args.long},
               "counts": {f"{v} {n}": c for (v, n), c in counts.items()}, "per_step": steps,
               "ratio_vs_qwen3": steps["ours"] / steps["qwen3"],
               "ratio_vs_qwen3_noeos": steps["ours"] / steps["qwen3_noeos"]}
    print(f"wrote {H.write_results(args.out, 'bench_instructions', payload, args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
