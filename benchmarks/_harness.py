# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Shared pieces of the benchmark scripts in this folder: models, prompts, clocks, interleaving, statistics, output.

How every script measures (see docs/PERFORMANCE.md for the results):

- **Same process, interleaved.** All variants of a question are built once and run in one process; round `r` runs
  them in an order rotated by `r`, so a slow drift of a shared machine hits every variant alike. One warm-up round
  is not counted.
- **Decode step from inside `generate`.** A streamer (`StepClock`) stamps the clocks each time a row (or token)
  arrives; a step is the interval between two stamps, i.e. one whole iteration of the decoding loop (inputs,
  forward, logits processors, selection, stopping criteria). The rows of the prefill and of the delay window (the
  first `skip` rows) are left out and the median interval is the run's step time, which a stray stall cannot move.
  `--method diff` in `bench_decode.py` keeps the first version's differencing instead:
  `(time for N_LONG rows - time for N_SHORT rows) / (N_LONG - N_SHORT)`.
- **CPU time on a shared CPU.** With one torch thread every operation runs on the calling thread, so the steps are
  read on that thread's CPU clock (`time.thread_time`) by default: time spent preempted by other processes is not
  counted. On the wall clock the steps of a loaded 2-core machine are bimodal (every other step waits out another
  process's time slice, +4-5 ms). `--clock wall` measures wall time; GPUs and several threads always use it.
- **Medians and spread.** Per variant: the median over rounds of the per-run step times and the spread (min-max
  over rounds). A ratio is taken per round (its two variants ran back to back) and summarised the same way.
- **Fixed lengths.** Random weights could emit the end-of-speech code and stop a run early; `pin_length` zeroes the
  head row of that code (codebook 0's EOC) so its logit is exactly 0, below the greedy maximum and outside top-k 50.
  The Qwen3 baseline's tied head is that embedding, so the same row (`PINNED_ID`) serves as its end-of-text id when
  it runs as plain text decoding. Every timed run checks it produced the rows it asked for and raises otherwise.
- **Threads.** `--threads 1` by default: on a 2-core machine shared with other processes, two OpenMP threads wait on
  each other whenever another process holds a core, and a step costs 2-5x more and varies wildly
  (`bench_cpu_threads.py` shows it).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from transformers import Qwen3Config, Qwen3ForCausalLM
from transformers.generation.streamers import BaseStreamer

from higgs_v3 import HiggsAudioV3Config, HiggsAudioV3ForConditionalGeneration


RESULTS_DIR = Path(__file__).resolve().parent / "results"

# Backbone shapes. "real" is the real layer width of Qwen3-4B (the benchmarks use 2 layers of it unless said).
WIDTHS: dict[str, dict[str, int]] = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16),
    "real": dict(hidden_size=2560, intermediate_size=9728, num_attention_heads=32, num_key_value_heads=8, head_dim=128),
}
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}
# The sampling settings of every "sampling" variant (the same warpers on every model).
SAMPLING: dict[str, float] = dict(temperature=0.9, top_k=50, top_p=0.95)
FIRST_TEXT_ID = 1000  # prompt filler tokens: ordinary text ids
# Step clocks: wall time, or the CPU time of the calling thread (see `resolve_clock`).
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}


# ---------------------------------------------------------------------------------------------- command line
def common_parser(description: str, *, rounds: int) -> argparse.ArgumentParser:
    """An `ArgumentParser` with the options every script shares: --rounds, --threads, --out, --json, --no-plot."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=rounds, help=f"timed rounds per variant (default {rounds})")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1, see the module doc)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="folder for the JSON and PNG (default %(default)s)")
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default=None,
                        help="clock of the step timings (default: cpu with one thread on a CPU, else wall)")
    return parser


def check_positive(**values: int) -> None:
    """Raise a `ValueError` naming the first option that is not a positive integer."""
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}.")


def setup(threads: int) -> None:
    """Set torch's CPU threads and silence the per-call warnings of generation (runaway rows are expected here)."""
    check_positive(threads=threads)
    torch.set_num_threads(threads)
    for name in ("higgs_v3", "transformers"):
        logging.getLogger(name).setLevel(logging.ERROR)


