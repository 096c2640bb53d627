# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""`higgs-v3 serve` as users run it: a real server process (uvicorn on a free port, the tiny random model, one torch
thread as this process has) spoken to with the official `openai` client, httpx and a WebSocket client. Audio is
compared with `model.generate` (and `processor.synthesize_stream`) in this process with the same seeds."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile
import torch

from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration
from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor
from higgs_v3.serving.audio import writable_formats


pytestmark = pytest.mark.integration

KEY, MAX_SECONDS = "test-key", 0.4
HEADERS = {"Authorization": f"Bearer {KEY}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, repo, voices_dir, *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HIGGS_V3_API_KEY": KEY}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "higgs_v3.cli", "serve", "--model", str(repo), "--served-model-name", "tiny",
             "--port", str(self.port), "--voices-dir", str(voices_dir), "--max-seconds", str(MAX_SECONDS),
             "--max-batch-size", "8", "--batch-wait-ms", "50", "--max-body-bytes", "1000000", "--log-level", "warning",
             *extra],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 180  # a busy machine starts it slowly
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.process.stdout.read()
            try:
                if httpx.get(f"{self.url}/health", headers=HEADERS, timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        raise AssertionError("the server did not start")

    def client(self, key: str = KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    def kill(self, sig=signal.SIGKILL) -> int:
        self.process.send_signal(sig)
        return self.process.wait(30)


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("voices")


@pytest.fixture(scope="module")
def server(tiny_random_repo, voices_dir):
    server = Server(tiny_random_repo, voices_dir)
    yield server
    if server.process.poll() is None:
        server.kill()


@pytest.fixture(scope="module")
def local(tiny_random_repo):
    model = HiggsAudioV3ForConditionalGeneration.from_pretrained(str(tiny_random_repo), dtype="float32").eval()
    return model, HiggsAudioV3Processor.from_pretrained(str(tiny_random_repo), trust_remote_code=False)


def generated(local, text: str, seed: int) -> np.ndarray:
    """`model.generate`'s waveform for `text` with `seed` (float32)."""
    model, processor = local
    out = model.generate(**processor(text), seed=seed, return_dict_in_generate=True, output_audio=True,
                         max_new_tokens=model.config.audio_spec.rows_for_seconds(MAX_SECONDS))
    return out.audio[0].numpy()


def written(waveform, response_format: str) -> np.ndarray:
    """`waveform` written by soundfile in `response_format` and read back as 16-bit samples: what a response of that
    format must decode to (lossy encoders are deterministic)."""
    if response_format == "pcm":
        return pcm16(waveform)
    kind, subtype = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III"),
                     "opus": ("OGG", "OPUS")}[response_format]
    buffer = io.BytesIO()
    soundfile.write(buffer, waveform, 24000, format=kind, subtype=subtype)
    return decoded(buffer.getvalue(), response_format)


def pcm16(waveform) -> np.ndarray:
    buffer = io.BytesIO()
    soundfile.write(buffer, np.asarray(waveform, dtype=np.float32), 24000, format="RAW", subtype="PCM_16",
                    endian="LITTLE")
    return np.frombuffer(buffer.getvalue(), dtype="<i2")


def decoded(data: bytes, response_format: str) -> np.ndarray:
    if response_format == "pcm":
        return np.frombuffer(data, dtype="<i2")
    samples, rate = soundfile.read(io.BytesIO(data), dtype="int16")
    assert rate == 24000
    return samples


def test_openai_client_every_format_whole_and_streamed(server, local):
    client, text, seed = server.client(), "Hello from the server.", 3
    waveform = generated(local, text, seed)
    expected = pcm16(waveform)
    assert set(writable_formats()) >= {"wav", "pcm"}
    for response_format in writable_formats():
        audio = decoded(client.audio.speech.create(model="tiny", input=text, voice="default",
                                                   response_format=response_format, extra_body={"seed": seed}).content,
                        response_format)
        assert np.array_equal(audio, written(waveform, response_format)), response_format
        with client.audio.speech.with_streaming_response.create(
                model="tiny", input=text, voice="default", response_format=response_format,
                extra_body={"seed": seed}) as response:  # the client reads the body as it arrives
            assert np.array_equal(decoded(b"".join(response.iter_bytes()), response_format), audio)
    for response_format in ("pcm", "wav"):  # generated and sent as the rows are decoded
        pieces = []
        with client.audio.speech.with_streaming_response.create(
                model="tiny", input=text, voice="default", response_format=response_format,
                extra_body={"seed": seed, "stream_format": "audio"}) as response:
            pieces = list(response.iter_bytes())
        data = b"".join(pieces)
        streamed = np.frombuffer(data[44:] if response_format == "wav" else data, dtype="<i2")
        assert len(streamed) == len(expected) and np.abs(streamed.astype(int) - expected).max() <= 1
    events = httpx.post(f"{server.url}/v1/audio/speech", headers=HEADERS, timeout=60, json={
        "model": "tiny", "input": text, "response_format": "pcm", "stream_format": "sse", "seed": seed}).text
    events = [json.loads(line[6:]) for line in events.splitlines() if line.startswith("data: ")]
    assert {event["type"] for event in events[:-1]} == {"speech.audio.delta"}
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["output_tokens"] == len(expected)


def _all_at_once(http: httpx.Client, bodies: list[dict]) -> list[bytes]:
    """The speech of every body, all requests sent at once (one thread each), in the order of `bodies`."""
    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(lambda body: http.post("/v1/audio/speech", json=body).content, bodies))


