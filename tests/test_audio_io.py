# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Tests of `audio_io_higgs_v3`: reference waveform preparation and its refusals, `save_audio`, voice files, and
`HiggsAudioV3Voice.from_any` across two imports of the module.

Expected waveforms are computed independently (numpy's mean over channels, `codec_higgs_v3.resample_audio`, checked against torchaudio's own outputs in test_resample.py, PCM scaled by hand);
failure cases check the exact error text.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import soundfile
import torch

from higgs_v3 import audio_io_higgs_v3
from higgs_v3.codec_higgs_v3 import resample_audio
from higgs_v3.audio_io_higgs_v3 import (
    MAX_REFERENCE_SECONDS,
    MIN_REFERENCE_SECONDS,
    HiggsAudioV3Voice,
    prepare_reference_waveform,
    save_audio,
)


C = 8


def torchaudio_like(samples: np.ndarray, rate: int) -> np.ndarray:
    """`samples` at `rate` resampled to 24 kHz as torchaudio does (`resample_audio`, golden-checked in test_resample.py)."""
    return resample_audio(torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32)), rate, 24000).numpy()


def _prepared(audio, sampling_rate=None, **kwargs):
    return prepare_reference_waveform(audio, sampling_rate, **kwargs)


@pytest.fixture(scope="module")
def second_audio_io(second_import):
    """`audio_io_higgs_v3` from a second import of the package (conftest's `second_import`)."""
    return second_import("audio_io_higgs_v3")


# ------------------------------------------------------------------------------------------ reference audio
def test_reference_audio_refusals(tmp_path):
    with pytest.raises(ValueError, match=re.escape("Reference audio is empty (0 samples).")):
        _prepared(np.zeros(0, dtype=np.float32), 24000)
    with pytest.raises(ValueError, match=re.escape("Reference audio is empty (0 samples).")):
        _prepared(torch.zeros(2, 0), 24000)
    nan = np.zeros(1000, dtype=np.float32)
    nan[10] = np.nan
    with pytest.raises(ValueError, match=re.escape(
        "Reference audio has NaN or infinite values (1 of 1000); pass a clean signal."
    )):
        _prepared(nan, 24000)
    inf = torch.zeros(2, 1000)
    inf[0, 3], inf[1, 4] = float("inf"), float("-inf")
    with pytest.raises(ValueError, match=re.escape(
        "Reference audio has NaN or infinite values (2 of 2000); pass a clean signal."
    )):
        _prepared(inf, 24000)
    with pytest.raises(ValueError, match=re.escape(
        "Reference audio is 100.00 s long (800001 samples at 8000 Hz); the longest accepted is 100 s. Use a shorter "
        "clip: 5 to 30 s of clean speech is enough to clone a voice."
    )):
        _prepared(np.zeros(800001, dtype=np.float32), 8000)
    assert _prepared(np.zeros(800000, dtype=np.float32), 8000).shape == (2400000,)  # exactly 100 s is accepted
    with pytest.raises(ValueError, match=re.escape(
        "Reference audio is an array of samples without its sampling rate; pass it too: sampling_rate=rate, {'array': "
        "samples, 'sampling_rate': rate}, or in a chat message {'type': 'audio', 'audio': samples, 'sampling_rate': "
        "rate}."
    )):
        _prepared(np.zeros(100, dtype=np.float32))
    for bad in (0, -16000, 22050.5, True):
        message = f"sampling_rate must be a positive integer number of Hz, got {bad}."
        with pytest.raises(ValueError, match=re.escape(message)):
            _prepared(np.zeros(100, dtype=np.float32), bad)
    for array, dtype in ((torch.zeros(100, dtype=torch.long), "int64"),
                         (np.zeros(100, dtype=np.complex64), "complex64")):
        with pytest.raises(ValueError, match=re.escape(
            f"Reference audio has dtype {dtype}; accepted are float16/float32/float64 samples in [-1, 1] and integer "
            "PCM (int8, uint8, int16, int32), which is scaled to [-1, 1]."
        )):
            _prepared(array, 24000)
    with pytest.raises(ValueError, match=re.escape(
        "Reference audio must be 1-D [samples] or 2-D [channels, samples] / [samples, channels]; got shape (2, 2, 100)."
    )):
        _prepared(np.zeros((2, 2, 100), dtype=np.float32), 24000)
    with pytest.raises(ValueError, match=re.escape(
        "Reference audio must be a file path, an http(s) URL, a numpy array or a torch tensor; got list."
    )):
        _prepared([0.0, 0.1], 24000)
    missing = tmp_path / "missing.wav"
    with pytest.raises(FileNotFoundError, match=re.escape(f"Reference audio file {str(missing)!r} does not exist.")):
        _prepared(missing)
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"this is not audio")
    with pytest.raises(ValueError, match=re.escape(f"Could not read reference audio file {str(broken)!r} (")) as error:
        _prepared(broken)
    assert str(error.value).endswith("); accepted are the formats libsndfile reads, e.g. wav, flac and ogg.")
    good = tmp_path / "good.wav"
    soundfile.write(good, np.zeros(1600, dtype=np.float32), 16000)
    with pytest.raises(ValueError, match=re.escape(
        f"sampling_rate=24000 was given but {str(good)!r} is sampled at 16000 Hz; leave sampling_rate unset for files "
        "(it is read from the file)."
    )):
        _prepared(good, 24000)
    assert _prepared(good, 16000).shape == (24000,)  # the file's own rate may be given


