# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Delay-pattern generation for Higgs Audio v3 inside transformers' `GenerationMixin`.

We do not fork `GenerationMixin._sample`. As in MusicGen and Dia, the codebook axis goes through the stock loop:
each batch row `b` becomes `num_codebooks` rows `b * C + c` of `input_ids` (the prompt repeated, then the codes of
codebook `c`), the model returns the audio logits flattened to `[B * C, positions, codebook_size]`, and the stock loop
picks one code per row. What is specific to Higgs v3 lives in small pieces around that loop:

- `prepare_inputs_for_generation`: the prefill embeds the prompt (reference placeholders replaced by their rows); each
  later step embeds the previous row as emitted (fused codebook embedding, replacing the token embedding).
- `HiggsAudioV3DelayPatternLogitsProcessor`: during the first `C - 1` steps, codebooks `c > step` are forced to BOC.
- `HiggsAudioV3SeededSampler`: temperature / top-k / top-p / min-p are transformers' own warpers; the draw itself uses a
  counter-based generator keyed by (row seed, step, codebook), so a row gives the same codes alone or in a batch.
- `HiggsAudioV3StoppingCriteria`: per sequence, after the delay window, codebook 0 emitting EOC starts a countdown of
  `C - 2` more rows; the row on which it reaches 0 is emitted and the sequence stops (finished rows are padded with EOC).
  The rule itself is `delay_higgs_v3.speech_end_row`, shared with the processor and the streamers.

All per-step state is a few small tensors updated with masks: no Python loop over rows or codebooks and no host
synchronisation in our code on the per-step path. The per-step Python is kept lean because a small model's step is
all dispatch: the newest column is embedded with offsets computed once per call, the decode-step logits are a view,
and the logits processors' signatures are read once (see `_LogitsProcessorList`).

The worked example of the spec, with C = 3 (countdown 1):

```
step  input           emitted          state after
0     prefill         [a0  BOC BOC]    delay window: codebooks 1, 2 forced to BOC
1     emb(row 0)      [a1  b0  BOC]    codebook 2 forced to BOC
2     emb(row 1)      [a2  b1  c0 ]    window over (no EOC check up to here)
3     emb(row 2)      [a3  b2  c1 ]
4     emb(row 3)      [EOC b3  c2 ]    codebook 0 is EOC: countdown := C - 2 = 1
5     emb(row 4)      [EOC EOC c3 ]    countdown 1 -> 0: done (T + C - 1 = 6 rows for T = 4 frames)
```
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass

import torch
from transformers import GenerationConfig, GenerationMixin, LogitsProcessor, LogitsProcessorList, StoppingCriteria
from transformers.generation.stopping_criteria import EosTokenCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer
from transformers.utils import ModelOutput, logging

from .delay_higgs_v3 import revert_delay_pattern, speech_end_row, speech_finished, speech_rows


logger = logging.get_logger(__name__)

# Generation options that have no meaning for audio codes, with the value that means "off".
_UNSUPPORTED_OPTIONS: dict[str, object] = {
    "num_beams": 1,
    "num_beam_groups": 1,
    "num_return_sequences": 1,
    "penalty_alpha": None,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None,
    "force_words_ids": None,
    "sequence_bias": None,
    "guidance_scale": None,
    "typical_p": 1.0,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "min_length": 0,
    "min_new_tokens": None,
    "prompt_lookup_num_tokens": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None,
    "watermarking_config": None,
    "token_healing": False,
    "dola_layers": None,
}
_UNSUPPORTED_ARGUMENTS = ("assistant_model", "prefix_allowed_tokens_fn", "negative_prompt_ids", "custom_generate")
_SUPPORTED = (
    "greedy decoding (do_sample=False) or sampling (do_sample=True) with temperature, top_k, top_p and min_p applied "
    "per codebook; max_new_tokens (audio rows); seed; streamer; use_cache / cache_implementation; logits_processor; "
    "stopping_criteria; output_scores / output_logits"
)


