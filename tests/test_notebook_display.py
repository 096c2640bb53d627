"""Audio that plays where it is returned (issue 26): the one notebook player (`audio_io_higgs_v3.audio_html`) behind
`_repr_html_` of a `SpeechResult`, a generation output and a voice, and the names a notebook user meets first
(`SpeechResult.audio`, `generate(output_audio=True)`, `save_audio` of a list, `higgs_v3.tiny_random`)."""

from __future__ import annotations

import base64
import io
import re
import wave

import numpy as np
import pytest
import soundfile
import torch

from higgs_v3.audio_io_higgs_v3 import HiggsAudioV3Voice, audio_html, save_audio
from higgs_v3.generation_higgs_v3 import HiggsAudioV3GenerationOutput
from higgs_v3.longform_higgs_v3 import ChunkResult, SpeechResult

from conftest import tiny_tts_model


PLAYER = re.compile(r'<audio controls src="data:audio/wav;base64,([A-Za-z0-9+/=]+)"></audio>')


def players(page: str) -> list[tuple[int, np.ndarray]]:
    """(sampling rate, int16 samples) of every embedded WAV, read back with the standard library."""
    found = []
    for encoded in PLAYER.findall(page):
        with wave.open(io.BytesIO(base64.b64decode(encoded))) as file:
            assert (file.getnchannels(), file.getsampwidth(), file.getcomptype()) == (1, 2, "NONE")
            found.append((file.getframerate(), np.frombuffer(file.readframes(file.getnframes()), dtype="<i2")))
    return found


def test_the_player_embeds_a_wav_that_decodes_to_the_same_samples_with_duration_rate_and_notes():
    samples = torch.tensor([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -3.0, 0.25] * 1500)  # 12000 samples: 0.5 s at 24 kHz
    page = audio_html("Speech <1>", [samples, samples[:2400].numpy()], 24000, labels=["a", "b"],
                      notes=["Chunk(s) 1 & 2 ran long."])
    # normalised to the peak, 3.0, as IPython's Audio: 32767 * x / 3
    expected = np.array([0, 5461, -5461, 10922, -10922, 21845, -32767, 2731] * 1500, dtype=np.int16)
    assert [rate for rate, _ in players(page)] == [24000, 24000]
    assert np.array_equal(players(page)[0][1], expected) and np.array_equal(players(page)[1][1], expected[:2400])
    assert "<b>Speech &lt;1&gt;</b>" in page and "a: 0.50 s at 24000 Hz, played normalised (peak 3)" in page
    assert "b: 0.10 s at 24000 Hz, played normalised (peak 3)" in page
    assert "<div>Chunk(s) 1 &amp; 2 ran long.</div>" in page
    # soundfile (libsndfile) reads the same WAV: a browser-ordinary 16-bit PCM file
    data, rate = soundfile.read(io.BytesIO(base64.b64decode(PLAYER.findall(page)[1])), dtype="int16")
    assert rate == 24000 and np.array_equal(data, expected[:2400])


def test_the_player_says_nothing_of_a_full_scale_or_silent_waveform():
    page = audio_html("Speech", [torch.tensor([0.0, 1.0, -0.5]), torch.zeros(3)], 3)
    assert [pcm.tolist() for _, pcm in players(page)] == [[0, 32767, -16384], [0, 0, 0]]
    assert "normalised" not in page


def speech(finished: list[bool]) -> SpeechResult:
    chunks = [ChunkResult(f"Chunk {i}.", torch.zeros(25, 8, dtype=torch.long), torch.full((24000,), 0.25), done, i, 25)
              for i, done in enumerate(finished)]
    waveform = torch.cat([chunk.waveform for chunk in chunks])
    return SpeechResult(waveform, 24000, chunks, 0.0, generation_seconds=6.0, max_new_tokens=75)


def test_a_speech_result_plays_and_names_its_runaway_chunks_in_words():
    result = speech([True, False, True, False])
    assert result.audio is result.waveform  # `audio` as the generation output and the pipeline; `waveform` its alias
    page = result._repr_html_()
    ((rate, pcm),) = players(page)
    assert rate == 24000 and np.array_equal(pcm, np.full(96000, 32767, dtype=np.int16))  # 0.25 played at full scale
    assert "4.00 s at 24000 Hz, played normalised (peak 0.25)" in page
    assert torch.equal(result.waveform, torch.full((96000,), 0.25))  # the data is not changed
    assert "<div>4 chunk(s) generated in 6.0 s (real-time factor 1.50).</div>" in page
    assert ("<div>Chunk(s) 1, 3 ran into the length limit (75 rows) without ending: the model&#x27;s runaway failure, "
            "usually a silent tail. Try another seed or shorter chunks.</div>") in page
    assert "ran into" not in speech([True])._repr_html_()


