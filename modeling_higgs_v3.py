# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Higgs Audio v3 TTS: transformers' `Qwen3Model` plus a fused codebook embedding, a tied audio head and the codec.

What is ours is the audio delta: the fused embedding of an 8-code row (one lookup with per-codebook offsets, summed),
the placeholder substitution for reference rows, the tied audio head and the per-codebook loss. The model also owns
the way between codes and audio (as CSM does): `encode_reference` (a clip to a voice) and `decode_audio` (generated
rows to waveforms) both run its codec. The delay-pattern generation lives in `generation_higgs_v3.py`, the prompt
building in `processing_higgs_v3.py`, the streamers in `streaming_higgs_v3.py`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel, Qwen3Model
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.utils import logging

from .audio_io_higgs_v3 import TARGET_ADVICE, AudioLike, HiggsAudioV3Voice, prepare_reference_waveform
from .codec_higgs_v3 import HiggsAudioV3Codec
from .compat_higgs_v3 import CACHE_KWARG, pop_cache, prepare_generation_config, replicated
from .configuration_higgs_v3 import HiggsAudioV3Config
from .delay_higgs_v3 import HiggsAudioV3AudioSpec  # noqa: F401 (imported by configuration; see below)
from .generation_higgs_v3 import MAX_NEW_TOKENS, HiggsAudioV3GenerationMixin, default_generation_config
from .sampling_higgs_v3 import HiggsAudioV3SeededSampler  # noqa: F401 (imported by generation; see below)
from .streaming_higgs_v3 import HiggsAudioV3AudioStreamer


# transformers 5.5 copies only the *direct* relative imports of this file when it loads a local folder with
# `trust_remote_code=True`, so every module of the chain is imported here, directly.


logger = logging.get_logger(__name__)


def _codebook_rows(logits: torch.Tensor, num_codebooks: int, codebook_size: int) -> torch.Tensor:
    """Audio head output `[B, L, C * V]` in the layout of transformers' stock decoding loop, which samples one codebook
    per row: `[B * C, L, V]`, row `b * C + c`. A decode step (`L == 1`) is a view, no copy."""
    if logits.shape[1] == 1:
        return logits.view(-1, 1, codebook_size)
    return logits.unflatten(-1, (num_codebooks, codebook_size)).transpose(1, 2).flatten(0, 1)


@dataclass
class HiggsAudioV3OutputWithPast(CausalLMOutputWithPast):
    r"""
    Output of [`HiggsAudioV3ForConditionalGeneration.forward`]. `logits` are the **audio** logits of shape
    `[batch, positions, num_codebooks, codebook_size]`; `loss` is the mean of the per-codebook cross-entropies.

    text_logits (`torch.FloatTensor` of shape `[batch, positions, vocab_size]`, *optional*):
        Text LM head logits, only when `return_text_logits=True`.
    audio_loss_per_codebook (`torch.FloatTensor` of shape `[num_codebooks]`, *optional*):
        Cross-entropy of each codebook (NaN for a codebook without any label), when `audio_labels` is given.
    """

    text_logits: torch.FloatTensor | None = None
    audio_loss_per_codebook: torch.FloatTensor | None = None


class HiggsAudioV3PreTrainedModel(PreTrainedModel):
    config_class = HiggsAudioV3Config
    config: HiggsAudioV3Config
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    # The decoder layers are the units `device_map="auto"` splits the backbone into; the codec is one unit (it runs
    # outside `forward`, through `encode_reference` / `decode_audio`, on the device of its own device-map entry).
    _no_split_modules = ["Qwen3DecoderLayer", "HiggsAudioV3Codec"]
    _skip_keys_device_placement = ["past_key_values", "cache"]
    _supports_flash_attn = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _can_compile_fullgraph = True
    _supports_attention_backend = True
    _keep_in_fp32_modules = ["codec"]
    _keep_in_fp32_modules_strict = ["codec"]  # the codec runs in fp32 whatever the dtype (bf16 included)
    # The loss is a mean over labelled rows per codebook: transformers' Trainer must not pass `num_items_in_batch`
    # (it would reach the backbone) nor skip its own division by the gradient accumulation steps.
    accepts_loss_kwargs = False


