"""The benchmark scripts: the shared harness (exact values), the scripts' bookkeeping and the counts they report next
to their timings, on tiny inputs and without timing (unit layer); the tiny path of every script through `main(argv)`,
timings included, is the integration layer (`-m integration`)."""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from pathlib import Path

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
H = importlib.import_module("_harness")

try:
    import matplotlib  # noqa: F401

    HAVE_MATPLOTLIB = True
except ImportError:
    HAVE_MATPLOTLIB = False


@pytest.fixture(autouse=True)
def _restored(restore_global_state):
    """Every test here runs scripts: conftest's `restore_global_state` undoes what they set for the process."""
    yield


def script(name: str):
    return importlib.import_module(name)


def run_script(name: str, argv: list[str], out: Path) -> dict:
    """Run a script's `main` into `out` (with its plot when matplotlib is there) and return its JSON."""
    flags = ["--out", str(out)] + ([] if HAVE_MATPLOTLIB else ["--no-plot"])
    assert script(name).main(argv + flags) == 0
    if HAVE_MATPLOTLIB and "--no-plot" not in argv:
        png = out / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return json.loads((out / f"{name}.json").read_text())


# ---------------------------------------------------------------------------------------------- harness
def test_summarize_and_its_error():
    assert H.summarize([3.0, 1.0, 2.0, 10.0]) == {"median": 2.5, "min": 1.0, "max": 10.0, "n": 4}
    with pytest.raises(ValueError, match="Cannot summarize an empty list of measurements."):
        H.summarize([])


def test_step_intervals_skip_the_first_rows():
    # rows 0..4 streamed at these times; rows >= 2 were produced by steps lasting 2, 3, 4
    assert H.step_intervals([0.0, 1.0, 3.0, 6.0, 10.0], skip=2) == [2.0, 3.0, 4.0]
    assert H.step_intervals([0.0, 1.0, 3.0], skip=0) == [1.0, 2.0]  # row 0 has no step before it


def test_interleaved_rotates_the_order_each_round():
    calls = []
    variants = {name: (lambda n: lambda: calls.append(n) or {"step_s": len(calls)})(name) for name in "abc"}
    results = H.interleaved(variants, rounds=3, warmup=1)
    assert calls == list("abc") + list("abc") + list("bca") + list("cab")
    assert [r["step_s"] for r in results["a"]] == [4, 9, 11]


def test_ratio_summary_is_per_round():
    ours = [{"step_s": 2.0}, {"step_s": 6.0}, {"step_s": 3.0}]
    base = [{"step_s": 1.0}, {"step_s": 2.0}, {"step_s": 3.0}]
    assert H.ratio_summary(ours, base) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}


def test_call_counter_counts_host_reads_exactly():
    x = torch.tensor([1.0, -2.0, 3.0])
    with H.CallCounter() as counter:
        x.sum().item()  # read 1 (+1 call: sum)
        bool((x > 0).all())  # read 2 (+2 calls: gt, all)
        x.tolist()  # read 3
        torch.nonzero(x)  # read 4: data-dependent shape
        y = x * 2  # plain calls
        y.add_(1)
    assert counter.reads == 4
    assert counter.read_names == {"__bool__": 1, "item": 1, "nonzero": 1, "tolist": 1}
    assert counter.calls == 4 + 3 + 2

    def run(rows: int):
        for _ in range(rows):
            int(x[0])  # one read (+1 call: getitem) per "step"

    per_step = H.calls_per_step(run, short=2, long=7)
    assert per_step["host_reads"] == 1.0 and per_step["torch_calls"] == 2.0
    with pytest.raises(ValueError, match=r"long \(2\) must exceed short \(2\)\."):
        H.calls_per_step(run, short=2, long=2)


def test_resolve_clock_defaults_and_errors():
    assert H.resolve_clock(None, threads=1) == "cpu"
    assert H.resolve_clock(None, threads=2) == "wall"
    assert H.resolve_clock(None, threads=1, device="cuda") == "wall"
    with pytest.raises(ValueError, match="clock must be one of \\['cpu', 'wall'\\], got 'gpu'\\."):
        H.resolve_clock("gpu", threads=1)
    with pytest.raises(ValueError, match="needs device 'cpu' and --threads 1, got device 'cpu' and 2 thread"):
        H.resolve_clock("cpu", threads=2)


