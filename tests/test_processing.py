# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Tests of `HiggsAudioV3Processor`, the reference-audio checks, voices, decoding and the audio streamer.

Expected prompt ids are built independently from token strings (the tokenizer's own lookups and a joint tokenization
of the whole prompt string), expected delayed rows with an explicit loop over the spec's formula, and expected
waveforms by calling the codec directly.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import soundfile
import soxr
import torch
import torch.nn.functional as F
from transformers import AutoTokenizer

from higgs_v3 import processing_higgs_v3
from higgs_v3.audio_io_higgs_v3 import HiggsAudioV3Voice, prepare_reference_waveform, save_audio
from higgs_v3.codec_higgs_v3 import HiggsAudioV3Codec, tiny_codec_config
from higgs_v3.configuration_higgs_v3 import HiggsAudioV3Config
from higgs_v3.processing_higgs_v3 import HiggsAudioV3AudioStreamer, HiggsAudioV3Processor
from higgs_v3.tiny_higgs_v3 import write_tiny_tokenizer


BOC, EOC, C = 1024, 1025, 8
SPF = 960  # samples per frame at 24 kHz, 25 frames per second
STREAM_TOLERANCE = 1e-5  # max |streamed - one-shot| sample difference: float rounding only


# ----------------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return write_tiny_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    return AutoTokenizer.from_pretrained(tokenizer_dir)


@pytest.fixture(scope="module")
def processor(tokenizer):
    return HiggsAudioV3Processor(tokenizer)


def randomize_codebooks(codec, seed: int = 0):
    """A freshly built codec has all-zero codebooks (X-Codec's `embed` buffers), so it would encode everything to code
    0 and decode every code alike, and equality checks on codes or waveforms would hold vacuously."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for quantizer in codec.quantizer.quantizers:
            quantizer.codebook.embed.copy_(torch.randn(quantizer.codebook.embed.shape, generator=generator))
    return codec


@pytest.fixture(scope="module")
def codec():
    torch.manual_seed(0)
    return randomize_codebooks(HiggsAudioV3Codec.from_codec_config(tiny_codec_config()).eval())


class ReachCodec(torch.nn.Module):
    """A stand-in codec with an exactly known receptive field: each frame's codes give a value (a per-codebook table),
    the values are mixed over +-`reach` frames (zero padded at the clip edges, like the real decoder's convolutions)
    and spread over the frame's 960 samples. Strongly code dependent, so waveform comparisons are sharp."""

    def __init__(self, reach: int = 3):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.reach = reach
        self.table = torch.nn.Parameter(torch.randn(C, 1024, generator=generator), requires_grad=False)
        self.mix = torch.nn.Parameter(torch.randn(1, 1, 2 * reach + 1, generator=generator), requires_grad=False)
        self.shape = torch.nn.Parameter(torch.linspace(0.5, 1.5, SPF), requires_grad=False)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:  # [B, C, T] -> [B, 1, T * 960]
        values = self.table.gather(1, codes.transpose(0, 1).flatten(1)).view(C, *codes.shape[::2]).sum(0)  # [B, T]
        mixed = F.conv1d(values[:, None], self.mix, padding=self.reach)  # [B, 1, T]
        return (mixed[..., None] * self.shape).flatten(2)  # [B, 1, T * 960]


def ids_of(tokenizer, *tokens: str) -> list[int]:
    return [tokenizer.convert_tokens_to_ids(t) for t in tokens]


def text_ids(tokenizer, text: str) -> list[int]:
    return tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))


def delayed_by_loop(raw: torch.Tensor) -> torch.Tensor:
    """Spec §4: D[r, c] = R[r - c, c] if 0 <= r - c < T, BOC if r < c, EOC if r - c >= T."""
    frames, books = raw.shape
    out = torch.empty(frames + books - 1, books, dtype=torch.long)
    for r in range(frames + books - 1):
        for c in range(books):
            out[r, c] = BOC if r < c else (EOC if r - c >= frames else raw[r - c, c])
    return out


# --------------------------------------------------------------------------------------------- prompt layouts
def test_special_ids_match_spec_and_config(processor, tokenizer):
    assert processor.prompt_token_ids == {
        "pad": 151643, "tts": 151667, "text": 151672, "audio_start": 151670, "ref_audio": 151679, "ref_text": 151680,
    }
    assert processor.prompt_token_ids["tts"] == tokenizer.convert_tokens_to_ids("<|tts|>")
    config = HiggsAudioV3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                num_key_value_heads=1, head_dim=16)
    processor.check_model_config(config)  # must not raise
    built = HiggsAudioV3Processor.from_model_config(tokenizer, config)
    assert built.num_codebooks == 8 and built.audio_placeholder_id == -100


def test_config_mismatch_is_refused(processor):
    config = HiggsAudioV3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                num_key_value_heads=1, head_dim=16, tts_token_id=5, frame_rate=50)
    with pytest.raises(ValueError, match=re.escape(
        "The processor does not match the model config: <|tts|> is id 151667 in the tokenizer but config.tts_token_id=5; "
        "processor frame_rate=25 but config.frame_rate=50."
    )):
        processor.check_model_config(config)


def test_tokenizer_without_higgs_tokens_and_bad_settings_are_refused(tokenizer):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    plain = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")))
    with pytest.raises(ValueError, match=re.escape(
        "The tokenizer has no '<|endoftext|>' token; a Higgs Audio v3 tokenizer has the 84 added tokens of the original "
        "(ids 151643..151726)."
    )):
        HiggsAudioV3Processor(plain)
    with pytest.raises(ValueError, match=re.escape("sampling_rate=24000 must be a positive multiple of frame_rate=7.")):
        HiggsAudioV3Processor(tokenizer, frame_rate=7)
    with pytest.raises(ValueError, match=re.escape(
        "audio_boc_token_id=1024 and audio_eoc_token_id=1024 must be two different positive codes."
    )):
        HiggsAudioV3Processor(tokenizer, audio_eoc_token_id=1024)


