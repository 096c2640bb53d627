# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""`higgs-v3 serve`'s worker (`serving/worker.py`) on a fake decode session whose steps run only when the test lets
them: the queue's places all come back whatever happens (clients that leave, cancelled chunks, a chunk that fails at
its prefill alone, redone takes, calls between steps, a drain or a cut at shutdown), checked over seeded random
schedules; a departed client's take is never redone; `stop(deadline)` cuts the rows being decoded. No timing: the
session waits on a semaphore the test releases, and the test waits on the worker's events."""

from __future__ import annotations

import asyncio
import random
import threading
from types import SimpleNamespace

import pytest
import torch

from higgs_v3.serving.session import Cancelled
from higgs_v3.serving.worker import Chunk, QueueFull, ShutdownCut, SpeechWorker, _Call


FRAME_RATE, SAMPLES_PER_FRAME, CODEBOOKS = 25, 4, 2
WAIT = 60  # seconds: a deadline for an event that comes at once on a quiet machine (never a margin)


class FakeModel:
    """What the worker reads of the model (its audio spec, `decode_audio`), and the switches of its `FakeSession`:
    `gate` (one permit per step), `entered` (set by the first step), `block` (rows never end by themselves), `calls`
    (the texts admitted at each step that admitted any)."""

    def __init__(self):
        self.config = SimpleNamespace(audio_spec=SimpleNamespace(frame_rate=FRAME_RATE))
        self.device = torch.device("cpu")
        self.gate = threading.Semaphore(0)
        self.entered = threading.Event()
        self.block = False
        self.calls: list[list[str]] = []

    def decode_audio(self, sequences, lengths):
        return torch.zeros(1, int(lengths[0]) * SAMPLES_PER_FRAME)


class FakeSession:
    """The decode session as the worker drives it (`add`, `cancel`, `step`, `idle`, `free`): each step with requests
    takes one permit of `model.gate` (with `block`, only the first); a text of "boom" fails at its prefill, "bad" runs
    to the limit (8 frames: a bad take), anything else ends after 3 steps (a good take for a short text)."""

    def __init__(self, model: FakeModel, max_batch_size: int):
        self.model, self.max_batch_size = model, max_batch_size
        self.pending, self.rows, self.largest_batch = [], [], 0

    @property
    def idle(self) -> bool:
        return not (self.pending or self.rows)

    @property
    def free(self) -> int:
        return self.max_batch_size - len(self.pending) - len(self.rows)

    def add(self, request) -> None:
        assert self.free > 0, "the worker added a request to a full session"
        request.steps, request.gone = 0, False
        self.pending.append(request)

    def cancel(self, request) -> None:
        request.gone = True

    def step(self) -> None:
        for request in [r for r in self.pending + self.rows if r.gone]:
            (self.pending if request in self.pending else self.rows).remove(request)
            self._end(request, Cancelled())
        if self.idle:
            return
        if not (self.model.block and self.model.entered.is_set()):
            self.model.entered.set()
            assert self.model.gate.acquire(timeout=WAIT), "the test never let this step run"
        else:
            threading.Event().wait(0.001)  # the cut comes from another thread: step on as a session would
        admitted, self.pending = self.pending, []
        if admitted:
            self.model.calls.append([request.inputs["texts"][0] for request in admitted])
        for request in admitted:
            if request.inputs["texts"][0] == "boom":
                self._end(request, ValueError("boom"))
            else:
                self.rows.append(request)
        self.largest_batch = max(self.largest_batch, len(self.rows))
        for request in list(self.rows):
            request.steps += 1
            text = request.inputs["texts"][0]
            if not self.model.block and request.steps == (8 if text == "bad" else 3):
                self.rows.remove(request)
                frames = torch.tensor([request.steps])
                request.output = Output(
                    audio_code_lengths=frames, finished=torch.tensor([text != "bad"]), lengths=frames,
                    sequences=torch.zeros(1, 8, CODEBOOKS, dtype=torch.long),
                    audio_codes=torch.zeros(1, 8, CODEBOOKS, dtype=torch.long))
                request.largest_batch = self.largest_batch
                request.on_end(request)

    def _end(self, request, error) -> None:
        request.error = error
        request.on_end(request)


def fake_worker(model: FakeModel, max_batch_size: int = 8, worker_class=None, **options) -> SpeechWorker:
    """A worker over `model`'s `FakeSession`."""
    return (worker_class or SpeechWorker)(model, fake_processor, session=FakeSession(model, max_batch_size),
                                          **options)


class Output(dict):
    """A `ModelOutput`'s item and attribute access."""

    __getattr__ = dict.__getitem__


class FakeInputs(dict):
    def to(self, device):
        return self


