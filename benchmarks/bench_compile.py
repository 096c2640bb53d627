# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Our decode step with the dynamic cache (eager), the static cache (eager) and the static cache + `torch.compile`
(transformers' own `compile_config` path of `generate`), same process, interleaved; greedy codes of the compiled
path checked against eager before any timing is reported.

    python benchmarks/bench_compile.py                          # tiny fp32 b1, real width bf16 b1 and b16
    python benchmarks/bench_compile.py --width tiny --backend eager   # dynamo only, no inductor code generation

`generate` compiles the decode step only when the device is a GPU, unless the `CompileConfig` says otherwise; here
`compile_config._compile_all_devices = True` asks for it on the CPU (as transformers' own CPU tests do). The first
compiled call (compilation) is timed separately. The static cache has the same length in every run (same prompt and
row count), so nothing recompiles between rounds. Writes bench_compile.json and bench_compile.png into --out.
"""

from __future__ import annotations

import sys
import time

import torch
from transformers import CompileConfig

import _harness as H


PROMPT_LENGTH = 31
CASES = [("tiny", "fp32", 1), ("real", "bf16", 1), ("real", "bf16", 16)]


def parse_args(argv):
    parser = H.common_parser(__doc__, rounds=5)
    parser.add_argument("--width", choices=["tiny", "real", "both"], default="both")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="dtype at real width (tiny: fp32)")
    parser.add_argument("--batch", type=int, nargs="+", default=None, help="default: 1 (tiny); 1 and 16 (real)")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend (default inductor)")
    parser.add_argument("--skip", type=int, default=8, help="rows not timed (prefill and delay window)")
    parser.add_argument("--rows", type=int, default=32, help="rows per timed run")
    parser.add_argument("--check-rows", type=int, default=24, help="greedy rows compared eager vs compiled")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="max logit difference / logit std where codes may differ (default 1e-3 fp32, 0.25 bf16)")
    args = parser.parse_args(argv)
    H.check_positive(rounds=args.rounds, rows=args.rows, check_rows=args.check_rows)
    if args.rows < args.skip + 2:
        parser.error(f"--rows ({args.rows}) must exceed --skip ({args.skip}) by at least 2.")
    return args


def cases(args) -> list[tuple[str, str, int]]:
    out = []
    for width in (["tiny", "real"] if args.width == "both" else [args.width]):
        dtype = "fp32" if width == "tiny" else args.dtype
        batches = args.batch or ([1] if width == "tiny" else [1, 16])
        out += [(width, dtype, batch) for batch in batches]
    return out


def compile_config(backend: str, device: str = "cpu") -> CompileConfig:
    """fullgraph, static shapes; CUDA graphs ("reduce-overhead") on a GPU with inductor, plain inductor on a CPU."""
    mode = "reduce-overhead" if device == "cuda" and backend == "inductor" else None
    config = CompileConfig(fullgraph=True, dynamic=False, backend=backend, mode=mode)
    config._compile_all_devices = True  # transformers compiles on a CPU only when asked this way
    return config


def variant_options(compiled: CompileConfig) -> dict[str, dict]:
    return {
        "dynamic": {},
        "static": {"cache_implementation": "static", "disable_compile": True},
        "static+compile": {"cache_implementation": "static", "compile_config": compiled},
    }


def measure(ours, batch: int, args) -> dict:
    inputs = H.ours_prompt(ours.config, batch, PROMPT_LENGTH)
    options = variant_options(compile_config(args.backend))
    tolerance = args.tolerance if args.tolerance is not None else (1e-3 if ours.dtype == torch.float32 else 0.25)
    with torch.inference_mode():
        if hasattr(ours, "_compiled_call"):  # a new batch size: start from a fresh compilation
            del ours._compiled_call
        start = time.perf_counter()
        H.run_ours(ours, inputs, args.rows, "greedy", **options["static+compile"])
        first_call_s = time.perf_counter() - start
        check = H.greedy_agreement(ours, inputs, args.check_rows, options["dynamic"], options["static+compile"],
                                   tolerance)
        if not check["agree"]:
            raise SystemExit(f"Compiled and eager greedy codes disagree ({check}); no timings reported.")
        variants = {
            name: (lambda opts: lambda: H.clocked_run(
                lambda s: H.run_ours(ours, inputs, args.rows, "greedy", s, **opts), rows=args.rows, skip=args.skip,
                skip_prompt=False, clock=args.clock))(opts)
            for name, opts in options.items()
        }
        runs = H.interleaved(variants, args.rounds, warmup=1)
    steps = {name: H.summarize([1e3 * r["step_s"] for r in rs]) for name, rs in runs.items()}
    return {
        "steps_ms": steps,
        "speedup_vs_dynamic": {name: H.ratio_summary(runs["dynamic"], rs) for name, rs in runs.items()},
        "first_compiled_call_s": first_call_s,
        "agreement": check,
    }


def plot(results: list[dict], out, name: str):
    plt = H.pyplot()
    figure, axis = plt.subplots(figsize=(8, 4.5))
    names = list(results[0]["steps_ms"])
    x = list(range(len(results)))
    width = 0.8 / len(names)
    for k, variant in enumerate(names):
        medians, yerr = H.error_bars([r["steps_ms"][variant] for r in results])
        axis.bar([i + (k - (len(names) - 1) / 2) * width for i in x], medians, width=width, yerr=yerr, capsize=3,
                 label=variant)
    axis.set_yscale("log")
    axis.set_xticks(x, [f"{r['width']} {r['dtype']} b{r['batch']}" for r in results])
    axis.set_ylabel("decode step, ms (median, min-max over rounds)")
    axis.set_title("Our decode step: dynamic cache vs static cache vs static + torch.compile")
    axis.legend(fontsize=8)
    return H.save_figure(figure, out, name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    H.setup(args.threads)
    args.clock = H.resolve_clock(args.clock, args.threads)
    results = []
    built = {}
    for width, dtype, batch in cases(args):
        if (width, dtype) not in built:
            built.clear()
            built[(width, dtype)] = H.build_ours(width, H.DTYPES[dtype])
        results.append({"width": width, "dtype": dtype, "batch": batch,
                        **measure(built[(width, dtype)], batch, args)})
        print(f"  measured {width} {dtype} batch {batch}", file=sys.stderr, flush=True)
    rows = []
    for r in results:
        agreement = r["agreement"]
        row = {"case": f"{r['width']} {r['dtype']} b{r['batch']}", "compile_s": r["first_compiled_call_s"],
               "codes": "identical" if agreement["identical"] else
               f"{agreement['identical_rows']}/{agreement['rows']} rows, near-tie"}
        for name, summary in r["steps_ms"].items():
            row[name] = summary["median"]
            row[f"x_{name}"] = r["speedup_vs_dynamic"][name]["median"]
        rows.append(row)
    columns = [("case", "case", "")]
    for name in results[0]["steps_ms"]:
        columns.append((name, f"{name} ms", ".3f"))
    columns += [("x_static+compile", "dynamic/compiled", ".2f"), ("compile_s", "1st compiled call s", ".1f"),
                ("codes", "greedy codes vs eager", "")]
    print(f"Decode step, median over {args.rounds} rounds ({args.clock} clock, {args.threads} thread(s), backend "
          f"{args.backend}):")
    print(H.format_table(rows, columns))
    payload = {"settings": {k: str(v) for k, v in vars(args).items()}, "results": results}
    print(f"wrote {H.write_results(args.out, 'bench_compile', payload, args.json)}")
    if not args.no_plot:
        print(f"wrote {plot(results, args.out, 'bench_compile')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
