"""Test oracles: slow, obviously correct loops written from the spec's words, for the fast paths to be compared with.

Nothing here imports the code under test (`delay_higgs_v3`, `generation_higgs_v3`, `sampling_higgs_v3`, the
processor), except `sampling_higgs_v3.counter_uniform`, the sampler's documented hash (the uniform drawn for a (seed,
step, codebook) key), which the reference sampling loop needs to draw the same numbers. Every oracle is a plain Python loop over lists or
single elements, so that a vectorisation mistake in the product cannot be repeated here.

- `delayed_by_loop` / `reverted_by_loop`: the delay pattern (spec §4), element by element.
- `SpecStateMachine`, `end_by_state_machine`: the per-sequence end-of-speech state machine (spec §6).
- `rows_to_codes_by_loop`: generated rows -> the codes the codec decodes (spec §6, "Output to audio").
- `reference_generate`: one sequence, no cache, a full forward per step, the state machine and the sampling order
  (spec §6-§7) as worded.
- `plain_prompt`, `clone_prompt`, `left_pad`: prompt ids in the spec's layouts (§3), with the real token ids.
- `seeded_codec_state`: codec weights from a seeded generator, the same on every transformers release (for golden
  codes).
"""

from __future__ import annotations

import torch


# Real ids (spec §2, §4): looked up in the spec's tables, not in the code under test.
NUM_CODEBOOKS = 8
BOC, EOC = 1024, 1025
CODEBOOK_SIZE = 1026
PAD = 151643  # <|endoftext|>
TTS, AUDIO, TEXT, REF_AUDIO, REF_TEXT = 151667, 151670, 151672, 151679, 151680
PLACEHOLDER = -100


# ---------------------------------------------------------------------------------------------- delay pattern (§4)
def delayed_by_loop(raw: torch.Tensor, boc: int = BOC, eoc: int = EOC) -> torch.Tensor:
    """Spec §4: `D[r, c] = R[r - c, c]` if `0 <= r - c < T`, BOC if `r < c`, EOC if `r - c >= T`.

    `raw` `[T, C]` -> `[T + C - 1, C]`.
    """
    frames, books = raw.shape
    out = torch.empty(frames + books - 1, books, dtype=torch.long)
    for r in range(frames + books - 1):
        for c in range(books):
            out[r, c] = boc if r < c else (eoc if r - c >= frames else raw[r - c, c])
    return out


def reverted_by_loop(delayed: torch.Tensor) -> torch.Tensor:
    """Spec §4: `raw[t, c] = D[t + c, c]` for `t` in `0 .. rows - C`. `[rows, C]` -> `[rows - C + 1, C]`."""
    rows, books = delayed.shape
    out = torch.empty(max(rows - books + 1, 0), books, dtype=torch.long)
    for t in range(rows - books + 1):
        for c in range(books):
            out[t, c] = delayed[t + c, c]
    return out


# ---------------------------------------------------------------------------------------------- state machine (§6)
class SpecStateMachine:
    """The per-sequence state of spec §6: `delay = 0`, `countdown = none`, `done = false`, stepped once per row.

    `step(row)` applies step 2 to the sampled `row` (a list of C codes, overwritten in place where (a) says so) and
    returns whether this row ends the sequence. `end_row` is the row whose EOC started the countdown (None before).
    With two codebooks the countdown starts at 0: the EOC row itself is the terminal row (`r + C - 1` rows in all).
    """

    def __init__(self, num_codebooks: int = NUM_CODEBOOKS, boc: int = BOC, eoc: int = EOC):
        self.num_codebooks, self.boc, self.eoc = num_codebooks, boc, eoc
        self.delay, self.countdown, self.done = 0, None, False
        self.end_row, self.steps = None, 0

    def step(self, row: list[int]) -> bool:
        if self.delay < self.num_codebooks:  # (a) the delay window: EOC is not checked
            for c in range(self.delay + 1, self.num_codebooks):
                row[c] = self.boc
            self.delay += 1
        elif self.countdown is not None:  # (b)
            self.countdown -= 1
            if self.countdown == 0:
                self.done = True
        elif row[0] == self.eoc:  # (c)
            self.end_row, self.countdown = self.steps, self.num_codebooks - 2
            if self.countdown == 0:
                self.done = True
        self.steps += 1
        return self.done