def fake_processor(texts, reference):
    return FakeInputs(texts=texts)


def ended(chunk: Chunk) -> list[tuple]:
    """The chunk's final deliveries so far (`done` or `error`)."""
    items = []
    while not chunk.pieces.empty():
        items.append(chunk.pieces.get_nowait())
    chunk.ends = getattr(chunk, "ends", []) + [item for item in items if item[0] != "audio"]
    return chunk.ends


async def run_schedule(seed: int, worker_class=SpeechWorker) -> None:
    """One seeded random schedule of submissions, reservations, departures, calls and generate steps, then a drain or
    a cut; asserts every place came back and every chunk ended at most once (exactly once unless dropped)."""
    rng, loop = random.Random(seed), asyncio.get_running_loop()
    model = FakeModel()
    worker = fake_worker(model, rng.choice([1, 2, 4]), worker_class, batch_wait_ms=0,
                         max_queue=rng.choice([2, 3, 6]))
    chunks: list[Chunk] = []
    options = [(), (("top_k", 5),)]
    for _ in range(rng.randrange(20, 60)):
        action = rng.random()
        if action < 0.3:  # a request of 1-3 chunks, all its places reserved at once, as the app reserves them
            count = rng.randint(1, 3)
            try:
                worker.reserve(count)
            except QueueFull:
                continue
            submitted = rng.randint(0, count)  # fewer than reserved: the request failed or its client left
            for _ in range(submitted):
                chunk = Chunk(rng.choice(["ok", "bad", "boom", "ok"]), None, rng.randrange(100), rng.choice(options),
                              False, loop, retries=rng.randint(0, 3), reserved=True)
                worker.submit(chunk)
                chunks.append(chunk)
            worker.release(count - submitted)
        elif action < 0.4:  # a chunk submitted without a reservation
            chunk = Chunk(rng.choice(["ok", "bad"]), None, 1, rng.choice(options), False, loop, retries=1)
            try:
                worker.submit(chunk)
            except QueueFull:
                assert not chunk.reserved
                continue
            chunks.append(chunk)
        elif action < 0.55 and chunks:  # a client leaves
            rng.choice(chunks).cancelled.set()
        elif action < 0.6:  # a call between steps (a voice being encoded)
            worker._queue.put_nowait(_Call(lambda: None))
        else:  # one step may run
            model.gate.release()
        await asyncio.sleep(0)  # deliveries reach the chunks
    cut = rng.random() < 0.3
    for _ in range(10_000):
        model.gate.release()  # from now on every step runs
    stopped = await asyncio.to_thread(worker.stop, 0 if cut else None)
    await asyncio.sleep(0)
    for _ in range(3):
        await asyncio.sleep(0)
    assert worker.free == worker.capacity, f"seed {seed}: {worker.capacity - worker.free} place(s) never came back"
    assert worker.queued == 0
    for chunk in chunks:
        ends = ended(chunk)
        assert len(ends) <= 1, f"seed {seed}: a chunk ended {len(ends)} times"
        if not chunk.cancelled.is_set():
            assert len(ends) == 1, f"seed {seed}: chunk {chunk.text!r} never ended"
            kind, value = ends[0]
            if kind == "done":
                assert chunk.text != "boom" and len(value.attempts) <= chunk.retries + 1
                assert (value.problem is None) == (chunk.text == "ok") and (
                    chunk.text == "ok" or len(value.attempts) == chunk.retries + 1)
            elif isinstance(value, ShutdownCut):
                assert cut, f"seed {seed}: a chunk was cut by a drain without a deadline"
            else:
                assert chunk.text == "boom" and str(value) == "boom", value
    assert stopped == worker.cut and (cut or stopped == 0)


@pytest.mark.parametrize("seed", range(24))
def test_every_place_comes_back_over_random_schedules(seed):
    asyncio.run(run_schedule(seed))


class LeakyWorker(SpeechWorker):
    """A worker that forgets to free the place of a chunk whose client left (the kind of leak the check is for)."""

    def _end(self, chunk, item=None):
        if item is None:
            chunk.reserved = False
        super()._end(chunk, item)


def test_the_schedules_catch_a_leaked_place():
    leaked = []
    for seed in range(24):
        try:
            asyncio.run(run_schedule(seed, LeakyWorker))
        except AssertionError as error:
            leaked.append(str(error))
    assert leaked and all("place(s) never came back" in message for message in leaked), leaked


