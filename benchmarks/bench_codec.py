# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Cost of the bundled codec (the Higgs Audio v2 tokenizer, REAL_CODEC_CONFIG, random weights, fp32) per second of
audio: `decode` (codes -> 24 kHz waveform, what every generation pays at the end) and `encode` (a reference clip ->
codes, what a voice clone pays once), for several clip lengths; same process, interleaved.

    python benchmarks/bench_codec.py                          # 1, 2, 5, 10 s clips (about a minute)
    python benchmarks/bench_codec.py --seconds 1 2 --rounds 2

It also times `encode_reference`'s whole path (a --reference-rate clip resampled to 24 kHz, then encoded, which
resamples again to 16 kHz in front of HuBERT) with the project's resampler (torchaudio's algorithm in plain torch,
issue 12) against the soxr resampler it replaced, side by side, and prints the ratio (needs `soxr`: pip install
'higgs-v3[bench]'; without it only the current path is timed).

The figure of merit is compute seconds per second of audio (a real-time factor; below 1 is faster than real time).
Writes bench_codec.json and bench_codec.png into --out.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import torch
import torch.nn.functional as F

import _harness as H
from higgs_v3 import audio_io_higgs_v3, codec_higgs_v3
from higgs_v3.audio_io_higgs_v3 import prepare_reference_waveform
from higgs_v3.codec_higgs_v3 import HiggsAudioV3Codec
from higgs_v3.testing.tiny import tiny_codec_config
from higgs_v3.conversion.original_format import REAL_CODEC_CONFIG


def parse_args(argv):
    parser = H.common_parser(__doc__, rounds=3)
    parser.add_argument("--seconds", type=float, nargs="+", default=[1, 2, 5, 10], help="clip lengths")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tiny", action="store_true", help="the shrunk test codec (real strides) instead of the real one")
    parser.add_argument("--reference-rate", type=int, default=44100, help="sample rate of the encode_reference clips")
    args = parser.parse_args(argv)
    H.check_positive(rounds=args.rounds, batch=args.batch)
    if min(args.seconds) < 0.04:
        parser.error(f"--seconds must be at least one frame (0.04 s), got {min(args.seconds)}.")
    return args


def build_codec(tiny: bool) -> HiggsAudioV3Codec:
    torch.manual_seed(0)
    return HiggsAudioV3Codec.from_codec_config(tiny_codec_config() if tiny else REAL_CODEC_CONFIG).eval()


def soxr_resample(waveform: torch.Tensor, orig_sr: int, target_sr: int) -> torch.Tensor:
    """The resampler before issue 12 (soxr "HQ", float32 on the CPU, cropped or padded to torchaudio's length)."""
    import soxr

    if orig_sr == target_sr:
        return waveform
    length = waveform.shape[-1]
    target_length = math.ceil(length * target_sr / orig_sr)
    channels = waveform.detach().reshape(-1, length).to(device="cpu", dtype=torch.float32)  # [C, N]
    out = torch.from_numpy(np.ascontiguousarray(soxr.resample(np.ascontiguousarray(channels.numpy().T), orig_sr,
                                                              target_sr).T))  # [C, ~M]
    out = F.pad(out, (0, max(0, target_length - out.shape[-1])))[:, :target_length]
    return out.reshape(*waveform.shape[:-1], target_length).to(device=waveform.device, dtype=waveform.dtype)


def has_soxr() -> bool:
    try:
        import soxr  # noqa: F401
    except ImportError:
        return False
    return True


def encode_reference_path(codec: HiggsAudioV3Codec, clip: np.ndarray, rate: int, resample) -> torch.Tensor:
    """`model.encode_reference`'s work (front end, then the codec) with `resample` as the project's resampler."""
    saved = codec_higgs_v3.resample_audio, audio_io_higgs_v3.resample_audio
    codec_higgs_v3.resample_audio = audio_io_higgs_v3.resample_audio = resample
    try:
        return codec.encode_waveform(prepare_reference_waveform(clip, rate))
    finally:
        codec_higgs_v3.resample_audio, audio_io_higgs_v3.resample_audio = saved


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
    rate, hop = codec.config.sample_rate, codec.config.hop_length
    generator = torch.Generator().manual_seed(0)
    variants, inputs = {}, {}
    resamplers = {"torchaudio-alg": codec_higgs_v3.resample_audio}
    if has_soxr():
        resamplers["soxr"] = soxr_resample
    for seconds in args.seconds:
        frames = max(1, round(seconds * rate / hop))
        codes = torch.randint(0, codec.config.codebook_size, (args.batch, codec.config.num_quantizers, frames),
                              generator=generator)
        audio = 0.1 * torch.randn(args.batch, 1, frames * hop, generator=generator)
        inputs[seconds] = (codes, audio)
        variants[f"decode {seconds:g}s"] = (lambda c: lambda: timed(lambda: codec.decode(c), args.clock))(codes)
        variants[f"encode {seconds:g}s"] = (lambda a: lambda: timed(lambda: codec.encode(a), args.clock))(audio)
        clip = (0.1 * torch.randn(round(seconds * args.reference_rate), generator=generator)).numpy()
        for name, resample in resamplers.items():
            variants[f"encode_reference {name} {seconds:g}s"] = (lambda c, r: lambda: timed(
                lambda: encode_reference_path(codec, c, args.reference_rate, r), args.clock))(clip, resample)
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
        for name in resamplers:
            rs = runs[f"encode_reference {name} {seconds:g}s"]
            entry[f"encode_reference_{name}_s"] = H.summarize([r["s"] for r in rs])
        if "soxr" in resamplers:
            entry["encode_reference_ratio"] = H.ratio_summary(runs[f"encode_reference torchaudio-alg {seconds:g}s"],
                                                              runs[f"encode_reference soxr {seconds:g}s"], key="s")
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
    reference_rows = [{
        "seconds": r["seconds"], "ours": r["encode_reference_torchaudio-alg_s"]["median"],
        "soxr": r["encode_reference_soxr_s"]["median"] if "soxr" in resamplers else float("nan"),
        "ratio": r["encode_reference_ratio"]["median"] if "soxr" in resamplers else float("nan"),
    } for r in results]
    print(f"encode_reference of a {args.reference_rate} Hz clip (front end + codec), median seconds; ratio = "
          "torchaudio's algorithm / soxr, same process, interleaved (below 1: faster):")
    print(H.format_table(reference_rows, [("seconds", "audio s", "g"), ("ours", "torchaudio-alg s", ".4f"),
                                          ("soxr", "soxr s", ".4f"), ("ratio", "ratio", ".3f")]))
    if "soxr" not in resamplers:
        print("(soxr is not installed: the baseline was not timed; pip install 'higgs-v3[bench]')")
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
