# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Delay-pattern generation for Higgs Audio v3 inside transformers' `GenerationMixin`.

We do not fork `GenerationMixin._sample`. As in MusicGen and Dia, the codebook axis goes through the stock loop:
batch row `b` becomes rows `b * C + c` of `input_ids` (the prompt, then the codes of codebook `c`), the model's logits
are `[B * C, positions, codebook_size]` (its one layout), the stock loop picks one code per row. Ours are small pieces
around it: `prepare_inputs_for_generation` (the fused embedding of the previous row), the delay window's BOC, the
sampling of `sampling_higgs_v3` (seeded per sequence; the stock loop runs greedy over its one-hot scores) and the end
of speech (`delay_higgs_v3.speech_end_row`). `generate` checks its arguments once, at its entry; the per-step path
checks nothing, loops over no rows or codebooks and reads nothing from the device. Step `s` (0: the prefill) emits
row `s` of the delayed matrix pictured in `delay_higgs_v3`.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import (
    AttentionInterface, Cache, GenerationConfig, GenerationMixin, LogitsProcessor, LogitsProcessorList,
    StoppingCriteria,
)
from transformers.masking_utils import AttentionMaskInterface, eager_mask
from transformers.generation.stopping_criteria import EosTokenCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer
from transformers.utils import ModelOutput, logging

from .audio_io_higgs_v3 import audio_html
from .compat_higgs_v3 import CACHE_KWARG
from .delay_higgs_v3 import codes_problem, speech_finished, speech_rows
from .sampling_higgs_v3 import HiggsAudioV3SeededSampler, draw_seed, sampling_problems, sampling_warpers, seed_problem


logger = logging.get_logger(__name__)

MAX_NEW_TOKENS: int = 2048
"""The official server's limit of generated rows (about 82 s of audio); the default of `max_new_tokens`."""
MAX_POSITIONS: int = 4096
"""The official server's limit on one request's positions, prompt plus generated rows (`generate(max_positions=)`)."""
LOW_TEMPERATURE: float = 0.5
"""Below it `generate` warns that the model may never end: Higgs Audio users report temperature 0.3 running to the
limit on every request where 1.0 ends (boson-ai/higgs-audio#151) and temperatures below 1 looping on vLLM (#126)."""


def default_generation_config(config) -> GenerationConfig:
    """The official server's generation defaults, their one home (the model's `generation_config`, the converter's
    `generation_config.json`): sampling at temperature 1.0 and nothing else (top-k and top-p written out as off, so no
    reader falls back to a library default such as a top-k of 50), up to `MAX_NEW_TOKENS` rows."""
    return GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=MAX_NEW_TOKENS,
                            use_cache=True, bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                            pad_token_id=config.pad_token_id)


# ------------------------------------------------------------------------------------- batch invariance
# A row's numbers must not depend on the rows beside it. Two things made them (docs/RELIABILITY.md, "Batch
# invariance"): a GEMM rounds a row by the call's row count (MKL: 1, 2, 3 and, threaded, 5-7 and 9-11 rows each
# differently from 4, 8, 12 or 16 and more), and attention reduces over a key axis whose left padding shifts the
# reduction. Under `batch_invariant` a linear's rows, when fewer than `INVARIANT_ANY_ROWS`, are padded to a multiple
# of `INVARIANT_ROW_MULTIPLE`, and attention is `_invariant_attention`.
INVARIANT_ROW_MULTIPLE: int = 4
INVARIANT_ANY_ROWS: int = 16
INVARIANT_ATTENTION: str = "higgs_v3_batch_invariant"
_INVARIANT_CHUNK_ELEMENTS: int = 1 << 24  # elements of one `[B, H, queries, keys, head_dim]` product


def _invariant_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Eager attention whose sums over keys run in order (`cumsum`; at a decode step a one-row `@`, which MKL sums in
    order too): masked keys (left padding, empty static-cache slots) add exact zeros, so a row gets the same numbers
    with any padding; `q . k` sums over `head_dim` per key. query `[B, H, Q, D]`, key / value `[B, H_kv, T, D]`, the
    eager additive mask `[B, 1, Q, T]`."""
    key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)  # [B, H, T, D]
    value = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)
    chunk = max(1, _INVARIANT_CHUNK_ELEMENTS // key.numel())  # queries per product (decode steps: one chunk)
    outputs = []
    for start in range(0, query.shape[2], chunk):  # the prefill's queries in chunks; no loop over rows
        scores = (query[:, :, start:start + chunk, None].float() * key[:, :, None].float()).sum(-1)
        scores = scores * scaling  # [B, H, q, T]
        if attention_mask is not None:
            scores = scores + attention_mask[:, :, start:start + chunk, :key.shape[2]]
        weights = torch.exp(scores - scores.amax(-1, keepdim=True))
        weights = weights / weights.cumsum(-1)[..., -1:]
        outputs.append(weights @ value.float() if query.shape[2] == 1 else  # a decode step: one row, sums in order
                       (weights[..., None] * value[:, :, None].float()).cumsum(-2)[..., -1, :])  # [B, H, q, D]
    return torch.cat(outputs, dim=2).to(query.dtype).transpose(1, 2).contiguous(), None


AttentionInterface.register(INVARIANT_ATTENTION, _invariant_attention)
AttentionMaskInterface.register(INVARIANT_ATTENTION, eager_mask)


def _pad_rows(module, args):
    """Forward pre-hook of a linear: fewer than `INVARIANT_ANY_ROWS` rows padded with zeros to a multiple of
    `INVARIANT_ROW_MULTIPLE` (the shape is kept on the module for `_unpad_rows`)."""
    features = args[0]
    rows = features.numel() // features.shape[-1]
    missing = -rows % INVARIANT_ROW_MULTIPLE if rows < INVARIANT_ANY_ROWS else 0
    module.__dict__["_invariant_shape"] = features.shape[:-1] if missing else None  # none left from a call that raised
    if missing == 0:
        return None
    return (F.pad(features.reshape(rows, features.shape[-1]), (0, 0, 0, missing)), *args[1:])


def _unpad_rows(module, args, output):
    """Forward hook of a linear: the padded rows dropped, the input's shape back."""
    shape = module.__dict__.pop("_invariant_shape", None)
    return None if shape is None else output[:shape.numel()].reshape(*shape, output.shape[-1])


