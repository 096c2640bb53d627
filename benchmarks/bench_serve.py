# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""`higgs-v3 serve` under load, on the tiny random model on this CPU: ratios from one run, all variants in one process.

```
python benchmarks/bench_serve.py                       # 16 requests; concurrency 1, 4, 16; the step-level figures
python benchmarks/bench_serve.py --requests 32 --seconds 2
```

- **Throughput.** The same `--requests` requests (distinct texts and seeds, `--seconds` of audio each: the random model
  never ends its speech) are sent one at a time, then by 1, 4 and 16 concurrent clients; each variant's throughput
  (requests per second) is divided by the one-at-a-time one. Above 1: the worker decoded concurrent requests in the
  same steps (the largest batch is printed). The concurrent variants' audio is compared byte for byte with the
  one-at-a-time run and the responses that differ are counted (the server runs without `batch_invariant`, so float
  rounding may change a long one: docs/SERVING.md).
- **Unequal lengths.** 16 requests of 2, 4, 6 and 8 s of audio (four each, `max_seconds`) sent at once against the
  same sent one at a time: the wall time of the second over the first's (issue 31's target: at least 6x). With
  step-level batching a request that ended leaves the batch at once.
- **The codec's traced graph.** The same 16 requests sent at once with the codec decoding eagerly, over with the graph
  the server traces (`serving/codec.py`: the same samples, decoded without holding Python's lock): wall time.
- **Time to first audio byte.** One request streamed (`stream_format="audio"`, pcm) against the same request whole:
  the first byte's time over the whole response's. And under load: the same streamed request sent while 15 whole
  requests of 4-8 s are being spoken, its first byte over its first byte alone (target: at most 1.5x).
- **The same, decoding only.** The 16 unequal requests decoded on the session in this process (no HTTP, no codec):
  one at a time over at once, what step-level batching itself gains; the server's figure adds its fixed costs (the
  codec decoding each take, on its own thread, and HTTP), which batching does not share.
- **`higgs-v3 batch`: the decode session over static batching.** `run_batch` on a manifest of `--batch-items` items
  whose lengths differ (the tiny random model with codebook 0's end-of-speech logit raised by 2.5, so items end by
  themselves after 15 to 207 rows, seed by seed; 8 s at most), at `--batch-size` 8: static batching
  (`scheduling="static"`, `generate` calls of 8 that run until their longest item ends) over the session's wall time.