@dataclass
class HiggsAudioV3GenerationOutput(ModelOutput):
    r"""
    Output of [`HiggsAudioV3ForConditionalGeneration.generate`] with `return_dict_in_generate=True`.

    sequences (`torch.LongTensor` of shape `[batch, rows, num_codebooks]`):
        The delayed rows as generated. After a sequence finished its rows are padded with EOC
        (`config.audio_eoc_token_id`); `lengths` tells how many rows are valid.
    lengths (`torch.LongTensor` of shape `[batch]`):
        Valid rows per sequence (T + num_codebooks - 1 for T frames when the sequence finished).
    finished (`torch.BoolTensor` of shape `[batch]`):
        Whether each sequence ended by itself (EOC and countdown) before `max_new_tokens`. `False` is the model's
        known runaway failure: the sequence was cut at the limit.
    audio_codes (`torch.LongTensor` of shape `[batch, frames, num_codebooks]`):
        The de-delayed codes, every code >= BOC (a stray BOC/EOC, or padding) replaced by 0.
    audio_code_lengths (`torch.LongTensor` of shape `[batch]`):
        Valid frames per sequence: `max(lengths - (num_codebooks - 1), 0)`.
    audio (`list[torch.FloatTensor]`, *optional*):
        One 1-D waveform per sequence at `config.sampling_rate`, `audio_code_lengths[i] * samples_per_frame` samples,
        when the model has a codec and `output_audio` is not False.
    scores / logits (`tuple[torch.FloatTensor]`, *optional*):
        Per step, `[batch, num_codebooks, codebook_size]`, when `output_scores` / `output_logits` are set.
    """

    sequences: torch.LongTensor | None = None
    lengths: torch.LongTensor | None = None
    finished: torch.BoolTensor | None = None
    audio_codes: torch.LongTensor | None = None
    audio_code_lengths: torch.LongTensor | None = None
    audio: list[torch.Tensor] | None = None
    scores: tuple[torch.Tensor, ...] | None = None
    logits: tuple[torch.Tensor, ...] | None = None
    attentions: tuple | None = None
    hidden_states: tuple | None = None


# ---------------------------------------------------------------------------------------------- per-step pieces
class HiggsAudioV3DelayPatternLogitsProcessor(LogitsProcessor):
    r"""Forces BOC into the codebooks that have not started yet: at step `s < C - 1`, every codebook `c > s`.

    `input_ids` is the stock loop's `[batch * C, prompt_length + s]`; `scores` is `[batch * C, codebook_size]`.
    """

    def __init__(self, num_codebooks: int, boc_token_id: int, prompt_length: int):
        self.num_codebooks = num_codebooks
        self.boc_token_id = boc_token_id
        self.prompt_length = prompt_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        step = input_ids.shape[1] - self.prompt_length  # Python int from a shape: no host sync
        if step >= self.num_codebooks - 1:
            return scores
        codebook = torch.arange(scores.shape[0], device=scores.device) % self.num_codebooks  # [B*C]
        forced = torch.full_like(scores, -float("inf"))
        forced[:, self.boc_token_id] = 0.0
        return torch.where((codebook > step)[:, None], forced, scores)


_MASK32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, k: int) -> torch.Tensor:
    """`x * k mod 2**32` for int64 `x` in [0, 2**32), without int64 overflow."""
    low = (x * (k & 0xFFFF)) & _MASK32
    high = ((x * (k >> 16)) & 0xFFFF) << 16
    return (low + high) & _MASK32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (lowbias32) on int64 tensors holding values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def counter_uniform(
    seeds: torch.LongTensor, step: int | torch.LongTensor, codebook: torch.LongTensor, num_codebooks: int
) -> torch.Tensor:
    """Uniform numbers in [0, 1) keyed by (seed, step, codebook): the same key gives the same number on any batch.

    `seeds`, `step` and `codebook` broadcast together (e.g. `[rows]`, an int, `[rows]`); returns float32 with 24
    random bits in the broadcast shape.
    """
    seed_low = seeds & _MASK32
    seed_high = (seeds >> 32) & _MASK32
    counter = (codebook + step * num_codebooks) & _MASK32
    x = _mix32(seed_high ^ 0x9E3779B9)
    x = _mix32(x ^ seed_low)
    x = _mix32(x ^ counter)
    return (x >> 8).to(torch.float32) / float(1 << 24)


