# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""`higgs-v3 serve`'s app on a tiny model through FastAPI's TestClient (no server process): each bad request is a 4xx
OpenAI error object naming its field, the API key guards every route, the body limit and the queue bound hold, voices
are saved whole under names that cannot leave the folder, a response's audio is `model.generate`'s with its seed (the
tiny model's takes all run to the limit: the first is kept), and a bad take is redone as `synthesize_long` redoes it.
The real server, the openai client, streaming and batching: tests/test_serve_integration.py."""

from __future__ import annotations

import base64
import json
import io
import threading

import numpy as np
import pytest
import soundfile
import torch
from fastapi.testclient import TestClient

from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor
from higgs_v3.sampling_higgs_v3 import retry_seed
from higgs_v3.serving.app import ServeSettings, create_app
from higgs_v3.serving.audio import FORMATS, writable_formats
from higgs_v3.serving.worker import _Call

from conftest import tiny_tts_model


KEY = {"Authorization": "Bearer secret"}
ACCEPTED = ", ".join(writable_formats())


@pytest.fixture(scope="module")
def server(tokenizer, tmp_path_factory):
    model = tiny_tts_model(max_new_tokens=8)
    processor = HiggsAudioV3Processor.from_model_config(tokenizer, model.config)
    settings = ServeSettings("tiny", tmp_path_factory.mktemp("voices"), api_key="secret", max_input_chars=400,
                             max_body_bytes=200_000, max_queue=2)
    with TestClient(create_app(model, processor, settings)) as client:
        yield client, model, processor


@pytest.fixture
def served(server):
    """The module's server once its worker is idle: a test's chunks still being spoken (a streamed chunk whose socket
    closed, say) have ended and freed their places before the next test counts them."""
    assert server[0].app.state.service.worker.wait_idle(60), "the worker still holds places a minute after a test"
    return server


def error(response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def speech(**fields) -> dict:
    return {"model": "tiny", "input": "Hello there.", **fields}


@pytest.mark.parametrize("body, status, param, message", [
    (speech(input=""), 400, "input", "Input is empty; there is nothing to speak."),
    (speech(input="x" * 401), 413, "input", "input is 401 characters; this server takes at most 400 per request"),
    (speech(input="<|emotion:nope|>Hi."), 400, "input", "Unknown control tag '<|emotion:nope|>' in input"),
    (speech(input=3), 400, "input", "'input': Input should be a valid string"),
    (speech(model="tts-1"), 404, "model", "model 'tts-1' is not served here; this server serves 'tiny'."),
    ({"input": "Hi."}, 400, "model", "'model' is required; POST /v1/audio/speech takes a JSON object with the fields model, input, voice"),
    (speech(voice="nobody"), 400, "voice", "voice 'nobody' is not a saved voice; saved here: default"),
    (speech(voice="../../etc/passwd"), 400, "voice", "voice name '../../etc/passwd' is not accepted"),
    (speech(response_format="aac"), 400, "response_format",
     f"response_format 'aac' is not written by this server's libsndfile; accepted here: {ACCEPTED}."),
    (speech(response_format="ogg"), 400, "response_format", "response_format 'ogg' is not one of OpenAI's formats"),
    (speech(response_format="mp3", stream_format="audio"), 400, "response_format",
     "response_format 'mp3' is sent whole; stream_format sends audio as it is generated in wav or pcm only"),
    (speech(stream_format="chunks"), 400, "stream_format", "'stream_format': Input should be 'audio' or 'sse'"),
    (speech(speed=1.5), 400, "speed", "speed 1.5 cannot be honoured: this model has no speaking-rate control"),
    (speech(instructions="Speak cheerfully."), 400, "instructions", "instructions holds inline control tags only"),
    (speech(instructions="<|emotion:nope|>"), 400, "instructions", "Unknown control tag '<|emotion:nope|>'"),
    (speech(seed=-1), 400, "seed", "seed must be an integer in [0, 2**62), got -1."),
    (speech(temperature=0), 400, "temperature", "temperature must be more than 0"),
    (speech(top_p=1.5), 400, "top_p", "top_p must be in (0, 1], got 1.5."),
    (speech(top_k=0), 400, "top_k", "top_k must be at least 1, got 0."),
    (speech(max_seconds=-2), 400, "max_seconds", "max_seconds must be a positive number of seconds, got -2."),
    (speech(initial_codec_chunk_frames=0), 400, "initial_codec_chunk_frames",
     "initial_codec_chunk_frames must be a number of codec frames from 1 to 250 (25 frames are 1 s), got 0."),
    (speech(initial_codec_chunk_frames=2.5), 400, "initial_codec_chunk_frames",
     "'initial_codec_chunk_frames': Input should be a valid integer"),
    (speech(reference_text="Hi."), 400, "reference_text", "reference_text was given without reference_audio"),
    (speech(reference_audio="https://example.com/a.wav"), 400, "reference_audio",
     "reference_audio is a URL, which this server does not fetch (start it with --allow-url-references)"),
    (speech(reference_audio="not base64!"), 400, "reference_audio", "reference_audio is neither base64 audio"),
    (speech(reference_audio=base64.b64encode(b"RIFF junk").decode()), 400, "reference_audio",
     "(the uploaded clip)"),
    (speech(stream="yes"), 400, "stream", "Unknown field 'stream'; the accepted fields are model, input, voice"),
])
def test_bad_requests_get_an_openai_error_naming_the_field(served, body, status, param, message):
    client, _, _ = served
    found = error(client.post("/v1/audio/speech", json=body, headers=KEY), status)
    assert found["param"] == param and message in found["message"], found
    assert found["type"] == "invalid_request_error" and "Traceback" not in found["message"]


def test_every_route_wants_the_key(served):
    client, _, _ = served
    for method, path in [("get", "/health"), ("get", "/v1/models"), ("get", "/v1/models/tiny"),
                         ("get", "/v1/audio/voices"), ("post", "/v1/audio/speech"), ("post", "/v1/audio/voices"),
                         ("delete", "/v1/audio/voices/x"), ("get", "/nowhere")]:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "secret"}):
            found = error(getattr(client, method)(path, headers=headers), 401)
            assert found["code"] == "invalid_api_key"
    assert client.get("/v1/models", headers=KEY).json()["data"][0]["id"] == "tiny"
    assert error(client.post("/v1/audio/speech", content=b"{", headers={**KEY, "Content-Type": "application/json"}),
                 400)["message"].startswith("The request body is not valid JSON; POST /v1/audio/speech takes a JSON "
                                            "object with the fields model, input, voice, ")
    assert error(client.get("/nowhere", headers=KEY), 404)["message"].startswith(
        "No route GET /nowhere here; this server serves POST /v1/audio/speech, WS /v1/audio/speech/stream, ")
    for path in ("/", "/page.js"):  # the page asks for the key itself
        assert client.get(path).status_code == 200


def test_oversize_body_is_413_before_it_is_read(served):
    client, _, _ = served
    found = error(client.post("/v1/audio/speech", content=b"x" * 200_001, headers=KEY), 413)
    assert found["code"] == "request_too_large" and "over 200000 bytes" in found["message"]


def test_audio_is_model_generate_with_the_seed(served):
    client, model, processor = served
    response = client.post("/v1/audio/speech", json=speech(response_format="wav", seed=11), headers=KEY)
    assert response.status_code == 200 and response.headers["content-type"] == "audio/wav"
    out = model.generate(**processor("Hello there."), seed=11, return_dict_in_generate=True, output_audio=True)
    expected = io.BytesIO()
    soundfile.write(expected, out.audio[0].numpy(), 24000, format="WAV", subtype="PCM_16")
    assert response.content == expected.getvalue()
    raw = client.post("/v1/audio/speech", json=speech(response_format="pcm", seed=11), headers=KEY).content
    assert raw == expected.getvalue()[44:]  # 16-bit little-endian samples, the WAV's data without its header


def test_a_long_input_is_spoken_as_synthesize_long_speaks_it(served):
    client, model, processor = served
    text = " ".join(f"Sentence number {i} of a text that is longer than one chunk." for i in range(6))
    response = client.post("/v1/audio/speech", json=speech(input=text, response_format="pcm", seed=21), headers=KEY)
    expected = processor.synthesize_long(model, text, seed=21, batch_size=1)
    assert len(expected.chunks) == 2  # chunk 0 spoken first, alone: its voice speaks chunk 1
    written = io.BytesIO()
    soundfile.write(written, expected.waveform.numpy(), 24000, format="RAW", subtype="PCM_16", endian="LITTLE")
    assert response.content == written.getvalue()


def test_voices_are_saved_listed_used_and_deleted(served):
    client, model, processor = served
    clip = io.BytesIO()
    soundfile.write(clip, np.sin(np.arange(24000) / 9).astype(np.float32) * 0.3, 24000, format="WAV")
    upload = {"audio_sample": ("me.wav", clip.getvalue(), "audio/wav")}
    for name, status, param in [("../up", 400, "name"), ("default", 400, "name")]:
        assert error(client.post("/v1/audio/voices", data={"name": name}, files=upload, headers=KEY),
                     status)["param"] == param
    bad = {"audio_sample": ("me.wav", b"not audio", "audio/wav")}
    assert error(client.post("/v1/audio/voices", data={"name": "me"}, files=bad, headers=KEY),
                 400)["param"] == "audio_sample"
    made = client.post("/v1/audio/voices", data={"name": "me", "transcript": "Hi."}, files=upload, headers=KEY)
    assert made.status_code == 201 and made.json()["name"] == "me" and made.json()["transcript"] == "Hi."
    assert made.json()["object"] == "audio.voice" and made.json()["id"] == "me"
    again = client.post("/v1/audio/voices", data={"name": "me"}, files=upload, headers=KEY)
    assert error(again, 409)["param"] == "name"
    assert client.get("/v1/audio/voices", headers=KEY).json() == {"voices": ["default", "me"]}
    samples = torch.from_numpy(soundfile.read(io.BytesIO(clip.getvalue()), dtype="float32")[0])
    voice = model.encode_reference(samples, text="Hi.", sampling_rate=24000)
    spoken = client.post("/v1/audio/speech", json=speech(voice="me", response_format="pcm", seed=2), headers=KEY)
    out = model.generate(**processor("Hello there.", reference=voice), seed=2, return_dict_in_generate=True,
                         output_audio=True)
    expected = io.BytesIO()
    soundfile.write(expected, out.audio[0].numpy(), 24000, format="RAW", subtype="PCM_16", endian="LITTLE")
    assert spoken.content == expected.getvalue()
    assert client.delete("/v1/audio/voices/me", headers=KEY).json() == {"id": "me", "object": "audio.voice.deleted",
                                                                         "deleted": True}
    assert error(client.delete("/v1/audio/voices/me", headers=KEY), 404)["param"] == "voice_id"


def test_a_full_queue_is_503_with_retry_after(served):
    client, _, _ = served
    worker = client.app.state.service.worker
    release, busy = threading.Event(), threading.Event()
    worker._queue.put_nowait(_Call(lambda: (busy.set(), release.wait(5))))  # the worker thread waits on `release`
    assert busy.wait(5)
    try:
        worker.reserve(1)  # one of the 2 places: a 2-chunk request does not fit, a 3-chunk one never will
        text = " ".join(f"Sentence number {i} of a text that is longer than one chunk." for i in range(6))
        found = client.post("/v1/audio/speech", json=speech(input=text[:390]), headers=KEY)
        assert found.status_code == 503 and found.headers["Retry-After"] == "1"
        assert found.json()["error"]["code"] == "server_busy"
        assert error(client.post("/v1/audio/speech", json=speech(input=text[:30] + "!" * 320), headers=KEY), 413)
    finally:
        worker.release(1)
        release.set()


def test_formats_are_what_libsndfile_writes():
    assert set(writable_formats()) == {name for name, pair in FORMATS.items() if pair is not None
                                       and pair[0] in soundfile.available_formats()
                                       and pair[1] in soundfile.available_subtypes(pair[0])}
    assert "aac" not in writable_formats() and {"wav", "pcm"} <= set(writable_formats())


def test_a_reference_clip_in_base64_speaks_as_the_voice_made_from_it(served):
    client, model, processor = served
    clip = io.BytesIO()
    soundfile.write(clip, np.cos(np.arange(30000) / 5).astype(np.float32) * 0.2, 24000, format="WAV")
    body = speech(response_format="pcm", seed=4, reference_audio=base64.b64encode(clip.getvalue()).decode(),
                  reference_text="Hi.")
    spoken = client.post("/v1/audio/speech", json=body, headers=KEY)
    voice = model.encode_reference(torch.from_numpy(soundfile.read(io.BytesIO(clip.getvalue()), dtype="float32")[0]),
                                   text="Hi.", sampling_rate=24000)
    out = model.generate(**processor("Hello there.", reference=voice), seed=4, return_dict_in_generate=True,
                         output_audio=True)
    expected = io.BytesIO()
    soundfile.write(expected, out.audio[0].numpy(), 24000, format="RAW", subtype="PCM_16", endian="LITTLE")
    assert spoken.status_code == 200 and spoken.content == expected.getvalue()


def test_the_text_websocket_wants_the_key_and_refuses_a_bad_sentence_in_an_error_frame(served):
    from starlette.websockets import WebSocketDisconnect

    client, _, _ = served
    with pytest.raises(WebSocketDisconnect) as closed:
        with client.websocket_connect("/v1/audio/speech/stream") as websocket:
            websocket.receive_text()
    assert closed.value.code == 1008
    with client.websocket_connect("/v1/audio/speech/stream?seed=x", headers=KEY) as websocket:
        found = json.loads(websocket.receive_text())
    assert found["type"] == "error" and found["error"]["param"] == "seed"
    with client.websocket_connect("/v1/audio/speech/stream?seed=1&max_seconds=0.2", headers=KEY) as websocket:
        websocket.send_text("Fine. <|emotion:nope|>Bad")
        websocket.send_text(" one. ")
        assert len(websocket.receive_bytes()) > 0  # "Fine." spoken
        found = json.loads(websocket.receive_text())
    assert found["type"] == "error" and found["error"]["param"] == "input"
    assert "Unknown control tag '<|emotion:nope|>' in sentence 2 of the stream" in found["error"]["message"]


def test_cancelled_chunks_are_dropped_when_a_batch_forms(served):
    import asyncio

    from higgs_v3.serving.worker import Chunk

    client, _, _ = served
    worker = client.app.state.service.worker

    async def run():
        loop = asyncio.get_running_loop()
        left, kept = (Chunk("Gone.", None, 1, (), False, loop), Chunk("Kept.", None, 2, (), False, loop))
        left.cancelled.set()
        count = worker.batches
        worker.submit(left), worker.submit(kept)
        output = await asyncio.wait_for(kept.output, 30)
        return output, left.output.done(), worker.batches - count

    output, left_done, batches = asyncio.run(run())
    assert output.text == "Kept." and output.batch_size == 1 and not left_done and batches == 1


def test_serve_options_are_checked_by_the_parser(capsys):
    from higgs_v3.cli.main import main

    assert main(["serve", "--max-batch-size", "0"]) == 2
    assert "--max-batch-size must be at least 1, got '0'" in capsys.readouterr().err


def test_a_failure_after_an_sse_stream_started_is_an_error_event(served, monkeypatch):
    from higgs_v3.serving.worker import QueueFull

    client, _, _ = served
    worker, submitted = client.app.state.service.worker, []
    original = worker.submit

    def submit(chunk):  # chunk 0 is spoken; the queue is full when chunk 1 comes
        submitted.append(chunk)
        if len(submitted) > 1:
            raise QueueFull
        original(chunk)

    monkeypatch.setattr(worker, "submit", submit)
    text = " ".join(f"Sentence number {i} of a text that is longer than one chunk." for i in range(6))
    response = client.post("/v1/audio/speech", headers=KEY,
                           json=speech(input=text, response_format="pcm", stream_format="sse", seed=1))
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert response.status_code == 200 and events[0]["type"] == "speech.audio.delta"
    assert events[-1] == {"type": "error", "error": {
        "message": "The server is busy (its queue is full); retry shortly.", "type": "server_error", "param": None,
        "code": "server_busy"}}


def test_a_bad_take_is_redone_with_the_next_seed_as_the_library_redoes_it(served, monkeypatch):
    from higgs_v3.longform_higgs_v3 import synthesize_long
    from test_takes import run_away_for, run_away_in_session

    client, model, processor = served
    served_calls = run_away_in_session(monkeypatch, runaway={100})  # seed 100 runs to the limit; every other ends
    calls = run_away_for(model, monkeypatch, runaway={100})  # the same rule for the library's generate
    text, redo = "Alpha beta gamma delta.", retry_seed(100, 1)
    for retries, seeds in [(None, [[100], [redo]]), (0, [[100]])]:
        served_calls.clear()
        extra = {} if retries is None else {"retries": retries}
        response = client.post("/v1/audio/speech", headers=KEY,
                               json=speech(input=text, response_format="pcm", seed=100, max_seconds=1.0, **extra))
        assert response.status_code == 200 and served_calls == seeds
        calls.clear()
        expected = synthesize_long(model, processor, text, seed=100, max_seconds=1.0, **extra)
        assert calls == seeds and [a["seed"] for a in expected.chunks[0].attempts] == [s for (s,) in seeds]
        written = io.BytesIO()
        soundfile.write(written, expected.waveform.numpy(), 24000, format="RAW", subtype="PCM_16", endian="LITTLE")
        assert response.content == written.getvalue()
    assert expected.chunks[0].problem == "ran to the length limit without its end of speech"  # retries=0: kept


def test_a_redo_is_held_first_and_a_chunk_joins_the_running_decode_at_the_next_step(served, monkeypatch):
    import asyncio

    from higgs_v3.serving.session import DecodeSession
    from higgs_v3.serving.worker import Chunk
    from test_takes import run_away_in_session

    client, model, _ = served
    worker = client.app.state.service.worker
    monkeypatch.setattr(worker, "capacity", 3)  # room for three chunks (this server's --max-queue is 2); put back after
    monkeypatch.setattr(worker, "_free", 3)
    options = (("max_new_tokens", 25),)

    async def run():
        loop = asyncio.get_running_loop()
        bad, good, late = (Chunk(text, None, seed, options, False, loop, retries=2)
                           for text, seed in [("Alpha beta.", 7), ("Gamma delta.", 8), ("Epsilon zeta.", 9)])
        calls = run_away_in_session(monkeypatch, runaway={7}, frames=6)
        step, steps = DecodeSession.step, []

        def stepped(self):  # `late` arrives while the first two are decoded: it joins them at the next step
            if not steps:
                worker.submit(late)
            step(self)
            steps.append(len(self._rows))

        monkeypatch.setattr(DecodeSession, "step", stepped)
        worker.submit(bad), worker.submit(good)
        outputs = [await asyncio.wait_for(chunk.output, 30) for chunk in (bad, good, late)]
        return outputs, calls, steps

    (bad, good, late), calls, steps = asyncio.run(run())
    assert calls == [[7], [8], [9], [retry_seed(7, 1)]] and steps[:2] == [2, 3]  # late decoded from the second step
    assert [a["seed"] for a in bad.attempts] == [7, retry_seed(7, 1)] and bad.seed == retry_seed(7, 1)
    assert bad.problem is None and bad.finished and good.attempts[0]["seed"] == 8
    assert good.batch_size == 3 and late.batch_size == 3  # decoded beside each other


@pytest.mark.parametrize("fields, message", [
    ({"retries": -1}, "retries must be an integer from 0 (no retry) to 10, got -1."),
    ({"retries": 1_000_000_000}, "retries must be an integer from 0 (no retry) to 10, got 1000000000."),
    ({"retries": 1.5}, "'retries': Input should be a valid integer"),
    ({"retries": 1, "stream_format": "audio", "response_format": "pcm"},
     "retries 1 cannot be honoured with stream_format: a streamed response is one take"),
])
def test_bad_retries_are_a_400_naming_the_field(served, fields, message):
    client, _, _ = served
    found = error(client.post("/v1/audio/speech", json=speech(**fields), headers=KEY), 400)
    assert found["param"] == "retries" and message in found["message"], found


def test_a_saved_voice_with_wrong_codes_is_a_400_naming_voice(served):
    from higgs_v3.audio_io_higgs_v3 import HiggsAudioV3Voice

    client, _, _ = served
    folder = client.app.state.service.voices.folder
    HiggsAudioV3Voice(codes=torch.full((20, 3), 5, dtype=torch.long), text="Hi.").save(folder / "odd.safetensors")
    try:
        found = error(client.post("/v1/audio/speech", json=speech(voice="odd"), headers=KEY), 400)
    finally:
        (folder / "odd.safetensors").unlink()
    assert found["param"] == "voice" and "The codes of voice 'odd'" in found["message"]


def test_a_bad_chunk_fails_alone_the_others_of_its_batch_are_spoken(served):
    import asyncio

    from higgs_v3.audio_io_higgs_v3 import HiggsAudioV3Voice
    from higgs_v3.serving.worker import Chunk

    client, _, _ = served
    worker = client.app.state.service.worker
    odd = HiggsAudioV3Voice(codes=torch.full((20, 3), 5, dtype=torch.long), text="Hi.")

    async def run():
        loop = asyncio.get_running_loop()
        good, bad = Chunk("Kept.", None, 2, (), False, loop), Chunk("Bad.", odd, 1, (), False, loop)
        worker._queue.put_nowait(bad), worker._queue.put_nowait(good)  # one batch (the same options)
        output = await asyncio.wait_for(good.output, 30)
        with pytest.raises(ValueError, match="codes"):
            await asyncio.wait_for(bad.output, 30)
        return output

    assert asyncio.run(run()).text == "Kept."


def test_idle_websockets_hold_no_thread_and_bad_frames_get_an_error_frame(served):
    import contextlib

    client, _, _ = served
    done = []
    with contextlib.ExitStack() as stack:  # more idle sockets than the default thread pool has threads
        for _ in range(34):
            stack.enter_context(client.websocket_connect("/v1/audio/speech/stream?seed=1", headers=KEY)).send_text(
                "Hello")
        speaker = threading.Thread(target=lambda: done.append(client.post(
            "/v1/audio/speech", json=speech(response_format="pcm", seed=1), headers=KEY).status_code), daemon=True)
        speaker.start()
        speaker.join(60)
        assert done == [200]
    for send, status in [(lambda ws: ws.send_bytes(b"Hi."), 400), (lambda ws: ws.send_text("x" * 401), 413)]:
        with client.websocket_connect("/v1/audio/speech/stream?seed=1", headers=KEY) as websocket:
            send(websocket)
            found = json.loads(websocket.receive_text())
        assert found["type"] == "error" and found["error"]["param"] == "input", found
    assert found["error"]["message"] == ("The streamed text is over 400 characters; this server takes at most 400 per "
                                         "stream (--max-input-chars).")


def test_oversize_body_without_content_length_is_413(served):
    client, _, _ = served

    def body():
        yield b"x" * 150_000
        yield b"x" * 60_000

    found = error(client.post("/v1/audio/speech", content=body(), headers=KEY), 413)
    assert found["code"] == "request_too_large" and "over 200000 bytes" in found["message"]


def test_two_uploads_of_one_name_at_once_are_201_then_409(served, monkeypatch):
    import asyncio

    from higgs_v3.audio_io_higgs_v3 import HiggsAudioV3Voice

    client, model, _ = served
    service = client.app.state.service
    voice = HiggsAudioV3Voice(codes=torch.full((20, model.config.audio_spec.num_codebooks), 5), text="Hi.")

    async def encode_voice(source, transcript, param):  # both uploads pass the early check before either is saved
        await asyncio.sleep(0.3)
        return voice

    monkeypatch.setattr(service, "encode_voice", encode_voice)
    statuses = []
    upload = {"audio_sample": ("me.wav", b"clip", "audio/wav")}
    post = lambda: statuses.append(client.post("/v1/audio/voices", data={"name": "twin"}, files=upload,
                                               headers=KEY).status_code)
    threads = [threading.Thread(target=post) for _ in range(2)]
    [thread.start() for thread in threads], [thread.join(30) for thread in threads]
    service.voices.delete("twin")
    assert sorted(statuses) == [201, 409]


def test_a_streamed_chunks_pieces_start_small_and_make_its_take(served):
    """A streamed chunk beside a whole one: its first piece is its `first_chunk_frames` (the request's
    `initial_codec_chunk_frames`), later ones 25 frames, and its pieces joined are its take's waveform."""
    import asyncio

    from higgs_v3.serving.worker import Chunk

    client, model, _ = served
    worker = client.app.state.service.worker
    samples = model.config.audio_spec.samples_per_frame

    async def run():
        loop = asyncio.get_running_loop()
        long = (("max_new_tokens", 48), ("min_new_tokens", 40))  # at least 33 frames: pieces of 3, 25, the rest
        chunks = [Chunk("Streamed.", None, 1, long, True, loop, first_chunk_frames=3),
                  Chunk("Whole.", None, 2, (), False, loop)]
        for chunk in chunks:
            worker.submit(chunk)
        outputs = [await asyncio.wait_for(chunk.output, 30) for chunk in chunks]
        pieces = []
        while not chunks[0].pieces.empty():
            kind, value = chunks[0].pieces.get_nowait()
            if kind == "audio":
                pieces.append(value)
        return outputs, pieces, chunks[1].pieces.qsize()

    from higgs_v3.serving.worker import _ChunkStreamer

    decoded, puts = [], []
    decode_audio, put = model.decode_audio, _ChunkStreamer.put
    model.decode_audio = lambda *args: decoded.append(args) or decode_audio(*args)
    _ChunkStreamer.put = lambda self, rows: puts.append(rows.shape[1]) or put(self, rows)
    try:
        (streamed, whole), pieces, whole_items = asyncio.run(run())
    finally:
        del model.decode_audio
        _ChunkStreamer.put = put
    assert len(puts) == len(pieces) and sum(puts) == streamed.num_frames + 7  # its rows, in one group per piece
    assert whole_items == 1  # the whole chunk's result alone, no audio piece
    assert [piece.numel() for piece in pieces[:2]] == [3 * samples, 25 * samples]
    assert len(decoded) == 1  # the whole chunk's take; the streamed take is not decoded a second time
    assert torch.equal(torch.cat(pieces), streamed.waveform)  # its take: what its client got
    one_shot = model.codec.decode_frames(streamed.codes[None])[0]  # and that is the whole-take decode
    assert streamed.waveform.shape == one_shot.shape and torch.allclose(streamed.waveform, one_shot, atol=1e-5)


def test_unfinished_chunks_are_told_in_a_header_the_sse_done_event_and_the_websocket_summary(served):
    client, model, processor = served
    out = model.generate(**processor("Hello there."), seed=3, return_dict_in_generate=True)
    expected = int(not out.finished[0])  # the model did not end it within max_new_tokens
    whole = client.post("/v1/audio/speech", json=speech(response_format="pcm", seed=3), headers=KEY)
    assert whole.headers["X-Higgs-Unfinished-Chunks"] == str(expected)
    sse = client.post("/v1/audio/speech", headers=KEY,
                      json=speech(response_format="pcm", stream_format="sse", seed=3))
    events = [json.loads(line[6:]) for line in sse.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["unfinished_chunks"] == expected
    with client.websocket_connect("/v1/audio/speech/stream?seed=3", headers=KEY) as websocket:
        websocket.send_text("Hello there.")
        websocket.send_text("")
        while isinstance(message := websocket.receive(), dict) and message.get("text") is None:
            pass
    assert json.loads(message["text"])["unfinished_chunks"] == expected


def test_a_whole_response_whose_client_left_is_cut_off_and_never_redone(served):
    import asyncio

    from higgs_v3.serving.app import SpeechRequest, _whole, check_speech

    client, _, _ = served
    service = client.app.state.service
    worker, count = service.worker, service.worker.batches
    entered, release = threading.Event(), threading.Event()
    worker._queue.put_nowait(_Call(lambda: (entered.set(), release.wait(60))))  # the worker is busy meanwhile
    assert entered.wait(60)
    plan = check_speech(SpeechRequest(**speech(retries=10, seed=3)), service.settings, service.processor, service.spec,
                        service.voices)

    class Gone:  # the request of a client that left once its body was read
        async def receive(self):
            return {"type": "http.disconnect"}

    try:
        assert asyncio.run(_whole(service, plan, Gone())) is None
        assert worker.free == 1  # its chunk, queued and cancelled, keeps its place until the worker drops it
    finally:
        release.set()
    assert worker.wait_idle(60) and worker.batches == count  # dropped unspoken


def test_shutdown_cuts_what_the_worker_still_holds_and_says_so(served, caplog):
    import asyncio
    import logging

    from higgs_v3.serving.app import SpeechService
    from higgs_v3.serving.worker import Chunk
    from test_worker import FakeModel, fake_worker

    client, _, _ = served
    service = SpeechService(client.app.state.service.model, client.app.state.service.processor,
                            client.app.state.service.settings)
    fake = FakeModel()
    fake.block = True
    service.worker = fake_worker(fake, max_queue=2)

    async def run():
        chunks = [Chunk("ok", None, seed, (), False, asyncio.get_running_loop()) for seed in (1, 2)]
        for chunk in chunks:
            service.worker.submit(chunk)
        fake.gate.release()
        await asyncio.to_thread(fake.entered.wait, 60)
        with caplog.at_level(logging.INFO, logger="higgs_v3.serving.app"):
            await asyncio.to_thread(service.stop)
        return await asyncio.gather(*(chunk.output for chunk in chunks), return_exceptions=True)

    results = asyncio.run(run())
    assert [type(result).__name__ for result in results] == ["ShutdownCut", "ShutdownCut"]
    assert "Shutdown: 2 chunk(s) cut unspoken (queued or being generated)" in caplog.text
    assert service.worker.free == 2


def test_the_key_is_checked_before_any_body_is_read_and_a_stalled_body_is_408(served):
    import asyncio

    from higgs_v3.serving.app import _BodyLimit

    client, _, _ = served
    received, sent = [], []

    async def receive():  # a body that never comes
        received.append(1)
        await asyncio.Event().wait()

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/audio/voices", "headers": [
        (b"content-type", b"multipart/form-data; boundary=x"), (b"content-length", b"1000")], "query_string": b""}
    asyncio.run(client.app.middleware_stack(scope, receive, send))  # the app as uvicorn calls it
    assert received == [] and sent[0]["status"] == 401  # refused before the body was asked for

    async def body_reader(scope, receive, send):  # a route that reads the whole body
        from starlette.requests import Request
        from starlette.responses import Response

        await Response(await Request(scope, receive).body())(scope, receive, send)

    pieces = iter([{"type": "http.request", "body": b"123456789", "more_body": True}])

    async def stalling():  # 9 of the announced 1000 bytes, then nothing
        if (piece := next(pieces, None)) is not None:
            return piece
        await asyncio.Event().wait()

    sent.clear()
    asyncio.run(_BodyLimit(body_reader, 10_000, gap=0.01, deadline=60)(scope, stalling, send))
    assert sent[0]["status"] == 408 and len(sent) == 2
    found = json.loads(sent[1]["body"])["error"]
    assert found["code"] == "request_timeout" and found["message"] == (
        "The request body did not come in time (9 bytes came; a server waits 0.01 s at most for each piece and 60 s "
        "for the whole body); send it whole, without pauses.")


