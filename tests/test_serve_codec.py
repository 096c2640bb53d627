# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""The server's traced codec decode (`serving/codec.py`): the same samples as the eager decode bit for bit, run outside
Python, dropped by a move, left eager (and said) when it cannot be traced or differs; the server's worker uses it."""

from __future__ import annotations

import contextlib
import copy
import logging
import sys
import threading

import pytest
import torch
from fastapi.testclient import TestClient

from conftest import tiny_tts_model
from higgs_v3.codec_higgs_v3 import HiggsAudioV3Codec
from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor
from higgs_v3.conversion.original_format import REAL_CODEC_CONFIG
from higgs_v3.serving import codec as serving_codec
from higgs_v3.serving.app import ServeSettings, create_app
from higgs_v3.serving.codec import PROBE_FRAMES, trace_decode
from higgs_v3.serving.worker import SpeechWorker
from higgs_v3.testing.tiny import randomize_codebooks, tiny_codec_config


def build(config: dict) -> HiggsAudioV3Codec:
    torch.manual_seed(0)
    codec = HiggsAudioV3Codec.from_codec_config(config).eval()
    randomize_codebooks(codec)
    return codec


@pytest.fixture(scope="module")
def codec() -> HiggsAudioV3Codec:
    return build(tiny_codec_config())


def random_codes(batch: int, frames: int, seed: int, quantizers: int = 8) -> torch.LongTensor:
    return torch.randint(0, 1024, (batch, frames, quantizers), generator=torch.Generator().manual_seed(seed))


def eager(codec: HiggsAudioV3Codec, codes, **kwargs) -> list[torch.Tensor]:
    graph, codec.decode_graph = codec.decode_graph, None
    try:
        return codec.decode_frames(codes, **kwargs)
    finally:
        codec.decode_graph = graph


def module_calls(function) -> int:
    """Calls of the Python `forward`s of torch's and transformers' modules made while `function()` runs in this
    thread."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        path = frame.f_code.co_filename.replace("\\", "/")
        calls += event == "call" and frame.f_code.co_name == "forward" and (
            "/torch/nn/modules/" in path or "/transformers/models/" in path)

    before = sys.getprofile()
    sys.setprofile(count)
    try:
        function()
    finally:
        sys.setprofile(before)
    return calls


def test_traced_decode_gives_the_eager_samples_bit_for_bit_at_lengths_it_was_not_traced_on(codec):
    names, modules = list(codec.state_dict()), [name for name, _ in codec.named_modules()]
    assert trace_decode(codec) is None and codec.decode_graph is not None
    for frames, batch, lengths in [(1, 1, None), (26, 1, None), (77, 2, None), (40, 3, [40, 13, 40])]:
        assert frames not in PROBE_FRAMES
        codes = random_codes(batch, frames, seed=frames)
        traced, reference = codec.decode_frames(codes, lengths), eager(codec, codes, code_lengths=lengths)
        assert [w.shape for w in traced] == [w.shape for w in reference]
        assert all(torch.equal(a, b) for a, b in zip(traced, reference)), frames
    # a plain callable beside the modules: the codec's modules and state dict are those of before
    assert list(codec.state_dict()) == names and [name for name, _ in codec.named_modules()] == modules


def test_traced_decode_runs_outside_python(codec):
    """The point of the graph: the decode does not re-enter Python at each operation (so it does not wait for the
    interpreter's lock each time); eager, every module's forward is a Python call."""
    trace_decode(codec)
    codes = random_codes(1, 20, seed=1).transpose(1, 2)  # [1, Q, T]
    with torch.no_grad():
        traced = module_calls(lambda: codec.decode(codes))
        graph, codec.decode_graph = codec.decode_graph, None
        eager_calls = module_calls(lambda: codec.decode(codes))
        codec.decode_graph = graph
    assert eager_calls > 100 and traced == 0, (eager_calls, traced)


def test_fewer_levels_a_move_or_a_cast_decode_eagerly(codec):
    trace_decode(codec)
    codes = random_codes(1, 9, seed=2, quantizers=4).transpose(1, 2)  # 4 of 8 levels: not what was traced
    called = []
    graph = codec.decode_graph
    codec.decode_graph = lambda audio_codes: called.append(audio_codes) or graph(audio_codes)
    with torch.no_grad():
        assert torch.equal(codec.decode(codes), eager(codec, codes.transpose(1, 2))[0][None, None])
    assert called == []
    codec.to("cpu")  # a move drops the graph (traced over the tensors a move replaces)
    assert codec.decode_graph is None
    trace_decode(codec)
    codec.to(torch.bfloat16)  # a cast, too (the codec stays float32: its pin)
    assert codec.decode_graph is None and codec.fc.weight.dtype == torch.float32


def test_a_deep_copy_of_the_codec_decodes_with_its_own_weights(codec):
    """The graph was traced over the original's tensors: a deep copy drops it and decodes eagerly, with its own weights
    (a copied graph would have decoded with copies of the original's weights, silently)."""
    trace_decode(codec)
    twin = copy.deepcopy(codec)
    assert twin.decode_graph is None and codec.decode_graph is not None
    with torch.no_grad():
        twin.acoustic_decoder.conv2.bias.add_(0.5)
    codes = random_codes(1, 6, seed=4)
    assert torch.equal(twin.decode_frames(codes)[0], eager(twin, codes)[0])
    assert not torch.equal(twin.decode_frames(codes)[0], codec.decode_frames(codes)[0])


def test_weights_replaced_or_backend_flags_changed_after_the_trace_drop_the_graph(caplog):
    """What the trace fixed besides the codes is checked at each call: a weight replaced without a move
    (`load_state_dict(..., assign=True)`, a swapped storage) or cuDNN's flags switched: eager from then on, said once."""
    codec = build(tiny_codec_config())
    codes = random_codes(1, 7, seed=5)
    state = {name: tensor.clone() for name, tensor in codec.state_dict().items()}
    state["acoustic_decoder.conv2.bias"] += 0.5
    for change in ("assign", "storage", "flags"):
        assert trace_decode(codec) is None
        with contextlib.ExitStack() as stack:
            if change == "assign":
                codec.load_state_dict(state, assign=True)
            elif change == "storage":
                codec.acoustic_decoder.conv2.bias.data = codec.acoustic_decoder.conv2.bias.data + 0.25
            else:
                cudnn = torch.backends.cudnn
                stack.enter_context(cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark,
                                                deterministic=not cudnn.deterministic, allow_tf32=cudnn.allow_tf32))
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger=serving_codec.logger.name):
                waveform = codec.decode_frames(codes)[0]
            assert codec.decode_graph is None, change
            assert torch.equal(waveform, eager(codec, codes)[0]), change
            assert "decodes eagerly from now on" in caplog.text, change
    assert torch.equal(codec.acoustic_decoder.conv2.bias, state["acoustic_decoder.conv2.bias"] + 0.25)