class HiggsAudioV3SeededSampler(LogitsProcessor):
    r"""The draw of sampling, after transformers' warpers: softmax, then inverse-CDF with a counter-based uniform.

    Returns scores that are 0 at the drawn code and -inf elsewhere, so the stock loop's argmax picks it. Each sequence
    has its own seed; the uniform for (sequence, step, codebook) does not depend on the other sequences.
    """

    def __init__(self, seeds: torch.LongTensor, num_codebooks: int, prompt_length: int, max_new_tokens: int):
        self.prompt_length = prompt_length
        row_seeds = seeds.repeat_interleave(num_codebooks)[None, :]  # [1, B*C]
        codebook = (torch.arange(row_seeds.shape[1], device=seeds.device) % num_codebooks)[None, :]  # [1, B*C]
        steps = torch.arange(max_new_tokens, device=seeds.device)[:, None]  # [S, 1]
        # Every uniform of the call, computed once: [S, B*C] (2048 x 16 x 8 floats = 1 MiB).
        self.uniforms = counter_uniform(row_seeds, steps, codebook, num_codebooks)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        step = input_ids.shape[1] - self.prompt_length
        probs = torch.softmax(scores.float(), dim=-1)  # [B*C, V]
        cdf = probs.cumsum(dim=-1)  # [B*C, V]
        uniform = self.uniforms[min(step, self.uniforms.shape[0] - 1)].to(cdf.device)  # [B*C]
        target = (uniform[:, None] * cdf[:, -1:]).contiguous()  # [B*C, 1], strictly below the total mass
        drawn = torch.searchsorted(cdf, target, right=True).clamp_(max=scores.shape[-1] - 1)  # first cdf > target
        return torch.full_like(scores, -float("inf")).scatter_(1, drawn, 0.0)


class HiggsAudioV3StoppingCriteria(StoppingCriteria):
    r"""The end of speech, per sequence (`delay_higgs_v3.speech_end_row`): after the delay window, the first EOC of
    codebook 0 at a row `r >= C` starts a countdown of `C - 2` rows, and row `r + C - 2` is the last one emitted.

    Equivalently, a sequence is done at step `t` when codebook 0 emitted EOC at row `t - (C - 2)` (or earlier) and
    that row is at least `C`. So each step looks back `C - 2` rows at one column of `input_ids` and ORs the result into
    `ended` (`[batch, C]`, every codebook of a sequence alike); `done` is its flat `[batch * C]` view, the layout of
    the stock loop's rows. Three tensor ops per step (slice, compare, in-place or), no countdown to keep; `generate`
    reads lengths and `finished` off the returned rows with `delay_higgs_v3`'s functions, as the processor and the
    streamers do.

    `eos_token_id` is set (to EOC) because the stock loop pads finished rows only when a criterion has one.
    """

    def __init__(self, batch_size: int, num_codebooks: int, eoc_token_id: int, prompt_length: int,
                 device: torch.device):
        self.num_codebooks = num_codebooks
        self.eos_token_id = eoc_token_id
        self.prompt_length = prompt_length
        self.ended = torch.zeros(batch_size, num_codebooks, dtype=torch.bool, device=device)
        self.done = self.ended.view(-1)  # [B*C], updated in place with `ended`

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor | None = None, **kwargs) -> torch.BoolTensor:
        lag = self.num_codebooks - 2
        row = input_ids.shape[1] - self.prompt_length - 1 - lag  # a row whose EOC would end speech now (Python int)
        if row >= self.num_codebooks:  # EOC counts from row C on (spec: not during the delay window)
            column = input_ids.shape[1] - 1 - lag
            self.ended |= input_ids[:: self.num_codebooks, column : column + 1] == self.eos_token_id  # [B, 1] -> [B, C]
        return self.done


class _LogitsProcessorList(LogitsProcessorList):
    """`LogitsProcessorList` that reads each processor's signature once, not on every step as the stock one does
    (`inspect.signature` of a bound method costs about as much as a small decode step's other bookkeeping). Same
    contract: a processor with parameters beyond `(input_ids, scores)` gets the keyword arguments, which must hold them.
    """

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        extra = self.__dict__.get("_extra_parameters")
        if extra is None or len(extra) != len(self):  # first step (or the list changed)
            extra = [list(inspect.signature(p.__call__).parameters)[2:] for p in self]
            self._extra_parameters = extra
        for processor, names in zip(self, extra):
            if not names:
                scores = processor(input_ids, scores)
                continue
            if not all(name in kwargs for name in names):
                raise ValueError(
                    f"Make sure that all the required parameters: {names} for {processor.__class__} are passed to the "
                    "logits processor."
                )
            scores = processor(input_ids, scores, **kwargs)
        return scores


