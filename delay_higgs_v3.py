# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""The delay pattern of Higgs Audio v3 codes, explained once and implemented as one gather each way.

Raw codec codes `R` of shape `[T, C]` (T frames, C codebooks) become the delayed matrix `D` of shape `[T + C - 1, C]`:
codebook `c` is shifted down by `c` rows, BOC fills the rows before a codebook starts and EOC the rows after it
ended (MusicGen style, no extra wrapping frames). With C = 3 and T = 4 (a, b, c are the codebooks' codes):

```
          cb0  cb1  cb2
row 0  [  a0   BOC  BOC ]
row 1  [  a1   b0   BOC ]
row 2  [  a2   b1   c0  ]
row 3  [  a3   b2   c1  ]
row 4  [  EOC  b3   c2  ]
row 5  [  EOC  EOC  c3  ]
```

`D[r, c] = R[r - c, c]` when `0 <= r - c < T`, BOC when `r < c`, EOC when `r - c >= T`.
Reverting reads the diagonal back: `R[t, c] = D[t + c, c]` for `t` in `0 .. rows - C`.

Generation ends the same way (spec §6): codebook 0 is not checked during the delay window (rows `0 .. C - 1`); its first
EOC at a row `r >= C` ends speech with `T = r` frames, and `C - 2` more rows follow, so `r + C - 1` rows in all (rows 4
and 5 above, with `r = 4`); rows after those are padding. `speech_end_row` / `speech_rows` / `speech_finished` are that
rule (for `generate`, the decoding of rows to audio and the streamers), `rows_to_codes` the one way from generated rows
to codec codes, `check_codes` the codes rule, and `HiggsAudioV3AudioSpec` the audio constants with the rows / frames /
seconds arithmetic, so that no other module writes `num_codebooks - 1` itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import torch


def codes_problem(
    codes, num_codebooks: int, num_codes: int, where: str, min_frames: int = 1, batched: bool = False
) -> str | None:
    """None if `codes` are integer codes `[..., frames, num_codebooks]` (`batched`: exactly `[batch, frames,
    num_codebooks]`), at least `min_frames` frames, each in `0 .. num_codes - 1`; else the sentence naming `where` and
    what is wrong (one host read of the range)."""
    if isinstance(codes, np.ndarray) and np.issubdtype(codes.dtype, np.integer):
        codes = torch.from_numpy(codes)
    integer = isinstance(codes, torch.Tensor) and not (codes.is_floating_point() or codes.is_complex())
    problem = None
    if not integer or codes.dtype == torch.bool:
        problem = type(codes).__name__ + (f" of dtype {codes.dtype}" if hasattr(codes, "dtype") else "")
    elif (codes.dim() != 3 if batched else codes.dim() < 2) or codes.shape[-1] != num_codebooks or (
            codes.shape[-2] < min_frames):
        problem = f"shape {tuple(codes.shape)}"
    elif codes.numel() and not torch.compiler.is_compiling():
        low, high = (int(value) for value in codes.aminmax())
        if low < 0 or high >= num_codes:
            problem = f"values from {low} to {high}"
    return None if problem is None else (
        f"{where[:1].upper() + where[1:]} must be integer codes [{'batch' if batched else '...'}, frames, "
        f"{num_codebooks}] with at least {min_frames} frame{'s' if min_frames > 1 else ''}, each in "
        f"0..{num_codes - 1}; got {problem}."
    )


def check_codes(
    codes, num_codebooks: int, num_codes: int, where: str, min_frames: int = 1, batched: bool = False
) -> torch.LongTensor:
    """`codes` as a `LongTensor` if `codes_problem` finds nothing wrong, else its `ValueError`: THE codes rule, for raw
    codec codes (`num_codes = audio_boc_token_id`: voices, reference codes, targets) and delayed rows (`num_codes =
    codebook_size`: `decode_audio`, `generate`'s reference rows)."""
    problem = codes_problem(codes, num_codebooks, num_codes, where, min_frames, batched)
    if problem is not None:
        raise ValueError(problem)
    return torch.as_tensor(codes).long()


def apply_delay_pattern(codes: torch.LongTensor, boc_id: int, eoc_id: int) -> torch.LongTensor:
    """Delay raw codes `[..., T, C]`, `T >= 1` (see `check_codes`), into `[..., T + C - 1, C]` (see the module
    docstring)."""
    num_frames, num_codebooks = codes.shape[-2], codes.shape[-1]
    rows = num_frames + num_codebooks - 1
    row = torch.arange(rows, device=codes.device)[:, None]  # [rows, 1]
    frame = row - torch.arange(num_codebooks, device=codes.device)[None, :]  # [rows, C]: source frame r - c
    gathered = codes.gather(-2, frame.clamp(0, num_frames - 1).expand(*codes.shape[:-2], rows, num_codebooks))
    return torch.where(frame < 0, boc_id, torch.where(frame >= num_frames, eoc_id, gathered))


def revert_delay_pattern(delayed: torch.LongTensor) -> torch.LongTensor:
    """Undo the delay: `[..., rows, C]`, `rows >= C - 1`, -> `[..., rows - C + 1, C]` with `R[t, c] = D[t + c, c]`."""
    rows, num_codebooks = delayed.shape[-2], delayed.shape[-1]
    num_frames = rows - num_codebooks + 1
    device = delayed.device
    index = torch.arange(num_frames, device=device)[:, None] + torch.arange(num_codebooks, device=device)  # [T, C]
    return delayed.gather(-2, index.expand(*delayed.shape[:-2], num_frames, num_codebooks))


NO_END = 2**62
"""What `speech_end_row` returns for a sequence whose codebook 0 has not ended speech (larger than any row)."""


def speech_end_row(codebook0: torch.LongTensor, eoc_id: int, num_codebooks: int,
                   first_row: int | torch.LongTensor = 0) -> torch.LongTensor:
    """The row that ends speech (see above): the first EOC of codebook 0 at a row `r >= num_codebooks`, else `NO_END`.
    `codebook0` holds `[..., n]` codebook-0 codes of rows `first_row .. first_row + n - 1` (all rows, or only the
    newest ones: take the `minimum` with the previous result; one newest row may come with each sequence's own
    `first_row` `[...]`, a decode session's). Returns `[...]`."""
    num_rows = codebook0.shape[-1]
    is_eoc = codebook0 == eoc_id
    if isinstance(first_row, torch.Tensor):  # one row per sequence, each at its own row
        return torch.where(is_eoc[..., 0] & (first_row >= num_codebooks), first_row, NO_END)
    if num_rows == 1 and first_row >= num_codebooks:  # one new row after the delay window (a streamer's every put)
        return torch.where(is_eoc[..., 0], first_row, NO_END)
    row = torch.arange(first_row, first_row + num_rows, device=codebook0.device)  # [n]
    ends = torch.where(is_eoc & (row >= num_codebooks), row, NO_END)  # [..., n]
    return torch.cat([ends, ends.new_full((*ends.shape[:-1], 1), NO_END)], dim=-1).amin(dim=-1)


def speech_rows(end_row: torch.LongTensor, num_codebooks: int, num_rows: int | torch.LongTensor) -> torch.LongTensor:
    """Valid rows of sequences that ended at `end_row` (from `speech_end_row`), given `num_rows` rows available: the
    `end_row + num_codebooks - 1` rows of speech, or every row while a sequence has not ended (`NO_END`)."""
    return torch.clamp(torch.where(end_row < NO_END, end_row + (num_codebooks - 1), num_rows), max=num_rows)


def speech_finished(end_row: torch.LongTensor, num_codebooks: int, num_rows: int) -> torch.BoolTensor:
    """Whether sequences that ended at `end_row` have all their `end_row + num_codebooks - 1` rows among the first
    `num_rows` (their terminal row was emitted); never for `NO_END`."""
    return end_row + (num_codebooks - 1) <= num_rows


def rows_to_codes(
    rows: torch.LongTensor, boc_id: int, eoc_id: int, lengths: torch.LongTensor | None = None
) -> tuple[torch.LongTensor, torch.LongTensor]:
    """Generated delayed rows -> the raw codes the codec decodes.

    `rows` `[batch, R, C]`; `lengths` `[batch]` valid rows per sequence (None: read off codebook 0 with
    `speech_end_row` / `speech_rows`, every row while a sequence has not ended). Returns `(codes, code_lengths)`:
    `codes` `[batch, max(R - C + 1, 0), C]` with every code `>= boc_id` (a stray BOC/EOC, or padding) and every frame
    at or beyond a sequence's `code_lengths = max(lengths - (C - 1), 0)` set to 0, as the reference decoder does.
    """
    num_codebooks = rows.shape[-1]
    if lengths is None:
        lengths = speech_rows(speech_end_row(rows[..., 0], eoc_id, num_codebooks), num_codebooks, rows.shape[-2])
    code_lengths = (lengths - (num_codebooks - 1)).clamp(min=0)  # [B]
    if rows.shape[-2] < num_codebooks:  # not even one complete frame
        return rows.new_zeros(*rows.shape[:-2], 0, num_codebooks), code_lengths
    codes = revert_delay_pattern(rows)  # [B, T, C]
    frame = torch.arange(codes.shape[-2], device=codes.device)[:, None]  # [T, 1]
    invalid = (codes >= boc_id) | (frame >= code_lengths[..., None, None])  # [B, T, C]
    return codes.masked_fill(invalid, 0), code_lengths


@dataclass(frozen=True)
class HiggsAudioV3AudioSpec:
    r"""
    The audio constants that the model, the processor and the streamers agree on (the config's field names), with the
    rows / frames / seconds arithmetic of the delay pattern; validated here, for whoever builds it.

    Example:

    ```python
    >>> spec = HiggsAudioV3AudioSpec()
    >>> spec.samples_per_frame, spec.rows(50), spec.frames(57), spec.rows_for_seconds(2.0)
    (960, 57, 50, 57)
    ```
    """

    num_codebooks: int = 8
    audio_boc_token_id: int = 1024
    audio_eoc_token_id: int = 1025
    audio_placeholder_id: int = -100
    sampling_rate: int = 24000
    frame_rate: int = 25

    def __post_init__(self):
        problems = self.problems(self)
        if problems:
            raise ValueError(" ".join(problems))

    @classmethod
    def problems(cls, source) -> list[str]:
        """What is wrong with the audio constants of `source` (a spec, a config or a processor: anything with these
        field names), one sentence each; empty when they agree. `HiggsAudioV3Config` adds its own to these."""
        num_codebooks, boc, eoc, sampling_rate, frame_rate = (
            getattr(source, name) for name in ("num_codebooks", "audio_boc_token_id", "audio_eoc_token_id",
                                               "sampling_rate", "frame_rate"))
        problems = []
        if num_codebooks < 2:
            problems.append(f"num_codebooks must be at least 2 (the delay pattern's end needs a countdown of "
                            f"num_codebooks - 2 rows), got {num_codebooks}.")
        if boc < 0 or eoc < 0 or boc == eoc:
            problems.append(f"audio_boc_token_id={boc} and audio_eoc_token_id={eoc} must be two different codes >= 0.")
        if sampling_rate <= 0 or frame_rate <= 0 or sampling_rate % frame_rate:
            problems.append(f"sampling_rate={sampling_rate} must be a positive multiple of frame_rate={frame_rate}.")
        return problems

    @classmethod
    def from_config(cls, config) -> HiggsAudioV3AudioSpec:
        """The spec of a `HiggsAudioV3Config` (or any object with the same field names)."""
        return cls(**{field.name: getattr(config, field.name) for field in fields(cls)})

    def to_dict(self) -> dict[str, int]:
        return {field.name: getattr(self, field.name) for field in fields(self)}

    # ------------------------------------------------------------------ arithmetic
    @property
    def samples_per_frame(self) -> int:
        """Waveform samples per codec frame (960 for 24 kHz at 25 frames per second)."""
        return self.sampling_rate // self.frame_rate

    @property
    def max_delay(self) -> int:
        """Rows the delay pattern adds to a clip: `num_codebooks - 1`."""
        return self.num_codebooks - 1

    def rows(self, frames: int) -> int:
        """Delayed rows of a clip of `frames` frames (`frames + num_codebooks - 1`)."""
        return frames + self.max_delay

    def frames(self, rows: int) -> int:
        """Complete frames in `rows` delayed rows (`max(rows - (num_codebooks - 1), 0)`)."""
        return max(rows - self.max_delay, 0)

    def rows_for_seconds(self, seconds: float) -> int:
        """Rows that hold `seconds` of audio: `ceil(seconds * frame_rate) + num_codebooks - 1`."""
        return self.rows(math.ceil(seconds * self.frame_rate))

    def seconds(self, frames: int) -> float:
        """Duration of `frames` codec frames in seconds."""
        return frames / self.frame_rate

    # ------------------------------------------------------------------ codes
    def delay(self, codes: torch.LongTensor) -> torch.LongTensor:
        """`apply_delay_pattern` with this spec's BOC / EOC."""
        return apply_delay_pattern(codes, self.audio_boc_token_id, self.audio_eoc_token_id)

    def rows_to_codes(
        self, rows: torch.LongTensor, lengths: torch.LongTensor | None = None
    ) -> tuple[torch.LongTensor, torch.LongTensor]:
        """`rows_to_codes` with this spec's BOC / EOC."""
        return rows_to_codes(rows, self.audio_boc_token_id, self.audio_eoc_token_id, lengths)

    def speech_end_row(self, codebook0: torch.LongTensor, first_row: int | torch.LongTensor = 0) -> torch.LongTensor:
        """`speech_end_row` with this spec's EOC and codebook count."""
        return speech_end_row(codebook0, self.audio_eoc_token_id, self.num_codebooks, first_row)


__all__ = [
    "NO_END", "HiggsAudioV3AudioSpec", "apply_delay_pattern", "check_codes", "codes_problem", "revert_delay_pattern",
    "rows_to_codes", "speech_end_row", "speech_finished", "speech_rows",
]
