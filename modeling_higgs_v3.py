# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Higgs Audio v3 TTS: transformers' `Qwen3Model` plus a fused codebook embedding, a tied audio head and the codec.

What is ours is the audio delta: the fused embedding of an 8-code row, the placeholder substitution for reference
rows, the tied audio head, the per-codebook loss, and (as CSM) the thin way between codes and audio through the codec.
Generation lives in `generation_higgs_v3.py`, the codec and its placement in `codec_higgs_v3.py`.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel, Qwen3Model
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple, logging

from .audio_io_higgs_v3 import TARGET_ADVICE, AudioLike, HiggsAudioV3Voice, prepare_reference_waveform
from .codec_higgs_v3 import HiggsAudioV3Codec, codec_device_map, place_codec
from .compat_higgs_v3 import CACHE_KWARG, prepare_generation_config, replicated
from .configuration_higgs_v3 import HiggsAudioV3Config
from .delay_higgs_v3 import check_codes
from .generation_higgs_v3 import MAX_NEW_TOKENS, HiggsAudioV3GenerationMixin, default_generation_config
from .sampling_higgs_v3 import HiggsAudioV3SeededSampler  # noqa: F401 (transformers 5.5 copies direct imports only)
from .streaming_higgs_v3 import HiggsAudioV3AudioStreamer


logger = logging.get_logger(__name__)


@dataclass
class HiggsAudioV3OutputWithPast(CausalLMOutputWithPast):
    r"""
    Output of [`HiggsAudioV3ForConditionalGeneration.forward`]. `logits` are the **audio** logits in MusicGen's layout,
    `[batch * num_codebooks, positions, codebook_size]`, row `b * num_codebooks + c` codebook `c` of sequence `b`
    (`.view(batch, num_codebooks, positions, codebook_size)`); `loss` the mean of the per-codebook cross-entropies.

    text_logits (`[batch, positions, vocab_size]`, *optional*): the text head's, with `return_text_logits=True`.
    audio_loss_per_codebook (`[num_codebooks]`, *optional*): each codebook's cross-entropy (NaN without a label).
    """

    text_logits: torch.FloatTensor | None = None
    audio_loss_per_codebook: torch.FloatTensor | None = None


class HiggsAudioV3PreTrainedModel(PreTrainedModel):
    config_class = HiggsAudioV3Config
    config: HiggsAudioV3Config
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    # The decoder layers are the units `device_map="auto"` splits the backbone into; the codec is one unit.
    _no_split_modules = ["Qwen3DecoderLayer", "HiggsAudioV3Codec"]
    _skip_keys_device_placement = ["past_key_values", "cache"]
    _supports_flash_attn = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _can_compile_fullgraph = True
    _supports_attention_backend = True
    # The codec is loaded in fp32 whatever the dtype (the strict list: fp16 and bf16) and keeps it (its `_apply`); a
    # model without a codec lists nothing (`__init__`).
    _keep_in_fp32_modules_strict = ["codec"]
    # The loss is a mean over labelled rows per codebook: transformers' Trainer must not pass `num_items_in_batch`
    # (it would reach the backbone) nor skip its own division by the gradient accumulation steps.
    accepts_loss_kwargs = False


