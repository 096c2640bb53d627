# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""`higgs-v3 eval` (`evaluation/`): the lists with their exact errors, the summary arithmetic and the offline message
(unit layer); end to end (integration) on the tiny-random model with a tiny random Whisper and a tiny random
`WavLMForXVector` built here from their configs and saved as folders: the real loading, transcription and scoring code
with small weights; each item's WER checked against jiwer on its recorded transcript."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import sys
from pathlib import Path

import jiwer
import numpy as np
import pytest
import soundfile
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from higgs_v3.cli.main import main as cli_main
from higgs_v3.evaluation.items import read_items
from higgs_v3.evaluation.scoring import resolve_scorer, summarize
from higgs_v3.longform_higgs_v3 import wer_words
from oracles import EOC, NUM_CODEBOOKS


def _clip(path: Path, seconds: float = 1.2, frequency: float = 220.0) -> Path:
    t = np.arange(round(seconds * 16000)) / 16000
    soundfile.write(str(path), (0.3 * np.sin(2 * np.pi * frequency * t)).astype(np.float32), 16000)
    return path


def _eval(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["eval", *argv])
    return code, out.getvalue(), err.getvalue()


# ------------------------------------------------------------------------------------------------ unit
def test_seed_tts_lists_and_jsonl_manifests(tmp_path):
    (tmp_path / "prompts").mkdir()
    _clip(tmp_path / "prompts" / "a.wav")
    (tmp_path / "meta.lst").write_text("u1|Prompt one.|prompts/a.wav|Hello there.\n\nu2|Prompt two.|prompts/a.wav|"
                                       "你好。|gt/u2.wav\n", encoding="utf-8")
    items = read_items(tmp_path / "meta.lst")
    assert [(i.utt, i.prompt_text, i.text, i.line, i.seed) for i in items] == [
        ("u1", "Prompt one.", "Hello there.", 1, None), ("u2", "Prompt two.", "你好。", 3, None)]
    assert items[0].prompt_wav == str((tmp_path / "prompts" / "a.wav").resolve())
    (tmp_path / "m.jsonl").write_text(json.dumps({"utt": "x", "text": "Hi.", "prompt_wav": "prompts/a.wav",
                                                  "seed": 4}) + "\n", encoding="utf-8")
    assert [(i.utt, i.prompt_text, i.seed) for i in read_items(tmp_path / "m.jsonl")] == [("x", None, 4)]
    for content, message in [
        ("u1|only three|fields\n", "meta.lst line 1 has 3 '|'-separated fields; a Seed-TTS-eval list has "
                                   "utt|prompt_text|prompt_wav|text (and optionally a fifth, ignored)."),
        ("u1|P.|missing.wav|Hi.\n", "meta.lst line 1: the prompt clip 'missing.wav' does not exist"),
        ("u1|P.|prompts/a.wav|Hi.\nu1|P.|prompts/a.wav|Ho.\n", "meta.lst line 2: utterance 'u1' is already line 1; "
                                                               "ids must be unique."),
        ("../u|P.|prompts/a.wav|Hi.\n", "meta.lst line 1: utterance id '../u' must be a plain name"),
        ("u1|P.|prompts/a.wav| \n", "meta.lst line 1: 'text' must be a non-empty string, got ' '."),
        ("\n\n", "has no items."),
    ]:
        (tmp_path / "meta.lst").write_text(content, encoding="utf-8")
        with pytest.raises(ValueError, match=re.escape(message)):
            read_items(tmp_path / "meta.lst")


def test_summary_arithmetic():
    rows = [
        {"wer": 0.0, "sim": 0.8, "finished": True, "failed_chunks": 0, "takes": 1, "chunks": 1, "duration": 2.0},
        {"wer": 0.5, "sim": 0.6, "finished": False, "failed_chunks": 1, "takes": 3, "chunks": 1, "duration": 4.0},
    ]
    summary = summarize(rows, 0.25, {"asr": "a"})
    assert summary == {"items": 2, "wer": 0.25, "sim": pytest.approx(0.7), "runaway_rate": 0.5, "failed_rate": 0.5,
                       "retried_items": 1, "takes_per_chunk": 2.0, "audio_seconds": 6.0, "real_time_factor": 0.25,
                       "asr": "a"}