def test_a_generation_output_plays_one_player_per_sequence_and_names_the_cut_ones():
    audio = [torch.full((4800,), -0.5), torch.full((2400,), 0.5)]
    output = HiggsAudioV3GenerationOutput(finished=torch.tensor([True, False]), audio=audio)
    output.sampling_rate = 24000
    page = output._repr_html_()
    assert [(rate, pcm.tolist()) for rate, pcm in players(page)] == [(24000, [-32767] * 4800), (24000, [32767] * 2400)]
    assert "Sequence 0: 0.20 s at 24000 Hz, played normalised (peak 0.5)" in page
    assert "Sequence 1: 0.10 s at 24000 Hz, played normalised (peak 0.5)" in page
    assert ("<div>Sequence(s) 1 did not end: cut at max_new_tokens (the model&#x27;s runaway failure, usually a silent "
            "tail). Try another seed or a shorter text.</div>") in page
    assert HiggsAudioV3GenerationOutput(finished=torch.tensor([True]))._repr_html_() is None  # no audio: plain repr
    built = HiggsAudioV3GenerationOutput(audio=audio[:1])  # built by hand: no flags, no rate known
    assert built._repr_html_() is None
    built.sampling_rate = 16000
    assert players(built._repr_html_())[0][0] == 16000 and "did not end" not in built._repr_html_()


@pytest.fixture(scope="module")
def tts():
    return tiny_tts_model(max_new_tokens=12)


def test_generate_output_audio_true_returns_the_waveforms_and_the_output_its_rate(tts, processor):
    inputs = processor(["Hello there.", "Hi."])
    out = tts.generate(**inputs, seed=[1, 2], return_dict_in_generate=True)
    waveforms = tts.generate(**inputs, seed=[1, 2], output_audio=True)  # as CSM's generate: not the codes
    assert isinstance(waveforms, list) and len(waveforms) == 2
    assert all(torch.equal(a, b) for a, b in zip(waveforms, out.audio))
    assert out.sampling_rate == 24000 and "sampling_rate" not in out.keys()  # a pipeline splits every key by rows
    assert tts.generate(**inputs, seed=[1, 2]).shape[-1] == 8  # the rows, as before
    assert len(players(out._repr_html_())) == 2


def test_a_voice_plays_its_codes_decoded_by_the_codec_that_made_it(tts):
    clip = np.sin(np.arange(36000) / 7.0).astype(np.float32) * 0.3
    voice = tts.encode_reference(clip, text="What I say.", sampling_rate=24000)
    decoded = tts.codec.decode_frames(voice.codes[None])[0]
    assert torch.equal(voice.decode(), decoded) and torch.equal(voice.decode(tts), decoded)
    ((rate, pcm),) = players(voice._repr_html_())
    peak = float(decoded.abs().max())
    assert rate == 24000 and np.array_equal(pcm, np.round(decoded.numpy() / peak * 32767).astype(np.int16))
    assert "<b>Voice: 38 codec frames (1.52 s)</b>" in voice._repr_html_()
    assert "<div>Transcript: What I say.</div>" in voice._repr_html_()

    saved = HiggsAudioV3Voice(voice.codes)  # a voice read from a file knows no codec: it says how to hear it
    page = saved._repr_html_()
    assert players(page) == [] and "<div>No transcript.</div>" in page
    assert "<div>Its audio plays once decoded with a model: voice.decode(model).</div>" in page
    with pytest.raises(ValueError, match=re.escape("This voice was not made by model.encode_reference in this session "
                                                   "(or that model is gone): decode it with a model, voice.decode(model).")):
        saved.decode()
    assert torch.equal(saved.decode(tts), decoded)


def test_save_audio_writes_a_list_of_waveforms_to_as_many_paths(tmp_path):
    first, second = torch.full((2400,), 0.5), torch.full((4800,), -0.25)
    paths = save_audio([first, second], [tmp_path / "a.wav", tmp_path / "b.flac"])
    assert paths == [tmp_path / "a.wav", tmp_path / "b.flac"]
    assert np.array_equal(soundfile.read(paths[0], dtype="float32")[0], first.numpy())
    assert np.array_equal(soundfile.read(paths[1], dtype="float32")[0], second.numpy())
    message = ("save_audio writes one waveform per path: got 1 paths and 2 waveforms; give a list of waveforms (such "
               "as out.audio) and a list of as many paths.")
    with pytest.raises(ValueError, match=re.escape(message)):
        save_audio([first, second], [tmp_path / "c.wav"])
    with pytest.raises(ValueError, match=re.escape("got 2 paths and Tensor;")):
        save_audio(first, [tmp_path / "d.wav", tmp_path / "e.wav"])
    with pytest.raises(ValueError, match=re.escape("g.txt': '.txt' is not an audio format written here; use one of")):
        save_audio([first, second], [tmp_path / "f.wav", tmp_path / "g.txt"])
    assert not (tmp_path / "f.wav").exists()  # every path checked before any file is written
