# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""`higgs-v3 serve` under load, on the tiny random model on this CPU: ratios from one run, all variants in one process.

```
python benchmarks/bench_serve.py                       # 16 requests; concurrency 1, 4, 16
python benchmarks/bench_serve.py --requests 32 --seconds 2
```

- **Throughput.** The same `--requests` requests (distinct texts and seeds, `--seconds` of audio each: the random model
  never ends its speech) are sent one at a time, then by 1, 4 and 16 concurrent clients; each variant's throughput
  (requests per second) is divided by the one-at-a-time one. Above 1: the worker batched concurrent requests into
  fewer `generate` calls (their largest batch is printed). The concurrent variants' audio is checked byte for byte
  against the one-at-a-time run.
- **Time to first audio byte.** One request streamed (`stream_format="audio"`, pcm) against the same request whole:
  the first byte's time over the whole response's.

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
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(model, processor, settings), port=port, log_level="error"))
    server.thread = threading.Thread(target=server.run, daemon=True)
    server.thread.start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


def measure(model, processor, requests: int, seconds: float, rounds: int) -> dict:
    """The ratios of the module doc for `model` served with `processor` (also `gpu_benchmark.py`'s serve phase)."""
    import httpx

    with tempfile.TemporaryDirectory() as voices:
        url, server = start_server(model, processor, seconds, max(CONCURRENCY), voices)
        bodies = [{"model": "tiny", "input": f"Request {i} of the benchmark.", "response_format": "pcm", "seed": i}
                  for i in range(requests)]
        rows: dict[str, list[float]] = {f"concurrency {c}": [] for c in CONCURRENCY}
        ttfb: list[float] = []
        try:
            with httpx.Client(base_url=url, timeout=600) as http:
                throughput(http, bodies[:2], None)  # warm-up
                for _ in range(rounds):
                    alone, expected = throughput(http, bodies, None)
                    for c in CONCURRENCY:
                        rate, audio = throughput(http, bodies, c)
                        if audio != expected:
                            raise AssertionError(f"concurrency {c} changed a response's audio")
                        rows[f"concurrency {c}"].append(rate / alone)
                    first, whole = first_byte(http, bodies[0])
                    ttfb.append(first / whole)
                largest = http.get("/health").json()["largest_batch"]
        finally:
            server.should_exit = True
            server.thread.join(30)
    ratios = {name: statistics.median(values) for name, values in rows.items()}
    ratios["first byte / whole response"] = statistics.median(ttfb)
    return {"requests": requests, "seconds": seconds, "rounds": rounds, "largest_batch": largest, "ratios": ratios}


def throughput(http, bodies: list[dict], concurrency: int | None) -> tuple[float, list[bytes]]:
    """Requests per second for `bodies` sent one at a time (None) or by `concurrency` clients; and the audio."""
    began = time.perf_counter()
    if concurrency is None:
        audio = [http.post("/v1/audio/speech", json=body).content for body in bodies]
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            audio = list(pool.map(lambda body: http.post("/v1/audio/speech", json=body).content, bodies))
    return len(bodies) / (time.perf_counter() - began), audio


def first_byte(http, body: dict) -> tuple[float, float]:
    """(time to the first audio byte of the streamed request, time of the whole response)."""
    began, first = time.perf_counter(), None
    with http.stream("POST", "/v1/audio/speech", json={**body, "stream_format": "audio"}) as response:
        for _ in response.iter_raw():
            first = time.perf_counter() - began if first is None else first
    began = time.perf_counter()
    http.post("/v1/audio/speech", json=body).raise_for_status()
    return first, time.perf_counter() - began


def main(argv: list[str] | None = None) -> dict:
    parser = common_parser(__doc__.split("\n\n")[0], rounds=1)
    parser.add_argument("--requests", type=int, default=16, help="requests per variant (default 16)")
    parser.add_argument("--seconds", type=float, default=2.0, help="audio per request (default 2 s)")
    args = parser.parse_args(argv)
    setup(args.threads)
    from higgs_v3.cli.models import ensure_tiny_random, load_model, load_processor

    path = ensure_tiny_random()
    payload = measure(load_model(path, "cpu", "float32"), load_processor(path), args.requests, args.seconds,
                      args.rounds)
    results = payload["ratios"]
    print(f"bench_serve: {args.requests} requests of {args.seconds:g} s, tiny random model, CPU, "
          f"{args.threads} thread(s); largest batch {payload['largest_batch']}")
    for name, value in results.items():
        label = f"throughput, {name} / one at a time" if name.startswith("concurrency") else name
        print(f"  {label:45s} {value:6.2f}x")
    write_results(args.out, "bench_serve", payload, args.json)
    if not args.no_plot and _has_matplotlib():
        plt = pyplot()
        figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
        left.bar([str(c) for c in CONCURRENCY], [results[f"concurrency {c}"] for c in CONCURRENCY])
        left.axhline(1.0, color="gray", linewidth=0.8)
        left.set(xlabel="concurrent clients", ylabel="throughput / one at a time", title="dynamic batching")
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