def test_batch_invariant_server_16_concurrent_requests_are_byte_identical_to_sequential(tiny_random_repo, voices_dir):
    """`--batch-invariant`: 16 requests at once, of unequal lengths (up to 4 s, past this fixture's usual 0.4 s), give
    the files the same requests give one by one (which never shared a step), though each joined and left the decode
    session at its own step. (Without it a long item's rows can differ: docs/SERVING.md; the unit layer's
    test_serve.py batches the default server.)"""
    server = Server(tiny_random_repo, voices_dir, "--batch-invariant", "--max-batch-size", "16", "--max-queue", "32")
    try:
        bodies = [{"model": "tiny", "input": f"Request {i} " + "says hello " * (i % 4), "response_format": "wav",
                   "seed": 300 + i, "max_seconds": 1.0 + (i % 4), "retries": 0} for i in range(16)]
        with httpx.Client(base_url=server.url, headers=HEADERS, timeout=300) as http:
            sequential = [http.post("/v1/audio/speech", json=body).content for body in bodies]
            alone = http.get("/health").json()
            concurrent = _all_at_once(http, bodies)
            health = http.get("/health").json()
    finally:
        server.kill()
    lengths = {len(content) for content in sequential}
    assert len(lengths) > 2, lengths  # unequal lengths: rows left the session at different steps
    assert concurrent == sequential
    assert alone["largest_batch"] == 1 and health["largest_batch"] > 8  # the concurrent ones shared decode steps


def test_bad_requests_through_the_openai_client(server):
    client = server.client()
    cases = [({"input": ""}, openai.BadRequestError, "input"),
             ({"input": "Hi.", "voice": "nobody"}, openai.BadRequestError, "voice"),
             ({"input": "Hi.", "response_format": "aac"}, openai.BadRequestError, "response_format"),
             ({"input": "<|emotion:nope|>Hi."}, openai.BadRequestError, "input"),
             ({"input": "Hi.", "extra_body": {"bogus": 1}}, openai.BadRequestError, "bogus"),
             ({"input": "x" * 5000}, openai.APIStatusError, "input")]
    for fields, kind, param in cases:
        with pytest.raises(kind) as caught:
            client.audio.speech.create(**{"model": "tiny", "voice": "default", **fields})
        assert caught.value.status_code in (400, 413) and caught.value.body["param"] == param, caught.value.body
    with pytest.raises(openai.AuthenticationError):
        server.client("wrong").audio.speech.create(model="tiny", input="Hi.", voice="default")
    big = httpx.post(f"{server.url}/v1/audio/speech", headers=HEADERS, content=b"{" * 1_000_001)
    assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"


