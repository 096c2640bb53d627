# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Prompt-length scaling, 32 to 2048 tokens: prefill (time to the first row) and the decode step at that context, for
our model with a plain text prompt, our model with a voice-clone prompt (3/4 of it reference-audio placeholders,
embedded from their code rows), and `Qwen3ForCausalLM` with an 8208-wide head on the same backbone; same process,
interleaved. Batch 1, greedy.

    python benchmarks/bench_prompt.py                     # real width bf16, lengths 32 128 512 2048 (~2 minutes)
    python benchmarks/bench_prompt.py --width tiny --lengths 32 64 --rounds 2

What to look for: the three prefill curves should coincide (placeholder substitution is a masked scatter, the head
runs on the last position only), and so should the decode steps (our per-step work must not grow with the prompt:
the stock loop appends each step's row to `input_ids`, which for us holds 8 rows per sequence).
Writes bench_prompt.json and bench_prompt.png into --out.
"""

from __future__ import annotations

import sys

import torch

import _harness as H


def parse_args(argv):
    parser = H.common_parser(__doc__, rounds=3)
    parser.add_argument("--width", choices=["tiny", "real"], default="real")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="dtype at real width (tiny: fp32)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 128, 512, 2048])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--skip", type=int, default=8, help="rows not timed (delay window)")
    parser.add_argument("--rows", type=int, default=20, help="rows per timed run")
    args = parser.parse_args(argv)
    H.check_positive(rounds=args.rounds, rows=args.rows, batch=args.batch)
    if min(args.lengths) < 8:
        parser.error(f"--lengths must be at least 8 tokens (a clone prompt needs room), got {min(args.lengths)}.")
    if args.rows < args.skip + 2:
        parser.error(f"--rows ({args.rows}) must exceed --skip ({args.skip}) by at least 2.")
    return args


def measure(ours, baseline, length: int, args) -> dict:
    text = H.ours_prompt(ours.config, args.batch, length)
    reference_rows = min((3 * length) // 4, length - 5)  # leaves the 4 fixed tokens and at least one word
    clone = H.ours_prompt(ours.config, args.batch, length, reference_rows=reference_rows)
    ids = H.text_prompt(args.batch, length, vocab=ours.config.audio_vocab_size)
    calls = {
        "ours (text prompt)": (lambda s: H.run_ours(ours, text, args.rows, "greedy", s), False),
        "ours (clone prompt)": (lambda s: H.run_ours(ours, clone, args.rows, "greedy", s), False),
        "qwen3": (lambda s: H.run_qwen3(baseline, ids, args.rows, "greedy", s), True),
    }
    variants = {
        name: (lambda call, skip_prompt: lambda: H.clocked_run(
            call, rows=args.rows, skip=args.skip, skip_prompt=skip_prompt, clock=args.clock))(call, skip_prompt)
        for name, (call, skip_prompt) in calls.items()
    }
    with torch.inference_mode():
        runs = H.interleaved(variants, args.rounds, warmup=1)
    return {
        "length": length,
        "prefill_ms": {name: H.summarize([1e3 * r["first_row_s"] for r in rs]) for name, rs in runs.items()},
        "step_ms": {name: H.summarize([1e3 * r["step_s"] for r in rs]) for name, rs in runs.items()},
        "prefill_ratio_vs_qwen3": {name: H.ratio_summary(rs, runs["qwen3"], "first_row_s") for name, rs in runs.items()
                                   if name != "qwen3"},
        "step_ratio_vs_qwen3": {name: H.ratio_summary(rs, runs["qwen3"]) for name, rs in runs.items()
                                if name != "qwen3"},
    }


def plot(results: list[dict], out, name: str, title: str):
    plt = H.pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    lengths = [r["length"] for r in results]
    for axis, key, label in ((axes[0], "prefill_ms", "prefill (time to first row), ms"),
                             (axes[1], "step_ms", "decode step, ms")):
        for variant in results[0][key]:
            medians, yerr = H.error_bars([r[key][variant] for r in results])
            axis.errorbar(lengths, medians, yerr=yerr, marker="o", capsize=3, label=variant)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("prompt tokens")
        axis.set_ylabel(label + " (median, min-max)")
        axis.legend(fontsize=8)
    figure.suptitle(title)
    return H.save_figure(figure, out, name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    H.setup(args.threads)
    args.clock = H.resolve_clock(args.clock, args.threads)
    dtype = "fp32" if args.width == "tiny" else args.dtype
    ours = H.build_ours(args.width, H.DTYPES[dtype])
    baseline = H.build_qwen3_baseline(ours)
    results = []
    for length in args.lengths:
        results.append(measure(ours, baseline, length, args))
        print(f"  measured {length} tokens", file=sys.stderr, flush=True)
    rows = []
    for r in results:
        row = {"length": r["length"]}
        for variant, short in (("ours (text prompt)", "text"), ("ours (clone prompt)", "clone"), ("qwen3", "qwen3")):
            row[f"p_{short}"] = r["prefill_ms"][variant]["median"]
            row[f"s_{short}"] = r["step_ms"][variant]["median"]
        row["pr"] = r["prefill_ratio_vs_qwen3"]["ours (clone prompt)"]["median"]
        row["sr"] = r["step_ratio_vs_qwen3"]["ours (text prompt)"]["median"]
        rows.append(row)
    columns = [("length", "tokens", "d"), ("p_text", "prefill text", ".1f"), ("p_clone", "prefill clone", ".1f"),
               ("p_qwen3", "prefill qwen3", ".1f"), ("pr", "clone/qwen3", ".3f"), ("s_text", "step text", ".2f"),
               ("s_clone", "step clone", ".2f"), ("s_qwen3", "step qwen3", ".2f"), ("sr", "text/qwen3", ".3f")]
    title = (f"Prompt-length scaling, {args.width} width {dtype}, 2 layers, batch {args.batch} "
             f"({args.clock} clock, {args.threads} thread(s))")
    print(title + ", ms, median over rounds:")
    print(H.format_table(rows, columns))
    payload = {"settings": {k: str(v) for k, v in vars(args).items()}, "results": results}
    print(f"wrote {H.write_results(args.out, 'bench_prompt', payload, args.json)}")
    if not args.no_plot:
        print(f"wrote {plot(results, args.out, 'bench_prompt', title)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