TAKES = ("POST /v1/audio/voices takes multipart/form-data with the fields name (the voice's name), audio_sample (the "
         "clip, a file), consent (optional, recorded), type (optional, 'audio_sample'), transcript (optional, the "
         "clip's words)")


def test_voice_upload_refusals_name_the_field_and_what_is_accepted(served):
    client, _, _ = served
    clip = {"audio_sample": ("me.wav", b"RIFF", "audio/wav")}
    whole = client.build_request("POST", "/v1/audio/voices", data={"name": "me"}, files=clip, headers=KEY)
    body, content_type = whole.read(), whole.headers["content-type"]
    cases = [
        (dict(json={"name": "me", "audio_sample": "x"}), None,
         f"{TAKES}; got Content-Type 'application/json' (only multipart carries the audio file)."),
        (dict(content=b"", headers={"Content-Type": content_type}), None, f"The request body is empty; {TAKES}."),
        (dict(content=body[:-30], headers={"Content-Type": content_type}), None,
         f"The multipart body ends before its closing boundary (cut short?); {TAKES}."),
        (dict(data={"name": "me"}, files={"audio": ("me.wav", b"RIFF", "audio/wav")}), "audio",
         f"Unknown field 'audio'; {TAKES}."),
        (dict(files={"name": (None, "me")}), "audio_sample", f"'audio_sample' is required; {TAKES}."),
        (dict(files={"name": (None, "me"), "audio_sample": (None, "x")}), "audio_sample",
         f"'audio_sample' must be a file; {TAKES}."),
        (dict(data={"name": "me"}), None, f"{TAKES}; got Content-Type 'application/x-www-form-urlencoded' (only "
                                          "multipart carries the audio file)."),
        (dict(data={"name": "me", "type": "prompt"}, files=clip), "type",
         "type 'prompt' is not offered here: this server makes a voice from an audio sample only; accepted: "
         "'audio_sample' (the default)."),
    ]
    for request, param, message in cases:
        found = error(client.post("/v1/audio/voices", **{**request, "headers": {**KEY, **request.get("headers", {})}}),
                      400)
        assert (found["param"], found["message"]) == (param, message)
    empty = error(client.post("/v1/audio/speech", content=b"", headers={**KEY, "Content-Type": "application/json"}),
                  400)
    assert empty["message"].startswith("The request body is empty; POST /v1/audio/speech takes a JSON object with the "
                                       "fields model, input, voice, ") and empty["param"] is None
    assert error(client.post("/v1/audio/speech", json=[1], headers=KEY), 400)["message"].startswith(
        "The request body is a JSON list, not an object; POST /v1/audio/speech takes a JSON object")
    with client.websocket_connect("/v1/audio/speech/stream?speed=1", headers=KEY) as websocket:
        found = json.loads(websocket.receive_text())["error"]
    assert (found["param"], found["message"]) == ("speed", "Unknown query parameter 'speed'; the stream takes voice, "
                                                  "seed, temperature, top_p, top_k, max_seconds, instructions, "
                                                  "initial_codec_chunk_frames.")
    assert client.get("/v1/models/tiny", headers=KEY).json() == {"id": "tiny", "object": "model", "created": 0,
                                                                 "owned_by": "higgs-v3"}
    found = error(client.get("/v1/models/tts-1", headers=KEY), 404)
    assert found == {"message": "model 'tts-1' is not served here; this server serves 'tiny'.", "type":
                     "invalid_request_error", "param": "model", "code": "model_not_found"}


