# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""The server's codec decode without Python's GIL: `trace_decode(codec)` traces the codec's `decode` (all levels)
into one TorchScript graph and sets it as `codec.decode_graph`, so `decode`, `decode_frames`, `model.decode_audio`
and the audio streamer run it.

Why: the server decodes waveforms on its codec thread while its worker thread runs the decode steps. Eager, `decode`
re-enters Python at each of its ~440 tensor operations (37 convolutions, 36 Snake activations and the rest), and each
time waits for the interpreter lock the stepping thread holds between its own operations; the graph runs its
operations in C++ with the lock released for the whole call. Measured on this 2-core CPU (16 takes of 2-8 s beside
the 207 steps of 16 requests, one thread each): eager, both threads slowed from 0.36 s alone to 0.53 s; traced, the
steps took 0.39 s and the codec 0.33 s.

The graph runs the same ATen kernels on the same tensors (the codec's own parameters, shared), with the graph
executor's optimizations off (no fusion), so its waveforms equal eager's bit for bit: checked on a probe of two
lengths when traced; where they differ, or tracing is not available (`torch.jit` is deprecated), the codec stays eager
and `trace_decode` says why. What the trace fixes is checked at each call instead of trusted: the number of levels
(`decode` of fewer runs eager), and the codec's tensors and the backend flags the convolutions were recorded with (a
weight replaced without a move, `load_state_dict(..., assign=True)`, or cuDNN's TF32 or determinism switched after
the trace: the graph is dropped and the codec decodes eagerly from then on). A move or cast of the codec drops it too.
"""

from __future__ import annotations

import warnings
import weakref

import torch
from transformers.utils import logging


logger = logging.get_logger(__name__)

PROBE_FRAMES = (3, 11)
"""The code lengths the trace is checked on (the first is traced): short, and not equal, so a length baked into the
graph would show."""


def _backend_flags() -> tuple:
    """The backend flags the traced convolutions recorded (eager reads them at each call)."""
    cudnn = torch.backends.cudnn
    return cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32


def _tensor_slots(codec) -> list[tuple[dict, str, torch.Tensor, int]]:
    """Every parameter and buffer `decode` reads, as (its module's dict, name, tensor, storage address): a tensor
    replaced in its module (`load_state_dict(..., assign=True)`) or its storage swapped (`.data = ...`) shows."""
    modules = [module for part in (codec.quantizer, codec.fc2, codec.acoustic_decoder) for module in part.modules()]
    return [(tensors, name, tensor, tensor.data_ptr()) for module in modules
            for tensors in (module._parameters, module._buffers) for name, tensor in tensors.items()
            if tensor is not None]


class _DecodeGraph:
    """`decode`'s modules as one graph: a plain callable (not a module, so the codec's modules and state dict do not
    change), run with the graph executor's optimizations off for the calling thread, while the codec's tensors and
    flags are those it was traced over (else dropped: the codec decodes eagerly). A deep copy of the codec holds no
    graph (a copied graph would decode with copies of the original's weights, not the copy's): it decodes eagerly.
    (The codec does not pickle whole: its weight-norm parametrizations save through `state_dict` only.)"""

    def __init__(self, graph, codec):
        self.graph, self.codec = graph, weakref.ref(codec)
        self.flags, self.slots = _backend_flags(), _tensor_slots(codec)

    def traced_over(self) -> bool:
        """Whether the codec's tensors and the backend flags are still those of the trace."""
        return _backend_flags() == self.flags and all(
            tensors.get(name) is tensor and tensor.data_ptr() == address for tensors, name, tensor, address in self.slots)

    def __call__(self, audio_codes: torch.LongTensor) -> torch.Tensor:
        codec = self.codec()
        if codec is not None and not self.traced_over():
            if codec.decode_graph is self:
                codec.decode_graph = None
            logger.warning("The codec's tensors or cuDNN flags changed after its decode was traced: it decodes "
                           "eagerly from now on (trace_decode again to restore the graph).")
            return codec.decode(audio_codes)
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
            # torch.jit's deprecation notice, transformers' notes on its own attributes read while tracing, and the
            # tracer's notes on the Python values it fixes: the residual units' `padding > 0` (0 at every length) and
            # the loop over levels (all of them: `decode` runs the graph only then); the probe's second length checks
            # that no length was fixed
            warnings.simplefilter("ignore")
            graph = _DecodeGraph(torch.jit.trace(_EagerDecode(codec), probes[0], check_trace=False), codec)
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
