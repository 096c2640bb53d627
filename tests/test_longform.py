# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Tests of long-form speech: the chunker and dialogue scripts (`chunking_higgs_v3`; property tests with hypothesis
plus worked examples), the progress counter, and long-form / dialogue synthesis (`longform_higgs_v3`) on a tiny random
model, also with voices, processors and models from a second import of the package (as remote code is imported).

The chunker properties are checked against texts whose sentence and clause boundaries are known by construction; the
synthesis tests record every `generate` call to check what each chunk was conditioned on, and derive the expected
delayed reference rows with an explicit loop over the spec's formula (§4).
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import LogitsProcessor, LogitsProcessorList

from higgs_v3.audio_io_higgs_v3 import HiggsAudioV3Voice, save_audio
from higgs_v3.chunking_higgs_v3 import parse_dialogue, split_sentences, split_text
from higgs_v3.delay_higgs_v3 import HiggsAudioV3AudioSpec
from higgs_v3.longform_higgs_v3 import SpeechProgress, resolve_voice, synthesize_dialogue, synthesize_long
from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration
from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor
from higgs_v3.testing.tiny import tiny_config
from oracles import BOC, EOC, NUM_CODEBOOKS, delayed_by_loop


C, SPF, SR = NUM_CODEBOOKS, 960, 24000
TAG = re.compile(r"<\|[^<>|\n]*\|>")
VALID_TAGS = ["<|emotion:anger|>", "<|prosody:pause|>", "<|sfx:laughter|>", "<|style:whispering|>"]


def spoken(text: str) -> int:
    """Spoken characters: tags removed, edges stripped (the chunker's documented measure, recomputed here)."""
    return len(TAG.sub("", text).strip())


def no_space(text: str) -> str:
    return "".join(text.split())


def check_invariants(text: str, chunks: list[str], max_chars: int) -> None:
    """What must hold for any text: rejoin modulo whitespace, tags intact and in order, size limit, no empty or
    unstripped chunk, no chunk but the last ending with a tag."""
    assert no_space("".join(chunks)) == no_space(text)
    assert [t for c in chunks for t in TAG.findall(c)] == TAG.findall(text)
    for chunk in chunks:
        assert chunk and chunk == chunk.strip()
        assert spoken(chunk) <= max_chars, (chunk, max_chars)
    for chunk in chunks[:-1]:
        assert not re.search(r"<\|[^<>|\n]*\|>$", chunk), chunks


# ------------------------------------------------------------------------------------- chunker: random texts
# Every character of these categories (no "Cs" surrogates) and of `include_characters` is valid UTF-8, so no `codec`:
# the same characters (and, derandomized, the same examples) without hypothesis' scan of all 1.1 M code points that
# `codec="utf-8"` costs on a fresh clone (1.5 to 2 s of the unit layer; cached in .hypothesis/ only afterwards).
_PIECES = st.one_of(
    st.text(
        alphabet=st.characters(
            categories=("Lu", "Ll", "Nd", "Lo", "Po", "Pe", "Pf", "Pd", "Zs"),
            include_characters=".!?…。！？，、；：,;:—\"'”」）\n\t <|>",
        ),
        max_size=25,
    ),
    st.sampled_from(VALID_TAGS + ["<|not a tag|>", "<||>", "<|a.b. c!|>"]),
)


# Few examples in the unit layer (the run must stay fast); `HYPOTHESIS_EXAMPLES=2000` searches harder (with
# `HYPOTHESIS_PROFILE=explore` for fresh examples, see conftest).
EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "40"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(_PIECES, max_size=30), max_chars=st.integers(1, 80))
def test_chunker_invariants_on_random_text(pieces, max_chars):
    text = "".join(pieces)
    chunks = split_text(text, max_chars)
    check_invariants(text, chunks, max_chars)
    assert (chunks == []) == (not text.strip())
    assert "".join(split_sentences(text)) == text


# ------------------------------------------------------------------------------ chunker: known sentence structure
LATIN_WORDS = ["alpha", "river", "stone", "weather", "1995", "quiet", "sun", "O'Neil", "x3"]
CJK_WORDS = ["你好", "世界", "天气", "今天", "很好", "我们", "ありがとう", "한국어"]


@st.composite
def sentences(draw):
    """(text, sentence spans, clause ends) built from words: the boundaries are known by construction."""
    parts, sentence_ends, clause_ends, long_sentences = [], [], [], []
    for _ in range(draw(st.integers(1, 8))):
        cjk = draw(st.booleans())
        words, comma, ends = (CJK_WORDS, "，", "。！？") if cjk else (LATIN_WORDS, ", ", ".!?…")
        sentence = draw(st.sampled_from(VALID_TAGS)) if draw(st.integers(0, 3)) == 0 else ""
        clauses = []
        for _ in range(draw(st.integers(1, 4))):
            clause_words = draw(st.lists(st.sampled_from(words), min_size=1, max_size=6))
            clauses.append(("" if cjk else " ").join(clause_words))
        sentence_text = sentence
        clause_offsets = []
        for i, clause in enumerate(clauses):
            sentence_text += clause
            if i < len(clauses) - 1:
                sentence_text += comma
                clause_offsets.append(len(no_space(sentence_text)))
        sentence_text += draw(st.sampled_from(ends))
        joiner = draw(st.sampled_from(["", " "] if cjk else [" ", "\n", "  "]))
        offset = len(no_space("".join(parts)))
        parts.append(sentence_text + joiner)
        clause_ends.append([offset + o for o in clause_offsets])
        sentence_ends.append(len(no_space("".join(parts))))
        long_sentences.append(sentence_text)
    return "".join(parts), sentence_ends, clause_ends, long_sentences