def test_a_departed_clients_take_is_never_redone():
    async def run():
        model, loop = FakeModel(), asyncio.get_running_loop()
        worker = fake_worker(model, max_queue=2)
        chunk = Chunk("bad", None, 5, (), False, loop, retries=10)
        worker.submit(chunk)
        await asyncio.to_thread(model.entered.wait, WAIT)
        chunk.cancelled.set()  # the client leaves while its first take is decoded: it leaves at the next step
        model.gate.release()
        assert await asyncio.to_thread(worker.wait_idle, WAIT)
        worker.stop()
        return chunk.output.done(), model.calls

    output_done, calls = asyncio.run(run())
    assert calls == [["bad"]] and not output_done  # dropped at the next step: neither redone nor answered


def test_stop_with_a_deadline_cuts_the_rows_being_decoded_and_what_is_queued():
    async def run():
        model, loop = FakeModel(), asyncio.get_running_loop()
        model.block = True  # the take being decoded ends only when cut
        worker = fake_worker(model, 1, max_queue=3)
        chunks = [Chunk(text, None, i, (), False, loop) for i, text in enumerate(["ok", "ok", "bad"])]
        for chunk in chunks:
            worker.submit(chunk)
        for _ in range(3):
            model.gate.release()
        await asyncio.to_thread(model.entered.wait, WAIT)
        cut = await asyncio.to_thread(worker.stop, 0)
        results = await asyncio.gather(*(chunk.output for chunk in chunks), return_exceptions=True)
        return cut, results, worker

    cut, results, worker = asyncio.run(run())
    assert cut == 3 and worker.free == 3 and not worker._thread.is_alive()
    assert all(isinstance(result, ShutdownCut) for result in results), results
    assert str(results[0]) == "The server shut down before this chunk was spoken."


def test_release_refuses_places_it_never_reserved():
    worker = fake_worker(FakeModel(), max_queue=2)
    try:
        worker.reserve(1)
        worker.release(1)
        with pytest.raises(RuntimeError, match="1 more queue places were released than reserved"):
            worker.release(1)
    finally:
        worker._free = worker.capacity
        worker.stop()


def test_a_redo_held_behind_the_stop_is_spoken_before_the_thread_ends():
    """A drained stop with a full session: the stop comes behind the chunks, a bad take's redo is held after it; it
    is spoken before the thread ends (it once was left unspoken, its client waiting for ever and its place lost)."""
    async def run():
        model, loop = FakeModel(), asyncio.get_running_loop()
        worker = fake_worker(model, 2, batch_wait_ms=0, max_queue=3)
        entered, release = threading.Event(), threading.Event()
        worker._queue.put_nowait(_Call(lambda: (entered.set(), release.wait(WAIT))))  # holds the thread meanwhile
        await asyncio.to_thread(entered.wait, WAIT)
        other = (("top_k", 5),)
        chunks = [Chunk("ok", None, 1, (), False, loop), Chunk("bad", None, 2, other, False, loop, retries=1),
                  Chunk("ok", None, 3, other, False, loop)]
        for chunk in chunks:
            worker.submit(chunk)
        stopping = asyncio.ensure_future(asyncio.to_thread(worker.stop))  # the stop is queued behind the chunks
        while worker._queue.qsize() < 4:
            await asyncio.sleep(0)
        for _ in range(16):  # the steps of the three takes and the redo
            model.gate.release()
        release.set()
        await stopping
        results = [await asyncio.wait_for(chunk.output, WAIT) for chunk in chunks]
        return results, model.calls, worker

    results, calls, worker = asyncio.run(run())
    assert calls == [["ok", "bad"], ["ok"], ["bad"]] and worker.free == 3  # admitted at steps 1, 4 (an ok ended), 9
    assert [len(result.attempts) for result in results] == [1, 2, 1]


def test_chunks_held_for_a_free_row_count_toward_max_queue():
    async def run():
        model, loop = FakeModel(), asyncio.get_running_loop()
        worker = fake_worker(model, 1, max_queue=2, batch_wait_ms=0)
        entered, release = threading.Event(), threading.Event()
        worker._queue.put_nowait(_Call(lambda: (entered.set(), release.wait(WAIT))))
        await asyncio.to_thread(entered.wait, WAIT)
        chunks = [Chunk("ok", None, 1, (), False, loop), Chunk("ok", None, 2, (("top_k", 5),), False, loop)]
        for chunk in chunks:  # both queued while the thread is busy: the second, with no room in the session, is held
            worker.submit(chunk)
        release.set()
        await asyncio.to_thread(model.entered.wait, WAIT)  # the first is being decoded, the second held
        held = len(worker._held)
        with pytest.raises(QueueFull):
            worker.submit(Chunk("ok", None, 3, (), False, loop))
        for _ in range(6):
            model.gate.release()
        await asyncio.gather(*(chunk.output for chunk in chunks))
        worker.stop()
        return held, worker.free

    assert asyncio.run(run()) == (1, 2)