@contextlib.contextmanager
def invariant_numerics(model):
    """Within it, `model`'s rows get the same numbers in any batch and with any padding: its linears on padded rows
    (`_pad_rows`), its attention `_invariant_attention` (`generate(batch_invariant=True)` runs its loop so). Measured
    on CPU float32 (MKL); see docs/RELIABILITY.md for where it holds."""
    previous = model.config._attn_implementation
    modules = [module for name, module in model.named_modules() if not name.startswith("codec")]
    handles = [hook for linear in modules if isinstance(linear, torch.nn.Linear) for hook in (
        linear.register_forward_pre_hook(_pad_rows), linear.register_forward_hook(_unpad_rows))]
    model.config._attn_implementation = INVARIANT_ATTENTION
    try:
        yield model
    finally:
        model.config._attn_implementation = previous
        for handle in handles:
            handle.remove()


# Generation options that have no meaning for audio codes, with the value that means "off".
_UNSUPPORTED_OPTIONS: dict[str, object] = {
    "num_beams": 1, "num_beam_groups": 1, "num_return_sequences": 1, "penalty_alpha": None, "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0,
    "bad_words_ids": None, "force_words_ids": None, "sequence_bias": None, "guidance_scale": None, "typical_p": 1.0,
    "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "min_length": 0, "prompt_lookup_num_tokens": None,
    "suppress_tokens": None, "begin_suppress_tokens": None, "forced_bos_token_id": None, "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None, "watermarking_config": None, "token_healing": False, "dola_layers": None,
}
_UNSUPPORTED_ARGUMENTS = ("assistant_model", "prefix_allowed_tokens_fn", "negative_prompt_ids", "custom_generate")
_SUPPORTED = (
    "greedy decoding (do_sample=False) or sampling (do_sample=True) with temperature, top_k, top_p and min_p applied "
    "per codebook; max_new_tokens (audio rows); min_new_tokens (no end of speech before that row); seed; streamer; "
    "use_cache / cache_implementation; logits_processor; stopping_criteria; output_scores / output_logits"
)


