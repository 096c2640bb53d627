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


__all__ = ["apply_delay_pattern", "revert_delay_pattern"]
