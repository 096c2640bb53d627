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
and 5 above, with `r = 4`). `speech_end_row` / `speech_rows` / `speech_finished` are that rule: `generate`'s lengths and
flags, the processor's decoding and the streamers call them (the stopping criterion applies the same rule one column
per step, without keeping any state beyond a flag).
"""

from __future__ import annotations

import torch


def apply_delay_pattern(codes: torch.LongTensor, boc_id: int, eoc_id: int) -> torch.LongTensor:
    """Delay raw codes `[..., T, C]` into `[..., T + C - 1, C]` (see the module docstring)."""
    if codes.dim() < 2 or codes.shape[-2] == 0:
        raise ValueError(f"codes must have shape [..., frames, codebooks] with at least one frame, got {tuple(codes.shape)}.")
    num_frames, num_codebooks = codes.shape[-2], codes.shape[-1]
    rows = num_frames + num_codebooks - 1
    row = torch.arange(rows, device=codes.device)[:, None]  # [rows, 1]
    frame = row - torch.arange(num_codebooks, device=codes.device)[None, :]  # [rows, C]: source frame r - c
    gathered = codes.gather(-2, frame.clamp(0, num_frames - 1).expand(*codes.shape[:-2], rows, num_codebooks))
    out = torch.where(frame < 0, boc_id, torch.where(frame >= num_frames, eoc_id, gathered))
    return out


def revert_delay_pattern(delayed: torch.LongTensor) -> torch.LongTensor:
    """Undo the delay: `[..., rows, C]` -> `[..., rows - C + 1, C]` with `R[t, c] = D[t + c, c]`."""
    rows, num_codebooks = delayed.shape[-2], delayed.shape[-1]
    num_frames = rows - num_codebooks + 1
    if num_frames < 0:
        raise ValueError(f"{rows} delayed rows are fewer than the {num_codebooks - 1} rows the delay adds.")
    index = torch.arange(num_frames, device=delayed.device)[:, None] + torch.arange(num_codebooks, device=delayed.device)
    return delayed.gather(-2, index.expand(*delayed.shape[:-2], num_frames, num_codebooks))


NO_END = 2**62
"""What `speech_end_row` returns for a sequence whose codebook 0 has not ended speech (larger than any row)."""


def speech_end_row(codebook0: torch.LongTensor, eoc_id: int, num_codebooks: int, first_row: int = 0) -> torch.LongTensor:
    """The row that ends speech: the first EOC of codebook 0 at a row `r >= num_codebooks`, else `NO_END`.

    `codebook0` holds `[..., n]` codebook-0 codes of rows `first_row .. first_row + n - 1` (all rows, or only the newest
    ones: take the `minimum` with the previous result). Returns `[...]`. A sequence that ends at row `r` has `r`
    frames and `r + num_codebooks - 1` rows (`speech_rows`); rows after those are padding.
    """
    num_rows = codebook0.shape[-1]
    is_eoc = codebook0 == eoc_id
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


__all__ = ["NO_END", "apply_delay_pattern", "revert_delay_pattern", "speech_end_row", "speech_finished", "speech_rows"]