def test_clocked_run_counts_steps_and_refuses_a_short_run():
    def run(streamer, rows=12):
        for r in range(rows):
            streamer.put(torch.zeros(1, 8))
        return rows

    result = H.clocked_run(run, rows=12, skip=8, skip_prompt=False)
    assert result["rows"] == 12 and len(result["stamps"]) == 12 and result["step_s"] >= 0
    with pytest.raises(RuntimeError, match=r"A timed run produced 11 rows \(11 streamed\) instead of 12"):
        H.clocked_run(lambda s: run(s, rows=11), rows=12, skip=8, skip_prompt=False)
    with pytest.raises(ValueError, match="rows=9 leaves fewer than 2 timed steps after skipping 8 rows"):
        H.clocked_run(run, rows=9, skip=8, skip_prompt=False)


@pytest.fixture(scope="module")
def tiny_pair():
    ours = H.build_ours("tiny", torch.float32)
    return ours, H.build_qwen3_baseline(ours)


@pytest.fixture(scope="module")
def stock_reads(tiny_pair) -> float:
    """Host reads per step of transformers' stock loop (plain Qwen3): 1 on 5.24, 2 on 5.5."""
    ids = H.text_prompt(1, 8, vocab=8208)
    return H.calls_per_step(lambda rows: H.run_qwen3(tiny_pair[1], ids, rows, "greedy"), 9, 13)["host_reads"]


def test_pinned_model_never_stops_and_eoc_logit_is_zero(tiny_pair):
    ours, _ = tiny_pair
    inputs = H.ours_prompt(ours.config, 2, 12)
    out = ours.generate(**inputs, max_new_tokens=30, do_sample=False, return_dict_in_generate=True)
    assert out.lengths.tolist() == [30, 30] and not out.finished.any()
    logits = ours(**inputs).logits.view(2, 8, -1, 1026)  # [B * C, L, V] -> [B, C, L, V]
    assert torch.all(logits[:, 0, :, ours.config.audio_eoc_token_id] == 0)


def test_qwen3_baseline_is_the_same_backbone_and_head(tiny_pair):
    ours, baseline = tiny_pair
    embeds = torch.randn(1, 5, ours.config.hidden_size)
    ours_hidden = ours.model(inputs_embeds=embeds).last_hidden_state
    torch.testing.assert_close(baseline.model(inputs_embeds=embeds).last_hidden_state, ours_hidden, rtol=0, atol=0)
    assert baseline.lm_head.weight.shape == (8 * 1026, ours.config.hidden_size)
    torch.testing.assert_close(baseline.lm_head(ours_hidden), ours.audio_head(ours_hidden))


def test_prompts_have_the_asked_length_and_layout(tiny_pair):
    config = tiny_pair[0].config
    plain = H.ours_prompt(config, 2, 10)["input_ids"]
    assert plain.shape == (2, 10) and plain[0, 0] == config.tts_token_id and plain[0, -1] == config.audio_start_token_id
    clone = H.ours_prompt(config, 3, 20, reference_rows=12)
    assert clone["input_ids"].shape == (3, 20)
    assert int((clone["input_ids"] == config.audio_placeholder_id).sum()) == 36 == clone["audio_input_ids"].shape[0]
    with pytest.raises(ValueError, match="A prompt of 10 tokens cannot hold 7 reference rows and some text."):
        H.ours_prompt(config, 1, 10, reference_rows=7)


def test_v2_model_matches_our_shapes_and_runs_without_torchaudio(tiny_pair):
    ours, _ = tiny_pair
    torchaudio_before = sys.modules.get("torchaudio")  # None, or conftest's stand-in while its fixture is alive
    v2 = H.build_v2(ours)
    assert v2.audio_lm_head.weight.shape == ours.audio_head.weight.shape == (8208, ours.config.hidden_size)
    eos_rows = torch.arange(8) * 1026 + 1025
    assert torch.all(v2.audio_lm_head.weight[eos_rows] == 0)
    ids = H.text_prompt(1, 8, vocab=v2.config.vocab_size, last=v2.config.audio_bos_token_id)
    assert H.run_v2(v2, ids, 12, "greedy") == 12
    assert sys.modules.get("torchaudio") is torchaudio_before  # the v2 path imported no torchaudio of its own