def test_a_full_disk_on_a_voice_upload_is_507_and_leaves_nothing(served, monkeypatch):
    import errno

    import safetensors.torch

    client, _, _ = served
    folder = client.app.state.service.voices.folder

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    clip = io.BytesIO()
    soundfile.write(clip, np.sin(np.arange(24000) / 9).astype(np.float32) * 0.3, 24000, format="WAV")
    before = sorted(folder.iterdir())
    found = error(client.post("/v1/audio/voices", data={"name": "full"}, headers=KEY,
                              files={"audio_sample": ("me.wav", clip.getvalue(), "audio/wav")}), 507)
    assert found["code"] == "insufficient_storage" and found["type"] == "server_error"
    assert found["message"].startswith("No space left on device while writing voice 'full' (it needs about ")
    assert found["message"].endswith("free there); nothing was saved. Free some space or start the server with a "
                                     "--voices-dir on another disk.")
    assert sorted(folder.iterdir()) == before


def test_url_references_are_fetched_on_their_own_bounded_threads(served, monkeypatch):
    from higgs_v3.serving import app as app_module

    client, _, _ = served
    settings = client.app.state.service.settings
    monkeypatch.setattr(settings, "allow_url_references", True)
    monkeypatch.setattr(settings, "url_fetch_workers", 1)
    bad = error(client.post("/v1/audio/speech", json=speech(reference_audio="http://[::1"), headers=KEY), 400)
    assert (bad["param"], bad["message"]) == ("reference_audio", "Reference audio URL 'http://[::1' is not a valid URL "
                                              "(Invalid IPv6 URL); give an http(s) address of an audio file.")
    started, release, threads = threading.Event(), threading.Event(), []

    def slow_fetch(url, deadline):
        threads.append(threading.current_thread().name)
        started.set()
        release.wait(30)
        raise ValueError(f"Could not fetch reference audio URL {url!r} (HTTP 404 Not Found); check the address.")

    monkeypatch.setattr(app_module, "fetch_audio_url", slow_fetch)
    url, answers = "http://127.0.0.1:9/me.wav", {}
    first = threading.Thread(target=lambda: answers.setdefault("first", client.post(
        "/v1/audio/speech", json=speech(reference_audio=url), headers=KEY)))
    first.start()
    assert started.wait(30)
    busy = error(client.post("/v1/audio/speech", json=speech(reference_audio=url), headers=KEY), 503)
    assert busy["message"].startswith("The server is fetching 1 reference URLs already, the most at once; retry")
    plain = client.post("/v1/audio/speech", json=speech(response_format="pcm"), headers=KEY)
    assert plain.status_code == 200  # not behind the fetch
    release.set()
    first.join(30)
    found = error(answers["first"], 400)
    assert found["param"] == "reference_audio" and url in found["message"] and "uploaded clip" not in found["message"]
    assert threads == ["higgs-v3-url_0"]


