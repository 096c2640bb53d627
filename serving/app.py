# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
r"""The ASGI app of `higgs-v3 serve`: OpenAI's speech API (`POST /v1/audio/speech`) on FastAPI, over one model worker.

```
POST /v1/audio/speech         model, input, voice, response_format, speed, instructions, stream_format + Higgs extras
                              (seed, temperature, top_p, top_k, max_seconds, retries, reference_audio,
                              reference_text)
WS   /v1/audio/speech/stream  text frames in (an LLM's deltas; an empty frame ends the text), binary 16-bit PCM
                              frames out, sentence by sentence; a final JSON text frame with the summary
GET  /v1/models, /health, /v1/audio/voices      POST /v1/audio/voices (multipart: name, audio, transcript)
DELETE /v1/audio/voices/{name}
```

A request is checked whole before any work (each refusal an OpenAI error object naming the field), split into chunks
as `synthesize_long` splits it (`split_text`), and its chunks are queued for the worker (`serving/worker.py`), which
batches them with other requests' chunks. Chunk `k` uses seed `seed + k`; without a voice, chunk 0 is spoken first and
becomes the voice of the rest; chunks are joined with `DEFAULT_PAUSE_SECONDS` of silence. So a response equals
`processor.synthesize_long(model, input, seed=seed, batch_size=1, retries=retries)` (one chunk: `model.generate` with
that seed): a bad take of a whole response is redone as the library redoes it (`retries`, the library's default 2; the
worker queues the redo again). A streamed response is one take: its audio is sent as it is generated.

`speed`: only 1.0 (the model has no rate control and time-stretching would change the voice); another value is refused.
`instructions`: inline control tags only (`<|emotion:happy|>`, see `higgs-v3 tags`), put in front of every chunk; free
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fastapi import APIRouter, Depends, FastAPI, File, Form, Request, UploadFile, WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, StrictFloat, StrictInt, StrictStr
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import HTTPConnection

from ..audio_io_higgs_v3 import is_audio_url, load_reference
from ..chunking_higgs_v3 import DEFAULT_MAX_CHARS, TAG_PATTERN, SentenceCutter, nothing_to_speak, split_text
from ..longform_higgs_v3 import (
    DEFAULT_PAUSE_SECONDS, DEFAULT_SECONDS_PER_CHAR, _voice_from_chunk, check_take_options, default_retries,
    resolve_voice, rows_for_max_seconds,
)
from ..sampling_higgs_v3 import check_seed, draw_seed
from .audio import MEDIA_TYPES, encode, format_problem, wav_stream_header, writable_formats
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
    max_batch_size: int = 8
    batch_wait_ms: float = 10.0
    max_queue: int = 64
    max_input_chars: int = 4096
    max_body_bytes: int = 16 * 1024 * 1024
    max_seconds: float | None = None
    retries: int | None = None  # a request's default `retries` (None: the model's, `default_retries`)
    allow_url_references: bool = False
    retry_after_seconds: int = 1
    receive_timeout_seconds: float = 300.0
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


def _instructions(body: SpeechRequest, processor) -> str:
    """The control tags of `instructions` (joined, to put in front of every chunk), or a 400."""
    if body.instructions is None or not body.instructions.strip():
        return ""
    tags = TAG_PATTERN.findall(body.instructions)
    if TAG_PATTERN.sub("", body.instructions).strip():
        raise APIError(400, "instructions holds inline control tags only here (e.g. '<|emotion:happy|>'; "
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
                body.stream_format, _retries(body, settings.retries))


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

    def start(self) -> None:
        s = self.settings
        self.worker = SpeechWorker(self.model, self.processor, max_batch_size=s.max_batch_size,
                                   batch_wait_ms=s.batch_wait_ms, max_queue=s.max_queue)

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()

    # ------------------------------------------------------------------ voices
    async def encode_voice(self, source, transcript: str | None, param: str):
        """A voice from a clip (bytes, a file or a URL) through `resolve_voice` (`load_reference`, then the model's
        codec on the worker thread); a 400 naming `param` when the clip is refused."""
        with tempfile.TemporaryDirectory(prefix="higgs-v3-clip-") as folder:
            path = source
            if isinstance(source, bytes):
                path = Path(folder) / "clip.audio"
                path.write_bytes(source)
            rate = self.spec.sampling_rate
            try:  # files and URLs are read here, off the model's thread; the worker only encodes
                clip = await asyncio.to_thread(load_reference, str(path), transcript, None, param, rate)
                return await self.worker.call(lambda: resolve_voice(
                    self.model, self.processor, {"array": clip.waveform, "sampling_rate": rate}, clip.text,
                    where=param))
            except (OSError, ValueError) as error:
                message = str(error).replace(repr(str(path)), "(the uploaded clip)")
                raise APIError(400, " ".join(message.split()), param) from None
            except QueueFull:
                raise self.busy() from None

    def busy(self) -> APIError:
        return APIError(503, "The server is busy (its queue is full); retry shortly.", None, "server_busy",
                        {"Retry-After": str(self.settings.retry_after_seconds)})

    # ------------------------------------------------------------------ speaking
    def submit(self, plan: Plan, index: int, voice, stream: bool, text: str | None = None,
               reserved: bool = False) -> Chunk:
        text = plan.chunks[index] if text is None else text
        chunk = Chunk(text, voice, plan.seed + index, plan.options, stream, asyncio.get_running_loop(),
                      retries=0 if stream else plan.retries, reserved=reserved)
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
    app.add_middleware(_BodyLimit, limit=settings.max_body_bytes)
    router = APIRouter(dependencies=[Depends(_authorize(settings))])
    _add_routes(router, service)
    app.include_router(router)
    app.add_api_websocket_route("/v1/audio/speech/stream", _websocket_route(service))
    return app


def _authorize(settings: ServeSettings):
    def check(connection: HTTPConnection) -> None:
        if key_problem(settings, connection.headers.get("authorization")):
            raise APIError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'.", None,
                           "invalid_api_key")

    return check


def key_problem(settings: ServeSettings, header: str | None) -> bool:
    """True when the server has a key and `header` does not carry it (compared in constant time)."""
    if not settings.api_key:
        return False
    given = header[7:].strip() if header and header[:7].lower() == "bearer " else ""
    return not hmac.compare_digest(given.encode(), settings.api_key.encode())


def _add_routes(router: APIRouter, service: SpeechService) -> None:
    settings = service.settings

    @router.get("/health")
    async def health():
        worker = service.worker
        return {"status": "ok", "model": settings.model_name, "queued": worker.queued, "batches": worker.batches,
                "largest_batch": worker.largest_batch}

    @router.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "higgs-v3"}
                                           for name in (settings.model_name, *settings.extra_model_names)]}

    @router.get("/v1/audio/voices")
    async def list_voices():
        return {"voices": [DEFAULT_VOICE, *service.voices.names()]}

    @router.post("/v1/audio/voices", status_code=201)
    async def add_voice(name: str = Form(...), audio: UploadFile = File(...), transcript: str | None = Form(None)):
        if problem := name_problem(name):
            raise APIError(400, problem, "name")
        if name in service.voices.names():
            raise APIError(409, f"voice {name!r} already exists; DELETE /v1/audio/voices/{name} first.", "name")
        if transcript is not None and transcript.strip():
            try:
                service.processor.check_text(transcript, "transcript")
            except ValueError as error:
                raise APIError(400, str(error), "transcript") from None
        voice = await service.encode_voice(await audio.read(), transcript, "audio")
        async with service.voice_lock:  # check and write as one: of two uploads of one name, the second is a 409
            if name in service.voices.names():
                raise APIError(409, f"voice {name!r} already exists; DELETE /v1/audio/voices/{name} first.", "name")
            await asyncio.to_thread(service.voices.save, name, voice)
        return {"object": "voice", "name": name, "seconds": round(voice.duration, 3), "transcript": voice.text}

    @router.delete("/v1/audio/voices/{name}")
    async def delete_voice(name: str):
        if problem := name_problem(name):
            raise APIError(400, problem, "name")
        if not service.voices.delete(name):
            raise APIError(404, f"voice {name!r} does not exist.", "name")
        return {"object": "voice", "name": name, "deleted": True}

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
    its client left (checked at each chunk)."""
    import torch

    outputs = []
    chunks = service.chunks(plan, stream=False)
    try:
        async for chunk in chunks:
            if await request.is_disconnected():
                return None
            outputs.append(await chunk.output)
    finally:
        await chunks.aclose()
    silence = torch.zeros(round(DEFAULT_PAUSE_SECONDS * service.spec.sampling_rate))
    parts = [part for output in outputs for part in (silence, output.waveform)][1:]
    return torch.cat(parts).numpy(), sum(not output.finished for output in outputs)


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


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request, error: APIError):
        return error.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request, error: RequestValidationError):
        problem = error.errors()[0]
        location = [str(part) for part in problem.get("loc", ()) if part != "body"]
        param = location[0] if location else None
        if problem.get("type") == "extra_forbidden":
            accepted = ", ".join(SpeechRequest.model_fields)
            message = f"Unknown field {param!r}; the accepted fields are {accepted}."
        elif problem.get("type") == "json_invalid":
            message, param = "The request body is not valid JSON.", None
        elif problem.get("type") == "missing":
            message = f"{param!r} is required."
        else:
            message = f"{param!r}: {problem.get('msg')}" if param else str(problem.get("msg"))
        return APIError(400, message, param).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, error: StarletteHTTPException):
        return APIError(error.status_code, str(error.detail), None).response()

    @app.exception_handler(Exception)
    async def internal(request, error: Exception):
        logger.error("Internal error on %s", request.url.path, exc_info=error)
        return APIError(500, f"Internal error ({type(error).__name__}); see the server's log.", None).response()