def chunk_bounds(chunks: list[str]) -> list[int]:
    """End offset of every chunk but the last, in the whitespace-free text."""
    ends, total = [], 0
    for chunk in chunks[:-1]:
        total += len(no_space(chunk))
        ends.append(total)
    return ends


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=sentences(), max_chars=st.integers(5, 120))
def test_chunker_cuts_at_sentences_then_clauses(data, max_chars):
    text, sentence_ends, clause_ends, sentence_texts = data
    chunks = split_text(text, max_chars)
    check_invariants(text, chunks, max_chars)
    starts = [0] + sentence_ends[:-1]
    for cut in chunk_bounds(chunks):
        if cut in sentence_ends:
            continue
        # A cut inside a sentence: only in a sentence longer than the limit ...
        index = next(i for i, (a, b) in enumerate(zip(starts, sentence_ends)) if a < cut < b)
        assert spoken(sentence_texts[index]) > max_chars, (sentence_texts[index], chunks)
        # ... and at a clause end whenever every clause of it (with its comma) fits.
        clauses = re.split(r"(?<=[,，])\s*", TAG.sub("", sentence_texts[index]))
        if max(len(clause.strip()) for clause in clauses) <= max_chars:
            assert cut in clause_ends[index], (cut, clause_ends[index], chunks)


def test_chunks_pack_whole_sentences_greedily():
    text = "One two. Three four five. Six. Seven eight nine."
    assert split_text(text, 17) == ["One two.", "Three four five.", "Six.", "Seven eight nine."]
    assert split_text(text, 24) == ["One two.", "Three four five. Six.", "Seven eight nine."]
    assert split_text(text, 25) == ["One two. Three four five.", "Six. Seven eight nine."]
    assert split_text(text, 1000) == [text]
    # A sentence over the limit is cut at spaces and its pieces are packed with the neighbours.
    assert split_text(text, 15) == ["One two.", "Three four", "five. Six.", "Seven eight", "nine."]


def test_long_sentence_cut_at_commas_then_spaces_then_characters():
    assert split_text("aaa bbb, ccc ddd, eee fff.", 9) == ["aaa bbb,", "ccc ddd,", "eee fff."]
    assert split_text("aaa bbb ccc ddd eee.", 8) == ["aaa bbb", "ccc ddd", "eee."]
    assert split_text("这是一个很长的句子没有标点", 5) == ["这是一个很", "长的句子没", "有标点"]
    assert split_text("我们今天，天气很好，出去走走吧。", 6) == ["我们今天，", "天气很好，", "出去走走吧。"]


def test_sentence_boundaries_cjk_quotes_abbreviations_and_numbers():
    assert split_sentences("你好。世界！好吗？是的") == ["你好。", "世界！", "好吗？", "是的"]
    assert split_sentences('He said "Stop!" Then left.') == ['He said "Stop!" ', "Then left."]
    assert split_sentences("Dr. Smith paid 3.50 dollars. J. R. R. Tolkien wrote. Done") == [
        "Dr. Smith paid 3.50 dollars. ", "J. R. R. Tolkien wrote. ", "Done"
    ]
    assert split_sentences("Line one\nLine two\n\nLine three") == ["Line one\n", "Line two\n\n", "Line three"]
    assert split_sentences("Wait... what?! No way") == ["Wait... ", "what?! ", "No way"]


def test_tags_stay_with_their_sentence_and_are_never_cut():
    text = "Hello there.<|emotion:anger|>Get out! <|sfx:laughter|>Haha. <|prosody:pause|>"
    assert split_sentences(text) == [
        "Hello there.", "<|emotion:anger|>Get out! ", "<|sfx:laughter|>Haha. <|prosody:pause|>"
    ]
    assert split_text(text, 12) == ["Hello there.", "<|emotion:anger|>Get out!", "<|sfx:laughter|>Haha. <|prosody:pause|>"]
    # A tag is not counted and not cut, even when the limit is smaller than the tag.
    assert split_text("<|style:whispering|>ab cd", 2) == ["<|style:whispering|>ab", "cd"]
    # A period inside something tag-shaped is not a boundary; a lone tag joins the next sentence.
    assert split_sentences("A <|x. y|> b. <|emotion:anger|> C.") == ["A <|x. y|> b. ", "<|emotion:anger|> C."]


def test_chunker_refuses_bad_limits():
    for bad in (0, -3, 2.5, True, "300"):
        with pytest.raises(ValueError, match=re.escape(f"max_chars must be a positive number of characters, got {bad!r}.")):
            split_text("Hello.", bad)
    assert split_text("   \n ", 10) == []


# --------------------------------------------------------------------------------------------- dialogue scripts
def test_parse_dialogue():
    lines = parse_dialogue("\n[Ann] Hi there.\n  [Bob]   Hello!\nHow are you?\n\n[Ann] <|emotion:elation|>Great.")
    assert [(l.speaker, l.text, l.line_number) for l in lines] == [
        ("Ann", "Hi there.", 2), ("Bob", "Hello! How are you?", 3), ("Ann", "<|emotion:elation|>Great.", 6)
    ]
    # (speaker, text) pairs and DialogueLines are taken as they are, numbered from 1.
    pairs = parse_dialogue([("Ann", "Hi."), lines[1]])
    assert [(l.speaker, l.text, l.line_number) for l in pairs] == [("Ann", "Hi.", 1), ("Bob", "Hello! How are you?", 3)]


