# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Reference clips in prompts, the CSM way: `processor(text, reference=clip)` and chat items `{"type": "audio",
"path" | "url" | "audio": ...}` give the prepared waveform to the model, whose codec encodes it once in `generate`.

The expected values come from the voice route, which was there before: `processor(text,
reference=model.encode_reference(clip))` (the codec run on the clip by `encode_reference`). A clip and its voice must
give the same prompt ids and, after `generate` encoded the clip, the same reference rows and the same generated
sequences, greedy and seeded. The frame count (the processor's pure function of the codec's frame-count parameters,
saved with it) is checked against the codec's own `encode` and against the closed form of the real strides written out
by hand.
"""

from __future__ import annotations

import copy
import functools
import http.server
import json
import math
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import soundfile
import torch
from conftest import tiny_model, tiny_tts_model

from transformers import BatchEncoding, BatchFeature

from higgs_v3 import audio_io_higgs_v3
from higgs_v3.processing_higgs_v3 import REAL_ENCODED_LENGTH_KWARGS, HiggsAudioV3Processor


C = 8
ROWS = 10  # rows per generation: few, to be fast (a frame after the 7 rows of the delay window)
TEXT = "Hello there."


# ----------------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tts_model():
    return tiny_tts_model(ROWS)


def noise(seconds: float, rate: int, seed: int, channels: int = 1) -> np.ndarray:
    samples = np.random.default_rng(seed).uniform(-0.3, 0.3, size=(round(seconds * rate), channels))
    return samples[:, 0].astype(np.float32) if channels == 1 else samples.astype(np.float32)


@pytest.fixture(scope="module")
def clip_file(tmp_path_factory):
    """A 1.3 s stereo clip at 16 kHz, written as float samples (the file holds them exactly)."""
    path = tmp_path_factory.mktemp("clips") / "me.wav"
    soundfile.write(path, noise(1.3, 16000, seed=1, channels=2), 16000, subtype="FLOAT")
    return path


@pytest.fixture(scope="module")
def server(clip_file):
    """A local `http.server` in a thread serving the clip's folder (plus a text file); yields its base URL."""
    (clip_file.parent / "notes.txt").write_text("not audio at all\n" * 20)
    handler = functools.partial(QuietHandler, directory=str(clip_file.parent))
    httpd = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no request log on stderr
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # a client that stops reading (the size limit) is no error here
        pass


def generated(model, inputs, modes: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The sequences of one generate per mode: "greedy", or "seeded" sampling."""
    options = {"greedy": {"do_sample": False}, "seeded": {"seed": 7}}
    return {mode: model.generate(**inputs, **options[mode], max_new_tokens=ROWS) for mode in modes}


def assert_same_generation(model, from_clip, from_voice, modes=("greedy", "seeded")):
    for key in ("input_ids", "attention_mask"):
        assert torch.equal(from_clip[key], from_voice[key]), key
    filled = model.merge_reference_clips(from_clip["audio_input_ids"], from_clip["reference_audio"],
                                         from_clip["reference_audio_lengths"])
    assert torch.equal(filled, from_voice["audio_input_ids"])
    ours, theirs = generated(model, from_clip, modes), generated(model, from_voice, modes)
    for mode in modes:
        assert torch.equal(ours[mode], theirs[mode]), mode


# ----------------------------------------------------------------------------------------------- frame count
def real_strides_frames(num_samples: int) -> int:
    """The real codec's frames written out by hand: 16 kHz samples `ceil(2N / 3)`, padded by 160 on each side, HuBERT
    (receptive field 400, stride 320), every second frame kept."""
    semantic = math.ceil(2 * num_samples / 3)
    hubert = (semantic + 320 - 400) // 320 + 1
    return math.ceil(hubert / 2)


def test_pure_frame_count_equals_the_codec_encode_length(tts_model, processor, tokenizer):
    """`_get_encoded_length` with the processor's saved parameters (the real codec's by default, the model's codec's
    from `from_model_config`) is the length the codec's `encode` returns."""
    codec, count = tts_model.codec, HiggsAudioV3Processor._get_encoded_length
    from_model = HiggsAudioV3Processor.from_model_config(tokenizer, tts_model.config).encoded_length_kwargs
    assert processor.encoded_length_kwargs == from_model == REAL_ENCODED_LENGTH_KWARGS  # the tiny codec's real strides
    # hop multiples and their neighbours, the count's own steps (960 k + 120), the minimum, odd rates' lengths
    lengths = [960, 961, 1079, 1080, 1081, 1919, 1920, 1921, 2039, 2040, 2041, 4799, 4800, 23999, 24000, 24001,
               24119, 24120, 24121, 30001, 44100]
    for n in lengths:
        with torch.no_grad():
            frames = codec.encode(torch.randn(1, 1, n, generator=torch.Generator().manual_seed(n))).shape[-1]
        assert count(n, **from_model) == frames == real_strides_frames(n), n
    for n in range(0, 100_000, 31):  # the pure function against the hand-written form, without the codec
        assert count(n, **REAL_ENCODED_LENGTH_KWARGS) == real_strides_frames(n), n
    assert count(24000, **REAL_ENCODED_LENGTH_KWARGS) == 25


# ------------------------------------------------------------------------------ a clip equals its voice
def test_clip_in_every_form_equals_its_voice(tts_model, processor, clip_file):
    """A wav path, a 44.1 kHz array with its rate, a datasets-style dict, a torch tensor and a short clip (padded to
    1 s) each give the same prompt, reference rows and generated sequences (greedy and seeded) as their voice."""
    at_44k = noise(1.7, 44100, seed=2)
    short = noise(0.4, 24000, seed=3)
    cases = [  # (clip, processor options, encode_reference arguments, options, generation modes compared)
        (clip_file, {}, (str(clip_file),), {}, ("greedy", "seeded")),
        (at_44k, {"sampling_rate": 44100}, (at_44k,), {"sampling_rate": 44100}, ("seeded",)),
        ({"array": at_44k, "sampling_rate": 44100, "path": None}, {}, (at_44k,), {"sampling_rate": 44100}, ("greedy",)),
        (torch.from_numpy(short), {"sampling_rate": 24000}, (short,), {"sampling_rate": 24000}, ("greedy", "seeded")),
    ]
    for clip, options, args, voice_options, modes in cases:
        inputs = processor(TEXT, reference=clip, **options)
        assert isinstance(inputs, BatchEncoding) and not isinstance(inputs, BatchFeature)
        voice = tts_model.encode_reference(*args, **voice_options)
        waveform = audio_io_higgs_v3.prepare_reference_waveform(*args, **voice_options)  # what encode_reference encodes
        assert inputs["reference_audio"].dtype == torch.float32
        assert torch.equal(inputs["reference_audio"], waveform)
        assert inputs["reference_audio_lengths"].tolist() == [waveform.shape[0]]
        assert torch.equal(inputs["audio_input_ids"], torch.full((voice.num_frames + C - 1, C), -100))  # to be filled
        assert_same_generation(tts_model, inputs, processor(TEXT, reference=voice), modes)
    assert processor(TEXT, reference=short, sampling_rate=24000)["reference_audio"].shape == (24000,)  # padded to 1 s


def test_transcript_and_a_batch_mixing_clips_voices_and_none(tts_model, processor, clip_file):
    at_44k = noise(2.1, 44100, seed=4)
    voice = tts_model.encode_reference(noise(1.2, 24000, seed=5), sampling_rate=24000, text="A voice.")
    texts = ["First one.", "Second.", "Third, no reference.", "Fourth <|emotion:anger|>now!"]
    inputs = processor(texts, reference=[str(clip_file), voice, None, at_44k],
                       reference_text=["The clip's words.", None, None, None], sampling_rate=[None, None, None, 44100])
    voices = [tts_model.encode_reference(clip_file, text="The clip's words."), voice, None,
              tts_model.encode_reference(at_44k, sampling_rate=44100)]
    expected = processor(texts, reference=voices)
    lengths = inputs["reference_audio_lengths"].tolist()
    assert lengths == [math.ceil(1.3 * 24000), math.ceil(2.1 * 24000)]
    waveforms = [audio_io_higgs_v3.prepare_reference_waveform(clip_file),
                 audio_io_higgs_v3.prepare_reference_waveform(at_44k, 44100)]
    assert torch.equal(inputs["reference_audio"], torch.cat(waveforms))  # packed, in placeholder order
    first, middle, last = (v.num_frames + C - 1 for v in voices if v is not None)
    marks = inputs["audio_input_ids"][:, 0].tolist()  # clip 0's rows, the voice's own rows, clip 1's rows
    assert marks == [-100] * first + expected["audio_input_ids"][first : first + middle, 0].tolist() + [-100] * last
    seeds = [3, 4, 5, 6]
    for key in ("input_ids", "attention_mask"):
        assert torch.equal(inputs[key], expected[key]), key
    ours = tts_model.generate(**inputs, seed=seeds, max_new_tokens=ROWS)
    assert torch.equal(ours, tts_model.generate(**expected, seed=seeds, max_new_tokens=ROWS))
    greedy = tts_model.generate(**inputs, do_sample=False, max_new_tokens=ROWS)
    assert torch.equal(greedy, tts_model.generate(**expected, do_sample=False, max_new_tokens=ROWS))


def test_the_converters_processor_counts_frames_with_the_models_codec(tts_model, processor, tmp_path):
    """The frame-count parameters are saved with the processor (`processor_config.json`): the converter's processor
    (`save_processor_files`, from the model's config) counts the frames of the model's codec (here one whose HuBERT has
    another first stride), a processor saved on its own the real codec's; neither reads the model's `config.json`."""
    from higgs_v3.conversion.repo import save_processor_files

    config = copy.deepcopy(tts_model.config)
    config.codec_config["semantic_model_config"]["conv_stride"][0] += 1
    processor.tokenizer.save_pretrained(tmp_path / "converted")
    save_processor_files(tmp_path / "converted", config, processor.tokenizer)
    saved = json.loads((tmp_path / "converted" / "processor_config.json").read_text())["encoded_length_kwargs"]
    assert saved == {**REAL_ENCODED_LENGTH_KWARGS, "conv_stride": [6, 2, 2, 2, 2, 2, 2]}
    processor.save_pretrained(tmp_path / "alone")
    # 2 s: 32000 samples at 16 kHz, padded to 32320; kernel 10 stride 6: 5386; four (3, 2): 2692, 1345, 672, 335; two
    # (2, 2): 167, 83; every second kept: 42 (the real stride 5 gives 50)
    clip = noise(2.0, 24000, seed=3)
    for folder, frames in (("converted", 42), ("alone", 50)):
        reloaded = HiggsAudioV3Processor.from_pretrained(tmp_path / folder)
        assert reloaded._get_encoded_length(48000, **reloaded.encoded_length_kwargs) == frames
        assert reloaded(TEXT, reference=clip, sampling_rate=24000)["audio_input_ids"].shape == (frames + C - 1, C)


def test_return_tensors_and_the_float32_waveform(processor):
    clip = noise(1.0, 24000, seed=6)
    as_pt = processor(TEXT, reference=clip, sampling_rate=24000)
    as_np = processor(TEXT, reference=clip, sampling_rate=24000, return_tensors="np")
    as_list = processor(TEXT, reference=clip, sampling_rate=24000, return_tensors=None)
    assert as_pt["reference_audio"].dtype == torch.float32
    assert as_np["reference_audio"].dtype == np.float32
    assert np.array_equal(as_np["reference_audio"], as_pt["reference_audio"])
    # return_tensors=None: lists, and the waveform as a numpy array (as transformers' feature extractors give audio).
    assert as_list["reference_audio"].dtype == np.float32
    assert np.array_equal(as_list["reference_audio"], as_pt["reference_audio"].numpy())
    assert as_list["reference_audio_lengths"] == [24000] and isinstance(as_list["input_ids"], list)
    # A `BatchEncoding`: its `to()` only moves (5.24's text-to-speech pipeline casts the floats of a `BatchFeature` to
    # the model's dtype; a bfloat16 waveform would change the clip's codes). The pipeline test below runs one.
    assert not isinstance(as_pt, BatchFeature)
    moved = processor(TEXT, reference=clip, sampling_rate=24000).to("cpu")
    assert list(moved) == list(as_pt) and moved["reference_audio"].dtype == torch.float32
    assert all(torch.equal(moved[key], as_pt[key]) for key in as_pt)


# ------------------------------------------------------------------------------------------------------ URLs
def test_url_reference_is_fetched_into_memory(tts_model, processor, clip_file, server):
    url = f"{server}/{clip_file.name}"
    inputs = processor(TEXT, reference=url, reference_text="The clip's words.")
    expected = processor(TEXT, reference=str(clip_file), reference_text="The clip's words.")
    for key in expected:
        assert torch.equal(inputs[key], expected[key]), key
    voice = tts_model.encode_reference(url, text="The clip's words.")  # the model reads URLs too, the same way
    assert torch.equal(voice.codes, tts_model.encode_reference(clip_file).codes)
    assert_same_generation(tts_model, inputs, processor(TEXT, reference=voice))


def test_url_refusals(processor, server, monkeypatch):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/me.wav"
    with pytest.raises(ValueError, match=re.escape(
        f"Could not fetch reference audio URL {closed!r} ([Errno 111] Connection refused); check the address and the "
        "network, or download the clip and pass its file path."
    )):
        processor(TEXT, reference=closed)
    with pytest.raises(ValueError, match=re.escape(
        f"Could not fetch reference audio URL '{server}/missing.wav' (HTTP 404 File not found); check the address and "
        "the network, or download the clip and pass its file path."
    )):
        processor(TEXT, reference=f"{server}/missing.wav")
    with pytest.raises(ValueError, match=re.escape(
        f"Could not read reference audio URL '{server}/notes.txt' (Error opening <_io.BytesIO object at"
    )) as error:
        processor(TEXT, reference=f"{server}/notes.txt")
    assert str(error.value).endswith("accepted are the formats libsndfile reads, e.g. wav, flac and ogg.")
    monkeypatch.setattr(audio_io_higgs_v3, "MAX_REFERENCE_URL_BYTES", 4096)
    with pytest.raises(ValueError, match=re.escape(
        f"Reference audio URL '{server}/me.wav' serves more than 4096 bytes (0.00390625 MiB, the most fetched); a "
        "reference clip needs no more than 30 s of clean speech: download it, trim it and pass the file."
    )):
        processor(TEXT, reference=f"{server}/me.wav")


class RedirectHandler(http.server.BaseHTTPRequestHandler):
    """`/hop/N` redirects to `/hop/N-1` (`/hop/0` to the clip), `/ftp` to an ftp:// address."""

    clip = b""

    def do_GET(self):
        if self.path.startswith("/hop/") and self.path != "/hop/0":
            return self.redirect(f"/hop/{int(self.path[5:]) - 1}")
        if self.path == "/ftp":
            return self.redirect("ftp://127.0.0.1/me.wav")
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.clip)))
        self.end_headers()
        self.wfile.write(self.clip)

    def redirect(self, location: str):
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_url_is_checked_before_any_download_and_redirects_stay_http_and_few(clip_file, monkeypatch):
    started = []
    monkeypatch.setattr(audio_io_higgs_v3, "_download", lambda *args: started.append(args))
    for url, reason in [("http://[::1", "is not a valid URL (Invalid IPv6 URL)"),
                        ("http://host:port/a.wav", "is not a valid URL (Port could not be cast to integer value as "
                                                   "'port')"),
                        ("http:///a.wav", "is not an http(s) address with a host"),
                        ("ftp://host/a.wav", "is not an http(s) address with a host")]:
        with pytest.raises(ValueError) as error:
            audio_io_higgs_v3.fetch_audio_url(url)
        assert str(error.value).startswith(f"Reference audio URL {url!r} {reason}"), error.value
    assert started == []  # refused before any thread started
    monkeypatch.undo()
    RedirectHandler.clip = clip_file.read_bytes()
    httpd = QuietServer(("127.0.0.1", 0), RedirectHandler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        assert audio_io_higgs_v3.fetch_audio_url(f"{base}/hop/5") == RedirectHandler.clip  # 5 redirects: followed
        for path, reason in [("/hop/6", "more than 5 redirects, the most followed"),
                             ("/ftp", "redirected to 'ftp://127.0.0.1/me.wav', which is not fetched: Reference audio "
                                      "URL 'ftp://127.0.0.1/me.wav' is not an http(s) address with a host; only "
                                      "those are fetched.")]:
            with pytest.raises(ValueError) as error:
                audio_io_higgs_v3.fetch_audio_url(base + path)
            assert str(error.value) == (f"Could not fetch reference audio URL '{base}{path}' ({reason}); check the "
                                        "address and the network, or download the clip and pass its file path.")
    finally:
        httpd.shutdown()
        httpd.server_close()


# ----------------------------------------------------------------------------------------------- failure cases
class DripHandler(http.server.BaseHTTPRequestHandler):
    """Announces 1000 bytes, then sends one every 0.1 s (a server that never gives up, and never finishes)."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        for _ in range(50):  # 5 s at most, so the thread ends
            self.wfile.write(b"R")
            self.wfile.flush()
            time.sleep(0.1)

    def log_message(self, *args):
        pass


def test_a_slow_drip_url_is_given_up_at_the_whole_downloads_deadline(processor, monkeypatch):
    """Each byte comes well within the per-operation timeout, so only the deadline of the whole download
    (`REFERENCE_URL_DEADLINE`, 0.5 s here) ends it: `processor(reference=url)`, the chat's `url` items, `--ref-audio`
    and batch `reference` all read URLs through `audio_io_higgs_v3.fetch_audio_url`, the one reader."""
    httpd = QuietServer(("127.0.0.1", 0), DripHandler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/drip.wav"
    monkeypatch.setattr(audio_io_higgs_v3, "REFERENCE_URL_DEADLINE", 0.5)
    try:
        started = time.monotonic()
        with pytest.raises(ValueError) as error:
            processor(TEXT, reference=url)
        assert 0.5 <= time.monotonic() - started < 4.5  # given up at the deadline, not when the 5 s drip ends
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert str(error.value) == (f"Could not fetch reference audio URL {url!r} (not downloaded within 0.5 s); check the "
                                "address and the network, or download the clip and pass its file path.")


def test_clip_refusals(tts_model, processor, tmp_path):
    notes = tmp_path / "notes.wav"
    notes.write_text("not audio")
    with pytest.raises(ValueError, match=re.escape(f"Could not read reference audio file {str(notes)!r} (")):
        processor(TEXT, reference=notes)
    with pytest.raises(ValueError, match=re.escape(
        "The reference is 100.00 s long (800001 samples at 8000 Hz); the longest accepted is 100 s. Use a shorter "
        "clip: 5 to 30 s of clean speech is enough to clone a voice."
    )):
        processor(TEXT, reference=np.zeros(800001, dtype=np.float32), sampling_rate=8000)
    with pytest.raises(ValueError, match=re.escape(
        "The reference of text 0 is an audio clip; training examples take encoded references, whose codes stay fixed "
        "over the epochs: encode it once, voice = model.encode_reference(clip, text=...), and pass the voice."
    )):
        processor(TEXT, reference=noise(1.0, 24000, 8), sampling_rate=24000,
                  audio_target=torch.zeros(10, C, dtype=torch.long))


def test_generate_refusals(tts_model, processor):
    clip = noise(1.0, 24000, seed=9)
    inputs = processor(TEXT, reference=clip, sampling_rate=24000)
    # A processor that counts another codec's frames (a HuBERT twice as coarse): the rows do not match this model's.
    other = HiggsAudioV3Processor(processor.tokenizer, encoded_length_kwargs={"conv_stride": [5, 2, 2, 2, 2, 2, 4]})
    mismatched = other(TEXT, reference=clip, sampling_rate=24000)
    assert other._get_encoded_length(24000, **other.encoded_length_kwargs) == 13
    with pytest.raises(ValueError, match=re.escape(
        "audio_input_ids marks 20 rows for the 1 reference clip(s), but this model's codec encodes them to 32 rows "
        "([32], clip by clip): the processor did not count the frames of this model's codec. Use the processor saved "
        "with this model, or HiggsAudioV3Processor.from_model_config(tokenizer, model.config)."
    )):
        tts_model.generate(**mismatched, max_new_tokens=ROWS)
    # The same total but not clip by clip: two clips (a voice between them) whose waveforms come in the other order.
    long = noise(1.6, 24000, seed=12)
    voice = tts_model.encode_reference(long, sampling_rate=24000)
    two = processor(["a", "b", "c"], reference=[clip, voice, long], sampling_rate=24000)
    lengths = two["reference_audio_lengths"].tolist()
    swapped = {**two, "reference_audio": torch.cat(two["reference_audio"].split(lengths)[::-1]),
               "reference_audio_lengths": two["reference_audio_lengths"].flip(0)}
    with pytest.raises(ValueError, match=re.escape(
        "audio_input_ids marks 79 rows for the 2 reference clip(s), but this model's codec encodes them to 79 rows "
        "([47, 32], clip by clip)"
    )):
        tts_model.generate(**swapped, max_new_tokens=ROWS)
    without = {key: value for key, value in inputs.items() if not key.startswith("reference_audio")}
    with pytest.raises(ValueError, match=re.escape(
        "audio_input_ids has rows marked for reference clips (the placeholder id -100) but no reference_audio was "
        "given; pass the processor's whole output (model.generate(**inputs)): the clips' waveforms are in "
        "reference_audio and reference_audio_lengths."
    )):
        tts_model.generate(**without, max_new_tokens=ROWS)
    with pytest.raises(ValueError, match=re.escape(
        "reference_audio_lengths [24001] must be positive integers and add up to the 24000 samples of reference_audio "
        "(the clips one after another)."
    )):
        tts_model.generate(**{**inputs, "reference_audio_lengths": torch.tensor([24001])}, max_new_tokens=ROWS)
    with pytest.raises(ValueError, match=re.escape(
        "reference_audio_lengths [24000.0] must be positive integers and add up to the 24000 samples"
    )):
        tts_model.generate(**{**inputs, "reference_audio_lengths": torch.tensor([24000.0])}, max_new_tokens=ROWS)
    with pytest.raises(ValueError, match=re.escape(
        "reference_audio must be the clips' waveforms one after another, [total samples] (as the processor returns "
        "it), got shape (1, 24000)."
    )):
        tts_model.generate(**{**inputs, "reference_audio": inputs["reference_audio"][None]}, max_new_tokens=ROWS)
    with pytest.raises(ValueError, match=re.escape(
        "Encoding reference clips needs the codec, and this model has none (config.codec_config is None)"
    )):
        tiny_model().generate(**inputs, max_new_tokens=ROWS)


def test_forward_encodes_clips_as_generate_does(tts_model, processor):
    clip = noise(1.1, 24000, seed=10)
    inputs = processor(TEXT, reference=clip, sampling_rate=24000)
    voice = processor(TEXT, reference=tts_model.encode_reference(clip, sampling_rate=24000))
    with torch.no_grad():
        ours = tts_model(**inputs).logits
        theirs = tts_model(**voice).logits
    assert torch.equal(ours, theirs)


# ----------------------------------------------------------------------------------- chat template, pipeline
def chat(audio_item: dict, transcript: str | None = "The clip's words.") -> list[dict]:
    content = [audio_item] + ([{"type": "text", "text": transcript}] if transcript else [])
    return [{"role": "user", "content": content}, {"role": "user", "content": [{"type": "text", "text": TEXT}]}]


def test_chat_template_with_path_url_and_audio_items(tts_model, processor, clip_file, server):
    at_44k = noise(1.5, 44100, seed=11)
    cases = [
        ({"type": "audio", "path": str(clip_file)}, {"reference": str(clip_file)}),
        ({"type": "audio", "url": f"{server}/{clip_file.name}"}, {"reference": str(clip_file)}),
        ({"type": "audio", "audio": str(clip_file)}, {"reference": str(clip_file)}),
        ({"type": "audio", "audio": at_44k, "sampling_rate": 44100}, {"reference": at_44k, "sampling_rate": 44100}),
        ({"type": "audio", "audio": {"array": at_44k, "sampling_rate": 44100}},
         {"reference": at_44k, "sampling_rate": 44100}),
    ]
    voice = tts_model.encode_reference(clip_file, text="The clip's words.")
    shown = processor.apply_chat_template(chat({"type": "audio", "audio": voice}, transcript=None))
    assert shown == "<|tts|><|ref_text|>The clip's words.<|ref_audio|><|text|>Hello there.<|audio|>"
    for item, call in cases:
        conversation = chat(item)
        inputs = processor.apply_chat_template(conversation, tokenize=True, return_dict=True)
        expected = processor(TEXT, reference_text="The clip's words.", **call)
        assert list(inputs) == list(expected) == ["input_ids", "attention_mask", "audio_input_ids", "reference_audio",
                                                  "reference_audio_lengths"]
        for key in expected:
            assert torch.equal(inputs[key], expected[key]), (item, key)
        assert processor.apply_chat_template(conversation) == shown  # a clip renders as a voice, no audio read
    # Rendering reads no audio: a URL nobody serves renders, tokenizing it fetches and fails.
    unserved = chat({"type": "audio", "url": f"{server}/nothing.wav"})
    assert processor.apply_chat_template(unserved) == shown
    with pytest.raises(ValueError, match=re.escape("Could not fetch reference audio URL")):
        processor.apply_chat_template(unserved, tokenize=True, return_dict=True)
    ids = processor.apply_chat_template(chat({"type": "audio", "path": str(clip_file)}), tokenize=True)
    assert torch.equal(ids, processor(TEXT, reference=str(clip_file), reference_text="The clip's words.")["input_ids"])


def test_pipeline_with_a_clip_in_a_chat_and_in_preprocess_params(processor, clip_file):
    """`pipe(conversation)` with a clip path, on a bfloat16 model (the pipeline casts the processor's output to it):
    the same audio as the direct generate with the clip's voice."""
    from transformers import pipeline

    model = tiny_tts_model(ROWS)
    model.to(torch.bfloat16)
    assert model.dtype == torch.bfloat16 and model.codec.fc.weight.dtype == torch.float32
    pipe = pipeline("text-to-speech", model=model, processor=processor, tokenizer=processor.tokenizer)
    options = {"seed": 12, "max_new_tokens": ROWS}
    result = pipe(chat({"type": "audio", "path": str(clip_file)}), forward_params=options)
    voice = model.encode_reference(clip_file, text="The clip's words.")
    direct = model.generate(**processor(TEXT, reference=voice), return_dict_in_generate=True, **options)
    assert result["sampling_rate"] == 24000 and np.array_equal(result["audio"], direct.audio[0].numpy())
    plain = model.generate(**processor(TEXT), return_dict_in_generate=True, **options)
    assert plain.audio[0].shape != direct.audio[0].shape or not torch.equal(plain.audio[0], direct.audio[0])
    result = pipe(TEXT, preprocess_params={"reference": str(clip_file), "reference_text": "The clip's words."},
                  forward_params=options)
    assert np.array_equal(result["audio"], direct.audio[0].numpy())


def test_pipeline_batches_chats_with_clips(tts_model, processor, clip_file):
    """`pipe(chats, batch_size=2)`: the pipeline collates the processor's outputs (reference rows and waveforms
    concatenated in order); each chat speaks as it does alone."""
    from transformers import pipeline

    pipe = pipeline("text-to-speech", model=tts_model, processor=processor, tokenizer=processor.tokenizer)
    other = noise(1.9, 24000, seed=13)
    chats = [chat({"type": "audio", "path": str(clip_file)}),
             chat({"type": "audio", "audio": other, "sampling_rate": 24000}, transcript=None)]
    options = {"seed": 15, "max_new_tokens": ROWS}
    alone = [pipe(conversation, forward_params=options) for conversation in chats]
    together = pipe(chats, forward_params=options, batch_size=2)
    for one, both in zip(alone, together):
        assert one["audio"].shape == both["audio"].shape
        assert np.abs(one["audio"] - both["audio"]).max() <= 2e-8  # float rounding of a batched decode (test_audio)


# ------------------------------------------------------------------------------------------------ remote code
@pytest.mark.integration
def test_clip_in_the_chat_template_through_remote_code(tmp_path):
    """In a fresh process that cannot import the `higgs_v3` package (`-I -S`, as in test_longform), the repo's own
    classes (`trust_remote_code=True`): a clip path in the chat template generates exactly what the clip's voice
    does, and the installed package gives the same sequences from the same repo."""
    import site

    from higgs_v3 import HiggsAudioV3ForConditionalGeneration
    from higgs_v3.testing.tiny import make_tiny_random_model

    from test_longform import WITHOUT_THE_PACKAGE

    repo = make_tiny_random_model(tmp_path / "repo")
    soundfile.write(tmp_path / "me.wav", noise(1.3, 16000, seed=1), 16000, subtype="FLOAT")
    script = WITHOUT_THE_PACKAGE + textwrap.dedent('''
        import torch
        from transformers import AutoModel, AutoProcessor, pipeline

        repo, clip = sys.argv[2:]
        model = AutoModel.from_pretrained(repo, trust_remote_code=True)
        processor = AutoProcessor.from_pretrained(repo, trust_remote_code=True)
        assert type(processor).__module__.startswith("transformers_modules"), type(processor).__module__
        assert not [name for name in sys.modules if name.split(".")[0] == "higgs_v3"]
        conversation = [
            {"role": "user", "content": [{"type": "audio", "path": clip}, {"type": "text", "text": "Its words."}]},
            {"role": "user", "content": [{"type": "text", "text": "Hello there."}]},
        ]
        inputs = processor.apply_chat_template(conversation, tokenize=True, return_dict=True)
        voice = processor("Hello there.", reference=model.encode_reference(clip, text="Its words."))
        out = model.generate(**inputs, seed=5, max_new_tokens=12, return_dict_in_generate=True)
        same = model.generate(**voice, seed=5, max_new_tokens=12, return_dict_in_generate=True)
        assert torch.equal(out.sequences, same.sequences)
        pipe = pipeline("text-to-speech", model=model, processor=processor, tokenizer=processor.tokenizer)
        spoken = pipe(conversation, forward_params={"seed": 5, "max_new_tokens": 12})
        assert (torch.from_numpy(spoken["audio"]) == out.audio[0]).all()
        print(json.dumps(out.sequences.tolist()))
    ''')
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    # one torch thread, as this process (conftest): rows compared with torch.equal across the two processes
    environment.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script, json.dumps(site.getsitepackages()), str(repo),
         str(tmp_path / "me.wav")],
        capture_output=True, text=True, timeout=600, env=environment, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    remote = torch.tensor(json.loads(done.stdout.strip().splitlines()[-1]))
    model = HiggsAudioV3ForConditionalGeneration.from_pretrained(repo).eval()
    processor = HiggsAudioV3Processor.from_pretrained(repo)
    inputs = processor("Hello there.", reference=str(tmp_path / "me.wav"), reference_text="Its words.")
    local = model.generate(**inputs, seed=5, max_new_tokens=12, return_dict_in_generate=True, output_audio=False)
    assert torch.equal(local.sequences, remote)