def test_a_graph_that_differs_or_cannot_be_traced_leaves_the_eager_decode_and_says_why(codec, monkeypatch, caplog):
    real_trace = torch.jit.trace

    def off_by_a_bit(module, example, **kwargs):
        graph = real_trace(module, example, **kwargs)
        return lambda codes: graph(codes) + 1e-7

    monkeypatch.setattr(torch.jit, "trace", off_by_a_bit)
    with caplog.at_level(logging.WARNING, logger=serving_codec.logger.name):
        reason = trace_decode(codec)
    assert codec.decode_graph is None and "differ from the eager decode" in reason
    assert "decodes eagerly" in caplog.text and reason in caplog.text

    def unavailable(module, example, **kwargs):
        raise RuntimeError("TorchScript is not available in this build")

    monkeypatch.setattr(torch.jit, "trace", unavailable)
    reason = trace_decode(codec)
    assert codec.decode_graph is None
    assert reason == "tracing it failed (RuntimeError: TorchScript is not available in this build)"
    codes = random_codes(1, 5, seed=3)
    assert codec.decode_frames(codes)[0].shape == (5 * 960,)


def test_the_server_decodes_on_its_codec_thread_through_the_graph(tokenizer, tmp_path):
    model = tiny_tts_model(max_new_tokens=8)
    processor = HiggsAudioV3Processor.from_model_config(tokenizer, model.config)
    assert model.codec.decode_graph is None
    with TestClient(create_app(model, processor, ServeSettings("tiny", tmp_path))) as client:
        graph, threads = model.codec.decode_graph, []
        assert graph is not None

        def spy(audio_codes):
            threads.append(threading.current_thread().name)
            return graph(audio_codes)

        model.codec.decode_graph = spy
        for stream in (None, "audio"):
            body = {"model": "tiny", "input": "Hello there.", "response_format": "pcm", "seed": 1,
                    "stream_format": stream}
            assert client.post("/v1/audio/speech", json=body).status_code == 200
        assert threads and set(threads) == {"higgs-v3-codec"}, threads  # whole and streamed takes
        model.codec.decode_graph = graph
        SpeechWorker(model, processor).stop()  # a second worker on the same model keeps the graph it has
        assert model.codec.decode_graph is graph


def test_a_remote_code_codec_is_traced_by_the_installed_server(second_import):
    """A notebook's model from `trust_remote_code=True` (its own copy of the codec class) served by the installed
    package: `trace_decode` sets that codec's graph, and its own `decode` runs it, bit for bit."""
    remote_codec = second_import("codec_higgs_v3").HiggsAudioV3Codec
    assert remote_codec is not HiggsAudioV3Codec
    torch.manual_seed(0)
    codec = remote_codec.from_codec_config(tiny_codec_config()).eval()
    randomize_codebooks(codec)
    assert trace_decode(codec) is None
    codes = random_codes(2, 17, seed=6)
    with torch.no_grad():
        assert module_calls(lambda: codec.decode(codes.transpose(1, 2))) == 0
    assert all(map(torch.equal, codec.decode_frames(codes), eager(codec, codes)))


@pytest.mark.integration
def test_real_width_codec_traced_decode_is_bit_identical():
    """The real codec's widths (random weights): the graph's waveforms equal eager's at lengths it was not traced on."""
    codec = build(REAL_CODEC_CONFIG)
    assert trace_decode(codec) is None
    for frames in (1, 50):
        codes = random_codes(1, frames, seed=frames)
        assert torch.equal(codec.decode_frames(codes)[0], eager(codec, codes)[0])
