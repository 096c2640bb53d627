# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""The ASGI app of `higgs-v3 serve`: OpenAI's speech API (`POST /v1/audio/speech`) on FastAPI, over one model worker.

```
POST /v1/audio/speech         model, input, voice, response_format, speed, instructions, stream_format + Higgs extras
                              (seed, temperature, top_p, top_k, max_seconds, retries, reference_audio,
                              reference_text, initial_codec_chunk_frames)
WS   /v1/audio/speech/stream  text frames in (an LLM's deltas; an empty frame ends the text), binary 16-bit PCM
                              frames out, sentence by sentence; a final JSON text frame with the summary
GET  /v1/models, /v1/models/{id}, /health, /v1/audio/voices
POST /v1/audio/voices         multipart: name, audio_sample, consent, type (OpenAI's `client.audio.voices.create`),
                              transcript
DELETE /v1/audio/voices/{name}
GET  /, /page.js              a page to listen (`serving/page.py`), served without the key
```

The key is checked before anything else (`_KeyCheck`: no body is read for a 401); a body over `--max-body-bytes` or
one that stops coming is refused while it is read (`_BodyLimit`: 413, 408). Reference URLs are fetched on threads of
their own (`SpeechService.fetch`: a few at once, then 503), never on the threads the other requests use.

A request is checked whole before any work (each refusal an OpenAI error object naming the field), split into chunks
as `synthesize_long` splits it (`split_text`), and its chunks are queued for the worker (`serving/worker.py`), which
decodes them beside other requests' chunks on its decode session (step-level batching: a chunk joins at the next
step). A streamed chunk's first piece is `initial_codec_chunk_frames` frames (default `FIRST_CHUNK_FRAMES`). Chunk
`k` uses seed `seed + k`; without a voice, chunk 0 is spoken first and becomes the voice of the rest; chunks are
joined with `DEFAULT_PAUSE_SECONDS` of silence. So a response equals
`processor.synthesize_long(model, input, seed=seed, batch_size=1, retries=retries)` (one chunk: `model.generate` with
that seed): a bad take of a whole response is redone as the library redoes it (`retries`, the library's default 2; the
worker queues the redo again). A streamed response is one take: its audio is sent as it is generated.

`speed`: only 1.0 (the model has no rate control and time-stretching would change the voice); another value is refused.
`instructions`: inline control tags only (`<|emotion:elation|>`, see `higgs-v3 tags`), put in front of every chunk; free
text is refused (the model takes no prompt of that kind).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import json
import logging
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fastapi import APIRouter, FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, StrictFloat, StrictInt, StrictStr, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..audio_io_higgs_v3 import audio_url_problem, fetch_audio_url, is_audio_url, load_reference
from ..chunking_higgs_v3 import DEFAULT_MAX_CHARS, TAG_PATTERN, SentenceCutter, nothing_to_speak, split_text
from ..conversion.folders import disk_full_error, is_disk_full
from ..longform_higgs_v3 import (
    DEFAULT_PAUSE_SECONDS, DEFAULT_SECONDS_PER_CHAR, _voice_from_chunk, check_take_options, default_retries,
    resolve_voice, rows_for_max_seconds,
)
from ..sampling_higgs_v3 import check_seed, draw_seed
from .audio import MEDIA_TYPES, encode, format_problem, wav_stream_header, writable_formats
from .page import PUBLIC_PATHS, add_page_routes
from .voices import DEFAULT_VOICE, VoiceStore, name_problem
from .worker import Chunk, QueueFull, SpeechWorker


logger = logging.getLogger(__name__)

API_KEY_ENV = "HIGGS_V3_API_KEY"
UNFINISHED_HEADER = "X-Higgs-Unfinished-Chunks"  # chunks the model did not end (cut at max_seconds or max_new_tokens)


@dataclass
class ServeSettings:
    """The server's options (`higgs-v3 serve --help`)."""

    model_name: str
    voices_dir: str | os.PathLike
    api_key: str | None = None
    max_batch_size: int = 8  # requests decoded at once (the decode session's rows)
    batch_wait_ms: float = 10.0
    batch_invariant: bool = False  # a chunk's codes independent of the others decoded beside it (docs/SERVING.md)
    max_prefill_tokens: int | None = 2048  # prompt tokens prefilled at one step, padding included (the first always)
    max_queue: int = 64
    max_input_chars: int = 4096
    max_body_bytes: int = 16 * 1024 * 1024
    max_seconds: float | None = None
    retries: int | None = None  # a request's default `retries` (None: the model's, `default_retries`)
    allow_url_references: bool = False
    retry_after_seconds: int = 1
    receive_timeout_seconds: float = 300.0
    drain_seconds: float = 30.0  # on shutdown: how long the requests in flight may take; then what is left is cut
    url_fetch_workers: int = 4  # reference URLs fetched at once (their own threads); a request beyond them is a 503
    url_fetch_seconds: float = 20.0  # a reference URL's whole download (audio_io's own default is 120 s)
    body_timeout_seconds: float = 30.0  # the most seconds between two pieces of a request body (a stalled body: 408)
    body_deadline_seconds: float = 120.0  # the most seconds to receive a whole request body (408)
    extra_model_names: tuple[str, ...] = field(default_factory=tuple)