def test_limits_are_parameters_with_documented_defaults():
    """The processor no longer holds a reference limit: the limits are `prepare_reference_waveform`'s parameters, with
    the module constants as defaults (what `model.encode_reference` applies)."""
    assert (MIN_REFERENCE_SECONDS, MAX_REFERENCE_SECONDS) == (1.0, 100.0)
    with pytest.raises(ValueError, match=re.escape(
        "Reference audio is 2.50 s long (60000 samples at 24000 Hz); the longest accepted is 2 s. Use a shorter clip:"
    )):
        _prepared(np.zeros(60000, dtype=np.float32), 24000, max_seconds=2.0)
    assert _prepared(np.zeros(48000, dtype=np.float32), 24000, max_seconds=2.0).shape == (48000,)
    assert _prepared(np.zeros(100, dtype=np.float32), 24000, min_seconds=0.5).shape == (12000,)
    assert _prepared(np.zeros(100, dtype=np.float32), 24000, target_sampling_rate=16000).shape == (16000,)


def test_loud_float_clip_is_accepted_with_a_warning(monkeypatch):
    warnings = []
    monkeypatch.setattr(audio_io_higgs_v3.logger, "warning_once", warnings.append)
    loud = np.full(24000, 2.5, dtype=np.float32)
    assert torch.equal(_prepared(loud, 24000), torch.from_numpy(loud))  # not clipped, not rescaled
    assert warnings == [
        "Reference audio peaks at 2.5, outside [-1, 1]: float samples are expected in [-1, 1] (integer PCM is scaled "
        "automatically). Normalize the clip if it sounds distorted."
    ]
    warnings.clear()
    _prepared(np.full(24000, 1.0, dtype=np.float32), 24000)
    assert warnings == []


def test_int_pcm_is_scaled():
    pcm = np.array([-32768, -16384, 0, 16384, 32767] * 4800, dtype=np.int16)  # 1 s at 24 kHz
    expected = torch.from_numpy(pcm.astype(np.float32) / 32768.0)
    assert torch.equal(_prepared(pcm, 24000), expected)
    assert float(_prepared(pcm, 24000).min()) == -1.0
    assert torch.equal(_prepared(torch.from_numpy(pcm), 24000), expected)  # an int16 tensor too
    pcm8 = np.array([0, 128, 255] * 8000, dtype=np.uint8)
    assert torch.equal(_prepared(pcm8, 24000), torch.tensor([-1.0, 0.0, 127 / 128] * 8000))
    spcm8 = np.array([-128, 64] * 12000, dtype=np.int8)
    assert torch.equal(_prepared(spcm8, 24000), torch.tensor([-1.0, 0.5] * 12000))
    pcm32 = np.array([-(2**31), 2**30] * 12000, dtype=np.int32)
    assert torch.equal(_prepared(pcm32, 24000), torch.tensor([-1.0, 0.5] * 12000))


def test_stereo_is_mixed_to_mono_in_either_layout():
    gen = np.random.default_rng(0)
    stereo = gen.uniform(-0.5, 0.5, size=(2, 30000)).astype(np.float32)
    expected = torch.from_numpy(stereo.mean(axis=0))
    assert torch.equal(_prepared(stereo, 24000), expected)  # [C, N]
    assert torch.equal(_prepared(stereo.T.copy(), 24000), expected)  # [N, C]
    assert torch.equal(_prepared(torch.from_numpy(stereo)[None], 24000), expected)  # [1, C, N]


