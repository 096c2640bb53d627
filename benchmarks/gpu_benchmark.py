# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""One command for a CUDA machine: the full-size Higgs Audio v3 model (real config: 36 layers, hidden 2560, the real
codec) with random weights in bf16, measured as a user would run it.

    python benchmarks/gpu_benchmark.py                 # on a CUDA machine; within 7 minutes on an H200
    python benchmarks/gpu_benchmark.py --tiny          # the same logic on a tiny model (CPU or GPU), for testing
    python benchmarks/gpu_benchmark.py --phases placement quantized   # the smaller-GPU checks (needs bitsandbytes)

Phases, in this order, each skipped (and reported as skipped) when the time budget (--budget-s) runs short:

1. Build the model directly on the device in bf16 (the codec in fp32); weights memory.
2. Batch 1, eager (dynamic cache): decode step, real-time factor (step x 25 frames/s), time to the first row, time
   to first audio, host synchronisations per decode step.
3. Batch 1, static cache + `torch.compile` (transformers' `compile_config` path, CUDA graphs): the first call
   (compilation), then **greedy codes checked against eager** (identical rows, or a near-tie flip at a step where the
   logits agree within --tolerance of their standard deviation), then the same figures as eager, plus an end-to-end
   run (`--e2e-rows` rows and the codec decode) for the end-to-end real-time factor.
4. Batch 32 and 8 (--batches, largest first), compiled (checked against eager first) and eager: decode step,
   throughput in audio-seconds per second (batch / (step x 25)), peak memory.
5. Batch 1 end to end, eager.

No number is printed before every compiled path that ran passed its check; a failed check exits with status 1.

`--phases` picks what runs (default `speed`, the phases above). The smaller-GPU checks (issue 17), each a check that
fails with status 1, then its figures:

- `placement`: the codec on the device vs on the CPU. (a) The built model, batch 1 end to end (`--e2e-rows` rows and
  the decode), then again after `model.codec.to("cpu")`: identical greedy codes, waveforms within --audio-tolerance
  (max difference / max amplitude), and the memory the GPU saves (`torch.cuda.max_memory_allocated`, weights and
  decode activations). (b) The saved model loaded with `device_map={"": device, "codec": "cpu"}`: the codec one entry
  of `hf_device_map`, on the CPU with real weights, codes identical to (a), and the weights memory against a plain load.
- `quantized`: the saved model loaded with bitsandbytes 8-bit (LLM.int8) and 4-bit NF4, each also with the codec on
  the CPU (`llm_int8_enable_fp32_cpu_offload=True`, which transformers requires for any "cpu" entry): the projections
  quantized and nothing else, weights memory, the prompt's audio logits against the bf16 model (max difference / max
  |logit|, reported), the eager batch-1 step, and an end-to-end run that must give audio.

- `serve` (issues 24, 31): the built model behind `higgs-v3 serve`'s app (uvicorn in this process, the tiny
  tokenizer's processor; its worker decodes on the step-level decode session, `serving/session.py`),
  `bench_serve.measure`: throughput at concurrency 1, 4 and 16 over one request at a time (audio checked byte for
  byte), time to the first streamed audio byte over the whole response (`--serve-requests` requests of
  `--serve-seconds` s), 16 requests of 2-8 s at once over one at a time, and a streamed request's first byte while
  15 others are spoken over its first byte alone. Not measured yet: no GPU was lent when it was written.

Both save the built model once into a temporary folder (8.3 GB for the full size) and load it back.