class APIError(Exception):
    """A refusal in OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers

    def response(self) -> JSONResponse:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        body = {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


class SpeechRequest(BaseModel):
    """The body of `POST /v1/audio/speech`: OpenAI's fields, then the Higgs extras (`extra_body` of the openai
    client). Unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")

    model: StrictStr
    input: StrictStr
    voice: StrictStr = DEFAULT_VOICE
    response_format: StrictStr = "mp3"
    speed: StrictFloat | StrictInt = 1.0
    instructions: StrictStr | None = None
    stream_format: Literal["audio", "sse"] | None = None
    seed: StrictInt | None = None
    temperature: StrictFloat | StrictInt | None = None
    top_p: StrictFloat | StrictInt | None = None
    top_k: StrictInt | None = None
    max_seconds: StrictFloat | StrictInt | None = None
    retries: StrictInt | None = None
    reference_audio: StrictStr | None = None
    reference_text: StrictStr | None = None
    initial_codec_chunk_frames: StrictInt | None = None


FIRST_CHUNK_FRAMES: int = 10
"""A streamed chunk's first piece in codec frames (0.4 s), unless the request's `initial_codec_chunk_frames` says
otherwise; later pieces are 25 frames. Chosen by measurement (docs/SERVING.md, "The first piece")."""
MAX_FIRST_CHUNK_FRAMES: int = 250


@dataclass
class Plan:
    """A checked request: its chunks (instructions in front of each), voice source, seed, `generate` options, format,
    and how many times a chunk's bad take is redone (0 when streamed: a streamed response is one take)."""

    chunks: list[str]
    voice: object
    seed: int
    options: tuple
    response_format: str
    stream_format: str | None
    retries: int = 0
    first_chunk_frames: int = FIRST_CHUNK_FRAMES


# ================================================================================================= checks
def _sampling_options(body: SpeechRequest, spec, default_max_seconds: float | None) -> tuple:
    """The `generate` options of a request, each checked (a 400 naming the field)."""
    options = {}
    if body.temperature is not None:
        if not 0 < body.temperature <= 100:
            raise APIError(400, f"temperature must be more than 0 (and at most 100), got {body.temperature!r}.",
                           "temperature")
        options["temperature"] = float(body.temperature)
    if body.top_p is not None:
        if not 0 < body.top_p <= 1:
            raise APIError(400, f"top_p must be in (0, 1], got {body.top_p!r}.", "top_p")
        options["top_p"] = float(body.top_p)
    if body.top_k is not None:
        if body.top_k < 1:
            raise APIError(400, f"top_k must be at least 1, got {body.top_k!r}.", "top_k")
        options["top_k"] = body.top_k
    max_seconds = body.max_seconds if body.max_seconds is not None else default_max_seconds
    if max_seconds is not None:
        try:
            options["max_new_tokens"] = rows_for_max_seconds(max_seconds, spec)
        except ValueError as error:
            raise APIError(400, str(error), "max_seconds") from None
    return tuple(sorted(options.items()))


def _first_chunk_frames(body: SpeechRequest) -> int:
    """`initial_codec_chunk_frames` checked (a 400 naming it), or the default."""
    frames = body.initial_codec_chunk_frames
    if frames is None:
        return FIRST_CHUNK_FRAMES
    if not 1 <= frames <= MAX_FIRST_CHUNK_FRAMES:
        raise APIError(400, f"initial_codec_chunk_frames must be a number of codec frames from 1 to "
                       f"{MAX_FIRST_CHUNK_FRAMES} (25 frames are 1 s), got {frames!r}.", "initial_codec_chunk_frames")
    return frames


def _instructions(body: SpeechRequest, processor) -> str:
    """The control tags of `instructions` (joined, to put in front of every chunk), or a 400."""
    if body.instructions is None or not body.instructions.strip():
        return ""
    tags = TAG_PATTERN.findall(body.instructions)
    if TAG_PATTERN.sub("", body.instructions).strip():
        raise APIError(400, "instructions holds inline control tags only here (e.g. '<|emotion:elation|>'; "
                       "`higgs-v3 tags` lists them), put in front of every chunk; this model takes no free-text "
                       "instructions.", "instructions")
    try:
        processor.check_text("".join(tags) + " x", "instructions")
    except ValueError as error:
        raise APIError(400, str(error), "instructions") from None
    return "".join(tags)


def check_speech(body: SpeechRequest, settings: ServeSettings, processor, spec, voices: VoiceStore) -> Plan:
    """Every check of a speech request that needs no model work, in the order of the fields."""
    if body.model not in (settings.model_name, *settings.extra_model_names):
        raise APIError(404, f"model {body.model!r} is not served here; this server serves {settings.model_name!r}.",
                       "model", "model_not_found")
    if problem := nothing_to_speak(body.input, "input"):
        raise APIError(400, problem, "input")
    if len(body.input) > settings.max_input_chars:
        raise APIError(413, f"input is {len(body.input)} characters; this server takes at most "
                       f"{settings.max_input_chars} per request (--max-input-chars).", "input")
    if problem := format_problem(body.response_format, body.stream_format is not None):
        raise APIError(400, problem, "response_format")
    if body.speed != 1:
        raise APIError(400, f"speed {body.speed!r} cannot be honoured: this model has no speaking-rate control (and "
                       "time-stretching would change the voice); only 1.0 is accepted.", "speed")
    tags = _instructions(body, processor)
    try:
        text = processor.check_text(body.input, "input")
    except ValueError as error:
        raise APIError(400, str(error), "input") from None
    chunks = [f"{tags}{chunk}" for chunk in split_text(text, DEFAULT_MAX_CHARS)]
    seed = draw_seed() if body.seed is None else body.seed
    try:
        check_seed(seed, "seed")
        check_seed(seed + len(chunks) - 1, f"seed + {len(chunks) - 1} (the seed of the input's last chunk)")
    except ValueError as error:
        raise APIError(400, str(error), "seed") from None
    options = _sampling_options(body, spec, settings.max_seconds)
    return Plan(chunks, _voice_source(body, settings, voices, processor), seed, options, body.response_format,
                body.stream_format, _retries(body, settings.retries), _first_chunk_frames(body))


