# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Opt-in text normalisation (`chunking_higgs_v3.normalize_text`, `normalize="en"` of the processor, long-form speech
and the command line): a table of cases written out by hand, control tags untouched, off by default, the refusals."""

from __future__ import annotations

import re
import sys

import pytest
import torch

from higgs_v3.chunking_higgs_v3 import normalize_text
from higgs_v3.cli.main import build_parser
from higgs_v3.longform_higgs_v3 import speech_jobs, synthesize_long
from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration
from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor
from higgs_v3.testing.tiny import tiny_config


CASES = [
    # numbers
    ("I have 2 cats.", "I have two cats."),
    ("1,234 people", "one thousand, two hundred and thirty-four people"),
    ("pi is 3.14 and 2.50", "pi is three point one four and two point five zero"),
    ("It is -3 outside.", "It is minus three outside."),
    ("Room 101", "Room one hundred and one"),
    # ordinals
    ("The 21st and 3rd place", "The twenty-first and third place"),
    # years and decades
    ("In 1999 and 2005.", "In nineteen ninety-nine and two thousand and five."),
    ("the 1990s", "the nineteen nineties"),
    ("since 2024,", "since twenty twenty-four,"),
    # times
    ("At 10:30 pm", "At ten thirty PM"),
    ("at 9:00, then 7:05 a.m.", "at nine o'clock, then seven oh five AM"),
    # currency
    ("It costs $1,234.56 today.",
     "It costs one thousand, two hundred and thirty-four dollars and fifty-six cents today."),
    ("$1, $0.50, £3.01, €2", "one dollar, fifty cents, three pounds and one penny, two euros"),
    ("$2.5 million", "two point five million dollars"),
    # percentages
    ("12.5% of 45 %", "twelve point five percent of forty-five percent"),
    # more than MAX_SPELLED_DIGITS (15) digits: digit by digit (num2words cannot say 307 digits)
    ("ID 1234567890123456", "ID one two three four five six seven eight nine zero one two three four five six"),
    ("$999999999999999", "nine hundred and ninety-nine trillion, nine hundred and ninety-nine billion, nine hundred "
                         "and ninety-nine million, nine hundred and ninety-nine thousand, nine hundred and ninety-nine "
                         "dollars"),
    ("$1000000000000000.50", "one zero zero zero zero zero zero zero zero zero zero zero zero zero zero zero dollars "
                             "and fifty cents"),
    ("the 12345678901234567th", "the one two three four five six seven eight nine zero one two three four five six "
                                "seventh"),
    ("-" + "9" * 400 + ".5", "minus " + "nine " * 400 + "point five"),
    # left alone: versions, words with digits, text without numbers
    ("version 1.2.3 in 3D", "version 1.2.3 in 3D"),
    ("No numbers here.", "No numbers here."),
    # never inside a control tag
    ("<|emotion:happy|>I have 2 cats<|prosody:pause|> and 1st", "<|emotion:happy|>I have two cats<|prosody:pause|> and "
                                                                "first"),
]


@pytest.mark.parametrize(("text", "spoken"), CASES)
def test_english_numbers_dates_and_currency(text, spoken):
    assert normalize_text(text, "en") == spoken
    assert normalize_text(text) == text  # off by default


def test_refusals(monkeypatch):
    with pytest.raises(ValueError, match=re.escape(
            "normalize must be None (off) or 'en' (English numbers, dates and currency spelled out), got 'fr'.")):
        normalize_text("1", "fr")
    monkeypatch.setitem(sys.modules, "num2words", None)  # not installed
    with pytest.raises(ImportError, match=re.escape(
            "normalize='en' needs num2words: pip install num2words (or higgs-v3[normalize]).")):
        normalize_text("1", "en")


@pytest.fixture(scope="module")
def tts(tokenizer):
    torch.manual_seed(0)
    model = HiggsAudioV3ForConditionalGeneration(tiny_config()).eval()
    return model, HiggsAudioV3Processor.from_model_config(tokenizer, model.config)


def test_processor_long_form_and_command_line(tts):
    model, processor = tts
    text = "<|emotion:elation|>It costs $5 at 10:30 pm."
    spoken = "<|emotion:elation|>It costs five dollars at ten thirty PM."
    assert processor(text, normalize="en")["input_ids"].tolist() == processor(spoken)["input_ids"].tolist()
    assert processor(text)["input_ids"].tolist() != processor(spoken)["input_ids"].tolist()
    assert [job.text for job in speech_jobs(processor, "I am 21. You are 3rd.", 20, "en")] == [
        "I am twenty-one.", "You are third."]
    result = synthesize_long(model, processor, text, seed=0, max_seconds=0.08, retries=0, normalize="en")
    assert [chunk.text for chunk in result.chunks] == [spoken]
    assert build_parser().parse_args(["speak", "Hi 2", "--normalize", "en"]).normalize == "en"
    assert build_parser().parse_args(["batch", "m.jsonl", "--out-dir", "o"]).normalize is None