The server is the real app under uvicorn in this process (a thread), spoken to over HTTP with httpx. Wall clock
(requests wait on each other by design); `--rounds` repeats each measurement and keeps the median ratio. The real
model on a GPU: `gpu_benchmark.py`'s serve phase.
"""

from __future__ import annotations

import socket
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import common_parser, pyplot, save_figure, setup, write_results  # noqa: E402


CONCURRENCY = (1, 4, 16)


def start_server(model, processor, seconds: float, max_batch_size: int, voices: str):
    """The app under uvicorn in a daemon thread on a free port; returns (base URL, uvicorn server)."""
    import uvicorn

    from higgs_v3.serving.app import ServeSettings, create_app

    settings = ServeSettings("tiny", voices, max_batch_size=max_batch_size, batch_wait_ms=10, max_queue=1024,
                             max_seconds=seconds)
    listener = socket.socket()  # bound here and handed to uvicorn: no other process can take the port in between
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(model, processor, settings), log_level="error"))
    server.thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    server.thread.start()
    while not server.started:
        if not server.thread.is_alive():
            raise RuntimeError("The benchmark's server did not start (its error is printed above).")
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


UNEQUAL_SECONDS = (2.0, 4.0, 6.0, 8.0)
"""The lengths of the unequal-length requests (four of each) and of the background load (its longer three)."""


def measure(model, processor, requests: int, seconds: float, rounds: int, load: bool = True) -> dict:
    """The ratios of the module doc for `model` served with `processor` (also `gpu_benchmark.py`'s serve phase);
    `load`: the unequal-length and first-byte-under-load figures too."""
    import httpx

    with tempfile.TemporaryDirectory() as voices:
        url, server = start_server(model, processor, seconds, max(CONCURRENCY), voices)
        bodies = [{"model": "tiny", "input": f"Request {i} of the benchmark.", "response_format": "pcm", "seed": i}
                  for i in range(requests)]
        rows: dict[str, list[float]] = {f"concurrency {c}": [] for c in CONCURRENCY}
        differing = 0  # responses whose audio differs from one at a time (float rounding: no batch_invariant)
        rows |= {"first byte / whole response": []} | ({
            "16 unequal lengths: at once over one at a time": [],
            "first byte beside 15 others / first byte alone": [],
            "16 unequal lengths at once: codec eager / traced": []} if load else {})
        try:
            with httpx.Client(base_url=url, timeout=600) as http:
                throughput(http, bodies[:2], None)  # warm-up
                for _ in range(rounds):
                    alone, expected = throughput(http, bodies, None)
                    for c in CONCURRENCY:
                        rate, audio = throughput(http, bodies, c)
                        differing += sum(a != b for a, b in zip(audio, expected))
                        rows[f"concurrency {c}"].append(rate / alone)
                    first, whole = first_byte(http, bodies[0])
                    rows["first byte / whole response"].append(first / whole)
                    if load:
                        rows["16 unequal lengths: at once over one at a time"].append(unequal_lengths(http))
                        rows["first byte beside 15 others / first byte alone"].append(first_byte_under_load(http))
                        rows["16 unequal lengths at once: codec eager / traced"].append(
                            eager_codec_over_traced(http, model.codec))
                largest = http.get("/health").json()["largest_batch"]
        finally:
            server.should_exit = True
            server.thread.join(30)
    ratios = {name: statistics.median(values) for name, values in rows.items()}
    return {"requests": requests, "seconds": seconds, "rounds": rounds, "largest_batch": largest, "ratios": ratios,
            "differing_responses": differing, "compared_responses": rounds * requests * len(CONCURRENCY)}


def unequal_bodies(count: int = 16) -> list[dict]:
    """`count` requests of `UNEQUAL_SECONDS` (four each)."""
    return [{"model": "tiny", "input": f"Unequal request {i}.", "response_format": "pcm", "seed": 100 + i,
             "max_seconds": UNEQUAL_SECONDS[i % len(UNEQUAL_SECONDS)]} for i in range(count)]


def unequal_lengths(http, count: int = 16) -> float:
    """16 requests of `UNEQUAL_SECONDS` (four each) sent at once: the one-at-a-time wall time over theirs."""
    bodies = unequal_bodies(count)
    alone, _ = throughput(http, bodies, None)
    together, _ = throughput(http, bodies, count)
    return together / alone


def eager_codec_over_traced(http, codec, count: int = 16) -> float:
    """The 16 unequal requests sent at once with the codec decoding eagerly, over with its traced graph (the server's
    own, `serving/codec.py`): wall time, interleaved, the same audio."""
    bodies, graph, walls = unequal_bodies(count), codec.decode_graph, {}
    try:
        for name in ("traced", "eager"):
            codec.decode_graph = graph if name == "traced" else None
            walls[name] = count / throughput(http, bodies, count)[0]
    finally:
        codec.decode_graph = graph
    return walls["eager"] / walls["traced"]


def first_byte_under_load(http, others: int = 15) -> float:
    """A streamed 3 s request's first byte while `others` whole requests of 4-8 s are being spoken (sent once they are
    all in the worker's session), over its first byte alone (the median of 3 each)."""
    body = {"model": "tiny", "input": "The streamed request.", "response_format": "pcm", "seed": 7,
            "max_seconds": 3.0, "stream_format": "audio"}
    alone = statistics.median(first_byte(http, body, whole=False)[0] for _ in range(3))
    loaded = []
    for round_ in range(3):
        load = [{"model": "tiny", "input": f"Background {i}.", "response_format": "pcm", "seed": 200 + i + 100 * round_,
                 "max_seconds": UNEQUAL_SECONDS[1 + i % 3]} for i in range(others)]
        with ThreadPoolExecutor(others) as pool:
            futures = [pool.submit(http.post, "/v1/audio/speech", json=item) for item in load]
            while http.get("/health").json()["active"] < others and not all(f.done() for f in futures):
                time.sleep(0.005)
            loaded.append(first_byte(http, body, whole=False)[0])
            for future in futures:
                future.result().raise_for_status()
    return statistics.median(loaded) / alone


def session_unequal(model, processor, count: int = 16) -> float:
    """The unequal-length figure without the server: the 16 requests' decoding on the session in this thread (no
    HTTP, no codec), one at a time over at once: what step-level batching itself gains."""
    from higgs_v3.serving.session import DecodeRequest, DecodeSession

    spec = model.config.audio_spec
    requests = [(f"Unequal request {i}.", 100 + i, spec.rows_for_seconds(UNEQUAL_SECONDS[i % len(UNEQUAL_SECONDS)]))
                for i in range(count)]

    def decode(group) -> float:
        session, began = DecodeSession(model, count), time.perf_counter()
        for text, seed, rows in group:
            session.add(DecodeRequest(processor([text]), seed=seed, options={"max_new_tokens": rows}))
        while not session.idle:
            session.step()
        return time.perf_counter() - began

    alone = sum(decode([request]) for request in requests)
    return alone / decode(requests)


def batch_scheduling(items: int = 32, batch_size: int = 8, max_seconds: float = 8.0) -> dict:
    """`run_batch` on a manifest of `items` items of unequal lengths (see the module doc): static batching's wall time
    over the decode session's, and the spread of the items' lengths."""
    import json

    import torch

    from higgs_v3.cli.batch import read_manifest, run_batch
    from higgs_v3.cli.models import ensure_tiny_random, load_model, load_processor

    path = ensure_tiny_random()
    model, processor = load_model(path, "cpu", "float32"), load_processor(path)
    eoc = torch.tensor([model.config.audio_eoc_token_id])  # codebook 0's end of speech, +2.5 to its logit: drawn now
    model.audio_head.register_forward_hook(  # and then, so items end by themselves, seed by seed (8-207 rows here)
        lambda module, inputs, logits: logits.index_add(-1, eoc, torch.full((*logits.shape[:-1], 1), 2.5)))
    times, durations = {}, {}
    with tempfile.TemporaryDirectory() as folder:
        manifest = Path(folder) / "manifest.jsonl"
        manifest.write_text("".join(json.dumps({"text": f"Item number {i} of the manifest.", "output": f"item{i}",
                                                "seed": i}) + "\n" for i in range(items)))
        for scheduling in ("static", "session", "static", "session"):  # interleaved; the second of each counts
            out = Path(folder) / f"{scheduling}-{len(times)}"
            began = time.perf_counter()
            summary = run_batch(model, processor, read_manifest(manifest), out, batch_size=batch_size,
                                max_seconds=max_seconds, progress=False, scheduling=scheduling)
            times[scheduling] = time.perf_counter() - began
            durations[scheduling] = summary.audio_seconds
            records = [json.loads(p.read_text()) for p in (out / ".higgs_v3_batch").iterdir()]
    lengths = sorted(record["duration"] for record in records)
    return {"static over session": times["static"] / times["session"], "static_s": times["static"],
            "session_s": times["session"], "audio_s": durations["session"],
            "item_seconds": {"min": lengths[0], "median": lengths[len(lengths) // 2], "max": lengths[-1]}}


def throughput(http, bodies: list[dict], concurrency: int | None) -> tuple[float, list[bytes]]:
    """Requests per second for `bodies` sent one at a time (None) or by `concurrency` clients; and the audio."""
    began = time.perf_counter()
    if concurrency is None:
        audio = [http.post("/v1/audio/speech", json=body).content for body in bodies]
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            audio = list(pool.map(lambda body: http.post("/v1/audio/speech", json=body).content, bodies))
    return len(bodies) / (time.perf_counter() - began), audio


def first_byte(http, body: dict, whole: bool = True) -> tuple[float, float | None]:
    """(time to the first audio byte of the streamed request, time of the whole response (with `whole`))."""
    began, first = time.perf_counter(), None
    with http.stream("POST", "/v1/audio/speech", json={**body, "stream_format": "audio"}) as response:
        for _ in response.iter_raw():
            first = time.perf_counter() - began if first is None else first
    if not whole:
        return first, None
    began = time.perf_counter()
    http.post("/v1/audio/speech", json={**body, "stream_format": None}).raise_for_status()
    return first, time.perf_counter() - began


def main(argv: list[str] | None = None) -> dict:
    parser = common_parser(__doc__.split("\n\n")[0], rounds=1)
    parser.add_argument("--requests", type=int, default=16, help="requests per variant (default 16)")
    parser.add_argument("--seconds", type=float, default=2.0, help="audio per request (default 2 s)")
    parser.add_argument("--batch-items", type=int, default=32,
                        help="items of the `higgs-v3 batch` comparison (default 32; 0 skips it)")
    parser.add_argument("--no-load", action="store_true", help="skip the unequal-length and under-load figures")
    args = parser.parse_args(argv)
    setup(args.threads)
    from higgs_v3.cli.models import ensure_tiny_random, load_model, load_processor

    path = ensure_tiny_random()
    payload = measure(load_model(path, "cpu", "float32"), load_processor(path), args.requests, args.seconds,
                      args.rounds, load=not args.no_load)
    if not args.no_load:
        model, processor = load_model(path, "cpu", "float32"), load_processor(path)
        payload["ratios"]["16 unequal lengths, the session alone (no HTTP, no codec)"] = statistics.median(
            session_unequal(model, processor) for _ in range(args.rounds))
    if args.batch_items:
        payload["batch"] = batch_scheduling(args.batch_items)
        payload["ratios"]["higgs-v3 batch: static over session"] = payload["batch"]["static over session"]
    results = payload["ratios"]
    print(f"bench_serve: {args.requests} requests of {args.seconds:g} s, tiny random model, CPU, "
          f"{args.threads} thread(s); largest batch {payload['largest_batch']}; "
          f"{payload['differing_responses']} of {payload['compared_responses']} concurrent responses differ from one "
          "at a time (float rounding, no batch_invariant)")
    for name, value in results.items():
        label = f"throughput, {name} / one at a time" if name.startswith("concurrency") else name
        print(f"  {label:50s} {value:6.2f}x")
    if args.batch_items:
        batch = payload["batch"]
        print(f"  (batch: {args.batch_items} items of {batch['item_seconds']['min']:.2f}-"
              f"{batch['item_seconds']['max']:.2f} s, median {batch['item_seconds']['median']:.2f} s; static "
              f"{batch['static_s']:.2f} s, session {batch['session_s']:.2f} s)")
    write_results(args.out, "bench_serve", payload, args.json)
    if not args.no_plot and _has_matplotlib():
        plt = pyplot()
        figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
        left.bar([str(c) for c in CONCURRENCY], [results[f"concurrency {c}"] for c in CONCURRENCY])
        left.axhline(1.0, color="gray", linewidth=0.8)
        left.set(xlabel="concurrent clients", ylabel="throughput / one at a time", title="step-level batching")
        right.bar(["first audio byte", "whole response"], [results["first byte / whole response"], 1.0])
        right.set(ylabel="time / whole response", title="streaming")
        save_figure(figure, args.out, "bench_serve")
    return payload


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("  (no plot: matplotlib is not installed; pip install 'higgs-v3[bench]')")
        return False
    return True


if __name__ == "__main__":
    main()