def _retries(body: SpeechRequest, default: int) -> int:
    """The redos of a bad take (`check_take_options`'s wording, a 400 naming `retries`); 0 for a streamed response."""
    retries = default if body.retries is None else body.retries
    try:
        check_take_options(retries, DEFAULT_SECONDS_PER_CHAR, None, 0.5)
    except ValueError as error:
        raise APIError(400, str(error), "retries") from None
    if body.stream_format is not None and body.retries:
        raise APIError(400, f"retries {body.retries} cannot be honoured with stream_format: a streamed response is one "
                       "take (its audio is sent as it is generated, so a bad take cannot be redone); leave retries "
                       "out, or ask for the whole response.", "retries")
    return 0 if body.stream_format is not None else retries


def _voice_source(body: SpeechRequest, settings: ServeSettings, voices: VoiceStore, processor):
    """None (the model's own voice), a saved voice (loaded), or `("clip", source, transcript)` to encode."""
    if body.reference_text is not None and body.reference_audio is None:
        raise APIError(400, "reference_text was given without reference_audio (a saved voice carries its transcript).",
                       "reference_text")
    if body.reference_audio is not None:
        if body.voice != DEFAULT_VOICE:
            raise APIError(400, f"reference_audio was given with voice {body.voice!r}; give one of them.",
                           "reference_audio")
        if body.reference_text is not None and body.reference_text.strip():
            try:
                processor.check_text(body.reference_text, "reference_text")
            except ValueError as error:
                raise APIError(400, str(error), "reference_text") from None
        return ("clip", _clip_source(body.reference_audio, settings), body.reference_text)
    if body.voice == DEFAULT_VOICE:
        return None
    if problem := name_problem(body.voice):
        raise APIError(400, problem, "voice")
    if body.voice not in voices.names():
        raise APIError(400, f"voice {body.voice!r} is not a saved voice; saved here: "
                       f"{', '.join([DEFAULT_VOICE, *voices.names()])} (POST /v1/audio/voices adds one).", "voice")
    try:
        voice = voices.load(body.voice)
    except (OSError, ValueError) as error:
        raise APIError(500, f"voice {body.voice!r} could not be read: {error}", "voice") from None
    try:
        processor._codes(voice, f"voice {body.voice!r}")
    except ValueError as error:
        raise APIError(400, str(error), "voice") from None
    return voice


def _clip_source(value: str, settings: ServeSettings):
    """`reference_audio`: an http(s) URL (with --allow-url-references) or base64 audio (a `data:` URI or bare)."""
    if is_audio_url(value):
        if not settings.allow_url_references:
            raise APIError(400, "reference_audio is a URL, which this server does not fetch (start it with "
                           "--allow-url-references); send the clip as base64 instead.", "reference_audio")
        if problem := audio_url_problem(value):  # before any thread starts
            raise APIError(400, problem, "reference_audio")
        return value
    data = value.split(",", 1)[1] if value.startswith("data:") else value
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise APIError(400, "reference_audio is neither base64 audio (bare or a data: URI) nor an http(s) URL.",
                       "reference_audio") from None