def test_a_control_tag_in_a_seed_tts_line_is_text_and_a_long_item_is_refused_by_name(tmp_path):
    _clip(tmp_path / "a.wav")
    (tmp_path / "meta.lst").write_text("u1|Prompt <|laughter|> one.|a.wav|Hello <|laughter|> there.|gt.wav\n",
                                       encoding="utf-8")
    (item,) = read_items(tmp_path / "meta.lst")
    assert (item.prompt_text, item.prompt_wav, item.text) == ("Prompt <|laughter|> one.", str(tmp_path / "a.wav"),
                                                              "Hello <|laughter|> there.")
    (tmp_path / "meta.lst").write_text("u1|P.|a.wav|Hi.\nlong|P.|a.wav|" + "word " * 113 + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as raised:
        read_items(tmp_path / "meta.lst")
    assert str(raised.value) == (
        "meta.lst line 2: utterance 'long' has 452 spoken characters; an evaluation item is one utterance of at most "
        "450 (about 30 s of speech, what the ASR model transcribes at once). Speak long texts with higgs-v3 speak or "
        "batch.")


def test_a_scorer_of_the_wrong_kind_is_named(tmp_path):
    from transformers import WavLMConfig, WhisperConfig

    from higgs_v3.evaluation.scoring import check_scorer_kind

    WhisperConfig(architectures=["WhisperForConditionalGeneration"]).save_pretrained(tmp_path / "whisper")
    WavLMConfig(architectures=["WavLMForXVector"]).save_pretrained(tmp_path / "wavlm")
    WavLMConfig().save_pretrained(tmp_path / "headless")  # no architectures: the config type decides
    check_scorer_kind(str(tmp_path / "whisper"), "w", "asr", "--asr")
    check_scorer_kind(str(tmp_path / "wavlm"), "x", "speaker", "--speaker-model")
    check_scorer_kind(str(tmp_path / "headless"), "x", "speaker", "--speaker-model")
    with pytest.raises(ValueError) as raised:
        check_scorer_kind(str(tmp_path / "whisper"), "openai/whisper-tiny", "speaker", "--speaker-model")
    assert str(raised.value) == (
        "--speaker-model 'openai/whisper-tiny' is a whisper model (WhisperForConditionalGeneration), not a "
        "speaker-verification x-vector model (WavLMForXVector, ...); give one such as microsoft/wavlm-base-plus-sv.")
    with pytest.raises(ValueError) as raised:
        check_scorer_kind(str(tmp_path / "wavlm"), "x", "asr", "--asr")
    assert str(raised.value) == ("--asr 'x' is a wavlm model (WavLMForXVector), not a speech recognition model "
                                 "(Whisper, Wav2Vec2 CTC, ...); give one such as openai/whisper-large-v3.")


def test_language_is_refused_for_an_asr_model_that_takes_none():
    from types import SimpleNamespace

    from higgs_v3.evaluation.scoring import check_language

    ctc = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(model_type="wav2vec2")))
    check_language(ctc, "facebook/wav2vec2-base-960h", None)
    with pytest.raises(ValueError) as raised:
        check_language(ctc, "facebook/wav2vec2-base-960h", "en")
    assert str(raised.value) == ("--language is passed to Whisper ASR models only; 'facebook/wav2vec2-base-960h' is a "
                                 "wav2vec2 model, which transcribes the language it was trained on: drop --language.")


@pytest.mark.integration  # importing matplotlib takes a second
def test_plots_have_axis_labels_means_and_mark_runaway_items():
    from higgs_v3.evaluation.scoring import draw_plots

    rows = [{"wer": 0.0, "sim": 0.8, "finished": True, "characters": 10, "duration": 1.0},
            {"wer": 0.5, "sim": 0.6, "finished": True, "characters": 20, "duration": 2.0},
            {"wer": 1.0, "sim": 0.1, "finished": False, "characters": 5, "duration": 9.0}]
    figures = draw_plots(rows)
    labels = {name: (figure.axes[0].get_xlabel(), figure.axes[0].get_ylabel(),
                     [text.get_text() for text in figure.axes[0].get_legend().texts])
              for name, figure in figures.items()}
    assert labels == {
        "wer_hist.png": ("word error rate (0 = every word right)", "items",
                         ["finished (2)", "runaway (1)", "mean 0.500"]),
        "sim_hist.png": ("speaker similarity to the prompt (cosine)", "items", ["finished (2)", "runaway (1)",
                                                                                "mean 0.500"]),
        "duration_vs_length.png": ("spoken characters of the text", "seconds of audio",
                                   ["finished (2)", "runaway (1)"]),
    }
    runaway = figures["duration_vs_length.png"].axes[0].collections[1]
    assert runaway.get_offsets().tolist() == [[5.0, 9.0]]