def test_plain_layout(processor, tokenizer):
    out = processor("Hello world, this is a test.")
    expected = ids_of(tokenizer, "<|tts|>", "<|text|>") + text_ids(tokenizer, "Hello world, this is a test.") + ids_of(
        tokenizer, "<|audio|>")
    assert out["input_ids"].tolist() == [expected]
    # The same ids from one tokenization of the whole prompt string (specials split out as single tokens).
    joint = tokenizer("<|tts|><|text|>Hello world, this is a test.<|audio|>", add_special_tokens=False).input_ids
    assert out["input_ids"][0].tolist() == joint
    assert out["attention_mask"].tolist() == [[1] * len(expected)]
    assert "audio_input_ids" not in out
    assert out["input_ids"].dtype == torch.long


def test_clone_without_transcript_layout(processor, tokenizer):
    raw = torch.randint(0, 1024, (5, C), generator=torch.Generator().manual_seed(1))
    out = processor("Good morning!", reference_codes=raw)
    placeholders = [-100] * (5 + 7)  # L = T_ref + 7
    expected = (ids_of(tokenizer, "<|tts|>", "<|ref_audio|>") + placeholders + ids_of(tokenizer, "<|text|>")
                + text_ids(tokenizer, "Good morning!") + ids_of(tokenizer, "<|audio|>"))
    assert out["input_ids"].tolist() == [expected]
    assert torch.equal(out["audio_input_ids"], delayed_by_loop(raw))
    assert out["audio_input_ids"].shape == (12, C)


def test_clone_with_transcript_layout(processor, tokenizer):
    raw = torch.randint(0, 1024, (3, C), generator=torch.Generator().manual_seed(2))
    voice = HiggsAudioV3Voice(codes=raw, text="She sells sea shells.")
    out = processor("The quick brown fox.", reference=voice)
    expected = (ids_of(tokenizer, "<|tts|>", "<|ref_text|>") + text_ids(tokenizer, "She sells sea shells.")
                + ids_of(tokenizer, "<|ref_audio|>") + [-100] * 10 + ids_of(tokenizer, "<|text|>")
                + text_ids(tokenizer, "The quick brown fox.") + ids_of(tokenizer, "<|audio|>"))
    assert out["input_ids"].tolist() == [expected]
    assert torch.equal(out["audio_input_ids"], delayed_by_loop(raw))
    # reference_codes + reference_text give the same prompt as the voice.
    same = processor("The quick brown fox.", reference_codes=raw, reference_text="She sells sea shells.")
    assert torch.equal(same["input_ids"], out["input_ids"]) and torch.equal(same["audio_input_ids"], out["audio_input_ids"])


def test_every_tag_is_one_token(processor, tokenizer):
    tags = processor.valid_tags()
    assert len(tags) == 45
    families = [t[2:].split(":")[0] for t in tags]
    assert {f: families.count(f) for f in set(families)} == {"emotion": 21, "style": 3, "sfx": 9, "prosody": 10, "env": 2}
    assert tags[0] == "<|emotion:elation|>" and tags[-1] == "<|prosody:expressive_low|>"
    for tag in tags:
        out = processor(f"Hi {tag}there")
        expected = (ids_of(tokenizer, "<|tts|>", "<|text|>") + text_ids(tokenizer, "Hi ") + ids_of(tokenizer, tag)
                    + text_ids(tokenizer, "there") + ids_of(tokenizer, "<|audio|>"))
        assert out["input_ids"][0].tolist() == expected, tag
        assert tokenizer.convert_tokens_to_ids(tag) in range(151681, 151727)


def test_stacked_tags(processor, tokenizer):
    out = processor("<|emotion:anger|><|prosody:speed_fast|>Stop.<|prosody:pause|><|sfx:laughter|>Haha")
    expected = (ids_of(tokenizer, "<|tts|>", "<|text|>", "<|emotion:anger|>", "<|prosody:speed_fast|>")
                + text_ids(tokenizer, "Stop.") + ids_of(tokenizer, "<|prosody:pause|>", "<|sfx:laughter|>")
                + text_ids(tokenizer, "Haha") + ids_of(tokenizer, "<|audio|>"))
    assert out["input_ids"][0].tolist() == expected


# ------------------------------------------------------------------------------------------------- tag checks
def test_unknown_tag_names_closest_valid_tags(processor):
    with pytest.raises(ValueError, match=re.escape(
        "Unknown control tag '<|emotion:angry|>' in the text; it would be read aloud. Closest valid tags: "
        "'<|emotion:anger|>', '<|emotion:fear|>', '<|emotion:awe|>'. processor.valid_tags() lists all 45."
    )):
        processor("Hello <|emotion:angry|> world")


def test_unknown_tag_in_batch_and_reference_text(processor):
    with pytest.raises(ValueError, match=re.escape(
        "Unknown control tag '<|sfx:laugh|>' in text 1; it would be read aloud. Closest valid tags: '<|sfx:laughter|>'"
    )):
        processor(["Fine.", "<|sfx:laugh|>Ha"])
    with pytest.raises(ValueError, match=re.escape(
        "Unknown control tag '<|prosody:pause |>' in the reference text; it would be read aloud. Closest valid tags: "
        "'<|prosody:pause|>'"
    )):
        processor("Fine.", reference_codes=torch.zeros(2, C, dtype=torch.long), reference_text="a <|prosody:pause |> b")


def test_unknown_tag_without_close_match(processor):
    with pytest.raises(ValueError, match=re.escape(
        "Unknown control tag '<|zz|>' in the text; it would be read aloud. No valid tag is close to it. "
        "processor.valid_tags() lists all 45."
    )):
        processor("<|zz|>")


@pytest.mark.parametrize("token", ["<|tts|>", "<|audio|>", "<|ref_audio|>", "<|endoftext|>", "<|chatml|>"])
def test_structural_tokens_refused(processor, token):
    with pytest.raises(ValueError, match=re.escape(
        f"'{token}' in the text is a structural prompt token, which the processor places itself; remove it. "
        "processor.valid_tags() lists the control tags."
    )):
        processor(f"Say {token} this")


def test_text_refusals(processor):
    with pytest.raises(ValueError, match=re.escape("The text is empty; there is nothing to speak.")):
        processor("   ")
    with pytest.raises(ValueError, match=re.escape("Text 1 must be a string, got int.")):
        processor(["ok", 3])
    with pytest.raises(ValueError, match=re.escape("text must be a string or a non-empty list of strings, got [].")):
        processor([])
    with pytest.raises(ValueError, match=re.escape("return_tensors must be 'pt', 'np' or None, got 'tf'.")):
        processor("hi", return_tensors="tf")