# ================================================================================================= the app
class SpeechService:
    """The routes' shared state: the model's worker, the processor, the voices, the settings."""

    def __init__(self, model, processor, settings: ServeSettings):
        self.model, self.processor, self.settings = model, processor, settings
        self.spec = model.config.audio_spec
        self.voices = VoiceStore(settings.voices_dir)
        self.worker: SpeechWorker | None = None
        self.voice_lock = asyncio.Lock()
        self.fetches: ThreadPoolExecutor | None = None  # reference URLs: their own threads, never the default pool's
        self.fetching, self.fetch_lock = 0, threading.Lock()

    def start(self) -> None:
        s = self.settings
        self.worker = SpeechWorker(self.model, self.processor, max_batch_size=s.max_batch_size,
                                   batch_wait_ms=s.batch_wait_ms, max_queue=s.max_queue,
                                   batch_invariant=s.batch_invariant, max_prefill_tokens=s.max_prefill_tokens)
        self.fetches = ThreadPoolExecutor(s.url_fetch_workers, thread_name_prefix="higgs-v3-url")

    def stop(self) -> None:
        """The app's shutdown: uvicorn has given the requests in flight `drain_seconds` and cancelled the rest, so what
        the worker still holds is for clients that are gone: cut at once (the `generate` in flight stops at its next
        step), and said in the log."""
        if self.fetches is not None:
            self.fetches.shutdown(wait=False, cancel_futures=True)
        if self.worker is not None:
            cut = self.worker.stop(deadline=0)
            if cut:
                logger.warning("Shutdown: %d chunk(s) cut unspoken (queued or being generated): their clients were "
                               "gone or past the %g s drain (--drain-seconds).", cut, self.settings.drain_seconds)
            else:
                logger.info("Shutdown: the worker had nothing left to speak.")

    async def fetch(self, url: str) -> bytes:
        """The bytes at a reference URL (`fetch_audio_url`, within `url_fetch_seconds`) on the fetch threads; a 503
        when `url_fetch_workers` fetches are already running, a 400 naming the URL when it cannot be fetched."""
        with self.fetch_lock:
            if self.fetching >= self.settings.url_fetch_workers:
                raise APIError(503, f"The server is fetching {self.fetching} reference URLs already, the most at once; "
                               "retry shortly, or send the clip as base64.", "reference_audio", "server_busy",
                               {"Retry-After": str(self.settings.retry_after_seconds)})
            self.fetching += 1

        def fetch() -> bytes:
            try:
                return fetch_audio_url(url, self.settings.url_fetch_seconds)
            finally:
                with self.fetch_lock:  # counted until the thread is free, also when the client left meanwhile
                    self.fetching -= 1

        try:
            future = self.fetches.submit(fetch)
        except RuntimeError:  # shut down
            with self.fetch_lock:
                self.fetching -= 1
            raise APIError(503, "The server is shutting down.", None, "server_busy") from None
        try:
            return await asyncio.wrap_future(future)
        except ValueError as error:
            raise APIError(400, " ".join(str(error).split()), "reference_audio") from None

    # ------------------------------------------------------------------ voices
    async def encode_voice(self, source, transcript: str | None, param: str):
        """A voice from a clip (bytes, a file or a URL) through `resolve_voice` (`load_reference`, then the model's
        codec on the worker thread); a 400 naming `param` when the clip is refused."""
        what = "(the uploaded clip)"
        if isinstance(source, str):  # a reference URL (checked where it entered): fetched on the fetch threads
            source, what = await self.fetch(source), f"at {source!r}"
        with tempfile.TemporaryDirectory(prefix="higgs-v3-clip-") as folder:
            path = Path(folder) / "clip.audio"
            path.write_bytes(source)
            rate = self.spec.sampling_rate
            try:  # files and URLs are read here, off the model's thread; the worker only encodes
                clip = await asyncio.to_thread(load_reference, str(path), transcript, None, param, rate)
                return await self.worker.call(lambda: resolve_voice(
                    self.model, self.processor, {"array": clip.waveform, "sampling_rate": rate}, clip.text,
                    where=param))
            except (OSError, ValueError) as error:
                message = str(error).replace(repr(str(path)), what)
                raise APIError(400, " ".join(message.split()), param) from None
            except QueueFull:
                raise self.busy() from None

    def save_voice(self, name: str, voice) -> None:
        """`VoiceStore.save`; a full disk is a 507 saying so, with the space the voice needs."""
        try:
            self.voices.save(name, voice)
        except Exception as error:
            path = self.voices.path(name)
            if not is_disk_full(error, path):
                raise
            needed = voice.codes.numel() * voice.codes.element_size() + 1024  # the codes and a safetensors header
            message = str(disk_full_error(path, "voice", needed, kept="nothing was saved"))
            message = message.replace(repr(str(path)), f"{name!r}").replace(
                "choose a folder on another disk", "start the server with a --voices-dir on another disk")
            raise APIError(507, message, None, "insufficient_storage") from None

    def busy(self) -> APIError:
        return APIError(503, "The server is busy (its queue is full); retry shortly.", None, "server_busy",
                        {"Retry-After": str(self.settings.retry_after_seconds)})

    # ------------------------------------------------------------------ speaking
    def submit(self, plan: Plan, index: int, voice, stream: bool, text: str | None = None,
               reserved: bool = False) -> Chunk:
        text = plan.chunks[index] if text is None else text
        chunk = Chunk(text, voice, plan.seed + index, plan.options, stream, asyncio.get_running_loop(),
                      retries=0 if stream else plan.retries, reserved=reserved,
                      first_chunk_frames=plan.first_chunk_frames)
        try:
            self.worker.submit(chunk)
        except QueueFull:
            raise self.busy() from None
        return chunk

    async def voice_of(self, plan: Plan):
        if isinstance(plan.voice, tuple):
            return await self.encode_voice(plan.voice[1], plan.voice[2], "reference_audio")
        return plan.voice

    async def chunks(self, plan: Plan, stream: bool):
        """The request's chunks as submitted: chunk 0 alone first when there is no voice (it becomes the voice)."""
        count, capacity = len(plan.chunks), self.worker.capacity
        if count > capacity:
            raise APIError(413, f"input is {count} chunks of at most {DEFAULT_MAX_CHARS} characters; this server "
                           f"queues at most {capacity} (--max-queue): send it in parts.", "input")
        try:  # every chunk's place at once: a request admitted is never refused halfway
            self.worker.reserve(count)
        except QueueFull:
            raise self.busy() from None
        submitted: list[Chunk] = []
        try:
            voice = await self.voice_of(plan)
            first = self.submit(plan, 0, voice, stream, reserved=True)
            submitted.append(first)
            yield first
            if voice is None and len(plan.chunks) > 1:
                voice = _voice_from_chunk(await first.output, self.spec)
            for index in range(1, len(plan.chunks)):
                submitted.append(self.submit(plan, index, voice, stream, reserved=True))
            for chunk in submitted[1:]:
                yield chunk
        finally:
            self.worker.release(count - len(submitted))  # places never used (an error, a client that left)
            for chunk in submitted:
                chunk.cancelled.set()  # a no-op for chunks already spoken; the rest are dropped by the worker


async def _chunk_pieces(chunk: Chunk):
    """The chunk's audio pieces as they come, then its output (the last item)."""
    while True:
        kind, value = await chunk.pieces.get()
        if kind == "error":
            raise value
        yield kind, value
        if kind == "done":
            return