@pytest.mark.parametrize(
    "script, message",
    [
        ("Hello.\n[Ann] Hi.", "Dialogue line 1 ('Hello.') has no speaker; every line of a dialogue script starts with [Name], e.g. '[Alice] Hello there.'"),
        ("[Ann] Hi.\n[Bob]", "Dialogue line 2 ([Bob]) is empty; there is nothing to speak."),
        ("[ ] Hi.", "Dialogue line 1 has an empty speaker name in brackets; write [Name] text."),
        ("\n  \n", "The dialogue script is empty; write one '[Name] text' line per turn."),
    ],
)
def test_parse_dialogue_refusals(script, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_dialogue(script)


# --------------------------------------------------------------------------------------------- progress counter
def test_progress_counts_frames_with_the_stopping_rule():
    """Spec §6 example with C = 3: T = 4 frames end with EOC on codebook 0 at row 4; an EOC on codebook 0 before row
    C is a stray code, not an end. A sequence still running after 6 rows has 6 - (C - 1) = 4 complete frames."""
    rows = torch.tensor(
        [
            [[1, BOC, BOC], [EOC, BOC, BOC]],  # row 0 (sequence 1: a stray EOC, ignored)
            [[2, 1, BOC], [5, 6, BOC]],
            [[3, 2, 1], [5, 6, 7]],
            [[4, 3, 2], [5, 6, 7]],
            [[EOC, 4, 3], [5, 6, 7]],  # row 4 = C + 1: sequence 0 ends with T = 4
            [[EOC, EOC, 4], [5, 6, 7]],
        ]
    )
    progress = SpeechProgress(HiggsAudioV3AudioSpec(num_codebooks=3), total_chunks=2, file=io.StringIO())
    streamer = progress.streamer()
    for row in rows:
        streamer.put(row)
    streamer.end()
    assert progress.bar.n == pytest.approx((4 + (6 - 2)) / 25)  # the complete frames shown, in seconds of audio


# --------------------------------------------------------------------------------------------- synthesis
@pytest.fixture(scope="module")
def tts(tokenizer):
    torch.manual_seed(0)
    model = HiggsAudioV3ForConditionalGeneration(tiny_config()).eval()
    processor = HiggsAudioV3Processor.from_model_config(tokenizer, model.config)
    return model, processor


class Recorder:
    """Wraps `model.generate` to record each call's batch size, seeds, input ids and reference rows."""

    def __init__(self, model, monkeypatch):
        self.calls = []
        original = model.generate

        def generate(**kwargs):
            self.calls.append(kwargs)
            return original(**kwargs)

        monkeypatch.setattr(model, "generate", generate)


class EndAfter(LogitsProcessor):
    """Forces EOC on codebook 0 of batch row b from step `steps[b]` on, and forbids it before (so that sequence has
    exactly `steps[b]` frames)."""

    def __init__(self, steps):
        self.steps = steps
        self.prompt_length = None

    def __call__(self, input_ids, scores):
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]
        step = input_ids.shape[1] - self.prompt_length
        for b, end in enumerate(self.steps):
            if step >= end:
                scores[b * C, :] = -float("inf")
                scores[b * C, EOC] = 0.0
            else:
                scores[b * C, EOC] = -float("inf")
        return scores


def test_long_text_first_chunk_becomes_the_voice(tts, monkeypatch):
    model, processor = tts
    recorder = Recorder(model, monkeypatch)
    text = "The first sentence is here. A second one follows it. Then a third. And the fourth one ends it."
    result = synthesize_long(model, processor, text, max_chars=30, batch_size=2, seed=100, max_seconds=0.4,
                             pause_seconds=0.25, retries=0)
    chunks = split_text(text, 30)
    assert [c.text for c in result.chunks] == chunks and len(chunks) == 4
    # Chunk 1 alone without reference; then batches of 2 with chunk 1's codes and text as the reference.
    assert [c["input_ids"].shape[0] for c in recorder.calls] == [1, 2, 1]
    assert "audio_input_ids" not in recorder.calls[0]
    assert [c["seed"] for c in recorder.calls] == [[100], [101, 102], [103]]
    assert all(c["max_new_tokens"] == 10 + 7 for c in recorder.calls)  # 0.4 s * 25 frames + 7 delay rows
    first = result.chunks[0]
    expected_rows = delayed_by_loop(first.codes)
    ref_text_ids = processor.tokenizer(chunks[0], add_special_tokens=False)["input_ids"]
    for call in recorder.calls[1:]:
        rows = call["audio_input_ids"].reshape(-1, expected_rows.shape[0], C)
        assert all(torch.equal(r.cpu(), expected_rows) for r in rows)
        for prompt in call["input_ids"].tolist():
            tts_at = prompt.index(processor.prompt_token_ids["tts"])
            assert prompt[tts_at + 1] == processor.prompt_token_ids["ref_text"]
            assert prompt[tts_at + 2 : tts_at + 2 + len(ref_text_ids)] == ref_text_ids
    assert torch.equal(result.voice.codes, first.codes) and result.voice.text == chunks[0]
    # The waveform: every chunk's audio with 0.25 s of zeros in between. A chunk that did not end by itself has the
    # limit's 10 frames (the random model rarely samples the end of speech).
    pause = round(0.25 * SR)
    frames = [c.num_frames for c in result.chunks]
    for chunk in result.chunks:
        assert chunk.waveform.shape == (chunk.num_frames * SPF,) and 0 < chunk.num_frames <= 10
        assert chunk.finished or chunk.num_frames == 10
    assert result.waveform.shape == (sum(frames) * SPF + 3 * pause,)
    position = 0
    for i, chunk in enumerate(result.chunks):
        assert torch.equal(result.waveform[position : position + chunk.waveform.shape[0]], chunk.waveform)
        position += chunk.waveform.shape[0]
        if i < 3:
            assert torch.count_nonzero(result.waveform[position : position + pause]) == 0
            position += pause
    assert result.unfinished_chunks == [i for i, c in enumerate(result.chunks) if not c.finished]
    assert result.duration == pytest.approx((sum(frames) * SPF + 3 * pause) / SR)
    assert result.speech_duration == pytest.approx(sum(frames) / 25)
    assert result.real_time_factor == pytest.approx(result.generation_seconds / (sum(frames) / 25))


