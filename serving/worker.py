# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""The one model worker of `higgs-v3 serve`: a thread that owns the model and speaks the chunks every request submits,
gathering concurrent ones into one `generate` call (dynamic batching).

```
request handlers (event loop) ──submit(chunk)──> bounded queue ──> worker thread:
    wait for a chunk; gather more for up to batch_wait_ms, up to max_batch_size, with the same generation options
    processor(texts, reference=voices) -> model.generate(seed=[each chunk's], streamer=...) -> one waveform per chunk
    a whole chunk's bad take (`judge_take`) with retries left -> held, first in the next batch, seed retry_seed(seed, k)
<── audio pieces while rows are decoded (streamed chunks: the model's audio streamer), then the chunk's result
```

Bad takes are redone as `synthesize_long` redoes them (`longform_higgs_v3`: `judge_take`, `retry_seed`, `_better_take`):
a chunk with `retries` whose take ran to the limit or lasts out of `DEFAULT_SECONDS_PER_CHAR` is queued again (ahead of
the queue, so its redo batches with the work that came meanwhile) with seed `retry_seed(seed, attempt)`, until a good
take or `retries` redos; the kept take is the library's. A streamed chunk is one take (its audio is already sent).

A seeded sequence gets the same codes alone or in any batch, and each waveform is decoded alone
(`model.decode_audio` of its own rows: a batched convolution may sum in another order), so a chunk's audio does not
depend on what else is in flight.