def create_app(model, processor, settings: ServeSettings) -> FastAPI:
    """The FastAPI app serving `model` with `processor` (the worker starts and stops with the app's lifespan)."""
    if settings.retries is None:  # the model's own default: 0 for the demo model, else the library's
        settings.retries = default_retries(model)
    service = SpeechService(model, processor, settings)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        service.start()
        try:
            yield
        finally:
            service.stop()  # SIGTERM: uvicorn stops accepting, finishes the requests in flight, then this drains

    app = FastAPI(title="higgs-v3 serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    _install_error_handlers(app)
    app.add_middleware(_BodyLimit, limit=settings.max_body_bytes, gap=settings.body_timeout_seconds,
                       deadline=settings.body_deadline_seconds)
    app.add_middleware(_KeyCheck, settings=settings)  # the outermost: before any body is read
    router = APIRouter()
    _add_routes(router, service)
    add_page_routes(router)
    app.include_router(router)
    app.add_api_websocket_route("/v1/audio/speech/stream", _websocket_route(service))
    return app


class _KeyCheck:
    """The API key, checked on every route and the WebSocket before anything else (a body is not read for a 401):
    all but the page (`page.PUBLIC_PATHS`), which asks for the key itself."""

    def __init__(self, app, settings: ServeSettings):
        self.app, self.settings = app, settings

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or scope["path"] in PUBLIC_PATHS:
            return await self.app(scope, receive, send)
        header = dict(scope.get("headers", ())).get(b"authorization")
        if not key_problem(self.settings, header.decode("latin-1") if header is not None else None):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":  # refused before the handshake completes (the client sees 403 / 1008)
            return await send({"type": "websocket.close", "code": 1008, "reason": "Incorrect or missing API key."})
        refusal = APIError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'.", None,
                           "invalid_api_key", {"WWW-Authenticate": "Bearer", "Connection": "close"})
        await refusal.response()(scope, receive, send)


def key_problem(settings: ServeSettings, header: str | None) -> bool:
    """True when the server has a key and `header` does not carry it (compared in constant time)."""
    if not settings.api_key:
        return False
    given = header[7:].strip() if header and header[:7].lower() == "bearer " else ""
    return not hmac.compare_digest(given.encode(), settings.api_key.encode())


def _model_object(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "higgs-v3"}


VOICE_FIELDS = {"name": "the voice's name", "audio_sample": "the clip, a file", "consent": "optional, recorded",
                "type": "optional, 'audio_sample'", "transcript": "optional, the clip's words"}
"""The fields of a voice upload (`POST /v1/audio/voices`): OpenAI's (`client.audio.voices.create`) and `transcript`."""


def _voice_fields() -> str:
    return ", ".join(f"{name} ({what})" for name, what in VOICE_FIELDS.items())


async def _voice_upload(request: Request) -> dict:
    """The fields of a voice upload, each checked: multipart/form-data, whole (its closing boundary present), only
    `VOICE_FIELDS`, `name` and `audio_sample` given, `audio_sample` a file (its bytes), the others text."""
    takes = f"POST /v1/audio/voices takes multipart/form-data with the fields {_voice_fields()}"
    content_type = request.headers.get("content-type", "")
    boundary = content_type.partition("boundary=")[2].split(";")[0].strip().strip('"')
    if not content_type.lower().startswith("multipart/form-data") or not boundary:
        raise APIError(400, f"{takes}; got {f'Content-Type {content_type!r}' if content_type else 'no Content-Type'}"
                       " (only multipart carries the audio file).", None)
    body = await request.body()  # bounded by --max-body-bytes (the body-limit middleware)
    if not body.strip():
        raise APIError(400, f"The request body is empty; {takes}.", None)
    if not body.rstrip(b"\r\n").endswith(b"--" + boundary.encode("latin-1") + b"--"):
        raise APIError(400, f"The multipart body ends before its closing boundary (cut short?); {takes}.", None)
    try:
        form = await request.form(max_files=1, max_fields=len(VOICE_FIELDS))
    except Exception as error:  # noqa: BLE001 - starlette's MultiPartException and python-multipart's errors
        reason = getattr(error, "message", None) or " ".join(str(error).split()) or type(error).__name__
        raise APIError(400, f"The multipart body could not be read ({reason}); {takes}.", None) from None
    if form.get("type", "audio_sample") != "audio_sample":  # first: a prompt's fields are not ours
        raise APIError(400, f"type {form['type']!r} is not offered here: this server makes a voice from an audio "
                       "sample only; accepted: 'audio_sample' (the default).", "type")
    fields = {}
    for key, value in form.multi_items():
        if key not in VOICE_FIELDS:
            raise APIError(400, f"Unknown field {key!r}; {takes}.", key)
        if key in fields:
            raise APIError(400, f"{key!r} is given twice; give it once.", key)
        is_file = not isinstance(value, str)
        if is_file != (key == "audio_sample"):
            raise APIError(400, f"{key!r} must be {'a file' if key == 'audio_sample' else 'text, not a file'}; "
                           f"{takes}.", key)
        fields[key] = await value.read() if is_file else value
    for key in ("name", "audio_sample"):
        if key not in fields:
            raise APIError(400, f"{key!r} is required; {takes}.", key)
    return fields


