# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""Streamers for Higgs Audio v3 `generate`: waveform chunks while the model speaks, and the row tracking they share.

`generate(..., streamer=s)` calls `s.put(rows)` with each new delayed row `[batch, num_codebooks]` (never the prompt)
and `s.end()` when it is done. `HiggsAudioV3RowTracker` follows those rows and the row that ends each sequence's speech
(`delay_higgs_v3.speech_end_row`), so it knows the complete codec frames; `HiggsAudioV3AudioStreamer` decodes them.
"""

from __future__ import annotations

import queue

import torch
from transformers.generation import BaseStreamer

from .delay_higgs_v3 import HiggsAudioV3AudioSpec


class HiggsAudioV3RowTracker(BaseStreamer):
    r"""
    Follows the delayed rows `generate` streams: `num_rows` received so far, `end_row` `[batch]` (the row that ended
    each sequence's speech, `NO_END` while it has not), and, with `keep_rows`, the rows themselves on the CPU.
    Subclasses react in `on_rows` (after every `put`) and `on_end`.
    """

    def __init__(self, spec: HiggsAudioV3AudioSpec, keep_rows: bool = False):
        self.spec = spec
        self.keep_rows = keep_rows
        self.num_rows = 0
        self.end_row: torch.LongTensor | None = None  # [B]
        self.rows: torch.LongTensor | None = None  # [B, num_rows, C] on the CPU, with keep_rows

    def put(self, value: torch.Tensor) -> None:
        """Receive the newest delayed row(s): `[batch, num_codebooks]` or `[batch, k, num_codebooks]`."""
        num_codebooks, batch = self.spec.num_codebooks, None if self.end_row is None else self.end_row.shape[0]
        if value.dim() not in (2, 3) or value.shape[-1] != num_codebooks:
            raise ValueError(f"A Higgs Audio v3 streamer takes delayed rows [batch, {num_codebooks}] (or [batch, k, "
                             f"{num_codebooks}]), got shape {tuple(value.shape)}; do not pass the prompt.")
        if batch not in (None, value.shape[0]):
            raise ValueError(f"The batch size changed from {batch} to {value.shape[0]} while streaming.")
        if value.dim() == 2:
            value = value[:, None, :]  # [B, 1, C]
        value = value.detach().to(device="cpu", dtype=torch.long)
        end_row = self.spec.speech_end_row(value[:, :, 0], first_row=self.num_rows)  # [B]
        self.end_row = end_row if self.end_row is None else torch.minimum(self.end_row, end_row)
        if self.keep_rows:
            self.rows = value if self.rows is None else torch.cat([self.rows, value], dim=1)
        self.num_rows += value.shape[1]
        self.on_rows()

    def end(self) -> None:
        self.on_end()

    def on_rows(self) -> None:
        """Called after every `put`."""

    def on_end(self) -> None:
        """Called by `end`."""

    # ------------------------------------------------------------------ derived
    def complete_frames(self) -> torch.LongTensor:
        """`[batch]` codec frames of each sequence that are complete: all of its speech once it ended (a sequence
        ending at row `r` has `r` frames), else every frame whose last code (row `t + C - 1`) arrived."""
        if self.end_row is None:
            return torch.zeros(0, dtype=torch.long)
        return torch.clamp(self.end_row, max=self.spec.frames(self.num_rows))


class HiggsAudioV3AudioStreamer(HiggsAudioV3RowTracker):
    r"""
    Iterator over waveform chunks while `generate` runs (pass it as `streamer=`), for notebooks and live playback.

    A codec frame `t` is complete once row `t + C - 1` arrived. The codec's decoder is not causal (about 10 frames of
    receptive field each side), so each chunk of frames `[s, e)` is decoded from frames `[s - context_frames,
    e + context_frames)` and cut to its own samples: a chunk is emitted once `context_frames` complete frames follow it
    (or the sequence ended). With `context_frames` at least the receptive field, the chunks concatenated equal the
    one-shot decode of the same rows (`model.decode_audio`) up to float rounding.

    Each item is a float32 CPU tensor `[B, (e - s) * samples_per_frame]` (zeros beyond a sequence's end): first
    `first_chunk_frames` frames (after about `first_chunk_frames + context_frames + C - 1` rows), then `chunk_frames`,
    then what is left. Decoding runs inside `put`, in the thread running `generate`; if `generate` fails, iteration
    blocks: pass `timeout` (seconds) to get a `queue.Empty` instead. `model` must have its codec.

    Example:

    ```python
    >>> from threading import Thread
    >>> streamer = model.audio_streamer()  # doctest: +SKIP
    >>> Thread(target=model.generate, kwargs={**inputs, "streamer": streamer}).start()  # doctest: +SKIP
    >>> for chunk in streamer:  # doctest: +SKIP
    ...     play(chunk[0])
    ```
    """

    def __init__(self, model, first_chunk_frames: int = 10, chunk_frames: int = 25, context_frames: int = 12,
                 timeout: float | None = None):
        self.codec = model._require_codec("Streaming audio")
        if first_chunk_frames < 1 or chunk_frames < 1 or context_frames < 0:
            raise ValueError(
                f"first_chunk_frames ({first_chunk_frames}) and chunk_frames ({chunk_frames}) must be at least 1 and "
                f"context_frames ({context_frames}) at least 0."
            )
        super().__init__(model.config.audio_spec, keep_rows=True)
        self.first_chunk_frames = first_chunk_frames
        self.chunk_frames = chunk_frames
        self.context_frames = context_frames
        self.timeout = timeout
        self._emitted = 0  # frames already emitted (the same for every sequence)
        self._queue: queue.Queue = queue.Queue()

    # ------------------------------------------------------------------ streamer hooks
    def on_rows(self) -> None:
        self._emit(final=False)

    def on_end(self) -> None:
        if self.rows is not None:
            self._emit(final=True)
        self._queue.put(None)

    def __iter__(self):
        return self

    def __next__(self) -> torch.FloatTensor:
        chunk = self._queue.get(timeout=self.timeout)
        if chunk is None:
            raise StopIteration
        return chunk

    def piece_rows(self, index: int) -> int:
        """Rows after which piece `index` (0, 1, ...) is emitted while speech goes on (`_emit`'s rule): its frames, the
        frames before it and `context_frames` complete frames after it. Rows put in groups that end there (or at the
        end) give the same pieces as rows put one by one."""
        return self.first_chunk_frames + index * self.chunk_frames + self.context_frames + self.spec.max_delay

    # ------------------------------------------------------------------ decoding
    def _emit(self, final: bool) -> None:
        available = self.complete_frames()  # [B] decodable frames of each sequence
        finished = self.end_row <= self.spec.frames(self.num_rows)  # [B] ended, and its last frame complete
        if final or bool(finished.all()):
            target = int(available.max())
        else:
            target = int(available[~finished].min()) - self.context_frames
            needed = self.first_chunk_frames if self._emitted == 0 else self.chunk_frames
            if target - self._emitted < needed:
                return
        if target <= self._emitted:
            return
        self._queue.put(self._decode_chunk(self._emitted, target, available.tolist()))
        self._emitted = target

    def _decode_chunk(self, start: int, end: int, available: list[int]) -> torch.FloatTensor:
        """Samples of frames `[start, end)` of every sequence: `[B, (end - start) * samples_per_frame]`."""
        codes, _ = self.spec.rows_to_codes(self.rows, torch.full_like(self.end_row, self.num_rows))  # [B, T, C]
        windows: dict[tuple[int, int], list[int]] = {}  # sequences that decode the same window of frames, together
        for b, edge in enumerate(available):
            if start < edge:
                window = (max(0, start - self.context_frames), min(end + self.context_frames, edge))
                windows.setdefault(window, []).append(b)
        spf = self.spec.samples_per_frame
        chunk = torch.zeros(len(available), (end - start) * spf)
        for (low, high), batch_rows in windows.items():
            audio = self.codec.decode_frames(codes[batch_rows, low:high])  # G x [(high - low) * spf]
            for waveform, b in zip(audio, batch_rows):
                stop = min(end, available[b])
                chunk[b, : (stop - start) * spf] = waveform[(start - low) * spf : (stop - low) * spf].cpu()
        return chunk


__all__ = ["HiggsAudioV3AudioStreamer", "HiggsAudioV3RowTracker"]