# ---------------------------------------------------------------------------------------------- batches, refs
def test_batch_with_mixed_references_is_left_padded(processor, tokenizer):
    gen = torch.Generator().manual_seed(3)
    raw_a, raw_c = torch.randint(0, 1024, (4, C), generator=gen), torch.randint(0, 1024, (2, C), generator=gen)
    voice = HiggsAudioV3Voice(codes=raw_a, text="Hello there.")
    texts = ["First sentence.", "<|emotion:awe|>Second!", "Third one, a little longer than the others."]
    out = processor(texts, reference=[voice, None, None], reference_codes=[None, None, raw_c])
    singles = [
        processor(texts[0], reference=voice)["input_ids"][0].tolist(),
        processor(texts[1])["input_ids"][0].tolist(),
        processor(texts[2], reference_codes=raw_c)["input_ids"][0].tolist(),
    ]
    length = max(len(s) for s in singles)
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert out["input_ids"].shape == (3, length)
    for row, single in enumerate(singles):
        padding = length - len(single)
        assert out["input_ids"][row].tolist() == [pad] * padding + single
        assert out["attention_mask"][row].tolist() == [0] * padding + [1] * len(single)
    # Reference rows of all placeholders, batch-major, in placeholder order.
    assert torch.equal(out["audio_input_ids"], torch.cat([delayed_by_loop(raw_a), delayed_by_loop(raw_c)]))
    assert int((out["input_ids"] == -100).sum()) == out["audio_input_ids"].shape[0] == (4 + 7) + (2 + 7)


def test_single_reference_applies_to_every_text(processor):
    raw = torch.randint(0, 1024, (2, C), generator=torch.Generator().manual_seed(4))
    out = processor(["a b", "c d"], reference=HiggsAudioV3Voice(codes=raw))
    assert torch.equal(out["audio_input_ids"], torch.cat([delayed_by_loop(raw)] * 2))


def test_return_tensors_np_and_none(processor):
    raw = torch.zeros(1, C, dtype=torch.long)
    as_pt = processor(["x", "yy"], reference_codes=[raw, None])
    as_np = processor(["x", "yy"], reference_codes=[raw, None], return_tensors="np")
    as_list = processor(["x", "yy"], reference_codes=[raw, None], return_tensors=None)
    for key in ("input_ids", "attention_mask", "audio_input_ids"):
        assert isinstance(as_np[key], np.ndarray) and as_np[key].tolist() == as_pt[key].tolist()
        assert as_list[key] == as_pt[key].tolist()


def test_transcript_without_audio_is_dropped_with_warning(processor, monkeypatch):
    warnings = []
    monkeypatch.setattr(processing_higgs_v3.logger, "warning_once", warnings.append)
    out = processor(["Hello there.", "Bye."], reference_text=["ignored transcript", None])
    assert torch.equal(out["input_ids"], processor(["Hello there.", "Bye."])["input_ids"])
    assert warnings == [
        "A reference_text without reference audio is dropped: the transcript only helps together with the clip it "
        "describes."
    ]


def test_reference_argument_refusals(processor):
    raw = torch.zeros(2, C, dtype=torch.long)
    voice = HiggsAudioV3Voice(codes=raw, text="transcript")
    with pytest.raises(ValueError, match=re.escape(
        "Text 0 has more than one reference (reference, reference_codes); pass exactly one of reference, "
        "reference_audio and reference_codes per text."
    )):
        processor("x", reference=voice, reference_codes=raw)
    with pytest.raises(ValueError, match=re.escape(
        "reference has 1 entries for 2 texts; pass one entry per text (None for no reference) or a single value for "
        "all texts."
    )):
        processor(["x", "y"], reference=[voice])
    with pytest.raises(ValueError, match=re.escape(
        "The voice for text 0 already carries its transcript; do not pass reference_text as well."
    )):
        processor("x", reference=voice, reference_text="again")
    with pytest.raises(ValueError, match=re.escape(
        "reference for text 0 must be a HiggsAudioV3Voice (from processor.encode_reference or processor.load_voice), "
        "got Tensor."
    )):
        processor("x", reference=raw)
    with pytest.raises(ValueError, match=re.escape(
        "reference_codes for text 0 must be raw codec codes of shape [frames, 8] with at least one frame, got shape "
        "(8, 3). The codec's encode gives [1, 8, frames]: use codes[0].T."
    )):
        processor("x", reference_codes=torch.zeros(8, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape(
        "reference_codes for text 0 holds codes from 0 to 1024; raw codec codes lie in 0..1023 (the processor adds the "
        "delay pattern with its BOC/EOC codes)."
    )):
        processor("x", reference_codes=torch.tensor([[0] * 7 + [1024]]))
    with pytest.raises(ValueError, match=re.escape(
        "Encoding reference audio needs the codec: pass codec=model.codec. The processor does not hold the codec "
        "(saving it would write a path to the codec's weights into the processor files)."
    )):
        processor("x", reference_audio=np.zeros(24000, dtype=np.float32), sampling_rate=24000)
    with pytest.raises(ValueError, match=re.escape(
        "The voice for text 0 was encoded at 16000 Hz / 25 frames per second; this model's codec runs at 24000 Hz / 25."
    )):
        processor("x", reference=HiggsAudioV3Voice(codes=raw, sampling_rate=16000))


# ------------------------------------------------------------------------------------------ reference audio
def _prepared(audio, sampling_rate=None, **kwargs):
    return prepare_reference_waveform(audio, sampling_rate, **kwargs)


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
        "Reference audio is 100.00 s long (800001 samples at 8000 Hz); the longest accepted is 100 s "
        "(max_reference_seconds). Trim it: 5 to 30 s of clean speech is enough to clone a voice."
    )):
        _prepared(np.zeros(800001, dtype=np.float32), 8000)
    _prepared(np.zeros(800000, dtype=np.float32), 8000)  # exactly 100 s is accepted
    with pytest.raises(ValueError, match=re.escape(
        "sampling_rate is required when the reference audio is an array: pass the rate of its samples in Hz (for files "
        "it is read from the file)."
    )):
        _prepared(np.zeros(100, dtype=np.float32))
    with pytest.raises(ValueError, match=re.escape("sampling_rate must be a positive integer number of Hz, got 0.")):
        _prepared(np.zeros(100, dtype=np.float32), 0)
    with pytest.raises(ValueError, match=re.escape("sampling_rate must be a positive integer number of Hz, got 22050.5.")):
        _prepared(np.zeros(100, dtype=np.float32), 22050.5)
    with pytest.raises(ValueError, match=re.escape(
        "Reference audio has dtype int64; accepted are float16/float32/float64 samples in [-1, 1] and integer PCM "
        "(int8, uint8, int16, int32), which is scaled to [-1, 1]."
    )):
        _prepared(torch.zeros(100, dtype=torch.long), 24000)
    with pytest.raises(ValueError, match=re.escape(
        "Reference audio must be 1-D [samples] or 2-D [channels, samples] / [samples, channels]; got shape (2, 2, 100)."
    )):
        _prepared(np.zeros((2, 2, 100), dtype=np.float32), 24000)
    with pytest.raises(ValueError, match=re.escape(
        "Reference audio must be a file path, a numpy array or a torch tensor; got list."
    )):
        _prepared([0.0, 0.1], 24000)
    missing = tmp_path / "missing.wav"
    with pytest.raises(FileNotFoundError, match=re.escape(f"Reference audio file {str(missing)!r} does not exist.")):
        _prepared(missing)
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"this is not audio")
    with pytest.raises(ValueError, match=re.escape(f"Could not read reference audio file {str(broken)!r} (")):
        _prepared(broken)
    good = tmp_path / "good.wav"
    soundfile.write(good, np.zeros(1600, dtype=np.float32), 16000)
    with pytest.raises(ValueError, match=re.escape(
        f"sampling_rate=24000 was given but {str(good)!r} is sampled at 16000 Hz; leave sampling_rate unset for files "
        "(it is read from the file)."
    )):
        _prepared(good, 24000)


