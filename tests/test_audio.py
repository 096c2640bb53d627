# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Codes <-> audio through the model and its codec: `model.encode_reference`, `model.decode_audio` /
`rows_to_codes`, `HiggsAudioV3Codec.decode_frames`, the audio streamer, text to waveform with a tiny model, and the
text-to-speech pipeline.

Expected codes come from calling the codec directly on an independently resampled and padded waveform; expected
waveforms from the codec's own `decode` of codes cleaned by hand or by the loop oracle of spec §6
(`oracles.rows_to_codes_by_loop`, whose ends come from the spec's state machine).
`ReachCodec` is a stand-in decoder with an exactly known receptive field, so that streaming comparisons are sharp.
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
import torch
import torch.nn.functional as F
from conftest import tiny_model, tiny_tts_model
from oracles import BOC, EOC, NUM_CODEBOOKS, delayed_by_loop, rows_to_codes_by_loop

from higgs_v3 import modeling_higgs_v3
from higgs_v3.audio_io_higgs_v3 import HiggsAudioV3Voice
from higgs_v3.codec_higgs_v3 import resample_audio
from higgs_v3.delay_higgs_v3 import rows_to_codes
from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor
from higgs_v3.streaming_higgs_v3 import HiggsAudioV3AudioStreamer


C = NUM_CODEBOOKS
SPF = 960  # samples per frame at 24 kHz, 25 frames per second
# Largest |a - b| between two decodes of the same codes that differ only in float rounding (batching, chunk windows).
# The tiny codec's waveforms are about 5e-3 with a code-dependent part of about 1e-5 and rounding of about 2e-9, so
# 2e-8 tells rounding from a wrong code or missing context; `ReachCodec`'s samples are of order 10 (rounding 1e-6).
# Tests that rely on the separation assert it.
TINY_CODEC_TOLERANCE = 2e-8
REACH_CODEC_TOLERANCE = 1e-5
MAX_ROWS = 16  # rows per generation (9 frames): few, to be fast


# ----------------------------------------------------------------------------------------------------- helpers
def tolerance(model) -> float:
    return REACH_CODEC_TOLERANCE if isinstance(model.codec, ReachCodec) else TINY_CODEC_TOLERANCE


class ReachCodec(torch.nn.Module):
    """A stand-in codec with an exactly known receptive field: each frame's codes give a value (a per-codebook table),
    the values are mixed over +-`reach` frames (zero padded at the clip edges, like the real decoder's convolutions)
    and spread over the frame's 960 samples. Strongly code dependent, so waveform comparisons are sharp.

    It has the two methods the model and the streamer call on a codec (`decode`, `decode_frames`), so
    `model.codec = ReachCodec()` swaps it in. `decode_frames` decodes every sequence alone at its own length (the
    obviously correct version of the codec's grouping)."""

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

    def decode_frames(self, codes: torch.Tensor, code_lengths=None) -> list[torch.Tensor]:  # [B, T, C] -> B x [n * 960]
        lengths = [codes.shape[1]] * codes.shape[0] if code_lengths is None else [int(n) for n in code_lengths]
        return [self.decode(codes[b : b + 1, :n].transpose(1, 2))[0, 0] if n else torch.zeros(0)
                for b, n in enumerate(lengths)]


def make_tts_model():
    return tiny_tts_model(MAX_ROWS)  # what the converted repo's generation_config.json must carry


# ----------------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tts_model():
    return make_tts_model()


@pytest.fixture(scope="module")
def codec(tts_model):
    return tts_model.codec


@pytest.fixture(scope="module")
def reach_model():
    """A tiny model whose codec is the `ReachCodec` stand-in."""
    model = tiny_model(seed=1)
    model.codec = ReachCodec()
    return model


@pytest.fixture(params=["tiny_codec", "reach_codec"])
def any_model(request, tts_model, reach_model):
    """The model with the real codec class (tiny, random codebooks), and with the sharply code-dependent stand-in."""
    return tts_model if request.param == "tiny_codec" else reach_model


@pytest.fixture(scope="module")
def processor(tokenizer, tts_model):
    return HiggsAudioV3Processor.from_model_config(tokenizer, tts_model.config)


# ---------------------------------------------------------------------------------------- encode_reference
def test_encode_reference_equals_the_codec_on_the_prepared_waveform(tts_model, codec, processor, tmp_path):
    clip = np.random.default_rng(2).uniform(-0.3, 0.3, size=8000).astype(np.float32)  # 0.5 s at 16 kHz
    voice = tts_model.encode_reference(clip, text="Hello there.", sampling_rate=16000)
    waveform = F.pad(resample_audio(torch.from_numpy(clip), 16000, 24000), (0, 12000))  # 1 s at 24 kHz
    with torch.no_grad():
        expected = codec.encode(waveform[None, None])[0].T  # [25, 8]
    assert isinstance(voice, HiggsAudioV3Voice)
    assert voice.codes.shape == (25, C) and torch.equal(voice.codes, expected)
    assert (voice.text, voice.sampling_rate, voice.frame_rate) == ("Hello there.", 24000, 25)
    # The clone prompt from it: the delayed codes at the placeholders, the transcript before them.
    out = processor("Speak.", reference=voice)
    assert torch.equal(out["audio_input_ids"], delayed_by_loop(expected))
    assert torch.equal(out["input_ids"], processor("Speak.", reference_codes=expected,
                                                   reference_text="Hello there.")["input_ids"])
    # From a file (float samples, so the file holds the clip exactly), without transcript.
    path = tmp_path / "clip.wav"
    soundfile.write(path, clip, 16000, subtype="FLOAT")
    from_file = tts_model.encode_reference(path)
    assert torch.equal(from_file.codes, expected) and from_file.text is None


def test_encode_reference_refusals(model, tts_model):
    with pytest.raises(ValueError, match=re.escape(
        "Encoding reference audio needs the codec, and this model has none (config.codec_config is None): load a "
        "converted checkpoint that includes it."
    )):
        model.encode_reference(np.zeros(24000, dtype=np.float32), sampling_rate=24000)
    with pytest.raises(ValueError, match=re.escape(
        "Reference audio is 100.00 s long (800001 samples at 8000 Hz); the longest accepted is 100 s. Use a shorter"
    )):
        tts_model.encode_reference(np.zeros(800001, dtype=np.float32), sampling_rate=8000)
    with pytest.raises(ValueError, match=re.escape("Reference audio is an array of samples without its sampling rate")):
        tts_model.encode_reference(np.zeros(24000, dtype=np.float32))


# ---------------------------------------------------------------------------------------- rows -> audio
def test_decode_audio_equals_codec_decode(any_model):
    model, codec = any_model, any_model.codec
    raw = torch.randint(0, 1024, (12, C), generator=torch.Generator().manual_seed(5))
    delayed = delayed_by_loop(raw)
    delayed[5, 3] = EOC  # stray EOC/BOC sampled in real positions decode as code 0
    delayed[9, 0] = BOC
    cleaned = raw.clone()
    cleaned[5 - 3, 3] = 0
    cleaned[9, 0] = 0
    assert torch.equal(rows_to_codes_by_loop(delayed[None])[0][0], cleaned)
    with torch.no_grad():
        expected = codec.decode(cleaned.T[None])[0, 0]
        uncleaned = codec.decode(raw.T[None])[0, 0]
    assert (expected - uncleaned).abs().max() > 10 * tolerance(model)  # the two stray codes matter
    codes, code_lengths = rows_to_codes(delayed[None], BOC, EOC)
    assert torch.equal(codes[0], cleaned) and code_lengths.tolist() == [12]
    (waveform,) = model.decode_audio(delayed[None])
    assert waveform.shape == (12 * SPF,) and waveform.dtype == torch.float32
    assert torch.equal(waveform, expected)
    (same,) = model.decode_audio(delayed[None], torch.tensor([delayed.shape[0]]))
    assert torch.equal(same, waveform)


def test_decode_audio_finds_each_sequence_end(any_model):
    model, codec = any_model, any_model.codec
    gen = torch.Generator().manual_seed(6)
    a, b, c = (torch.randint(0, 1024, (n, C), generator=gen) for n in (20, 9, 25))
    rows_a, rows_b = delayed_by_loop(a), delayed_by_loop(b)  # 27 and 16 rows, EOC at rows 20 and 9 of codebook 0
    rows_c = delayed_by_loop(c)[:18]  # hit max_new_tokens: no EOC in codebook 0 yet -> 18 - 7 = 11 frames
    rows_b = torch.cat([rows_b, torch.full((27 - 16, C), EOC)])  # finished rows padded after their end
    rows_c = torch.cat([rows_c, torch.full((27 - 18, C), 7)])
    batch = torch.stack([rows_a, rows_b, rows_c])
    lengths = torch.tensor([27, 16, 18])
    codes, code_lengths = rows_to_codes(batch, BOC, EOC, lengths)
    oracle_codes, oracle_frames = rows_to_codes_by_loop(batch, lengths=lengths.tolist())
    assert code_lengths.tolist() == oracle_frames == [20, 9, 11] and torch.equal(codes, oracle_codes)
    assert codes.shape == (3, 20, C)
    for row, (raw, n) in enumerate(zip((a, b, c[:11]), (20, 9, 11))):
        assert torch.equal(codes[row, :n], raw)
        assert torch.count_nonzero(codes[row, n:]) == 0  # frames beyond a sequence's length are 0
    waves = model.decode_audio(batch, lengths)
    with torch.no_grad():
        for wave, raw in zip(waves, (a, b, c[:11])):
            assert wave.shape == (raw.shape[0] * SPF,)
            assert torch.equal(wave, codec.decode(raw.T[None])[0, 0])  # lengths differ: each decoded alone
    # Without lengths the EOC rule alone finds the ends of a and b (c never ended: all its rows count).
    found_codes, found = rows_to_codes(batch, BOC, EOC)
    oracle_codes, oracle_frames = rows_to_codes_by_loop(batch)
    assert found.tolist() == oracle_frames == [20, 9, 20] and torch.equal(found_codes, oracle_codes)
    assert [w.shape[0] for w in model.decode_audio(batch)] == [20 * SPF, 9 * SPF, 20 * SPF]
    assert torch.equal(model.decode_audio(batch)[1], waves[1])


def test_early_eoc_in_codebook_0_is_not_an_end():
    raw = torch.randint(0, 1024, (10, C), generator=torch.Generator().manual_seed(7))
    rows = delayed_by_loop(raw)
    rows[3, 0] = EOC  # during the first C rows EOC is not checked: it is a stray code, decoded as 0
    codes, code_lengths = rows_to_codes(rows[None], BOC, EOC)
    expected = raw.clone()
    expected[3, 0] = 0
    assert code_lengths.tolist() == [10] and torch.equal(codes[0], expected)


def test_decode_frames_groups_equal_lengths(codec, monkeypatch):
    codes = torch.randint(0, 1024, (4, 6, C), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        alone = [codec.decode(codes[i : i + 1, :n].transpose(1, 2))[0, 0] for i, n in enumerate((6, 3, 6))]
    calls = []
    decode = codec.decode
    monkeypatch.setattr(codec, "decode", lambda frames: calls.append(tuple(frames.shape)) or decode(frames))
    waves = codec.decode_frames(codes, torch.tensor([6, 3, 6, 0]))
    assert calls == [(1, C, 3), (2, C, 6)]  # equal lengths together, an empty sequence not at all
    assert [w.shape for w in waves] == [(6 * SPF,), (3 * SPF,), (6 * SPF,), (0,)]
    assert all(w.dtype == torch.float32 for w in waves)
    for wave, expected in zip(waves, alone):
        assert (wave - expected).abs().max() <= TINY_CODEC_TOLERANCE
    assert (alone[0] - alone[2]).abs().max() > 100 * TINY_CODEC_TOLERANCE  # other codes, other audio
    calls.clear()
    assert [w.shape for w in codec.decode_frames(codes[:2])] == [(6 * SPF,), (6 * SPF,)]  # no lengths: every frame
    assert calls == [(2, C, 6)]


def test_decode_refusals(model, tts_model):
    """A model without a codec: one method, one wording, for every way to the codec (the streamer built directly
    too). Bad rows: the codes rule (`delay_higgs_v3.check_codes`) with the delayed rows' range."""
    rows = torch.zeros(1, 9, C, dtype=torch.long)
    for purpose, call in (("Decoding codes to audio", lambda: model.decode_audio(rows)),
                          ("Streaming audio", model.audio_streamer),
                          ("Streaming audio", lambda: HiggsAudioV3AudioStreamer(model)),
                          ("output_audio=True", lambda: model.generate(input_ids=torch.tensor([[151667, 151672, 151670]]),
                                                                       output_audio=True))):
        with pytest.raises(ValueError, match=re.escape(
            f"{purpose} needs the codec, and this model has none (config.codec_config is None): load a converted "
            "checkpoint that includes it."
        )):
            call()
    rule = "Sequences must be integer codes [batch, frames, 8] with at least 1 frame, each in 0..1025; got "
    for rows, got in ((torch.zeros(9, C, dtype=torch.long), "shape (9, 8)"),
                      (torch.zeros(1, 9, 4, dtype=torch.long), "shape (1, 9, 4)"),
                      (torch.full((1, 9, C), -1), "values from -1 to -1"),
                      (torch.full((1, 9, C), 1026), "values from 1026 to 1026"),
                      (torch.zeros(1, 9, C), "Tensor of dtype torch.float32")):
        with pytest.raises(ValueError, match=re.escape(rule + got + ".")):
            tts_model.decode_audio(rows)


def test_decode_audio_warns_about_sequences_without_a_frame(tts_model, monkeypatch):
    warnings = []
    monkeypatch.setattr(modeling_higgs_v3.logger, "warning", warnings.append)
    waves = tts_model.decode_audio(torch.zeros(2, 9, C, dtype=torch.long), torch.tensor([9, 5]))
    assert [w.shape[0] for w in waves] == [2 * SPF, 0]
    assert warnings == [
        "Sequence(s) [1] have no complete audio frame (fewer than 8 valid rows): their waveforms are empty."
    ]


# --------------------------------------------------------------------------------------------------- streamer
def _stream_batch(frames_a: int = 40, frames_b: int = 23):
    """Two sequences' delayed rows `[2, frames_a + 7, C]`: `a` with a stray EOC in a real position, `b` finished early
    (its rows after the end are EOC padding)."""
    gen = torch.Generator().manual_seed(10)
    a, b = torch.randint(0, 1024, (frames_a, C), generator=gen), torch.randint(0, 1024, (frames_b, C), generator=gen)
    rows_a, rows_b = delayed_by_loop(a), delayed_by_loop(b)
    rows_a[12, 2] = EOC  # a stray code in a real position
    rows_b = torch.cat([rows_b, torch.full((frames_a - frames_b, C), EOC)])  # b's later rows are ignored
    return torch.stack([rows_a, rows_b])


def _run_streamer(streamer, rows):
    for r in range(rows.shape[1]):
        streamer.put(rows[:, r])
    streamer.end()
    return list(streamer)


def test_streamed_chunks_equal_one_shot_decode(tts_model):
    """The real codec class with the default context (12 frames), and with too little context (2 frames: its decoder
    reaches about 10 frames each side) to show that the tolerance is a real check."""
    rows = _stream_batch(frames_a=24, frames_b=13)
    one_shot = tts_model.decode_audio(rows)
    assert [w.shape[0] for w in one_shot] == [24 * SPF, 13 * SPF]
    chunks = _run_streamer(tts_model.audio_streamer(first_chunk_frames=3, chunk_frames=4), rows)
    assert len(chunks) > 2 and chunks[0].shape == (2, 3 * SPF) and all(c.shape[1] == 4 * SPF for c in chunks[1:-1])
    assert all(c.dtype == torch.float32 and c.device.type == "cpu" for c in chunks)
    streamed = torch.cat(chunks, dim=1)
    assert streamed.shape == (2, 24 * SPF)
    assert (streamed[0] - one_shot[0]).abs().max() <= TINY_CODEC_TOLERANCE
    assert (streamed[1, : 13 * SPF] - one_shot[1]).abs().max() <= TINY_CODEC_TOLERANCE
    assert torch.count_nonzero(streamed[1, 13 * SPF :]) == 0  # zeros after a sequence's end
    short = torch.cat(_run_streamer(tts_model.audio_streamer(first_chunk_frames=3, chunk_frames=4, context_frames=2),
                                    rows), dim=1)
    assert (short[0] - one_shot[0]).abs().max() > 10 * TINY_CODEC_TOLERANCE


@pytest.mark.parametrize("context", [0, 2, 3, 5])
def test_streamer_context_covers_the_receptive_field(reach_model, context):
    """With a decoder reaching +-3 frames, chunks match the one-shot decode exactly when context_frames >= 3 and
    differ at the chunk edges otherwise: the tolerance is a real check."""
    rows = _stream_batch()
    one_shot = reach_model.decode_audio(rows)
    assert (one_shot[0][: 20 * SPF] - one_shot[1][: 20 * SPF]).abs().max() > 1.0  # other codes, other audio
    streamer = reach_model.audio_streamer(first_chunk_frames=5, chunk_frames=7, context_frames=context)
    streamed = torch.cat(_run_streamer(streamer, rows), dim=1)
    error = max((streamed[0] - one_shot[0]).abs().max(), (streamed[1, : 23 * SPF] - one_shot[1]).abs().max())
    if context >= 3:
        assert error < REACH_CODEC_TOLERANCE
    else:
        assert error > 0.01


def test_streamer_first_chunk_timing_and_thread(reach_model):
    rows = _stream_batch()[:1]
    streamer = reach_model.audio_streamer(first_chunk_frames=4, chunk_frames=10, context_frames=3)
    for r in range(rows.shape[1]):
        streamer.put(rows[:, r])
        if not streamer._queue.empty():
            break
    assert r + 1 == 4 + 3 + 7  # first_chunk_frames + context_frames + C - 1 rows
    # Real use: generate puts rows in its thread while the notebook iterates.
    streamer = reach_model.audio_streamer(timeout=60)

    def produce():
        for r in range(rows.shape[1]):
            streamer.put(rows[:, r : r + 1])  # [B, 1, C] works too
        streamer.end()

    thread = threading.Thread(target=produce)
    thread.start()
    chunks = list(streamer)
    thread.join()
    (one_shot,) = reach_model.decode_audio(rows)
    assert (torch.cat(chunks, dim=1)[0] - one_shot).abs().max() < REACH_CODEC_TOLERANCE


@pytest.mark.parametrize("first, chunk, context", [(4, 10, 3), (1, 25, 0), (5, 7, 3), (30, 5, 2)])
def test_rows_put_in_groups_ending_where_a_piece_is_due_give_the_pieces_of_rows_put_one_by_one(
        reach_model, first, chunk, context):
    """What the server's streamed chunks rely on (`piece_rows`, one codec job per piece): a sequence that runs on and
    one that ended (its rows up to its end, as the decode session hands them), put in groups that end at
    `piece_rows(k)` and at the end, give exactly the pieces of the same rows put one by one."""
    both = _stream_batch()
    for rows in (both[:1], both[1:, : 23 + C - 1]):
        def streamer():
            return reach_model.audio_streamer(first_chunk_frames=first, chunk_frames=chunk, context_frames=context)

        one_by_one = _run_streamer(streamer(), rows)
        grouped, start, k = streamer(), 0, 0
        assert grouped.piece_rows(0) == first + context + C - 1 and grouped.piece_rows(2) - grouped.piece_rows(1) == chunk
        while grouped.piece_rows(k) <= rows.shape[1]:
            grouped.put(rows[:, start : grouped.piece_rows(k)])
            start, k = grouped.piece_rows(k), k + 1
        if start < rows.shape[1]:
            grouped.put(rows[:, start:])
        grouped.end()
        pieces = list(grouped)
        assert len(pieces) == len(one_by_one) and all(map(torch.equal, pieces, one_by_one))


def test_streamer_refusals(reach_model):
    streamer = HiggsAudioV3AudioStreamer(reach_model)
    with pytest.raises(ValueError, match=re.escape(
        "A Higgs Audio v3 streamer takes delayed rows [batch, 8] (or [batch, k, 8]), got shape (1, 12); do not pass "
        "the prompt."
    )):
        streamer.put(torch.zeros(1, 12, dtype=torch.long))
    streamer.put(torch.zeros(2, C, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape("The batch size changed from 2 to 1 while streaming.")):
        streamer.put(torch.zeros(1, C, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape(
        "first_chunk_frames (0) and chunk_frames (25) must be at least 1 and context_frames (-1) at least 0."
    )):
        reach_model.audio_streamer(first_chunk_frames=0, context_frames=-1)


# ------------------------------------------------------------------------------------ end to end (tiny model)
def test_text_to_waveform(tts_model, codec, processor):
    inputs = processor(["Hello world.", "<|emotion:elation|>Hi!"])
    out = tts_model.generate(**inputs, seed=[3, 4], return_dict_in_generate=True)
    assert out.sequences.shape[1] == MAX_ROWS
    waves = tts_model.decode_audio(out.sequences, out.lengths)
    oracle_codes, oracle_frames = rows_to_codes_by_loop(out.sequences)  # ends found by the spec's state machine
    assert out.audio_code_lengths.tolist() == oracle_frames and torch.equal(out.audio_codes, oracle_codes)
    for row, (wave, generated, frames) in enumerate(zip(waves, out.audio, oracle_frames)):
        codes = oracle_codes[row, :frames]
        assert frames > 0
        with torch.no_grad():
            expected = codec.decode(codes.T[None])[0, 0]
        assert wave.shape == generated.shape == (frames * SPF,)
        assert torch.equal(wave, generated)
        assert (generated - expected).abs().max() <= TINY_CODEC_TOLERANCE  # decoded in a batch of two


def test_clone_with_a_generated_reference(tts_model, processor, tmp_path):
    first = tts_model.generate(**processor("The first chunk."), seed=5, return_dict_in_generate=True)
    frames = int(first.audio_code_lengths[0])
    codes = first.audio_codes[0, :frames]
    oracle_codes, oracle_frames = rows_to_codes_by_loop(first.sequences)
    assert oracle_frames == [frames] and torch.equal(codes, oracle_codes[0, :frames])
    made = HiggsAudioV3Voice(codes=codes, text="The first chunk.")
    voice = processor.load_voice(made.save(tmp_path / "v.json"))
    assert torch.equal(voice.codes, codes) and voice.text == "The first chunk."
    inputs = processor("The second chunk.", reference=voice)
    assert int((inputs["input_ids"] == -100).sum()) == frames + 7
    out = tts_model.generate(**inputs, seed=6, return_dict_in_generate=True)
    assert out.audio[0].shape == (int(out.audio_code_lengths[0]) * SPF,) and out.audio[0].shape[0] > 0
    # The same prompt from the codes and transcript directly generates the same rows.
    inputs = processor("The second chunk.", reference_codes=codes, reference_text="The first chunk.")
    same = tts_model.generate(**inputs, seed=6, return_dict_in_generate=True)
    assert torch.equal(same.sequences, out.sequences)


def test_batch_with_mixed_references_matches_rows_alone(tts_model, processor):
    voice = HiggsAudioV3Voice(codes=torch.randint(0, 1024, (6, C), generator=torch.Generator().manual_seed(11)),
                              text="A voice.")
    texts, references, seeds = ["One two three.", "Four."], [voice, None], [7, 8]
    batch = tts_model.generate(**processor(texts, reference=references), seed=seeds, return_dict_in_generate=True)
    for row in range(2):
        alone = tts_model.generate(**processor(texts[row], reference=references[row]), seed=seeds[row],
                                   return_dict_in_generate=True)
        length = int(alone.lengths[0])
        assert int(batch.lengths[row]) == length
        assert torch.equal(batch.sequences[row, :length], alone.sequences[0, :length])
        assert (batch.audio[row] - alone.audio[0]).abs().max() <= TINY_CODEC_TOLERANCE


def test_streamer_during_generate_equals_one_shot_audio(tts_model, processor):
    inputs = processor(["Streaming is fun.", "Short."])
    # 24 rows (17 frames): a first chunk after 3 + 8 + 7 rows, a second after 5 more, the rest at the end.
    streamer = tts_model.audio_streamer(first_chunk_frames=3, chunk_frames=5, context_frames=8, timeout=120)
    result = {}
    thread = threading.Thread(target=lambda: result.update(out=tts_model.generate(
        **inputs, seed=[9, 10], max_new_tokens=24, streamer=streamer, return_dict_in_generate=True)))
    thread.start()
    chunks = list(streamer)
    thread.join()
    out = result["out"]
    streamed = torch.cat(chunks, dim=1)
    assert [c.shape[1] for c in chunks] == [3 * SPF, 5 * SPF, 9 * SPF]
    for row, wave in enumerate(out.audio):
        assert (streamed[row, : wave.shape[0]] - wave).abs().max() <= TINY_CODEC_TOLERANCE
        assert torch.count_nonzero(streamed[row, wave.shape[0]:]) == 0
    assert streamed.shape[1] == max(w.shape[0] for w in out.audio)


# ---------------------------------------------------------------------------------------------------- pipeline
@pytest.fixture(scope="module")
def pipe(tts_model, processor):
    from transformers import pipeline

    return pipeline("text-to-speech", model=tts_model, tokenizer=processor.tokenizer, processor=processor)


def test_pipeline_one_text_and_a_batch(tts_model, processor, pipe):
    assert pipe.sampling_rate == 24000
    # max_new_tokens in forward_params, as the README says: transformers 5.5's pipeline replaces the repo's value by 256.
    result = pipe("Hello there.", forward_params={"seed": 12, "max_new_tokens": MAX_ROWS})
    direct = tts_model.generate(**processor("Hello there."), seed=12, return_dict_in_generate=True)
    assert set(result) == {"audio", "sampling_rate"} and result["sampling_rate"] == 24000
    assert isinstance(result["audio"], np.ndarray) and result["audio"].shape == direct.audio[0].shape
    assert np.array_equal(result["audio"], direct.audio[0].numpy())
    results = pipe(["Hello there.", "Bye."], forward_params={"seed": 12, "max_new_tokens": MAX_ROWS})
    assert isinstance(results, list) and len(results) == 2
    assert np.array_equal(results[0]["audio"], direct.audio[0].numpy())
    assert results[1]["audio"].ndim == 1 and results[1]["sampling_rate"] == 24000


def test_pipeline_keeps_the_models_max_new_tokens(tts_model, processor, pipe):
    """Without `max_new_tokens` in `forward_params` the model's own (`MAX_ROWS`) holds: transformers 5.5's pipeline
    passed its default config (`max_new_tokens=256`) to `_prepare_generation_config` as if a user had set it
    (`compat_higgs_v3.prepare_generation_config` ranks it below the model's); a user's own config still wins."""
    from transformers import GenerationConfig
    from transformers.pipelines.text_to_audio import TextToAudioPipeline

    result = pipe("Hello there.", forward_params={"seed": 12})
    direct = tts_model.generate(**processor("Hello there."), seed=12, return_dict_in_generate=True)
    assert np.array_equal(result["audio"], direct.audio[0].numpy())
    pipeline_default = TextToAudioPipeline._default_generation_config
    assert pipeline_default.max_new_tokens == 256 and tts_model.generation_config.max_new_tokens == MAX_ROWS
    assert tts_model._prepare_generation_config(pipeline_default)[0].max_new_tokens == MAX_ROWS
    assert tts_model._prepare_generation_config(GenerationConfig(max_new_tokens=256))[0].max_new_tokens == 256
    assert pipeline_default.max_new_tokens == 256  # the pipeline class's object is left as it was


def test_pipeline_batch_size_pads_on_the_left(processor, pipe):
    assert processor.tokenizer.padding_side == "left"
    texts = ["A much longer sentence than the other one.", "Short."]
    one_by_one = pipe(texts, forward_params={"seed": 15})
    batched = pipe(texts, forward_params={"seed": 15}, batch_size=2)
    for alone, together in zip(one_by_one, batched):
        assert alone["audio"].shape == together["audio"].shape
        assert np.abs(alone["audio"] - together["audio"]).max() <= TINY_CODEC_TOLERANCE


def test_pipeline_batch_size_with_a_right_padding_tokenizer(tts_model, processor, tokenizer_dir):
    """A pipeline loaded from a repo gets its own tokenizer from the repo's files, which pad on the right (the
    converted repo keeps the original's tokenizer files byte for byte): its `batch_size=2` batches are right padded,
    and `generate` left-aligns them at its entry, so each text gets what it gets alone."""
    from transformers import AutoTokenizer, pipeline

    right = AutoTokenizer.from_pretrained(tokenizer_dir)
    assert right.padding_side == "right"
    pipe = pipeline("text-to-speech", model=tts_model, tokenizer=right, processor=processor)
    texts = ["A much longer sentence than the other one.", "Short."]
    batched = pipe(texts, forward_params={"seed": 15}, batch_size=2)
    for text, together in zip(texts, batched):
        alone = tts_model.generate(**processor(text), seed=15, return_dict_in_generate=True).audio[0].numpy()
        assert together["audio"].shape == alone.shape
        assert np.abs(together["audio"] - alone).max() <= TINY_CODEC_TOLERANCE


def test_pipeline_voice_cloning_through_preprocess_params(tts_model, processor, pipe):
    clip = np.random.default_rng(4).uniform(-0.3, 0.3, size=24000).astype(np.float32)
    voice = tts_model.encode_reference(clip, text="Reference words.", sampling_rate=24000)
    result = pipe("Clone me.", preprocess_params={"reference": voice}, forward_params={"seed": 14, "max_new_tokens": MAX_ROWS})
    direct = tts_model.generate(**processor("Clone me.", reference=voice), seed=14, return_dict_in_generate=True)
    assert np.array_equal(result["audio"], direct.audio[0].numpy())
    plain = pipe("Clone me.", forward_params={"seed": 14})
    assert plain["audio"].shape != result["audio"].shape or (
        np.abs(plain["audio"] - result["audio"]).max() > 100 * TINY_CODEC_TOLERANCE)


def test_pipeline_takes_a_chat_and_refuses_prompts_without_the_processor(tts_model, processor, pipe):
    """A chat input goes through `processor.apply_chat_template`; a pipeline given the tokenizer alone (so plain
    tokenizer output, without `<|tts|>` ... `<|audio|>`) is refused by `generate`, which names the processor."""
    from transformers import pipeline

    chat = [{"role": "user", "content": [{"type": "text", "text": "Hello there."}]}]
    result = pipe(chat, forward_params={"seed": 12, "max_new_tokens": MAX_ROWS})
    direct = tts_model.generate(**processor("Hello there."), seed=12, max_new_tokens=MAX_ROWS, return_dict_in_generate=True)
    assert np.array_equal(result["audio"], direct.audio[0].numpy())
    tokenizer_only = pipeline("text-to-speech", model=tts_model, tokenizer=processor.tokenizer)
    with pytest.raises(ValueError, match=re.escape(
        "input_ids row(s) [0] are not Higgs Audio v3 speech prompts (<|tts|> ... <|text|> TEXT <|audio|>, left "
        "padded); plain tokenizer output would generate sound without a word. Build the inputs with "
        "HiggsAudioV3Processor")):
        tokenizer_only("Hello there.", forward_params={"seed": 12, "max_new_tokens": MAX_ROWS})


@pytest.mark.integration
def test_pipeline_from_a_saved_repo_in_subprocess(processor, tmp_path):
    """The user route: `pipeline("text-to-speech", model=repo, trust_remote_code=True)` in a fresh process."""
    # A fresh model: on transformers 5.5 a pipeline built on a model object writes generation options into its config,
    # which `save_pretrained` then refuses.
    tts_model = make_tts_model()
    repo = tmp_path / "repo"
    tts_model.save_pretrained(repo)
    processor.save_pretrained(repo)
    script = textwrap.dedent(
        f"""
        import json
        from transformers import pipeline
        pipe = pipeline("text-to-speech", model={str(repo)!r}, trust_remote_code=True)
        one = pipe("Hello there.", forward_params={{"seed": 12}})
        two = pipe(["Hello there.", "Bye."], forward_params={{"seed": 12}})
        batched = pipe(["Hello there.", "Bye."], forward_params={{"seed": 12}}, batch_size=2)  # right padded
        print(json.dumps({{
            "processor": type(pipe.processor).__name__,
            "one": [one["sampling_rate"], one["audio"].tolist()],
            "two": [[r["sampling_rate"], r["audio"].shape[0]] for r in two],
            "batched": [[r["sampling_rate"], r["audio"].shape[0]] for r in batched],
            "tokenizer_padding_side": pipe.tokenizer.padding_side,
        }}))
        """
    )
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    direct = tts_model.generate(**processor("Hello there."), seed=12, return_dict_in_generate=True)
    assert loaded["processor"] == "HiggsAudioV3Processor"
    assert loaded["one"][0] == 24000
    assert np.abs(np.array(loaded["one"][1], dtype=np.float32) - direct.audio[0].numpy()).max() <= TINY_CODEC_TOLERANCE
    assert loaded["two"][0] == [24000, direct.audio[0].shape[0]] and loaded["two"][1][0] == 24000
    assert loaded["tokenizer_padding_side"] == "right" and loaded["batched"] == loaded["two"]