def test_resampled_to_24khz_as_torchaudio_does_and_short_clips_padded():
    gen = np.random.default_rng(1)
    clip = gen.uniform(-0.5, 0.5, size=32000).astype(np.float32)  # 2 s at 16 kHz
    out = _prepared(clip, 16000)
    assert out.dtype == torch.float32 and out.shape == (48000,)
    assert np.allclose(out.numpy(), torchaudio_like(clip, 16000), atol=1e-6)
    short = gen.uniform(-0.5, 0.5, size=4000).astype(np.float32)  # 0.25 s at 16 kHz -> 6000 samples at 24 kHz
    padded = _prepared(short, 16000)
    assert padded.shape == (24000,)
    assert np.allclose(padded[:6000].numpy(), torchaudio_like(short, 16000), atol=1e-6)
    assert torch.count_nonzero(padded[6000:]) == 0
    assert _prepared(short, 16000, min_seconds=0.0).shape == (6000,)


def test_bf16_tensor_and_float64_accepted():
    wave = torch.linspace(-1, 1, 24000)
    assert torch.equal(_prepared(wave.to(torch.bfloat16), 24000), wave.to(torch.bfloat16).float())
    assert torch.equal(_prepared(wave.half(), 24000), wave.half().float())
    float64 = _prepared(wave.double().numpy(), 24000)
    assert float64.dtype == torch.float32 and torch.equal(float64, wave)


@pytest.mark.parametrize("suffix,subtype", [(".wav", "PCM_16"), (".flac", "PCM_16"), (".ogg", "VORBIS")])
def test_reference_from_file(tmp_path, suffix, subtype):
    rate = 16000
    tone = (0.3 * np.sin(2 * np.pi * 220 * np.arange(rate * 1.5) / rate)).astype(np.float32)
    stereo = np.stack([tone, -0.5 * tone], axis=1)  # [N, 2] as soundfile writes it
    path = tmp_path / f"ref{suffix}"
    soundfile.write(path, stereo, rate, subtype=subtype)
    data, file_rate = soundfile.read(path, dtype="float32", always_2d=True)
    assert file_rate == rate
    expected = torch.from_numpy(torchaudio_like(data.mean(axis=1), rate))
    assert expected.shape == (36000,)
    for given in (path, str(path)):
        assert torch.allclose(prepare_reference_waveform(given), expected, atol=1e-6, rtol=0)
    assert torch.equal(prepare_reference_waveform(path), prepare_reference_waveform(data.T.copy(), rate))


# ------------------------------------------------------------------------------------------------ save_audio
def test_save_audio_round_trip(tmp_path):
    wave = torch.linspace(-0.5, 0.5, 4800)
    path = save_audio(wave, tmp_path / "out.wav")
    assert path == tmp_path / "out.wav"
    data, rate = soundfile.read(path, dtype="float32")
    info = soundfile.info(str(path))
    assert rate == 24000 and data.shape == (4800,) and info.subtype == "PCM_16"
    assert np.allclose(data, wave.numpy(), atol=1 / 32768)
    save_audio(wave[None].numpy(), tmp_path / "out.flac", sampling_rate=16000)  # [1, N] numpy
    data, rate = soundfile.read(tmp_path / "out.flac", dtype="float32")
    assert rate == 16000 and np.allclose(data, wave.numpy(), atol=1 / 32768)
    save_audio(wave.to(torch.bfloat16), str(tmp_path / "bf16.wav"))  # a bf16 tensor, a str path
    data, _ = soundfile.read(tmp_path / "bf16.wav", dtype="float32")
    assert np.allclose(data, wave.to(torch.bfloat16).float().numpy(), atol=1 / 32768)
    for bad in (np.zeros((2, 10)), torch.zeros(1, 2, 10)):
        with pytest.raises(ValueError, match=re.escape(
            "save_audio writes one mono waveform of shape [samples] or [1, samples]; got shape "
            f"{tuple(bad.shape)}. Several waveforms: give a list of them and a list of as many paths."
        )):
            save_audio(bad, tmp_path / "x.wav")