class _RowStreamer(BaseStreamer):
    """Hands the user's streamer one `[batch, num_codebooks]` row per step instead of the flat `[batch * C]` codes;
    the prompt that the stock loop puts first is not forwarded."""

    def __init__(self, streamer: BaseStreamer, num_codebooks: int):
        self.streamer = streamer
        self.num_codebooks = num_codebooks
        self.prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.streamer.put(value.reshape(-1, self.num_codebooks))

    def end(self) -> None:
        self.streamer.end()


# ---------------------------------------------------------------------------------------------- the mixin
class HiggsAudioV3GenerationMixin(GenerationMixin):
    r"""`generate` for Higgs Audio v3: the delay-pattern state machine around transformers' stock decoding loop."""

    def _default_audio_generation_config(self) -> GenerationConfig:
        """The official server's sampling defaults: temperature 1.0, no top-k, no top-p, up to 2048 rows."""
        return GenerationConfig(
            do_sample=True,
            temperature=1.0,
            top_k=None,
            top_p=None,
            max_new_tokens=2048,
            use_cache=True,
            bos_token_id=self.config.bos_token_id,
            eos_token_id=self.config.eos_token_id,
            pad_token_id=self.config.pad_token_id,
        )

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.LongTensor | None = None,
        audio_input_ids: torch.LongTensor | None = None,
        audio_input_ids_mask: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        generation_config: GenerationConfig | None = None,
        logits_processor: LogitsProcessorList | None = None,
        stopping_criteria: StoppingCriteriaList | None = None,
        streamer: BaseStreamer | None = None,
        seed: int | list[int] | torch.Tensor | None = None,
        output_audio: bool | None = None,
        **kwargs,
    ) -> HiggsAudioV3GenerationOutput | torch.LongTensor:
        r"""
        Generate delayed code rows (and waveforms) for a batch of prompts built by `HiggsAudioV3Processor`.

        Args:
            input_ids (`[batch, length]`): left-padded prompts; reference placeholders (`config.audio_placeholder_id`)
                take the rows of `audio_input_ids`.
            audio_input_ids / audio_input_ids_mask: the delayed reference rows, as in `forward`.
            attention_mask (`[batch, length]`): 0 on left padding (all ones when omitted).
            generation_config / kwargs: `do_sample`, `temperature`, `top_k`, `top_p`, `min_p`, `max_new_tokens` (audio
                rows, default 2048), `use_cache`, `cache_implementation`, `return_dict_in_generate`, `output_scores`,
                `output_logits`. Beam search, assisted decoding, repetition penalties, bad words and the like raise a
                `ValueError`.
            streamer: receives each new row as a `[batch, num_codebooks]` tensor (`put`), then `end()`.
            seed: `int` (every sequence uses it) or one seed per sequence (list or `[batch]` tensor). A sequence
                with a given seed gets the same codes alone or inside any batch. Without a seed, one is drawn from
                torch's global RNG (so `torch.manual_seed` makes runs repeatable). Ignored for greedy decoding.
            output_audio: decode waveforms with the codec (default: when `return_dict_in_generate` and a codec).

        Returns:
            `HiggsAudioV3GenerationOutput` when `return_dict_in_generate=True`, else the delayed rows
            `[batch, rows, num_codebooks]` (EOC after a sequence finished).

        Example:

        ```python
        >>> out = model.generate(**processor("Hello there."), seed=0, return_dict_in_generate=True)  # doctest: +SKIP
        >>> out.finished, out.audio[0].shape  # doctest: +SKIP
        ```
        """
        for name in _UNSUPPORTED_ARGUMENTS:
            if kwargs.get(name) is not None:
                raise ValueError(f"generate() does not support `{name}` for audio codes. Supported: {_SUPPORTED}.")
        if kwargs.get("inputs") is not None or kwargs.get("inputs_embeds") is not None:
            raise ValueError("generate() takes `input_ids` (from HiggsAudioV3Processor), not `inputs`/`inputs_embeds`.")
        if kwargs.get("max_length") is not None:
            raise ValueError(
                f"generate() counts audio rows with `max_new_tokens`; got max_length={kwargs['max_length']}. "
                "Pass max_new_tokens instead."
            )
        if input_ids is None or input_ids.dim() != 2:
            shape = None if input_ids is None else tuple(input_ids.shape)
            raise ValueError(f"generate() needs input_ids of shape [batch, length], got {shape}.")

        if generation_config is None:
            generation_config = self.generation_config
            if generation_config.max_new_tokens is None:  # a model built from a config, not loaded with its defaults
                generation_config = self._default_audio_generation_config()
        generation_config = copy.deepcopy(generation_config)
        model_kwargs = generation_config.update(**kwargs)
        if generation_config.max_new_tokens is None:
            # e.g. transformers 5.5's text-to-speech pipeline, which drops it when it sets max_length
            generation_config.max_new_tokens = self.generation_config.max_new_tokens or 2048
        self._check_generation_options(generation_config)

        num_codebooks = self.config.num_codebooks
        batch_size, prompt_length = input_ids.shape
        device = input_ids.device
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        max_new_tokens = generation_config.max_new_tokens

        # *** Higgs v3 specific: the stock loop sees B * C rows; finished rows are padded with EOC ***
        generation_config.pad_token_id = self.config.audio_eoc_token_id
        generation_config.eos_token_id = None
        generation_config.bos_token_id = None
        return_dict = generation_config.return_dict_in_generate
        generation_config.return_dict_in_generate = True

        own_processors = LogitsProcessorList(
            [HiggsAudioV3DelayPatternLogitsProcessor(num_codebooks, self.config.audio_boc_token_id, prompt_length)]
        )
        if generation_config.do_sample:
            own_processors.append(
                HiggsAudioV3SeededSampler(
                    self._sequence_seeds(seed, batch_size, device), num_codebooks, prompt_length, max_new_tokens
                )
            )
        stopper = HiggsAudioV3StoppingCriteria(
            batch_size, num_codebooks, self.config.audio_eoc_token_id, prompt_length, device
        )
        outputs = super().generate(
            input_ids=input_ids.repeat_interleave(num_codebooks, dim=0),  # [B*C, L]: row b*C + c
            attention_mask=attention_mask,
            audio_input_ids=audio_input_ids,
            audio_input_ids_mask=audio_input_ids_mask,
            audio_prompt_length=prompt_length,
            # Row b * C + c of the stock loop holds codebook c: its codes index rows c * codebook_size + code of the
            # fused embedding. Computed once here so that each step adds it to the newest column (no arange per step).
            audio_code_offsets=self.audio_code_offsets(batch_size, device),
            generation_config=generation_config,
            logits_processor=LogitsProcessorList(list(logits_processor or []) + list(own_processors)),
            stopping_criteria=StoppingCriteriaList(list(stopping_criteria or []) + [stopper]),
            streamer=_RowStreamer(streamer, num_codebooks) if streamer is not None else None,
            **model_kwargs,
        )
        # *** end Higgs v3 specific ***

        generated = outputs.sequences[:, prompt_length:]  # [B*C, R]
        rows = generated.reshape(batch_size, num_codebooks, -1).transpose(1, 2)  # [B, R, C]
        # Read off the rows, not the stopper's state: a loop that undoes its last step (transformers' deferred stop
        # check on MPS) may have let the stopper see a row that is not returned.
        end_row = speech_end_row(rows[..., 0], self.config.audio_eoc_token_id, num_codebooks)
        lengths = speech_rows(end_row, num_codebooks, rows.shape[1])
        finished = speech_finished(end_row, num_codebooks, rows.shape[1])
        if not return_dict:
            self._warn_unfinished(finished)
            return rows

        codes, code_lengths = self.rows_to_codes(rows, lengths)
        audio = None
        if output_audio is None:
            output_audio = getattr(self, "codec", None) is not None
        if output_audio:
            audio = self.decode_codes(codes, code_lengths)
        self._warn_unfinished(finished)

        def per_row(steps):
            return None if steps is None else tuple(s.reshape(batch_size, num_codebooks, -1) for s in steps)

        return HiggsAudioV3GenerationOutput(
            sequences=rows,
            lengths=lengths,
            finished=finished,
            audio_codes=codes,
            audio_code_lengths=code_lengths,
            audio=audio,
            scores=per_row(getattr(outputs, "scores", None)),
            logits=per_row(getattr(outputs, "logits", None)),
            attentions=getattr(outputs, "attentions", None),
            hidden_states=getattr(outputs, "hidden_states", None),
        )

    # -------------------------------------------------------------------------------------- generate helpers
    def _check_generation_options(self, generation_config: GenerationConfig) -> None:
        for name, off in _UNSUPPORTED_OPTIONS.items():
            value = getattr(generation_config, name, off)
            if value is not None and value != off:
                raise ValueError(
                    f"generate() does not support {name}={value!r} for audio codes (it has no meaning for the "
                    f"8-codebook delay pattern). Supported: {_SUPPORTED}."
                )
        if generation_config.max_new_tokens is None or generation_config.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive number of audio rows, got {generation_config.max_new_tokens}.")

    def _sequence_seeds(self, seed, batch_size: int, device: torch.device) -> torch.LongTensor:
        if seed is None:
            seed = int(torch.randint(0, 2**62, (), dtype=torch.long))  # once per call, from the global RNG
        if isinstance(seed, int):
            return torch.full((batch_size,), seed, dtype=torch.long, device=device)
        seeds = torch.as_tensor(seed, dtype=torch.long).to(device)
        if seeds.shape != (batch_size,):
            raise ValueError(f"seed must be an int or one seed per sequence ({batch_size}), got shape {tuple(seeds.shape)}.")
        return seeds

    def _warn_unfinished(self, finished: torch.BoolTensor) -> None:
        if not bool(finished.all()):
            rows = torch.nonzero(~finished).flatten().tolist()
            logger.warning(
                f"Sequence(s) {rows} reached max_new_tokens without ending (codebook 0 emitted no EOC, or the rows after "
                "it did not fit): this is the model's "
                "known runaway failure, usually followed by a silent tail. They are flagged in `finished`; consider "
                "shorter text chunks or another seed."
            )

    def rows_to_codes(
        self, rows: torch.LongTensor, lengths: torch.LongTensor | None = None
    ) -> tuple[torch.LongTensor, torch.LongTensor]:
        """Delayed rows `[batch, rows, C]` -> de-delayed codes `[batch, frames, C]` with codes >= BOC set to 0, and the
        valid frames per sequence."""
        num_codebooks = self.config.num_codebooks
        if lengths is None:
            lengths = torch.full(rows.shape[:1], rows.shape[1], dtype=torch.long, device=rows.device)
        if rows.shape[1] < num_codebooks:
            codes = rows.new_zeros(rows.shape[0], 0, num_codebooks)
        else:
            codes = revert_delay_pattern(rows)
            codes = codes.masked_fill(codes >= self.config.audio_boc_token_id, 0)
        code_lengths = (lengths - (num_codebooks - 1)).clamp(min=0)
        frame = torch.arange(codes.shape[1], device=codes.device)
        codes = codes.masked_fill(frame[None, :, None] >= code_lengths[:, None, None], 0)
        return codes, code_lengths

    def decode_codes(self, codes: torch.LongTensor, code_lengths: torch.LongTensor) -> list[torch.Tensor]:
        """De-delayed codes `[batch, frames, C]` -> one 1-D waveform per sequence (each decoded at its own length)."""
        codec = getattr(self, "codec", None)
        if codec is None:
            raise ValueError("This model has no codec (config.codec_config is None): it can return codes, not audio.")
        waveforms = []
        for sequence, frames in zip(codes, code_lengths.tolist()):  # after generation, not per step
            if frames == 0:
                waveforms.append(torch.zeros(0, device=codes.device))
                continue
            audio = codec.decode(sequence[:frames].T[None])  # [1, C, T] -> [1, 1, T * hop]
            waveforms.append(audio.reshape(-1).float())
        return waveforms

    # -------------------------------------------------------------------------------------- stock loop hooks
    def _get_logits_processor(self, generation_config: GenerationConfig, *args, **kwargs) -> LogitsProcessorList:
        # *** Higgs v3 specific: our processors run after transformers' warpers, and the sampler is the draw ***
        processors = super()._get_logits_processor(generation_config, *args, **kwargs)
        own = [p for p in processors if isinstance(p, (HiggsAudioV3DelayPatternLogitsProcessor, HiggsAudioV3SeededSampler))]
        ordered = _LogitsProcessorList([p for p in processors if p not in own])
        ordered.extend(sorted(own, key=lambda p: isinstance(p, HiggsAudioV3SeededSampler)))
        if any(isinstance(p, HiggsAudioV3SeededSampler) for p in own):
            # The sampler already drew: the stock loop's argmax reads its one-hot scores.
            generation_config.do_sample = False
        return ordered
        # *** end Higgs v3 specific ***

    def _get_stopping_criteria(self, *args, **kwargs) -> StoppingCriteriaList:
        # *** Higgs v3 specific: generate() refills the text eos id from the model's generation config; an
        # end-of-text check can never fire on audio codes, so it is dropped when our criterion is in the list ***
        criteria = super()._get_stopping_criteria(*args, **kwargs)
        if any(isinstance(c, HiggsAudioV3StoppingCriteria) for c in criteria):
            criteria = StoppingCriteriaList([c for c in criteria if not isinstance(c, EosTokenCriteria)])
        return criteria
        # *** end Higgs v3 specific ***

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        audio_input_ids: torch.LongTensor | None = None,
        audio_input_ids_mask: torch.Tensor | None = None,
        audio_prompt_length: int | None = None,
        audio_code_offsets: torch.LongTensor | None = None,
        **kwargs,
    ) -> dict:
        if audio_prompt_length is None:  # not called from our generate(): plain text behaviour
            return super().prepare_inputs_for_generation(input_ids, **kwargs)
        num_codebooks = self.num_codebooks
        # The stock preparation (cache, positions, masks, slicing) on one text-like view of the rows: codebook 0's.
        model_inputs = super().prepare_inputs_for_generation(input_ids[::num_codebooks], **kwargs)
        window = model_inputs["input_ids"].shape[1]  # positions this step feeds
        num_generated = input_ids.shape[1] - audio_prompt_length
        model_inputs["flatten_codebook_logits"] = True
        if num_generated == 0:  # prefill: the prompt, placeholders replaced inside forward
            model_inputs["audio_input_ids"] = audio_input_ids
            model_inputs["audio_input_ids_mask"] = audio_input_ids_mask
            return model_inputs
        if window == 1 and audio_code_offsets is not None:  # every step with a cache: the newest row only
            fused = (input_ids[:, -1:] + audio_code_offsets).view(-1, num_codebooks)  # [B, C] fused-embedding rows
            inputs_embeds = self.embed_fused_rows(fused)[:, None]  # [B, 1, H]
        elif window <= num_generated:  # the newest rows only
            rows = input_ids[:, -window:].view(-1, num_codebooks, window).transpose(1, 2)  # [B, window, C]
            inputs_embeds = self.embed_audio_rows(rows)  # [B, window, H]
        else:  # without a cache: the whole prompt again, then every row
            grid = input_ids.view(-1, num_codebooks, input_ids.shape[1])  # [B, C, L + n]
            rows = grid[:, :, audio_prompt_length:].transpose(1, 2)  # [B, n, C]: rows as emitted
            prompt = self.build_inputs_embeds(grid[:, 0, :audio_prompt_length], audio_input_ids, audio_input_ids_mask)
            inputs_embeds = torch.cat([prompt, self.embed_audio_rows(rows).to(prompt.dtype)], dim=1)[:, -window:]
        model_inputs["input_ids"] = None
        model_inputs["inputs_embeds"] = inputs_embeds
        return model_inputs


__all__ = [
    "HiggsAudioV3DelayPatternLogitsProcessor",
    "HiggsAudioV3GenerationMixin",
    "HiggsAudioV3GenerationOutput",
    "HiggsAudioV3SeededSampler",
    "HiggsAudioV3StoppingCriteria",
    "counter_uniform",
]