class _BodyLimit:
    """Refuses a request body over `limit` bytes (413): by its Content-Length, or while it is read."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers", ())).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await self.too_large().response()(scope, receive, send)
        read, over = 0, False

        async def limited():
            nonlocal read, over
            message = await receive()
            read += len(message.get("body", b""))
            if read > self.limit:
                over = True
                raise self.too_large()
            return message

        async def sending(message):
            if not over:  # over: the route's body parser answers 400 (a parse error); this sends the 413 instead
                await send(message)

        try:
            await self.app(scope, limited, sending)
        except Exception:
            if not over:
                raise
        if over:
            await self.too_large().response()(scope, receive, send)

    def too_large(self) -> APIError:
        return APIError(413, f"The request body is over {self.limit} bytes (--max-body-bytes).", None,
                        "request_too_large")


# ================================================================================================= text in, audio out
def _websocket_route(service: SpeechService):
    async def speech_stream(websocket: WebSocket):
        """Text frames in (pieces of text; an empty frame ends it), binary 16-bit PCM frames out as each sentence is
        spoken, then a JSON text frame: `{"type": "speech.done", ...}` (or `{"type": "error", "error": {...}}`). The
        options are query parameters: voice, seed, temperature, top_p, top_k, max_seconds."""
        if key_problem(service.settings, websocket.headers.get("authorization")):
            await websocket.close(code=1008, reason="Incorrect or missing API key.")
            return
        await websocket.accept()
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
    numbers = {"seed": int, "top_k": int, "temperature": float, "top_p": float, "max_seconds": float}
    for name, kind in numbers.items():
        if name in fields:
            try:
                fields[name] = kind(fields[name])
            except ValueError:
                raise APIError(400, f"{name} must be a number, got {fields[name]!r}.", name) from None
    try:
        body = SpeechRequest(model=service.settings.model_name, input="x", response_format="pcm", **fields)
    except Exception as error:  # pydantic's ValidationError: unknown or mistyped query parameters
        raise APIError(400, f"Bad query parameters: {' '.join(str(error).split())[:300]}", None) from None
    return check_speech(body, service.settings, service.processor, service.spec, service.voices)


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
    rate, index, seconds, unfinished = service.spec.sampling_rate, 0, 0.0, 0
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
    summary = {"type": "speech.done", "chunks": index, "seed": plan.seed, "audio_seconds": round(seconds, 3),
               "sampling_rate": rate, "unfinished_chunks": unfinished}
    await websocket.send_text(json.dumps(summary))
    await websocket.close()


def _silence(rate: int):
    import numpy as np

    return np.zeros(round(DEFAULT_PAUSE_SECONDS * rate), dtype=np.float32)


__all__ = ["API_KEY_ENV", "APIError", "ServeSettings", "SpeechRequest", "check_speech", "create_app", "key_problem",
           "writable_formats"]