class FakeAsr:
    """A pipeline-shaped ASR that hears "hello" and fails (as Whisper does on a take over 30 s) on takes over 1 s."""

    feature_extractor = type("Features", (), {"sampling_rate": 16000})()
    model = type("Model", (), {"config": type("Config", (), {"model_type": "whisper"})()})()

    def __call__(self, inputs, batch_size, **options):
        if any(len(i["raw"]) > 16000 for i in inputs):
            raise IndexError("index -1 is out of bounds for dimension 0 with size 0")
        return [{"text": " hello "} for _ in inputs]


def test_a_scoring_error_names_the_item(tmp_path):
    from higgs_v3.cli.batch import RECORDS_DIR
    from higgs_v3.evaluation.run import score_items

    _clip(tmp_path / "p.wav")
    (tmp_path / "meta.lst").write_text("a|P.|p.wav|Hello.\nb|P.|p.wav|Hello again.\n", encoding="utf-8")
    items = read_items(tmp_path / "meta.lst")
    (tmp_path / "audio" / RECORDS_DIR).mkdir(parents=True)
    for item, seconds in zip(items, (0.5, 2.5)):
        silence = np.zeros(round(seconds * 24000), np.float32)
        soundfile.write(str(tmp_path / "audio" / f"{item.utt}.wav"), silence, 24000)
        (tmp_path / "audio" / RECORDS_DIR / f"{item.utt}.wav.json").write_text(json.dumps(
            {"duration": seconds, "chunks": 1, "finished": True, "seed": 0, "output": f"{item.utt}.wav"}))
    encoder = type("Encoder", (), {"similarity": lambda self, *a: 0.5})()
    rows = score_items(items[:1], tmp_path / "audio", FakeAsr(), encoder, None, progress=False)
    assert [(r["utt"], r["transcript"], r["wer"], r["sim"]) for r in rows] == [("a", "hello", 0.0, 0.5)]
    with pytest.raises(RuntimeError) as raised:
        score_items(items, tmp_path / "audio", FakeAsr(), encoder, None, progress=False)
    assert str(raised.value) == ("Scoring item 'b' (line 2, a 2.5 s take) failed in the ASR model: IndexError: index "
                                 "-1 is out of bounds for dimension 0 with size 0")


@pytest.fixture
def offline_empty_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))


def test_a_scorer_missing_offline_is_named(tmp_path, offline_empty_cache):
    with pytest.raises(ValueError, match=re.escape(
            "Cannot load the ASR model 'openai/whisper-large-v3' (--asr): HF_HUB_OFFLINE is set, and it is not in the "
            "local Hugging Face cache. Download it once (`hf download openai/whisper-large-v3`) or give a local folder "
            "with --asr.")):
        resolve_scorer("openai/whisper-large-v3", "ASR model", "--asr")
    assert resolve_scorer(str(tmp_path), "ASR model", "--asr") == str(tmp_path)


def test_speak_and_batch_name_a_missing_verify_model_before_loading_theirs(tmp_path, offline_empty_cache):
    (tmp_path / "m.jsonl").write_text(json.dumps({"text": "Hi.", "output": "a"}) + "\n", encoding="utf-8")
    message = ("higgs-v3: error: Cannot load the ASR model 'openai/whisper-tiny' (--verify): HF_HUB_OFFLINE is set, "
               "and it is not in the local Hugging Face cache.")
    for argv in (["speak", "Hello.", "-o", str(tmp_path / "a.wav")], ["batch", str(tmp_path / "m.jsonl"), "--out-dir",
                                                                      str(tmp_path / "out")]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main([*argv, "--model", "no/such-model", "--verify", "openai/whisper-tiny", "--max-wer", "0.3"])
        assert code == 2 and err.getvalue().startswith(message), err.getvalue()


# ------------------------------------------------------------------------------------------------ end to end
def tiny_whisper(folder: Path) -> Path:
    """A random 1-layer Whisper (d_model 16, 8 mel bins) with a 37-token byte-level vocabulary (letters, the space,
    Whisper's special tokens), saved with its tokenizer and feature extractor."""
    from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration, WhisperTokenizer)

    folder.mkdir()
    vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyzĠ")}
    specials = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|zh|>", "<|translate|>", "<|transcribe|>",
                "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]
    vocab |= {token: len(vocab) + i for i, token in enumerate(specials)}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    end = "<|endoftext|>"
    tokenizer = WhisperTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), bos_token=end, eos_token=end,
                                 unk_token=end, pad_token=end)
    tokenizer.add_special_tokens({"additional_special_tokens": specials[1:]})
    ids = {name: vocab[token] for name, token in [("start", "<|startoftranscript|>"), ("end", end)]}
    config = WhisperConfig(vocab_size=len(vocab), num_mel_bins=8, d_model=16, encoder_layers=1, decoder_layers=1,
                           encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                           max_target_positions=64, decoder_start_token_id=ids["start"], eos_token_id=ids["end"],
                           pad_token_id=ids["end"], bos_token_id=ids["end"], init_std=1.0)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    model.generation_config = GenerationConfig(decoder_start_token_id=ids["start"], eos_token_id=ids["end"],
                                               pad_token_id=ids["end"], max_length=12,
                                               no_timestamps_token_id=vocab["<|notimestamps|>"])
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    WhisperFeatureExtractor(feature_size=8, sampling_rate=16000).save_pretrained(folder)
    return folder