def machine_info() -> dict:
    """What the numbers were measured on."""
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    except OSError:
        pass
    info = {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


# ---------------------------------------------------------------------------------------------- statistics
def summarize(values: Sequence[float]) -> dict[str, float]:
    """`{"median", "min", "max", "n"}` of `values` (at least one)."""
    if len(values) == 0:
        raise ValueError("Cannot summarize an empty list of measurements.")
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def interleaved(variants: dict[str, Callable[[], dict]], rounds: int, warmup: int = 1) -> dict[str, list[dict]]:
    """Run every variant `warmup` times (not kept), then `rounds` times; round `r` starts at variant `r mod n`."""
    check_positive(rounds=rounds)
    names = list(variants)
    for _ in range(warmup):
        for name in names:
            variants[name]()
    results: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            results[name].append(variants[name]())
    return results


def ratio_summary(numerator: list[dict], denominator: list[dict], key: str = "step_s") -> dict[str, float]:
    """Per-round ratios `numerator[r][key] / denominator[r][key]`, summarised."""
    return summarize([a[key] / b[key] for a, b in zip(numerator, denominator)])


# ---------------------------------------------------------------------------------------------- clocks
def resolve_clock(clock: str | None, threads: int, device: str = "cpu") -> str:
    """The clock of the step timings: "cpu" (this thread's CPU time) by default on a CPU with one torch thread, where
    all the work runs on the calling thread and time spent preempted by other processes is not counted (on a shared
    machine wall-clock steps turn bimodal: every other step waits out another process's time slice); "wall"
    otherwise (GPUs, several threads)."""
    if clock is None:
        return "cpu" if device == "cpu" and threads == 1 else "wall"
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {sorted(CLOCKS)}, got {clock!r}.")
    if clock == "cpu" and (device != "cpu" or threads != 1):
        raise ValueError(
            f"The cpu clock measures only the calling thread: it needs device 'cpu' and --threads 1, got device "
            f"{device!r} and {threads} thread(s). Use --clock wall."
        )
    return clock


class StepClock(BaseStreamer):
    """A streamer that stamps the wall clock and this thread's CPU time at every `put`; `skip_prompt` ignores the first
    put (the stock `generate` hands a streamer the prompt first; ours does not). `inner` receives every put too."""

    def __init__(self, skip_prompt: bool, inner: BaseStreamer | None = None):
        self.skip_prompt = skip_prompt
        self.inner = inner
        self.stamps: dict[str, list[float]] = {name: [] for name in CLOCKS}

    def put(self, value: torch.Tensor) -> None:
        if self.skip_prompt:
            self.skip_prompt = False
        else:
            for name, clock in CLOCKS.items():
                self.stamps[name].append(clock())
        if self.inner is not None:
            self.inner.put(value)

    def end(self) -> None:
        if self.inner is not None:
            self.inner.end()


def step_intervals(stamps: Sequence[float], skip: int) -> list[float]:
    """Intervals `stamps[r] - stamps[r - 1]` for rows `r >= max(skip, 1)`: the steps that produced those rows."""
    return [stamps[r] - stamps[r - 1] for r in range(max(skip, 1), len(stamps))]


def clocked_run(
    run: Callable[[BaseStreamer], int],
    *,
    rows: int,
    skip: int,
    skip_prompt: bool,
    clock: str = "wall",
    sync: Callable[[], None] | None = None,
    inner: BaseStreamer | None = None,
) -> dict:
    """Time one `generate` call. `run(streamer)` generates and returns the number of rows it produced.

    Returns `{"step_s": median step on `clock`, "step_wall_s": the same on the wall clock, "first_row_s": time to
    the first row on `clock` (prefill and setup), "first_row_wall_s", "total_s": wall time of the call, "rows",
    "stamps": the wall-clock stamps}`. Raises a `RuntimeError` when the call produced another
    number of rows than `rows` (the step count must be fixed).
    """
    if rows < skip + 2:
        raise ValueError(f"rows={rows} leaves fewer than 2 timed steps after skipping {skip} rows; ask for more rows.")
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {sorted(CLOCKS)}, got {clock!r}.")
    clocked = StepClock(skip_prompt=skip_prompt, inner=inner)
    if sync is not None:
        sync()
    starts = {name: now() for name, now in CLOCKS.items()}
    start = starts["wall"]
    produced = run(clocked)
    if sync is not None:
        sync()
    total = time.perf_counter() - start
    streamed = len(clocked.stamps["wall"])
    if produced != rows or streamed != rows:
        raise RuntimeError(
            f"A timed run produced {produced} rows ({streamed} streamed) instead of {rows}: a sequence stopped "
            "early, so its step count is not comparable."
        )
    return {
        "step_s": statistics.median(step_intervals(clocked.stamps[clock], skip)),
        "step_wall_s": statistics.median(step_intervals(clocked.stamps["wall"], skip)),
        "first_row_s": clocked.stamps[clock][0] - starts[clock],
        "first_row_wall_s": clocked.stamps["wall"][0] - start,
        "total_s": total,
        "rows": produced,
        "stamps": clocked.stamps["wall"],
    }


class CallCounter(TorchFunctionMode):
    """Counts the torch calls made from Python (every function and tensor method that goes through
    `__torch_function__`) and, among them, the host reads: calls that read a tensor's value on the host (`item`,
    `bool(t)`, `tolist`, `int(t)`, ...) or whose output shape depends on values (`nonzero`, `masked_select`,
    `unique`). On a GPU each host read is a synchronisation, so this is a CPU-side proxy for
    `torch.cuda.set_sync_debug_mode`; it does not see synchronisations inside C++ operators."""

    READS = {
        torch.Tensor.item,
        torch.Tensor.__bool__,
        torch.Tensor.tolist,
        torch.Tensor.__int__,
        torch.Tensor.__float__,
        torch.Tensor.__index__,
        torch.Tensor.numpy,
        torch.nonzero,
        torch.Tensor.nonzero,
        torch.masked_select,
        torch.Tensor.masked_select,
        torch.unique,
        torch.Tensor.unique,
    }

    def __init__(self):
        super().__init__()
        self.calls = 0
        self.reads = 0
        self.read_names: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        if func in self.READS:
            self.reads += 1
            name = getattr(func, "__name__", str(func))
            self.read_names[name] = self.read_names.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def calls_per_step(run: Callable[[int], object], short: int, long: int) -> dict:
    """Torch calls and host reads per decode step, by differencing a `short` and a `long` run of `run(rows)`:
    `{"torch_calls", "host_reads"}` per step and `host_reads_long_run` (by name, for the long run)."""
    if long <= short:
        raise ValueError(f"long ({long}) must exceed short ({short}).")
    counters = []
    for rows in (short, long):
        with CallCounter() as counter:
            run(rows)
        counters.append(counter)
    return {
        "torch_calls": (counters[1].calls - counters[0].calls) / (long - short),
        "host_reads": (counters[1].reads - counters[0].reads) / (long - short),
        "host_reads_long_run": dict(sorted(counters[1].read_names.items())),
    }


# ---------------------------------------------------------------------------------------------- models
def higgs_config(width: str, *, layers: int = 2, codec_config: dict | None = None, **overrides) -> HiggsAudioV3Config:
    """Our config at a named width (the real vocabulary and audio constants)."""
    if width not in WIDTHS:
        raise ValueError(f"width must be one of {sorted(WIDTHS)}, got {width!r}.")
    return HiggsAudioV3Config(num_hidden_layers=layers, codec_config=codec_config, **WIDTHS[width], **overrides)


PINNED_ID = 1025  # codebook 0's EOC: row 1025 of the fused audio embedding, zeroed by `pin_length`


def pin_length(model: HiggsAudioV3ForConditionalGeneration) -> HiggsAudioV3ForConditionalGeneration:
    """Zero codebook 0's EOC row of the tied audio embedding/head: its logit is then exactly 0, never the greedy
    maximum of 1026 random logits and outside top-k 50, so random weights never end a sequence (fixed step counts).
    The row is never embedded, because it is never emitted. The Qwen3 baseline ties its 8208-row head to this
    embedding, so its token `PINNED_ID` (the same row) never wins either: it is the baseline's end-of-text id."""
    if model.config.audio_eoc_token_id != PINNED_ID:
        raise ValueError(f"pin_length expects EOC = {PINNED_ID}, got {model.config.audio_eoc_token_id}.")
    with torch.no_grad():
        model.audio_embed.weight[PINNED_ID].zero_()  # codebook 0 starts at row 0
    return model


def build_ours(width: str, dtype: torch.dtype, *, layers: int = 2, seed: int = 0, device: str = "cpu",
               codec_config: dict | None = None) -> HiggsAudioV3ForConditionalGeneration:
    """Our model with random weights (default init), created directly on `device` in `dtype` (as `from_pretrained`
    does; the codec, if any, is fp32), length pinned."""
    config = higgs_config(width, layers=layers, codec_config=codec_config)
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = HiggsAudioV3ForConditionalGeneration(config).eval()
    finally:
        torch.set_default_dtype(previous)
    return pin_length(model)


def build_qwen3_baseline(ours: HiggsAudioV3ForConditionalGeneration) -> Qwen3ForCausalLM:
    """`Qwen3ForCausalLM` with our backbone's weights and an 8208-wide tied head/embedding (our audio embedding):
    the text-LM decode step of the same size as our audio step."""
    config = ours.config
    fields = {k: v for k, v in config.to_dict().items() if k in Qwen3Config().to_dict()}
    fields.update(vocab_size=config.audio_vocab_size, tie_word_embeddings=True, pad_token_id=0, bos_token_id=None,
                  eos_token_id=None)
    baseline = Qwen3ForCausalLM(Qwen3Config(**fields))
    state = {k: v for k, v in ours.model.state_dict().items() if not k.startswith("embed_tokens")}
    state["embed_tokens.weight"] = ours.audio_embed.weight.detach()
    baseline.model.load_state_dict(state, strict=True)  # raises on any missing or unexpected key
    return baseline.to(device=ours.device, dtype=ours.dtype).eval()


def build_v2(ours: HiggsAudioV3ForConditionalGeneration, *, seed: int = 0):
    """transformers' `HiggsAudioV2ForConditionalGeneration` at our shapes: same width, layers, heads, 8 codebooks of
    1026 (an 8208-wide audio head), default RoPE. Its layers carry a second ("audio") MLP, but an audio decode step
    runs only one of the two, so a step does the same work as ours. Its audio head rows of EOS (1025) are zeroed and
    `eos_token_id=None` so random weights never stop a run. Importable without torchaudio (only v2's *tokenizer*
    needs it)."""
    from transformers import HiggsAudioV2Config, HiggsAudioV2ForConditionalGeneration

    c = ours.config
    config = HiggsAudioV2Config(
        hidden_size=c.hidden_size, intermediate_size=c.intermediate_size, num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim,
        num_codebooks=c.num_codebooks, codebook_size=c.codebook_size, audio_stream_bos_id=c.audio_boc_token_id,
        audio_stream_eos_id=c.audio_eoc_token_id, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        max_position_embeddings=c.max_position_embeddings, eos_token_id=None,
    )
    torch.manual_seed(seed)
    model = HiggsAudioV2ForConditionalGeneration(config).to(device=ours.device, dtype=ours.dtype).eval()
    with torch.no_grad():
        eos_rows = torch.arange(c.num_codebooks) * c.codebook_size + c.audio_eoc_token_id
        model.audio_lm_head.weight[eos_rows] = 0.0
    return model


# ---------------------------------------------------------------------------------------------- prompts
def ours_prompt(config: HiggsAudioV3Config, batch: int, length: int, *, reference_rows: int = 0,
                device: str | torch.device = "cpu") -> dict:
    """A TTS prompt of exactly `length` tokens, optionally a voice clone whose reference occupies `reference_rows`
    placeholder positions (`<|tts|> <|ref_audio|> [P]*R <|text|> TEXT <|audio|>`), repeated `batch` times."""
    fixed = 3 if reference_rows == 0 else 4
    text = length - fixed - reference_rows
    if text < 1:
        raise ValueError(f"A prompt of {length} tokens cannot hold {reference_rows} reference rows and some text.")
    words = [FIRST_TEXT_ID + i % 5000 for i in range(text)]
    if reference_rows:
        ids = ([config.tts_token_id, config.ref_audio_token_id] + [config.audio_placeholder_id] * reference_rows
               + [config.text_token_id] + words + [config.audio_start_token_id])
    else:
        ids = [config.tts_token_id, config.text_token_id] + words + [config.audio_start_token_id]
    inputs = {"input_ids": torch.tensor([ids] * batch, device=device)}
    if reference_rows:
        generator = torch.Generator().manual_seed(1)
        rows = torch.randint(0, config.audio_boc_token_id, (batch * reference_rows, config.num_codebooks),
                             generator=generator)
        inputs["audio_input_ids"] = rows.to(device)
    return inputs


def text_prompt(batch: int, length: int, *, vocab: int, last: int | None = None, device: str | torch.device = "cpu"):
    """`[batch, length]` ordinary token ids below `vocab`; `last` replaces the final token when given."""
    ids = [(FIRST_TEXT_ID + i) % vocab for i in range(length)]
    if last is not None:
        ids[-1] = last
    return torch.tensor([ids] * batch, device=device)


# ---------------------------------------------------------------------------------------------- generate calls
def sampling_options(mode: str, batch: int) -> dict:
    if mode == "greedy":
        return {"do_sample": False}
    if mode == "sampling":
        return {"do_sample": True, **SAMPLING}
    raise ValueError(f"mode must be 'greedy' or 'sampling', got {mode!r}.")


def run_ours(model, inputs: dict, rows: int, mode: str, streamer: BaseStreamer | None = None, **options) -> int:
    """`model.generate` for `rows` rows; returns the rows produced."""
    batch = inputs["input_ids"].shape[0]
    extra = sampling_options(mode, batch)
    if extra["do_sample"]:
        extra["seed"] = list(range(batch))
    out = model.generate(**inputs, max_new_tokens=rows, streamer=streamer, **extra, **options)
    sequences = out.sequences if hasattr(out, "sequences") else out
    return sequences.shape[1]


def run_qwen3(model, input_ids: torch.Tensor, rows: int, mode: str, streamer: BaseStreamer | None = None, *,
              eos: bool = False, **options) -> int:
    """`Qwen3ForCausalLM.generate` for exactly `rows` tokens; returns the tokens produced.

    `eos=False`: no end-of-text id (`min_new_tokens=rows`), the leanest loop `generate` runs: no end check, no padding.
    `eos=True`: plain text decoding, which stops at an end-of-text id: the loop checks it and pads finished rows every
    step. The id is `PINNED_ID`, whose logit `pin_length` zeroes through the tied head, so it never fires and the run
    still has `rows` steps.
    """
    if eos:
        ends = dict(eos_token_id=PINNED_ID)
    else:
        ends = dict(eos_token_id=None, min_new_tokens=rows)
    out = model.generate(input_ids=input_ids, max_new_tokens=rows, pad_token_id=0, streamer=streamer, **ends,
                         **sampling_options(mode, input_ids.shape[0]), **options)
    return out.shape[1] - input_ids.shape[1]


def run_v2(model, input_ids: torch.Tensor, rows: int, mode: str, streamer: BaseStreamer | None = None) -> int:
    """transformers' `HiggsAudioV2ForConditionalGeneration.generate` for `rows` audio rows; returns the rows."""
    out = model.generate(input_ids=input_ids, max_new_tokens=rows, streamer=streamer,
                         **sampling_options(mode, input_ids.shape[0]))
    return out.shape[1]  # [batch, rows, num_codebooks]


def greedy_agreement(model, inputs: dict, rows: int, reference: dict, candidate: dict, tolerance: float) -> dict:
    """Greedy rows of `model.generate(**inputs, **candidate)` against `**reference` (e.g. compiled vs eager).

    `agree` is True when the rows are identical, or when they are identical up to a first differing row and (1) at
    every step up to and including it, the two runs' raw logits differ by at most `tolerance` times the logits'
    standard deviation, and (2) at that row every differing code is a near-tie: in the reference run's logits its code
    leads the candidate's code by at most twice the largest logit difference of that step (what an argmax over
    logits that moved by that much can flip). The flip is then rounding, not a different computation. (Random weights
    give near-uniform logits, where bf16 rounding alone flips a near-tie every few hundred codes.)
    """
    common = dict(max_new_tokens=rows, do_sample=False, return_dict_in_generate=True, output_logits=True,
                  output_audio=False)
    first = model.generate(**inputs, **common, **reference)
    second = model.generate(**inputs, **common, **candidate)
    if first.sequences.shape != second.sequences.shape:
        return {"agree": False, "identical": False, "identical_rows": 0, "rows": rows,
                "reason": f"shapes differ: {tuple(first.sequences.shape)} vs {tuple(second.sequences.shape)}"}
    differs = (first.sequences != second.sequences).flatten(2).any(-1).any(0)  # [rows]
    identical = not bool(differs.any())
    same_rows = rows if identical else int(differs.int().argmax())
    compared = min(same_rows + 1, len(first.logits))
    a = torch.stack([step.float() for step in first.logits[:compared]])  # [steps, B, C, V]
    b = torch.stack([step.float() for step in second.logits[:compared]])
    finite = torch.isfinite(a) & torch.isfinite(b)
    scale = float(a[finite].std())
    max_rel = float((a - b)[finite].abs().max()) / scale if scale > 0 else float("inf")
    near_tie = identical
    if not identical:
        last_a, last_b = a[-1], b[-1]  # [B, C, V] at the first differing row
        moved = float((last_a - last_b)[torch.isfinite(last_a - last_b)].abs().max())
        picked_a = first.sequences[:, same_rows].reshape(last_a.shape[:-1])[..., None]  # [B, C, 1]
        picked_b = second.sequences[:, same_rows].reshape(last_a.shape[:-1])[..., None]
        gap = (last_a.gather(-1, picked_a) - last_a.gather(-1, picked_b)).abs()  # [B, C, 1]
        near_tie = bool((gap <= 2 * moved + 1e-6 * scale).all())
    return {
        "agree": identical or (max_rel <= tolerance and near_tie),
        "near_tie": near_tie,
        "identical": identical,
        "identical_rows": same_rows,
        "rows": rows,
        "max_logit_diff_over_std": max_rel,
        "tolerance": tolerance,
    }


# ---------------------------------------------------------------------------------------------- output
def format_table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """A fixed-width table; `columns` are `(key, header, format spec)`; missing values print as '-'."""
    cells = [[header for _, header, _ in columns]]
    for row in rows:
        line = []
        for key, _, spec in columns:
            value = row.get(key)
            if value is None or (isinstance(value, float) and math.isnan(value)):
                line.append("-")
            else:
                line.append(format(value, spec))
        cells.append(line)
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in cells)