class HiggsAudioV3ForConditionalGeneration(HiggsAudioV3PreTrainedModel, HiggsAudioV3GenerationMixin):
    r"""
    Higgs Audio v3 text-to-speech model.

    Modules: `model` (transformers' `Qwen3Model`), `audio_embed` (the fused codebook embedding, `[num_codebooks *
    codebook_size, hidden]`), `audio_head` (tied to `audio_embed`), `lm_head` (text head, tied to the token embedding,
    run only when asked) and `codec` (the Higgs Audio v2 tokenizer; absent when `config.codec_config` is None). The
    codec is float32 always: loaded so whatever `dtype`, and kept so by `model.to(torch.bfloat16)`, `half()` and
    `bfloat16()`, which cast the language model only (the codec moves with the model to its device).

    Example:

    ```python
    >>> import torch
    >>> from higgs_v3 import HiggsAudioV3Config, HiggsAudioV3ForConditionalGeneration
    >>> config = HiggsAudioV3Config(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    ...                             num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    >>> model = HiggsAudioV3ForConditionalGeneration(config).eval()
    >>> ids = torch.tensor([[151667, 151672, 9707, 151670]])
    >>> model(input_ids=ids).logits.shape
    torch.Size([1, 4, 8, 1026])
    ```
    """

    _tied_weights_keys = {
        "lm_head.weight": "model.embed_tokens.weight",
        "audio_head.weight": "audio_embed.weight",
    }
    # *** Higgs v3 tensor parallel plan: the backbone's comes from Qwen3 (`config.base_model_tp_plan`, the token
    # embedding vocab-parallel); the text head is sharded as Qwen3ForCausalLM's (tied to that embedding, so Shard(0)
    # like it) and gathered; the fused audio embedding and the audio head (one tied [8208, hidden] tensor, 42 MB in
    # bf16) stay whole on every rank: the decode step looks rows up with `F.embedding` on the weight, which a sharded
    # weight would break, and the codec is not in the plan (replicated). transformers 5.5 applies the backbone's layer
    # rules only (its `post_init` drops a class plan): the embeddings and heads stay whole there. ***
    _tp_plan = {"lm_head": "colwise_gather_output", **replicated("audio_embed", "audio_head")}
    # *** end Higgs v3 tensor parallel plan ***
    _prepare_generation_config = prepare_generation_config  # a pipeline's defaults rank below ours (compat_higgs_v3)

    def __init__(self, config: HiggsAudioV3Config):
        super().__init__(config)
        self.model = Qwen3Model(config)
        self.audio_embed = nn.Embedding(config.audio_vocab_size, config.hidden_size)
        self.audio_head = nn.Linear(config.hidden_size, config.audio_vocab_size, bias=False)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        # Plain ints for the per-step path (config attribute reads go through two `__getattribute__` layers).
        self.num_codebooks = config.num_codebooks
        self.codebook_size = config.codebook_size
        self.codec = None
        if config.codec_config is not None:
            self.codec = HiggsAudioV3Codec.from_codec_config(config.codec_config)  # frozen by `post_init`
        self.post_init()
        self.generation_config = default_generation_config(config)

    # *** Higgs v3 specific: the codec is frozen however the model was made. transformers (5.24) builds the parameters
    # of a loaded model anew, after `__init__` froze them, so the freeze is repeated in `post_init` and once
    # `from_pretrained` is done (the remote-code copy and `AutoModel` go through the same classmethod). ***
    def post_init(self) -> None:
        super().post_init()
        self.freeze_codec()

    def freeze_codec(self) -> None:
        """`requires_grad=False` on every codec parameter (a fixed tokenizer: no optimizer may see its weights)."""
        if getattr(self, "codec", None) is not None:
            self.codec.requires_grad_(False)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`, then `place_codec_by_device_map` and `freeze_codec` (also with
        `output_loading_info=True`)."""
        device_map = kwargs.get("device_map")
        if isinstance(device_map, dict):  # *** Higgs v3 specific: see `place_codec_by_device_map` ***
            cls._check_codec_entry(device_map)
            if "" in device_map and len(device_map) > 1:
                kwargs["device_map"] = cls._expand_root_entry(device_map)
        loaded = super().from_pretrained(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        model.place_codec_by_device_map()
        model.freeze_codec()
        return loaded
    # *** end Higgs v3 specific ***

    # *** Higgs v3 specific: the codec on its own device-map entry. accelerate treats a "cpu" or "disk" entry next to
    # an accelerator as *offloaded*: the weights are replaced by meta tensors and copied to the accelerator by hooks
    # around each `forward`. The codec is never called through `forward` (its `encode` / `decode` are), and the point
    # of giving it its own entry is to run it there, off the accelerator; so its hooks are removed and its weights put
    # back on the device of its entry (a "disk" entry: on the CPU). ***
    _top_level_modules = ("model", "audio_embed", "audio_head", "lm_head", "codec")  # the children `__init__` makes

    @staticmethod
    def _check_codec_entry(device_map: dict) -> None:
        parts = sorted(key for key in device_map if key.startswith("codec."))
        if parts:
            raise ValueError(
                f"The device map splits the codec over several entries ({parts}); the codec is one unit: give it one "
                'entry, e.g. device_map={"": "cuda:0", "codec": "cpu"}.'
            )

    @classmethod
    def _expand_root_entry(cls, device_map: dict) -> dict:
        """`{"": "cuda:0", "codec": "cpu"}` -> `{"model": "cuda:0", ..., "lm_head": "cuda:0", "codec": "cpu"}`: the
        root entry given to each top-level module without an entry of its own. accelerate places all of a root entry's
        submodules on its device first (and only then offloads the other entries), so a root entry would put the codec
        on the accelerator while loading, and fails when the codec is offloaded to the disk. A map with deeper entries
        (`"model.layers.3"`) is returned as given."""
        others = {key: value for key, value in device_map.items() if key}
        if any("." in key for key in others):
            return device_map
        return {**{name: device_map[""] for name in cls._top_level_modules if name not in others}, **others}

    def place_codec_by_device_map(self) -> None:
        """Make the codec run on the device its `hf_device_map` entry names (`"cpu"` and `"disk"`: the CPU): weights
        offloaded by accelerate are loaded there and the codec's hooks are removed. Nothing to do without a device map
        over several devices (`from_pretrained` calls it; calling it again changes nothing).

        ```python
        >>> placement = {"": "cuda:0", "codec": "cpu"}
        >>> model = HiggsAudioV3ForConditionalGeneration.from_pretrained(repo, device_map=placement)  # doctest: +SKIP
        >>> model.codec.device, model.device  # doctest: +SKIP
        (device(type='cpu'), device(type='cuda', index=0))
        ```
        """
        device_map = getattr(self, "hf_device_map", None)
        if getattr(self, "codec", None) is None or not device_map:
            return
        self._check_codec_entry(device_map)
        owner = "codec" if "codec" in device_map else ""
        if owner not in device_map:
            return
        target = device_map[owner]
        device = torch.device("cpu" if target in ("cpu", "disk") else target)
        hooked = [module for module in self.codec.modules() if hasattr(module, "_hf_hook")]
        if hooked:
            from accelerate.hooks import remove_hook_from_module
            from accelerate.utils import set_module_tensor_to_device

            offloaded = [(m, m._hf_hook) for m in hooked if getattr(m._hf_hook, "offload", False)]
            remove_hook_from_module(self.codec, recurse=True)  # "cpu" offload: the weights come back to the CPU
            for module, hook in offloaded:  # "disk" offload: still meta; read them from the offload folder
                for name, tensor in [*module.named_parameters(recurse=hook.place_submodules),
                                     *module.named_buffers(recurse=hook.place_submodules)]:
                    if tensor.device.type == "meta":
                        if hook.weights_map is None or name not in hook.weights_map:
                            raise ValueError(
                                f"The codec's tensor {name!r} was offloaded without its weights; give the codec its "
                                'own device-map entry on a device or "cpu".'
                            )
                        set_module_tensor_to_device(module, name, device, value=hook.weights_map[name])
        meta = [name for name, tensor in self.codec.state_dict().items() if tensor.device.type == "meta"]
        if meta:
            raise ValueError(
                f"The codec has weights on the meta device ({meta[:3]}...) under device map entry {owner!r}: "
                f"{target!r}; give the codec its own entry, e.g. device_map={{\"\": \"cuda:0\", \"codec\": \"cpu\"}}."
            )
        self.codec.to(device)  # buffers an offload hook had put on the accelerator, too
        if target == "disk":
            logger.warning_once(
                "The device map put the codec on the disk; it runs on the CPU instead (its weights are loaded there): "
                "it runs outside the model's forward, so it is not streamed from the disk."
            )
            if owner == "codec":
                self.hf_device_map = {**device_map, "codec": "cpu"}

    @property
    def _codec_device(self) -> torch.device:
        """The device the codec runs on (its own `device_map` entry may differ from the backbone's `model.device`):
        `encode_reference` / `encode_target` move waveforms there and return codes on the CPU, `decode_audio`,
        `generate` and the streamer move codes there and return waveforms on the codes' device / the CPU."""
        return self._require_codec("Finding the codec's device").fc.weight.device
    # *** end Higgs v3 specific ***

    # ------------------------------------------------------------------ embeddings
    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def embed_audio_rows(self, rows: torch.LongTensor) -> torch.Tensor:
        """Fused embedding of code rows: `[..., num_codebooks]` -> `[..., hidden]`.

        Row `f` maps to `sum_c audio_embed.weight[c * codebook_size + f[c]]` (one lookup, per-codebook offsets).
        """
        offsets = torch.arange(0, self.num_codebooks * self.codebook_size, self.codebook_size, device=rows.device)
        summed = self._embed_fused_rows((rows + offsets).reshape(-1, rows.shape[-1]))  # [N, H]
        return summed.reshape(*rows.shape[:-1], summed.shape[-1])

    def _embed_fused_rows(self, fused: torch.LongTensor) -> torch.Tensor:
        """`[N, num_codebooks]` rows of the fused embedding (codes already offset by `c * codebook_size`) -> their sum
        per frame, `[N, hidden]`. Generation's decode step calls it with offsets computed once per call.

        The sum is taken over the looked-up rows in one reduction, so in bf16 / fp16 it is rounded once, as the
        official server computes it (`F.embedding(...).sum(-2)`); `F.embedding_bag` would round while it adds. The
        lookup is the module's call (`F.embedding` on its weight), so a `device_map` that offloads `audio_embed` to the
        CPU or the disk works: accelerate's hook brings the weight for the call."""
        return self.audio_embed(fused).sum(-2)  # [N, C, H] -> [N, H]

    def audio_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Audio head: `[batch, positions, hidden]` -> `[batch, positions, num_codebooks, codebook_size]` (codebook-major)."""
        return self.audio_head(hidden_states).unflatten(-1, (self.num_codebooks, self.codebook_size))

    # ------------------------------------------------------------------ codes and audio (the codec's one home)
    def _apply(self, fn, recurse: bool = True):
        # *** Higgs v3 specific: the codec stays float32 whatever `to(dtype)`, `half()`, `bfloat16()` ask (its
        # transposed convolutions are unstable in half precision); it still moves with the model (`to(device)`,
        # `cuda()`) and takes every other change. A cast of a codec tensor is discarded before it is kept, so the fp32
        # weights are never rounded. ***
        codec = self._modules.get("codec")
        if codec is None or not recurse:
            return super()._apply(fn, recurse)

        def keep_dtype(tensor: torch.Tensor) -> torch.Tensor:
            applied = fn(tensor)
            if tensor.is_floating_point() and applied.dtype != tensor.dtype:
                return tensor.to(device=applied.device)
            return applied

        self._modules["codec"] = None  # the language model first, without the codec (order of modules kept)
        try:
            super()._apply(fn, recurse)
        finally:
            self._modules["codec"] = codec
        codec._apply(keep_dtype)
        return self
        # *** end Higgs v3 specific ***

    def _require_codec(self, purpose: str) -> HiggsAudioV3Codec:
        if self.codec is None:
            raise ValueError(
                f"{purpose} needs the codec, and this model has none (config.codec_config is None): load a converted "
                "checkpoint that includes it."
            )
        return self.codec

    def encode_reference(
        self, audio: AudioLike, text: str | None = None, sampling_rate: int | None = None
    ) -> HiggsAudioV3Voice:
        r"""Encode a reference clip once into a reusable `HiggsAudioV3Voice` (raw codes `[frames, num_codebooks]` and
        the transcript, which the processor checks when the voice is used).

        `audio` is a path, an http(s) URL or an array (`[samples]`, `[channels, samples]` or `[samples, channels]`;
        `sampling_rate` required for arrays): mixed to mono, resampled to the codec's rate, padded to at least 1 s;
        clips over 100 s, empty or non-finite ones are refused (see `audio_io_higgs_v3.prepare_reference_waveform`).

        ```python
        >>> voice = model.encode_reference("me.wav", text="What I say in it.")  # doctest: +SKIP
        >>> voice.save("me.safetensors")  # doctest: +SKIP
        ```
        """
        codec = self._require_codec("Encoding reference audio")
        spec = self.config.audio_spec
        waveform = prepare_reference_waveform(audio, sampling_rate, target_sampling_rate=spec.sampling_rate)  # [N]
        codes = codec.encode_waveform(waveform)  # [T, C]
        return HiggsAudioV3Voice(codes=codes, text=text, sampling_rate=spec.sampling_rate, frame_rate=spec.frame_rate)

    def merge_reference_clips(
        self,
        audio_input_ids: torch.LongTensor | None,
        reference_audio: torch.Tensor,
        reference_audio_lengths: torch.LongTensor | list[int] | None = None,
        audio_input_ids_mask: torch.Tensor | None = None,
    ) -> torch.LongTensor:
        r"""The reference rows with the processor's clips encoded in (as CSM's `_merge_input_ids_with_input_values`):
        each clip is encoded alone at its own length with the codec (exactly `encode_reference(clip).codes`), delayed,
        and written into the rows the processor marked for it, in placeholder order.

        Args:
            audio_input_ids: `[N, num_codebooks]` (or `[batch, rows, num_codebooks]` with `audio_input_ids_mask`), the
                clips' rows holding `config.audio_placeholder_id`, clip after clip (`HiggsAudioV3Processor` lays them
                out; batches of its outputs concatenated, as the pipeline collates them, keep that order).
            reference_audio: `[S_0 + ... + S_{K-1}]` float32, the K clips' waveforms at `config.sampling_rate` one
                after another (packed: batches concatenate).
            reference_audio_lengths: `[K]` samples `S_k` of each clip (None: one clip).

        Returns:
            `[N, num_codebooks]` rows on `audio_input_ids`' device. `generate` calls it once, before its loop.
        """
        codec = self._require_codec("Encoding reference clips")
        spec = self.config.audio_spec
        if audio_input_ids is None:
            raise ValueError(
                "reference_audio was given without audio_input_ids; pass the processor's whole output "
                "(model.generate(**inputs)): its audio_input_ids hold the rows the clips fill."
            )
        rows = self._flat_reference_rows(audio_input_ids, audio_input_ids_mask)  # [N, C]
        audio = torch.as_tensor(reference_audio)  # [S_0 + ... + S_{K-1}]
        if audio.dim() != 1 or audio.numel() == 0:
            raise ValueError(
                "reference_audio must be the clips' waveforms one after another, [total samples] (as the processor "
                f"returns it), got shape {tuple(audio.shape)}."
            )
        if audio.dtype not in (torch.float32, torch.float64):
            raise ValueError(
                f"reference_audio has dtype {audio.dtype}; the codec encodes float32 waveforms (a lower precision copy "
                "changes the clip's codes). Pass the processor's output as it is (its .to() keeps reference_audio "
                "float32)."
            )
        lengths = [audio.numel()] if reference_audio_lengths is None else torch.as_tensor(
            reference_audio_lengths).flatten().tolist()  # [K]
        if not all(isinstance(n, int) and n > 0 for n in lengths) or sum(lengths) != audio.numel():
            raise ValueError(
                f"reference_audio_lengths {lengths} must be positive integers and add up to the {audio.numel()} "
                "samples of reference_audio (the clips one after another)."
            )
        if not torch.compiler.is_compiling() and not bool(torch.isfinite(audio).all()):  # one host read per call
            raise ValueError(
                "reference_audio has NaN or infinite samples; pass the processor's output (it refuses such clips) or "
                "clean waveforms."
            )
        num_clips = len(lengths)
        delayed = [spec.delay(codec.encode_waveform(clip)) for clip in audio.split(lengths)]  # K x [T_k + 7, 8]
        positions = torch.nonzero(rows[:, 0] == self.config.audio_placeholder_id).flatten().cpu()  # [M] one host read
        expected = [d.shape[0] for d in delayed]
        ends = torch.tensor(expected).cumsum(0)  # clip k takes marked rows ends[k] - expected[k] .. ends[k] - 1
        contiguous = positions.numel() == int(ends[-1]) and all(  # each clip's rows are one run of its prompt's
            int(positions[end - 1] - positions[end - n]) == n - 1 for end, n in zip(ends.tolist(), expected)
        )
        if not contiguous:
            raise ValueError(
                f"audio_input_ids marks {positions.numel()} rows for the {num_clips} reference clip(s), but this "
                f"model's codec encodes them to {int(ends[-1])} rows ({expected}, clip by clip): the processor did not "
                "count the frames of this model's codec. Use the processor saved with this model, or "
                "HiggsAudioV3Processor.from_model_config(tokenizer, model.config)."
            )
        positions = positions.to(rows.device)
        rows = rows.clone()
        rows[positions] = torch.cat(delayed).to(device=rows.device, dtype=rows.dtype)
        return rows

    def encode_target(
        self, audio: AudioLike, sampling_rate: int | None = None, max_seconds: float | None = None
    ) -> torch.LongTensor:
        r"""Encode a training target clip (the speech the model should learn to say) into raw codes
        `[frames, num_codebooks]`, for `processor(text=..., audio_target=codes)`.

        `audio` is a path or an array, as for `encode_reference`, but nothing is padded: the codes are the clip's own.
        Refused (`ValueError`): clips shorter than `num_codebooks` frames (generation ends speech only after its delay
        window) and clips longer than `max_seconds` (default: the longest speech one `generate` call gives by default,
        `MAX_NEW_TOKENS` rows, about 81.6 s).

        ```python
        >>> codes = model.encode_target("line_001.wav")  # doctest: +SKIP
        >>> batch = processor(text="The line's transcript.", audio_target=codes)  # doctest: +SKIP
        >>> model(**batch).loss  # doctest: +SKIP
        ```
        """
        codec = self._require_codec("Encoding target audio")
        spec = self.config.audio_spec
        if max_seconds is None:
            max_seconds = spec.seconds(spec.frames(MAX_NEW_TOKENS))
        waveform = prepare_reference_waveform(
            audio, sampling_rate, target_sampling_rate=spec.sampling_rate, min_seconds=0.0, max_seconds=max_seconds,
            too_long_advice=TARGET_ADVICE,
        )  # [N]
        minimum = spec.num_codebooks * spec.samples_per_frame
        if waveform.shape[0] < minimum:
            raise ValueError(
                f"Target audio is {waveform.shape[0] / spec.sampling_rate:.3f} s long; a training target needs at least "
                f"{spec.num_codebooks} codec frames ({spec.seconds(spec.num_codebooks):g} s): generation reads the end of "
                "speech only after its delay window."
            )
        return codec.encode_waveform(waveform)  # [T, C]

    def decode_audio(
        self, sequences: torch.LongTensor, lengths: torch.LongTensor | None = None
    ) -> list[torch.FloatTensor]:
        """Generated delayed rows `[batch, rows, num_codebooks]` (`generate`'s `sequences`) -> one 1-D float32
        waveform per sequence at `config.sampling_rate`. `lengths` `[batch]`: valid rows (None: each sequence ends
        where its codebook 0 ended speech, see `delay_higgs_v3.rows_to_codes`)."""
        codec = self._require_codec("Decoding codes to audio")
        if sequences.dim() != 3 or sequences.shape[-1] != self.num_codebooks:
            raise ValueError(
                f"sequences must be delayed rows [batch, rows, {self.num_codebooks}], got shape {tuple(sequences.shape)}."
            )
        self._check_codes(sequences, "sequences")
        codes, code_lengths = self.config.audio_spec.rows_to_codes(sequences, lengths)  # [B, T, C], [B]
        if not bool(code_lengths.all()):
            empty = torch.nonzero(code_lengths == 0).flatten().tolist()
            logger.warning(
                f"Sequence(s) {empty} have no complete audio frame (fewer than {self.num_codebooks} valid rows): their "
                "waveforms are empty."
            )
        return codec.decode_frames(codes, code_lengths)

    def audio_streamer(self, **kwargs) -> HiggsAudioV3AudioStreamer:
        """A `HiggsAudioV3AudioStreamer` for this model (pass it to `generate(..., streamer=...)` and iterate over
        the waveform chunks); keyword arguments are the streamer's."""
        self._require_codec("Streaming audio")
        return HiggsAudioV3AudioStreamer(self, **kwargs)

    # ------------------------------------------------------------------ input checks (prefill only)
    def _check_codes(self, codes: torch.Tensor, name: str) -> None:
        if codes.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise ValueError(f"{name} must hold integer codes, got dtype {codes.dtype}.")
        if codes.shape[-1] != self.config.num_codebooks:
            raise ValueError(
                f"{name} must have {self.config.num_codebooks} codebooks in its last dimension, got shape "
                f"{tuple(codes.shape)}."
            )
        if codes.numel() and not torch.compiler.is_compiling():
            low, high = int(codes.min()), int(codes.max())
            if low < 0 or high >= self.config.codebook_size:
                raise ValueError(
                    f"{name} contains codes from {low} to {high}; codes must lie in 0..{self.config.codebook_size - 1} "
                    f"(codec codes 0..{self.config.audio_boc_token_id - 1}, BOC={self.config.audio_boc_token_id}, "
                    f"EOC={self.config.audio_eoc_token_id})."
                )

    def _flat_reference_rows(
        self, audio_input_ids: torch.LongTensor, audio_input_ids_mask: torch.Tensor | None
    ) -> torch.LongTensor:
        """Reference rows as `[num_rows, num_codebooks]`, in placeholder order."""
        if audio_input_ids.dim() == 2:
            return audio_input_ids
        if audio_input_ids.dim() != 3:
            raise ValueError(
                "audio_input_ids must be [num_rows, num_codebooks] (rows of all placeholders in order) or "
                f"[batch, rows, num_codebooks] with audio_input_ids_mask; got shape {tuple(audio_input_ids.shape)}."
            )
        if audio_input_ids_mask is None:
            return audio_input_ids.flatten(0, 1)
        if audio_input_ids_mask.shape != audio_input_ids.shape[:2]:
            raise ValueError(
                f"audio_input_ids_mask has shape {tuple(audio_input_ids_mask.shape)}, expected "
                f"{tuple(audio_input_ids.shape[:2])} to match audio_input_ids."
            )
        return audio_input_ids[audio_input_ids_mask.bool()]

    def build_inputs_embeds(
        self,
        input_ids: torch.LongTensor,
        audio_input_ids: torch.LongTensor | None = None,
        audio_input_ids_mask: torch.Tensor | None = None,
        check_inputs: bool = True,
    ) -> torch.Tensor:
        """Token embeddings of `input_ids` with every placeholder position **replaced** by its reference row's fused
        embedding. `input_ids`: `[batch, length]`; returns `[batch, length, hidden]`. `check_inputs=False` skips the
        checks of the placeholders and codes (they read values on the host): generation's steps without a cache embed
        the prompt again, which its prefill already checked."""
        placeholder = input_ids == self.config.audio_placeholder_id  # [B, L]
        token_ids = input_ids.masked_fill(placeholder, 0)
        inputs_embeds = self.model.embed_tokens(token_ids)  # [B, L, H]
        checking = check_inputs and not torch.compiler.is_compiling()
        if audio_input_ids is None:
            if checking and bool(placeholder.any()):
                raise ValueError(
                    f"input_ids has {int(placeholder.sum())} reference placeholder positions "
                    f"(id {self.config.audio_placeholder_id}) but no audio_input_ids were given."
                )
            return inputs_embeds
        rows = self._flat_reference_rows(audio_input_ids, audio_input_ids_mask)  # [N, C]
        if checking:
            self._check_codes(rows, "audio_input_ids")
            num_placeholders = int(placeholder.sum())
            if num_placeholders != rows.shape[0]:
                raise ValueError(
                    f"input_ids has {num_placeholders} reference placeholder positions (id "
                    f"{self.config.audio_placeholder_id}) but audio_input_ids has {rows.shape[0]} rows; each "
                    "placeholder takes exactly one delayed reference row."
                )
        audio_embeds = self.embed_audio_rows(rows).to(inputs_embeds.dtype)  # [N, H]
        return inputs_embeds.masked_scatter(placeholder[..., None], audio_embeds)

    def _embed_inputs(
        self,
        input_ids: torch.LongTensor | None,
        audio_input_ids: torch.LongTensor | None,
        audio_input_ids_mask: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
    ) -> torch.Tensor:
        """The backbone's input embeddings `[batch, length, hidden]` from whichever inputs `forward` was given."""
        if inputs_embeds is not None:
            if input_ids is not None:
                raise ValueError("Pass either input_ids or inputs_embeds, not both.")
            return inputs_embeds
        if input_ids is not None:
            return self.build_inputs_embeds(input_ids, audio_input_ids, audio_input_ids_mask)
        if audio_input_ids is None:
            raise ValueError("Pass input_ids, inputs_embeds, or audio_input_ids (rows to embed).")
        if audio_input_ids.dim() != 3:
            raise ValueError(
                "Without input_ids, audio_input_ids must be [batch, length, num_codebooks] rows to embed; "
                f"got shape {tuple(audio_input_ids.shape)}."
            )
        self._check_codes(audio_input_ids, "audio_input_ids")
        return self.embed_audio_rows(audio_input_ids).to(self.model.embed_tokens.weight.dtype)

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        audio_input_ids: torch.LongTensor | None = None,
        audio_input_ids_mask: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache=None,
        past_key_values=None,
        inputs_embeds: torch.Tensor | None = None,
        audio_labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        return_text_logits: bool = False,
        **kwargs,
    ) -> HiggsAudioV3OutputWithPast:
        r"""
        Args:
            input_ids (`[batch, length]`): prompt ids; positions equal to `config.audio_placeholder_id` take the
                delayed reference rows of `audio_input_ids` in order.
            audio_input_ids: delayed reference rows, either `[num_rows, num_codebooks]` (all placeholders of the
                batch, row-major) or `[batch, rows, num_codebooks]` with `audio_input_ids_mask` `[batch, rows]`
                marking the valid rows. Without `input_ids` and `inputs_embeds`, `[batch, length, num_codebooks]`
                rows are embedded directly (one audio position each), as in the decode steps of generation.
            reference_audio / reference_audio_lengths (in `kwargs`): reference clips as the processor returns them;
                encoded into their rows of `audio_input_ids` first (`merge_reference_clips`).
            cache / past_key_values: the KV cache (either name; transformers 5.5 uses the latter).
            inputs_embeds (`[batch, length, hidden]`): used as is instead of `input_ids`.
            audio_labels (`[batch, length, num_codebooks]`): the row each position is fed in teacher forcing
                (-100 where there is none, e.g. text). The logits at position `p` are scored against the labels at
                `p + 1`, as transformers' causal LMs shift `labels`.
            logits_to_keep: compute the heads on the last `n` positions only (0 = all), or on the given indices.
            return_text_logits: also compute the 151936-wide text head (never needed to generate speech).

        Returns:
            `HiggsAudioV3OutputWithPast` with `logits` `[batch, kept_positions, num_codebooks, codebook_size]`.
        """
        cache = cache if cache is not None else past_key_values
        if cache is None:
            cache = pop_cache(kwargs)
        kwargs.pop("return_dict", None)  # always a `HiggsAudioV3OutputWithPast`
        # *** Higgs v3 generation specific: set by `prepare_inputs_for_generation` only (see `_codebook_rows`) ***
        codebook_rows = kwargs.pop("_codebook_rows", False)
        # *** end Higgs v3 generation specific ***
        # *** reference clips (the processor's `reference_audio`), encoded here; `generate` does it once, before its loop
        reference_audio = kwargs.pop("reference_audio", None)
        reference_audio_lengths = kwargs.pop("reference_audio_lengths", None)
        if reference_audio is not None:
            audio_input_ids = self.merge_reference_clips(
                audio_input_ids, reference_audio, reference_audio_lengths, audio_input_ids_mask
            )
            audio_input_ids_mask = None
        # *** end reference clips ***
        inputs_embeds = self._embed_inputs(input_ids, audio_input_ids, audio_input_ids_mask, inputs_embeds)
        outputs = self.model(
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=use_cache,
            **{CACHE_KWARG: cache},
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state  # [B, L, H]
        slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        kept = hidden_states[:, slice_indices, :]  # [B, L', H]
        text_logits = self.lm_head(kept) if return_text_logits else None  # [B, L', vocab]
        loss = per_codebook = None
        if codebook_rows:  # generation: [B * C, L', V]
            logits = _codebook_rows(self.audio_head(kept), self.num_codebooks, self.codebook_size)
        else:
            logits = self.audio_logits(kept)  # [B, L', C, V]
            if audio_labels is not None:
                if logits.shape[1] != audio_labels.shape[1]:
                    raise ValueError(
                        f"audio_labels cover {audio_labels.shape[1]} positions but logits were computed for "
                        f"{logits.shape[1]}; use logits_to_keep=0 for training."
                    )
                loss, per_codebook = self.audio_loss(logits, audio_labels)

        return HiggsAudioV3OutputWithPast(
            loss=loss,
            logits=logits,
            text_logits=text_logits,
            audio_loss_per_codebook=per_codebook,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            **{CACHE_KWARG: getattr(outputs, CACHE_KWARG, None)},
        )

    def audio_loss(self, logits: torch.Tensor, audio_labels: torch.LongTensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Shifted per-codebook cross-entropy (ignore index -100). Returns (mean over codebooks, per codebook)."""
        shift_logits = logits[:, :-1].float()  # [B, L-1, C, V]: position p predicts the row at p + 1
        shift_labels = audio_labels[:, 1:].to(logits.device)  # [B, L-1, C]
        nll = F.cross_entropy(
            shift_logits.flatten(0, 2), shift_labels.flatten(), ignore_index=-100, reduction="none"
        ).view_as(shift_labels)  # [B, L-1, C]
        valid = (shift_labels != -100).float()
        counts = valid.sum(dim=(0, 1))  # [C]
        per_codebook = (nll * valid).sum(dim=(0, 1)) / counts  # NaN where a codebook has no label
        loss = per_codebook[counts > 0].mean()
        return loss, per_codebook


# *** Higgs v3 generation specific: transformers reads `inspect.signature(model.forward)` on every decode step of a
# remote-code model (to find a `cache_position` argument); a stored signature makes that a lookup instead of a parse
# of the whole argument list (tested to equal the parsed one). ***
HiggsAudioV3ForConditionalGeneration.forward.__signature__ = inspect.signature(HiggsAudioV3ForConditionalGeneration.forward)
# *** end Higgs v3 generation specific ***

# `save_pretrained` copies this file and its relative imports next to `config.json`; `auto_map` is written in full
# by the config (see `configuration_higgs_v3.AUTO_MAP`).
HiggsAudioV3Config.register_for_auto_class("AutoConfig")
HiggsAudioV3ForConditionalGeneration.register_for_auto_class("AutoModel")


__all__ = ["HiggsAudioV3PreTrainedModel", "HiggsAudioV3ForConditionalGeneration", "HiggsAudioV3OutputWithPast"]