@dataclass
class HiggsAudioV3GenerationOutput(ModelOutput):
    r"""
    Output of [`HiggsAudioV3ForConditionalGeneration.generate`] with `return_dict_in_generate=True`.

    sequences (`[batch, rows, num_codebooks]`): the delayed rows as generated, padded with EOC after a sequence ended.
    lengths (`[batch]`): valid rows per sequence (T + num_codebooks - 1 for T frames when it finished).
    finished (`[batch]`): whether each sequence ended by itself (EOC and countdown) before `max_new_tokens`; `False`
        is the model's known runaway failure, cut at the limit.
    audio_codes (`[batch, frames, num_codebooks]`): the de-delayed codes, every code >= BOC replaced by 0.
    audio_code_lengths (`[batch]`): valid frames per sequence, `max(lengths - (num_codebooks - 1), 0)`.
    audio (`list[torch.FloatTensor]`, *optional*): one 1-D waveform per sequence at `sampling_rate`, when the
        model has a codec and `output_audio` is not False. In a notebook the output shows as one player per sequence.
    scores / logits (`tuple[torch.FloatTensor]`, *optional*): per step, `[batch, num_codebooks, codebook_size]`.
    cache (`Cache`, *optional*; `past_key_values` on transformers 5.5): the KV cache after the last step, batch `batch`
        (one row per sequence, not per codebook), as every `return_dict_in_generate=True` output of transformers.
    sampling_rate (`int`, an attribute): the audio's samples per second (`config.sampling_rate`), with `audio`.
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
    if CACHE_KWARG == "cache":  # the field's name is the installed transformers' (`compat_higgs_v3`)
        cache: Cache | None = None
    else:
        past_key_values: Cache | None = None
    sampling_rate = None  # an attribute, not a key (a pipeline splits every key of a batch by rows)

    def _repr_html_(self) -> str | None:
        if self.audio is None or self.sampling_rate is None:
            return None  # the plain repr
        cut = [] if self.finished is None else [i for i, done in enumerate(self.finished.tolist()) if not done]
        notes = [f"Sequence(s) {', '.join(map(str, cut))} did not end: cut at max_new_tokens (the model's runaway "
                 "failure, usually a silent tail). Try another seed or a shorter text."] if cut else []
        labels = [f"Sequence {i}" for i in range(len(self.audio))]
        return audio_html("Generated audio", self.audio, self.sampling_rate, labels=labels, notes=notes)


# ---------------------------------------------------------------------------------------------- per-step pieces
class HiggsAudioV3DelayPatternLogitsProcessor(LogitsProcessor):
    r"""Forces BOC into the codebooks that have not started yet: at step `s < C - 1`, every codebook `c > s`.

    `input_ids` is the stock loop's `[batch * C, prompt_length + s]`; `scores` is `[batch * C, codebook_size]`.
    """

    def __init__(self, num_codebooks: int, boc_token_id: int, prompt_length: int):
        self.num_codebooks, self.boc_token_id, self.prompt_length = num_codebooks, boc_token_id, prompt_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return self.at_step(scores, input_ids.shape[1] - self.prompt_length)  # Python int from a shape: no host sync

    def at_step(self, scores: torch.FloatTensor, step: int | torch.LongTensor) -> torch.FloatTensor:
        """`step`: every row's (an int), or each row's own `[batch * C]` (a decode session's rows, at any step)."""
        if isinstance(step, int) and step >= self.num_codebooks - 1:
            return scores
        codebook = torch.arange(scores.shape[0], device=scores.device) % self.num_codebooks  # [B*C]
        forced = torch.full_like(scores, -float("inf"))
        forced[:, self.boc_token_id] = 0.0
        return torch.where((codebook > step)[:, None], forced, scores)


class HiggsAudioV3MinNewTokensLogitsProcessor(LogitsProcessor):
    r"""`min_new_tokens` for speech: no end of speech before row `min_new_tokens`. Speech ends where codebook 0 emits
    EOC (`delay_higgs_v3.speech_end_row`), so at every step `s < min_new_tokens` codebook 0's EOC gets `-inf` (as
    transformers' `MinNewTokensLengthLogitsProcessor` bans EOS): the earliest end is row `max(min_new_tokens, C)`, and a
    finished sequence has at least `min_new_tokens + C - 1` rows. The other codebooks are untouched.

    `input_ids` is the stock loop's `[batch * C, prompt_length + s]`; `scores` is `[batch * C, codebook_size]`.
    """

    def __init__(self, num_codebooks: int, eoc_token_id: int, prompt_length: int, min_new_tokens: int):
        self.num_codebooks, self.eoc_token_id = num_codebooks, eoc_token_id
        self.prompt_length, self.min_new_tokens = prompt_length, min_new_tokens

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return self.at_step(scores, input_ids.shape[1] - self.prompt_length)  # Python int from a shape: no host sync

    def at_step(self, scores: torch.FloatTensor, step: int | torch.LongTensor,
                min_new_tokens: torch.LongTensor | None = None) -> torch.FloatTensor:
        """`step` (and `min_new_tokens`): every row's ints, or each row's own `[batch * C]` (a decode session's)."""
        least = self.min_new_tokens if min_new_tokens is None else min_new_tokens
        if isinstance(step, int) and isinstance(least, int) and step >= least:
            return scores
        banned = torch.zeros_like(scores, dtype=torch.bool)
        banned[:: self.num_codebooks, self.eoc_token_id] = torch.as_tensor(step < least)[:: self.num_codebooks] if (
            isinstance(step, torch.Tensor)) else True  # codebook 0 of every sequence (still before its least row)
        return scores.masked_fill(banned, -float("inf"))


class HiggsAudioV3StoppingCriteria(StoppingCriteria):
    r"""The end of speech (`delay_higgs_v3.speech_end_row`) one column per step: a sequence is done at step `t` when
    codebook 0 emitted EOC at row `t - (C - 2)` (or earlier) and that row is at least `C`. The result is ORed into
    `ended` `[batch, C]`, whose flat view `done` is the stock loop's `[batch * C]`: three tensor ops, no countdown.
    `eos_token_id` is EOC because the stock loop pads finished rows only when a criterion has one."""

    def __init__(self, batch_size: int, num_codebooks: int, eoc_token_id: int, prompt_length: int,
                 device: torch.device):
        self.num_codebooks = num_codebooks
        self.eos_token_id = eoc_token_id
        self.prompt_length = prompt_length
        self.ended = torch.zeros(batch_size, num_codebooks, dtype=torch.bool, device=device)
        self.done = self.ended.view(-1)  # [B*C], updated in place with `ended`

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor | None = None, **kwargs
                 ) -> torch.BoolTensor:
        lag = self.num_codebooks - 2
        row = input_ids.shape[1] - self.prompt_length - 1 - lag  # a row whose EOC would end speech now (Python int)
        if row >= self.num_codebooks:  # EOC counts from row C on (spec: not during the delay window)
            column = input_ids.shape[1] - 1 - lag
            self.ended |= input_ids[:: self.num_codebooks, column : column + 1] == self.eos_token_id  # [B, 1] -> [B, C]
        return self.done


class _RowStreamer(BaseStreamer):
    """Hands the user's streamer one `[batch, num_codebooks]` row per step (not the stock loop's prompt, `[B * C]`)."""

    def __init__(self, streamer: BaseStreamer, num_codebooks: int):
        self.streamer, self.num_codebooks, self.prompt_seen = streamer, num_codebooks, False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.streamer.put(value.reshape(-1, self.num_codebooks))

    def end(self) -> None:
        self.streamer.end()


class HiggsAudioV3ProgressBar(LogitsProcessor):
    """`generate(..., monitor_progress=True)`: a tqdm bar of the rows generated, out of `max_new_tokens`. It counts
    calls (one per step) and reads nothing from the device: the scores pass through untouched."""

    def __init__(self, total: int):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc="Generating audio rows", unit="row")

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.bar.update(1)
        return scores

    def close(self) -> None:
        self.bar.close()


def _audio_code_offsets(batch_size: int, num_codebooks: int, codebook_size: int, device) -> torch.LongTensor:
    """`[batch * C, 1]`: `c * codebook_size` for stock-loop row `b * C + c` (its codes' offset in the fused
    embedding), computed once per call and added to the newest column each step."""
    codebook = torch.arange(batch_size * num_codebooks, device=device) % num_codebooks
    return (codebook * codebook_size)[:, None]


# The stock loop's view of the sampling fields: the values its validation reads as "not set" (transformers' global
# defaults), so that it builds no warper and warns about no sampling flag, whatever the model's generation config says.
_STOCK_SAMPLING_FIELDS: dict[str, object] = {"temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": None}