class HiggsAudioV3ForConditionalGeneration(HiggsAudioV3PreTrainedModel, HiggsAudioV3GenerationMixin):
    r"""
    Higgs Audio v3 text-to-speech model.

    Modules: `model` (transformers' `Qwen3Model`), `audio_embed` (the fused codebook embedding, `[num_codebooks *
    codebook_size, hidden]`), `audio_head` (tied to `audio_embed`), `lm_head` (text head, tied to the token embedding,
    run only when asked) and `codec` (the Higgs Audio v2 tokenizer, float32 and frozen always; absent when
    `config.codec_config` is None).

    Example:

    ```python
    >>> import torch
    >>> from higgs_v3 import HiggsAudioV3Config, HiggsAudioV3ForConditionalGeneration
    >>> config = HiggsAudioV3Config(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    ...                             num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    >>> model = HiggsAudioV3ForConditionalGeneration(config).eval()
    >>> ids = torch.tensor([[151667, 151672, 9707, 151670]])
    >>> model(input_ids=ids).logits.shape  # [batch * num_codebooks, positions, codebook_size]
    torch.Size([8, 4, 1026])
    ```
    """

    _auto_class = "AutoModel"  # `save_pretrained` copies this file and its relative imports beside `config.json`
    _tied_weights_keys = {
        "lm_head.weight": "model.embed_tokens.weight",
        "audio_head.weight": "audio_embed.weight",
    }
    # *** Higgs v3 tensor parallel plan: the backbone's is Qwen3's (`config.base_model_tp_plan`); the text head is
    # sharded and gathered as Qwen3ForCausalLM's; the tied audio embedding / head (42 MB in bf16) stay whole on every
    # rank (the decode step looks rows up with `F.embedding` on the weight), the codec too. transformers 5.5 applies
    # the backbone's layer rules only: the embeddings and heads stay whole there. ***
    _tp_plan = {"lm_head": "colwise_gather_output", **replicated("audio_embed", "audio_head")}
    # *** end Higgs v3 tensor parallel plan ***
    _prepare_generation_config = prepare_generation_config  # a pipeline's defaults rank below ours (compat_higgs_v3)
    _top_level_modules = ("model", "audio_embed", "audio_head", "lm_head", "codec")  # the children `__init__` makes

    def __init__(self, config: HiggsAudioV3Config):
        super().__init__(config)
        self.model = Qwen3Model(config)
        self.audio_embed = nn.Embedding(config.audio_vocab_size, config.hidden_size)
        self.audio_head = nn.Linear(config.hidden_size, config.audio_vocab_size, bias=False)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        # Plain ints for the per-step path (config attribute reads go through two `__getattribute__` layers).
        self.num_codebooks = config.num_codebooks
        self.codebook_size = config.codebook_size
        self.codec = None if config.codec_config is None else HiggsAudioV3Codec.from_codec_config(config.codec_config)
        # *** Higgs v3 specific: the fp32 lists `post_init` reads. No codec: nothing to keep. A quantized load (the
        # loader sets `config.quantization_config` first): transformers' quantizers leave unquantized only what
        # `_keep_in_fp32_modules` names, so the codec is named there too ***
        if self.codec is None:
            self._keep_in_fp32_modules_strict = []
        elif getattr(config, "quantization_config", None) is not None:
            self._keep_in_fp32_modules = ["codec"]
        self.post_init()
        self.generation_config = default_generation_config(config)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """`PreTrainedModel.from_pretrained` with the codec one unit of the device map, run on its entry's device
        (`codec_higgs_v3.codec_device_map`, `place_codec`) and frozen again (the loader builds parameters anew)."""
        if "device_map" in kwargs:  # *** Higgs v3 specific ***
            kwargs["device_map"] = codec_device_map(kwargs["device_map"], cls._top_level_modules)
        loaded = super().from_pretrained(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        if model.codec is not None:
            place_codec(model)
            model.codec.requires_grad_(False)
        return loaded  # *** end Higgs v3 specific ***

    # ------------------------------------------------------------------ embeddings
    def embed_audio_rows(self, rows: torch.LongTensor) -> torch.Tensor:
        """Fused embedding of code rows, `[..., num_codebooks]` -> `[..., hidden]`: row `f` maps to
        `sum_c audio_embed.weight[c * codebook_size + f[c]]` (one lookup, per-codebook offsets)."""
        offsets = torch.arange(0, self.num_codebooks * self.codebook_size, self.codebook_size, device=rows.device)
        summed = self._embed_fused_rows((rows + offsets).reshape(-1, rows.shape[-1]))  # [N, H]
        return summed.reshape(*rows.shape[:-1], summed.shape[-1])

    def _embed_fused_rows(self, fused: torch.LongTensor) -> torch.Tensor:
        """Already offset rows `[N, num_codebooks]` -> their summed embeddings `[N, hidden]` (the decode step's path).
        One reduction over the looked-up rows, rounded once in bf16 as the official server's `F.embedding(...).sum(-2)`
        (`embedding_bag` rounds while it adds); a module call, so an offloaded `audio_embed` comes in by its hook."""
        return self.audio_embed(fused).sum(-2)  # [N, C, H] -> [N, H]

    def build_inputs_embeds(self, input_ids: torch.LongTensor, audio_input_ids: torch.LongTensor | None = None,
                            audio_input_ids_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings of `input_ids` `[batch, length]` with every placeholder position **replaced** by its
        reference row's fused embedding, in order: `[batch, length, hidden]`. The rows are `audio_input_ids`
        `[num_rows, num_codebooks]`, or `[batch, rows, num_codebooks]` with `audio_input_ids_mask` `[batch, rows]`
        marking the valid ones (training batches); one per placeholder (`generate` checks that at its entry)."""
        placeholder = input_ids == self.config.audio_placeholder_id  # [B, L]
        inputs_embeds = self.model.embed_tokens(input_ids.masked_fill(placeholder, 0))  # [B, L, H]
        if audio_input_ids is None:
            return inputs_embeds
        rows = audio_input_ids if audio_input_ids_mask is None else audio_input_ids[audio_input_ids_mask.bool()]
        audio_embeds = self.embed_audio_rows(rows).to(inputs_embeds.dtype)  # [N, H] (or [B, rows, H]: read in order)
        return inputs_embeds.masked_scatter(placeholder[..., None], audio_embeds)

    # ------------------------------------------------------------------ codes and audio (the codec's one home)
    def _require_codec(self, purpose: str) -> HiggsAudioV3Codec:
        """The codec, for `purpose` ("Decoding codes to audio", ...): THE refusal of a model without one."""
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
        the transcript). `audio`: a path, an http(s) URL or samples (`sampling_rate` required), prepared and checked by
        `audio_io_higgs_v3.prepare_reference_waveform` (mono, the codec's rate, at least 1 s, at most 100 s).

        ```python
        >>> voice = model.encode_reference("me.wav", text="What I say in it.")  # doctest: +SKIP
        >>> voice.save("me.safetensors")  # doctest: +SKIP
        ```
        """
        codec = self._require_codec("Encoding reference audio")
        spec = self.config.audio_spec
        waveform = prepare_reference_waveform(audio, sampling_rate, target_sampling_rate=spec.sampling_rate)  # [N]
        codes = codec.encode_waveform(waveform)  # [T, C]
        voice = HiggsAudioV3Voice(codes=codes, text=text, sampling_rate=spec.sampling_rate, frame_rate=spec.frame_rate)
        return voice.with_codec(codec)  # plays in a notebook (`voice.decode()`)

    def merge_reference_clips(
        self, audio_input_ids: torch.LongTensor | None, reference_audio: torch.Tensor,
        reference_audio_lengths: torch.LongTensor | list[int] | None = None,
        audio_input_ids_mask: torch.Tensor | None = None,
    ) -> torch.LongTensor:
        r"""The reference rows `[N, num_codebooks]` with the processor's clips encoded in (as CSM's
        `_merge_input_ids_with_input_values`): each clip is encoded alone (exactly `encode_reference(clip).codes`),
        delayed, and written into the rows the processor marked for it (`config.audio_placeholder_id`), clip after clip.
        `reference_audio` `[S_0 + ... + S_{K-1}]` holds the K clips' float32 waveforms one after another (batches
        concatenate), `reference_audio_lengths` `[K]` their samples (None: one clip), as the processor returns them (it
        refuses bad clips). `generate` calls it once, before its loop; `forward` when given `reference_audio`."""
        codec = self._require_codec("Encoding reference clips")
        audio = torch.as_tensor(reference_audio)  # [S_0 + ... + S_{K-1}]
        lengths = [audio.numel()] if reference_audio_lengths is None else torch.as_tensor(
            reference_audio_lengths).flatten().tolist()  # [K]
        if audio_input_ids is None:
            raise ValueError("reference_audio was given without audio_input_ids; pass the processor's whole output "
                             "(model.generate(**inputs)): its audio_input_ids hold the rows the clips fill.")
        if audio.dim() != 1 or audio.numel() == 0:
            raise ValueError("reference_audio must be the clips' waveforms one after another, [total samples] (as the "
                             f"processor returns it), got shape {tuple(audio.shape)}.")
        if not all(isinstance(n, int) and n > 0 for n in lengths) or sum(lengths) != audio.numel():
            raise ValueError(f"reference_audio_lengths {lengths} must be positive integers and add up to the "
                             f"{audio.numel()} samples of reference_audio (the clips one after another).")
        rows = audio_input_ids.reshape(-1, self.num_codebooks) if audio_input_ids_mask is None else (
            audio_input_ids[audio_input_ids_mask.bool()])  # [N, C]
        delayed = [self.config.audio_spec.delay(codec.encode_waveform(clip)) for clip in audio.split(lengths)]
        positions = torch.nonzero(rows[:, 0] == self.config.audio_placeholder_id).flatten().cpu()  # [M] host read
        expected = [d.shape[0] for d in delayed]  # clip k takes marked rows ends[k] - expected[k] .. ends[k] - 1
        ends = torch.tensor(expected).cumsum(0).tolist()
        if positions.numel() != ends[-1] or any(  # each clip's rows are one run of its prompt's
                int(positions[end - 1] - positions[end - n]) != n - 1 for end, n in zip(ends, expected)):
            raise ValueError(
                f"audio_input_ids marks {positions.numel()} rows for the {len(lengths)} reference clip(s), but this "
                f"model's codec encodes them to {ends[-1]} rows ({expected}, clip by clip): the processor did not "
                "count the frames of this model's codec. Use the processor saved with this model, or "
                "HiggsAudioV3Processor.from_model_config(tokenizer, model.config).")
        rows = rows.clone()
        rows[positions.to(rows.device)] = torch.cat(delayed).to(device=rows.device, dtype=rows.dtype)
        return rows

    def encode_target(
        self, audio: AudioLike, sampling_rate: int | None = None, max_seconds: float | None = None
    ) -> torch.LongTensor:
        r"""Encode a training target clip into raw codes `[frames, num_codebooks]` for `processor(text=...,
        audio_target=codes)`. `audio` as for `encode_reference`, not padded; refused when shorter than `num_codebooks`
        frames or longer than `max_seconds` (default: `MAX_NEW_TOKENS` rows, about 81.6 s).

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
        if waveform.shape[0] < spec.num_codebooks * spec.samples_per_frame:
            raise ValueError(
                f"Target audio is {waveform.shape[0] / spec.sampling_rate:.3f} s long; a training target needs at "
                f"least {spec.num_codebooks} codec frames ({spec.seconds(spec.num_codebooks):g} s): generation reads "
                "the end of speech only after its delay window."
            )
        return codec.encode_waveform(waveform)  # [T, C]

    def decode_audio(
        self, sequences: torch.LongTensor, lengths: torch.LongTensor | None = None
    ) -> list[torch.FloatTensor]:
        """`generate`'s delayed rows `[batch, rows, num_codebooks]` -> one 1-D float32 waveform per sequence.
        `lengths` `[batch]`: valid rows (None: where codebook 0 ended speech, `delay_higgs_v3.rows_to_codes`)."""
        codec = self._require_codec("Decoding codes to audio")
        sequences = check_codes(sequences, self.num_codebooks, self.codebook_size, "sequences", batched=True)
        codes, code_lengths = self.config.audio_spec.rows_to_codes(sequences, lengths)  # [B, T, C], [B]
        if not bool(code_lengths.all()):
            empty = torch.nonzero(code_lengths == 0).flatten().tolist()
            logger.warning(
                f"Sequence(s) {empty} have no complete audio frame (fewer than {self.num_codebooks} valid rows): their "
                "waveforms are empty."
            )
        return codec.decode_frames(codes, code_lengths)

    def audio_streamer(self, **kwargs) -> HiggsAudioV3AudioStreamer:
        """A `HiggsAudioV3AudioStreamer` of waveform chunks for `generate(..., streamer=...)`; its keyword arguments."""
        return HiggsAudioV3AudioStreamer(self, **kwargs)

    # ------------------------------------------------------------------ forward
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        audio_input_ids: torch.LongTensor | None = None,
        audio_input_ids_mask: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        audio_labels: torch.LongTensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        return_text_logits: bool = False,
        reference_audio: torch.Tensor | None = None,
        reference_audio_lengths: torch.LongTensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> HiggsAudioV3OutputWithPast:
        r"""
        Args:
            input_ids (`[batch, length]`) / audio_input_ids / audio_input_ids_mask: the prompts and their delayed
                reference rows, one per placeholder (`build_inputs_embeds`).
            reference_audio / reference_audio_lengths: the processor's reference clips, encoded into their rows of
                `audio_input_ids` first (`merge_reference_clips`).
            inputs_embeds (`[batch, length, hidden]`): used as is instead of `input_ids`.
            audio_labels (`[batch, length, num_codebooks]`): the row each position is fed in teacher forcing
                (-100 where there is none, e.g. text). The logits at position `p` are scored against the labels at
                `p + 1`, as transformers' causal LMs shift `labels`; with `logits_to_keep`, over the kept positions.
            logits_to_keep: compute the heads on the last `n` positions only (0 = all), or on the given indices.
            return_text_logits: also compute the 151936-wide text head (never needed to generate speech).
            kwargs: passed on to the backbone: `use_cache`, the KV cache (`cache`; `past_key_values` on transformers
                5.5), ...

        Returns:
            `HiggsAudioV3OutputWithPast` with `logits` `[batch * num_codebooks, kept_positions, codebook_size]`.
        """
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        if reference_audio is not None:  # the processor's clips (`generate` merges them once, before its loop)
            audio_input_ids = self.merge_reference_clips(
                audio_input_ids, reference_audio, reference_audio_lengths, audio_input_ids_mask
            )
            audio_input_ids_mask = None
        if inputs_embeds is None:
            inputs_embeds = self.build_inputs_embeds(input_ids, audio_input_ids, audio_input_ids_mask)  # [B, L, H]
        outputs = self.model(inputs_embeds=inputs_embeds, attention_mask=attention_mask, position_ids=position_ids,
                             **kwargs)
        slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        hidden_states = outputs.last_hidden_state[:, slice_indices, :]  # [B, L', H]
        logits = self.audio_head(hidden_states)  # [B, L', C * V] -> [B * C, L', V], row b * C + c: a view for L' = 1
        logits = logits.view(-1, 1, self.codebook_size) if logits.shape[1] == 1 else logits.unflatten(
            -1, (self.num_codebooks, self.codebook_size)).transpose(1, 2).flatten(0, 1)
        loss, per_codebook = self.audio_loss(logits, audio_labels) if audio_labels is not None else (None, None)
        return HiggsAudioV3OutputWithPast(
            loss=loss, logits=logits, audio_loss_per_codebook=per_codebook,  # logits [B * C, L', V]
            text_logits=self.lm_head(hidden_states) if return_text_logits else None,  # [B, L', vocab]
            hidden_states=outputs.hidden_states, attentions=outputs.attentions,
            **{CACHE_KWARG: getattr(outputs, CACHE_KWARG, None)},
        )

    def audio_loss(self, logits: torch.Tensor, audio_labels: torch.LongTensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Shifted per-codebook cross-entropy (ignore index -100) of `forward`'s logits `[batch * C, L', V]` against
        `audio_labels` `[batch, L, C]` (the last `L'` positions scored). Returns (mean over codebooks, per codebook)."""
        batch, positions = audio_labels.shape[0], logits.shape[1]
        labels = audio_labels[:, -positions:].transpose(1, 2).reshape(-1, positions).to(logits.device)  # [B * C, L']
        nll = F.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100, reduction="none"
        ).view(batch, self.num_codebooks, -1)  # [B, C, L' - 1]: position p predicts the row at p + 1
        valid = (labels[:, 1:] != -100).view(batch, self.num_codebooks, -1)
        per_codebook = (nll * valid).sum(dim=(0, 2)) / valid.sum(dim=(0, 2))  # [C], NaN where a codebook has no label
        return per_codebook.nanmean(), per_codebook


__all__ = ["HiggsAudioV3PreTrainedModel", "HiggsAudioV3ForConditionalGeneration", "HiggsAudioV3OutputWithPast"]