def end_by_state_machine(codebook0: list[int], num_codebooks: int, eoc: int = EOC) -> tuple[int | None, int, bool]:
    """`(row that started the countdown or None, rows emitted, done)` for a stream of codebook-0 codes, stepping
    `SpecStateMachine` row by row (the other codebooks do not matter to the end)."""
    machine = SpecStateMachine(num_codebooks, eoc=eoc, boc=-1)
    for code in codebook0:
        if machine.step([code] + [0] * (num_codebooks - 1)):
            break
    return machine.end_row, machine.steps, machine.done


def rows_to_codes_by_loop(
    rows: torch.Tensor, boc: int = BOC, eoc: int = EOC, lengths: list[int] | None = None
) -> tuple[torch.Tensor, list[int]]:
    """Spec §6, "Output to audio", one sequence at a time: valid rows (given, or what the state machine emits over
    codebook 0 when not given), reverted by loop, then every code `>= boc` and every frame beyond the sequence's
    `max(valid rows - (C - 1), 0)` frames set to 0. `rows` `[B, R, C]` -> (`[B, max(R - C + 1, 0), C]`, frames)."""
    batch, num_rows, books = rows.shape
    codes = torch.zeros(batch, max(num_rows - books + 1, 0), books, dtype=torch.long)
    frames = []
    for b in range(batch):
        valid = lengths[b] if lengths is not None else end_by_state_machine(rows[b, :, 0].tolist(), books, eoc)[1]
        frames.append(max(valid - (books - 1), 0))
        raw = reverted_by_loop(rows[b])
        for t in range(raw.shape[0]):
            for c in range(books):
                code = int(raw[t, c])
                codes[b, t, c] = code if (code < boc and t < frames[b]) else 0
    return codes, frames


# ---------------------------------------------------------------------------------------------- prompts (§3)
def plain_prompt(words=(9707, 11, 1879)) -> torch.Tensor:
    """`<|tts|> <|text|> TEXT <|audio|>` as a 1-D id tensor."""
    return torch.tensor([TTS, TEXT, *words, AUDIO])


def clone_prompt(num_rows: int, words=(40, 1079)) -> torch.Tensor:
    """`<|tts|> <|ref_audio|> [P]*L <|text|> TEXT <|audio|>` with `L = num_rows` placeholders."""
    return torch.tensor([TTS, REF_AUDIO, *([PLACEHOLDER] * num_rows), TEXT, *words, AUDIO])


def left_pad(prompts: list[torch.Tensor], pad: int = PAD) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad 1-D prompts into `(input_ids [B, L], attention_mask [B, L])`."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = p
        mask[i, width - len(p):] = 1
    return ids, mask


# ---------------------------------------------------------------------------------------------- generation (§6-§7)
def _sample_by_spec(logits: torch.Tensor, seed: int, step: int, temperature, top_k, top_p) -> list[int]:
    """Spec §7 per codebook: fp32 logits / temperature -> top-k -> top-p (keep the most likely) -> softmax -> draw
    by inverse CDF with the documented uniform of (seed, step, codebook)."""
    from higgs_v3.sampling_higgs_v3 import counter_uniform  # the sampler's documented hash, not its logic

    books, size = logits.shape
    row = []
    for c in range(books):
        scores = logits[c] / temperature
        if top_k:
            kth = torch.topk(scores, top_k).values[-1]
            scores = scores.masked_fill(scores < kth, -float("inf"))
        if top_p is not None and top_p < 1.0:
            order = torch.argsort(scores, descending=True)
            probs_sorted = torch.softmax(scores[order], dim=-1)
            keep = torch.cumsum(probs_sorted, 0) - probs_sorted < top_p  # always keeps the first
            scores = scores.clone()
            scores[order[~keep]] = -float("inf")
        probs = torch.softmax(scores, dim=-1)
        u = counter_uniform(torch.tensor([seed]), step, torch.tensor([c]), books)[0]
        cdf = torch.cumsum(probs, 0)
        row.append(min(int((cdf > u * cdf[-1]).nonzero()[0]), size - 1))
    return row


