# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""The server's codec decode without Python's GIL: `trace_decode(codec)` traces the codec's `decode` (all levels)
into one TorchScript graph and sets it as `codec.decode_graph`, so `decode`, `decode_frames`, `model.decode_audio`
and the audio streamer run it.

Why: the server decodes waveforms on its codec thread while its worker thread runs the decode steps. Eager, `decode`
re-enters Python at each of its ~1,000 operations (the tiny model's: 185 convolutions, 180 Snake activations), and
each time waits for the interpreter lock the stepping thread holds between its own operations; the graph runs its
operations in C++ with the lock released for the whole call. Measured on this 2-core CPU (16 takes of 2-8 s beside
the 207 steps of 16 requests, one thread each): eager, both threads slowed from 0.36 s alone to 0.53 s; traced, the
steps took 0.39 s and the codec 0.33 s.

The graph runs the same ATen kernels on the same tensors (the codec's own parameters, shared), with the graph
executor's optimizations off (no fusion), so its waveforms equal eager's bit for bit: checked on a probe of two
lengths when traced; where they differ, or tracing is not available (`torch.jit` is deprecated), the codec stays eager
and `trace_decode` says why. The trace fixes only the number of levels (`decode` of fewer runs eager); a move or cast
of the codec drops the graph.
"""

from __future__ import annotations

import warnings

import torch
from transformers.utils import logging


logger = logging.get_logger(__name__)

PROBE_FRAMES = (3, 11)
"""The code lengths the trace is checked on (the first is traced): short, and not equal, so a length baked into the
graph would show."""


class _DecodeGraph:
    """`decode`'s modules as one graph: a plain callable (not a module, so the codec's modules and state dict do not
    change), run with the graph executor's optimizations off for the calling thread. A deep copy of the codec holds no
    graph (a copied graph would decode with copies of the original's weights, not the copy's): it decodes eagerly.
    (The codec does not pickle whole: its weight-norm parametrizations save through `state_dict` only.)"""

    def __init__(self, graph):
        self.graph = graph

    def __call__(self, audio_codes: torch.LongTensor) -> torch.Tensor:
        with torch.jit.optimized_execution(False):
            return self.graph(audio_codes)

    def __deepcopy__(self, memo):
        return None


class _EagerDecode(torch.nn.Module):
    def __init__(self, codec):
        super().__init__()
        self.codec = codec

    def forward(self, audio_codes):
        return self.codec.decode(audio_codes)


def trace_decode(codec) -> str | None:
    """Set `codec.decode_graph` to its `decode` traced (see the module doc). Returns None when it is set, else why it
    is not (the codec then decodes eagerly, as before; the reason is also logged)."""
    codec.decode_graph = None
    quantizers, size = codec.config.num_quantizers, codec.config.codebook_size
    generator = torch.Generator().manual_seed(0)
    device = codec.fc.weight.device
    probes = [torch.randint(0, size, (1, quantizers, n), generator=generator).to(device) for n in PROBE_FRAMES]
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # torch.jit's deprecation notice, and transformers' notes on its own attributes read while tracing
            warnings.simplefilter("ignore")
            graph = _DecodeGraph(torch.jit.trace(_EagerDecode(codec), probes[0], check_trace=False))
            same = all(torch.equal(graph(codes), codec.decode(codes)) for codes in probes)
    except Exception as error:  # noqa: BLE001 - any failure to trace leaves the eager decode, which works
        reason = f"tracing it failed ({type(error).__name__}: {error})"
    else:
        if same:
            codec.decode_graph = graph
            return None
        reason = "its traced graph's waveforms differ from the eager decode's on this device"
    logger.warning(f"The codec decodes eagerly (holding Python's lock at each operation): {reason}.")
    return reason


__all__ = ["trace_decode"]
