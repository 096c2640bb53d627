# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Bad takes caught and redone (`longform_higgs_v3`: `take_problem`, the retries of `_Synthesizer`, `verify=`), the
retry seeds (`sampling_higgs_v3.retry_seed`) and the WER normaliser (`wer_words`, `word_error_rate`), on a tiny random
model whose end of speech a logits processor forbids for chosen seeds (a runaway forced for the first seed only)."""

from __future__ import annotations

import re

import jiwer
import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from higgs_v3.longform_higgs_v3 import (
    spoken_characters, synthesize_dialogue, synthesize_long, take_problem, wer_words, word_error_rate,
)
from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration
from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor
from higgs_v3.sampling_higgs_v3 import SEED_LIMIT, retry_seed
from higgs_v3.testing.tiny import tiny_config
from oracles import EOC, NUM_CODEBOOKS


C = NUM_CODEBOOKS
RAN_AWAY = "ran to the length limit without its end of speech"


@pytest.fixture(scope="module")
def tts(tokenizer):
    torch.manual_seed(0)
    model = HiggsAudioV3ForConditionalGeneration(tiny_config()).eval()
    return model, HiggsAudioV3Processor.from_model_config(tokenizer, model.config)


class EndUnlessSeed(LogitsProcessor):
    """Row b ends after exactly `frames` frames (EOC forced on codebook 0 from that step, forbidden before), except
    when its seed is in `runaway`: then EOC is forbidden throughout and the row runs to the limit."""

    def __init__(self, seeds: list[int], runaway: set[int], frames: int):
        self.seeds, self.runaway, self.frames, self.prompt_length = seeds, runaway, frames, None

    def __call__(self, input_ids, scores):
        self.prompt_length = self.prompt_length or input_ids.shape[1]
        step = input_ids.shape[1] - self.prompt_length
        for b, seed in enumerate(self.seeds):
            if step >= self.frames and seed not in self.runaway:
                scores[b * C, :] = -float("inf")
                scores[b * C, EOC] = 0.0
            else:
                scores[b * C, EOC] = -float("inf")
        return scores


def run_away_for(model, monkeypatch, runaway: set[int], frames: int = 12) -> list[list[int]]:
    """Wrap `model.generate`: each call gets an `EndUnlessSeed` for its seeds. Returns the list of calls' seeds."""
    calls, original = [], model.generate

    def generate(**kwargs):
        calls.append(list(kwargs["seed"]))
        processor = EndUnlessSeed(kwargs["seed"], runaway, frames)
        return original(**kwargs, logits_processor=LogitsProcessorList([processor]))

    monkeypatch.setattr(model, "generate", generate)
    return calls


def run_away_in_session(monkeypatch, runaway: set[int], frames: int = 12) -> list[list[int]]:
    """`run_away_for` for the decode session (`serving/session.py`, the server's): each row gets `EndUnlessSeed`'s rule
    for its seed, at its own step, first of the step's pieces (where `generate` runs a user's logits processor).
    Returns the seeds admitted, one list per request."""
    from higgs_v3.serving.session import DecodeSession

    calls, choose, add = [], DecodeSession._choose, DecodeSession.add

    def admitted(self, request):
        add(self, request)
        calls.append([self._pending[-1].seed])

    def chosen(self, scores):
        for b, (row, step) in enumerate(zip(self._rows, self._state["step"].tolist())):
            if step >= frames and row.seed not in runaway:
                scores[b * C, :] = -float("inf")
                scores[b * C, EOC] = 0.0
            else:
                scores[b * C, EOC] = -float("inf")
        return choose(self, scores)

    monkeypatch.setattr(DecodeSession, "add", admitted)
    monkeypatch.setattr(DecodeSession, "_choose", chosen)
    return calls


def test_retry_seeds_are_a_pure_function_of_the_seed():
    assert [retry_seed(100, k) for k in (1, 2)] == [100 + 2**40, 100 + 2 * 2**40]
    assert retry_seed(SEED_LIMIT - 1, 1) == 2**40 - 1  # wrapped into [0, 2**62)