def _add_voice_routes(router: APIRouter, service: SpeechService) -> None:
    @router.get("/v1/audio/voices")
    async def list_voices():
        return {"voices": [DEFAULT_VOICE, *service.voices.names()]}

    @router.post("/v1/audio/voices", status_code=201)
    async def add_voice(request: Request):
        fields = await _voice_upload(request)
        name, transcript = fields["name"], fields.get("transcript")
        if problem := name_problem(name):
            raise APIError(400, problem, "name")
        if name in service.voices.names():
            raise APIError(409, f"voice {name!r} already exists; DELETE /v1/audio/voices/{name} first.", "name")
        if transcript is not None and transcript.strip():
            try:
                service.processor.check_text(transcript, "transcript")
            except ValueError as error:
                raise APIError(400, str(error), "transcript") from None
        voice = await service.encode_voice(fields["audio_sample"], transcript, "audio_sample")
        async with service.voice_lock:  # check and write as one: of two uploads of one name, the second is a 409
            if name in service.voices.names():
                raise APIError(409, f"voice {name!r} already exists; DELETE /v1/audio/voices/{name} first.", "name")
            await asyncio.to_thread(service.save_voice, name, voice)
        return {"id": name, "object": "audio.voice", "created_at": int(time.time()), "name": name,
                "type": "audio_sample", "consent": fields.get("consent"), "seconds": round(voice.duration, 3),
                "transcript": voice.text}

    @router.delete("/v1/audio/voices/{name}")
    async def delete_voice(name: str):
        if problem := name_problem(name):
            raise APIError(400, problem, "voice_id")
        if not service.voices.delete(name):
            raise APIError(404, f"voice {name!r} does not exist; saved here: "
                           f"{', '.join(service.voices.names()) or 'none'}.", "voice_id")
        return {"id": name, "object": "audio.voice.deleted", "deleted": True}


def _add_routes(router: APIRouter, service: SpeechService) -> None:
    settings = service.settings
    _add_voice_routes(router, service)

    @router.get("/health")
    async def health():
        worker = service.worker
        return {"status": "ok", "model": settings.model_name, "queued": worker.queued, "active": worker.active,
                "batches": worker.batches, "largest_batch": worker.largest_batch}

    @router.get("/v1/models")
    async def models():
        return {"object": "list", "data": [_model_object(name)
                                           for name in (settings.model_name, *settings.extra_model_names)]}

    @router.get("/v1/models/{model}")
    async def model(model: str):
        if model not in (settings.model_name, *settings.extra_model_names):
            raise APIError(404, f"model {model!r} is not served here; this server serves "
                           f"{', '.join(map(repr, (settings.model_name, *settings.extra_model_names)))}.", "model",
                           "model_not_found")
        return _model_object(model)

    @router.post("/v1/audio/speech")
    async def speech(body: SpeechRequest, request: Request):
        plan = check_speech(body, settings, service.processor, service.spec, service.voices)
        if plan.stream_format is not None:
            chunks = service.chunks(plan, stream=True)
            first = await anext(chunks)  # refusals (a bad clip, a full queue) before the response starts
            tally = {"unfinished": 0}  # chunks the model did not end (cut at max_seconds): in SSE's done event
            events = _audio_stream(service, plan, first, chunks, tally)
            if plan.stream_format == "sse":
                return StreamingResponse(_sse(events, plan, tally), media_type="text/event-stream")
            return StreamingResponse(events, media_type=MEDIA_TYPES[plan.response_format])
        spoken = await _whole(service, plan, request)
        if spoken is None:  # the client left
            return Response(status_code=499)
        waveform, unfinished = spoken
        audio = await asyncio.to_thread(encode, waveform, plan.response_format, service.spec.sampling_rate)
        return Response(audio, media_type=MEDIA_TYPES[plan.response_format],
                        headers={UNFINISHED_HEADER: str(unfinished)})


async def _whole(service: SpeechService, plan: Plan, request: Request):
    """The request's waveform (chunks joined with the pause) and how many chunks the model did not end, or None when
    its client left (seen at once, while a chunk is spoken)."""
    import torch

    outputs = []
    chunks = service.chunks(plan, stream=False)
    left = asyncio.ensure_future(_client_left(request))
    try:
        async for chunk in chunks:
            await asyncio.wait([chunk.output, left], return_when=asyncio.FIRST_COMPLETED)
            if left.done():
                return None  # `chunks` cancels the chunks left: never spoken, never redone
            outputs.append(chunk.output.result())
    finally:
        left.cancel()
        await chunks.aclose()
    silence = torch.zeros(round(DEFAULT_PAUSE_SECONDS * service.spec.sampling_rate))
    parts = [part for output in outputs for part in (silence, output.waveform)][1:]
    return torch.cat(parts).numpy(), sum(not output.finished for output in outputs)