def test_batch_size_does_not_change_the_result(tts):
    model, processor = tts
    text = "One small sentence. Another small sentence. A third small one. And a last one."
    one = synthesize_long(model, processor, text, max_chars=25, batch_size=1, seed=7, max_seconds=0.3)
    many = synthesize_long(model, processor, text, max_chars=25, batch_size=8, seed=7, max_seconds=0.3)
    assert len(one.chunks) == 4
    for a, b in zip(one.chunks, many.chunks):
        assert torch.equal(a.codes, b.codes)


def test_user_voice_is_used_for_every_chunk_and_ends_are_reported(tts, monkeypatch, tmp_path):
    model, processor = tts
    voice = HiggsAudioV3Voice(codes=torch.randint(0, 1024, (5, C), generator=torch.Generator().manual_seed(3)))
    path = voice.save(tmp_path / "voice.safetensors")
    recorder = Recorder(model, monkeypatch)
    text = "Alpha beta gamma. Delta epsilon. Zeta eta theta."
    result = synthesize_long(model, processor, text, reference=str(path), reference_text="The voice.", max_chars=18,
                             seed=0, max_seconds=1.0, logits_processor=LogitsProcessorList([EndAfter([9, 12, 20])]))
    assert len(recorder.calls) == 1 and recorder.calls[0]["input_ids"].shape[0] == 3
    expected_rows = delayed_by_loop(voice.codes)
    assert torch.equal(recorder.calls[0]["audio_input_ids"].cpu(), torch.cat([expected_rows] * 3))
    assert [c.num_frames for c in result.chunks] == [9, 12, 20]
    assert [c.finished for c in result.chunks] == [True, True, True] and result.unfinished_chunks == []
    assert result.waveform.shape == ((9 + 12 + 20) * SPF + 2 * round(0.3 * SR),)
    assert result.voice.text == "The voice." and torch.equal(result.voice.codes, voice.codes)


def test_codes_file_and_line_waveforms(tts, tmp_path):
    from safetensors import safe_open

    from higgs_v3.cli.main import save_codes  # `higgs-v3 speak --save-codes`

    model, processor = tts
    result = synthesize_long(model, processor, "One. Two.", max_chars=4, seed=1, max_seconds=0.2)
    save_codes(result, path := tmp_path / "codes.safetensors")
    with safe_open(str(path), framework="pt") as f:
        assert torch.equal(f.get_tensor("codes"), torch.cat([c.codes for c in result.chunks]))
        assert f.get_tensor("chunk_frames").tolist() == [c.num_frames for c in result.chunks]
        assert f.metadata()["texts"] == '["One.", "Two."]'
        assert f.metadata()["finished"] == json.dumps([c.finished for c in result.chunks])
    assert [w.shape[0] for _, w in result.line_waveforms()] == [c.num_frames * SPF for c in result.chunks]


def test_progress_bar_shows_seconds_and_real_time_factor(tts):
    model, processor = tts
    stream = io.StringIO()
    result = synthesize_long(model, processor, "One. Two. Three.", max_chars=6, seed=1, max_seconds=0.2, progress=stream)
    shown = stream.getvalue()
    assert len(result.chunks) == 3
    assert f"{sum(c.duration for c in result.chunks):.1f} s of audio" in shown  # speech only, not the pauses
    assert "3/3 chunks done" in shown and re.search(r"RTF \d+\.\d\d", shown)


def test_max_seconds_follows_max_positions(tts, monkeypatch):
    """`max_seconds` is bounded by what `generate` allows one request with the same `max_positions`: 4096 positions
    by default (163.56 s), the model's position embeddings when lifted with `max_positions=None`."""
    model, processor = tts
    with pytest.raises(ValueError, match=re.escape("max_seconds 200 is more than one chunk can hold: prompt plus audio "
                                                   "rows are at most 4096 positions (max_positions), at most 163.56 s")):
        synthesize_long(model, processor, "Hello.", max_seconds=200)
    recorder = Recorder(model, monkeypatch)
    result = synthesize_long(model, processor, "Hello.", max_seconds=200, max_positions=None, seed=0,
                             logits_processor=LogitsProcessorList([EndAfter([3])]))
    assert [call["max_new_tokens"] for call in recorder.calls] == [model.config.audio_spec.rows_for_seconds(200)] == [5007]
    assert recorder.calls[0]["max_positions"] is None and result.chunks[0].finished  # ended by EndAfter, not the limit