def test_processor_limit_is_configurable(tokenizer, codec):
    short_limit = HiggsAudioV3Processor(tokenizer, max_reference_seconds=2.0)
    with pytest.raises(ValueError, match=re.escape(
        "Reference audio is 2.50 s long (60000 samples at 24000 Hz); the longest accepted is 2 s"
    )):
        short_limit.encode_reference(np.zeros(60000, dtype=np.float32), sampling_rate=24000, codec=codec)


def test_int_pcm_is_scaled():
    pcm = np.array([-32768, -16384, 0, 16384, 32767] * 4800, dtype=np.int16)  # 1 s at 24 kHz
    expected = torch.from_numpy(pcm.astype(np.float32) / 32768.0)
    assert torch.equal(_prepared(pcm, 24000), expected)
    assert float(_prepared(pcm, 24000).min()) == -1.0
    pcm8 = np.array([0, 128, 255] * 8000, dtype=np.uint8)
    assert torch.equal(_prepared(pcm8, 24000), torch.tensor([-1.0, 0.0, 127 / 128] * 8000))
    pcm32 = np.array([-(2**31), 2**30] * 12000, dtype=np.int32)
    assert torch.equal(_prepared(pcm32, 24000), torch.tensor([-1.0, 0.5] * 12000))


def test_stereo_is_mixed_to_mono_in_either_layout():
    gen = np.random.default_rng(0)
    stereo = gen.uniform(-0.5, 0.5, size=(2, 30000)).astype(np.float32)
    expected = torch.from_numpy(stereo.mean(axis=0))
    assert torch.allclose(_prepared(stereo, 24000), expected, atol=0, rtol=0)
    assert torch.allclose(_prepared(stereo.T.copy(), 24000), expected, atol=0, rtol=0)
    assert torch.allclose(_prepared(torch.from_numpy(stereo)[None], 24000), expected, atol=0, rtol=0)


def test_resampled_to_24khz_with_soxr_and_short_clips_padded():
    gen = np.random.default_rng(1)
    clip = gen.uniform(-0.5, 0.5, size=32000).astype(np.float32)  # 2 s at 16 kHz
    out = _prepared(clip, 16000)
    reference = soxr.resample(clip, 16000, 24000)
    assert out.shape == (48000,)
    assert np.allclose(out.numpy(), reference, atol=1e-6)
    short = gen.uniform(-0.5, 0.5, size=4000).astype(np.float32)  # 0.25 s at 16 kHz -> 6000 samples at 24 kHz
    padded = _prepared(short, 16000)
    assert padded.shape == (24000,)
    assert np.allclose(padded[:6000].numpy(), soxr.resample(short, 16000, 24000), atol=1e-6)
    assert torch.count_nonzero(padded[6000:]) == 0
    assert _prepared(short, 16000, min_seconds=0.0).shape == (6000,)


def test_bf16_tensor_and_float64_accepted():
    wave = torch.linspace(-1, 1, 24000)
    assert torch.equal(_prepared(wave.to(torch.bfloat16), 24000), wave.to(torch.bfloat16).float())
    assert torch.equal(_prepared(wave.double().numpy(), 24000), wave)


@pytest.mark.parametrize("suffix,subtype", [(".wav", "PCM_16"), (".flac", "PCM_16"), (".ogg", "VORBIS")])
def test_reference_from_file(tmp_path, suffix, subtype):
    rate = 16000
    tone = (0.3 * np.sin(2 * np.pi * 220 * np.arange(rate * 1.5) / rate)).astype(np.float32)
    stereo = np.stack([tone, -0.5 * tone], axis=1)  # [N, 2] as soundfile writes it
    path = tmp_path / f"ref{suffix}"
    soundfile.write(path, stereo, rate, subtype=subtype)
    data, file_rate = soundfile.read(path, dtype="float32", always_2d=True)
    assert file_rate == rate
    expected = prepare_reference_waveform(data.T.copy(), rate)
    assert torch.equal(prepare_reference_waveform(path), expected)
    assert torch.equal(prepare_reference_waveform(str(path)), expected)
    assert expected.shape == (36000,)