def test_a_runaway_take_is_redone_with_the_next_seed(tts, monkeypatch):
    model, processor = tts
    calls = run_away_for(model, monkeypatch, runaway={100})
    text = "Alpha beta gamma delta."
    result = synthesize_long(model, processor, text, seed=100, max_seconds=1.0)
    assert calls == [[100], [100 + 2**40]]
    (chunk,) = result.chunks
    assert chunk.attempts == [
        {"seed": 100, "finished": False, "seconds": 1.0, "problem": RAN_AWAY, "wer": None},
        {"seed": 100 + 2**40, "finished": True, "seconds": 0.48, "problem": None, "wer": None},
    ]
    assert chunk.seed == 100 + 2**40 and chunk.finished and chunk.num_frames == 12 and chunk.problem is None
    assert result.unfinished_chunks == [] and result.failed_chunks == []
    # A rerun redoes the same take with the same seed: the same audio.
    again = synthesize_long(model, processor, text, seed=100, max_seconds=1.0)
    assert torch.equal(again.chunks[0].codes, chunk.codes) and again.chunks[0].attempts == chunk.attempts
    # retries=0: the old behaviour, one take, cut at the limit and flagged.
    calls.clear()
    old = synthesize_long(model, processor, text, seed=100, max_seconds=1.0, retries=0)
    assert calls == [[100]] and old.unfinished_chunks == [0] and old.failed_chunks == [0]
    assert old.chunks[0].seed == 100 and len(old.chunks[0].attempts) == 1 and old.chunks[0].num_frames == 25


def test_a_model_saved_with_its_own_retries_default_is_not_redone_unless_asked(tts, monkeypatch):
    """The demo model's generation config says 0 (`RETRIES_FIELD`, written by `write_tiny_random`): in Python, as on
    the command line and the server, its runaway takes are not redone unless `retries` asks."""
    from higgs_v3.longform_higgs_v3 import RETRIES_FIELD, default_retries

    model, processor = tts
    assert default_retries(model) == 2
    monkeypatch.setattr(model.generation_config, RETRIES_FIELD, 0, raising=False)
    assert default_retries(model) == 0
    calls = run_away_for(model, monkeypatch, runaway={100})
    result = synthesize_long(model, processor, "Alpha beta gamma delta.", seed=100, max_seconds=1.0)
    assert calls == [[100]] and len(result.chunks[0].attempts) == 1 and result.unfinished_chunks == [0]
    calls.clear()
    synthesize_long(model, processor, "Alpha beta gamma delta.", seed=100, max_seconds=1.0, retries=1)
    assert calls == [[100], [100 + 2**40]]


def test_only_the_bad_rows_of_a_batch_are_redone_and_every_failure_is_kept(tts, monkeypatch):
    model, processor = tts
    always = {7, 7 + 2**40, 7 + 2 * 2**40}  # chunk 0 runs away whatever its seed; chunk 1 ends
    calls = run_away_for(model, monkeypatch, runaway=always)
    voice = torch.zeros(4, C, dtype=torch.long)
    script = "[Ann] Alpha beta gamma.\n[Bob] Delta epsilon zeta."
    from higgs_v3.audio_io_higgs_v3 import HiggsAudioV3Voice

    voices = {"Ann": HiggsAudioV3Voice(voice), "Bob": HiggsAudioV3Voice(voice)}
    result = synthesize_dialogue(model, processor, script, voices, seed=7, max_seconds=0.8)
    assert calls == [[7, 8], [7 + 2**40], [7 + 2 * 2**40]]
    first, second = result.chunks
    assert [a["seed"] for a in first.attempts] == sorted(always) and first.seed == 7  # all bad: the first take kept
    assert [a["problem"] for a in first.attempts] == [RAN_AWAY] * 3
    assert second.attempts == [{"seed": 8, "finished": True, "seconds": 0.48, "problem": None, "wer": None}]
    assert result.unfinished_chunks == [0] and result.failed_chunks == [0]


