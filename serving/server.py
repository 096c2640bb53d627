# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""`higgs-v3 serve` (its options: `cli/main`): check the options, load the model, run the app under uvicorn. uvicorn
owns the process's signals: on SIGTERM or Ctrl-C it stops accepting connections and gives the requests in flight
`--drain-seconds` to finish (the worker keeps speaking their chunks), then cancels those still running; the app's
lifespan then cuts what the worker still holds (work for clients that are gone) and logs how much. After a SIGTERM the
process exits 0: a drain that ran its course is a clean stop (uvicorn re-raises the signal it caught once it is done;
the handler here takes it)."""

from __future__ import annotations

import os
import signal
import sys


UVICORN_LIMITS = {
    "http": "h11",  # the pure-Python HTTP/1.1 parser, whose limits below apply whatever else is installed
    "h11_max_incomplete_event_size": 16 * 1024,  # headers still incomplete after 16 KiB: 400 (measured)
    "timeout_keep_alive": 5,  # an idle kept-alive connection is closed after 5 s
    "ws_max_size": 1024 * 1024,  # a WebSocket frame at most 1 MiB (text frames; --max-input-chars bounds the text)
}
"""What uvicorn bounds for slow or careless clients. It has no deadline for a request's headers (a client trickling
them holds its connection; --max-connections bounds how many): docs/SERVING.md shows the reverse proxy that does."""


def cmd_serve(args) -> int:
    try:
        import fastapi  # noqa: F401 - the app's; checked here for the one message
        import uvicorn
    except ImportError as error:
        raise ImportError(f"higgs-v3 serve needs the serve extra ({error.name} is missing): "
                          "pip install 'higgs-v3[serve]'.") from None
    from ..cli.models import (
        TINY_RANDOM, TINY_RANDOM_MAX_SECONDS, cache_dir, load_model, load_processor, resolve_model,
    )
    from .app import API_KEY_ENV, ServeSettings, create_app

    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    if args.host not in ("127.0.0.1", "localhost", "::1") and not api_key:
        print(f"higgs-v3 serve: warning: listening on {args.host} without an API key (--api-key or ${API_KEY_ENV}).",
              file=sys.stderr)
    path = resolve_model(args.model, lambda message: print(message, file=sys.stderr))
    processor = load_processor(path)
    model = load_model(path, args.device, args.dtype)
    max_seconds = args.max_seconds
    if args.model == TINY_RANDOM and max_seconds is None:
        max_seconds = TINY_RANDOM_MAX_SECONDS
    settings = ServeSettings(
        model_name=(args.served_model_name or [args.model])[0],
        extra_model_names=tuple(args.served_model_name or [])[1:],
        voices_dir=args.voices_dir or cache_dir() / "voices",
        api_key=api_key, max_batch_size=args.max_batch_size, batch_wait_ms=args.batch_wait_ms,
        batch_invariant=args.batch_invariant, max_prefill_tokens=args.max_prefill_tokens,
        max_queue=args.max_queue, max_input_chars=args.max_input_chars, max_body_bytes=args.max_body_bytes,
        max_seconds=max_seconds, allow_url_references=args.allow_url_references, drain_seconds=args.drain_seconds,
    )
    app = create_app(model, processor, settings)
    print(f"higgs-v3 serve: {settings.model_name} on http://{args.host}:{args.port} (voices in "
          f"{settings.voices_dir})", file=sys.stderr, flush=True)
    drained = signal.signal(signal.SIGTERM, lambda *_: None)  # what uvicorn re-raises after its drain: a clean exit
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level,
                    timeout_graceful_shutdown=settings.drain_seconds, **UVICORN_LIMITS,
                    limit_concurrency=args.max_connections)
    finally:
        signal.signal(signal.SIGTERM, drained)
    return 0


__all__ = ["UVICORN_LIMITS", "cmd_serve"]