# ----------------------------------------------------------------------------------------- codec round trips
def test_encode_reference_and_clone_prompt_from_audio(processor, codec):
    gen = np.random.default_rng(2)
    clip = gen.uniform(-0.3, 0.3, size=8000).astype(np.float32)  # 0.5 s at 16 kHz
    voice = processor.encode_reference(clip, text="Hello there.", sampling_rate=16000, codec=codec)
    waveform = F.pad(torch.from_numpy(soxr.resample(clip, 16000, 24000)), (0, 12000))  # 1 s at 24 kHz
    with torch.no_grad():
        expected = codec.encode(waveform[None, None])[0].T  # [25, 8]
    assert voice.codes.shape == (25, C) and voice.text == "Hello there."
    assert torch.equal(voice.codes, expected)
    out = processor("Speak.", reference_audio=clip, sampling_rate=16000, reference_text="Hello there.", codec=codec)
    assert torch.equal(out["audio_input_ids"], delayed_by_loop(expected))
    assert torch.equal(out["input_ids"], processor("Speak.", reference=voice)["input_ids"])
    # A model holding the codec as `.codec` works too.
    holder = torch.nn.Module()
    holder.codec = codec
    assert torch.equal(processor.encode_reference(clip, sampling_rate=16000, codec=holder).codes, expected)


@pytest.fixture(params=["tiny_codec", "reach_codec"])
def any_codec(request, codec):
    """The real codec class (tiny, random) and the sharply code-dependent stand-in."""
    return codec if request.param == "tiny_codec" else ReachCodec()


def test_one_clip_for_all_texts_is_encoded_once(processor, codec, monkeypatch):
    calls = []
    encode = codec.encode
    monkeypatch.setattr(codec, "encode", lambda x: calls.append(x.shape) or encode(x))
    clip = np.random.default_rng(3).uniform(-0.3, 0.3, size=24000).astype(np.float32)
    out = processor(["One.", "Two.", "Three."], reference_audio=clip, sampling_rate=24000, codec=codec)
    assert calls == [(1, 1, 24000)]
    rows = out["audio_input_ids"].shape[0] // 3
    assert torch.equal(out["audio_input_ids"][:rows], out["audio_input_ids"][rows : 2 * rows])


def test_batch_decode_equals_codec_decode(processor, any_codec):
    codec = any_codec
    gen = torch.Generator().manual_seed(5)
    raw = torch.randint(0, 1024, (12, C), generator=gen)
    delayed = delayed_by_loop(raw)
    delayed[5, 3] = EOC  # stray EOC/BOC sampled in real positions decode as code 0
    delayed[9, 0] = BOC
    cleaned = raw.clone()
    cleaned[5 - 3, 3] = 0
    cleaned[9, 0] = 0
    with torch.no_grad():
        expected = codec.decode(cleaned.T[None])[0, 0]
    (waveform,) = processor.batch_decode(delayed[None], codec=codec)
    assert waveform.shape == (12 * SPF,)
    assert torch.allclose(waveform, expected, atol=1e-6)
    assert torch.allclose(processor.decode(delayed, codec=codec), expected, atol=1e-6)
    assert torch.equal(processor.sequences_to_codes(delayed)[0], cleaned)
    # Raw codes are recognised (they never hold BOC) and decoded as they are.
    assert torch.allclose(processor.decode(cleaned, codec=codec), expected, atol=1e-6)


def test_batch_decode_finds_each_sequence_end(processor, any_codec):
    codec = any_codec
    gen = torch.Generator().manual_seed(6)
    a, b, c = (torch.randint(0, 1024, (n, C), generator=gen) for n in (20, 9, 15))
    rows_a, rows_b = delayed_by_loop(a), delayed_by_loop(b)  # 27 and 16 rows, EOC at rows 20 and 9 of codebook 0
    rows_c = delayed_by_loop(c)[:18]  # hit max_new_tokens: no EOC in codebook 0 yet -> 18 - 7 = 11 frames
    rows_b = torch.cat([rows_b, torch.full((27 - 16, C), EOC)])  # finished rows padded after their end
    rows_c = torch.cat([rows_c, torch.full((27 - 18, C), 7)])
    batch = torch.stack([rows_a, rows_b, rows_c])
    codes = processor.sequences_to_codes(batch, lengths=[27, 27, 18])
    assert [x.shape[0] for x in codes] == [20, 9, 11]
    assert torch.equal(codes[0], a) and torch.equal(codes[1], b) and torch.equal(codes[2], c[:11])
    waves = processor.batch_decode(batch, codec=codec, lengths=[27, 27, 18])
    with torch.no_grad():
        for wave, raw in zip(waves, (a, b, c[:11])):
            assert torch.allclose(wave, codec.decode(raw.T[None])[0, 0], atol=1e-6)
    # Without lengths the EOC rule alone finds the ends of a and b.
    assert [x.shape[0] for x in processor.sequences_to_codes(batch[:2])] == [20, 9]


def test_early_eoc_in_codebook_0_is_not_an_end(processor):
    raw = torch.randint(0, 1024, (10, C), generator=torch.Generator().manual_seed(7))
    rows = delayed_by_loop(raw)
    rows[3, 0] = EOC  # during the first C rows EOC is not checked: it is a stray code, decoded as 0
    codes = processor.sequences_to_codes(rows)[0]
    expected = raw.clone()
    expected[3, 0] = 0
    assert torch.equal(codes, expected)