def test_long_text_refusals(tts):
    model, processor = tts
    with pytest.raises(ValueError, match=re.escape("The text is empty; there is nothing to speak.")):
        synthesize_long(model, processor, " \n ")
    with pytest.raises(ValueError, match=re.escape("Unknown control tag '<|emotion:happy|>' in the text")):
        synthesize_long(model, processor, "Fine. <|emotion:happy|>Hello.")
    with pytest.raises(ValueError, match=re.escape("max_seconds must be a positive number of seconds, got 0.")):
        synthesize_long(model, processor, "Hello.", max_seconds=0)
    with pytest.raises(ValueError, match=re.escape("pause_seconds must be a non-negative number of seconds, got -1.")):
        synthesize_long(model, processor, "Hello.", pause_seconds=-1)
    with pytest.raises(ValueError, match=re.escape("reference_text was given without a reference voice or clip")):
        synthesize_long(model, processor, "Hello.", reference_text="hi")
    # Checked before any generation: the seed of the last chunk, a voice's transcript (the processor's rule).
    with pytest.raises(ValueError, match=re.escape("the last chunk's seed (seed + 1) must be an integer in [0, 2**62)")):
        synthesize_long(model, processor, "One. Two.", max_chars=4, seed=2**62 - 1)
    voice = HiggsAudioV3Voice(codes=torch.zeros(4, C, dtype=torch.long), text="<|text|>Hi.")
    with pytest.raises(ValueError, match=re.escape("'<|text|>' in the transcript of the reference is a structural")):
        synthesize_long(model, processor, "Hello.", reference=voice)


def test_dialogue_uses_each_speakers_voice(tts, monkeypatch):
    model, processor = tts
    generator = torch.Generator().manual_seed(5)
    voices = {
        "Ann": HiggsAudioV3Voice(codes=torch.randint(0, 1024, (4, C), generator=generator), text="Ann speaks."),
        "Bob": HiggsAudioV3Voice(codes=torch.randint(0, 1024, (6, C), generator=generator)),
    }
    recorder = Recorder(model, monkeypatch)
    script = "[Ann] Hello Bob.\n[Bob] Hi Ann! How are you?\n[Ann] Fine, thanks."
    result = synthesize_dialogue(model, processor, script, voices, seed=3, max_seconds=0.2, pause_seconds=0.5,
                                 retries=0)
    assert [(c.speaker, c.text, c.line_number) for c in result.chunks] == [
        ("Ann", "Hello Bob.", 1), ("Bob", "Hi Ann! How are you?", 2), ("Ann", "Fine, thanks.", 3)
    ]
    (call,) = recorder.calls
    expected = torch.cat([delayed_by_loop(voices[s].codes) for s in ("Ann", "Bob", "Ann")])
    assert torch.equal(call["audio_input_ids"].cpu(), expected)
    assert call["seed"] == [3, 4, 5]
    frames = [c.num_frames for c in result.chunks]
    assert result.waveform.shape == (sum(frames) * SPF + 2 * round(0.5 * SR),)
    assert [(s, w.shape[0]) for s, w in result.line_waveforms()] == [(c.speaker, c.num_frames * SPF) for c in result.chunks]


