# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""The bundled audio codec: the Higgs Audio v2 tokenizer, built from transformers' X-Codec blocks, without torchaudio.

As transformers' `HiggsAudioV2TokenizerModel` (same state_dict names, so the original checkpoint's codec tensors load
unchanged): a HuBERT semantic branch at 16 kHz, a DAC acoustic encoder/decoder at 24 kHz and an 8-level residual VQ,
one frame per 960 samples. That class imports `torchaudio` (no build for current torch); here the resample in front of
HuBERT is `resample_audio`, torchaudio's algorithm in plain torch. Beside the codec: its placement in a device map.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import HiggsAudioV2TokenizerConfig, XcodecModel
from transformers.models.xcodec.modeling_xcodec import (
    XcodecDecoderOutput,
    XcodecEncoderOutput,
    XcodecResidualVectorQuantization,
    XcodecVectorQuantization,
)
from transformers.utils import logging


logger = logging.get_logger(__name__)


# ---------------------------------------------------------------------------------------------------------------
# Resampling: torchaudio's algorithm (`torchaudio.functional.resample` with its defaults) in plain torch, for reference
# files and in front of HuBERT (why, and how it is checked against torchaudio itself: docs/FIDELITY.md). After reducing
# the rates by their gcd to `orig` -> `new`, output sample `new * f + p` (frame f, phase p) is
#
#     y[new * f + p] = sum_k  x[orig * f + k - width] * h_p[k],     k = 0 .. 2 * width + orig - 1
#     h_p[k] = sinc(pi * s) * cos(pi * s / (2 * W))^2 * base / orig,
#     s = clamp(base * ((k - width) / orig - p / new), -W, W)
#
# with W = 6 zero crossings (`lowpass_filter_width`), `base = min(orig, new) * 0.99` (`rolloff`) and
# `width = ceil(W * orig / base)`: one strided `conv1d` with `new` output channels over the input padded by `width`
# on the left and `width + orig` on the right, the kernel built in the input's dtype with torchaudio's float operations.
# ---------------------------------------------------------------------------------------------------------------
RESAMPLE_LOWPASS_FILTER_WIDTH = 6
RESAMPLE_ROLLOFF = 0.99
_KERNEL_CACHE_SIZE = 16
_kernel_cache: OrderedDict[tuple, tuple[torch.Tensor, int]] = OrderedDict()


def _sinc_kernel(orig: int, new: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, int]:
    """The polyphase kernel `[new, 1, 2 * width + orig]` and `width`, for rates already divided by their gcd."""
    zero_crossings = RESAMPLE_LOWPASS_FILTER_WIDTH
    base = min(orig, new) * RESAMPLE_ROLLOFF  # the cutoff, just under the lower Nyquist frequency
    width = math.ceil(zero_crossings * orig / base)  # input samples of context on each side
    taps = torch.arange(-width, width + orig, dtype=dtype, device=device) / orig  # [K] input times, in output frames
    phases = -(torch.arange(new, dtype=dtype, device=device) / new)  # [new] minus each output phase's time
    s = (phases[:, None] + taps[None, :]) * base  # [new, K] distance to the output sample, in cutoff periods
    s = s.clamp(-zero_crossings, zero_crossings)
    hann = torch.cos(s * math.pi / zero_crossings / 2) ** 2  # [new, K] the window, 0 at +-W crossings
    s = s * math.pi
    sinc = torch.where(s == 0, torch.ones((), dtype=dtype, device=device), s.sin() / s)
    kernel = sinc * (hann * (base / orig))  # [new, K]; unit gain at DC
    return kernel[:, None, :], width  # [new, 1, K]


def resample_kernel(orig_sr: int, target_sr: int, dtype: torch.dtype, device: torch.device | str = "cpu"):
    """`(kernel [new, 1, K], width, orig, new)` for resampling `orig_sr` -> `target_sr` Hz, cached per (rate pair,
    dtype, device) (the last 16 are kept)."""
    device = torch.device(device)
    key = (orig_sr, target_sr, dtype, device)
    if key in _kernel_cache:
        _kernel_cache.move_to_end(key)
    else:
        gcd = math.gcd(orig_sr, target_sr)
        orig, new = orig_sr // gcd, target_sr // gcd
        _kernel_cache[key] = (*_sinc_kernel(orig, new, dtype, device), orig, new)
        while len(_kernel_cache) > _KERNEL_CACHE_SIZE:
            _kernel_cache.popitem(last=False)
    return _kernel_cache[key]