def test_decode_refusals(processor):
    with pytest.raises(ValueError, match=re.escape(
        "Decoding codes to audio needs the codec: pass codec=model.codec. The processor does not hold the codec"
    )):
        processor.batch_decode(torch.zeros(1, 9, C, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape(
        "sequences must have shape [rows, 8] or [batch, rows, 8], got (1, 9, 4)."
    )):
        processor.sequences_to_codes(torch.zeros(1, 9, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape("Sequence 0 holds the negative code -1; codes lie in 0..1025.")):
        processor.sequences_to_codes(torch.full((9, C), -1))


def test_save_audio_round_trip(processor, tmp_path):
    wave = torch.linspace(-0.5, 0.5, 4800)
    path = processor.save_audio(wave, tmp_path / "out.wav")
    data, rate = soundfile.read(path, dtype="float32")
    assert rate == 24000 and data.shape == (4800,)
    assert np.allclose(data, wave.numpy(), atol=1 / 32768)
    save_audio(wave[None].numpy(), tmp_path / "out.flac", sampling_rate=16000)
    assert soundfile.info(str(tmp_path / "out.flac")).samplerate == 16000
    with pytest.raises(ValueError, match=re.escape(
        "save_audio writes one mono waveform of shape [samples] or [1, samples]; got shape (2, 10)."
    )):
        save_audio(np.zeros((2, 10)), tmp_path / "x.wav")


# ---------------------------------------------------------------------------------------------------- voices
@pytest.mark.parametrize("suffix", [".safetensors", ".json"])
@pytest.mark.parametrize("text", [None, "Grüße — «quoted» \"text\" <|sfx:sigh|>"])
def test_voice_round_trip(tmp_path, suffix, text):
    codes = torch.randint(0, 1024, (37, C), generator=torch.Generator().manual_seed(8))
    voice = HiggsAudioV3Voice(codes=codes, text=text)
    path = voice.save(tmp_path / f"voice{suffix}")
    loaded = HiggsAudioV3Voice.load(path)
    assert torch.equal(loaded.codes, codes) and loaded.codes.dtype == torch.long
    assert loaded.text == text
    assert (loaded.sampling_rate, loaded.frame_rate, loaded.num_frames, loaded.duration) == (24000, 25, 37, 1.48)


def test_voice_file_refusals(tmp_path):
    voice = HiggsAudioV3Voice(codes=torch.zeros(2, C, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape("A voice is saved as .safetensors or .json; got the file name 'v.pt'.")):
        voice.save(tmp_path / "v.pt")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"codes": [[0] * 8], "format": "something_else"}))
    with pytest.raises(ValueError, match=re.escape(
        f"{str(other)!r} is not a Higgs Audio v3 voice file: format is 'something_else', expected 'higgs_audio_v3_voice'."
    )):
        HiggsAudioV3Voice.load(other)
    from safetensors.torch import save_file

    weights = tmp_path / "weights.safetensors"
    save_file({"weight": torch.zeros(2)}, str(weights))
    with pytest.raises(ValueError, match=re.escape(
        f"{str(weights)!r} is not a Higgs Audio v3 voice file: it holds tensors ['weight'], expected ['codes']."
    )):
        HiggsAudioV3Voice.load(weights)
    with pytest.raises(ValueError, match=re.escape(
        "HiggsAudioV3Voice.codes must have shape [frames, num_codebooks] with at least one frame; got shape (0, 8)."
    )):
        HiggsAudioV3Voice(codes=torch.zeros(0, C, dtype=torch.long))


def test_saved_voice_reused_in_a_batch(processor, tmp_path):
    voice = HiggsAudioV3Voice(codes=torch.randint(0, 1024, (6, C), generator=torch.Generator().manual_seed(9)), text="Hi.")
    loaded = HiggsAudioV3Voice.load(voice.save(tmp_path / "v.safetensors"))
    first = processor(["One.", "Two."], reference=[voice, None])
    second = processor(["One.", "Two."], reference=[loaded, None])
    assert torch.equal(first["input_ids"], second["input_ids"])
    assert torch.equal(first["audio_input_ids"], second["audio_input_ids"])


# ---------------------------------------------------------------------------------------------- save / load
def test_processor_save_load_in_subprocess(processor, tokenizer, tmp_path):
    repo = tmp_path / "repo"
    HiggsAudioV3Processor(tokenizer, max_reference_seconds=42.0).save_pretrained(repo)
    config = json.loads((repo / "processor_config.json").read_text())
    assert config["auto_map"] == {"AutoProcessor": "processing_higgs_v3.HiggsAudioV3Processor"}
    assert config["max_reference_seconds"] == 42.0 and config["num_codebooks"] == 8
    for name in os.listdir(repo):  # nothing points back to this machine (no audio_tokenizer path pointer)
        if name.endswith(".json") and name != "tokenizer.json":
            assert str(tmp_path) not in (repo / name).read_text() and "audio_tokenizer" not in (repo / name).read_text()
    assert {"processing_higgs_v3.py", "audio_io_higgs_v3.py", "codec_higgs_v3.py", "delay_higgs_v3.py"} <= set(
        os.listdir(repo))

    texts = ["Hello <|sfx:laughter|>haha.", "Two."]
    raw = torch.arange(3 * C).reshape(3, C) % 1024
    script = textwrap.dedent(
        f"""
        import json, torch
        from transformers import AutoProcessor
        processor = AutoProcessor.from_pretrained({str(repo)!r}, trust_remote_code=True)
        raw = torch.arange(3 * 8).reshape(3, 8) % 1024
        out = processor({texts!r}, reference_codes=[raw, None], reference_text=["Hi.", None])
        print(json.dumps({{
            "module": type(processor).__module__,
            "max_reference_seconds": processor.max_reference_seconds,
            "input_ids": out["input_ids"].tolist(),
            "attention_mask": out["attention_mask"].tolist(),
            "audio_input_ids": out["audio_input_ids"].tolist(),
        }}))
        """
    )
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["module"].startswith("transformers_modules.") and loaded["module"].endswith(".processing_higgs_v3")
    assert loaded["max_reference_seconds"] == 42.0
    here = processor(texts, reference_codes=[raw, None], reference_text=["Hi.", None])
    assert loaded["input_ids"] == here["input_ids"].tolist()
    assert loaded["attention_mask"] == here["attention_mask"].tolist()
    assert loaded["audio_input_ids"] == here["audio_input_ids"].tolist()


# --------------------------------------------------------------------------------------------------- streamer
def _stream_batch():
    gen = torch.Generator().manual_seed(10)
    a, b = torch.randint(0, 1024, (40, C), generator=gen), torch.randint(0, 1024, (23, C), generator=gen)
    rows_a, rows_b = delayed_by_loop(a), delayed_by_loop(b)  # 47 and 30 rows
    rows_a[12, 2] = EOC  # a stray code in a real position
    rows_b = torch.cat([rows_b, torch.full((17, C), EOC)])  # b finished early; its later rows are ignored
    return torch.stack([rows_a, rows_b])  # [2, 47, C]


