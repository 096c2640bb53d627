# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Decode step of our `generate` against transformers' own `HiggsAudioV2ForConditionalGeneration.generate` at matched
shapes (same width, layers, heads, 8 codebooks x 1026 = an 8208-wide audio head), same process, interleaved.

    python benchmarks/bench_v2.py                    # tiny fp32 and real width bf16, batch 1/16, greedy (+ sampling b1)
    python benchmarks/bench_v2.py --width real --dtype fp32 --batch 1 --mode greedy sampling

transformers' Higgs v2 *model* imports and runs without torchaudio: only its codec
(`HiggsAudioV2TokenizerModel`) imports torchaudio, and no codec is needed to generate codes. Differences that stay:
its layers hold a second ("audio") MLP, of which an audio step runs one, so a step does the same matrix work as ours;
Llama-style attention (no q/k RMSNorm, which Qwen3 has); its own forked `_sample` loop, which concatenates the
growing `audio_input_ids` each step and recomputes a cumulative mask over them in `prepare_inputs_for_generation`.
Its prompt ends with `<|audio_out_bos|>`, so its delay-pattern processor forces BOC over the first rows as ours does.
Writes bench_v2.json and bench_v2.png into --out.
"""

from __future__ import annotations

import sys

import torch

import _harness as H


PROMPT_LENGTH = 31


def parse_args(argv):
    parser = H.common_parser(__doc__, rounds=5)
    parser.add_argument("--width", choices=["tiny", "real", "both"], default="both")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="dtype at real width (tiny: fp32)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--mode", choices=["greedy", "sampling"], nargs="+", default=None,
                        help="default: greedy at every batch size, sampling at batch 1")
    parser.add_argument("--skip", type=int, default=8, help="rows not timed (prefill and delay window)")
    parser.add_argument("--rows", type=int, default=32, help="rows per timed run")
    args = parser.parse_args(argv)
    H.check_positive(rounds=args.rounds, rows=args.rows, batch=min(args.batch))
    if args.rows < args.skip + 2:
        parser.error(f"--rows ({args.rows}) must exceed --skip ({args.skip}) by at least 2.")
    return args


def cases(args) -> list[tuple[str, str, int, str]]:
    widths = ["tiny", "real"] if args.width == "both" else [args.width]
    out = []
    for width in widths:
        dtype = "fp32" if width == "tiny" else args.dtype
        for batch in args.batch:
            modes = args.mode or (["greedy", "sampling"] if batch == 1 else ["greedy"])
            out += [(width, dtype, batch, mode) for mode in modes]
    return out


def measure(ours, v2, batch: int, mode: str, args) -> dict:
    inputs = H.ours_prompt(ours.config, batch, PROMPT_LENGTH)
    ids = H.text_prompt(batch, PROMPT_LENGTH, vocab=v2.config.vocab_size, last=v2.config.audio_bos_token_id)

    def ours_rows(rows, streamer=None):
        return H.run_ours(ours, inputs, rows, mode, streamer)

    def v2_rows(rows, streamer=None):
        return H.run_v2(v2, ids, rows, mode, streamer)

    def timed(fn, skip_prompt):
        return lambda: H.clocked_run(lambda s: fn(args.rows, s), rows=args.rows, skip=args.skip,
                                     skip_prompt=skip_prompt, clock=args.clock)

    with torch.inference_mode():
        ours_rows(args.skip + 2)  # warm-up
        v2_rows(args.skip + 2)
        runs = H.interleaved({"ours": timed(ours_rows, False), "v2": timed(v2_rows, True)}, args.rounds, warmup=0)
        counts = {name: H.calls_per_step(fn, args.skip + 1, args.skip + 5)
                  for name, fn in (("ours", ours_rows), ("v2", v2_rows))}
    return {
        "ours_ms": H.summarize([1e3 * r["step_s"] for r in runs["ours"]]),
        "v2_ms": H.summarize([1e3 * r["step_s"] for r in runs["v2"]]),
        "ratio": H.ratio_summary(runs["ours"], runs["v2"]),
        "best_ratio": min(r["step_s"] for r in runs["ours"]) / min(r["step_s"] for r in runs["v2"]),
        "calls_per_step": counts,
    }


def plot(results: list[dict], out, name: str):
    plt = H.pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(max(12, 1.3 * len(results)), 5.2))
    labels = [f"{r['width']} {r['dtype']} b{r['batch']} {r['mode']}" for r in results]
    x = list(range(len(results)))
    for offset, key, label in ((-0.2, "ours_ms", "ours"), (0.2, "v2_ms", "transformers HiggsAudioV2")):
        medians, yerr = H.error_bars([r[key] for r in results])
        left.bar([i + offset for i in x], medians, width=0.4, yerr=yerr, capsize=3, label=label)
    left.set_yscale("log")
    left.set_ylabel("decode step, ms (median, min-max over rounds)")
    left.set_xticks(x, labels, fontsize=8, rotation=35, ha="right")
    left.legend(fontsize=8)
    left.set_title("Decode step: ours vs transformers' Higgs v2")
    medians, yerr = H.error_bars([r["ratio"] for r in results])
    right.errorbar(x, medians, yerr=yerr, fmt="o", capsize=4)
    right.axhline(1.0, color="gray", linewidth=0.8)
    right.set_xticks(x, labels, fontsize=8, rotation=35, ha="right")
    right.set_ylabel("ours / v2 (per round)")
    right.set_title("Ratio (below 1: ours is faster)")
    return H.save_figure(figure, out, name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    H.setup(args.threads)
    args.clock = H.resolve_clock(args.clock, args.threads)
    results = []
    built = {}
    for width, dtype, batch, mode in cases(args):
        if (width, dtype) not in built:
            built.clear()
            ours = H.build_ours(width, H.DTYPES[dtype])
            built[(width, dtype)] = (ours, H.build_v2(ours))
        ours, v2 = built[(width, dtype)]
        results.append({"width": width, "dtype": dtype, "batch": batch, "mode": mode,
                        **measure(ours, v2, batch, mode, args)})
        print(f"  measured {width} {dtype} batch {batch} {mode}", file=sys.stderr, flush=True)
    rows = [{
        "case": f"{r['width']} {r['dtype']} b{r['batch']} {r['mode']}",
        "ours": r["ours_ms"]["median"], "v2": r["v2_ms"]["median"], "ratio": r["ratio"]["median"],
        "spread": f"{r['ratio']['min']:.3f}-{r['ratio']['max']:.3f}", "best": r["best_ratio"],
        "calls": f"{r['calls_per_step']['ours']['torch_calls']:.0f}/{r['calls_per_step']['v2']['torch_calls']:.0f}",
        "reads": f"{r['calls_per_step']['ours']['host_reads']:.0f}/{r['calls_per_step']['v2']['host_reads']:.0f}",
    } for r in results]
    print(f"Decode step, ours vs transformers' HiggsAudioV2ForConditionalGeneration.generate, median over "
          f"{args.rounds} rounds ({args.clock} clock, {args.threads} thread(s)):")
    print(H.format_table(rows, [("case", "case", ""), ("ours", "ours ms", ".3f"), ("v2", "v2 ms", ".3f"),
                                ("ratio", "ratio", ".3f"), ("spread", "spread", ""), ("best", "best", ".3f"),
                                ("calls", "calls/step", ""), ("reads", "host reads/step", "")]))
    payload = {"settings": {k: str(v) for k, v in vars(args).items()}, "results": results}
    print(f"wrote {H.write_results(args.out, 'bench_v2', payload, args.json)}")
    if not args.no_plot:
        print(f"wrote {plot(results, args.out, 'bench_v2')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