# ---------------------------------------------------------------------------------------------- the mixin
def _left_aligned(input_ids, attention_mask) -> tuple:
    """Right-padded prompts (a pipeline's tokenizer pads on the side its repo files save, the original's right) moved
    to the left, where the prompt check and the decode step expect them; anything else as given (then validated)."""
    if not (isinstance(input_ids, torch.Tensor) and isinstance(attention_mask, torch.Tensor)
            and input_ids.dim() == 2 and attention_mask.shape == input_ids.shape and input_ids.shape[1] > 0
            ) or bool(attention_mask[:, -1].all()):  # an empty prompt goes on to the validator, which names it
        return input_ids, attention_mask
    trailing = (attention_mask.flip(-1).long().cumsum(-1) == 0).sum(-1, keepdim=True)  # [B, 1] right padding
    index = (torch.arange(input_ids.shape[1], device=input_ids.device) - trailing) % input_ids.shape[1]  # [B, L]
    return input_ids.gather(1, index), attention_mask.gather(1, index)


def _argument_problems(input_ids, attention_mask, generation_config, logits_processor, stopping_criteria, streamer,
                       seed, max_positions, reference_audio, reference_audio_lengths, kwargs: dict,
                       batch_invariant=False) -> list[str]:
    """What is wrong with the types and shapes of `generate`'s arguments, one sentence each naming the argument (the
    stock loop would fail later with an `AttributeError` or a shape error)."""
    problems = [f"generate() does not support `{name}` for audio codes. Supported: {_SUPPORTED}."
                for name in _UNSUPPORTED_ARGUMENTS if kwargs.get(name) is not None]
    if kwargs.get("inputs") is not None or kwargs.get("inputs_embeds") is not None:
        problems.append("generate() takes `input_ids` (from HiggsAudioV3Processor), not `inputs`/`inputs_embeds`.")
    if kwargs.get("max_length") is not None:
        problems.append(f"generate() counts audio rows with `max_new_tokens`; got max_length={kwargs['max_length']}. "
                        "Pass max_new_tokens instead.")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        problems.append(f"generate() needs input_ids of shape [batch, length], got {_shape(input_ids)}.")
    elif input_ids.shape[1] == 0:
        problems.append("generate() needs at least one prompt position; build the prompt with HiggsAudioV3Processor.")
    elif attention_mask is not None and _shape(attention_mask) != tuple(input_ids.shape):
        problems.append(f"attention_mask has shape {_shape(attention_mask)}; it must match input_ids "
                        f"{tuple(input_ids.shape)}.")
    if generation_config is not None and not isinstance(generation_config, GenerationConfig):
        problems.append(f"generation_config must be a transformers GenerationConfig, got "
                        f"{type(generation_config).__name__}.")
    for name, given in (("logits_processor", logits_processor), ("stopping_criteria", stopping_criteria)):
        if given is not None and (not isinstance(given, (list, tuple)) or not all(callable(item) for item in given)):
            problems.append(f"{name} must be a list of callables (a {name.title().replace('_', '')}List), got "
                            f"{given!r:.80}.")
    if streamer is not None and not all(callable(getattr(streamer, name, None)) for name in ("put", "end")):
        problems.append("streamer must have put() and end() (a transformers BaseStreamer, e.g. "
                        f"model.audio_streamer()), got {type(streamer).__name__}.")
    if max_positions is not None and (isinstance(max_positions, bool) or not isinstance(max_positions, int)
                                      or max_positions < 1):
        problems.append(f"max_positions must be a positive number of positions or None, got {max_positions!r}.")
    if not isinstance(batch_invariant, bool):
        problems.append(f"batch_invariant must be True or False, got {batch_invariant!r}.")
    limit = kwargs.get("max_new_tokens", getattr(generation_config, "max_new_tokens", None))  # the one that counts
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        problems.append(f"max_new_tokens must be a positive number of audio rows, got {limit!r}.")
    least = kwargs.get("min_new_tokens", getattr(generation_config, "min_new_tokens", None))
    if least is not None and (isinstance(least, bool) or not isinstance(least, int) or least < 0):
        problems.append(f"min_new_tokens must be a number of audio rows >= 0 (no end of speech before that row) or "
                        f"None, got {least!r}.")
    if kwargs.get("do_sample") is not None and not isinstance(kwargs["do_sample"], bool):
        problems.append(f"do_sample must be True or False, got {kwargs['do_sample']!r}.")
    if reference_audio_lengths is not None and reference_audio is None:
        problems.append("reference_audio_lengths was given without reference_audio; pass the processor's whole "
                        "output (model.generate(**inputs)).")
    return problems + _seed_problems(seed, input_ids.shape[0] if not problems else None)


def _shape(value) -> object:
    """How a problem names an argument: a tensor's shape as a tuple, None as None, anything else its type's name."""
    return tuple(value.shape) if isinstance(value, torch.Tensor) else value and type(value).__name__


def _seed_problems(seed, batch_size: int | None) -> list[str]:
    """`seed`: None, an int, or one int per sequence (a list, an array, a `[batch]` tensor), each in the seed range."""
    values = seed.tolist() if hasattr(seed, "tolist") else seed  # numpy / torch integers and arrays
    if seed is None or (isinstance(values, int) and not isinstance(values, bool)):
        return [problem for problem in [seed is not None and seed_problem(values)] if problem]
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return [f"seed must be an int or a list of ints (one per sequence), got {seed!r:.80}."]
    if batch_size is not None and len(values) != batch_size:
        return [f"seed must be an int or one seed per sequence ({batch_size}), got shape {(len(values),)}."]
    return [problem for problem in (seed_problem(value, "every seed") for value in values) if problem][:1]


def _option_problems(generation_config: GenerationConfig) -> list[str]:
    """The merged generation options that have no meaning for audio codes, and sampling fields outside the spec's
    ranges."""
    problems = [f"generate() does not support {name}={value!r} for audio codes (it has no meaning for the 8-codebook "
                f"delay pattern). Supported: {_SUPPORTED}."
                for name, off in _UNSUPPORTED_OPTIONS.items()
                for value in [getattr(generation_config, name, off)] if value is not None and value != off]
    return problems + (sampling_problems(generation_config) if generation_config.do_sample else [])