def _run_streamer(streamer, rows):
    for r in range(rows.shape[1]):
        streamer.put(rows[:, r])
    streamer.end()
    return list(streamer)


def test_streamed_chunks_equal_one_shot_decode(processor, codec):
    rows = _stream_batch()
    one_shot = processor.batch_decode(rows, codec=codec)
    assert [w.shape[0] for w in one_shot] == [40 * SPF, 23 * SPF]
    chunks = _run_streamer(processor.audio_streamer(codec, first_chunk_frames=5, chunk_frames=7), rows)
    assert chunks[0].shape == (2, 5 * SPF) and all(c.shape[1] == 7 * SPF for c in chunks[1:-1])
    streamed = torch.cat(chunks, dim=1)
    assert streamed.shape == (2, 40 * SPF)
    assert (streamed[0] - one_shot[0]).abs().max() < STREAM_TOLERANCE
    assert (streamed[1, : 23 * SPF] - one_shot[1]).abs().max() < STREAM_TOLERANCE
    assert torch.count_nonzero(streamed[1, 23 * SPF :]) == 0  # zeros after a sequence's end


@pytest.mark.parametrize("context", [0, 2, 3, 5])
def test_streamer_context_covers_the_receptive_field(processor, context):
    """With a decoder reaching +-3 frames, chunks match the one-shot decode exactly when context_frames >= 3 and
    differ at the chunk edges otherwise: the tolerance is a real check."""
    codec = ReachCodec(reach=3)
    rows = _stream_batch()
    one_shot = processor.batch_decode(rows, codec=codec)
    assert (one_shot[0][: 20 * SPF] - one_shot[1][: 20 * SPF]).abs().max() > 1.0  # other codes, other audio
    chunks = _run_streamer(processor.audio_streamer(codec, first_chunk_frames=5, chunk_frames=7, context_frames=context), rows)
    streamed = torch.cat(chunks, dim=1)
    error = max((streamed[0] - one_shot[0]).abs().max(), (streamed[1, : 23 * SPF] - one_shot[1]).abs().max())
    if context >= 3:
        assert error < STREAM_TOLERANCE
    else:
        assert error > 0.01


def test_streamer_first_chunk_timing_and_thread(processor, codec):
    rows = _stream_batch()[:1]
    streamer = processor.audio_streamer(codec, first_chunk_frames=4, chunk_frames=10, context_frames=3)
    for r in range(rows.shape[1]):
        streamer.put(rows[:, r])
        if not streamer._queue.empty():
            break
    assert r + 1 == 4 + 3 + 7  # first_chunk_frames + context_frames + C - 1 rows
    # Real use: generate puts rows in its thread while the notebook iterates.
    streamer = processor.audio_streamer(codec, timeout=60)

    def produce():
        for r in range(rows.shape[1]):
            streamer.put(rows[:, r : r + 1])  # [B, 1, C] works too
        streamer.end()

    thread = threading.Thread(target=produce)
    thread.start()
    chunks = list(streamer)
    thread.join()
    one_shot = processor.decode(rows[0], codec=codec)
    assert (torch.cat(chunks, dim=1)[0] - one_shot).abs().max() < STREAM_TOLERANCE


def test_streamer_refuses_prompt_shaped_input(codec):
    streamer = HiggsAudioV3AudioStreamer(codec)
    with pytest.raises(ValueError, match=re.escape(
        "The audio streamer takes delayed rows [batch, 8] (or [batch, k, 8]), got shape (1, 12); do not pass the prompt."
    )):
        streamer.put(torch.zeros(1, 12, dtype=torch.long))


# ------------------------------------------------------------------------------------ end to end (tiny model)
def make_tts_model():
    from conftest import tiny_model

    model = tiny_model(codec_config=tiny_codec_config())
    randomize_codebooks(model.codec)
    # What the converted repo's generation_config.json must carry. `use_cache` set: transformers 5.5's text-to-audio
    # pipeline copies the generation config into the model config, whose strict `use_cache: bool` refuses None.
    model.generation_config.max_new_tokens = 30
    model.generation_config.use_cache = True
    return model


@pytest.fixture(scope="module")
def tts_model():
    return make_tts_model()


@pytest.fixture(scope="module")
def tts_processor(tokenizer, tts_model):
    return HiggsAudioV3Processor.from_model_config(tokenizer, tts_model.config)


def test_text_to_waveform(tts_model, tts_processor):
    inputs = tts_processor(["Hello world.", "<|emotion:elation|>Hi!"])
    out = tts_model.generate(**inputs, seed=[3, 4], max_new_tokens=30, return_dict_in_generate=True)
    waves = tts_processor.batch_decode(out.sequences, codec=tts_model.codec, lengths=out.lengths)
    for wave, generated, frames in zip(waves, out.audio, out.audio_code_lengths.tolist()):
        assert frames > 0 and wave.shape == (frames * SPF,)
        assert torch.allclose(wave, generated, atol=1e-6)


def test_clone_with_a_generated_reference(tts_model, tts_processor, tmp_path):
    first = tts_model.generate(**tts_processor("The first chunk."), seed=5, return_dict_in_generate=True)
    (codes,) = tts_processor.sequences_to_codes(first.sequences, lengths=first.lengths)
    assert torch.equal(codes, first.audio_codes[0, : first.audio_code_lengths[0]])
    made = tts_processor.voice_from_codes(first.sequences[0, : first.lengths[0]], text="The first chunk.")
    assert torch.equal(made.codes, codes) and made.text == "The first chunk."
    voice = tts_processor.load_voice(made.save(tmp_path / "v.json"))
    inputs = tts_processor("The second chunk.", reference=voice)
    assert int((inputs["input_ids"] == -100).sum()) == codes.shape[0] + 7
    out = tts_model.generate(**inputs, seed=6, return_dict_in_generate=True)
    assert out.audio[0].shape == (int(out.audio_code_lengths[0]) * SPF,) and out.audio[0].shape[0] > 0
    # The same prompt from the codes and transcript directly generates the same codes.
    same = tts_model.generate(**tts_processor("The second chunk.", reference_codes=codes,
                                              reference_text="The first chunk."), seed=6, return_dict_in_generate=True)
    assert torch.equal(same.sequences, out.sequences)


