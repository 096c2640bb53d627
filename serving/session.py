# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Step-level batching: a decode session that advances every active request by one row per `step()`, where a request
joins at any step and leaves as soon as it ends (continuous batching, as mlx-audio's, sglang-omni's and vllm-omni's
schedulers run Higgs Audio v3). `higgs-v3 serve`'s worker and `higgs-v3 batch` both run on it.

```
add(request)     checked at once by generate's own validator (a bad request raises here, alone); prefilled at the
                 next step together with the other requests admitted then
step()           admitted requests (in order of arrival, as many as `max_prefill_tokens` allows, the first always):
                 one prefill forward (left padded), their cache rows joined to the running batch;
                 running requests: one decode forward; then generate's own per-step pieces on all rows at once
                 (min_new_tokens ban, the warpers, the delay window's BOC, the seeded draw, the end of speech), each
                 row at its own step; one host read; requests that ended (or were cancelled) leave
cancel(request)  the request drops out at the next step, the others unchanged
```

State per row (tensors indexed by row, reordered together on admission and on leaving): its step (the row it emits
next), its sampler's uniforms (`counter_uniform` of its seed, computed at admission), limit (`max_new_tokens`,
clipped to `max_positions` as `generate` clips it), `min_new_tokens`, end row (`delay_higgs_v3.speech_end_row`), next
position, newest row; on the host its request, left padding, slot in the rows history and rows drawn.

KV: one `DynamicCache` whose rows share one length and are left padded, with a 2-D attention mask; an admitted group
is prefilled in its own cache, then both are left padded to the longer and joined; rows that leave are filtered out
and the padding every row still has is trimmed; with no request left the session holds no cache.