def tiny_xvector(folder: Path) -> Path:
    """A random 1-layer `WavLMForXVector` (hidden 16, 8-dim embeddings) with its feature extractor."""
    from transformers import Wav2Vec2FeatureExtractor, WavLMConfig, WavLMForXVector

    config = WavLMConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                         conv_dim=(8, 8), conv_stride=(5, 4), conv_kernel=(10, 8), tdnn_dim=(8, 8), tdnn_kernel=(3, 1),
                         tdnn_dilation=(1, 1), xvector_output_dim=8, num_conv_pos_embeddings=16,
                         num_conv_pos_embedding_groups=2, num_buckets=32, max_bucket_distance=64)
    torch.manual_seed(0)
    WavLMForXVector(config).save_pretrained(folder)
    Wav2Vec2FeatureExtractor(sampling_rate=16000).save_pretrained(folder)
    return folder


@pytest.mark.integration
def test_eval_end_to_end_on_tiny_models(tmp_path, monkeypatch):
    asr, speaker = tiny_whisper(tmp_path / "whisper"), tiny_xvector(tmp_path / "xvector")
    _clip(tmp_path / "p1.wav")
    _clip(tmp_path / "p2.wav", frequency=330.0)
    (tmp_path / "meta.lst").write_text("a|Prompt one.|p1.wav|Hello there.\nb|Prompt two.|p2.wav|今天天气很好。\n"
                                       "c|Prompt one.|p1.wav|Good morning to you.\n", encoding="utf-8")
    options = ["--out-dir", str(tmp_path / "out"), "--model", "tiny-random", "--device", "cpu", "--max-seconds",
               "0.4", "--asr", str(asr), "--speaker-model", str(speaker), "--seed", "3", "--no-progress"]
    code, out, err = _eval([str(tmp_path / "meta.lst"), *options])
    assert code == 0, err
    rows = list(csv.DictReader((tmp_path / "out" / "items.csv").open(encoding="utf-8")))
    assert [row["utt"] for row in rows] == ["a", "b", "c"] and [row["seed"] for row in rows] == ["3", "4", "5"]
    texts = {"a": "Hello there.", "b": "今天天气很好。", "c": "Good morning to you."}
    for row in rows:  # the WER is jiwer's on the normalised text and the recorded transcript
        words = " ".join(wer_words(row["transcript"]))
        expected = jiwer.wer(" ".join(wer_words(texts[row["utt"]])), words) if words else 1.0
        assert float(row["wer"]) == pytest.approx(expected)
        assert -1.0 <= float(row["sim"]) <= 1.0 and 0 < float(row["duration"]) <= 0.4
        assert 1 <= int(row["takes"]) <= 3 and (tmp_path / "out" / "audio" / row["output"]).is_file()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["items"] == 3 and summary["wer"] == pytest.approx(np.mean([float(r["wer"]) for r in rows]))
    assert summary["sim"] == pytest.approx(np.mean([float(r["sim"]) for r in rows]))
    assert summary["runaway_rate"] == sum(r["finished"] == "False" for r in rows) / 3
    assert summary["real_time_factor"] > 0 and summary["asr"] == str(asr)
    plots = ["duration_vs_length.png", "sim_hist.png", "wer_hist.png"]  # matplotlib is in the test extra
    assert sorted(Path(p).name for p in summary["plots"]) == plots
    assert out.splitlines()[0].startswith("Batch: 3 items, 3 written now")
    assert re.fullmatch(r"Eval: 3 items, WER \d+\.\d\d %, SIM -?\d+\.\d\d, runaway \d+\.\d %, \d retried, RTF "
                        r"\d+\.\d\d; items\.csv, summary\.json, 3 plots in .*\.", out.splitlines()[1])
    # A rerun speaks nothing again (resumable) and scores the same audio the same way; without matplotlib, no plots.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, out, err = _eval([str(tmp_path / "meta.lst"), *options])
    assert code == 0, err
    assert out.startswith("Batch: 3 items, 0 written now") and "RTF -;" in out
    assert out.rstrip().endswith("no plots (matplotlib is not installed: pip install 'higgs-v3[bench]').")
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["plots"] == []
    again = list(csv.DictReader((tmp_path / "out" / "items.csv").open(encoding="utf-8")))
    assert again == rows and json.loads((tmp_path / "out" / "summary.json").read_text())["real_time_factor"] is None