def test_text_stream_speaks_sentence_one_before_sentence_ten_arrives(server, local):
    from websockets.sync.client import connect

    model, processor = local
    sentences = [f"This is sentence number {i}. " for i in range(1, 11)]
    url = f"ws://127.0.0.1:{server.port}/v1/audio/speech/stream?seed=9"
    frames, summary = [], None
    with connect(url, additional_headers=HEADERS) as websocket:
        websocket.send(sentences[0])
        websocket.send(sentences[1][:5])  # the next sentence begins: sentence 1 is complete
        frames.append(websocket.recv(timeout=60))  # audio of sentence 1, nothing of sentence 10 sent yet
        assert isinstance(frames[0], bytes) and len(frames[0]) > 0
        websocket.send(sentences[1][5:])
        for sentence in sentences[2:]:
            websocket.send(sentence)
        websocket.send("")
        while summary is None:
            frame = websocket.recv(timeout=60)
            summary = json.loads(frame) if isinstance(frame, str) else frames.append(frame)
    assert summary["type"] == "speech.done" and summary["chunks"] == 10 and summary["seed"] == 9
    audio = np.frombuffer(b"".join(frames), dtype="<i2")
    expected = pcm16(torch.cat(list(processor.synthesize_stream(model, iter(sentences), seed=9,
                                                                max_seconds=MAX_SECONDS))).numpy())
    assert len(audio) == len(expected) and np.abs(audio.astype(int) - expected).max() <= 1


# ------------------------------------------------------------------------------------------------ the page, a browser
def _chromium():
    """Debian's chromium, headless, driven by Selenium through Debian's chromedriver (`.ci/install_browser.sh`)."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver):
        pytest.fail("The page's browser test needs Debian's chromium and chromedriver: bash .ci/install_browser.sh "
                    "(apt-get install chromium chromium-driver).", pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--autoplay-policy=no-user-gesture-required", "--mute-audio"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(driver))


def test_the_page_speaks_in_a_browser_and_asks_for_the_key(server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    text, seed = "Hello from the page.", 5
    events = httpx.post(f"{server.url}/v1/audio/speech", headers=HEADERS, timeout=60, json={
        "model": "tiny", "input": text, "response_format": "pcm", "stream_format": "sse", "seed": seed}).text
    samples = json.loads(events.strip().splitlines()[-1][6:])["usage"]["output_tokens"]
    browser = _chromium()
    try:
        state = lambda: browser.execute_script("return window.higgs")
        until = lambda *states: WebDriverWait(browser, 60, 0.05).until(lambda _: state()["state"] in states) and state()
        browser.get(f"{server.url}/")
        assert until("needs-key")["message"] == "This server wants an API key: enter it once above."
        browser.find_element(By.ID, "speak").click()  # no key: refused on the page, nothing sent
        assert until("refused")["message"] == "This server wants an API key: enter it once above, then press speak."
        browser.find_element(By.ID, "key").send_keys("wrong")
        browser.find_element(By.ID, "use-key").click()
        WebDriverWait(browser, 30, 0.05).until(lambda _: "refused" in state()["message"])
        browser.find_element(By.ID, "key").clear()
        browser.find_element(By.ID, "key").send_keys(KEY)
        browser.find_element(By.ID, "use-key").click()
        assert until("ready")["model"] == "tiny"
        browser.find_element(By.ID, "text").clear()
        browser.find_element(By.ID, "text").send_keys(text)
        browser.find_element(By.ID, "seed").send_keys(str(seed))
        browser.find_element(By.ID, "speak").click()
        done = until("done", "error", "refused")
        assert done["state"] == "done", done
        assert abs(done["scheduledSeconds"] - samples / 24000) < 1e-6 and done["deltas"] >= 1  # every sample scheduled
        assert done["message"].startswith(f"Done: {samples / 24000:.2f} s of audio")
        browser.find_element(By.ID, "text").clear()
        browser.find_element(By.ID, "text").send_keys("<|emotion:happy|>Hi.")
        browser.find_element(By.ID, "speak").click()
        refused = until("refused", "error")
        assert refused["message"].startswith("Refused: Unknown control tag '<|emotion:happy|>' in input"), refused
        assert browser.find_element(By.ID, "status").text == refused["message"]  # shown in words
    finally:
        browser.quit()


# ------------------------------------------------------------------------------------------ the reverse proxy, nginx
PROXY_EDITS = {"listen 8080;": "listen {proxy};", "127.0.0.1:8000": "127.0.0.1:{server}",
               "client_header_timeout 10s;": "client_header_timeout 1s;", "client_body_timeout 10s;":
               "client_body_timeout 1s;"}
"""What the test changes in docs/SERVING.md's nginx configuration: its ports, and 1 s deadlines (for a short test)."""