def resampled_length(num_samples: int, orig_sr: int, target_sr: int) -> int:
    """Samples that `resample_audio` returns for `num_samples` input samples: `ceil(num_samples * target / orig)`,
    computed as torchaudio does (the quotient of the gcd-reduced rates rounded to float32 before the ceiling)."""
    if orig_sr == target_sr:
        return num_samples
    gcd = math.gcd(orig_sr, target_sr)
    return math.ceil(float(np.float32(target_sr // gcd * num_samples / (orig_sr // gcd))))


def resample_audio(waveform: torch.Tensor, orig_sr: int, target_sr: int) -> torch.Tensor:
    """Resample the last axis of `waveform`, `[..., N]` -> `[..., resampled_length(N)]`, as torchaudio does (see
    above): in its float dtype, differentiable, the leading axes resampled together in one `conv1d`. Its callers
    (`audio_io_higgs_v3.prepare_reference_waveform`, the codec) pass positive integer rates and float audio."""
    if orig_sr == target_sr:
        return waveform
    kernel, width, orig, new = resample_kernel(orig_sr, target_sr, waveform.dtype, waveform.device)
    length = waveform.shape[-1]
    signals = waveform.reshape(math.prod(waveform.shape[:-1]), 1, length)  # [S, 1, N]
    padded = F.pad(signals, (width, width + orig))  # [S, 1, N + 2 * width + orig]
    frames = F.conv1d(padded, kernel, stride=orig)  # [S, new, N // orig + 1]: one column per input frame
    interleaved = frames.transpose(1, 2).reshape(signals.shape[0], -1)  # [S, new * frames], phases in time order
    target_length = resampled_length(length, orig_sr, target_sr)
    return interleaved[:, :target_length].reshape(*waveform.shape[:-1], -1)  # [..., M]


# *** Higgs Audio v2 specific *** the residual VQ projects the 1024-wide features to the 64-wide codebooks and back
# (X-Codec's quantizer has no projections). Same names as transformers' `HiggsAudioV2TokenizerVectorQuantization`.
class HiggsAudioV3VectorQuantization(XcodecVectorQuantization):
    """One VQ level: `project_in` (hidden -> codebook_dim), X-Codec's Euclidean codebook, `project_out` (back)."""

    def __init__(self, config: HiggsAudioV2TokenizerConfig):
        super().__init__(config)
        self.project_in = nn.Linear(config.hidden_size, config.codebook_dim)
        self.project_out = nn.Linear(config.codebook_dim, config.hidden_size)

    def encode(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """`[B, hidden, T]` -> codes `[B, T]`."""
        return self.codebook.encode(self.project_in(hidden_states.transpose(1, 2)))  # [B, T, D] -> [B, T]

    def decode(self, embed_ind: torch.Tensor) -> torch.Tensor:
        """codes `[B, T]` -> `[B, hidden, T]`."""
        return self.project_out(self.codebook.decode(embed_ind)).transpose(1, 2)  # [B, T, D] -> [B, hidden, T]


class HiggsAudioV3ResidualVectorQuantization(XcodecResidualVectorQuantization):
    """X-Codec's residual VQ (encode/decode loops unchanged) over projected levels."""

    def __init__(self, config: HiggsAudioV2TokenizerConfig):
        super().__init__(config)
        self.quantizers = nn.ModuleList([HiggsAudioV3VectorQuantization(config) for _ in range(config.num_quantizers)])


# *** end Higgs Audio v2 specific ***


class HiggsAudioV3Codec(XcodecModel):
    r"""
    The Higgs Audio v2 tokenizer: 24 kHz mono audio <-> `num_quantizers` (8) codes per frame at 25 frames per second.

    transformers' `XcodecModel` does the work; ours adds the Higgs VQ levels, the resample without torchaudio and a
    float32 pin (the decoder's transposed convolutions are unstable in half precision): a cast of the model that holds
    it (`model.to(torch.bfloat16)`, `half()`) leaves its weights float32, bit for bit, and moves them to its device.
    `encode` maps `N >= hop_length` samples to frames (the processor counts them without a codec,
    `_get_encoded_length`), `decode` `T` frames to `T * hop_length` samples; its callers (the model's
    `encode_reference` / `encode_target`, `decode_audio`, the streamer) check what they hand it.

    Example:

    ```python
    >>> import torch
    >>> from higgs_v3.codec_higgs_v3 import HiggsAudioV3Codec
    >>> from higgs_v3.testing.tiny import tiny_codec_config  # a tiny test config
    >>> codec = HiggsAudioV3Codec.from_codec_config(tiny_codec_config()).eval()
    >>> codes = codec.encode(torch.randn(1, 1, 24000))
    >>> codes.shape
    torch.Size([1, 8, 25])
    >>> codec.decode(codes).shape
    torch.Size([1, 1, 24000])
    ```
    """

    config_class = HiggsAudioV2TokenizerConfig
    config: HiggsAudioV2TokenizerConfig
    base_model_prefix = "higgs_audio_v2_tokenizer"
    # `decode` of all levels run by this callable instead, when set (the server sets its modules traced into one graph,
    # checked bit-identical: `serving/codec.py`); a move or cast of the codec drops it.
    decode_graph = None
    _no_split_modules = ["HiggsAudioV3ResidualVectorQuantization"]
    # The original checkpoint also stores HuBERT's `masked_spec_embed` (unused at inference, absent here).
    _keys_to_ignore_on_load_unexpected = ["semantic_model.masked_spec_embed"]

    def __init__(self, config: HiggsAudioV2TokenizerConfig):
        super().__init__(config)
        # *** Higgs Audio v2 specific *** projected VQ levels instead of X-Codec's plain ones; `post_init` again
        # initializes only the new modules (the others are already marked initialized).
        self.quantizer = HiggsAudioV3ResidualVectorQuantization(config)
        self.post_init()
        # *** end Higgs Audio v2 specific ***

    @classmethod
    def from_codec_config(cls, codec_config: dict) -> HiggsAudioV3Codec:
        """Build the codec (random weights, float32, frozen: a fixed tokenizer no optimizer may see) from a complete
        config dict (`build_codec_config`); float32 also under a bf16 default dtype (as inside `from_pretrained(...,
        dtype=torch.bfloat16)`), whose weight loader keeps the dtype of the parameters it fills."""
        return cls(build_codec_config(codec_config)).float().requires_grad_(False)

    def _apply(self, fn, recurse: bool = True):
        # *** Higgs v3 specific: the float32 pin. Every floating tensor stays (or becomes) float32 whatever dtype a
        # cast asks for; a move to a device is taken. The cast result is discarded, so weights are never rounded. ***
        def float32(tensor: torch.Tensor) -> torch.Tensor:
            applied = fn(tensor)
            if tensor.is_floating_point() and applied.dtype != tensor.dtype:
                return tensor.to(device=applied.device, dtype=torch.float32)
            return applied

        self.decode_graph = None  # traced over the tensors being replaced
        return super()._apply(float32, recurse)
        # *** end Higgs v3 specific ***

    # ------------------------------------------------------------------ encode / decode
    def _extract_semantic_features(self, input_values: torch.Tensor) -> torch.Tensor:
        """HuBERT features at the codec frame rate: `[B, 1, N]` at 24 kHz -> `[B, T, semantic_hidden]`."""
        # *** Higgs Audio v3 specific *** `resample_audio` (torchaudio's algorithm) instead of torchaudio itself; the
        # rest as transformers' `HiggsAudioV2TokenizerModel._extract_semantic_features`.
        input_values = resample_audio(input_values, self.config.sample_rate, self.config.semantic_sample_rate)
        # *** end Higgs Audio v3 specific ***
        input_values = input_values[:, 0, :]  # [B, M] at 16 kHz
        half_hop = self.config.downsample_factor // 2  # 160: half a HuBERT hop on each side, as transformers does
        input_values = F.pad(input_values, (half_hop, half_hop))  # [B, M + 320]
        with torch.no_grad():
            hidden_states = self.semantic_model(input_values, output_hidden_states=True).hidden_states
        semantic_features = torch.stack(hidden_states, dim=1).mean(dim=1)  # [B, frames, semantic_hidden]
        return semantic_features[:, :: max(1, self.config.semantic_downsample_factor), :]  # [B, T, semantic_hidden]

    @torch.no_grad()
    def encode(
        self, input_values: torch.Tensor, bandwidth: float | None = None, return_dict: bool | None = False
    ) -> torch.LongTensor | XcodecEncoderOutput:
        """Mono float audio `[B, 1, N]` at 24 kHz, `N >= hop_length` -> codes `[B, num_quantizers, T]`, each in
        0..1023. The audio is cast to the codec's dtype; `bandwidth` (one of
        `config.target_bandwidths`, default the highest) and `return_dict` are those of `XcodecModel.encode`."""
        return super().encode(input_values.to(self.fc.weight.dtype), bandwidth=bandwidth, return_dict=return_dict)

    def decode(
        self, audio_codes: torch.LongTensor, return_dict: bool | None = False
    ) -> torch.Tensor | XcodecDecoderOutput:
        """Integer codes `[B, Q, T]` (`Q <= num_quantizers`, each in 0..codebook_size - 1) -> audio
        `[B, 1, T * hop_length]`. `return_dict` is that of `XcodecModel.decode`."""
        graph = self.decode_graph  # read once: another thread may drop it
        if graph is not None and return_dict is False and audio_codes.shape[1] == self.config.num_quantizers:
            return graph(audio_codes.long())
        return super().decode(audio_codes.long(), return_dict=return_dict)

    # ------------------------------------------------------------------ frames <-> waveforms (the model's one path)
    @torch.no_grad()
    def decode_frames(
        self, codes: torch.LongTensor, code_lengths: torch.LongTensor | list[int] | None = None, alone: bool = False
    ) -> list[torch.FloatTensor]:
        """Raw codes `[batch, frames, num_quantizers]` (frame-major, as `rows_to_codes` gives them) -> one 1-D float32
        waveform per sequence, `code_lengths[i] * hop_length` samples, on the codes' device.

        Each sequence is decoded at its own length (the decoder's convolutions are not causal, so padding would change
        its last samples); sequences of equal length are decoded together in one call. So a waveform equals its
        sequence decoded alone up to float rounding (a batched convolution may sum in another order), and the decode's
        memory grows with the number of equal-length sequences. With `alone`, each sequence is decoded by itself
        (`generate(batch_invariant=True)`): its waveform does not depend on the batch.
        """
        lengths = [codes.shape[1]] * codes.shape[0] if code_lengths is None else [int(n) for n in code_lengths]
        device = self.fc.weight.device
        waveforms: list[torch.FloatTensor | None] = [None] * len(lengths)
        groups = [[i] for i in range(len(lengths))] if alone else [
            [i for i, n in enumerate(lengths) if n == num_frames] for num_frames in sorted(set(lengths))]
        for group in groups:
            num_frames = lengths[group[0]]
            if num_frames == 0:
                audio = codes.new_zeros(len(group), 0, dtype=torch.float32)
            else:
                frames = codes[group, :num_frames].transpose(1, 2).to(device)  # [G, Q, T]
                audio = self.decode(frames)[:, 0].to(device=codes.device, dtype=torch.float32)  # [G, T * hop]
            for row, i in enumerate(group):
                waveforms[i] = audio[row]
        return waveforms

    @torch.no_grad()
    def encode_waveform(self, waveform: torch.FloatTensor) -> torch.LongTensor:
        """One mono waveform `[samples]` at the codec's rate -> its raw codes `[frames, num_quantizers]` (frame-major,
        on the CPU), the layout of a voice and of `apply_delay_pattern`."""
        codes = self.encode(waveform.to(self.fc.weight.device)[None, None])  # [1, Q, T]
        return codes[0].T.to("cpu")  # [T, Q]


def build_codec_config(codec_config: dict) -> HiggsAudioV2TokenizerConfig:
    """A `HiggsAudioV2TokenizerConfig` from a complete dict (`configuration_higgs_v3.codec_config_problems`), never
    from the class defaults. transformers 5.5 (`sub_configs` + `CONFIG_MAPPING`) and 5.24 (`sub_configs_defaults`) both
    build the sub-configs from dicts that carry a `model_type`; the dict is deep-copied (5.5 writes into them)."""
    config_dict = copy.deepcopy(codec_config)
    config_dict["acoustic_model_config"].setdefault("model_type", "dac")
    config_dict["semantic_model_config"].setdefault("model_type", "hubert")
    return HiggsAudioV2TokenizerConfig(**config_dict)


# *** Higgs v3 specific: the codec as one unit of a device map. It runs outside the model's `forward`, on the device
# of its own entry. accelerate treats a "cpu" or "disk" entry next to an accelerator as *offloaded* (meta weights,
# copied to the accelerator by hooks around each `forward`), but the point of the codec's own entry is to run it
# there: so its hooks are removed and its weights put back on the device of its entry (a "disk" entry: the CPU). ***
def codec_device_map(device_map, top_level_modules: tuple[str, ...]):
    """`from_pretrained`'s `device_map` with the codec as one unit: a dict that splits it is refused, and
    `{"": "cuda:0", "codec": "cpu"}` -> `{"model": "cuda:0", ..., "codec": "cpu"}`, the root entry given to each of
    `top_level_modules` without an entry (accelerate would place the codec on the root's device first, which fails
    when it is offloaded to the disk). Other maps (strings, deeper entries like `"model.layers.3"`) come back as given.
    """
    if not isinstance(device_map, dict):
        return device_map
    parts = sorted(key for key in device_map if key.startswith("codec."))
    if parts:
        raise ValueError(
            f"The device map splits the codec over several entries ({parts}); the codec is one unit: give it one "
            'entry, e.g. device_map={"": "cuda:0", "codec": "cpu"}.'
        )
    others = {key: value for key, value in device_map.items() if key}
    if "" not in device_map or not others or any("." in key for key in others):
        return device_map
    return {**{name: device_map[""] for name in top_level_modules if name not in others}, **others}


def place_codec(model) -> None:
    """Make `model.codec` run on the device its `model.hf_device_map` entry names, as above; nothing to do without a
    device map. `from_pretrained` calls it."""
    device_map = getattr(model, "hf_device_map", None) or {}
    owner = "codec" if "codec" in device_map else ""
    if model.codec is None or owner not in device_map:
        return
    target = device_map[owner]
    device = torch.device("cpu" if target in ("cpu", "disk") else target)
    hooked = [(module, module._hf_hook) for module in model.codec.modules() if hasattr(module, "_hf_hook")]
    if hooked:
        from accelerate.hooks import remove_hook_from_module
        from accelerate.utils import set_module_tensor_to_device

        remove_hook_from_module(model.codec, recurse=True)  # "cpu" offload: the weights come back to the CPU
        for module, hook in hooked:  # "disk" offload: still meta; read them from the offload folder
            weights = hook.weights_map if getattr(hook, "offload", False) and hook.weights_map is not None else {}
            for name, tensor in [*module.named_parameters(recurse=hook.place_submodules),
                                 *module.named_buffers(recurse=hook.place_submodules)]:
                if tensor.device.type == "meta" and name in weights:
                    set_module_tensor_to_device(module, name, device, value=weights[name])
    meta = [name for name, tensor in model.codec.state_dict().items() if tensor.device.type == "meta"]
    if meta:
        raise ValueError(
            f"The codec has weights on the meta device ({meta[:3]}...) under device map entry {owner!r}: {target!r} "
            "(offloaded without its weights); give the codec its own entry on a device or the CPU, e.g. "
            'device_map={"": "cuda:0", "codec": "cpu"}.'
        )
    model.codec.to(device)  # buffers an offload hook had put on the accelerator, too
    if target == "disk":
        logger.warning_once(
            "The device map put the codec on the disk; it runs on the CPU instead (its weights are loaded there): "
            "it runs outside the model's forward, so it is not streamed from the disk."
        )
        if owner == "codec":
            model.hf_device_map = {**device_map, "codec": "cpu"}


# *** end Higgs v3 specific ***


__all__ = [
    "HiggsAudioV3Codec", "HiggsAudioV3ResidualVectorQuantization", "HiggsAudioV3VectorQuantization",
    "RESAMPLE_LOWPASS_FILTER_WIDTH", "RESAMPLE_ROLLOFF", "build_codec_config", "codec_device_map", "place_codec",
    "resample_audio", "resample_kernel", "resampled_length",
]