def test_a_streamed_chunk_joins_a_long_one_being_spoken_and_ends_first(served):
    """Issue 31's point: a chunk that arrives while a long one is being decoded joins it at the next step, so its audio
    (first piece and all) comes long before the long one ends; without step-level batching it waited for it."""
    import asyncio

    from higgs_v3.serving.worker import Chunk

    client, _, _ = served
    worker = client.app.state.service.worker

    async def run():
        loop = asyncio.get_running_loop()
        long = Chunk("A long one.", None, 1, (("max_new_tokens", 120), ("min_new_tokens", 110)), False, loop)
        short = Chunk("Short.", None, 2, (("max_new_tokens", 30), ("min_new_tokens", 25)), True, loop,
                      first_chunk_frames=5)
        worker.submit(long)
        while worker.active < 1:  # the long one is in the session
            await asyncio.sleep(0)
        worker.submit(short)
        first = await asyncio.wait_for(short.pieces.get(), 30)
        output = await asyncio.wait_for(short.output, 30)
        long_done_then = long.output.done()
        await asyncio.wait_for(long.output, 60)
        return first, output, long_done_then

    first, output, long_done_then = asyncio.run(run())
    assert first[0] == "audio" and output.batch_size == 2 and not long_done_then


def test_the_command_lines_defaults_are_the_settings_defaults():
    """`higgs-v3 serve`'s flags and `ServeSettings` (what `create_app` callers get) default alike, field by field."""
    import dataclasses

    from higgs_v3.cli.main import build_parser

    args = vars(build_parser().parse_args(["serve"]))
    shared = [f for f in dataclasses.fields(ServeSettings) if f.name in args and f.default is not dataclasses.MISSING]
    assert {"max_batch_size", "max_prefill_tokens", "max_queue", "drain_seconds"} <= {f.name for f in shared}
    assert {f.name: args[f.name] for f in shared} == {f.name: f.default for f in shared}