def test_the_documented_nginx_configuration_cuts_off_trickling_clients(server, tmp_path):
    import re
    import shutil

    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if nginx is None:
        pytest.skip("nginx is not installed (bash .ci/install_browser.sh: apt-get install nginx)")
    docs = (Path(__file__).resolve().parents[1] / "docs" / "SERVING.md").read_text()
    blocks = re.findall(r"```nginx\n(.*?)```", docs, re.S)
    assert len(blocks) == 1, "docs/SERVING.md shows one nginx configuration"
    config, proxy = blocks[0], free_port()
    for old, new in PROXY_EDITS.items():
        assert config.count(old) >= 1, old
        config = config.replace(old, new.format(proxy=proxy, server=server.port))
    temp = {name: tmp_path / name for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
    (tmp_path / "nginx.conf").write_text(
        f"worker_processes 1;\npid {tmp_path}/nginx.pid;\nerror_log stderr warn;\nevents {{ worker_connections 64; }}\n"
        f"http {{\naccess_log off;\n" + "".join(f"{name}_temp_path {path};\n" if name != "body" else
                                               f"client_body_temp_path {path};\n" for name, path in temp.items())
        + config + "}\n")
    process = subprocess.Popen([nginx, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-g", "daemon off;"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{proxy}"
    try:
        deadline = time.monotonic() + 120  # until nginx listens (seconds on a busy machine; never a margin)
        while True:
            try:
                models = httpx.get(f"{url}/v1/models", headers=HEADERS, timeout=30)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stdout.read()
                assert time.monotonic() < deadline, "nginx did not start listening"
                time.sleep(0.05)
        assert models.json()["data"][0]["id"] == "tiny"
        body = {"model": "tiny", "input": "Through the proxy.", "response_format": "pcm", "seed": 2, "retries": 0}
        direct = httpx.post(f"{server.url}/v1/audio/speech", headers=HEADERS, json=body, timeout=60).content
        assert httpx.post(f"{url}/v1/audio/speech", headers=HEADERS, json=body, timeout=60).content == direct
        with httpx.stream("POST", f"{url}/v1/audio/speech", headers=HEADERS, timeout=60,
                          json={**body, "stream_format": "audio"}) as streamed:  # not buffered by the proxy
            assert b"".join(streamed.iter_bytes()) == direct
        from websockets.sync.client import connect

        with connect(f"ws://127.0.0.1:{proxy}/v1/audio/speech/stream?seed=2", additional_headers=HEADERS) as socket_:
            socket_.send("Hi there.")
            socket_.send("")
            while isinstance(frame := socket_.recv(timeout=60), bytes):
                pass
        assert json.loads(frame)["type"] == "speech.done"
        for request, pieces in [(b"GET /health HTTP/1.1\r\nHost: x\r\n", [b"X-Slow: ", b"a", b"b", b"c"] * 5),
                                (b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
                                 + b"\r\nContent-Length: 1000\r\n\r\n123456789", [])]:
            started = time.monotonic()
            with socket.create_connection(("127.0.0.1", proxy), timeout=10) as connection:
                connection.sendall(request)
                answer = b""
                for piece in pieces:  # a header trickled, a piece every 0.3 s: cut off at the 1 s deadline
                    time.sleep(0.3)
                    try:
                        connection.sendall(piece)
                    except OSError:
                        break
                with contextlib.suppress(OSError):
                    while chunk := connection.recv(4096):
                        answer += chunk
            assert time.monotonic() - started < 5, request  # closed by the proxy, not after the 6 s of trickling
            assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer[:200]
    finally:
        process.terminate()
        process.wait(10)


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the client deprecates translations.create
def test_every_audio_and_models_call_of_the_openai_client(server):
    """Each call of the installed `openai` package that touches audio or models, against the server: what it serves
    answers as OpenAI's objects; what it does not (speech-to-text, consent recordings, deleting a model, a voice from a
    prompt) is a refusal that names what is served. A new call in a newer client fails this test until it is here."""
    client = server.client()
    clip = io.BytesIO()
    soundfile.write(clip, (np.sin(np.arange(36000) / 7) * 0.3).astype(np.float32), 24000, format="WAV")
    wav = ("oa.wav", clip.getvalue(), "audio/wav")
    served = "here; this server serves POST /v1/audio/speech, WS /v1/audio/speech/stream, "
    calls = {
        "audio.speech.create": lambda: client.audio.speech.create(model="tiny", input="Hi.", voice="default",
                                                                  response_format="wav", extra_body={"seed": 1}),
        "audio.voices.create": lambda: client.audio.voices.create(name="oa", audio_sample=wav, consent="cons_123",
                                                                  extra_body={"transcript": "Hi there."}),
        "audio.voices.delete": lambda: client.audio.voices.delete("oa"),
        "audio.transcriptions.create": lambda: client.audio.transcriptions.create(model="whisper-1", file=wav),
        "audio.translations.create": lambda: client.audio.translations.create(model="whisper-1", file=wav),
        "audio.voice_consents.create": lambda: client.audio.voice_consents.create(name="me", language="en",
                                                                                  recording=wav),
        "audio.voice_consents.retrieve": lambda: client.audio.voice_consents.retrieve("cons_123"),
        "audio.voice_consents.update": lambda: client.audio.voice_consents.update("cons_123", name="me"),
        "audio.voice_consents.list": lambda: client.audio.voice_consents.list(),
        "audio.voice_consents.delete": lambda: client.audio.voice_consents.delete("cons_123"),
        "models.list": lambda: client.models.list(),
        "models.retrieve": lambda: client.models.retrieve("tiny"),
        "models.delete": lambda: client.models.delete("tiny"),
    }
    offered = {f"{group}.{name}" for group, owner in [("models", client.models), *(
        (f"audio.{part}", getattr(client.audio, part)) for part in dir(client.audio) if not part.startswith(("_",
                                                                                                             "with_")))]
               for name in dir(owner) if not name.startswith(("_", "with_"))}
    assert offered == set(calls)
    answers = {}
    for name, call in calls.items():
        try:
            answers[name] = call()
        except openai.APIStatusError as error:
            answers[name] = error
    assert decoded(answers["audio.speech.create"].content, "wav").size > 0
    voice = answers["audio.voices.create"]
    assert (voice.id, voice.name, voice.object, voice.type) == ("oa", "oa", "audio.voice", "audio_sample")
    assert voice.model_extra["transcript"] == "Hi there." and voice.model_extra["consent"] == "cons_123"
    deleted = answers["audio.voices.delete"]
    assert (deleted.id, deleted.object, deleted.deleted) == ("oa", "audio.voice.deleted", True)
    assert [model.id for model in answers["models.list"]] == ["tiny"]
    assert (answers["models.retrieve"].id, answers["models.retrieve"].object) == ("tiny", "model")
    for name in set(calls) - {"audio.speech.create", "audio.voices.create", "audio.voices.delete", "models.list",
                              "models.retrieve"}:
        refusal = answers[name]  # 404, or 405 for a path served with another method (DELETE /v1/models/tiny)
        assert isinstance(refusal, openai.APIStatusError) and refusal.status_code in (404, 405), (name, refusal)
        assert served in refusal.body["message"] and refusal.body["code"] == "unknown_route", (name, refusal.body)
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("tts-1")
    assert missing.value.body == {"message": "model 'tts-1' is not served here; this server serves 'tiny'.",
                                  "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
    with pytest.raises(openai.BadRequestError) as prompt:
        client.audio.voices.create(name="oa", prompt="A calm voice.", type="prompt")
    assert prompt.value.body["param"] == "type", prompt.value.body
    with pytest.raises(openai.NotFoundError) as gone:
        client.audio.voices.delete("oa")
    assert gone.value.body["param"] == "voice_id"


def test_sigterm_drains_and_a_killed_server_restarts_with_its_voices(server, tiny_random_repo, voices_dir):
    clip = io.BytesIO()
    soundfile.write(clip, (np.sin(np.arange(36000) / 7) * 0.3).astype(np.float32), 24000, format="WAV")
    made = httpx.post(f"{server.url}/v1/audio/voices", headers=HEADERS, data={"name": "ann", "transcript": "Hi."},
                      files={"audio_sample": ("ann.wav", clip.getvalue(), "audio/wav")}, timeout=60)
    assert made.status_code == 201, made.text
    body = {"model": "tiny", "input": "Spoken by Ann.", "voice": "ann", "response_format": "wav", "seed": 4}
    before = httpx.post(f"{server.url}/v1/audio/speech", headers=HEADERS, json=body, timeout=60).content
    assert server.kill(signal.SIGKILL) == -signal.SIGKILL
    again = Server(tiny_random_repo, voices_dir)
    try:
        assert httpx.get(f"{again.url}/v1/audio/voices", headers=HEADERS).json() == {"voices": ["default", "ann"]}
        assert httpx.post(f"{again.url}/v1/audio/speech", headers=HEADERS, json=body, timeout=60).content == before
        streamed = {**body, "response_format": "pcm", "stream_format": "audio", "retries": 0}
        whole = httpx.post(f"{again.url}/v1/audio/speech", headers=HEADERS, json=streamed, timeout=60).content
        received, started = [], threading.Event()

        def listen():
            with httpx.stream("POST", f"{again.url}/v1/audio/speech", headers=HEADERS, json=streamed,
                              timeout=60) as response:
                for piece in response.iter_bytes():
                    received.append(piece)
                    started.set()

        thread = threading.Thread(target=listen)
        thread.start()
        assert started.wait(60)  # its first audio came: the request is in flight
        assert again.kill(signal.SIGTERM) == 0  # drained, then a clean exit
        thread.join(60)
        assert b"".join(received) == whole  # the stream in flight was finished whole
    finally:
        if again.process.poll() is None:
            again.kill()


def test_bench_serve_runs_and_reports_its_ratios(tmp_path, restore_global_state):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_serve

    payload = bench_serve.main(["--requests", "2", "--seconds", "0.2", "--no-plot", "--out", str(tmp_path), "--no-load",
                                "--batch-items", "3"])
    assert set(payload["ratios"]) == {"concurrency 1", "concurrency 4", "concurrency 16", "first byte / whole response",
                                      "higgs-v3 batch: static over session"}
    assert all(value > 0 for value in payload["ratios"].values()) and payload["largest_batch"] >= 1
    assert payload["compared_responses"] == 2 * 3 and 0 <= payload["differing_responses"] <= 6
    assert json.loads((tmp_path / "bench_serve.json").read_text())["ratios"] == payload["ratios"]