@pytest.mark.integration
def test_eval_checks_both_scorers_before_any_synthesis(tmp_path, monkeypatch):
    from higgs_v3.cli import batch

    asr, speaker = tiny_whisper(tmp_path / "whisper"), tiny_xvector(tmp_path / "xvector")
    _clip(tmp_path / "p1.wav")
    (tmp_path / "meta.lst").write_text("a|Prompt one.|p1.wav|Hello there.\n", encoding="utf-8")
    monkeypatch.setattr(batch, "batch_from_args", lambda *a, **k: pytest.fail("synthesis started"))
    common = [str(tmp_path / "meta.lst"), "--out-dir", str(tmp_path / "out"), "--model", "tiny-random", "--device",
              "cpu", "--no-progress"]
    code, out, err = _eval([*common, "--asr", str(asr), "--speaker-model", str(asr)])
    assert code == 2 and err.strip().splitlines()[-1] == (
        f"higgs-v3: error: --speaker-model {str(asr)!r} is a whisper model (WhisperForConditionalGeneration), not a "
        "speaker-verification x-vector model (WavLMForXVector, ...); give one such as microsoft/wavlm-base-plus-sv.")
    code, out, err = _eval([*common, "--asr", str(speaker), "--speaker-model", str(speaker)])
    assert code == 2 and err.strip().splitlines()[-1] == (
        f"higgs-v3: error: --asr {str(speaker)!r} is a wavlm model (WavLMForXVector), not a speech recognition model "
        "(Whisper, Wav2Vec2 CTC, ...); give one such as openai/whisper-large-v3.")
    code, out, err = _eval([*common, "--asr", str(asr), "--speaker-model", str(speaker), "--language", "en"])
    assert code == 2 and err.strip().splitlines()[-1].startswith(
        f"higgs-v3: error: --language 'en' cannot be used with the ASR model {str(asr)!r}: The generation config is "
        "outdated and is thus not compatible with the `language` argument to `generate`.")
    assert not (tmp_path / "out" / "audio").exists()


class EndAt(LogitsProcessor):
    """Every row ends after exactly `frames` frames (EOC forced on codebook 0 from that step, forbidden before)."""

    def __init__(self, frames: int):
        self.frames, self.prompt_length = frames, None

    def __call__(self, input_ids, scores):
        self.prompt_length = self.prompt_length or input_ids.shape[1]
        rows = torch.arange(0, scores.shape[0], NUM_CODEBOOKS)
        scores[rows, EOC] = -float("inf")
        if input_ids.shape[1] - self.prompt_length >= self.frames:
            scores[rows] = -float("inf")
            scores[rows, EOC] = 0.0
        return scores