class _ForceCode(LogitsProcessor):
    def __call__(self, input_ids, scores):
        forced = torch.full_like(scores, -float("inf"))
        forced[:, 5] = 0.0
        return forced


def test_greedy_agreement_identical_and_different(tiny_pair):
    ours, _ = tiny_pair
    inputs = H.ours_prompt(ours.config, 1, 12)
    same = H.greedy_agreement(ours, inputs, 10, {}, {"cache_implementation": "static"}, tolerance=1e-3)
    assert same["agree"] and same["identical"] and same["identical_rows"] == 10
    # A processor that changes every code leaves the raw logits equal: not a near-tie, so no agreement.
    forced = H.greedy_agreement(ours, inputs, 10, {}, {"logits_processor": LogitsProcessorList([_ForceCode()])},
                                tolerance=1e-3)
    assert not forced["agree"] and not forced["identical"] and forced["identical_rows"] == 0
    assert forced["max_logit_diff_over_std"] == 0.0 and not forced["near_tie"]


def test_qwen3_baseline_with_an_end_of_text_id_runs_its_full_length(tiny_pair):
    """The pinned id is the baseline's end-of-text id: checked every step, never emitted (greedy and top-k 50)."""
    _, baseline = tiny_pair
    ids = H.text_prompt(2, 12, vocab=baseline.config.vocab_size)
    for mode in ("greedy", "sampling"):
        with H.CallCounter() as with_eos:
            assert H.run_qwen3(baseline, ids, 20, mode, eos=True) == 20
        with H.CallCounter() as without:
            assert H.run_qwen3(baseline, ids, 20, mode, eos=False) == 20
        assert with_eos.calls > without.calls


def test_host_reads_per_step_ours_adds_none_v2_adds_one(tiny_pair, stock_reads):
    """The deterministic counts that bench_decode and bench_v2 report next to their timings, without the timings:
    our decode step reads the host no more often than transformers' stock loop (greedy at batch 2, sampling at batch
    1), the v2 port's forked loop once more."""
    ours, _ = tiny_pair
    for batch, mode in ((2, "greedy"), (1, "sampling")):
        inputs = H.ours_prompt(ours.config, batch, 16)
        counts = H.calls_per_step(lambda rows, inputs=inputs, mode=mode: H.run_ours(ours, inputs, rows, mode), 9, 13)
        assert counts["host_reads"] == stock_reads, (batch, mode)
    v2 = H.build_v2(ours)
    ids = H.text_prompt(1, 8, vocab=v2.config.vocab_size, last=v2.config.audio_bos_token_id)
    assert H.calls_per_step(lambda rows: H.run_v2(v2, ids, rows, "greedy"), 9, 13)["host_reads"] == stock_reads + 1