# ---------------------------------------------------------------------------------------------------- voices
@pytest.mark.parametrize("suffix", [".safetensors", ".json"])
@pytest.mark.parametrize("text", [None, "Grüße — «quoted» \"text\" <|sfx:sigh|>"])
def test_voice_round_trip(tmp_path, suffix, text):
    codes = torch.randint(0, 1024, (37, C), generator=torch.Generator().manual_seed(8))
    voice = HiggsAudioV3Voice(codes=codes, text=text, sampling_rate=48000, frame_rate=50)
    path = voice.save(tmp_path / f"voice{suffix}")
    assert path == tmp_path / f"voice{suffix}"
    loaded = HiggsAudioV3Voice.load(path)
    assert torch.equal(loaded.codes, codes) and loaded.codes.dtype == torch.long
    assert loaded.text == text
    assert (loaded.sampling_rate, loaded.frame_rate, loaded.num_frames, loaded.num_codebooks, loaded.duration) == (
        48000, 50, 37, C, 0.74)
    assert HiggsAudioV3Voice.load(str(path)).text == text


def test_voice_fields_are_normalised():
    voice = HiggsAudioV3Voice(codes=np.arange(16, dtype=np.int32).reshape(2, C), text="Hi.")
    assert voice.codes.dtype == torch.long and torch.equal(voice.codes, torch.arange(16).reshape(2, C))
    assert (voice.sampling_rate, voice.frame_rate, voice.num_frames, voice.duration) == (24000, 25, 2, 0.08)
    assert HiggsAudioV3Voice(codes=torch.zeros(50, C, dtype=torch.long)).duration == 2.0


def test_voice_refusals():
    with pytest.raises(ValueError, match=re.escape(
        "HiggsAudioV3Voice.codes must have shape [frames, num_codebooks] with at least one frame; got shape (0, 8)."
    )):
        HiggsAudioV3Voice(codes=torch.zeros(0, C, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape(
        "HiggsAudioV3Voice.codes must have shape [frames, num_codebooks] with at least one frame; got shape (8,)."
    )):
        HiggsAudioV3Voice(codes=torch.zeros(C, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape(
        "HiggsAudioV3Voice.codes must be an integer tensor of raw codec codes [frames, num_codebooks]; got Tensor of "
        "dtype torch.float32."
    )):
        HiggsAudioV3Voice(codes=torch.zeros(2, C))
    with pytest.raises(ValueError, match=re.escape(
        "HiggsAudioV3Voice.codes must be non-negative codec codes; the smallest is -3."
    )):
        HiggsAudioV3Voice(codes=torch.full((2, C), -3))
    with pytest.raises(ValueError, match=re.escape("HiggsAudioV3Voice.text must be a string or None, got int.")):
        HiggsAudioV3Voice(codes=torch.zeros(2, C, dtype=torch.long), text=3)


def test_voice_file_refusals(tmp_path):
    voice = HiggsAudioV3Voice(codes=torch.zeros(2, C, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape(
        "A voice is saved as .safetensors or .json; got the file name 'v.pt'."
    )):
        voice.save(tmp_path / "v.pt")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"codes": [[0] * 8], "format": "something_else"}))
    with pytest.raises(ValueError, match=re.escape(
        f"Could not load voice file {str(other)!r}: its format is 'something_else', expected 'higgs_audio_v3_voice' "
        "(not a Higgs Audio v3 voice file)."
    )):
        HiggsAudioV3Voice.load(other)
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"codes": [[0] * 8], "format": "higgs_audio_v3_voice", "version": 2}))
    with pytest.raises(ValueError, match=re.escape(
        f"Could not load voice file {str(newer)!r}: it is a version 2 voice file; this code reads versions up to 1. "
        "Update higgs-v3."
    )):
        HiggsAudioV3Voice.load(newer)
    no_codes = tmp_path / "list.json"
    no_codes.write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match=re.escape(
        f"Could not load voice file {str(no_codes)!r}: no 'codes' field."
    )):
        HiggsAudioV3Voice.load(no_codes)
    from safetensors.torch import save_file

    weights = tmp_path / "weights.safetensors"
    save_file({"weight": torch.zeros(2)}, str(weights))
    with pytest.raises(ValueError, match=re.escape(
        f"Could not load voice file {str(weights)!r}: it holds tensors ['weight'], expected ['codes']."
    )):
        HiggsAudioV3Voice.load(weights)
    unmarked = tmp_path / "unmarked.safetensors"
    save_file({"codes": torch.zeros(2, C, dtype=torch.long)}, str(unmarked))
    with pytest.raises(ValueError, match=re.escape(
        f"Could not load voice file {str(unmarked)!r}: its format is None, expected 'higgs_audio_v3_voice' (not a "
        "Higgs Audio v3 voice file)."
    )):
        HiggsAudioV3Voice.load(unmarked)
    text_file = tmp_path / "v.txt"
    text_file.write_text("x")
    with pytest.raises(ValueError, match=re.escape(
        "A voice is loaded from .safetensors or .json; got the file name 'v.txt'."
    )):
        HiggsAudioV3Voice.load(text_file)
    missing = tmp_path / "nope.safetensors"
    with pytest.raises(FileNotFoundError, match=re.escape(f"Voice file {str(missing)!r} does not exist.")):
        HiggsAudioV3Voice.load(missing)
    # The length rule's one wording, read from the header (safetensors) or counted (JSON); a limit may be given.
    long = HiggsAudioV3Voice(codes=torch.zeros(51, C, dtype=torch.long)).save(tmp_path / "long.safetensors")
    for path in (long, HiggsAudioV3Voice(codes=torch.zeros(51, C, dtype=torch.long)).save(tmp_path / "long.json")):
        with pytest.raises(ValueError, match=re.escape(
            f"Could not load voice file {str(path)!r}: it is 2.04 s long (51 frames at 25 frames per second); the "
            "longest accepted is 2 s. Use a shorter clip: 5 to 30 s of clean speech is enough to clone a voice."
        )):
            HiggsAudioV3Voice.load(path, max_seconds=2.0)
        assert HiggsAudioV3Voice.load(path, max_seconds=2.04).num_frames == 51