class HiggsAudioV3GenerationMixin(GenerationMixin):
    r"""`generate` for Higgs Audio v3, around transformers' stock loop over `B * C` rows (see the module docstring)."""

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
        max_positions: int | None = MAX_POSITIONS,
        monitor_progress: bool = False,
        reference_audio: torch.Tensor | None = None,
        reference_audio_lengths: torch.LongTensor | None = None,
        batch_invariant: bool = False,
        **kwargs,
    ) -> HiggsAudioV3GenerationOutput | torch.LongTensor | list[torch.FloatTensor]:
        r"""
        Generate delayed code rows (and waveforms) for a batch of prompts built by `HiggsAudioV3Processor`.

        Args:
            input_ids (`[batch, length]`) / audio_input_ids / audio_input_ids_mask / attention_mask: left-padded
                prompts (right-padded rows are left-aligned) and their delayed reference rows, as in `forward` (the
                mask all ones when omitted).
            reference_audio / reference_audio_lengths: the processor's reference clips, each encoded once before the
                loop into the rows marked for it (`merge_reference_clips`): the speech of `encode_reference(clip)`.
            generation_config / kwargs: `do_sample`, `temperature`, `top_k`, `top_p`, `min_p` (unset: nothing applied),
                `max_new_tokens` (audio rows, default 2048), `min_new_tokens` (no end of speech before that row:
                codebook 0's EOC banned until then), `use_cache`, `cache_implementation`,
                `return_dict_in_generate`, `output_scores`, `output_logits`; beam search and the like are refused.
            streamer: receives each new row as a `[batch, num_codebooks]` tensor (`put`), then `end()`.
            seed: `int` or one per sequence (list or `[batch]` tensor), in `[0, 2**62)`: a sequence's draws are the same
                alone or in any batch (its codes too with `batch_invariant`). Default: drawn from torch's global RNG.
                Ignored for greedy decoding.
            output_audio: decode waveforms with the codec (default: when `return_dict_in_generate` and a codec);
                `output_audio=True` without `return_dict_in_generate` returns the waveforms alone (as CSM's).
            max_positions: the most positions of one request, prompt plus rows (default `MAX_POSITIONS`): a longer
                prompt is refused, a `max_new_tokens` that would pass it is clipped with a warning (against the longest
                prompt of a batch). None lifts the limit.
            monitor_progress (`bool`, defaults to False): show a tqdm bar of the rows generated.
            batch_invariant (`bool`, defaults to False): a sequence's numbers do not depend on the batch beside it or
                its padding (`invariant_numerics`; measured bit-identical on CPU float32, 1.2-1.7x slower there; see
                docs/RELIABILITY.md): with a seed, the same codes and audio alone or in any batch, at any length.

        Returns `HiggsAudioV3GenerationOutput` when `return_dict_in_generate=True`, else one 1-D waveform per sequence
        with `output_audio=True`, else the delayed rows `[batch, rows, num_codebooks]` (EOC after a sequence finished).

        ```python
        >>> out = model.generate(**processor("Hello there."), seed=0, return_dict_in_generate=True)  # doctest: +SKIP
        >>> out.finished, out.audio[0].shape  # doctest: +SKIP
        ```
        """
        if output_audio:
            self._require_codec("output_audio=True")
        input_ids, attention_mask = _left_aligned(input_ids, attention_mask)
        generation_config, model_kwargs, warpers, return_dict, min_new_tokens = self._audio_generation_config(
            input_ids, attention_mask, audio_input_ids, audio_input_ids_mask, generation_config, logits_processor,
            stopping_criteria, streamer, seed, max_positions, reference_audio, reference_audio_lengths, kwargs,
            batch_invariant,
        )
        if reference_audio is not None:  # the clips encoded once, before the loop
            audio_input_ids = self.merge_reference_clips(
                audio_input_ids, reference_audio, reference_audio_lengths, audio_input_ids_mask
            )
            audio_input_ids_mask = None
        num_codebooks, (batch_size, prompt_length) = self.config.num_codebooks, input_ids.shape
        processors, stopper = self._audio_generation_pieces(warpers, seed, batch_size, prompt_length, input_ids.device,
                                                            min_new_tokens)
        progress = HiggsAudioV3ProgressBar(generation_config.max_new_tokens) if monitor_progress else None
        # *** Higgs v3 specific: the stock loop runs over B * C rows, row b * C + c holding codebook c ***
        invariance = invariant_numerics(self) if batch_invariant else contextlib.nullcontext()
        try:
            with invariance:
                outputs = super().generate(
                    input_ids=input_ids.repeat_interleave(num_codebooks, dim=0),  # [B * C, L]
                    attention_mask=attention_mask if attention_mask is not None else torch.ones_like(input_ids),
                    audio_input_ids=audio_input_ids,
                    audio_input_ids_mask=audio_input_ids_mask,
                    audio_prompt_length=prompt_length,
                    audio_code_offsets=_audio_code_offsets(
                        batch_size, num_codebooks, self.codebook_size, input_ids.device),
                    generation_config=generation_config,
                    logits_processor=LogitsProcessorList(
                        [*(logits_processor or []), *processors, *([progress] if progress is not None else [])]
                    ),
                    stopping_criteria=StoppingCriteriaList([*(stopping_criteria or []), stopper]),
                    streamer=_RowStreamer(streamer, num_codebooks) if streamer is not None else None,
                    **model_kwargs,
                )
        finally:
            if progress is not None:
                progress.close()
        # *** end Higgs v3 specific ***
        return self._audio_generation_output(outputs, batch_size, prompt_length, return_dict, output_audio,
                                             batch_invariant)

    # -------------------------------------------------------------------------------------- generate, step by step
    def _audio_generation_config(
        self, input_ids, attention_mask, audio_input_ids, audio_input_ids_mask, generation_config, logits_processor,
        stopping_criteria, streamer, seed, max_positions, reference_audio, reference_audio_lengths, kwargs: dict,
        batch_invariant: bool = False,
    ) -> tuple[GenerationConfig, dict, list[LogitsProcessor] | None, bool, int | None]:
        """THE validator of `generate`'s arguments: each is checked once, every problem named in one `ValueError`
        (the arguments' types and shapes first; then the merged options, the positions, the prompts and the reference
        rows). Returns `(config for the stock loop, model kwargs, the sampling warpers (None for greedy decoding),
        whether the caller asked for a dict output, min_new_tokens)`."""
        problems = _argument_problems(input_ids, attention_mask, generation_config, logits_processor,
                                      stopping_criteria, streamer, seed, max_positions, reference_audio,
                                      reference_audio_lengths, kwargs, batch_invariant)
        if not problems:
            generation_config, model_kwargs, problems = self._merged_generation_config(generation_config, kwargs)
        if not problems:
            problems = _option_problems(generation_config) or [
                *self._limit_positions(generation_config, input_ids.shape[1], max_positions),
                *self._prompt_problems(input_ids, attention_mask),
                *self._reference_row_problems(input_ids, audio_input_ids, audio_input_ids_mask, reference_audio),
            ]
        if problems:
            raise ValueError(" ".join(problems))
        temperature = generation_config.temperature if generation_config.do_sample else None
        if isinstance(temperature, (int, float)) and temperature < LOW_TEMPERATURE:  # refused later if not a number
            logger.warning_once(
                f"temperature={temperature:g} is below {LOW_TEMPERATURE:g}: at low temperatures the "
                "model is reported never to sample its end of speech and to run to max_new_tokens (boson-ai/"
                "higgs-audio#151: 0.3 hit the limit, 1.0 ended). The default, 1.0, is the official server's."
            )
        return_dict, min_new_tokens = generation_config.return_dict_in_generate, generation_config.min_new_tokens
        warpers = sampling_warpers(generation_config) if generation_config.do_sample else None
        # *** Higgs v3 specific: what the stock loop is told, changed here in the open ***
        # Sampling is ours (the warpers above, the seeded draw): the stock loop runs greedy, with no sampling fields
        # (it would build its own warpers, with a hidden top-k of 50, and draw again from the global RNG).
        generation_config.update(do_sample=False, **_STOCK_SAMPLING_FIELDS)
        generation_config.pad_token_id = self.config.audio_eoc_token_id  # finished rows are padded with EOC
        generation_config.eos_token_id = None  # our stopping criterion ends sequences
        generation_config.bos_token_id = None
        generation_config.return_dict_in_generate = True  # our output is read off the stock one
        generation_config.min_new_tokens = None  # ours bans the end of speech (HiggsAudioV3MinNewTokensLogitsProcessor)
        # *** end Higgs v3 specific ***
        return generation_config, model_kwargs, warpers, return_dict, min_new_tokens

    def _merged_generation_config(self, generation_config: GenerationConfig | None, kwargs: dict
                                  ) -> tuple[GenerationConfig, dict, list[str]]:
        """The caller's config (a copy), what it leaves unset from the model's defaults (transformers' rule), then the
        keyword options. Returns `(config, model kwargs, problems)`: options of a type transformers' validation cannot
        compare are a problem."""
        defaults = self.generation_config
        if defaults.max_new_tokens is None:  # a model built from a config, not loaded with its defaults
            defaults = default_generation_config(self.config)
        generation_config = copy.deepcopy(generation_config if generation_config is not None else defaults)
        for name, value in defaults.to_dict().items():
            if not name.startswith("_") and getattr(generation_config, name, 0) is None:
                setattr(generation_config, name, value)
        # Greedy decoding asked for here drops the sampling defaults the caller did not set, so that transformers'
        # validation does not warn about them (e.g. the default top_k=0 under do_sample=False).
        if kwargs.get("do_sample") is False:
            for name in _STOCK_SAMPLING_FIELDS:
                if name not in kwargs:
                    setattr(generation_config, name, None)
        try:
            model_kwargs = generation_config.update(**kwargs)
        except TypeError as error:  # transformers' validation comparing an option of the wrong type
            options = ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if hasattr(generation_config, k))
            return generation_config, {}, [f"generate() options of the wrong type ({options}): {error}."]
        if generation_config.max_new_tokens is None:  # e.g. transformers 5.5's pipeline drops it for max_length
            generation_config.max_new_tokens = defaults.max_new_tokens or MAX_NEW_TOKENS
        return generation_config, model_kwargs, []

    def _limit_positions(self, generation_config: GenerationConfig, prompt_length: int, max_positions: int | None
                         ) -> list[str]:
        """Prompt plus rows within `max_positions`: a prompt that fills it is a problem, a `max_new_tokens` that
        passes it is clipped with a warning; with `max_positions=None`, within the model's position embeddings."""
        if max_positions is None:
            # *** Higgs v3 specific: never beyond the positions the model was built for, even with the limit lifted ***
            embeddings = getattr(self.config.get_text_config(), "max_position_embeddings", None)
            if embeddings is not None and prompt_length + generation_config.max_new_tokens > embeddings:
                return [f"max_new_tokens={generation_config.max_new_tokens} after a {prompt_length}-position prompt "
                        f"passes the model's max_position_embeddings={embeddings}; pass at most "
                        f"{max(embeddings - prompt_length, 0)} (or keep the default max_positions={MAX_POSITIONS})."]
            # *** end Higgs v3 specific ***
            return []
        room = max_positions - prompt_length
        if room < 1:
            return [f"The prompt has {prompt_length} positions, but one request may use at most max_positions="
                    f"{max_positions} (prompt plus generated rows, the official server's limit). Use a shorter "
                    "reference clip or text (processor.synthesize_long splits long text), or pass max_positions=None "
                    "to lift the limit."]
        if generation_config.max_new_tokens > room:
            logger.warning(
                f"max_new_tokens={generation_config.max_new_tokens} after a {prompt_length}-position prompt would pass "
                f"the limit of {max_positions} positions (max_positions, the official server's); generating at most "
                f"{room} rows."
            )
            generation_config.max_new_tokens = room
        return []

    def _prompt_problems(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None) -> list[str]:
        """Rows of `input_ids` that are not left-padded TTS prompts (`<|tts|> ... <|text|> ... <|audio|>`): plain
        tokenizer output would generate sound without a word. One host read per call."""
        config = self.config
        first = attention_mask.long().argmax(-1, keepdim=True) if attention_mask is not None else None  # [B, 1]
        starts = input_ids[:, :1] if first is None else input_ids.gather(1, first)  # [B, 1] first real token
        valid = (
            (starts[:, 0] == config.tts_token_id)
            & (input_ids[:, -1] == config.audio_start_token_id)
            & (input_ids == config.text_token_id).any(-1)
        )  # [B]
        if attention_mask is not None:
            valid &= attention_mask[:, -1].bool()
        if bool(valid.all()):
            return []
        rows = torch.nonzero(~valid).flatten().tolist()
        if bool((input_ids[rows, -1] == config.audio_placeholder_id).any()):
            return [f"input_ids row(s) {rows} end in audio placeholders: they are training examples "
                    "(processor(text=..., audio_target=...), the prompt followed by the target's rows), which "
                    "teacher-force a forward pass; generate takes the prompt alone: processor(text) or "
                    "processor.apply_chat_template(conversation, tokenize=True, return_dict=True)."]
        return [f"input_ids row(s) {rows} are not Higgs Audio v3 speech prompts (<|tts|> ... <|text|> TEXT <|audio|>, "
                "left padded); plain tokenizer output would generate sound without a word. Build the inputs with "
                "HiggsAudioV3Processor: processor(text) or processor.apply_chat_template(conversation, tokenize=True, "
                "return_dict=True) (with a pipeline, pass processor=processor)."]

    def _reference_row_problems(self, input_ids, audio_input_ids, audio_input_ids_mask, reference_audio) -> list[str]:
        """The reference rows against the prompts (one host read each, never per step): integer codes of the model's
        codebooks, rows marked for clips only with `reference_audio`, and one row per placeholder."""
        placeholder = self.config.audio_placeholder_id
        num_placeholders = int((input_ids == placeholder).sum())
        if audio_input_ids is None:
            return [f"input_ids has {num_placeholders} reference placeholder positions (id {placeholder}) but no "
                    "audio_input_ids were given."] if num_placeholders else []
        if not isinstance(audio_input_ids, torch.Tensor) or (audio_input_ids_mask is not None and tuple(
                audio_input_ids_mask.shape) != tuple(audio_input_ids.shape[:-1])):
            return [f"audio_input_ids must be a tensor of delayed reference rows, [rows, {self.config.num_codebooks}] "
                    f"or [batch, rows, {self.config.num_codebooks}] with an audio_input_ids_mask [batch, rows]; got "
                    f"{_shape(audio_input_ids)} and a mask of {_shape(audio_input_ids_mask)}."]
        marked = audio_input_ids == placeholder  # rows of clips (all codebooks), filled by `merge_reference_clips`
        problem = codes_problem(audio_input_ids.masked_fill(marked, 0), self.config.num_codebooks,
                                self.config.codebook_size, "the reference rows (audio_input_ids)")
        if problem is not None:
            return [problem]
        if reference_audio is None and bool(marked.any()):
            return [f"audio_input_ids has rows marked for reference clips (the placeholder id {placeholder}) but no "
                    "reference_audio was given; pass the processor's whole output (model.generate(**inputs)): the "
                    "clips' waveforms are in reference_audio and reference_audio_lengths."]
        num_rows = int(audio_input_ids_mask.sum()) if audio_input_ids_mask is not None else (
            audio_input_ids.numel() // self.config.num_codebooks)
        if num_rows != num_placeholders:
            return [f"input_ids has {num_placeholders} reference placeholder positions (id {placeholder}) but "
                    f"audio_input_ids has {num_rows} rows; each placeholder takes exactly one delayed reference row."]
        return []

    def _audio_generation_pieces(
        self, warpers: list[LogitsProcessor] | None, seed, batch_size: int, prompt_length: int, device: torch.device,
        min_new_tokens: int | None = None,
    ) -> tuple[list[LogitsProcessor], HiggsAudioV3StoppingCriteria]:
        """Our logits processors, run after the user's (the ban of an early end of speech with `min_new_tokens`, the
        warpers (None: greedy), the delay pattern's BOC, the seeded draw), and the end-of-speech criterion."""
        num_codebooks = self.config.num_codebooks
        eoc = self.config.audio_eoc_token_id
        processors = [
            *([HiggsAudioV3MinNewTokensLogitsProcessor(num_codebooks, eoc, prompt_length, min_new_tokens)]
              if min_new_tokens else []),
            *(warpers or []),
            HiggsAudioV3DelayPatternLogitsProcessor(num_codebooks, self.config.audio_boc_token_id, prompt_length),
        ]
        if warpers is not None:  # one seed per sequence (`_seed_problems` checked them); unseeded: drawn once per call
            seeds = torch.as_tensor(draw_seed() if seed is None else seed, device=device).long().expand(batch_size)
            processors.append(HiggsAudioV3SeededSampler(seeds, num_codebooks, prompt_length))
        stopper = HiggsAudioV3StoppingCriteria(batch_size, num_codebooks, eoc, prompt_length, device)
        return processors, stopper

    def _audio_generation_output(
        self, outputs, batch_size: int, prompt_length: int, return_dict: bool, output_audio: bool | None,
        batch_invariant: bool = False,
    ) -> HiggsAudioV3GenerationOutput | torch.LongTensor | list[torch.FloatTensor]:
        """Rows, lengths, flags, codes and waveforms, read off the stock loop's `[B * C, L + R]` sequences (not the
        stopper's state: a loop that undoes its last step, the deferred stop check on MPS, returns a row less)."""
        spec = self.config.audio_spec
        generated = outputs.sequences[:, prompt_length:]  # [B * C, R]
        rows = generated.reshape(batch_size, spec.num_codebooks, -1).transpose(1, 2)  # [B, R, C]
        end_row = spec.speech_end_row(rows[..., 0])  # [B]
        lengths = speech_rows(end_row, spec.num_codebooks, rows.shape[1])
        finished = speech_finished(end_row, spec.num_codebooks, rows.shape[1])
        if not bool(finished.all()):  # once per process (as transformers warns): `finished` flags each one
            logger.warning_once(
                "A sequence reached max_new_tokens without ending (codebook 0 emitted no EOC, or the rows after it did "
                "not fit): this is the model's known runaway failure, usually followed by a silent tail. Every such "
                "sequence is flagged in `finished` (this warning is shown once); consider shorter text chunks or "
                "another seed."
            )
        if not return_dict and not output_audio:
            return rows
        codes, code_lengths = spec.rows_to_codes(rows, lengths)
        if output_audio is None:
            output_audio = getattr(self, "codec", None) is not None
        audio = self.codec.decode_frames(codes, code_lengths, alone=batch_invariant) if output_audio else None
        if not return_dict:  # output_audio=True alone: the waveforms, as CSM's generate returns them
            return audio

        def per_row(steps):
            return None if steps is None else tuple(s.reshape(batch_size, spec.num_codebooks, -1) for s in steps)

        output = HiggsAudioV3GenerationOutput(
            sequences=rows, lengths=lengths, finished=finished, audio_codes=codes, audio_code_lengths=code_lengths,
            audio=audio, scores=per_row(getattr(outputs, "scores", None)),
            logits=per_row(getattr(outputs, "logits", None)), attentions=getattr(outputs, "attentions", None),
            hidden_states=getattr(outputs, "hidden_states", None),
            **{CACHE_KWARG: getattr(outputs, CACHE_KWARG, None)},
        )
        output.sampling_rate = spec.sampling_rate if audio is not None else None
        return output

    # -------------------------------------------------------------------------------------- stock loop hooks
    def _get_stopping_criteria(self, *args, **kwargs) -> StoppingCriteriaList:
        # *** Higgs v3 specific: generate() refills the text eos id from the model's generation config; an
        # end-of-text check can never fire on audio codes, so it is dropped when our criterion is in the list ***
        criteria = super()._get_stopping_criteria(*args, **kwargs)
        if any(isinstance(c, HiggsAudioV3StoppingCriteria) for c in criteria):
            criteria = StoppingCriteriaList([c for c in criteria if not isinstance(c, EosTokenCriteria)])
        # *** end Higgs v3 specific ***
        return criteria

    def prepare_inputs_for_generation(
        self, input_ids: torch.LongTensor, audio_input_ids: torch.LongTensor | None = None,
        audio_input_ids_mask: torch.Tensor | None = None, audio_prompt_length: int | None = None,
        audio_code_offsets: torch.LongTensor | None = None, **kwargs,
    ) -> dict:
        if audio_prompt_length is None:  # not called from our generate(): plain text behaviour
            return super().prepare_inputs_for_generation(input_ids, **kwargs)
        # *** Higgs v3 specific: the stock preparation (cache, positions, masks, slicing) on one text-like view of the
        # rows, codebook 0's; then the embeddings of the positions this step feeds ***
        num_codebooks = self.config.num_codebooks
        model_inputs = super().prepare_inputs_for_generation(input_ids[::num_codebooks], **kwargs)
        window = model_inputs["input_ids"].shape[1]  # positions this step feeds
        num_generated = input_ids.shape[1] - audio_prompt_length
        if num_generated == 0:  # prefill: the prompt, placeholders replaced inside forward
            model_inputs["audio_input_ids"] = audio_input_ids
            model_inputs["audio_input_ids_mask"] = audio_input_ids_mask
            return model_inputs
        if window == 1:  # every step with a cache: the newest row only
            fused = (input_ids[:, -1:] + audio_code_offsets).view(-1, num_codebooks)  # [B, C] fused-embedding rows
            inputs_embeds = self._embed_fused_rows(fused)[:, None]  # [B, 1, H]
        else:  # without a cache: the whole prompt again, then every row (the last `window` positions)
            grid = input_ids.view(-1, num_codebooks, input_ids.shape[1])  # [B, C, L + n]
            rows = grid[:, :, audio_prompt_length:].transpose(1, 2)  # [B, n, C]: rows as emitted
            prompt = self.build_inputs_embeds(grid[:, 0, :audio_prompt_length], audio_input_ids, audio_input_ids_mask)
            inputs_embeds = torch.cat([prompt, self.embed_audio_rows(rows).to(prompt.dtype)], dim=1)[:, -window:]
        model_inputs["input_ids"] = None
        model_inputs["inputs_embeds"] = inputs_embeds
        # *** end Higgs v3 specific ***
        return model_inputs


__all__ = [
    "HiggsAudioV3DelayPatternLogitsProcessor", "HiggsAudioV3GenerationMixin", "HiggsAudioV3GenerationOutput",
    "HiggsAudioV3MinNewTokensLogitsProcessor", "HiggsAudioV3ProgressBar", "HiggsAudioV3StoppingCriteria",
    "LOW_TEMPERATURE", "MAX_NEW_TOKENS", "MAX_POSITIONS", "default_generation_config",
]