def write_results(out: Path, name: str, payload: dict, json_copy: Path | None = None) -> Path:
    """Write `payload` (plus `machine`) as `out/name.json` (and to `json_copy`); returns the path."""
    out.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "machine": machine_info(), **payload}
    text = json.dumps(payload, indent=2, default=str)
    path = out / f"{name}.json"
    path.write_text(text)
    if json_copy is not None:
        json_copy.parent.mkdir(parents=True, exist_ok=True)
        json_copy.write_text(text)
    return path


def pyplot():
    """matplotlib's pyplot on the Agg backend (files only); a clear error when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "The benchmark plots need matplotlib: pip install 'higgs-v3[bench]' (or pass --no-plot)."
        ) from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure, out: Path, name: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot().close(figure)
    return path


def error_bars(summaries: list[dict], scale: float = 1.0) -> tuple[list[float], list[list[float]]]:
    """Medians and matplotlib's asymmetric `yerr` (median - min, max - median) of summaries, times `scale`."""
    medians = [s["median"] * scale for s in summaries]
    low = [(s["median"] - s["min"]) * scale for s in summaries]
    high = [(s["max"] - s["median"]) * scale for s in summaries]
    return medians, [low, high]


__all__ = [
    "PINNED_ID",
    "CLOCKS",
    "DTYPES",
    "RESULTS_DIR",
    "SAMPLING",
    "WIDTHS",
    "CallCounter",
    "StepClock",
    "build_ours",
    "build_qwen3_baseline",
    "build_v2",
    "check_positive",
    "clocked_run",
    "common_parser",
    "error_bars",
    "format_table",
    "greedy_agreement",
    "higgs_config",
    "calls_per_step",
    "interleaved",
    "machine_info",
    "ours_prompt",
    "pin_length",
    "pyplot",
    "ratio_summary",
    "resolve_clock",
    "run_ours",
    "run_qwen3",
    "run_v2",
    "sampling_options",
    "save_figure",
    "setup",
    "step_intervals",
    "summarize",
    "text_prompt",
    "write_results",
]