def test_script_bookkeeping():
    """The scripts' pure parts: cases, groups, per-stream arithmetic and verdicts, rows for time to first audio."""
    decode = script("bench_decode")

    def ms(value: float) -> dict:
        return {"median": value}

    results = [
        {"width": "tiny", "dtype": "fp32", "batch": 1, "mode": "greedy", "ours_ms": ms(2.0)},
        {"width": "tiny", "dtype": "fp32", "batch": 4, "mode": "greedy", "ours_ms": ms(4.0)},
        {"width": "tiny", "dtype": "fp32", "batch": 4, "mode": "sampling", "ours_ms": ms(9.0)},  # no batch-1 pair
        {"width": "real", "dtype": "bf16", "batch": 1, "mode": "greedy", "ours_ms": ms(10.0)},
        {"width": "real", "dtype": "bf16", "batch": 16, "mode": "greedy", "ours_ms": ms(40.0)},
    ]
    assert decode.per_stream(results) == [
        {"width": "tiny", "dtype": "fp32", "batch": 4, "per_stream_vs_batch1": 0.5, "target": None, "verdict": None},
        {"width": "real", "dtype": "bf16", "batch": 16, "per_stream_vs_batch1": 0.25, "target": 0.2,
         "verdict": "MISSED"},
    ]
    args = decode.parse_args(["--width", "both", "--dtype", "both"])
    assert decode.model_groups(args) == [("tiny", "fp32"), ("real", "bf16"), ("real", "fp32")]
    v2 = script("bench_v2")
    assert v2.cases(v2.parse_args(["--width", "tiny", "--batch", "1", "2"])) == [
        ("tiny", "fp32", 1, "greedy"), ("tiny", "fp32", 1, "sampling"), ("tiny", "fp32", 2, "greedy")]
    compile_bench = script("bench_compile")
    assert compile_bench.cases(compile_bench.parse_args(["--width", "both"])) == [
        ("tiny", "fp32", 1), ("real", "bf16", 1), ("real", "bf16", 16)]
    assert set(compile_bench.variant_options(compile_bench.compile_config("eager"))) == {"dynamic", "static",
                                                                                         "static+compile"}
    assert script("gpu_benchmark").ttfa_rows(10, 12, 8) == 31  # 10 frames + 12 context + 8 codebooks + 1


def test_finetune_memory_estimate_counts_match_the_models():
    """The shapes behind docs/TRAINING.md's computed LoRA memory (`bench_finetune`): the parameter counts equal a real
    model's and PEFT's, at two widths."""
    from peft import get_peft_model

    from conftest import tiny_model
    from higgs_v3.training.finetune import lora_config

    bench = script("bench_finetune")
    for overrides in ({}, {"hidden_size": 64, "head_dim": 8, "num_attention_heads": 8, "intermediate_size": 96}):
        model = tiny_model(**overrides)
        assert bench.backbone_parameter_count(model.config) == sum(p.numel() for p in model.parameters())
        peft_model = get_peft_model(model, lora_config(rank=4))
        trained = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
        assert bench.lora_parameter_count(model.config, rank=4) == trained
    parts = bench.estimate_lora_memory(model.config, positions=100, rank=4, codec_parameters=10)
    assert parts["codec_fp32"] == 40 and parts["head_and_loss"] == 100 * 8 * 1026 * 14
    assert parts["total"] == sum(v for k, v in parts.items() if k != "total")


# ---------------------------------------------------------------------------------------------- scripts
@pytest.mark.integration
def test_bench_decode_tiny(tmp_path, stock_reads):
    data = run_script("bench_decode", ["--width", "tiny", "--batch", "1", "2", "--mode", "greedy", "--rounds", "1",
                                       "--long", "11"], tmp_path)
    results = data["results"]
    assert [(r["width"], r["batch"], r["mode"]) for r in results] == [("tiny", 1, "greedy"), ("tiny", 2, "greedy")]
    first = results[0]
    assert first["ratio"]["n"] == 1 and first["target"] == 1.10
    assert first["verdict"] == ("ok" if first["ratio"]["median"] <= 1.10 else "MISSED")
    assert stock_reads >= 1  # the stock loop's stop check reads a flag every step
    counts = first["calls_per_step"]
    assert counts["ours"]["host_reads"] == counts["qwen3"]["host_reads"] == stock_reads  # ours adds none
    assert counts["qwen3_noeos"]["host_reads"] == stock_reads
    # Plain text decoding checks its end-of-text id and pads every step: more calls than the leanest loop.
    assert counts["qwen3"]["torch_calls"] > counts["qwen3_noeos"]["torch_calls"]
    assert first["ratio_strict"]["n"] == 1 and first["qwen3_noeos_ms"]["n"] == 1
    stream = data["per_stream"][0]
    assert stream["per_stream_vs_batch1"] == results[1]["ours_ms"]["median"] / 2 / first["ours_ms"]["median"]


@pytest.mark.integration
def test_bench_decode_diff_method(tmp_path):
    data = run_script("bench_decode", ["--width", "tiny", "--batch", "1", "--mode", "sampling", "--rounds", "1",
                                       "--method", "diff", "--short", "8", "--long", "11", "--no-plot"], tmp_path)
    assert data["results"][0]["mode"] == "sampling" and data["results"][0]["target"] == 1.20


