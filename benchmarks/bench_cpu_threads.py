# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Why CPU decode numbers need care: one real-width MLP projection (`[batch, 2560] @ [2560, 9728]`, the largest matrix
of a decode step) in fp32 and bf16, at batch 1 and 16, with 1 and 2 torch threads; interleaved, wall clock.

    python benchmarks/bench_cpu_threads.py               # about 30 seconds
    python benchmarks/bench_cpu_threads.py --reps 5 --rounds 2

A decode step at batch 1 streams every weight once, so the figure of merit is the weight bandwidth (GB/s). On a
machine whose cores are shared with other processes, two OpenMP threads wait for each other whenever another process
holds one of the cores. To show it reproducibly, each measurement block runs with --busy K spinning processes started
by this script (default: a block with 0 and a block with 1; they are stopped afterwards). Writes
bench_cpu_threads.json and bench_cpu_threads.png into --out (the --threads and --clock options are ignored: this
script sets the threads itself and always uses the wall clock).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import _harness as H


def parse_args(argv):
    parser = H.common_parser(__doc__, rounds=5)
    parser.add_argument("--reps", type=int, default=20, help="matmuls per measurement (median kept)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--thread-counts", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--in-features", type=int, default=2560)
    parser.add_argument("--out-features", type=int, default=9728)
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 1],
                        help="spinning processes running during each measurement block (default: 0, then 1)")
    args = parser.parse_args(argv)
    H.check_positive(rounds=args.rounds, reps=args.reps, batch=min(args.batch), threads=min(args.thread_counts))
    if min(args.busy) < 0:
        parser.error(f"--busy takes counts of processes (0 or more), got {min(args.busy)}.")
    return args


class Busy:
    """`count` processes spinning on the CPU while the block runs (another tenant of a shared machine)."""

    def __init__(self, count: int):
        self.count = count
        self.processes: list[subprocess.Popen] = []

    def __enter__(self):
        self.processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.count)]
        time.sleep(0.3 if self.processes else 0.0)  # let them start spinning
        return self

    def __exit__(self, *exc):
        for process in self.processes:
            process.kill()
            process.wait()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    H.setup(1)
    generator = torch.Generator().manual_seed(0)
    weights = {name: torch.randn(args.out_features, args.in_features, generator=generator).to(dtype)
               for name, dtype in H.DTYPES.items()}
    inputs = {(name, batch): torch.randn(batch, args.in_features, generator=generator).to(dtype)
              for name, dtype in H.DTYPES.items() for batch in args.batch}

    def measure(dtype: str, batch: int, threads: int):
        def run() -> dict:
            torch.set_num_threads(threads)
            weight, x = weights[dtype], inputs[(dtype, batch)]
            times = []
            for _ in range(args.reps):
                start = time.perf_counter()
                F.linear(x, weight)
                times.append(time.perf_counter() - start)
            return {"s": statistics.median(times)}
        return run

    results = []
    load_before = {}
    for busy in args.busy:
        load_before[busy] = H.machine_info()["load_average_1min"]
        variants = {(d, b, t): measure(d, b, t) for d in H.DTYPES for b in args.batch for t in args.thread_counts}
        with Busy(busy):
            runs = H.interleaved(variants, args.rounds, warmup=1)
        torch.set_num_threads(1)
        for (dtype, batch, threads), rs in runs.items():
            seconds = H.summarize([r["s"] for r in rs])
            nbytes = weights[dtype].numel() * weights[dtype].element_size()
            results.append({"busy": busy, "dtype": dtype, "batch": batch, "threads": threads,
                            "ms": {k: (v * 1e3 if k != "n" else v) for k, v in seconds.items()},
                            "weight_GBps": nbytes / seconds["median"] / 1e9})
    rows = [{"busy": r["busy"], "dtype": r["dtype"], "batch": r["batch"], "threads": r["threads"],
             "ms": r["ms"]["median"], "spread": f"{r['ms']['min']:.2f}-{r['ms']['max']:.2f}", "gbps": r["weight_GBps"]}
            for r in results]
    print(f"F.linear [batch, {args.in_features}] x [{args.out_features}, {args.in_features}]^T, wall clock, median over "
          f"{args.rounds} rounds; 'busy' spinning processes ran beside it (1-min load average before each block: "
          f"{load_before}):")
    print(H.format_table(rows, [("busy", "busy", "d"), ("dtype", "dtype", ""), ("batch", "batch", "d"),
                                ("threads", "threads", "d"), ("ms", "ms", ".2f"), ("spread", "spread", ""),
                                ("gbps", "weight GB/s", ".1f")]))
    payload = {"settings": {k: str(v) for k, v in vars(args).items()}, "load_average_before": load_before,
               "results": results}
    print(f"wrote {H.write_results(args.out, 'bench_cpu_threads', payload, args.json)}")
    if not args.no_plot:
        plt = H.pyplot()
        figure, axis = plt.subplots(figsize=(max(8, 0.6 * len(results)), 4.8))
        labels = [f"{r['dtype']} b{r['batch']}\n{r['threads']} thr\nbusy {r['busy']}" for r in results]
        medians, yerr = H.error_bars([r["ms"] for r in results])
        colors = ["tab:blue" if r["threads"] == 1 else "tab:orange" for r in results]
        axis.bar(range(len(results)), medians, yerr=yerr, capsize=3, color=colors)
        axis.set_xticks(range(len(results)), labels, fontsize=8)
        axis.set_ylabel("ms per matmul (median, min-max over rounds)")
        axis.set_yscale("log")
        axis.set_title("One real-width MLP projection: 1 thread (blue) vs 2 threads (orange), with 'busy' spinning "
                       "processes beside it", fontsize=9)
        print(f"wrote {H.save_figure(figure, args.out, 'bench_cpu_threads')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