async def _client_left(request: Request) -> None:
    """Returns when the client disconnects: the body was read, so the next ASGI message is `http.disconnect`."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _audio_stream(service: SpeechService, plan: Plan, first: Chunk, chunks, tally: dict):
    """Bytes as they are generated: a WAV header with unknown sizes (wav), then 16-bit PCM of every piece, the pause
    between chunks."""
    import numpy as np

    rate = service.spec.sampling_rate
    pause = encode(np.zeros(round(DEFAULT_PAUSE_SECONDS * rate), dtype=np.float32), "pcm", rate)
    if plan.response_format == "wav":
        yield wav_stream_header(rate)
    try:
        chunk, index = first, 0
        while chunk is not None:
            if index:
                yield pause
            async for kind, value in _chunk_pieces(chunk):
                if kind == "audio":
                    yield encode(value.numpy(), "pcm", rate)
                else:
                    tally["unfinished"] += not value.finished
            chunk, index = await anext(chunks, None), index + 1
    finally:
        await chunks.aclose()


async def _sse(events, plan: Plan, tally: dict):
    """OpenAI's speech SSE: `speech.audio.delta` events (base64 audio), then `speech.audio.done` with the usage; a
    failure once the response has started (a full queue for a later chunk, a fault) is an `error` event."""
    size = 0
    try:
        async for data in events:
            size += len(data)
            event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")}
            yield f"data: {json.dumps(event)}\n\n"
    except Exception as error:  # noqa: BLE001 - the status line is sent: the stream says what went wrong
        if not isinstance(error, APIError):
            logger.error("Internal error in a speech stream", exc_info=error)
            error = APIError(500, f"Internal error ({type(error).__name__}); see the server's log.")
        yield f"data: {json.dumps({'type': 'error', 'error': json.loads(error.response().body)['error']})}\n\n"
        return
    usage = {"input_tokens": sum(len(chunk) for chunk in plan.chunks), "output_tokens": size // 2,
             "total_tokens": sum(len(chunk) for chunk in plan.chunks) + size // 2}
    done = {"type": "speech.audio.done", "usage": usage, "unfinished_chunks": tally["unfinished"]}
    yield f"data: {json.dumps(done)}\n\n"


ROUTES = ("POST /v1/audio/speech, WS /v1/audio/speech/stream, GET and POST /v1/audio/voices, DELETE "
          "/v1/audio/voices/{name}, GET /v1/models, GET /v1/models/{model}, GET /health, GET / (a page to listen)")
"""Every route, as a refusal of an unknown one lists them (OpenAI's other routes, e.g. transcriptions, are not here)."""
SPEECH_TAKES = (f"POST /v1/audio/speech takes a JSON object with the fields {', '.join(SpeechRequest.model_fields)} "
                "(model and input required)")


def validation_error(problems: list[dict]) -> APIError:
    """pydantic's first problem with a speech request (a body or the WebSocket's query) as a 400 naming its field and
    what is accepted, in a sentence (never pydantic's dump)."""
    problem = problems[0]
    location = [str(part) for part in problem.get("loc", ()) if part != "body"]
    param, kind = (location[0] if location else None), problem.get("type")
    if kind == "extra_forbidden":
        return APIError(400, f"Unknown field {param!r}; the accepted fields are {', '.join(SpeechRequest.model_fields)}.",
                        param)
    if kind == "json_invalid":
        return APIError(400, f"The request body is not valid JSON; {SPEECH_TAKES}.", None)
    if param is None and kind == "missing":
        return APIError(400, f"The request body is empty; {SPEECH_TAKES}.", None)
    if param is None:
        given = type(problem.get("input")).__name__
        return APIError(400, f"The request body is a JSON {given}, not an object; {SPEECH_TAKES}.", None)
    if kind == "missing":
        return APIError(400, f"{param!r} is required; {SPEECH_TAKES}.", param)
    return APIError(400, f"{param!r}: {problem.get('msg')}, got {problem.get('input')!r}.", param)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request, error: APIError):
        return error.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request, error: RequestValidationError):
        return validation_error(error.errors()).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, error: StarletteHTTPException):
        if error.status_code in (404, 405) and error.detail in ("Not Found", "Method Not Allowed"):
            return APIError(error.status_code, f"No route {request.method} {request.url.path} here; this server "
                            f"serves {ROUTES}.", None, "unknown_route").response()
        return APIError(error.status_code, str(error.detail), None).response()

    @app.exception_handler(Exception)
    async def internal(request, error: Exception):
        logger.error("Internal error on %s", request.url.path, exc_info=error)
        return APIError(500, f"Internal error ({type(error).__name__}); see the server's log.", None).response()


class _BodyLimit:
    """Refuses a request body over `limit` bytes (413: by its Content-Length, or while it is read) and one that does not
    come in time (408: `gap` seconds without a piece of it, or `deadline` seconds in all), so a client that stops
    mid-body holds its connection no longer."""

    def __init__(self, app, limit: int, gap: float, deadline: float):
        self.app, self.limit, self.gap, self.deadline = app, limit, gap, deadline

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers", ())).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await self.too_large().response()(scope, receive, send)
        loop = asyncio.get_running_loop()
        until, read, whole, refusal = loop.time() + self.deadline, 0, False, None

        async def limited():
            nonlocal read, whole, refusal
            if whole:  # the body is in: what comes now is the disconnect, whenever it comes
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, min(self.gap, until - loop.time())))
            except TimeoutError:
                refusal = self.too_slow(read)
                raise refusal from None
            read += len(message.get("body", b""))
            whole = message["type"] != "http.request" or not message.get("more_body", False)
            if read > self.limit:
                refusal = self.too_large()
                raise refusal
            return message

        async def sending(message):
            if refusal is None:  # refused: the route's body parser answers 400 (a parse error); this sends ours
                await send(message)

        try:
            await self.app(scope, limited, sending)
        except Exception:
            if refusal is None:
                raise
        if refusal is not None:
            await refusal.response()(scope, receive, send)

    def too_large(self) -> APIError:
        return APIError(413, f"The request body is over {self.limit} bytes (--max-body-bytes).", None,
                        "request_too_large")

    def too_slow(self, read: int) -> APIError:
        return APIError(408, f"The request body did not come in time ({read} bytes came; a server waits "
                        f"{self.gap:g} s at most for each piece and {self.deadline:g} s for the whole body); send it "
                        "whole, without pauses.", None, "request_timeout", {"Connection": "close"})