def test_bench_decode_bad_options(capsys):
    with pytest.raises(SystemExit):
        script("bench_decode").main(["--short", "8", "--long", "9"])
    assert "--long (9) must exceed --short (8) by at least 2." in capsys.readouterr().err


def test_bench_decode_turns_each_speed_device_on_and_off_again(tiny_pair):
    """`--devices` turns the stored forward signature and the signature-once logits processor list on (the product
    ships neither) for one block, and off again after it; the rows generated are the same either way."""
    bench, ours = script("bench_decode"), tiny_pair[0]
    cls, inputs = type(ours), H.ours_prompt(ours.config, 1, 12)
    assert "__signature__" not in vars(cls.forward) and "_get_logits_processor" not in vars(cls)
    expected = ours.generate(**inputs, max_new_tokens=10, do_sample=False)
    with bench.device_on(ours, "signature"):
        assert vars(cls.forward)["__signature__"] == inspect.signature(cls.forward.__wrapped__)
        assert torch.equal(ours.generate(**inputs, max_new_tokens=10, do_sample=False), expected)
    assert "__signature__" not in vars(cls.forward)
    with bench.device_on(ours, "list"):
        processors = ours._get_logits_processor(generation_config=ours.generation_config, input_ids_seq_length=1,
                                                encoder_input_ids=None, prefix_allowed_tokens_fn=None,
                                                logits_processor=LogitsProcessorList())
        assert type(processors) is bench.SignatureOnceList
        assert torch.equal(ours.generate(**inputs, max_new_tokens=10, do_sample=False), expected)
        with pytest.raises(RuntimeError, match="already has the 'list' device"), bench.device_on(ours, "list"):
            pass
    assert "_get_logits_processor" not in vars(cls)


@pytest.mark.integration
def test_bench_v2_tiny(tmp_path, stock_reads):
    data = run_script("bench_v2", ["--width", "tiny", "--batch", "1", "--mode", "greedy", "--rounds", "1",
                                   "--rows", "11"], tmp_path)
    result = data["results"][0]
    assert (result["width"], result["batch"], result["mode"]) == ("tiny", 1, "greedy")
    assert result["calls_per_step"]["ours"]["host_reads"] == stock_reads
    assert result["calls_per_step"]["v2"]["host_reads"] == stock_reads + 1  # its forked loop also reads a mask


@pytest.mark.integration
def test_bench_compile_tiny(tmp_path):
    data = run_script("bench_compile", ["--width", "tiny", "--backend", "eager", "--rounds", "1", "--rows", "11",
                                        "--check-rows", "10"], tmp_path)
    result = data["results"][0]
    assert set(result["steps_ms"]) == {"dynamic", "static", "static+compile"}
    assert result["agreement"]["identical"] and result["speedup_vs_dynamic"]["dynamic"]["median"] == 1.0


@pytest.mark.integration
def test_bench_prompt_tiny(tmp_path):
    data = run_script("bench_prompt", ["--width", "tiny", "--lengths", "16", "32", "--rounds", "1", "--rows", "11"],
                      tmp_path)
    assert [r["length"] for r in data["results"]] == [16, 32]
    assert set(data["results"][0]["prefill_ms"]) == {"ours (text prompt)", "ours (clone prompt)", "qwen3"}


@pytest.mark.integration
def test_bench_codec_tiny(tmp_path):
    data = run_script("bench_codec", ["--tiny", "--seconds", "0.2", "0.4", "--rounds", "1"], tmp_path)
    first = data["results"][0]
    assert first["frames"] == 5 and first["seconds"] == 0.2
    assert first["decode_output_shape"] == [1, 1, 4800] and first["encode_output_shape"] == [1, 8, 5]
    assert first["decode_rtf"]["median"] == pytest.approx(first["decode_s"]["median"] / 0.2)
    assert first["encode_reference_torchaudio-alg_s"]["median"] > 0  # soxr's baseline only with the bench extra


