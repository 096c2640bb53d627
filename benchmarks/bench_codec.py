# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Cost of the bundled codec (the Higgs Audio v2 tokenizer, REAL_CODEC_CONFIG, random weights, fp32) per second of
audio: `decode` (codes -> 24 kHz waveform, what every generation pays at the end) and `encode` (a reference clip ->
codes, what a voice clone pays once), for several clip lengths; same process, interleaved.

    python benchmarks/bench_codec.py                          # 1, 2, 5, 10 s clips (about a minute)
    python benchmarks/bench_codec.py --seconds 1 2 --rounds 2

The figure of merit is compute seconds per second of audio (a real-time factor; below 1 is faster than real time).
Writes bench_codec.json and bench_codec.png into --out.
"""

from __future__ import annotations

import sys

import torch

import _harness as H
from higgs_v3.codec_higgs_v3 import HiggsAudioV3Codec
from higgs_v3.tiny_higgs_v3 import tiny_codec_config
from higgs_v3.configuration_higgs_v3 import REAL_CODEC_CONFIG


def parse_args(argv):
    parser = H.common_parser(__doc__, rounds=3)
    parser.add_argument("--seconds", type=float, nargs="+", default=[1, 2, 5, 10], help="clip lengths")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tiny", action="store_true", help="the shrunk test codec (real strides) instead of the real one")
    args = parser.parse_args(argv)
    H.check_positive(rounds=args.rounds, batch=args.batch)
    if min(args.seconds) < 0.04:
        parser.error(f"--seconds must be at least one frame (0.04 s), got {min(args.seconds)}.")
    return args


def build_codec(tiny: bool) -> HiggsAudioV3Codec:
    torch.manual_seed(0)
    return HiggsAudioV3Codec.from_codec_config(tiny_codec_config() if tiny else REAL_CODEC_CONFIG).eval()


def timed(fn, clock: str) -> dict:
    now = H.CLOCKS[clock]
    start = now()
    out = fn()
    return {"s": now() - start, "out": tuple(out.shape)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    H.setup(args.threads)
    args.clock = H.resolve_clock(args.clock, args.threads)
    codec = build_codec(args.tiny)
    rate, hop = codec.sampling_rate, codec.hop_length
    generator = torch.Generator().manual_seed(0)
    variants, inputs = {}, {}
    for seconds in args.seconds:
        frames = max(1, round(seconds * rate / hop))
        codes = torch.randint(0, codec.config.codebook_size, (args.batch, codec.num_quantizers, frames),
                              generator=generator)
        audio = 0.1 * torch.randn(args.batch, 1, frames * hop, generator=generator)
        inputs[seconds] = (codes, audio)
        variants[f"decode {seconds:g}s"] = (lambda c: lambda: timed(lambda: codec.decode(c), args.clock))(codes)
        variants[f"encode {seconds:g}s"] = (lambda a: lambda: timed(lambda: codec.encode(a), args.clock))(audio)
    with torch.inference_mode():
        runs = H.interleaved(variants, args.rounds, warmup=1)
    results = []
    for seconds in args.seconds:
        codes, audio = inputs[seconds]
        audio_seconds = args.batch * audio.shape[-1] / rate
        entry = {"seconds": audio.shape[-1] / rate, "batch": args.batch, "frames": codes.shape[-1]}
        for op in ("decode", "encode"):
            rs = runs[f"{op} {seconds:g}s"]
            entry[f"{op}_s"] = H.summarize([r["s"] for r in rs])
            entry[f"{op}_rtf"] = H.summarize([r["s"] / audio_seconds for r in rs])
            entry[f"{op}_output_shape"] = rs[0]["out"]
        results.append(entry)
    rows = [{
        "seconds": r["seconds"], "decode_s": r["decode_s"]["median"], "decode_rtf": r["decode_rtf"]["median"],
        "decode_spread": f"{r['decode_rtf']['min']:.3f}-{r['decode_rtf']['max']:.3f}",
        "encode_s": r["encode_s"]["median"], "encode_rtf": r["encode_rtf"]["median"],
        "encode_spread": f"{r['encode_rtf']['min']:.3f}-{r['encode_rtf']['max']:.3f}",
    } for r in results]
    name = "tiny" if args.tiny else "real"
    title = (f"Codec ({name} config, random weights, fp32, batch {args.batch}; {args.clock} clock, {args.threads} "
             "thread(s))")
    print(title + ": compute seconds, and seconds per second of audio (RTF), median over rounds:")
    print(H.format_table(rows, [("seconds", "audio s", "g"), ("decode_s", "decode s", ".3f"),
                                ("decode_rtf", "decode RTF", ".3f"), ("decode_spread", "spread", ""),
                                ("encode_s", "encode s", ".3f"), ("encode_rtf", "encode RTF", ".3f"),
                                ("encode_spread", "spread", "")]))
    parameters = {
        "total": sum(p.numel() for p in codec.parameters()),
        "decode_path": sum(p.numel() for module in (codec.quantizer, codec.fc2, codec.acoustic_decoder)
                           for p in module.parameters()),
    }
    print(f"codec parameters: {parameters['total'] / 1e6:.1f} M, of which the decode path (quantizer, fc2, acoustic "
          f"decoder) {parameters['decode_path'] / 1e6:.1f} M")
    payload = {"settings": {k: str(v) for k, v in vars(args).items()}, "parameters": parameters, "results": results}
    print(f"wrote {H.write_results(args.out, 'bench_codec', payload, args.json)}")
    if not args.no_plot:
        plt = H.pyplot()
        figure, axis = plt.subplots(figsize=(7, 4.5))
        seconds = [r["seconds"] for r in results]
        for op in ("decode", "encode"):
            medians, yerr = H.error_bars([r[f"{op}_rtf"] for r in results])
            axis.errorbar(seconds, medians, yerr=yerr, marker="o", capsize=3, label=op)
        axis.axhline(1.0, color="gray", linewidth=0.8)
        axis.set_xscale("log")
        axis.set_xlabel("clip length, s")
        axis.set_ylabel("compute s per audio s (median, min-max)")
        axis.set_title(title, fontsize=9)
        axis.legend()
        print(f"wrote {H.save_figure(figure, args.out, 'bench_codec')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