# ---------------------------------------------------------------------------------------------------- from_any
def test_from_any_accepts_voices_of_a_second_import(second_audio_io):
    Other = second_audio_io.HiggsAudioV3Voice
    assert Other is not HiggsAudioV3Voice and Other.voice_format == HiggsAudioV3Voice.voice_format
    codes = torch.randint(0, 1024, (5, C), generator=torch.Generator().manual_seed(1))
    theirs = Other(codes=codes, text="Copy.", sampling_rate=16000, frame_rate=50)
    ours = HiggsAudioV3Voice.from_any(theirs)
    assert type(ours) is HiggsAudioV3Voice
    assert torch.equal(ours.codes, codes) and (ours.text, ours.sampling_rate, ours.frame_rate) == ("Copy.", 16000, 50)
    # And the other way round.
    back = Other.from_any(ours)
    assert type(back) is Other and torch.equal(back.codes, codes) and back.text == "Copy."
    # A voice of this class is returned as it is.
    assert HiggsAudioV3Voice.from_any(ours) is ours


def test_from_any_reads_voice_files(tmp_path):
    voice = HiggsAudioV3Voice(codes=torch.arange(3 * C).reshape(3, C), text="Saved.")
    for path in (voice.save(tmp_path / "v.safetensors"), str(voice.save(tmp_path / "v.JSON"))):
        loaded = HiggsAudioV3Voice.from_any(path)
        assert torch.equal(loaded.codes, voice.codes) and loaded.text == "Saved."
    missing = tmp_path / "missing.json"
    with pytest.raises(FileNotFoundError, match=re.escape(f"Voice file {str(missing)!r} does not exist.")):
        HiggsAudioV3Voice.from_any(missing)


def test_from_any_refusals():
    class LookAlike:  # the fields of a voice, without the format marker
        codes, text, sampling_rate, frame_rate = torch.zeros(2, C, dtype=torch.long), None, 24000, 25

    with pytest.raises(ValueError, match=re.escape(
        "The voice of speaker A is the path 'me.wav', which is not a saved voice file (.safetensors / .json). An audio "
        "clip is encoded into a voice first: voice = model.encode_reference(clip, text=...)."
    )):
        HiggsAudioV3Voice.from_any("me.wav", "the voice of speaker A")
    for value, kind in ((LookAlike(), "LookAlike"), (torch.zeros(2, C, dtype=torch.long), "Tensor")):
        with pytest.raises(ValueError, match=re.escape(
            "The voice of speaker A must be a HiggsAudioV3Voice (from model.encode_reference or "
            "HiggsAudioV3Voice.load) or the path of a saved voice file (.safetensors / .json), got "
            f"{kind}. Encode an audio clip with model.encode_reference(clip, text=...)."
        )):
            HiggsAudioV3Voice.from_any(value, "the voice of speaker A")
    with pytest.raises(ValueError, match=re.escape("The reference must be a HiggsAudioV3Voice")):  # the default name
        HiggsAudioV3Voice.from_any(None)


