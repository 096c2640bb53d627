# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Speech while the text arrives (issue 24): `chunking_higgs_v3.stream_sentences` cuts a stream of text pieces at the
chunker's sentence boundaries as they arrive, and `longform_higgs_v3.synthesize_stream` speaks each sentence as soon as
it is complete, with the first one's voice and seed `seed + k`: the same audio as `synthesize_long` over the same
chunks, one at a time."""

from __future__ import annotations

import pytest
import torch

from higgs_v3.chunking_higgs_v3 import split_sentences, stream_sentences
from higgs_v3.longform_higgs_v3 import synthesize_long
from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor

from conftest import tiny_tts_model


def lazily(pieces, seen):
    """The pieces one at a time, recording in `seen` how many were taken."""
    for piece in pieces:
        seen.append(piece)
        yield piece


@pytest.mark.parametrize("pieces, sentences", [
    (["Hel", "lo. Dr.", " Smith is", " here! <|emo", "tion:anger|>Wow. 3.", "14 is pi."],
     ["Hello.", "Dr. Smith is here!", "<|emotion:anger|>Wow.", "3.14 is pi."]),
    (["第一句。第二", "句！", "最后"], ["第一句。", "第二句！", "最后"]),
    (["One.\n", "\n", "... ", "Two"], ["One.", "... Two"]),
    ([], []),
    (["  ", ""], []),
])
def test_stream_sentences_cut_as_split_sentences_cuts(pieces, sentences):
    assert list(stream_sentences(pieces)) == sentences
    text = "".join(pieces)
    assert sentences == [s.strip() for s in split_sentences(text) if s.strip()]


def test_a_sentence_comes_out_as_soon_as_the_next_begins():
    seen, stream = [], None
    stream = stream_sentences(lazily(["One.", " Two", " three.", " <|emotion:", "anger|>Four"], seen))
    assert next(stream) == "One." and seen == ["One.", " Two"]  # "One." alone may still be "One.com"
    assert next(stream) == "Two three." and len(seen) == 4  # not cut before the tag that arrives in pieces
    assert next(stream) == "<|emotion:anger|>Four" and len(seen) == 5
    with pytest.raises(ValueError, match="A text stream yields strings .*got int"):
        list(stream_sentences(["One. ", 2]))


@pytest.fixture(scope="module")
def tts(tokenizer):
    model = tiny_tts_model(max_new_tokens=8)  # the tiny model with its codec (built once per run, shared)
    return model, HiggsAudioV3Processor.from_model_config(tokenizer, model.config)


def test_synthesize_stream_speaks_each_sentence_as_it_completes(tts):
    model, processor = tts
    pieces = ["Hello there. How", " are you? Fi", "ne."]
    seen = []
    stream = processor.synthesize_stream(model, lazily(pieces, seen), seed=3, max_seconds=0.3)
    first = next(stream)
    assert seen == pieces[:1]  # sentence 1 spoken before the rest of the text arrived
    waveform = torch.cat([first, *stream])
    # The same chunks through synthesize_long, one per generate call: max_chars=12 packs no two sentences together.
    expected = synthesize_long(model, processor, "".join(pieces), seed=3, max_seconds=0.3, max_chars=12,
                               batch_size=1)
    assert [chunk.text for chunk in expected.chunks] == ["Hello there.", "How are you?", "Fine."]
    assert torch.equal(waveform, expected.waveform)


def test_synthesize_stream_refuses_a_bad_sentence_when_it_arrives(tts):
    model, processor = tts
    stream = processor.synthesize_stream(model, ["Fine. ", "<|emotion:nonsense|>Bad. ", "Never."], seed=0,
                                         max_seconds=0.1)
    assert next(stream).ndim == 1
    with pytest.raises(ValueError, match="sentence 2 of the stream"):
        list(stream)


def test_a_stray_tag_opening_and_a_long_sentence_do_not_hold_back_the_stream():
    from higgs_v3.chunking_higgs_v3 import SentenceCutter, split_text

    cutter = SentenceCutter()
    assert cutter.feed("One. <|" + "a" * 70) == ["One."]  # "<|" then 70 characters can no longer become a tag
    assert cutter.feed(" end. Two") == ["<|" + "a" * 70 + " end."]
    words = "word " * 30
    assert SentenceCutter(40).feed(words) == split_text(words, 40)[:-1]
    assert cutter.finish() == ["Two"] and cutter.finish() == []


def test_synthesize_stream_takes_synthesize_longs_take_options_and_normalize(tts):
    model, processor = tts
    waveform = torch.cat(list(processor.synthesize_stream(model, ["I have 3 ", "cats."], seed=3, max_seconds=0.3,
                                                          retries=0, normalize="en")))
    expected = synthesize_long(model, processor, "I have 3 cats.", seed=3, max_seconds=0.3, retries=0, normalize="en")
    assert [chunk.text for chunk in expected.chunks] == ["I have three cats."]
    assert torch.equal(waveform, expected.waveform)
    with pytest.raises(ValueError, match="retries must be an integer from 0 \\(no retry\\) to 10"):
        next(processor.synthesize_stream(model, ["Hi."], retries=-1))


def test_synthesize_stream_speaks_a_sentence_without_an_end_as_it_arrives(monkeypatch):
    """Text that never ends a sentence is cut at `max_chars` while it arrives (the WebSocket's `SentenceCutter`): each
    chunk is spoken before the next pieces are read, and the text the cutter splits stays bounded, so the work is
    linear in the text (it grew with its square)."""
    from higgs_v3 import chunking_higgs_v3, longform_higgs_v3
    from higgs_v3.longform_higgs_v3 import synthesize_stream

    seen, spoken, split_lengths = [], [], []
    real_split = chunking_higgs_v3.split_sentences
    monkeypatch.setattr(chunking_higgs_v3, "split_sentences", lambda text: split_lengths.append(len(text)) or
                        real_split(text))

    class Chunk:
        num_frames, waveform = 0, torch.zeros(2)

    def speak(self, jobs, voices, progress):
        spoken.append((jobs[0].text, len(seen)))
        return {jobs[0].index: Chunk()}

    monkeypatch.setattr(longform_higgs_v3._Synthesizer, "_run", speak)
    processor = type("Processor", (), {"check_text": lambda self, text, where: text})()
    model = type("Model", (), {"config": type("Config", (), {"audio_spec": None})()})()
    monkeypatch.setattr(longform_higgs_v3._Synthesizer, "__init__", lambda self, *a, **k: setattr(
        self, "pause_seconds", 0.0) or setattr(self, "spec", type("Spec", (), {"sampling_rate": 24000})()))
    list(synthesize_stream(model, processor, lazily(["word "] * 400, seen), max_chars=40))
    assert [text for text, _ in spoken] == chunking_higgs_v3.split_text("word " * 400, 40)
    assert spoken[0][1] <= 10  # the first chunk is spoken after at most 10 of the 400 pieces
    assert max(split_lengths) <= 40 + len("word ") + 1  # never the whole unfinished text