def test_batch_with_mixed_references_matches_rows_alone(tts_model, tts_processor):
    voice = HiggsAudioV3Voice(codes=torch.randint(0, 1024, (6, C), generator=torch.Generator().manual_seed(11)),
                              text="A voice.")
    texts, references, seeds = ["One two three.", "Four."], [voice, None], [7, 8]
    batch = tts_model.generate(**tts_processor(texts, reference=references), seed=seeds, return_dict_in_generate=True)
    for row in range(2):
        alone = tts_model.generate(**tts_processor(texts[row], reference=references[row]), seed=seeds[row],
                                   return_dict_in_generate=True)
        length = int(alone.lengths[0])
        assert int(batch.lengths[row]) == length
        assert torch.equal(batch.sequences[row, :length], alone.sequences[0, :length])


def test_streamer_during_generate_equals_one_shot_audio(tts_model, tts_processor):
    inputs = tts_processor(["Streaming is fun.", "Short."])
    streamer = tts_processor.audio_streamer(tts_model.codec, first_chunk_frames=3, chunk_frames=5, timeout=120)
    result = {}
    thread = threading.Thread(target=lambda: result.update(out=tts_model.generate(
        **inputs, seed=[9, 10], streamer=streamer, return_dict_in_generate=True)))
    thread.start()
    chunks = list(streamer)
    thread.join()
    out = result["out"]
    streamed = torch.cat(chunks, dim=1)
    assert chunks[0].shape == (2, 3 * SPF)
    for row, wave in enumerate(out.audio):
        assert (streamed[row, : wave.shape[0]] - wave).abs().max() < STREAM_TOLERANCE
        assert torch.count_nonzero(streamed[row, wave.shape[0]:]) == 0
    assert streamed.shape[1] == max(w.shape[0] for w in out.audio)


def _pipeline(model, processor):
    from transformers import pipeline

    return pipeline("text-to-speech", model=model, tokenizer=processor.tokenizer, processor=processor)


def test_pipeline_one_text_and_a_batch(tts_model, tts_processor):
    pipe = _pipeline(tts_model, tts_processor)
    assert pipe.sampling_rate == 24000
    result = pipe("Hello there.", forward_params={"seed": 12, "max_new_tokens": 30})
    direct = tts_model.generate(**tts_processor("Hello there."), seed=12, max_new_tokens=30, return_dict_in_generate=True)
    assert set(result) == {"audio", "sampling_rate"} and result["sampling_rate"] == 24000
    assert isinstance(result["audio"], np.ndarray) and result["audio"].shape == direct.audio[0].shape
    assert np.allclose(result["audio"], direct.audio[0].numpy(), atol=1e-6)
    results = pipe(["Hello there.", "Bye."], forward_params={"seed": 12, "max_new_tokens": 30})
    assert isinstance(results, list) and len(results) == 2
    assert np.allclose(results[0]["audio"], direct.audio[0].numpy(), atol=1e-6)
    assert results[1]["audio"].ndim == 1 and results[1]["sampling_rate"] == 24000


def test_pipeline_batch_size_pads_on_the_left(tts_model, tts_processor):
    assert tts_processor.tokenizer.padding_side == "left"
    pipe = _pipeline(tts_model, tts_processor)
    texts = ["A much longer sentence than the other one.", "Short."]
    one_by_one = pipe(texts, forward_params={"seed": 15, "max_new_tokens": 30})
    batched = pipe(texts, forward_params={"seed": 15, "max_new_tokens": 30}, batch_size=2)
    for alone, together in zip(one_by_one, batched):
        assert alone["audio"].shape == together["audio"].shape
        assert np.allclose(alone["audio"], together["audio"], atol=1e-6)


def test_pipeline_voice_cloning_through_preprocess_params(tts_model, tts_processor):
    pipe = _pipeline(tts_model, tts_processor)
    voice = HiggsAudioV3Voice(codes=torch.randint(0, 1024, (5, C), generator=torch.Generator().manual_seed(13)),
                              text="Reference words.")
    result = pipe("Clone me.", preprocess_params={"reference": voice}, forward_params={"seed": 14, "max_new_tokens": 30})
    direct = tts_model.generate(**tts_processor("Clone me.", reference=voice), seed=14, max_new_tokens=30,
                                return_dict_in_generate=True)
    assert np.allclose(result["audio"], direct.audio[0].numpy(), atol=1e-6)
    plain = pipe("Clone me.", forward_params={"seed": 14, "max_new_tokens": 30})
    assert plain["audio"].shape != result["audio"].shape or np.abs(plain["audio"] - result["audio"]).max() > 1e-5


@pytest.mark.slow
def test_pipeline_from_a_saved_repo_in_subprocess(tts_processor, tmp_path):
    """The user route: `pipeline("text-to-speech", model=repo, trust_remote_code=True)` in a fresh process."""
    # A fresh model: on transformers 5.5 a pipeline built on a model object writes generation options into its config,
    # which `save_pretrained` then refuses.
    tts_model = make_tts_model()
    repo = tmp_path / "repo"
    tts_model.save_pretrained(repo)
    tts_processor.save_pretrained(repo)
    script = textwrap.dedent(
        f"""
        import json
        from transformers import pipeline
        pipe = pipeline("text-to-speech", model={str(repo)!r}, trust_remote_code=True)
        one = pipe("Hello there.", forward_params={{"seed": 12, "max_new_tokens": 30}})
        two = pipe(["Hello there.", "Bye."], forward_params={{"seed": 12, "max_new_tokens": 30}})
        print(json.dumps({{
            "processor": type(pipe.processor).__name__,
            "one": [one["sampling_rate"], one["audio"].tolist()],
            "two": [[r["sampling_rate"], r["audio"].shape[0]] for r in two],
        }}))
        """
    )
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    direct = tts_model.generate(**tts_processor("Hello there."), seed=12, max_new_tokens=30, return_dict_in_generate=True)
    assert loaded["processor"] == "HiggsAudioV3Processor"
    assert loaded["one"][0] == 24000
    assert np.allclose(np.array(loaded["one"][1], dtype=np.float32), direct.audio[0].numpy(), atol=1e-6)
    assert loaded["two"][0] == [24000, direct.audio[0].shape[0]] and loaded["two"][1][0] == 24000