With `batch_invariant=True` (`generate`'s `invariant_numerics`) a row's numbers do not depend on the rows beside it
or its padding, so a request's codes are bit-identical to `model.generate(seed=..., batch_invariant=True)` alone,
whenever it joins and whoever leaves (tests/test_session.py). Without it, float rounding depends on the batch (see
docs/SERVING.md for how often a long item's rows differ).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from ..compat_higgs_v3 import CACHE_KWARG
from ..delay_higgs_v3 import NO_END, speech_finished, speech_rows
from ..generation_higgs_v3 import (
    MAX_POSITIONS, HiggsAudioV3DelayPatternLogitsProcessor, HiggsAudioV3GenerationOutput,
    HiggsAudioV3MinNewTokensLogitsProcessor, invariant_numerics,
)
from ..sampling_higgs_v3 import HiggsAudioV3SeededSampler, counter_uniform, draw_seed


class Cancelled(RuntimeError):
    """What a cancelled request ends with (`DecodeSession.cancel`)."""


@dataclass(eq=False)
class DecodeRequest:
    r"""One prompt to speak: `inputs` the processor's output for it (batch 1: `input_ids`, `attention_mask`,
    `audio_input_ids`, `reference_audio`, ...), `seed` (None: drawn, as `generate` draws it), `options` `generate`'s
    keyword options (`do_sample`, `temperature`, `top_k`, `top_p`, `min_p`, `max_new_tokens`, `min_new_tokens`),
    `max_positions` as `generate`'s. `on_row(row)` gets each new delayed row `[num_codebooks]` (CPU) as it is drawn;
    `on_end(request)` is called once when it ended: `output` (a `HiggsAudioV3GenerationOutput` of batch 1, without
    audio) or `error` set."""

    inputs: Mapping
    seed: int | None = None
    options: Mapping = field(default_factory=dict)
    on_row: Callable[[torch.LongTensor], None] | None = None
    on_end: Callable[[DecodeRequest], None] | None = None
    max_positions: int | None = MAX_POSITIONS
    output: HiggsAudioV3GenerationOutput | None = None
    error: BaseException | None = None
    largest_batch: int = 0  # the most requests it shared a step with (itself included)
    context: object = None  # the caller's (the server's chunk)


@dataclass(eq=False)
class _Admitted:
    """A checked request waiting for its prefill: its prompt without padding and its per-row constants."""

    request: DecodeRequest
    input_ids: torch.LongTensor  # [L]
    audio_rows: torch.LongTensor | None  # [N, C] (reference clips encoded in)
    seed: int
    limit: int
    min_new_tokens: int
    sampling: tuple  # ("greedy",) or the warpers' fields: rows with the same one share their warpers
    warpers: list
    cancelled: bool = False
    ended: bool = False


class DecodeSession:
    """Step-level batching over `model` (see the module docstring): `add`, `cancel`, `step`, `idle`, `free`."""

    def __init__(self, model, max_batch_size: int = 8, batch_invariant: bool = False,
                 max_prefill_tokens: int | None = None):
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ValueError(f"max_batch_size must be a positive number of requests, got {max_batch_size!r}.")
        if max_prefill_tokens is not None and (isinstance(max_prefill_tokens, bool) or
                                               not isinstance(max_prefill_tokens, int) or max_prefill_tokens < 1):
            raise ValueError("max_prefill_tokens must be None (no bound) or a positive number of prompt tokens, got "
                             f"{max_prefill_tokens!r}.")
        self.model, self.max_batch_size, self.batch_invariant = model, max_batch_size, batch_invariant
        self.max_prefill_tokens = max_prefill_tokens
        config = model.config
        self.num_codebooks, self.spec = config.num_codebooks, config.audio_spec
        self._delay = HiggsAudioV3DelayPatternLogitsProcessor(self.num_codebooks, config.audio_boc_token_id, 0)
        self._ban = HiggsAudioV3MinNewTokensLogitsProcessor(self.num_codebooks, config.audio_eoc_token_id, 0, 0)
        self._pending: list[_Admitted] = []
        self._rows: list[_Admitted] = []  # the active rows, in batch order
        self._history = torch.zeros(max_batch_size, 0, self.num_codebooks, dtype=torch.int16)  # [slot, row, C]
        self._free_slots = list(range(max_batch_size))
        self.cache: DynamicCache | None = None
        self.steps_run, self.largest_batch = 0, 0
        self._state: dict[str, torch.Tensor] = {}  # per row, on the model's device
        self._host: dict[str, torch.Tensor] = {}  # per row, on the host: slot in the history, rows drawn, peak batch
        self._listeners: list = []

    # ------------------------------------------------------------------ the caller's side
    @property
    def active(self) -> int:
        """Requests being decoded or admitted for the next step."""
        return len(self._rows) + len(self._pending)

    @property
    def free(self) -> int:
        """Requests that can still be added before the batch is full."""
        return self.max_batch_size - self.active

    @property
    def idle(self) -> bool:
        return self.active == 0

    @property
    def cache_rows(self) -> int:
        """Batch rows of the KV cache held now (0 when idle)."""
        return 0 if self.cache is None else self._state["mask"].shape[0]

    def add(self, request: DecodeRequest) -> None:
        """Check `request` with `generate`'s own validator (its `ValueError` raised here, for this request alone) and
        admit it at the next step. `RuntimeError` when the batch is full (see `free`)."""
        if self.free < 1:
            raise RuntimeError(f"The decode session is full ({self.max_batch_size} requests); wait for one to end.")
        self._pending.append(self._checked(request))

    def cancel(self, request: DecodeRequest) -> None:
        """Drop `request` at the next step (it ends with `Cancelled`); the other rows are unchanged."""
        for row in self._pending + self._rows:
            if row.request is request:
                row.cancelled = True

    def step(self) -> None:
        """Admit what was added, advance every request by one row, end those that finished (see the module
        docstring). A prefill that raises is retried request by request, so a bad request fails alone."""
        self._leave([row.cancelled for row in self._rows], cancelled=True)
        self._pending = [row for row in self._pending if not (row.cancelled and self._end(row, Cancelled()))]
        admitted, self._pending = self._admissible(self._pending)
        if not admitted and not self._rows:
            return
        invariance = invariant_numerics(self.model) if self.batch_invariant else contextlib.nullcontext()
        try:
            with torch.no_grad(), invariance:
                logits = [self._decode()] if self._rows else []
                joined = self._prefill(admitted) if admitted else None
                if joined is not None:
                    logits.append(joined)
                if not self._rows:
                    return
                rows, done = self._choose(torch.cat(logits))
                host = torch.cat([rows, done[:, None].long()], dim=1).cpu()  # the step's one host read [B, C + 1]
        except Exception as error:  # noqa: BLE001 - a step that fails (not one request's prefill) ends every row
            self._fail_all(error, [row for row in admitted if not row.ended and row not in self._rows])
            return
        self.steps_run, self.largest_batch = self.steps_run + 1, max(self.largest_batch, len(self._rows))
        self._record(host)

    # ------------------------------------------------------------------ admission
    def _admissible(self, pending: list[_Admitted]) -> tuple[list[_Admitted], list[_Admitted]]:
        """(the requests prefilled at this step, those left for later steps): in order of arrival, as many as fit in
        `max_prefill_tokens` (the padded prefill, requests x longest prompt; the first one always), so a long prompt
        stalls the running rows for one step of its own, not stacked with others."""
        if self.max_prefill_tokens is None:
            return pending, []
        width = 0
        for count, row in enumerate(pending):
            width = max(width, row.input_ids.shape[0])
            if count and (count + 1) * width > self.max_prefill_tokens:
                return pending[:count], pending[count:]
        return pending, []

    def _checked(self, request: DecodeRequest) -> _Admitted:
        model, inputs = self.model, dict(request.inputs)
        input_ids, mask = inputs.get("input_ids"), inputs.get("attention_mask")
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ValueError("A decode session's request is one prompt: the processor's output for one text "
                             f"(input_ids [1, length]), got input_ids of {getattr(input_ids, 'shape', input_ids)!r}.")
        seed = draw_seed() if request.seed is None else request.seed
        config, _, warpers, _, min_new_tokens = model._audio_generation_config(
            input_ids, mask, inputs.get("audio_input_ids"), inputs.get("audio_input_ids_mask"), None, None, None,
            None, seed, request.max_positions, inputs.get("reference_audio"), inputs.get("reference_audio_lengths"),
            dict(request.options), self.batch_invariant)
        audio_rows, audio_mask = inputs.get("audio_input_ids"), inputs.get("audio_input_ids_mask")
        if inputs.get("reference_audio") is not None:
            audio_rows, audio_mask = model.merge_reference_clips(
                audio_rows, inputs["reference_audio"], inputs.get("reference_audio_lengths"), audio_mask), None
        if audio_rows is not None:
            audio_rows = (audio_rows[audio_mask.bool()] if audio_mask is not None else audio_rows).reshape(
                -1, self.num_codebooks).to(model.device)
        keep = mask[0].bool() if mask is not None else torch.ones_like(input_ids[0], dtype=torch.bool)
        sampling = ("greedy",) if warpers is None else tuple(
            (type(w).__name__, sorted(vars(w).items())) for w in warpers)
        return _Admitted(request, input_ids[0][keep].to(model.device), audio_rows, seed, config.max_new_tokens,
                         min_new_tokens or 0, repr(sampling), warpers)

    def _prefill(self, admitted: list[_Admitted]) -> torch.Tensor | None:
        """One forward over the admitted prompts, left padded; their cache rows joined to the running batch's.
        Returns their step-0 logits `[n * C, V]` (None when every one failed)."""
        try:
            logits, cache, mask = self._prefill_forward(admitted)
        except Exception as error:  # noqa: BLE001 - spoken again one by one: the bad one fails alone
            if len(admitted) == 1:
                self._end(admitted[0], error)
                return None
            parts = [self._prefill([row]) for row in admitted]
            parts = [part for part in parts if part is not None]
            return torch.cat(parts) if parts else None
        self._join(admitted, cache, mask)
        return logits

    def _prefill_forward(self, admitted: list[_Admitted]):
        model, device = self.model, self.model.device
        width = max(row.input_ids.shape[0] for row in admitted)
        ids = torch.zeros(len(admitted), width, dtype=torch.long, device=device)
        mask = torch.zeros(len(admitted), width, dtype=torch.long, device=device)
        for i, row in enumerate(admitted):  # admission only (host-known lengths), never per step
            ids[i, width - row.input_ids.shape[0]:] = row.input_ids
            mask[i, width - row.input_ids.shape[0]:] = 1
        audio = [row.audio_rows for row in admitted if row.audio_rows is not None]
        cache = DynamicCache(config=model.config)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        output = model(input_ids=ids, audio_input_ids=torch.cat(audio) if audio else None, attention_mask=mask,
                       position_ids=positions, use_cache=True, logits_to_keep=1, **{CACHE_KWARG: cache})
        return output.logits[:, -1].to(copy=True, dtype=torch.float32), cache, mask

    def _join(self, admitted: list[_Admitted], cache: DynamicCache, mask: torch.Tensor) -> None:
        """The admitted rows after the running ones: caches and masks left padded to one length, state appended."""
        device, count = mask.device, len(admitted)
        lengths = mask.sum(-1)
        new = {
            "step": torch.zeros(count, dtype=torch.long, device=device),
            "seed": torch.tensor([row.seed for row in admitted], device=device),
            "limit": torch.tensor([row.limit for row in admitted], device=device),
            "least": torch.tensor([row.min_new_tokens for row in admitted], device=device),
            "end_row": torch.full((count,), NO_END, dtype=torch.long, device=device),
            "position": lengths,
            "last": torch.zeros(count, self.num_codebooks, dtype=torch.long, device=device),
            "uniform": self._uniforms(admitted, device),
            "mask": mask,
        }
        new_pads = (mask.shape[1] - lengths).cpu()  # admission's host read
        slots = [self._free_slots.pop(0) for _ in admitted]
        for row, slot, pad in zip(admitted, slots, new_pads.tolist()):
            row.slot, row.pad = slot, pad
        host = {"slot": torch.tensor(slots), "count": torch.zeros(count, dtype=torch.long),
                "peak": torch.zeros(count, dtype=torch.long),
                "least": torch.tensor([row.min_new_tokens for row in admitted], dtype=torch.long)}
        self._host = host if self.cache is None else {name: torch.cat([self._host[name], host[name]]) for name in host}
        longest = max(row.limit for row in admitted)
        if self._history.shape[1] < longest:
            self._history = F.pad(self._history, (0, 0, 0, longest - self._history.shape[1]))
        if self.cache is None:
            self.cache, self._state, self._rows = cache, new, list(admitted)
        else:
            self.cache, self._state = self._joined_cache(self.cache, cache, self._state, new)
            self._rows = self._rows + list(admitted)
        self._sampling_groups()

    def _joined_cache(self, running: DynamicCache, admitted: DynamicCache, state: dict, new: dict):
        width = max(state["mask"].shape[1], new["mask"].shape[1])
        grow = {id(state): width - state["mask"].shape[1], id(new): width - new["mask"].shape[1]}
        for row in self._rows:
            row.pad += grow[id(state)]
        for layer, other in zip(running.layers, admitted.layers):
            layer.keys = torch.cat([F.pad(layer.keys, (0, 0, grow[id(state)], 0)),
                                    F.pad(other.keys, (0, 0, grow[id(new)], 0))])
            layer.values = torch.cat([F.pad(layer.values, (0, 0, grow[id(state)], 0)),
                                      F.pad(other.values, (0, 0, grow[id(new)], 0))])
        width = max(state["uniform"].shape[1], new["uniform"].shape[1])
        for part in (state, new):
            part["uniform"] = F.pad(part["uniform"], (0, 0, 0, width - part["uniform"].shape[1]))
        joined = {name: torch.cat([state[name], new[name]]) for name in new if name != "mask"}
        joined["mask"] = torch.cat([F.pad(state["mask"], (grow[id(state)], 0)), F.pad(new["mask"], (grow[id(new)], 0))])
        return running, joined

    def _uniforms(self, admitted: list[_Admitted], device) -> torch.Tensor:
        """The sampler's uniforms of every row of each admitted request, `[n, longest limit, C]`: `counter_uniform`
        of (its seed, row, codebook), computed once at admission instead of at every step (the same numbers)."""
        longest, C = max(row.limit for row in admitted), self.num_codebooks
        seeds = torch.tensor([row.seed for row in admitted], device=device)[:, None, None]
        rows = torch.arange(longest, device=device)[None, :, None]
        return counter_uniform(seeds, rows, torch.arange(C, device=device)[None, None, :], C)  # [n, longest, C]

    def _sampling_groups(self) -> None:
        """Per-row constants of the step, rebuilt whenever the rows change (admission, leaving): a mask per sampling
        group (rows sharing warpers; one group: no mask), and the rows whose requests listen to their rows."""
        C, device = self.num_codebooks, self._state["mask"].device
        rows = len(self._rows)
        groups: dict[str, list[int]] = {}
        for i, row in enumerate(self._rows):  # admission and leaving only
            groups.setdefault(row.sampling, []).append(i)
        self._groups = []
        for key, members in groups.items():
            member = torch.zeros(rows, dtype=torch.bool)
            member[members] = True
            warpers = self._rows[members[0]].warpers
            mask = None if len(groups) == 1 else member.repeat_interleave(C).to(device)[:, None]  # [B*C, 1]
            self._groups.append((warpers, mask))
        self._listeners = [(i, row.request) for i, row in enumerate(self._rows) if row.request.on_row is not None]

    # ------------------------------------------------------------------ the step
    def _decode(self) -> torch.Tensor:
        """One decode forward of the running rows (their newest row at their next position): logits `[B * C, V]`."""
        model, state = self.model, self._state
        offsets = torch.arange(self.num_codebooks, device=state["last"].device) * model.codebook_size
        embeds = model._embed_fused_rows(state["last"] + offsets)[:, None]  # [B, 1, H]
        state["mask"] = F.pad(state["mask"], (0, 1), value=1)
        output = model(inputs_embeds=embeds, attention_mask=state["mask"], position_ids=state["position"][:, None],
                       use_cache=True, **{CACHE_KWARG: self.cache})
        state["position"] = state["position"] + 1
        return output.logits[:, -1].to(copy=True, dtype=torch.float32)

    def _choose(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`generate`'s per-step pieces, each row at its own step: the rows drawn `[B, C]` and which ended `[B]`."""
        state, C, counts = self._state, self.num_codebooks, self._host["count"]  # counts: each row's step, on the host
        step = state["step"].repeat_interleave(C)  # [B*C]
        if bool((counts < self._host["least"]).any()):  # a row before its min_new_tokens (a host test, no sync)
            scores = self._ban.at_step(scores, step, state["least"].repeat_interleave(C))
        for warpers, member in self._groups:  # one per sampling setting in the batch (usually one)
            warped = scores
            for warper in warpers or []:
                warped = warper(None, warped)
            scores = warped if member is None else torch.where(member, warped, scores)
        if int(counts.min()) < C - 1:  # a row in its delay window
            scores = self._delay.at_step(scores, step)
        greedy = [warpers is None for warpers, _ in self._groups]
        if all(greedy):
            tokens = scores.argmax(-1)
        else:
            uniform = state["uniform"][torch.arange(len(self._rows), device=step.device), state["step"]].view(-1)
            tokens = HiggsAudioV3SeededSampler.draw(scores, uniform)[:, 0]
            if any(greedy):
                is_greedy = torch.zeros_like(tokens, dtype=torch.bool)
                for (warpers, member), alone in zip(self._groups, greedy):
                    if alone:
                        is_greedy |= member[:, 0]
                tokens = torch.where(is_greedy, scores.argmax(-1), tokens)
        rows = tokens.view(-1, C)  # [B, C]
        state["end_row"] = torch.minimum(state["end_row"], self.spec.speech_end_row(rows[:, :1], state["step"]))
        done = (state["step"] >= state["end_row"] + (C - 2)) | (state["step"] + 1 >= state["limit"])
        state["last"], state["step"] = rows, state["step"] + 1
        return rows, done

    def _record(self, host: torch.Tensor) -> None:
        """The step's rows written to the history (one indexed copy), handed to the requests that listen; the rows
        that ended leave."""
        rows, done = host[:, :-1], host[:, -1].bool()
        slots, counts = self._host["slot"], self._host["count"]
        self._history[slots, counts] = rows.to(torch.int16)
        counts += 1
        torch.clamp(self._host["peak"], min=len(self._rows), out=self._host["peak"])
        for i, request in self._listeners:  # the streamed requests only
            request.on_row(rows[i])
        self._leave(done.tolist())

    # ------------------------------------------------------------------ leaving
    def _leave(self, gone: list[bool], cancelled: bool = False) -> None:
        """Rows flagged in `gone` end (their output, or `Cancelled`) and leave the cache; the common padding is
        trimmed; with no row left, the cache is dropped."""
        if not any(gone):
            return
        for i, (row, leaving) in enumerate(zip(self._rows, gone)):
            if leaving:
                self._free_slots.append(row.slot)
                row.request.largest_batch = int(self._host["peak"][i])
                self._end(row, Cancelled() if cancelled else None, self._output(row, int(self._host["count"][i])))
        keep = [i for i, leaving in enumerate(gone) if not leaving]
        self._rows = [self._rows[i] for i in keep]
        if not keep:
            self.cache, self._state, self._host = None, {}, {}
            return
        self._host = {name: value[keep] for name, value in self._host.items()}
        trim = min(row.pad for row in self._rows)
        for row in self._rows:
            row.pad -= trim
        index = torch.tensor(keep, device=self._state["mask"].device)
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(0, index)[:, :, trim:]
            layer.values = layer.values.index_select(0, index)[:, :, trim:]
        self._state = {name: value.index_select(0, index) for name, value in self._state.items()}
        self._state["mask"] = self._state["mask"][:, trim:]
        self._sampling_groups()

    def _fail_all(self, error: BaseException, waiting: list[_Admitted]) -> None:
        """Every row, and the admitted requests not prefilled yet (`waiting`), end with `error`; no cache is left."""
        rows, self._rows, self.cache, self._state, self._host = self._rows, [], None, {}, {}
        for row in rows:
            self._free_slots.append(row.slot)
            self._end(row, error)
        for row in waiting:
            self._end(row, error)

    def _output(self, row: _Admitted, count: int) -> HiggsAudioV3GenerationOutput:
        """A request's `count` rows as `generate`'s output of batch 1 (sequences, lengths, finished, codes)."""
        spec = self.spec
        rows = self._history[row.slot, :count].long()[None]  # [1, R, C]
        end_row = spec.speech_end_row(rows[..., 0])
        lengths = speech_rows(end_row, spec.num_codebooks, rows.shape[1])
        codes, code_lengths = spec.rows_to_codes(rows, lengths)
        return HiggsAudioV3GenerationOutput(
            sequences=rows, lengths=lengths, finished=speech_finished(end_row, spec.num_codebooks, rows.shape[1]),
            audio_codes=codes, audio_code_lengths=code_lengths)

    def _end(self, row: _Admitted, error: BaseException | None, output=None) -> bool:
        row.ended = True
        request = row.request
        request.output, request.error = (None, error) if error is not None else (output, None)
        if request.on_end is not None:
            request.on_end(request)
        return True


__all__ = ["Cancelled", "DecodeRequest", "DecodeSession"]
