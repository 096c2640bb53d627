# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""The one model worker of `higgs-v3 serve`: a thread that owns the model and speaks the chunks every request submits
on a decode session (`serving/session.py`: step-level batching).

```
request handlers (event loop) ──submit(chunk)──> bounded queue ──> worker thread, every step:
    take what arrived (calls run at once, between steps); admit held chunks while the session has room
    (`max_batch_size` active requests): processor(text, reference=voice) -> session.add(seed=the take's seed)
    session.step(): every active chunk one row further; a chunk that ended leaves at once
codec thread: streamed rows -> audio pieces (one audio streamer per chunk, a small first piece); an ended take's
    waveform decoded alone (a streamed take's: its pieces joined, never decoded twice) and judged; a bad take
    (`judge_take`) with retries left -> held first by the worker, re-admitted with seed retry_seed(seed, k)
<── audio pieces while rows are drawn, then the chunk's result
```

The codec never runs inside a decode step: a step's cost is the model's alone, and the codec's work on the rows of
one step overlaps the next steps. It decodes through its traced graph (`serving/codec.py`: bit-identical, without
holding Python's lock, which the stepping thread needs between its operations).

A chunk joins the running decode at the next step: its first audio never waits for other people's speech, and a row
that ended never waits for the longest one. Bad takes are redone as `synthesize_long` redoes them (`longform_higgs_v3`:
`judge_take`, `retry_seed`, `_better_take`): a chunk with `retries` whose take ran to the limit or lasts out of
`DEFAULT_SECONDS_PER_CHAR` is held again (first), a new request with seed `retry_seed(seed, attempt)`, until a good
take or `retries` redos; the kept take is the library's. A streamed chunk is one take (its audio is already sent).

A seeded chunk draws the same codes alone or beside any others (the session's seeded sampler); with `batch_invariant`
its numbers do too, so its codes are bit-identical to `model.generate(seed=..., batch_invariant=True)` alone
(docs/SERVING.md). Each waveform is decoded alone (`model.decode_audio` of its own rows; a streamed chunk's pieces are
decoded from its own rows too).

The queue's bound (`max_queue`) counts places: a chunk takes one at `submit` (or a request reserves all of its chunks'
at once, `reserve`), and owns it until the chunk ends, whichever way: its result delivered (a redo keeps it), its error
delivered, dropped because its client left (`cancelled`: seen before it is admitted, and at every step while it is
decoded, where it leaves the session at the next step; a departed client's take is never redone), or cut at shutdown.
`_end` is the one place a place is freed, once per chunk, before the chunk's end is delivered: a client that has its
answer finds its place free. A full queue refuses a chunk (`QueueFull`: the server answers 503); `wait_idle` waits
until every place is back. `stop()` lets the queued chunks finish first; `stop(deadline)` cuts, after `deadline`
seconds, what is still queued and what the session is decoding (it leaves at the next step), and says how many chunks
it cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from ..longform_higgs_v3 import DEFAULT_SECONDS_PER_CHAR, ChunkResult, _better_take, judge_take
from ..sampling_higgs_v3 import retry_seed
from ..streaming_higgs_v3 import HiggsAudioV3AudioStreamer
from .codec import trace_decode
from .session import Cancelled, DecodeRequest, DecodeSession


QueueFull = queue.Full


class ShutdownCut(RuntimeError):
    """A chunk that was queued or in flight when the server's shutdown deadline passed."""


@dataclass
class Chunk:
    """One text to speak: its voice (None: the model's own), seed, generation options (`generate` keyword arguments),
    whether its audio is streamed (its first piece `first_chunk_frames` frames), how many times a bad take is redone
    (`retries`; a streamed chunk has none), and where its results go (`pieces`, an asyncio queue: `("audio",
    samples)` while streamed, then `("done", ChunkOutput)` or `("error", exception)`)."""

    text: str
    voice: object
    seed: int
    options: tuple
    stream: bool
    loop: asyncio.AbstractEventLoop
    retries: int = 0
    attempt: int = 0  # takes redone so far
    kept: ChunkOutput | None = None  # the take kept so far (`_better_take`), while a redo is due
    pieces: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    output: asyncio.Future | None = None  # the `ChunkOutput` (or the error), also when nobody reads `pieces`
    reserved: bool = False  # it holds a place in the queue's bound (`SpeechWorker.reserve`), until it ends (`_end`)
    first_chunk_frames: int = 10  # a streamed chunk's first piece (`HiggsAudioV3AudioStreamer`); later pieces 25
    request: DecodeRequest | None = None  # its take being decoded (`SpeechWorker._admit`)

    def __post_init__(self):
        self.output = self.loop.create_future()

    @property
    def take_seed(self) -> int:
        """The seed of the next take: `seed`, then `retry_seed(seed, attempt)`."""
        return retry_seed(self.seed, self.attempt) if self.attempt else self.seed

    def deliver(self, item: tuple) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            self.loop.call_soon_threadsafe(self._put, item)

    def _put(self, item: tuple) -> None:
        self.pieces.put_nowait(item)
        kind, value = item
        if kind != "audio" and not self.output.done():
            if kind == "done":
                self.output.set_result(value)
            else:
                self.output.set_exception(value)
                self.output.exception()  # retrieved: the handler reads it from `pieces` or `output`


@dataclass
class ChunkOutput(ChunkResult):
    """A spoken chunk, as the library's `ChunkResult` (codes, waveform, whether the model ended it, the kept take's
    seed, `problem` and every take in `attempts`), with the most requests its kept take shared a step with."""

    batch_size: int = 1


class _Call:
    """A function to run on the worker thread (encoding a reference clip: the model is the worker's alone)."""

    def __init__(self, function):
        self.function, self.future = function, Future()


_STOP = object()
_WAKE = object()  # put by the codec thread when a take is finished (a redo may be due)


class SpeechWorker:
    """The thread that owns `model` and `processor`; `submit` chunks, `call` functions, `stop` to drain and end. The
    chunks are decoded on `session` (default: a `DecodeSession` of `max_batch_size` requests, `batch_invariant`,
    `max_prefill_tokens`)."""

    def __init__(self, model, processor, *, max_batch_size: int = 8, batch_wait_ms: float = 10.0,
                 max_queue: int = 64, batch_invariant: bool = False, max_prefill_tokens: int | None = None,
                 session=None):
        self.model, self.processor = model, processor
        self.session = session if session is not None else DecodeSession(model, max_batch_size, batch_invariant,
                                                                          max_prefill_tokens)
        self.max_batch_size, self.batch_wait = self.session.max_batch_size, batch_wait_ms / 1000
        self._queue: queue.Queue = queue.Queue()
        self._held: deque = deque()  # chunks taken from the queue that the session has no room for yet, and redos
        self._decoding: list[Chunk] = []  # chunks in the session
        self.capacity, self._free = max_queue, max_queue  # places: a chunk owns one from `submit` to `_end`
        self._lock = threading.Lock()
        self._places_back = threading.Condition(self._lock)  # notified when a place is freed (`wait_idle`)
        self._abort = threading.Event()  # set by `stop`'s deadline: cut what is left
        self.batches, self.largest_batch = 0, 0  # takes admitted to the session, and the most decoded at one step
        self.cut = 0  # chunks cut by `stop`'s deadline
        codec = getattr(model, "codec", None)
        if hasattr(type(codec), "decode_graph") and codec.decode_graph is None:  # (a repo's older remote code: eager)
            trace_decode(codec)  # the codec thread decodes without holding Python's lock (serving/codec.py)
        self._codec_jobs: queue.Queue = queue.Queue()  # the codec thread's work, in order: stream pieces, takes
        self._redos: deque = deque()  # chunks the codec thread judged bad, for a redo (first in line)
        self._finishing = 0  # takes ended in the session and not yet finished by the codec thread
        self._codec_thread = threading.Thread(target=self._decode, name="higgs-v3-codec", daemon=True)
        self._codec_thread.start()
        self._thread = threading.Thread(target=self._serve, name="higgs-v3-worker", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the handlers' side
    def reserve(self, count: int) -> None:
        """Reserve `count` places of the queue's bound (all or none); `QueueFull` when they are not free."""
        with self._lock:
            if count > self._free:
                raise QueueFull
            self._free -= count

    def release(self, count: int) -> None:
        """Give back `count` places reserved and never used by a chunk (`submit` with `reserved=True` uses one)."""
        with self._lock:
            self._free += count
            if self._free > self.capacity:
                raise RuntimeError(f"{self._free - self.capacity} more queue places were released than reserved.")
            self._places_back.notify_all()

    def submit(self, chunk: Chunk) -> None:
        """Queue `chunk` (in a place reserved for it, or a new one); `QueueFull` when the queue is full."""
        if not chunk.reserved:
            self.reserve(1)
            chunk.reserved = True
        self._queue.put_nowait(chunk)

    async def call(self, function):
        """Run `function()` on the worker thread, between steps; its result (or its exception)."""
        call = _Call(function)
        self._queue.put_nowait(call)
        return await asyncio.wrap_future(call.future)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every place of the queue's bound is free (nothing queued, held, reserved or being spoken);
        False when `timeout` seconds passed first."""
        with self._places_back:
            return self._places_back.wait_for(lambda: self._free == self.capacity, timeout)

    @property
    def free(self) -> int:
        """Places of the queue's bound free now."""
        return self._free

    def stop(self, deadline: float | None = None) -> int:
        """Let every queued chunk finish, then end the thread. With `deadline` (seconds), what is still queued, held or
        being decoded then is cut: the session's rows leave at its next step and each chunk left gets a
        `ShutdownCut` error. Returns how many chunks were cut."""
        self._queue.put(_STOP)
        self._thread.join(deadline)
        if self._thread.is_alive():
            self._abort.set()
            self._thread.join()
        return self.cut

    @property
    def queued(self) -> int:
        return self._queue.qsize() + len(self._held)

    @property
    def active(self) -> int:
        """Chunks being decoded now (in the session)."""
        return len(self._decoding)

    # ------------------------------------------------------------------ the worker thread
    def _serve(self) -> None:
        try:
            self._steps()
        finally:
            self._codec_jobs.put(None)  # after every job queued: the codec thread ends once they are done
            self._codec_thread.join()

    def _steps(self) -> None:
        stopping = False
        while True:
            while self._redos:
                self._held.appendleft(self._redos.pop())
            idle = self.session.idle and not self._held
            if idle and stopping and not self._finishing:
                return
            stopping |= self._take(block=idle)
            if idle and self.batch_wait:  # an idle worker: what comes soon is prefilled with the first
                stopping |= self._take(block=False, wait=self.batch_wait)
            if self._abort.is_set():
                for chunk in self._held:
                    self._cut(chunk)
                self._held.clear()
            self._admit()
            for chunk in self._decoding:
                if chunk.cancelled.is_set() or self._abort.is_set():
                    self.session.cancel(chunk.request)  # it leaves at the start of this step
            self.session.step()
            self.largest_batch = max(self.largest_batch, self.session.largest_batch)

    def _take(self, block: bool, wait: float = 0.0) -> bool:
        """Move what arrived into `_held` (calls run at once): with `block`, wait for the first item; with `wait`, for
        more during `wait` seconds. True when the stop came."""
        stopping, deadline = False, time.monotonic() + wait
        while True:
            try:
                item = self._queue.get() if block else self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return stopping
            block = False
            if item is _WAKE:
                continue
            if item is _STOP:
                stopping = True
            elif isinstance(item, _Call):
                self._run_call(item)
            else:
                self._held.append(item)

    def _admit(self) -> None:
        """Held chunks into the session while it has room (a cancelled one is dropped, a bad one fails alone)."""
        while self._held and self.session.free:
            chunk = self._held.popleft()
            if chunk.cancelled.is_set():
                self._end(chunk)  # its client left: dropped
                continue
            try:
                inputs = self.processor([chunk.text], reference=[chunk.voice])
                streamer = _ChunkStreamer(self.model, chunk, self._codec_jobs) if chunk.stream else None
                chunk.request = DecodeRequest(
                    inputs, seed=chunk.take_seed, options=dict(chunk.options), context=(chunk, streamer),
                    on_row=None if streamer is None else streamer.gather, on_end=self._ended)
                self.session.add(chunk.request)
            except Exception as error:  # noqa: BLE001 - this chunk alone: its text, voice or options
                self._end(chunk, ("error", error))
                continue
            self._decoding.append(chunk)
            self.batches += 1

    def _run_call(self, call: _Call) -> None:
        try:
            call.future.set_result(call.function())
        except BaseException as error:  # noqa: BLE001 - handed to the waiting handler
            call.future.set_exception(error)

    def _end(self, chunk: Chunk, item: tuple | None = None) -> None:
        """The one place a chunk ends: its place in the queue's bound freed (once), then `item` (its result or its
        error) delivered; a dropped chunk (its client left) has no item."""
        if chunk.reserved:
            chunk.reserved = False
            self.release(1)
        if item is not None:
            chunk.deliver(item)

    def _cut(self, chunk: Chunk) -> None:
        self.cut += 1
        self._end(chunk, ("error", ShutdownCut("The server shut down before this chunk was spoken.")))

    def _ended(self, request: DecodeRequest) -> None:
        """The session's end of a take (on the worker thread): dropped (cancelled: its client left, or cut at
        shutdown), or handed to the codec thread (`_finish`), behind its stream's pieces."""
        chunk, streamer = request.context
        self._decoding.remove(chunk)
        if streamer is not None:
            streamer.hand_over()  # its last rows, before its end
        if isinstance(request.error, Cancelled):
            self._cut(chunk) if self._abort.is_set() else self._end(chunk)
            return
        with self._lock:
            self._finishing += 1
        self._codec_jobs.put(lambda: self._finish(request))

    def _decode(self) -> None:
        """The codec thread: streamed pieces and finished takes are decoded here, never inside a decode step."""
        while (job := self._codec_jobs.get()) is not None:
            job()

    def _finish(self, request: DecodeRequest) -> None:
        """A take's end on the codec thread: its error, or its last pieces, its waveform decoded alone and judged (kept,
        or held for a redo: the worker is woken)."""
        chunk, streamer = request.context
        try:
            if request.error is not None:
                self._end(chunk, ("error", request.error))
            else:
                if streamer is not None:
                    streamer.end()  # the last pieces before the result
                self._judge(chunk, self._take_of(chunk, request, streamer))
        except Exception as error:  # noqa: BLE001 - a fault judging one take ends that chunk alone
            self._end(chunk, ("error", error))
        finally:
            with self._lock:
                self._finishing -= 1
            self._queue.put(_WAKE)

    def _take_of(self, chunk: Chunk, request: DecodeRequest, streamer: _ChunkStreamer | None) -> ChunkOutput:
        """The take's codes and its waveform: decoded alone, or a streamed take's pieces joined (what its client got;
        the codec does not decode a streamed take twice)."""
        output = request.output
        if streamer is not None:
            waveform = torch.cat(streamer.pieces) if streamer.pieces else torch.zeros(0)
        else:
            waveform = self.model.decode_audio(output.sequences, output.lengths)[0]
        frames = int(output.audio_code_lengths[0])
        return ChunkOutput(chunk.text, output.audio_codes[0, :frames].cpu(), waveform.float().cpu(),
                           bool(output.finished[0]), chunk.take_seed, self.model.config.audio_spec.frame_rate,
                           batch_size=request.largest_batch)

    def _judge(self, chunk: Chunk, take: ChunkOutput) -> None:
        """End the chunk with its kept take (`_better_take` of the takes so far), or hold it, with its place, for a
        redo (first in line): its take is bad, it has retries left and its client is still there."""
        take = judge_take(take, DEFAULT_SECONDS_PER_CHAR)
        take = take if chunk.kept is None else _better_take(chunk.kept, take)
        if take.problem is not None and chunk.attempt < chunk.retries and not chunk.cancelled.is_set():
            chunk.kept, chunk.attempt = take, chunk.attempt + 1
            self._redos.append(chunk)  # the worker holds it first at its next step
        else:
            chunk.kept = None
            self._end(chunk, ("done", take))


class _ChunkStreamer(HiggsAudioV3AudioStreamer):
    """The model's audio streamer for one streamed chunk (batch 1): its first piece `chunk.first_chunk_frames`
    frames, each decoded piece handed to the chunk.

    Its rows are gathered on the worker thread (`gather`, the session's `on_row`) and handed to the codec thread (`put`,
    as a codec job) in groups that end where a piece is due (`piece_rows`) or at the take's end (`hand_over`): the
    pieces of rows put one by one, with one codec job per piece instead of one per row."""

    def __init__(self, model, chunk: Chunk, jobs: queue.Queue):
        super().__init__(model, first_chunk_frames=chunk.first_chunk_frames)
        self.chunk, self.pieces = chunk, []  # the pieces delivered: joined, the take's waveform
        self._jobs, self._gathered, self._rows_seen, self._next_piece = jobs, [], 0, 0  # the worker thread's

    def gather(self, row: torch.LongTensor) -> None:
        """A new row `[C]` (worker thread): kept, and the rows kept handed over once the next piece is due."""
        self._gathered.append(row)
        self._rows_seen += 1
        if self._rows_seen >= self.piece_rows(self._next_piece):
            self._next_piece += 1
            self.hand_over()

    def hand_over(self) -> None:
        """The rows gathered so far, put on the codec thread (skipped once the client left)."""
        if self._gathered:
            rows, self._gathered = torch.stack(self._gathered)[None], []  # [1, k, C]
            self._jobs.put(lambda: self.chunk.cancelled.is_set() or self.put(rows))

    def _decode_chunk(self, start: int, end: int, available: list[int]):
        piece = super()._decode_chunk(start, end, available)
        if available[0] > start:
            self.pieces.append(piece[0, : (min(end, available[0]) - start) * self.spec.samples_per_frame])
            self.chunk.deliver(("audio", self.pieces[-1]))
        return None  # nobody iterates this streamer


__all__ = ["Chunk", "ChunkOutput", "QueueFull", "ShutdownCut", "SpeechWorker"]