The queue's bound (`max_queue`) counts places: a chunk takes one at `submit` (or a request reserves all of its chunks'
at once, `reserve`), and owns it until the chunk ends, whichever way: its result delivered (a redo keeps it), its error
delivered, dropped because its client left (`cancelled`, seen when a batch is formed or when its take is judged: a
departed client's take is never redone), or cut at shutdown. `_end` is the one place a place is freed, once per chunk,
before the chunk's end is delivered: a client that has its answer finds its place free. A full queue refuses a chunk
(`QueueFull`: the server answers 503); `wait_idle` waits until every place is back. `stop()` lets the queued chunks
finish first; `stop(deadline)` cuts, after `deadline` seconds, what is still queued and the `generate` in flight (at its
next step), and says how many chunks it cut.
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
from transformers import StoppingCriteria

from ..compat_higgs_v3 import CACHE_KWARG
from ..longform_higgs_v3 import DEFAULT_SECONDS_PER_CHAR, ChunkResult, _better_take, judge_take
from ..sampling_higgs_v3 import retry_seed
from ..streaming_higgs_v3 import HiggsAudioV3AudioStreamer


QueueFull = queue.Full


class ShutdownCut(RuntimeError):
    """A chunk that was queued or in flight when the server's shutdown deadline passed."""


@dataclass
class Chunk:
    """One text to speak: its voice (None: the model's own), seed, generation options (`generate` keyword arguments,
    the same for a whole batch), whether its audio is streamed, how many times a bad take is redone (`retries`; a
    streamed chunk has none), and where its results go (`pieces`, an asyncio queue: `("audio", samples)` while
    streamed, then `("done", ChunkOutput)` or `("error", exception)`)."""

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
    seed, `problem` and every take in `attempts`), with the size of the batch its kept take was generated in."""

    batch_size: int = 1


class _Call:
    """A function to run on the worker thread (encoding a reference clip: the model is the worker's alone)."""

    def __init__(self, function):
        self.function, self.future = function, Future()


_STOP = object()


class SpeechWorker:
    """The thread that owns `model` and `processor`; `submit` chunks, `call` functions, `stop` to drain and end."""

    def __init__(self, model, processor, *, max_batch_size: int = 8, batch_wait_ms: float = 10.0,
                 max_queue: int = 64):
        self.model, self.processor = model, processor
        self.max_batch_size, self.batch_wait = max_batch_size, batch_wait_ms / 1000
        self._queue: queue.Queue = queue.Queue()
        self._held: deque = deque()  # chunks taken from the queue that did not fit the last batch, and redos
        self.capacity, self._free = max_queue, max_queue  # places: a chunk owns one from `submit` to `_end`
        self._lock = threading.Lock()
        self._places_back = threading.Condition(self._lock)  # notified when a place is freed (`wait_idle`)
        self._abort = threading.Event()  # set by `stop`'s deadline: cut what is left
        self.batches, self.largest_batch = 0, 0  # how many batches were generated, and the largest
        self.cut = 0  # chunks cut by `stop`'s deadline
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
        """Run `function()` on the worker thread, between batches; its result (or its exception)."""
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
        being generated then is cut: the `generate` in flight stops at its next step and each chunk left gets a
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

    # ------------------------------------------------------------------ the worker thread
    def _serve(self) -> None:
        while True:
            first = self._held.popleft() if self._held else self._queue.get()
            if first is _STOP:
                if not self._held:
                    return
                self._held.append(_STOP)  # redos were held behind the stop (a full batch did not reach it): them first
                continue
            if isinstance(first, _Call):
                self._run_call(first)
                continue
            gathered, stop = self._gather(first)
            batch = []
            for chunk in gathered:
                if self._abort.is_set():
                    self._cut(chunk)
                elif chunk.cancelled.is_set():
                    self._end(chunk)  # its client left: dropped
                else:
                    batch.append(chunk)
            if batch:
                self._speak(batch)
            if stop:
                self._held.append(_STOP)

    def _gather(self, first: Chunk) -> tuple[list[Chunk], bool]:
        """`first` and the chunks with its options that arrive within `batch_wait` (held ones first), at most
        `max_batch_size`; the others are held for the next batch. Calls run at once."""
        batch, kept = [first], deque()
        while self._held and len(batch) < self.max_batch_size:
            chunk = self._held.popleft()
            (batch if chunk is not _STOP and chunk.options == first.options else kept).append(chunk)
        deadline = time.monotonic() + self.batch_wait
        stop = _STOP in kept
        while len(batch) < self.max_batch_size and not stop:
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is _STOP:
                stop = True
            elif isinstance(item, _Call):
                self._run_call(item)
            else:
                (batch if item.options == first.options else kept).append(item)
        self._held = deque([item for item in kept if item is not _STOP]) + self._held
        return batch, stop

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

    def _speak(self, batch: list[Chunk]) -> None:
        """One `generate` call for the batch, then each chunk's take judged. A batch that raises is spoken again chunk
        by chunk, so a bad chunk fails alone."""
        try:
            takes = self._generate(batch)
        except Exception as error:  # noqa: BLE001 - alone, the chunk gets it; in a batch, each is retried alone
            if len(batch) == 1:
                self._end(batch[0], ("error", error))
            else:
                for chunk in batch:
                    self._speak([chunk])
            return
        for chunk, take in zip(batch, takes):
            try:
                self._cut(chunk) if self._abort.is_set() else self._judge(chunk, take)
            except Exception as error:  # noqa: BLE001 - a fault judging one take ends that chunk alone
                self._end(chunk, ("error", error))

    def _generate(self, batch: list[Chunk]) -> list[ChunkOutput]:
        """The batch's takes: one `generate` call, each waveform decoded alone."""
        spec = self.model.config.audio_spec
        inputs = self.processor([chunk.text for chunk in batch], reference=[chunk.voice for chunk in batch])
        streamer = _RoutingStreamer(self.model, batch) if any(chunk.stream for chunk in batch) else None
        with torch.inference_mode():
            output = self.model.generate(**inputs.to(self.model.device), seed=[chunk.take_seed for chunk in batch],
                                         return_dict_in_generate=True, output_audio=False, streamer=streamer,
                                         stopping_criteria=[_Abort(self._abort)], **dict(batch[0].options))
            output[CACHE_KWARG] = None  # the KV cache is not needed to decode the audio: freed first
            frames, finished = output.audio_code_lengths.tolist(), output.finished.tolist()
            self.batches, self.largest_batch = self.batches + 1, max(self.largest_batch, len(batch))
            takes = []
            for i, chunk in enumerate(batch):
                waveform = self.model.decode_audio(output.sequences[i : i + 1], output.lengths[i : i + 1])[0]
                takes.append(ChunkOutput(chunk.text, output.audio_codes[i, : frames[i]].cpu(), waveform.float().cpu(),
                                         bool(finished[i]), chunk.take_seed, spec.frame_rate, batch_size=len(batch)))
        return takes

    def _judge(self, chunk: Chunk, take: ChunkOutput) -> None:
        """End the chunk with its kept take (`_better_take` of the takes so far), or hold it, with its place, for a
        redo: its take is bad, it has retries left and its client is still there."""
        take = judge_take(take, DEFAULT_SECONDS_PER_CHAR)
        take = take if chunk.kept is None else _better_take(chunk.kept, take)
        if take.problem is not None and chunk.attempt < chunk.retries and not chunk.cancelled.is_set():
            chunk.kept, chunk.attempt = take, chunk.attempt + 1
            self._held.append(chunk)
        else:
            chunk.kept = None
            self._end(chunk, ("done", take))


class _Abort(StoppingCriteria):
    """Ends every row of the `generate` in flight once `event` is set (the shutdown deadline): one flag, no host read."""

    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, input_ids: torch.LongTensor, scores=None, **kwargs) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


class _RoutingStreamer(HiggsAudioV3AudioStreamer):
    """The model's audio streamer, each decoded piece handed to its chunk (the rows of the chunks that stream)."""

    def __init__(self, model, batch: list[Chunk]):
        super().__init__(model)
        self.batch = batch

    def _decode_chunk(self, start: int, end: int, available: list[int]):
        available = [edge if chunk.stream else 0 for edge, chunk in zip(available, self.batch)]  # streamed rows only
        pieces = super()._decode_chunk(start, end, available)
        samples = self.spec.samples_per_frame
        for b, chunk in enumerate(self.batch):
            if chunk.stream and available[b] > start:
                chunk.deliver(("audio", pieces[b, : (min(end, available[b]) - start) * samples].clone()))
        return None  # nobody iterates this streamer


__all__ = ["Chunk", "ChunkOutput", "QueueFull", "ShutdownCut", "SpeechWorker"]