# ------------------------------------------------------------------------------------------ load_reference
def test_load_reference_decides_what_a_reference_is(tmp_path, second_audio_io):
    """Voices (of either import, or saved) come back as this module's voices; clips in every form as the waveform
    `prepare_reference_waveform` gives, with the transcript; `read=False` checks a clip's form and reads nothing."""
    from higgs_v3.audio_io_higgs_v3 import ReferenceClip, is_clip, load_reference

    codes = torch.arange(3 * C).reshape(3, C)
    voice = HiggsAudioV3Voice(codes=codes, text="Saved.")
    for value in (voice, second_audio_io.HiggsAudioV3Voice(codes=codes, text="Saved."),
                  voice.save(tmp_path / "v.json"), str(voice.save(tmp_path / "v.safetensors")),
                  {"path": str(tmp_path / "v.safetensors")}, {"path": tmp_path / "v.json"}):  # audio dicts naming one
        loaded = load_reference(value)
        assert type(loaded) is HiggsAudioV3Voice and torch.equal(loaded.codes, codes) and loaded.text == "Saved."
        assert not is_clip(value)
    assert load_reference(HiggsAudioV3Voice(codes=codes), text="Given.").text == "Given."
    samples = np.random.default_rng(0).uniform(-0.3, 0.3, 16000).astype(np.float32)
    wav = tmp_path / "clip.wav"
    soundfile.write(wav, samples, 16000, subtype="FLOAT")
    expected = prepare_reference_waveform(samples, 16000)
    for value, rate in ((samples, 16000), (torch.from_numpy(samples), 16000), (wav, None), (str(wav), 44100),
                        ({"array": samples, "sampling_rate": 16000}, None), ({"path": str(wav)}, None)):
        clip = load_reference(value, "Its words.", sampling_rate=rate)
        assert isinstance(clip, ReferenceClip) and clip.text == "Its words." and is_clip(value)
        assert torch.equal(clip.waveform, expected)
    assert load_reference(tmp_path / "missing.wav", read=False) == ReferenceClip(None, None)  # nothing read
    assert load_reference("https://example.invalid/voice.json", read=False).waveform is None  # a URL is a clip


def test_load_reference_refusals(tmp_path):
    from higgs_v3.audio_io_higgs_v3 import load_reference

    voice = HiggsAudioV3Voice(codes=torch.zeros(2, C, dtype=torch.long), text="Mine.")
    with pytest.raises(ValueError, match=re.escape(
        "The voice of 'Ann' already carries its transcript; do not pass reference_text as well."
    )):
        load_reference(voice, "Another.", where="the voice of 'Ann'")
    for value in (3, None, [0.1, 0.2], voice.codes.tolist()):
        with pytest.raises(ValueError, match=re.escape(
            "The reference must be a voice (model.encode_reference(clip, text=...), HiggsAudioV3Voice.load, or a saved "
            "voice file's path) or an audio clip (a file path, an http(s) URL, samples with sampling_rate, or "
            f"{{'array': samples, 'sampling_rate': rate}}), got {type(value).__name__}."
        )):
            load_reference(value)
    for value in (np.zeros(10, dtype=np.float32), {"array": np.zeros(10, dtype=np.float32)}):
        with pytest.raises(ValueError, match=re.escape("The reference is an array of samples without its sampling")):
            load_reference(value, read=False)  # the form is checked without reading
    with pytest.raises(ValueError, match=re.escape(
        "The reference is an audio dict without samples or a file (its keys: ['bytes'])")):
        load_reference({"bytes": b""})
    with pytest.raises(FileNotFoundError, match=re.escape("Reference audio file")):
        load_reference(tmp_path / "missing.flac")


def test_the_length_rule_has_one_wording():
    from higgs_v3.audio_io_higgs_v3 import TARGET_ADVICE, check_length, length_problem

    assert length_problem("x", 2500, 25, "frames") is None and length_problem("x", 2400000, 24000) is None
    assert length_problem("The reference", 2501, 25, "frames") == (
        "The reference is 100.04 s long (2501 frames at 25 frames per second); the longest accepted is "
        "100 s. Use a shorter clip: 5 to 30 s of clean speech is enough to clone a voice.")
    with pytest.raises(ValueError, match=re.escape(
        "Target audio is 3.00 s long (72000 samples at 24000 Hz); the longest accepted is 2.5 s. Split long recordings "
        "into sentences, one target each."
    )):
        check_length("Target audio", 72000, 24000, max_seconds=2.5, advice=TARGET_ADVICE)