@pytest.mark.integration
def test_bench_cpu_threads_small(tmp_path):
    data = run_script("bench_cpu_threads", ["--reps", "1", "--rounds", "1", "--batch", "1", "--thread-counts", "1",
                                            "--in-features", "64", "--out-features", "128", "--busy", "0", "1"], tmp_path)
    (result,) = [r for r in data["results"] if r["dtype"] == "fp32" and r["busy"] == 0]
    assert result["weight_GBps"] == pytest.approx(64 * 128 * 4 / (result["ms"]["median"] / 1e3) / 1e9)


@pytest.mark.integration
def test_gpu_benchmark_tiny_path(tmp_path, stock_reads):
    data = run_script("gpu_benchmark", ["--tiny", "--device", "cpu", "--backend", "eager", "--rounds", "1",
                                        "--rows", "11", "--check-rows", "10", "--e2e-rows", "11", "--batches", "2",
                                        "--prompt-length", "16", "--sync-rows", "9", "11"], tmp_path)
    variants = [(p["variant"], p["batch"]) for p in data["phases"]]
    assert variants == [("eager", 1), ("static+compile", 1), ("static+compile", 2), ("eager", 2)]
    assert [c["batch"] for c in data["checks"]] == [1, 2] and all(c["agree"] for c in data["checks"])
    eager = data["phases"][0]
    assert eager["syncs_per_step"]["python_host_reads"] == stock_reads
    assert eager["syncs_per_step"]["sync_debug_warnings"] is None  # CUDA-only counts on a CPU
    assert eager["rtf"] == pytest.approx(eager["step_ms"]["median"] / 1e3 * 25)
    assert eager["ttfa_one_frame_ms"] > 0 and eager["ttfa_default_ms"] > 0  # measured (their order is timing)
    assert [e["audio_s"] for e in data["end_to_end"]] == [(11 - 7) * 960 / 24000] * 2
    assert data["floor"]["step_s"] is None and data["skipped"] == []


def test_gpu_benchmark_refuses_the_full_model_on_a_cpu(capsys):
    with pytest.raises(SystemExit):
        script("gpu_benchmark").main(["--device", "cpu"])
    assert "The full-size model needs a CUDA device" in capsys.readouterr().err


def test_plots_say_how_to_get_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"The benchmark plots need matplotlib: pip install 'higgs-v3\[bench\]'"):
        H.pyplot()


def test_bench_instructions_parts(tmp_path, monkeypatch, capsys):
    """The child run, the valgrind output parser, the per-step arithmetic and the report, with valgrind replaced by
    fixed counts (the real counts take minutes under valgrind)."""
    bench = script("bench_instructions")
    with pytest.raises(ValueError, match="variant must be one of"):
        bench.run_child("gpt", 13)
    assert bench.parse_collected("==1== Events    : Ir\n==1== Collected : 19361328904\n") == 19361328904
    with pytest.raises(RuntimeError, match="No 'Collected' line"):
        bench.parse_collected("valgrind: command not found")

    fake = {("ours", 12): 1000, ("ours", 92): 1000 + 80 * 110, ("qwen3", 12): 900, ("qwen3", 92): 900 + 80 * 100,
            ("qwen3_noeos", 12): 800, ("qwen3_noeos", 92): 800 + 80 * 88}
    monkeypatch.setattr(bench.shutil, "which", lambda name: "/usr/bin/valgrind")
    monkeypatch.setattr(bench, "count_instructions", lambda variant, rows: fake[(variant, rows)])
    assert bench.main(["--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "bench_instructions.json").read_text())
    assert data["per_step"] == {"ours": 110.0, "qwen3": 100.0, "qwen3_noeos": 88.0}
    assert data["ratio_vs_qwen3"] == pytest.approx(1.1) and data["ratio_vs_qwen3_noeos"] == pytest.approx(1.25)
    assert "ours / variant" in capsys.readouterr().out

    monkeypatch.setattr(bench.shutil, "which", lambda name: None)
    assert bench.main(["--out", str(tmp_path)]) == 1
    assert "valgrind is not installed" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--short", "9", "--long", "9"])


@pytest.mark.integration
def test_bench_instructions_child_run():
    """The process valgrind measures: builds, warms up, generates 13 rows."""
    assert script("bench_instructions").main(["--child", "ours", "13"]) == 0