def reference_generate(model, prompt, reference_rows=None, max_new_tokens=30, eoc_bias_steps=(), sample=None,
                       min_new_tokens=0):
    """One sequence, no cache, a full recompute every step; the state machine exactly as the spec words it.

    `prompt`: 1-D ids (placeholders = the config's placeholder id); `reference_rows`: `[n, C]` delayed rows, one per
    placeholder. `eoc_bias_steps`: steps at which codebook 0's EOC logit is raised by 1e4 (to force termination).
    `min_new_tokens`: no end of speech before that row: codebook 0 may not emit EOC at a step below it.
    `sample`: `(seed, temperature, top_k, top_p)` to sample in the spec's order; None is greedy (argmax of the raw
    logits). Returns `(rows [n_rows, C], done)`.
    """
    config = model.config
    books, size, eoc = config.num_codebooks, config.codebook_size, config.audio_eoc_token_id
    w_audio = model.audio_embed.weight  # [C * V, H]
    w_text = model.model.embed_tokens.weight

    def fused(row):  # spec §5: sum over c of W_audio[c * V + row[c]]
        return sum(w_audio[c * size + row[c]] for c in range(books))

    embeds = []
    ref_iter = iter(reference_rows.tolist() if reference_rows is not None else [])
    for token in prompt.tolist():
        embeds.append(fused(next(ref_iter)) if token == config.audio_placeholder_id else w_text[token])  # replaces
    machine = SpecStateMachine(books, config.audio_boc_token_id, eoc)
    rows = []
    with torch.no_grad():
        for step in range(max_new_tokens):
            hidden = model.model(inputs_embeds=torch.stack(embeds)[None]).last_hidden_state[0, -1]  # [H]
            logits = (hidden @ w_audio.T).float().view(books, size)  # codebook-major
            if step in eoc_bias_steps:
                logits[0, eoc] += 1e4
            if step < min_new_tokens:
                logits[0, eoc] = -float("inf")
            if sample is None:
                row = [int(logits[c].argmax()) for c in range(books)]
            else:
                row = _sample_by_spec(logits, sample[0], step, *sample[1:])
            done = machine.step(row)
            rows.append(row)
            if done:
                break
            embeds.append(fused(row))
    return torch.tensor(rows), machine.done


# ------------------------------------------------------------------------------------------- codec weights (golden)
def seeded_codec_state(
    shapes: dict[str, tuple[int, ...]], seed: int = 0, acoustic_gain: float = 1.0
) -> dict[str, torch.Tensor]:
    """Codec weights drawn from `torch.Generator(seed)` tensor by tensor in name order, independent of how any
    transformers release initializes the modules (so golden codes made once hold on every supported release).

    Matrices get `randn / sqrt(fan_in)`, 1-D and snake `alpha` scales `1 + 0.1 * randn` (norm weights and snake
    alphas must stay near 1), biases `0.1 * randn`, the VQ codebooks `randn`; the codebooks' EMA statistics, unused by
    encode and decode, are zeros and `inited` is 1. `acoustic_gain` multiplies the acoustic encoder's output convolution,
    so that the acoustic half of the features (and with it the half-frame padding of the acoustic input) decides codes
    as much as the semantic half does.
    """
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for name in sorted(shapes):
        shape = tuple(shapes[name])
        draw = torch.randn(shape, generator=generator, dtype=torch.float32)
        if name.endswith(".inited"):
            tensor = torch.ones(shape)
        elif name.endswith((".cluster_size", ".embed_avg")):
            tensor = torch.zeros(shape)
        elif name.endswith(".codebook.embed"):
            tensor = draw
        elif name.endswith(".alpha") or (len(shape) == 1 and name.endswith("weight")):
            tensor = 1 + 0.1 * draw
        elif len(shape) == 1:
            tensor = 0.1 * draw
        else:
            tensor = draw / (draw[0].numel() ** 0.5)
        state[name] = tensor
    state["acoustic_encoder.conv2.weight"] = state["acoustic_encoder.conv2.weight"] * acoustic_gain  # DAC's output conv
    return state


__all__ = [
    "AUDIO",
    "BOC",
    "CODEBOOK_SIZE",
    "EOC",
    "NUM_CODEBOOKS",
    "PAD",
    "PLACEHOLDER",
    "REF_AUDIO",
    "REF_TEXT",
    "TEXT",
    "TTS",
    "SpecStateMachine",
    "clone_prompt",
    "delayed_by_loop",
    "end_by_state_machine",
    "left_pad",
    "plain_prompt",
    "reference_generate",
    "reverted_by_loop",
    "rows_to_codes_by_loop",
    "seeded_codec_state",
]
