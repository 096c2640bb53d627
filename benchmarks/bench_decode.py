"""Decode-step cost of `HiggsAudioV3ForConditionalGeneration.generate` against `Qwen3ForCausalLM.generate` with an
8208-wide head (= 8 x 1026) on the same backbone, in the same process, variants interleaved.

The decode step is isolated by differencing: (time for N_LONG new rows - time for N_SHORT) / (N_LONG - N_SHORT), so
the prefill and the per-call setup cancel. Medians over rounds, with the spread (min-max) of the ratios.

    python benchmarks/bench_decode.py                   # tiny and real layer width, greedy and sampling, batch 1 / 16
    python benchmarks/bench_decode.py --width tiny --rounds 3

Targets (issue 3): <= 1.05x at real layer width (bf16, batch 1, greedy), <= 1.10x tiny, <= 1.20x sampling; per-stream
cost at batch 16 <= 0.2x batch 1 at real width.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from higgs_v3 import HiggsAudioV3Config, HiggsAudioV3ForConditionalGeneration


WIDTHS = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 dtype=torch.float32),
    "real": dict(hidden_size=2560, intermediate_size=9728, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                 dtype=torch.bfloat16),
}


def build(width: str):
    spec = dict(WIDTHS[width])
    dtype = spec.pop("dtype")
    config = HiggsAudioV3Config(num_hidden_layers=2, **spec)
    torch.manual_seed(0)
    ours = HiggsAudioV3ForConditionalGeneration(config).to(dtype).eval()
    qwen_fields = {k: v for k, v in config.to_dict().items() if k in Qwen3Config().to_dict()}
    qwen_fields.update(vocab_size=config.audio_vocab_size, tie_word_embeddings=True, pad_token_id=0, bos_token_id=None,
                       eos_token_id=None)
    baseline = Qwen3ForCausalLM(Qwen3Config(**qwen_fields)).to(dtype).eval()
    state = {k: v for k, v in ours.model.state_dict().items() if not k.startswith("embed_tokens")}
    baseline.model.load_state_dict(state, strict=False)
    return ours, baseline


def run_ours(model, batch, new_rows, sample):
    ids = torch.tensor([[151667, 151672] + list(range(1000, 1028)) + [151670]] * batch)
    options = dict(do_sample=sample, max_new_tokens=new_rows)
    if sample:
        options.update(temperature=0.9, top_k=50, top_p=0.95, seed=list(range(batch)))
    start = time.perf_counter()
    model.generate(input_ids=ids, **options)
    return time.perf_counter() - start


def run_baseline(model, batch, new_rows, sample):
    ids = torch.tensor([list(range(1000, 1031))] * batch) % 8208
    options = dict(do_sample=sample, max_new_tokens=new_rows, min_new_tokens=new_rows, eos_token_id=None,
                   pad_token_id=0)
    if sample:
        options.update(temperature=0.9, top_k=50, top_p=0.95)
    start = time.perf_counter()
    model.generate(input_ids=ids, **options)
    return time.perf_counter() - start


def step_time(fn, model, batch, sample, short, long):
    return (fn(model, batch, long, sample) - fn(model, batch, short, sample)) / (long - short)


def measure(width, batch, sample, rounds, short, long):
    ours, baseline = build(width)
    with torch.inference_mode():
        for _ in range(2):  # warm-up
            run_ours(ours, batch, short, sample)
            run_baseline(baseline, batch, short, sample)
        ours_times, base_times, ratios = [], [], []
        for r in range(rounds):
            order = [(run_ours, ours, ours_times), (run_baseline, baseline, base_times)]
            if r % 2:
                order.reverse()
            for fn, model, sink in order:
                sink.append(step_time(fn, model, batch, sample, short, long))
            ratios.append(ours_times[-1] / base_times[-1])
    return {
        "width": width, "batch": batch, "mode": "sampling" if sample else "greedy",
        "ours_ms": 1e3 * statistics.median(ours_times), "qwen3_ms": 1e3 * statistics.median(base_times),
        "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", choices=["tiny", "real", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--short", type=int, default=8)
    parser.add_argument("--long", type=int, default=40)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    widths = ["tiny", "real"] if args.width == "both" else [args.width]
    cases = []
    for width in widths:
        cases += [(width, 1, False), (width, 1, True)]
    if "real" in widths:
        cases.append(("real", 16, False))
    results = [measure(w, b, s, args.rounds, args.short, args.long) for w, b, s in cases]
    print(f"{'width':6} {'batch':>5} {'mode':9} {'ours ms':>9} {'qwen3 ms':>9} {'ratio':>7} {'spread':>13}")
    for r in results:
        print(f"{r['width']:6} {r['batch']:>5} {r['mode']:9} {r['ours_ms']:9.3f} {r['qwen3_ms']:9.3f} "
              f"{r['ratio']:7.3f} {r['ratio_min']:6.3f}-{r['ratio_max']:.3f}")
    by_key = {(r["width"], r["batch"], r["mode"]): r for r in results}
    if ("real", 16, "greedy") in by_key and ("real", 1, "greedy") in by_key:
        per_stream = by_key[("real", 16, "greedy")]["ours_ms"] / 16 / by_key[("real", 1, "greedy")]["ours_ms"]
        print(f"per-stream cost at batch 16 / batch 1 (real width, greedy): {per_stream:.3f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