@pytest.mark.integration
def test_verify_with_a_transformers_asr_pipeline(tmp_path, tokenizer):
    """`verify=` with a real `pipeline("automatic-speech-recognition")` (the tiny random Whisper): every take is
    transcribed, its WER recorded; above `max_wer` it is redone, and the kept take's WER is the pipeline's."""
    from transformers import pipeline

    from higgs_v3.codec_higgs_v3 import resample_audio
    from higgs_v3.longform_higgs_v3 import synthesize_long, word_error_rate
    from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor
    from higgs_v3.testing.tiny import tiny_codec_config
    from conftest import tiny_model

    asr = pipeline("automatic-speech-recognition", model=str(tiny_whisper(tmp_path / "whisper")), device="cpu")
    model = tiny_model(codec_config=tiny_codec_config())
    processor = HiggsAudioV3Processor.from_model_config(tokenizer, model.config)
    text = "Alpha beta gamma."
    result = synthesize_long(model, processor, text, seed=2, max_seconds=1.0, verify=asr, max_wer=0.0,
                             seconds_per_char=None, logits_processor=LogitsProcessorList([EndAt(6)]))
    (chunk,) = result.chunks
    heard = asr({"raw": resample_audio(chunk.waveform, 24000, 16000).numpy(), "sampling_rate": 16000})["text"]
    assert chunk.wer == word_error_rate(text, heard) and chunk.finished
    assert [a["seed"] for a in chunk.attempts] == [2, 2 + 2**40, 2 + 2 * 2**40]  # the random ASR never agrees
    assert all(a["problem"] == f"WER {a['wer']:.2f} above 0" for a in chunk.attempts) and result.failed_chunks == [0]
    assert chunk.wer == min(a["wer"] for a in chunk.attempts)  # the best take is kept


def test_speak_and_batch_pass_the_verify_pipeline_to_the_long_form_core(monkeypatch):
    """`--verify ASR --max-wer W`: the pipeline `load_asr` builds on the model's device, with `max_wer`, reaches
    `synthesize_long` (speak) and `run_batch` (batch); without it, none. `--retries` unset: the model's default
    (`default_retries`)."""
    from types import SimpleNamespace

    from higgs_v3 import longform_higgs_v3
    from higgs_v3.cli import batch as batch_cli
    from higgs_v3.cli.main import SpeakRequest, build_parser
    from higgs_v3.evaluation import scoring

    monkeypatch.setattr(scoring, "load_asr", lambda name, device, option: ("pipeline", name, device))
    seen = {}
    monkeypatch.setattr(longform_higgs_v3, "synthesize_long", lambda model, processor, text, **options: seen.update(
        options))
    model = SimpleNamespace(device="cpu")
    request = SpeakRequest.from_args(build_parser().parse_args(["speak", "Hi.", "--verify", "asr", "--max-wer", "0.3"]))
    request.synthesize(model, None)
    assert seen["verify"] == ("pipeline", "asr", "cpu") and seen["max_wer"] == 0.3
    args = build_parser().parse_args(["batch", "m.jsonl", "--out-dir", "o", "--verify", "asr", "--retries", "1"])
    assert batch_cli._take_options(args, model) == {"retries": 1, "verify": ("pipeline", "asr", "cpu"), "max_wer": 0.5}
    args = build_parser().parse_args(["batch", "m.jsonl", "--out-dir", "o", "--model", "a/b"])
    assert batch_cli._take_options(args, model) == {}
    # --retries unset is left to the model (`default_retries`: the demo model's generation config says 0)
    args = build_parser().parse_args(["batch", "m.jsonl", "--out-dir", "o", "--model", "tiny-random"])
    assert batch_cli._take_options(args, model) == {}
    for argv, retries in ((["--model", "tiny-random"], None), (["--model", "tiny-random", "--retries", "2"], 2),
                          (["--model", "a/b"], None)):
        request = SpeakRequest.from_args(build_parser().parse_args(["speak", "Hi.", *argv]))
        assert request.longform_options.get("retries") == retries


def test_the_speak_summary_names_the_chunks_redone():
    from types import SimpleNamespace

    from higgs_v3.cli.main import summary_line
    from higgs_v3.delay_higgs_v3 import HiggsAudioV3AudioSpec

    chunks = [SimpleNamespace(attempts=[{}] * takes) for takes in (1, 3, 2)]
    result = SimpleNamespace(chunks=chunks, unfinished_chunks=[1], max_new_tokens=32, duration=2.5,
                             generation_seconds=1.0, real_time_factor=0.5)
    line = summary_line("a.wav", result, 7, SimpleNamespace(audio_spec=HiggsAudioV3AudioSpec()))
    assert line == ("Wrote a.wav: 2.50 s of audio (3 chunks, seed 7) in 1.00 s, RTF 0.50; 1 of 3 chunks hit the 1 s "
                    "limit: 2; 2 redone with another seed: 2, 3.")