@pytest.mark.parametrize(("finished", "seconds", "text", "problem"), [
    (False, 3.0, "Hello there, how are you?", RAN_AWAY),
    (True, 1.5, "Hello there, how are you?", None),  # 19 letters: 0.38 .. 0.25 * 19 + 1 = 5.75 s
    (True, 0.38, "Hello there, how are you?", None),
    (True, 0.37, "Hello there, how are you?", "0.37 s for 19 characters is outside [0.02, 0.25] s per character"),
    (True, 5.76, "Hello there, how are you?", "5.76 s for 19 characters is outside [0.02, 0.25] s per character"),
    (True, 0.9, "<|emotion:happy|>你好世界", None),  # a tag adds 1 s; 4 CJK characters count 12: 0.24 .. 5.0 s
    (True, 5.0, "<|emotion:happy|>你好世界", None),
    (True, 5.01, "<|emotion:happy|>你好世界", "5.01 s for 12 characters is outside [0.02, 0.25] s per character"),
    (True, 2.5, "<|sfx:laughter|><|sfx:laughter|>", None),  # nothing to say: at most 1 + 2 s
    (True, 3.1, "<|sfx:laughter|><|sfx:laughter|>", "3.10 s for 0 characters is outside [0.02, 0.25] s per character"),
])
def test_take_problem_bounds(finished, seconds, text, problem):
    found = take_problem(finished, seconds, text)
    assert found == (problem if problem is None or problem == RAN_AWAY else problem + " (seconds_per_char)")


def test_take_bounds_are_tunable_and_checked(tts):
    model, processor = tts
    assert take_problem(True, 0.37, "Hello there, how are you?", (0.01, 0.3)) is None
    assert take_problem(True, 100.0, "Hello there, how are you?", None) is None
    assert spoken_characters("It's 3 o'clock. 早上好") == 3 + 1 + 6 + 3 * 3
    for options, message in [
        ({"retries": -1}, "retries must be an integer from 0 (no retry) to 10, got -1."),
        ({"retries": True}, "retries must be an integer from 0 (no retry) to 10, got True."),
        ({"retries": 10**9}, "retries must be an integer from 0 (no retry) to 10, got 1000000000."),
        ({"seconds_per_char": (0.3, 0.1)}, "seconds_per_char must be None or (low, high) seconds with 0 <= low < high, "
                                           "got (0.3, 0.1)."),
        ({"verify": "whisper"}, "verify must be a transformers ASR pipeline (pipeline('automatic-speech-recognition', "
                                "model=...)), got a str."),
        ({"max_wer": -0.1}, "max_wer must be a number >= 0, got -0.1."),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            synthesize_long(model, processor, "Hi.", seed=0, **options)


def test_verify_redoes_a_take_the_asr_does_not_hear(tts, monkeypatch):
    """`verify=`: any callable with the ASR pipeline's interface; a take whose WER is above `max_wer` is redone."""
    model, processor = tts
    run_away_for(model, monkeypatch, runaway=set())
    heard = iter(["alpha beta", "Alpha, beta gamma delta!"])

    class FakeASR:
        class feature_extractor:
            sampling_rate = 16000

        def __call__(self, audio):
            assert audio["sampling_rate"] == 16000 and audio["raw"].shape == (round(0.48 * 16000),)
            return {"text": next(heard)}

    result = synthesize_long(model, processor, "Alpha beta gamma delta.", seed=3, max_seconds=1.0, verify=FakeASR(),
                             max_wer=0.2)
    (chunk,) = result.chunks
    assert [(a["seed"], a["wer"], a["problem"]) for a in chunk.attempts] == [
        (3, 0.5, "WER 0.50 above 0.2"), (3 + 2**40, 0.0, None)]
    assert chunk.wer == 0.0 and chunk.seed == 3 + 2**40


@pytest.mark.parametrize(("reference", "hypothesis", "words_ref", "words_hyp"), [
    ("Hello, World! It's <|emotion:happy|>fine.", "hello world its fine", "hello world it's fine",
     "hello world its fine"),
    ("今天天气很好。", "今天天汽很好", "今 天 天 气 很 好", "今 天 天 汽 很 好"),
    ("The cat sat on the mat.", "the cat sat on mat", "the cat sat on the mat", "the cat sat on mat"),
    ("Use 3 GPUs", "use three gpus", "use 3 gpus", "use three gpus"),
])
def test_word_error_rate_is_jiwers_on_the_normalised_words(reference, hypothesis, words_ref, words_hyp):
    assert " ".join(wer_words(reference)) == words_ref and " ".join(wer_words(hypothesis)) == words_hyp
    assert word_error_rate(reference, hypothesis) == pytest.approx(jiwer.wer(words_ref, words_hyp))
    assert word_error_rate("", "") == 0.0 and word_error_rate("...", "extra") == 1.0