Definitions. Step: median interval between two streamed rows after the first --skip rows (one full iteration of the
decoding loop). Time to first audio: from the `generate` call to the first waveform chunk of the project's
`HiggsAudioV3AudioStreamer`, with its defaults (10 frames, decoded with 12 frames of right context: 29 rows) and
with the smallest setting (1 frame, no context: 8 rows). Host synchronisations per step: `(count(long run) -
count(short run)) / (long - short)`, counted three ways: `torch.cuda.set_sync_debug_mode("warn")` warnings, CUDA
synchronize calls in the profiler, and (also on a CPU) Python-level host reads. Floor: the bytes of the weights one
audio step reads (backbone layers, final norm, audio head) divided by the device's memory bandwidth (--bandwidth-tbs;
known for H200, H100, A100). Writes gpu_benchmark.json and gpu_benchmark.png into --out.
"""

from __future__ import annotations

import gc
import logging
import math
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch
from transformers import CompileConfig

import _harness as H
from higgs_v3.testing.tiny import tiny_codec_config
from higgs_v3.conversion.original_format import REAL_CODEC_CONFIG
from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration
from higgs_v3.streaming_higgs_v3 import HiggsAudioV3AudioStreamer


PHASES = ("speed", "placement", "quantized", "serve")
# Memory bandwidth in TB/s of the GPUs we know (the SXM parts); matched on the device name.
BANDWIDTH_TBS = {"H200": 4.8, "H100": 3.35, "A100": 2.0, "L40S": 0.864, "A10G": 0.6, "RTX 4090": 1.008}
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def parse_args(argv):
    parser = H.common_parser(__doc__, rounds=3)
    parser.add_argument("--tiny", action="store_true", help="tiny model and codec (runs on a CPU too)")
    parser.add_argument("--device", default=None, help="default: cuda (required without --tiny), else cpu")
    parser.add_argument("--budget-s", type=float, default=390.0, help="time budget of the measurements (seconds)")
    parser.add_argument("--compile-reserve-s", type=float, default=None,
                        help="skip a compiled phase when less than this is left (default 120 s; 0 with --tiny)")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend (default inductor)")
    parser.add_argument("--prompt-length", type=int, default=128)
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32], help="throughput batch sizes")
    parser.add_argument("--rows", type=int, default=96, help="rows per timed run")
    parser.add_argument("--skip", type=int, default=8, help="rows not timed (prefill and delay window)")
    parser.add_argument("--check-rows", type=int, default=32, help="greedy rows compared, compiled vs eager")
    parser.add_argument("--e2e-rows", type=int, default=250, help="rows of the end-to-end run (250 rows = 9.7 s)")
    parser.add_argument("--sync-rows", type=int, nargs=2, default=[12, 28], help="short and long run of the sync count")
    parser.add_argument("--tolerance", type=float, default=0.25, help="logit difference / logit std of a near-tie")
    parser.add_argument("--bandwidth-tbs", type=float, default=None, help="device memory bandwidth, TB/s")
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=["speed"],
                        help="what to run (default: speed; placement and quantized are the smaller-GPU checks)")
    parser.add_argument("--serve-requests", type=int, default=32, help="serve: requests per variant")
    parser.add_argument("--serve-seconds", type=float, default=4.0, help="serve: audio per request (seconds)")
    parser.add_argument("--audio-tolerance", type=float, default=1e-2,
                        help="placement: max |waveform difference| / max |waveform|, codec on the CPU vs the device")
    args = parser.parse_args(argv)
    H.check_positive(rounds=args.rounds, rows=args.rows, check_rows=args.check_rows, e2e_rows=args.e2e_rows,
                     prompt_length=args.prompt_length, batches=min(args.batches))
    if args.rows < args.skip + 2:
        parser.error(f"--rows ({args.rows}) must exceed --skip ({args.skip}) by at least 2.")
    if not args.sync_rows[0] < args.sync_rows[1]:
        parser.error(f"--sync-rows needs a short and a longer run, got {args.sync_rows}.")
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device} asked for, but CUDA is not available.")
    if not args.tiny and not args.device.startswith("cuda"):
        parser.error("The full-size model needs a CUDA device (bf16, 8 GB of weights); use --tiny to run the logic "
                     "on a CPU.")
    if args.compile_reserve_s is None:
        args.compile_reserve_s = 0.0 if args.tiny else 120.0
    return args


class Budget:
    """Wall-clock budget of the measurements."""

    def __init__(self, seconds: float):
        self.deadline = time.perf_counter() + seconds
        self.skipped: list[str] = []

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def allows(self, phase: str, needed: float) -> bool:
        if self.left() >= needed:
            return True
        self.skipped.append(f"{phase} (needed {needed:.0f} s, {max(self.left(), 0):.0f} s left)")
        print(f"  skipped {phase}: budget", file=sys.stderr, flush=True)
        return False


# ---------------------------------------------------------------------------------------------- measurements
def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def decode_floor(model, bandwidth_tbs: float | None) -> dict:
    """Bytes of the weights one audio decode step reads, and the step time that reading them takes."""
    read = list(model.model.layers.parameters()) + list(model.model.norm.parameters()) + [model.audio_head.weight]
    nbytes = sum(p.numel() * p.element_size() for p in read)
    floor_s = nbytes / (bandwidth_tbs * 1e12) if bandwidth_tbs else None
    return {"weight_bytes_per_step": nbytes, "bandwidth_tbs": bandwidth_tbs, "step_s": floor_s,
            "rtf": floor_s * 25 if floor_s else None}


def count_syncs(run, short: int, long: int, device: str, *, python_reads: bool) -> dict:
    """Host synchronisations per decode step, three ways (the CUDA ones `None` on a CPU; the Python-level count
    `None` under `torch.compile`, whose guards do not support the counting `TorchFunctionMode`)."""
    reads = H.calls_per_step(run, short, long)["host_reads"] if python_reads else None
    result = {"python_host_reads": reads}
    if not device.startswith("cuda"):
        return {**result, "sync_debug_warnings": None, "profiler_sync_calls": None}
    from torch.profiler import ProfilerActivity, profile

    def debug_warnings(fn) -> int:
        synchronize(device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                fn()
            finally:
                torch.cuda.set_sync_debug_mode(0)
        return sum("synchroniz" in str(w.message) for w in caught)

    def profiled_syncs(fn) -> int:
        synchronize(device)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
        return sum(e.count for e in prof.key_averages() if e.key in SYNC_CALLS)

    def known_sync():  # one `.item()`: a device-to-host copy and a synchronisation
        torch.ones(1, device=device).sum().item()

    for key, counter in (("sync_debug_warnings", debug_warnings), ("profiler_sync_calls", profiled_syncs)):
        if counter(known_sync) < 1:  # calibration: the method must see a known synchronisation
            result[key] = None
            result[f"{key}_note"] = "this method did not see a known synchronisation (.item()) on this setup"
            continue
        counts = [counter(lambda rows=rows: run(rows)) for rows in (short, long)]
        result[key] = (counts[1] - counts[0]) / (long - short)
    return result


TTFA_SETTINGS = ((10, 12), (1, 0))  # (first_chunk_frames, context_frames): the streamer's defaults, the smallest


def ttfa_rows(first_chunk_frames: int, context_frames: int, num_codebooks: int) -> int:
    """Rows a time-to-first-audio run generates: enough for the first chunk (frames + context + delay) and 2 more."""
    return first_chunk_frames + context_frames + num_codebooks + 1


def time_to_first_audio(model, inputs: dict, options: dict, first_chunk_frames: int, context_frames: int,
                        device: str) -> float:
    """Seconds from the `generate` call to the first waveform chunk of `HiggsAudioV3AudioStreamer`."""
    rows = ttfa_rows(first_chunk_frames, context_frames, model.config.num_codebooks)
    streamer = HiggsAudioV3AudioStreamer(
        model, first_chunk_frames=first_chunk_frames, chunk_frames=25, context_frames=context_frames, timeout=600
    )
    first: list[float] = []

    def consume():
        for _ in streamer:
            if not first:
                first.append(time.perf_counter())

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    synchronize(device)
    start = time.perf_counter()
    H.run_ours(model, inputs, rows, "greedy", streamer, **options)
    consumer.join(timeout=600)
    if not first:
        raise RuntimeError(f"The audio streamer produced no chunk in {rows} rows.")
    return first[0] - start


def peak_memory(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None


def reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def compile_config(args) -> CompileConfig:
    cuda = args.device.startswith("cuda")
    mode = "reduce-overhead" if cuda and args.backend == "inductor" else None
    config = CompileConfig(fullgraph=True, dynamic=None, backend=args.backend, mode=mode)
    config._compile_all_devices = True  # needed on a CPU only; harmless on a GPU
    return config


def phase(model, batch: int, name: str, options: dict, args, *, detail: bool) -> dict:
    """Step time (rounds) at `batch`; with `detail`, also time to first audio and host syncs."""
    inputs = H.ours_prompt(model.config, batch, args.prompt_length, device=args.device)
    clock = "wall"
    sync = lambda: synchronize(args.device)  # noqa: E731
    reset_peak(args.device)

    def one_run():
        return H.clocked_run(lambda s: H.run_ours(model, inputs, args.rows, "greedy", s, **options), rows=args.rows,
                             skip=args.skip, skip_prompt=False, clock=clock, sync=sync)

    runs = H.interleaved({name: one_run}, args.rounds, warmup=1)[name]
    step = H.summarize([r["step_s"] for r in runs])
    out = {
        "variant": name, "batch": batch, "step_ms": {k: v * 1e3 if k != "n" else v for k, v in step.items()},
        "rtf": step["median"] * model.config.frame_rate,
        "audio_s_per_s": batch / (step["median"] * model.config.frame_rate),
        "first_row_ms": 1e3 * H.summarize([r["first_row_wall_s"] for r in runs])["median"],
    }
    if detail:
        (frames, context), (one, none) = TTFA_SETTINGS
        out["ttfa_default_ms"] = 1e3 * time_to_first_audio(model, inputs, options, frames, context, args.device)
        out["ttfa_one_frame_ms"] = 1e3 * time_to_first_audio(model, inputs, options, one, none, args.device)
        out["syncs_per_step"] = count_syncs(
            lambda rows: H.run_ours(model, inputs, rows, "greedy", **options), *args.sync_rows, args.device,
            python_reads="compile_config" not in options)
    out["peak_memory_gib"] = peak_memory(args.device)
    print(f"  measured {name} batch {batch}", file=sys.stderr, flush=True)
    return out


def end_to_end(model, options: dict, args, name: str) -> dict:
    """Batch 1: `--e2e-rows` rows and the codec decode of the waveform, wall clock."""
    inputs = H.ours_prompt(model.config, 1, args.prompt_length, device=args.device)
    synchronize(args.device)
    start = time.perf_counter()
    out = model.generate(**inputs, max_new_tokens=args.e2e_rows, do_sample=False, return_dict_in_generate=True,
                         **options)
    synchronize(args.device)
    seconds = time.perf_counter() - start
    audio_seconds = out.audio[0].numel() / model.config.sampling_rate
    if int(out.lengths[0]) != args.e2e_rows:
        raise RuntimeError(f"The end-to-end run produced {int(out.lengths[0])} rows instead of {args.e2e_rows}.")
    return {"variant": name, "rows": args.e2e_rows, "audio_s": audio_seconds, "wall_s": seconds,
            "rtf": seconds / audio_seconds}


# ---------------------------------------------------------------------------------------------- report
def report(result: dict) -> None:
    floor = result["floor"]
    print(f"Higgs Audio v3 {'tiny' if result['tiny'] else 'full size (36 layers, hidden 2560)'}, random weights, "
          f"bf16, on {result['device_name']}; prompt {result['settings']['prompt_length']} tokens, greedy.")
    weights = f", weights {result['weights_gib']:.2f} GiB" if result["weights_gib"] is not None else ""
    print(f"build {result['build_s']:.1f} s{weights}")
    if floor["step_s"]:
        print(f"floor: {floor['weight_bytes_per_step'] / 1e9:.2f} GB of weights per step / {floor['bandwidth_tbs']} "
              f"TB/s = {1e3 * floor['step_s']:.2f} ms per step, RTF {floor['rtf']:.3f}")
    rows = []
    for p in result["phases"]:
        syncs = p.get("syncs_per_step") or {}
        rows.append({
            "variant": p["variant"], "batch": p["batch"], "step": p["step_ms"]["median"],
            "spread": f"{p['step_ms']['min']:.2f}-{p['step_ms']['max']:.2f}", "rtf": p["rtf"],
            "tput": p["audio_s_per_s"], "first_row": p["first_row_ms"], "ttfa": p.get("ttfa_default_ms"),
            "ttfa1": p.get("ttfa_one_frame_ms"), "floor": (p["step_ms"]["median"] / 1e3 / floor["step_s"]
                                                           if floor["step_s"] else None),
            "mem": p["peak_memory_gib"], "sync": syncs.get("sync_debug_warnings"),
            "prof": syncs.get("profiler_sync_calls"), "reads": syncs.get("python_host_reads"),
        })
    print(rows and H.format_table(rows, [
        ("variant", "variant", ""), ("batch", "batch", "d"), ("step", "step ms", ".2f"), ("spread", "spread", ""),
        ("floor", "x floor", ".1f"), ("rtf", "RTF", ".3f"), ("tput", "audio s/s", ".1f"),
        ("first_row", "1st row ms", ".0f"), ("ttfa", "TTFA ms", ".0f"), ("ttfa1", "TTFA 1fr ms", ".0f"),
        ("mem", "peak GiB", ".1f"), ("sync", "syncs/step", ".1f"), ("prof", "prof syncs", ".1f"),
        ("reads", "py reads", ".1f"),
    ]))
    for e in result["end_to_end"]:
        print(f"end to end, batch 1, {e['variant']}: {e['rows']} rows + codec decode = {e['audio_s']:.2f} s of audio "
              f"in {e['wall_s']:.2f} s, RTF {e['rtf']:.3f}")
    for c in result["checks"]:
        state = "identical" if c["identical"] else (f"identical for {c['identical_rows']} rows, then a near-tie "
                                                    f"(max logit diff {c['max_logit_diff_over_std']:.3f} std)")
        print(f"greedy codes, compiled vs eager, batch {c['batch']}: {state}")
    placement = result.get("placement")
    if placement:
        saved = (f", the GPU's peak {placement['saved_peak_gib']:.2f} GiB lower"
                 if placement["saved_peak_gib"] is not None else "")
        print(f"codec on the CPU vs on the device, batch 1, {placement['e2e_rows']} rows + decode: codes "
              f"{'identical' if placement['identical_codes'] else 'DIFFERENT'}, audio difference "
              f"{placement['audio_difference']:.2e} of max amplitude (tolerance {placement['audio_tolerance']:g}); "
              f"codec weights {placement['codec_weights_gib']:.2f} GiB{saved}; wall "
              f"{placement['wall_s']['codec on device']:.2f} s vs {placement['wall_s']['codec on cpu']:.2f} s")
        print(f"device_map={{'': device, 'codec': 'cpu'}}: codec entries {placement['device_map_codec_entries']}, "
              f"codes {'identical' if placement['device_map_identical_codes'] else 'DIFFERENT'}"
              + (f", weights {placement['device_map_weights_gib']:.2f} GiB on the device"
                 if placement["device_map_weights_gib"] is not None else ""))
    if result.get("quantized"):
        print(H.format_table([{**q, "step": q["step_ms"]["median"]} for q in result["quantized"]], [
            ("variant", "variant", ""), ("quantized_layers", "layers q", "d"), ("weights_gib", "weights GiB", ".2f"),
            ("logit_difference", "logit diff", ".3f"), ("step", "step ms", ".2f"), ("rtf", "RTF", ".3f"),
            ("peak_memory_gib", "peak GiB", ".2f"), ("codec_device", "codec", ""), ("load_s", "load s", ".1f"),
        ]))
    for s in result["skipped"]:
        print(f"skipped: {s}")


def plot(result: dict, out):
    plt = H.pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    phases = result["phases"]
    labels = [f"{p['variant']}\nb{p['batch']}" for p in phases]
    medians, yerr = H.error_bars([p["step_ms"] for p in phases])
    left.bar(range(len(phases)), medians, yerr=yerr, capsize=3)
    if result["floor"]["step_s"]:
        left.axhline(1e3 * result["floor"]["step_s"], color="red", linewidth=1, label="weight-read floor")
        left.legend(fontsize=8)
    left.set_xticks(range(len(phases)), labels, fontsize=8)
    left.set_yscale("log")
    left.set_ylabel("decode step, ms")
    right.bar(range(len(phases)), [p["audio_s_per_s"] for p in phases])
    right.set_xticks(range(len(phases)), labels, fontsize=8)
    right.set_ylabel("audio seconds per second (decode)")
    figure.suptitle(f"gpu_benchmark on {result['device_name']}" + (" (tiny)" if result["tiny"] else ""))
    return H.save_figure(figure, out, "gpu_benchmark")


# ---------------------------------------------------------------------------------------------- smaller GPUs
def memory_allocated(device: str) -> int | None:
    if not device.startswith("cuda"):
        return None
    synchronize(device)
    return torch.cuda.memory_allocated()


def gib(nbytes: int | None) -> float | None:
    return None if nbytes is None else nbytes / 2**30


def waveform_difference(first: list[torch.Tensor], second: list[torch.Tensor]) -> float:
    """max |a - b| / max |a| over the waveforms of two runs (on the CPU), inf when their lengths differ."""
    if [w.numel() for w in first] != [w.numel() for w in second]:
        return float("inf")
    a = torch.cat([w.float().cpu() for w in first])
    b = torch.cat([w.float().cpu() for w in second])
    return float((a - b).abs().max() / a.abs().max().clamp_min(1e-12))


def free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def placement_check(model, saved: Path, args) -> dict:
    """The codec on the device vs on the CPU (see the module doc, `placement`)."""
    device, codec_bytes = args.device, sum(t.numel() * t.element_size() for t in model.codec.state_dict().values())
    inputs = H.ours_prompt(model.config, 1, args.prompt_length, device=device)
    common = dict(max_new_tokens=args.e2e_rows, do_sample=False, return_dict_in_generate=True)
    runs = {}
    with torch.inference_mode():
        for where in ("device", "cpu"):
            if where == "cpu":
                model.codec.to("cpu")  # the documented way for a model already loaded
            free(device)
            reset_peak(device)
            allocated = memory_allocated(device)
            start = time.perf_counter()
            out = model.generate(**inputs, **common)
            synchronize(device)
            runs[where] = {"out": out, "wall_s": time.perf_counter() - start, "allocated": allocated,
                           "peak": torch.cuda.max_memory_allocated() if device.startswith("cuda") else None}
        model.codec.to(device)
    on, off = runs["device"], runs["cpu"]
    identical = torch.equal(on["out"].sequences, off["out"].sequences)
    audio_difference = waveform_difference(on["out"].audio, off["out"].audio)
    # (b) the loading path: `device_map` with the codec on its own entry, against a plain load
    free(device)
    before = memory_allocated(device)
    placed = HiggsAudioV3ForConditionalGeneration.from_pretrained(
        saved, dtype=torch.bfloat16, device_map={"": device, "codec": "cpu"}).eval()
    placed_bytes = None if before is None else memory_allocated(device) - before
    # transformers keeps a device map (`hf_device_map`) only when it spans several devices: not on a CPU alone
    codec_entries = {k: v for k, v in getattr(placed, "hf_device_map", {}).items() if k.startswith("codec")}
    expected_entries = {} if torch.device(device).type == "cpu" else {"codec": "cpu"}
    codec_devices = {t.device.type for t in placed.codec.state_dict().values()}
    with torch.inference_mode():
        loaded = placed.generate(**inputs, **common)
    loaded_identical = torch.equal(loaded.sequences, on["out"].sequences)
    loaded_difference = waveform_difference(on["out"].audio, loaded.audio)
    del placed, loaded
    free(device)
    agree = (identical and audio_difference <= args.audio_tolerance and codec_entries == expected_entries
             and codec_devices == {"cpu"} and loaded_identical and loaded_difference <= args.audio_tolerance)
    print("  measured placement", file=sys.stderr, flush=True)
    return {
        "agree": agree, "identical_codes": identical, "audio_difference": audio_difference,
        "audio_tolerance": args.audio_tolerance, "codec_weights_gib": codec_bytes / 2**30,
        "e2e_rows": args.e2e_rows,
        "peak_gib": {"codec on device": gib(on["peak"]), "codec on cpu": gib(off["peak"])},
        "allocated_gib": {"codec on device": gib(on["allocated"]), "codec on cpu": gib(off["allocated"])},
        "saved_peak_gib": None if on["peak"] is None else gib(on["peak"] - off["peak"]),
        "wall_s": {"codec on device": on["wall_s"], "codec on cpu": off["wall_s"]},
        "device_map_codec_entries": codec_entries, "device_map_codec_devices": sorted(codec_devices),
        "device_map_identical_codes": loaded_identical, "device_map_audio_difference": loaded_difference,
        "device_map_weights_gib": gib(placed_bytes),
    }


def bnb_variants(device: str) -> dict:
    """The bitsandbytes loads of the `quantized` check: (quantization config, device map). The codec-on-CPU variant
    needs an accelerator: on a CPU alone every entry is "cpu", and `llm_int8_enable_fp32_cpu_offload` leaves every
    "cpu" entry unquantized."""
    from transformers import BitsAndBytesConfig

    variants = {
        "bnb 8-bit": (BitsAndBytesConfig(load_in_8bit=True), {"": device}),
        "bnb 4-bit nf4": (BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                             bnb_4bit_compute_dtype=torch.bfloat16), {"": device}),
    }
    if torch.device(device).type != "cpu":
        variants["bnb 8-bit, codec on cpu"] = (
            BitsAndBytesConfig(load_in_8bit=True, llm_int8_enable_fp32_cpu_offload=True), {"": device, "codec": "cpu"})
        variants["bnb 4-bit nf4, codec on cpu"] = (
            BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16,
                               llm_int8_enable_fp32_cpu_offload=True), {"": device, "codec": "cpu"})
    return variants


def quantized_check(model, saved: Path, args) -> list[dict]:
    """bitsandbytes 8-bit, 4-bit NF4 and 8-bit with the codec on the CPU (see the module doc, `quantized`)."""
    import bitsandbytes as bnb

    # LLM.int8 multiplies in fp16: bitsandbytes logs "inputs will be cast from torch.bfloat16 to float16" every call
    logging.getLogger("bitsandbytes.autograd._functions").setLevel(logging.ERROR)
    device = args.device
    inputs = H.ours_prompt(model.config, 1, args.prompt_length, device=device)
    with torch.inference_mode():
        reference = model(**inputs, logits_to_keep=1).logits.float()  # [C, 1, V]
    projections = {name for name, module in model.named_modules()
                   if isinstance(module, torch.nn.Linear) and name.startswith("model.layers.")}
    results = []
    for name, (quantization, device_map) in bnb_variants(device).items():
        free(device)
        before = memory_allocated(device)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantized = HiggsAudioV3ForConditionalGeneration.from_pretrained(
                saved, dtype=torch.bfloat16, quantization_config=quantization, device_map=device_map).eval()
        load_s = time.perf_counter() - start
        weights = None if before is None else memory_allocated(device) - before
        layer = bnb.nn.Linear8bitLt if "8-bit" in name else bnb.nn.Linear4bit
        converted = {n for n, m in quantized.named_modules() if isinstance(m, layer)}
        untouched = (quantized.audio_head.weight is quantized.audio_embed.weight
                     and type(quantized.audio_head) is torch.nn.Linear and type(quantized.lm_head) is torch.nn.Linear
                     and not any(isinstance(m, (bnb.nn.Linear8bitLt, bnb.nn.Linear4bit))
                                 for m in quantized.codec.modules())
                     and all(p.dtype == torch.float32 for p in quantized.codec.parameters()))
        codec_device = quantized.codec.device.type
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logits = quantized(**inputs, logits_to_keep=1).logits.float()
            difference = float((logits - reference).abs().max() / reference.abs().max())
            timed = phase(quantized, 1, name, {}, args, detail=False)
            out = quantized.generate(**inputs, max_new_tokens=args.e2e_rows, do_sample=False,
                                     return_dict_in_generate=True)
        expected_codec = "cpu" if device_map.get("codec") == "cpu" else torch.device(device).type
        agree = (converted == projections and untouched and codec_device == expected_codec
                 and len(out.audio) == 1 and out.audio[0].numel() > 0 and math.isfinite(difference))
        results.append({
            "variant": name, "agree": agree, "quantized_layers": len(converted), "expected_layers": len(projections),
            "audio_tensors_and_codec_unquantized": untouched, "codec_device": codec_device, "load_s": load_s,
            "weights_gib": gib(weights), "logit_difference": difference, "step_ms": timed["step_ms"],
            "rtf": timed["rtf"], "peak_memory_gib": timed["peak_memory_gib"],
            "audio_s": out.audio[0].numel() / model.config.sampling_rate,
        })
        del quantized, out
        print(f"  measured {name}", file=sys.stderr, flush=True)
    free(device)
    return results


def measure_speed(model, args, budget: Budget) -> dict | None:
    """The `speed` phases (see the module doc); None when a compiled path failed its check (printed)."""
    eager = {}  # dynamic cache, no compilation
    compiled = {"cache_implementation": "static", "compile_config": compile_config(args)}
    phases, checks, e2e = [], [], []
    first_compile_s = None
    with torch.inference_mode():
        phases.append(phase(model, 1, "eager", eager, args, detail=True))
        if budget.allows("static+compile batch 1", args.compile_reserve_s):
            inputs = H.ours_prompt(model.config, 1, args.prompt_length, device=args.device)
            compile_start = time.perf_counter()
            # The longest run first: the static cache keeps its length for every later call (no recompilation).
            longest = max(args.e2e_rows, args.rows, args.check_rows, *args.sync_rows,
                          *(ttfa_rows(f, c, model.config.num_codebooks) for f, c in TTFA_SETTINGS))
            H.run_ours(model, inputs, longest, "greedy", **compiled)
            synchronize(args.device)
            first_compile_s = time.perf_counter() - compile_start
            check = {"batch": 1, **H.greedy_agreement(model, inputs, args.check_rows, eager, compiled, args.tolerance)}
            checks.append(check)
            if not check["agree"]:
                print(f"FAILED: compiled and eager greedy codes disagree at batch 1: {check}. No numbers reported.")
                return None
            phases.append(phase(model, 1, "static+compile", compiled, args, detail=True))
            e2e.append(end_to_end(model, compiled, args, "static+compile"))
        # Largest batch first (batch 32 carries the throughput target); compiled before eager at each size.
        for batch in sorted(args.batches, reverse=True):
            if first_compile_s is not None and budget.allows(f"static+compile batch {batch}", args.compile_reserve_s):
                inputs = H.ours_prompt(model.config, batch, args.prompt_length, device=args.device)
                check = {"batch": batch, **H.greedy_agreement(model, inputs, args.check_rows, eager, compiled,
                                                              args.tolerance)}
                checks.append(check)
                if not check["agree"]:
                    print(f"FAILED: compiled and eager greedy codes disagree at batch {batch}: {check}. No numbers "
                          "reported.")
                    return None
                phases.append(phase(model, batch, "static+compile", compiled, args, detail=False))
            if budget.allows(f"eager batch {batch}", 0 if args.tiny else 30):
                phases.append(phase(model, batch, "eager", eager, args, detail=False))
        if budget.allows("end-to-end eager batch 1", 0 if args.tiny else 20):
            e2e.append(end_to_end(model, eager, args, "eager"))
    return {"phases": phases, "checks": checks, "end_to_end": e2e, "first_compiled_call_s": first_compile_s}


def serve_check(model, args) -> dict:
    """`higgs-v3 serve`'s ratios for `model` (bench_serve.measure), served with the tiny tokenizer's processor (random
    weights: the text only sets the prompt's length)."""
    import bench_serve

    from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor
    from higgs_v3.testing.tiny import loaded_tiny_tokenizer

    processor = HiggsAudioV3Processor.from_model_config(loaded_tiny_tokenizer(), model.config)
    result = bench_serve.measure(model, processor, args.serve_requests, args.serve_seconds, rounds=1)
    for name, value in result["ratios"].items():
        print(f"  serve: {name:40s} {value:6.2f}x", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    H.setup(args.threads)
    budget = Budget(args.budget_s)
    device = args.device
    cuda = device.startswith("cuda")
    device_name = torch.cuda.get_device_name(device) if cuda else f"CPU ({H.machine_info()['cpu']})"
    bandwidth = args.bandwidth_tbs
    if bandwidth is None and cuda:
        bandwidth = next((v for k, v in BANDWIDTH_TBS.items() if k in device_name), None)

    start = time.perf_counter()
    if args.tiny:
        model = H.build_ours("tiny", torch.bfloat16, layers=2, device=device, codec_config=tiny_codec_config())
    else:
        model = H.build_ours("real", torch.bfloat16, layers=36, device=device, codec_config=REAL_CODEC_CONFIG)
    synchronize(device)
    build_s = time.perf_counter() - start
    weights_gib = torch.cuda.memory_allocated() / 2**30 if cuda else None

    speed = {"phases": [], "checks": [], "end_to_end": [], "first_compiled_call_s": None}
    if "speed" in args.phases:
        speed = measure_speed(model, args, budget)
        if speed is None:
            return 1
    first_compile_s = speed["first_compiled_call_s"]
    smaller = {}
    if {"placement", "quantized"} & set(args.phases):
        with tempfile.TemporaryDirectory(prefix="gpu_benchmark_") as folder:
            saved = Path(folder) / "model"
            model.save_pretrained(saved)
            if "placement" in args.phases and budget.allows("placement", 0 if args.tiny else 60):
                smaller["placement"] = placement_check(model, saved, args)
                if not smaller["placement"]["agree"]:
                    print(f"FAILED: the codec on the CPU changed the output: {smaller['placement']}.")
                    return 1
            if "quantized" in args.phases and budget.allows("quantized", 0 if args.tiny else 150):
                smaller["quantized"] = quantized_check(model, saved, args)
                if not all(q["agree"] for q in smaller["quantized"]):
                    print(f"FAILED: a bitsandbytes load failed its check: {smaller['quantized']}.")
                    return 1

    if "serve" in args.phases and budget.allows("serve", 0 if args.tiny else 120):
        smaller["serve"] = serve_check(model, args)

    result = {
        "tiny": args.tiny, "device_name": device_name, "build_s": build_s, "weights_gib": weights_gib,
        "first_compiled_call_s": first_compile_s, "floor": decode_floor(model, bandwidth), "phases": speed["phases"],
        "end_to_end": speed["end_to_end"], "checks": speed["checks"], **smaller, "skipped": budget.skipped,
        "settings": {k: str(v) if not isinstance(v, (int, float, bool, list)) else v for k, v in vars(args).items()},
        "elapsed_s": time.perf_counter() - start,
    }
    report(result)
    print(f"first compiled call (compilation) {first_compile_s:.1f} s; total {result['elapsed_s']:.0f} s"
          if first_compile_s is not None else f"total {result['elapsed_s']:.0f} s")
    print(f"wrote {H.write_results(args.out, 'gpu_benchmark', result, args.json)}")
    if not args.no_plot and result["phases"]:
        print(f"wrote {plot(result, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