def test_dialogue_auto_voices_and_refusals(tts, monkeypatch):
    model, processor = tts
    script = "[Ann] Hello Bob.\n[Bob] Hi Ann!\n[Ann] Bye."
    voice = HiggsAudioV3Voice(codes=torch.zeros(4, C, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape("Speaker 'Bob' (line 2) has no voice; give one per speaker")):
        synthesize_dialogue(model, processor, script, {"Ann": voice})
    with pytest.raises(ValueError, match=re.escape("Voices were given for 'Bobby', who never speak; the script's speakers are 'Ann', 'Bob'.")):
        synthesize_dialogue(model, processor, script, {"Ann": voice, "Bobby": voice})
    with pytest.raises(ValueError, match=re.escape("Unknown control tag '<|sfx:laugh|>' in dialogue line 2")):
        synthesize_dialogue(model, processor, "[Ann] Hi.\n[Bob] <|sfx:laugh|>Ha.", {"Ann": voice, "Bob": voice})
    recorder = Recorder(model, monkeypatch)
    # A bad transcript fails before Bob's first line (generated first, for his voice) is generated.
    with pytest.raises(ValueError, match=re.escape("Unknown control tag '<|oops|>' in the transcript of the voice of 'Ann'")):
        synthesize_dialogue(model, processor, script, {"Ann": (voice, "<|oops|>")}, auto_voices=True)
    assert recorder.calls == []
    result = synthesize_dialogue(model, processor, script, {"Ann": voice}, auto_voices=True, seed=0, max_seconds=0.2,
                                 retries=0)
    # Bob's first line comes first, without reference; then every line with its voice (Bob's from his first line).
    assert [c["input_ids"].shape[0] for c in recorder.calls] == [1, 2]
    assert "audio_input_ids" not in recorder.calls[0] and recorder.calls[0]["seed"] == [1]
    bob = result.chunks[1]
    assert torch.equal(result.voices["Bob"].codes, bob.codes) and result.voices["Bob"].text == "Hi Ann!"
    expected = torch.cat([delayed_by_loop(voice.codes), delayed_by_loop(voice.codes)])
    assert torch.equal(recorder.calls[1]["audio_input_ids"].cpu(), expected)
    assert recorder.calls[1]["seed"] == [0, 2]


def test_resolve_voice_from_a_clip_and_a_transcript(tts, tmp_path):
    model, processor = tts
    clip = tmp_path / "clip.wav"
    save_audio(torch.sin(torch.arange(SR * 1.2) / 7.0) * 0.3, clip, SR)
    voice = resolve_voice(model, processor, (str(clip), "Some words."))
    assert voice.text == "Some words." and voice.num_frames == 30
    again = resolve_voice(model, processor, HiggsAudioV3Voice(codes=voice.codes), "Other words.")
    assert again.text == "Other words."
    with pytest.raises(ValueError, match=re.escape("The reference already carries its transcript; do not pass")):
        resolve_voice(model, processor, voice, "More words.")
    with pytest.raises(FileNotFoundError, match=re.escape("Voice file")):
        resolve_voice(model, processor, str(tmp_path / "missing.safetensors"))


def test_audio_dict_references_are_encoded_once(tts, monkeypatch):
    """An audio dict (`{"array": samples, "sampling_rate": rate}`, as the processor takes it) is a clip for long-form
    speech and for each dialogue speaker (their own rates): encoded once, every chunk uses the same rows."""
    model, processor = tts
    samples = (torch.sin(torch.arange(16000 * 1.2) / 5.0) * 0.3).numpy()
    expected = model.encode_reference(samples, sampling_rate=16000).codes
    encoded = []
    original = model.encode_reference
    monkeypatch.setattr(model, "encode_reference", lambda *a, **k: encoded.append(1) or original(*a, **k))
    recorder = Recorder(model, monkeypatch)
    clip = {"array": samples, "sampling_rate": 16000}
    long = synthesize_long(model, processor, "One. Two.", reference=clip, max_chars=4, seed=0, max_seconds=0.12)
    assert len(encoded) == 1 and torch.equal(long.voice.codes, expected)
    assert torch.equal(recorder.calls[0]["audio_input_ids"].cpu(), torch.cat([delayed_by_loop(expected)] * 2))
    dialogue = synthesize_dialogue(model, processor, "[Ann] Hi.\n[Bob] Hello.", {"Ann": clip, "Bob": (clip, "Bob.")},
                                   seed=0, max_seconds=0.12)
    assert len(encoded) == 3 and torch.equal(dialogue.voices["Ann"].codes, expected)
    assert dialogue.voices["Bob"].text == "Bob."
    with pytest.raises(ValueError, match=re.escape("The voice of 'Ann' is an array of samples without its sampling rate")):
        synthesize_dialogue(model, processor, "[Ann] Hi.", {"Ann": {"array": samples}})


def test_the_processor_delegates_long_form_speech(tts):
    """`processor.synthesize_long(model, text)` / `processor.synthesize_dialogue(model, script)` are the long-form
    functions: the Hub repo's way to them, since the model's module imports neither the processor nor long-form speech
    (a repo's remote code copies what the model and the processor import)."""
    from transformers.dynamic_module_utils import get_relative_import_files

    import higgs_v3.modeling_higgs_v3 as modeling

    model, processor = tts
    options = dict(max_chars=6, seed=4, max_seconds=0.12)
    ours = processor.synthesize_long(model, "One. Two.", **options)
    theirs = synthesize_long(model, processor, "One. Two.", **options)
    assert len(ours.chunks) == 2
    assert [c.codes.tolist() for c in ours.chunks] == [c.codes.tolist() for c in theirs.chunks]
    script = "[Ann] Hi.\n[Bob] Yo."
    ours = processor.synthesize_dialogue(model, script, auto_voices=True, **options)
    theirs = synthesize_dialogue(model, processor, script, None, auto_voices=True, **options)
    assert [c.codes.tolist() for c in ours.chunks] == [c.codes.tolist() for c in theirs.chunks]
    assert not hasattr(model, "synthesize_long") and not hasattr(model, "synthesize_dialogue")
    closure = {os.path.basename(path)[:-3] for path in get_relative_import_files(modeling.__file__)}
    assert not closure & {"processing_higgs_v3", "longform_higgs_v3", "chunking_higgs_v3"}, closure


# --------------------------------------------------------------------------------------------- two import paths


def test_voices_from_another_import_of_the_package(tts, second_import, monkeypatch, tmp_path):
    """The notebook case: voices made by the remote-code classes, spoken with the installed package's functions."""
    model, processor = tts
    OtherVoice = second_import("audio_io_higgs_v3").HiggsAudioV3Voice
    assert OtherVoice is not HiggsAudioV3Voice
    generator = torch.Generator().manual_seed(11)
    ann = OtherVoice(codes=torch.randint(0, 1024, (4, C), generator=generator), text="Ann speaks.")
    bob = OtherVoice(codes=torch.randint(0, 1024, (3, C), generator=generator))
    recorder = Recorder(model, monkeypatch)
    long = synthesize_long(model, processor, "One. Two.", reference=ann, max_chars=4, seed=0, max_seconds=0.12,
                           retries=0)
    assert torch.equal(recorder.calls[0]["audio_input_ids"].cpu(), torch.cat([delayed_by_loop(ann.codes)] * 2))
    assert isinstance(long.voice, HiggsAudioV3Voice) and long.voice.text == "Ann speaks."
    assert resolve_voice(model, processor, bob, "Bob speaks.").text == "Bob speaks."
    recorder.calls.clear()
    script = "[Ann] Hi.\n[Bob] Hello.\n[Cy] Hey."
    dialogue = synthesize_dialogue(model, processor, script, {"Ann": ann, "Bob": (bob, "Bob speaks.")}, auto_voices=True,
                                   seed=0, max_seconds=0.12, retries=0)
    # Cy's first line alone (no voice yet), then Ann and Bob with their voices.
    assert [c["input_ids"].shape[0] for c in recorder.calls] == [1, 2]
    expected = torch.cat([delayed_by_loop(ann.codes), delayed_by_loop(bob.codes)])
    assert torch.equal(recorder.calls[1]["audio_input_ids"].cpu(), expected)
    assert dialogue.voices["Bob"].text == "Bob speaks." and dialogue.voices["Cy"].text == "Hey."


def test_model_and_processor_from_another_import(tts, second_import, tmp_path):
    """Model and processor from the second import, long-form functions from the installed package: the first chunk's
    voice (an installed-package voice) conditions the rest, clips are encoded by the other model, voice files load;
    the codes equal those of the installed classes."""
    model, processor = tts
    OtherConfig = second_import("configuration_higgs_v3").HiggsAudioV3Config
    other_model = second_import("modeling_higgs_v3").HiggsAudioV3ForConditionalGeneration(
        OtherConfig.from_dict(model.config.to_dict())
    ).eval()
    other_model.load_state_dict(model.state_dict())
    other_processor = second_import("processing_higgs_v3").HiggsAudioV3Processor.from_model_config(
        processor.tokenizer, other_model.config
    )
    options = dict(max_chars=6, seed=5, max_seconds=0.12)
    ours = synthesize_long(model, processor, "One. Two.", **options)
    theirs = synthesize_long(other_model, other_processor, "One. Two.", **options)
    assert [c.codes.tolist() for c in theirs.chunks] == [c.codes.tolist() for c in ours.chunks]
    clip = tmp_path / "clip.wav"
    save_audio(torch.sin(torch.arange(SR) / 5.0) * 0.3, clip, SR)
    voice_file = HiggsAudioV3Voice(codes=torch.zeros(3, C, dtype=torch.long), text="Saved.").save(tmp_path / "v.json")
    result = synthesize_dialogue(other_model, other_processor, "[Ann] Hi.\n[Bob] Yo.", {"Ann": (str(clip), "A clip."),
                                 "Bob": str(voice_file)}, seed=0, max_seconds=0.12)
    assert result.voices["Ann"].text == "A clip." and result.voices["Ann"].num_frames == 25
    assert torch.equal(result.voices["Bob"].codes, torch.zeros(3, C, dtype=torch.long))


def test_the_other_model_with_the_installed_processor_and_other_dialogue_lines(tts, second_import, tmp_path):
    """The mix the other way round (the remote-code model, the installed processor), with `DialogueLine`s and voices of
    the other import: a three-chunk text conditioned on the other model's `encode_reference` voice, a voice file the
    other class saved, and a dialogue of the other import's lines give the same codes as the installed classes."""
    model, processor = tts
    other = second_import("modeling_higgs_v3").HiggsAudioV3ForConditionalGeneration(
        second_import("configuration_higgs_v3").HiggsAudioV3Config.from_dict(model.config.to_dict())).eval()
    other.load_state_dict(model.state_dict())
    clip = tmp_path / "clip.wav"
    save_audio(torch.sin(torch.arange(SR) / 5.0) * 0.3, clip, SR)
    voice = other.encode_reference(str(clip), text="A clip.")
    assert type(voice).__module__.startswith("higgs_v3_second_import")
    voice_file = voice.save(tmp_path / "voice.safetensors")
    options = dict(max_chars=6, seed=3, max_seconds=0.12)
    theirs = synthesize_long(other, processor, "One. Two. Six.", reference=voice_file, **options)
    ours = synthesize_long(model, processor, "One. Two. Six.", reference=HiggsAudioV3Voice.load(voice_file), **options)
    assert len(theirs.chunks) == 3 and [c.codes.tolist() for c in theirs.chunks] == [c.codes.tolist() for c in ours.chunks]
    OtherLine = second_import("chunking_higgs_v3").DialogueLine
    lines = [OtherLine("Ann", "Hi.", 1), OtherLine("Bob", "Hello.", 2)]
    result = synthesize_dialogue(other, processor, lines, {"Ann": voice, "Bob": str(voice_file)}, seed=0, max_seconds=0.12)
    assert [(c.speaker, c.line_number) for c in result.chunks] == [("Ann", 1), ("Bob", 2)]
    assert torch.equal(result.voices["Bob"].codes, voice.codes)


# A fresh interpreter that cannot import this package: `-I -S` (no PYTHONPATH, no user site, no `site` module, so no
# `.pth` file runs and the editable install's finder is never installed), with site-packages put back by hand.
WITHOUT_THE_PACKAGE = """
import importlib.util, json, sys
sys.path[:0] = json.loads(sys.argv[1])
assert importlib.util.find_spec("higgs_v3") is None, "the higgs_v3 package is importable"
"""


@pytest.mark.integration
def test_long_form_and_dialogue_from_the_hub_repo_alone(tmp_path):
    """In a fresh process that cannot import the `higgs_v3` package (transformers and torch only), as a user with the
    Hub repo alone: `AutoModel` / `AutoProcessor` with `trust_remote_code=True`, then `processor.synthesize_long` over
    several chunks (voices from the first chunk, from `model.encode_reference`, from a voice file and from a clip) and
    `processor.synthesize_dialogue` (the model's module imports neither the processor nor long-form speech). The repo is
    loaded under a plain name, as transformers 5.5 copies it (entry modules' direct imports only)."""
    import site

    from higgs_v3.testing.tiny import make_tiny_random_model

    repo = make_tiny_random_model(tmp_path / "repo")
    save_audio(torch.sin(torch.arange(SR) / 5.0) * 0.3, tmp_path / "me.wav", SR)
    script = WITHOUT_THE_PACKAGE + textwrap.dedent('''
        import torch
        from transformers import AutoModel, AutoProcessor

        repo, clip, voice_file = sys.argv[2:]
        model = AutoModel.from_pretrained(repo, trust_remote_code=True)
        processor = AutoProcessor.from_pretrained(repo, trust_remote_code=True)
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        assert not [name for name in sys.modules if name.split(".")[0] == "higgs_v3"]
        assert not hasattr(model, "synthesize_long")
        options = dict(max_chars=6, seed=0, max_seconds=0.12)
        result = processor.synthesize_long(model, "One. Two. Three.", **options)
        assert [chunk.text for chunk in result.chunks] == ["One.", "Two.", "Three."], result.chunks
        assert type(result).__module__.startswith("transformers_modules"), type(result).__module__
        again = processor.synthesize_long(model, "One. Two. Three.", batch_size=1, **options)
        assert [c.codes.tolist() for c in again.chunks] == [c.codes.tolist() for c in result.chunks]
        voice = model.encode_reference(clip, text="What I say in it.")
        voice.save(voice_file)
        for reference in (voice, voice_file, clip):
            spoken = processor.synthesize_long(model, "One. Two.", reference=reference, **options)
            assert len(spoken.chunks) == 2 and spoken.voice.num_frames == 25, reference
        script = "[Ann] Hi.\\n[Bob] Hello.\\n[Ann] Bye."
        dialogue = processor.synthesize_dialogue(model, script, {"Ann": voice_file}, auto_voices=True, **options)
        assert [chunk.speaker for chunk in dialogue.chunks] == ["Ann", "Bob", "Ann"]
        assert dialogue.voices["Ann"].text == "What I say in it."
        assert len(dialogue.line_waveforms()) == 3
        conversation = [{"role": "user", "content": [{"type": "audio", "audio": voice}]},
                        {"role": "user", "content": [{"type": "text", "text": "Hi."}]}]
        shown = processor.apply_chat_template(conversation)
        assert shown == "<|tts|><|ref_text|>What I say in it.<|ref_audio|><|text|>Hi.<|audio|>", shown
        inputs = processor.apply_chat_template(conversation, tokenize=True, return_dict=True)
        expected = processor("Hi.", reference=voice)
        assert all(torch.equal(inputs[key], expected[key]) for key in expected) and set(inputs) == set(expected)
        out = model.generate(**inputs, seed=0, max_new_tokens=12, return_dict_in_generate=True)
        assert out.audio[0].numel() > 0
        print("ok")
    ''')
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environment.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"))
    paths = json.dumps(site.getsitepackages())
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script, paths, str(repo), str(tmp_path / "me.wav"), str(tmp_path / "me.json")],
        capture_output=True, text=True, timeout=600, env=environment, cwd=tmp_path,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_the_isolated_interpreter_cannot_import_the_package(tmp_path):
    """The isolation of the test above, checked on its own: the same interpreter flags and path see no `higgs_v3`,
    while a plain interpreter (with the editable install or PYTHONPATH) does."""
    import site

    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    paths = json.dumps(site.getsitepackages())
    isolated = subprocess.run([sys.executable, "-I", "-S", "-c", WITHOUT_THE_PACKAGE,
                               paths], capture_output=True, text=True, env=environment, cwd=tmp_path)
    assert isolated.returncode == 0, isolated.stderr[-2000:]
    plain = subprocess.run([sys.executable, "-c", WITHOUT_THE_PACKAGE, paths], capture_output=True, text=True, cwd=tmp_path)
    assert "the higgs_v3 package is importable" in plain.stderr


def test_a_runaway_chunk_gives_a_voice_of_at_most_the_reference_limit():
    """A first chunk that ran into a long limit would make every later prompt too long: its voice is cut to the
    reference limit (100 s), as any reference clip is."""
    from higgs_v3.delay_higgs_v3 import HiggsAudioV3AudioSpec
    from higgs_v3.longform_higgs_v3 import ChunkResult, _voice_from_chunk

    codes = torch.randint(0, 1024, (3000, 8), generator=torch.Generator().manual_seed(0))
    chunk = ChunkResult("Hi.", codes, torch.zeros(3000 * 960), False, 0, 25)
    voice = _voice_from_chunk(chunk, HiggsAudioV3AudioSpec())
    assert voice.num_frames == 2500 and torch.equal(voice.codes, codes[:2500]) and voice.text == "Hi."
    short = ChunkResult("Hi.", codes[:40], torch.zeros(40 * 960), True, 0, 25)
    assert torch.equal(_voice_from_chunk(short, HiggsAudioV3AudioSpec()).codes, codes[:40])