# ================================================================================================= text in, audio out
def _websocket_route(service: SpeechService):
    async def speech_stream(websocket: WebSocket):
        """Text frames in (pieces of text; an empty frame ends it), binary 16-bit PCM frames out as each sentence is
        spoken, then a JSON text frame: `{"type": "speech.done", ...}` (or `{"type": "error", "error": {...}}`). The
        options are query parameters: voice, seed, temperature, top_p, top_k, max_seconds, instructions,
        initial_codec_chunk_frames."""
        await websocket.accept()  # the key was checked (`_KeyCheck`)
        try:
            await _speak_stream(service, websocket)
        except APIError as error:
            body = json.loads(error.response().body)
            await websocket.send_text(json.dumps({"type": "error", "error": body["error"]}))
            await websocket.close(code=1008)
        except WebSocketDisconnect:
            pass
        except Exception as error:  # noqa: BLE001 - a fault: the client gets an error frame, the log the traceback
            logger.error("Internal error in a text stream", exc_info=error)
            problem = APIError(500, f"Internal error ({type(error).__name__}); see the server's log.")
            with contextlib.suppress(Exception):
                await websocket.send_text(json.dumps({"type": "error", "error": json.loads(problem.response().body)[
                    "error"]}))
                await websocket.close(code=1011)

    return speech_stream


def _stream_request(service: SpeechService, websocket: WebSocket) -> Plan:
    """The stream's options, checked as a speech request's (its text comes later)."""
    fields = dict(websocket.query_params)
    for name in fields:
        if name not in STREAM_OPTIONS:
            raise APIError(400, f"Unknown query parameter {name!r}; the stream takes {', '.join(STREAM_OPTIONS)}.",
                           name)
    for name, kind in STREAM_OPTIONS.items():
        if name in fields and kind is not str:
            try:
                fields[name] = kind(fields[name])
            except ValueError:
                raise APIError(400, f"{name} must be {'an integer' if kind is int else 'a number'}, got "
                               f"{fields[name]!r}.", name) from None
    try:
        body = SpeechRequest(model=service.settings.model_name, input="x", response_format="pcm", **fields)
    except ValidationError as error:
        raise validation_error(error.errors()) from None
    return check_speech(body, service.settings, service.processor, service.spec, service.voices)


STREAM_OPTIONS = {"voice": str, "seed": int, "temperature": float, "top_p": float, "top_k": int, "max_seconds": float,
                  "instructions": str, "initial_codec_chunk_frames": int}
"""The WebSocket's query parameters (a speech request's options; its text comes as frames, its format is pcm)."""


async def _sentences(service: SpeechService, websocket: WebSocket, sentences: asyncio.Queue) -> None:
    """Reads the text frames on the event loop (no thread per socket), cutting sentences as they complete
    (`SentenceCutter`) into `sentences`; then None (the end), or the refusal that ends the stream."""
    cutter, total, limit = SentenceCutter(DEFAULT_MAX_CHARS), 0, service.settings.max_input_chars
    try:
        while True:
            try:
                message = await asyncio.wait_for(websocket.receive(), service.settings.receive_timeout_seconds)
            except TimeoutError:
                raise APIError(408, f"No text frame for {service.settings.receive_timeout_seconds} s; the stream is "
                               "closed (send an empty frame to end the text).", "input") from None
            if message["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(message.get("code", 1000))
            if message.get("text") is None:
                raise APIError(400, "A binary frame was sent; the stream takes text frames (an empty one ends the "
                               "text).", "input")
            total += len(message["text"])
            if total > limit:
                raise APIError(413, f"The streamed text is over {limit} characters; this server takes at most {limit} "
                               "per stream (--max-input-chars).", "input", "request_too_large")
            for sentence in cutter.feed(message["text"]) if message["text"] else cutter.finish():
                sentences.put_nowait(sentence)
            if not message["text"]:
                break
    except Exception as error:  # noqa: BLE001 - handed to the speaking loop, which raises it
        sentences.put_nowait(error)
        return
    sentences.put_nowait(None)


async def _speak_stream(service: SpeechService, websocket: WebSocket) -> None:
    plan = _stream_request(service, websocket)
    voice = await service.voice_of(plan)
    sentences: asyncio.Queue = asyncio.Queue()
    tags = plan.chunks[0][: -len("x")]  # the instructions' tags, in front of every chunk
    reader = asyncio.create_task(_sentences(service, websocket, sentences))
    rate, index, seconds, unfinished, chunk = service.spec.sampling_rate, 0, 0.0, 0, None
    try:
        while (sentence := await sentences.get()) is not None:
            if isinstance(sentence, Exception):
                raise sentence
            try:
                text = service.processor.check_text(sentence, f"sentence {index + 1} of the stream")
            except ValueError as error:
                raise APIError(400, str(error), "input") from None
            for piece in split_text(text, DEFAULT_MAX_CHARS):
                chunk = service.submit(plan, index, voice, True, tags + piece)
                if index:
                    await websocket.send_bytes(encode(_silence(rate), "pcm", rate))
                async for kind, value in _chunk_pieces(chunk):
                    if kind == "audio":
                        seconds += value.shape[-1] / rate
                        await websocket.send_bytes(encode(value.numpy(), "pcm", rate))
                    else:
                        unfinished += not value.finished
                        if voice is None:
                            voice = _voice_from_chunk(value, service.spec)
                index += 1
    finally:
        reader.cancel()
        if chunk is not None:
            chunk.cancelled.set()  # a no-op once spoken; a client that left: it leaves the session at the next step
    summary = {"type": "speech.done", "chunks": index, "seed": plan.seed, "audio_seconds": round(seconds, 3),
               "sampling_rate": rate, "unfinished_chunks": unfinished}
    await websocket.send_text(json.dumps(summary))
    await websocket.close()


def _silence(rate: int):
    import numpy as np

    return np.zeros(round(DEFAULT_PAUSE_SECONDS * rate), dtype=np.float32)


__all__ = ["API_KEY_ENV", "APIError", "ServeSettings", "SpeechRequest", "check_speech", "create_app", "key_problem",
           "writable_formats"]
