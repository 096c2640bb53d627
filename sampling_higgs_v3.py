# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Sampling for Higgs Audio v3 (spec §7), with per-sequence seeds.

Per codebook, over all 1026 entries: fp32 logits -> temperature -> top-k -> top-p (-> min-p) -> softmax -> draw.
The warpers are transformers' own (`sampling_warpers` builds them in that order; an unset field applies nothing, so
no library default such as a top-k of 50 slips in). The draw is `HiggsAudioV3SeededSampler`: inverse-CDF sampling
with a counter-based uniform keyed by (sequence seed, step, codebook) (`counter_uniform`), so a sequence with a given
seed gets the same codes alone or inside any batch, without a generator object per sequence and without a host sync.
"""

from __future__ import annotations

import operator

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)


SEED_LIMIT: int = 2**62
"""Seeds are integers in `[0, SEED_LIMIT)` (they key the counter-based sampler; see `counter_uniform`)."""


def seed_problem(seed, name: str = "seed") -> str | None:
    """None if `seed` is an integer (Python, numpy, 0-d tensor) in `[0, SEED_LIMIT)`, else the sentence naming it: THE
    seed rule (`check_seed` raises it, `generate` collects it)."""
    try:
        value = operator.index(seed) if not isinstance(seed, bool) else None
    except TypeError:
        value = None
    if value is None or not 0 <= value < SEED_LIMIT:
        return f"{name} must be an integer in [0, 2**{SEED_LIMIT.bit_length() - 1}), got {seed!r}."
    return None


def check_seed(seed, name: str = "seed") -> int:
    """`seed` as an `int` if `seed_problem` finds nothing wrong with it, else its `ValueError`."""
    problem = seed_problem(seed, name)
    if problem is not None:
        raise ValueError(problem)
    return operator.index(seed)


def draw_seed() -> int:
    """A seed from torch's global RNG (so `torch.manual_seed` makes unseeded runs repeatable)."""
    return int(torch.randint(0, SEED_LIMIT, (), dtype=torch.long))


RETRY_SEED_STRIDE: int = 2**40
"""Retry `k` of a take with seed `s` uses `retry_seed(s, k)`: far from every chunk seed `s + i` of the same request."""


def retry_seed(seed: int, attempt: int) -> int:
    """The seed of retry `attempt` (1, 2, ...) of a take seeded `seed`: `(seed + attempt * 2**40) % 2**62`, a pure
    function, so a rerun redoes the same takes with the same seeds (and gets the same audio)."""
    return (seed + attempt * RETRY_SEED_STRIDE) % SEED_LIMIT


def sampling_problems(generation_config: GenerationConfig) -> list[str]:
    """The sampling fields transformers' warpers would take but the spec does not (a `top_p` of 0 or NaN, a `min_p`
    outside [0, 1]), one sentence each."""
    top_p, min_p = generation_config.top_p, generation_config.min_p
    problems = []
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        problems.append(f"top_p must be a number in (0, 1] (1.0 keeps every code), got {top_p!r}.")
    if min_p is not None and (isinstance(min_p, bool) or not isinstance(min_p, (int, float)) or not 0 <= min_p <= 1):
        problems.append(f"min_p must be a number in [0, 1], got {min_p!r}.")
    return problems


def sampling_warpers(generation_config: GenerationConfig) -> list[LogitsProcessor]:
    """transformers' own warpers for the sampling fields, in the spec's order (see above); an unset field (None) or
    its neutral value applies nothing. The caller checked `sampling_problems`; the warpers refuse other bad values."""
    temperature, top_k, top_p, min_p = (
        generation_config.temperature, generation_config.top_k, generation_config.top_p, generation_config.min_p
    )
    warpers: list[LogitsProcessor] = []
    if temperature is not None and temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k is not None and top_k != 0:
        warpers.append(TopKLogitsWarper(top_k=top_k, min_tokens_to_keep=1))
    if top_p is not None and top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1))
    if min_p is not None:
        warpers.append(MinPLogitsWarper(min_p=min_p, min_tokens_to_keep=1))
    return warpers


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
    r"""The draw of sampling, after transformers' warpers (see above). Returns scores that are 0 at the drawn code and
    -inf elsewhere, so the stock loop's argmax picks it."""

    block_steps: int = 256
    """Steps whose uniforms are computed together: memory `[block_steps, B*C]` floats, whatever `max_new_tokens` is."""

    def __init__(self, seeds: torch.LongTensor, num_codebooks: int, prompt_length: int):
        self.prompt_length = prompt_length
        self.num_codebooks = num_codebooks
        self.row_seeds = seeds.repeat_interleave(num_codebooks)[None, :]  # [1, B*C]
        self.codebook = torch.arange(num_codebooks, device=seeds.device).repeat(seeds.shape[0])[None, :]  # [1, B*C]
        self.first_step = -self.block_steps  # the block of `uniforms` (none yet)
        self.uniforms: torch.Tensor | None = None  # [block_steps, B*C]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        step = input_ids.shape[1] - self.prompt_length  # Python int from a shape: no host sync
        if not 0 <= step - self.first_step < self.block_steps:  # the next block, once every `block_steps` steps
            self.first_step = step - step % self.block_steps
            steps = torch.arange(self.first_step, self.first_step + self.block_steps, device=self.row_seeds.device)
            self.uniforms = counter_uniform(self.row_seeds, steps[:, None], self.codebook, self.num_codebooks)
        drawn = self.draw(scores, self.uniforms[step - self.first_step])  # [B*C, 1]
        return torch.full_like(scores, -float("inf")).scatter_(1, drawn, 0.0)

    @staticmethod
    def draw(scores: torch.FloatTensor, uniform: torch.Tensor) -> torch.LongTensor:
        """The inverse-CDF draw of each row `[B*C, V]` with its uniform `[B*C]` (`counter_uniform`): `[B*C, 1]`."""
        cdf = torch.softmax(scores.float(), dim=-1).cumsum(dim=-1)  # [B*C, V]
        target = (uniform[:, None] * cdf[:, -1:]).contiguous()  # [B*C, 1], strictly below the total mass
        return torch.searchsorted(cdf, target, right=True).clamp_(max=scores.shape[-1] - 1)  # first cdf > target


__all__ = [
    "RETRY_SEED_STRIDE", "SEED_LIMIT", "HiggsAudioV3SeededSampler", "check_seed", "counter_uniform", "draw_seed",
    "retry_seed", "sampling_problems", "sampling_warpers", "seed_problem",
]
