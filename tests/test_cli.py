# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""The `higgs-v3` console script on the tiny random model: the README commands, long text from stdin, a dialogue, and
the error cases (exit code 2, one line on stderr, no traceback). Expected lengths come from the generated codes saved
next to the wav (`--save-codes`) and from the chunker; the written audio is compared with the codec's own decoding of
those codes.

Every subprocess pays the package import (several seconds on 2 shared cores), so the unit layer runs the commands and
every error message through `main(argv)` in-process (and checks that the README's command lines parse and validate);
the same commands in a subprocess, and the README's commands run as written, are in the integration layer.
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from safetensors import safe_open

from higgs_v3.cli import main as cli_main
from higgs_v3.audio_io_higgs_v3 import HiggsAudioV3Voice
from higgs_v3.chunking_higgs_v3 import split_text
from higgs_v3.cli.main import SpeakRequest, build_parser, main
from higgs_v3.cli.models import TINY_RANDOM_MAX_SECONDS, ensure_tiny_random, tiny_random_dir


SR, SPF = 24000, 960
PCM16_TOLERANCE = 2 / 32768  # a 16-bit wav: rounding plus libsndfile's 32767 vs 32768 scaling
SCRIPT = Path(sys.executable).with_name("higgs-v3")


def load_once(load):
    """`load(path, ...)` computed once per resolved path and arguments: in-process commands share the tiny model and
    processor instead of reading them from disk again each (the subprocess tests load them for real every time)."""
    cached = functools.cache(lambda path, *args: load(path, *args))
    return lambda path, *args: cached(Path(path).resolve(), *args)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A private cache holding the tiny random model (built once, in-process) for every command of this module."""
    directory = tmp_path_factory.mktemp("higgs_cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("HIGGS_V3_CACHE", str(directory))
    patch.delenv("HIGGS_V3_TINY_RANDOM", raising=False)
    patch.delenv("HIGGS_V3_MODEL", raising=False)
    patch.setattr(cli_main, "load_processor", load_once(cli_main.load_processor))
    patch.setattr(cli_main, "load_model", load_once(cli_main.load_model))
    ensure_tiny_random()
    yield directory
    patch.undo()


@pytest.fixture(scope="module")
def tiny_model(cache):
    from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration

    return HiggsAudioV3ForConditionalGeneration.from_pretrained(str(cache / "tiny-random")).eval()


def run(args: list[str], cwd: Path, stdin: str | None = None, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HIGGS_V3_DEBUG": "", **env}
    return subprocess.run(
        [str(SCRIPT), *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=600, env=environment
    )


@pytest.fixture(params=["in-process", pytest.param("subprocess", marks=pytest.mark.integration)])
def runner(request, cache, monkeypatch, capsys):
    """Runs the command line in a subprocess (slow: each pays the package import) or as `main(argv)` in this process
    (library logging settings left alone); returns `(exit code, stdout, stderr)`."""
    if request.param == "subprocess":
        def call(args, cwd, stdin=None):
            result = run(args, cwd=cwd, stdin=stdin)
            return result.returncode, result.stdout, result.stderr
        return call

    def call(args, cwd, stdin=None):
        monkeypatch.chdir(cwd)
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8"))))
        capsys.readouterr()
        code = main_restoring_library_settings(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


def library_settings() -> tuple:
    """The logging levels, warning filters and progress-bar switches a command may change while it runs."""
    import logging
    import warnings

    import huggingface_hub.utils
    from transformers.utils import logging as transformers_logging

    return (
        transformers_logging.get_verbosity(), logging.getLogger("higgs_v3").level, list(warnings.filters),
        transformers_logging.is_progress_bar_enabled(), huggingface_hub.utils.are_progress_bars_disabled(),
    )


def main_restoring_library_settings(argv: list[str]) -> int:
    """`main(argv)` in this process, checking that it leaves the caller's library settings as they were (a notebook
    or a test that calls it must not stay silenced)."""
    before = library_settings()
    code = main(argv)
    assert library_settings() == before, "main() did not restore the library settings it changed"
    return code


def read_codes(path: Path) -> tuple[torch.Tensor, list[int], dict]:
    with safe_open(str(path), framework="pt") as f:
        return f.get_tensor("codes"), f.get_tensor("chunk_frames").tolist(), f.metadata()


def read_wav(path: Path) -> np.ndarray:
    samples, rate = soundfile.read(str(path), dtype="float32")
    assert rate == SR and samples.ndim == 1
    return samples


def assert_clean_success(code: int, err: str) -> None:
    assert code == 0, err
    assert "Traceback" not in err and "Warning" not in err, err


# ------------------------------------------------------------------------------------------ success, subprocess
def test_console_script_is_installed():
    assert SCRIPT.is_file(), f"{SCRIPT} is missing: reinstall with `pip install -e .`"


@pytest.mark.integration
def test_readme_command(cache, tiny_model, tmp_path):
    """`higgs-v3 speak --model tiny-random "Hello world" -o hello.wav`: the wav holds exactly the generated frames
    (at most the demo model's 3 s limit) and equals the codec's decoding of the saved codes."""
    result = run(["speak", "--model", "tiny-random", "Hello world", "-o", "hello.wav", "--seed", "5",
                  "--save-codes", "codes.safetensors"], cwd=tmp_path)
    assert_clean_success(result.returncode, result.stderr)
    codes, (frames,), metadata = read_codes(tmp_path / "codes.safetensors")
    (finished,) = json.loads(metadata["finished"])
    assert 0 < frames <= TINY_RANDOM_MAX_SECONDS * 25 and codes.shape == (frames, 8)
    assert finished or frames == TINY_RANDOM_MAX_SECONDS * 25
    assert json.loads(metadata["texts"]) == ["Hello world"]
    audio = read_wav(tmp_path / "hello.wav")
    assert audio.shape == (frames * SPF,)
    with torch.no_grad():
        decoded = tiny_model.codec.decode(codes.T[None]).reshape(-1).numpy()
    assert np.abs(audio - np.clip(decoded, -1, 1)).max() <= PCM16_TOLERANCE
    limit = "no chunk hit the 3 s limit" if finished else "1 of 1 chunk hit the 3 s limit: 1"
    assert re.fullmatch(
        rf"Wrote hello\.wav: {frames / 25:.2f} s of audio \(1 chunk, seed 5\) in \d+\.\d\d s, RTF \d+\.\d\d; "
        rf"{limit}\.\nAlso wrote codes in codes\.safetensors\.\n",
        result.stdout,
    ), result.stdout
    # The progress bar on stderr: seconds of audio and the real-time factor.
    assert f"{frames / 25:.1f} s of audio" in result.stderr
    assert re.search(r"1/1 chunks done, RTF \d+\.\d\d", result.stderr)


def test_long_text_from_stdin(runner, tmp_path):
    text = ("The first sentence is short. The second sentence is a little longer than that. "
            "第三句是中文。<|emotion:elation|>And the last one is happy!")
    chunks = split_text(text, 30)
    assert len(chunks) >= 4
    code, out, err = runner(["speak", "-", "--model", "tiny-random", "-o", "long.flac", "--max-chars", "30",
                             "--max-seconds", "0.2", "--pause", "0.1", "--batch-size", "2", "--seed", "1",
                             "--save-codes", "c.safetensors", "--save-voice", "voice.json"], cwd=tmp_path, stdin=text)
    assert_clean_success(code, err)
    codes, chunk_frames, metadata = read_codes(tmp_path / "c.safetensors")
    assert json.loads(metadata["texts"]) == chunks
    assert json.loads(metadata["seeds"]) == list(range(1, 1 + len(chunks)))
    assert len(chunk_frames) == len(chunks) and codes.shape == (sum(chunk_frames), 8)
    audio, rate = soundfile.read(str(tmp_path / "long.flac"), dtype="float32")
    assert rate == SR and audio.shape == (sum(chunk_frames) * SPF + (len(chunks) - 1) * round(0.1 * SR),)
    # Without a user reference, the first chunk is the voice of the rest (and is what --save-voice writes).
    voice = HiggsAudioV3Voice.load(tmp_path / "voice.json")
    assert voice.text == chunks[0] and torch.equal(voice.codes, codes[: chunk_frames[0]])
    assert f"({len(chunks)} chunks, seed 1)" in out
    finished = json.loads(metadata["finished"])
    assert all(done or frames == 5 for done, frames in zip(finished, chunk_frames))  # the limit: 0.2 s = 5 frames
    hit = [i + 1 for i, done in enumerate(finished) if not done]
    limit = f"{len(hit)} of {len(chunks)} chunks hit the 0.2 s limit: {', '.join(map(str, hit))}." if hit else \
        "no chunk hit the 0.2 s limit."
    assert out.splitlines()[0].endswith(limit), out


def test_dialogue_with_a_clip_and_a_saved_voice(runner, tmp_path):
    clip = tmp_path / "ann.wav"
    soundfile.write(str(clip), (0.3 * np.sin(np.arange(int(1.5 * 16000)) / 5)).astype(np.float32), 16000)
    HiggsAudioV3Voice(codes=torch.randint(0, 1024, (6, 8), generator=torch.Generator().manual_seed(0))).save(
        tmp_path / "bob.safetensors"
    )
    (tmp_path / "play.txt").write_text(
        "[Ann] Hello Bob: how are you?\n[Bob] <|emotion:elation|>Great, thanks!\n[Ann] Fine.\n", encoding="utf-8"
    )
    code, out, err = runner(["speak", "--dialogue", "--text-file", "play.txt", "--model", "tiny-random",
                             "--voice", f"Ann={clip}:Hi: I am Ann.", "--voice", "Bob=bob.safetensors", "-o", "play.wav",
                             "--max-seconds", "0.2", "--pause", "0.5", "--split-dir", "lines", "--save-codes",
                             "c.safetensors", "--no-progress"], cwd=tmp_path)
    assert_clean_success(code, err)
    assert err == ""  # --no-progress
    _, chunk_frames, metadata = read_codes(tmp_path / "c.safetensors")
    assert json.loads(metadata["speakers"]) == ["Ann", "Bob", "Ann"] and len(chunk_frames) == 3
    assert read_wav(tmp_path / "play.wav").shape == (sum(chunk_frames) * SPF + 2 * round(0.5 * SR),)
    names = ["001_Ann.wav", "002_Bob.wav", "003_Ann.wav"]
    assert sorted(p.name for p in (tmp_path / "lines").iterdir()) == names
    for name, frames in zip(names, chunk_frames):
        assert read_wav(tmp_path / "lines" / name).shape == (frames * SPF,)
    assert "Also wrote codes in c.safetensors, 3 files in lines." in out


# -------------------------------------------------------------------------------------------- errors, subprocess
ERROR_CASES = {
    "missing text file": (["speak", "--text-file", "nope.txt", "--model", "tiny-random"],
                          "higgs-v3: error: Text file 'nope.txt' does not exist."),
    "empty text": (["speak", "  \n ", "--model", "tiny-random"],
                   "higgs-v3: error: The text is empty; there is nothing to speak."),
    "unknown tag": (["speak", "Hi. <|emotion:happy|>Yes.", "--model", "tiny-random"],
                    "higgs-v3: error: Unknown control tag '<|emotion:happy|>' in the text; it would be read aloud. "
                    "Closest valid tags: "),
    "unknown model": (["speak", "Hello", "--model", "no-such-model"],
                      "higgs-v3: error: Unknown model 'no-such-model': it is not 'tiny-random', an existing folder, or a "
                      "Hub repo id (owner/name)."),
}
SLOW_ERROR_CASES = {
    "unreachable hub model": (["speak", "Hello", "--model", "someone/no-such-model"],
                              "higgs-v3: error: Cannot load model 'someone/no-such-model': HF_HUB_OFFLINE is set, and it "
                              "is not in the local Hugging Face cache. Connect and run again, or give a local folder "
                              "with --model (or 'tiny-random' for the demo model)."),
    "default model offline": (["speak", "Hello", "--model", "bosonai/higgs-audio-v3-tts-4b"],
                              "higgs-v3: error: Cannot load the default model 'bosonai/higgs-audio-v3-tts-4b': "
                              "HF_HUB_OFFLINE is set, and it is not in the local Hugging Face cache."),
    "missing reference": (["speak", "Hello", "--model", "tiny-random", "--ref-audio", "missing.wav"],
                          "higgs-v3: error: Reference audio file 'missing.wav' does not exist."),
    "unreadable reference": (["speak", "Hello", "--model", "tiny-random", "--ref-audio", "fake.wav"],
                             "higgs-v3: error: Could not read reference audio file 'fake.wav' ("),
    "speaker without voice": (["speak", "--dialogue", "[Ann] Hi.\n[Bob] Hey.", "--model", "tiny-random"],
                              "higgs-v3: error: Speaker 'Ann' (line 1) has no voice; give one per speaker"),
    "bad option": (["speak", "Hello", "--max-seconds", "0"],
                   "higgs-v3 speak: error: argument --max-seconds: --max-seconds must be more than zero, got '0' "
                   "(see higgs-v3 speak --help)"),
    "missing output folder": (["speak", "Hello", "--model", "tiny-random", "-o", "no/such/dir/x.wav"],
                              "higgs-v3: error: Cannot write the audio file 'no/such/dir/x.wav': the folder "),
}


def check_error(result: subprocess.CompletedProcess, expected: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stdout == ""
    # One line; the only other line allowed is the notice of a (re)build of the cached tiny model.
    lines = [line for line in result.stderr.splitlines() if not line.startswith("Building the tiny random demo model")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(expected), lines[0]


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_errors_in_a_subprocess(cache, tmp_path, case):
    args, expected = ERROR_CASES[case]
    check_error(run(args, cwd=tmp_path), expected)


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(SLOW_ERROR_CASES))
def test_more_errors_in_a_subprocess(cache, tmp_path, case):
    (tmp_path / "fake.wav").write_text("not audio")
    args, expected = SLOW_ERROR_CASES[case]
    check_error(run(args, cwd=tmp_path), expected)


# ----------------------------------------------------------------------------------------- errors, in-process
@pytest.fixture
def in_process(cache, tmp_path, monkeypatch, capsys):
    """`main(argv)` in this process (no import cost), restoring the library settings it changes."""
    monkeypatch.chdir(tmp_path)
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read at import time, so patched here
    (tmp_path / "fake.wav").write_text("not audio")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (tmp_path / "play.txt").write_text("[Ann] Hi.\n", encoding="utf-8")
    soundfile.write(str(tmp_path / "clip.wav"), np.zeros(24000, dtype=np.float32), 24000)
    (tmp_path / "listed").mkdir()
    (tmp_path / "listed" / "config.json").write_text("[1]")

    def call(*args: str) -> tuple[int, str, str]:
        code = main_restoring_library_settings(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


IN_PROCESS_ERRORS = {
    **ERROR_CASES,
    **SLOW_ERROR_CASES,
    "both text sources": (["speak", "Hi", "--text-file", "x.txt"],
                          "higgs-v3: error: Give the text either as an argument or with --text-file, not both."),
    "no text": (["speak", "--model", "tiny-random"], "higgs-v3: error: No text: give TEXT, --text-file FILE, or '-' to read stdin."),
    "not utf-8": (["speak", "--text-file", "latin1.txt"],
                  "higgs-v3: error: Could not read text file 'latin1.txt' as UTF-8 text (invalid continuation byte at byte 3)."),
    "ref text alone": (["speak", "Hi", "--ref-text", "Hello"],
                       "higgs-v3: error: --ref-text is the transcript of a reference clip; give --ref-audio (or --voice) as well."),
    "missing voice file": (["speak", "Hi", "--voice", "v.safetensors"], "higgs-v3: error: Voice file 'v.safetensors' does not exist."),
    "dialogue voice syntax": (["speak", "--dialogue", "[Ann] Hi.", "--voice", "clip.wav"],
                              "higgs-v3: error: --voice 'clip.wav': with --dialogue each voice is Name=clip.wav[:transcript] "
                              "or Name=voice.safetensors."),
    "dialogue missing clip": (["speak", "--dialogue", "[Ann] Hi.", "--voice", "Ann=gone.wav:Hello"],
                              "higgs-v3: error: Voice file or reference clip 'gone.wav' for speaker 'Ann' does not exist."),
    "dialogue unreadable clip": (["speak", "--dialogue", "[Ann] Hi.", "--voice", "Ann=fake.wav"],
                                 "higgs-v3: error: Could not read reference audio file 'fake.wav' ("),
    "dialogue stranger voice": (["speak", "--dialogue", "[Ann] Hi.", "--voice", "Ann=clip.wav", "--voice", "Bo=clip.wav"],
                                "higgs-v3: error: Voices were given for 'Bo', who never speak; the script's speakers are 'Ann'."),
    "dialogue no speaker": (["speak", "--dialogue", "Hi.\n[Ann] Yo."],
                            "higgs-v3: error: Dialogue line 1 ('Hi.') has no speaker; every line of a dialogue script"),
    "dialogue unknown tag": (["speak", "--dialogue", "[Ann] Hi.\n[Ann] <|sfx:laugh|>Ha.", "--voice", "Ann=clip.wav",
                              "--model", "tiny-random"],
                             "higgs-v3: error: Unknown control tag '<|sfx:laugh|>' in dialogue line 2"),
    "ref text tag": (["speak", "Hi", "--ref-audio", "clip.wav", "--ref-text", "<|oops|>", "--model", "tiny-random"],
                     "higgs-v3: error: Unknown control tag '<|oops|>' in the reference text"),
    "dialogue transcript tag": (["speak", "--dialogue", "[Ann] Hi.", "--voice", "Ann=clip.wav:<|tts|>Hello.",
                                 "--model", "tiny-random"],
                                "higgs-v3: error: '<|tts|>' in the transcript of the voice of 'Ann' is a structural "
                                "prompt token"),
    "dialogue script as a file name": (["speak", "--dialogue", "play.txt", "--voice", "Ann=clip.wav"],
                                       "higgs-v3: error: --dialogue reads the script from TEXT, and 'play.txt' is a file "
                                       "name; read the script from it with --dialogue --text-file play.txt."),
    "output overwrites an input": (["speak", "Hi", "--ref-audio", "clip.wav", "-o", "./clip.wav"],
                                   "higgs-v3: error: -o './clip.wav' is also an input of this command; writing it would "
                                   "destroy it. Choose another file name."),
    "seed out of range": (["speak", "Hi", "--seed", "-1"],
                          "higgs-v3: error: --seed must be an integer in [0, 2**62), got -1."),
    "bad min-p": (["speak", "Hi", "--min-p", "0"],
                  "higgs-v3 speak: error: argument --min-p: --min-p must be in (0, 1], got '0' (see higgs-v3 speak --help)"),
    "bad voice file name": (["speak", "Hi", "--save-voice", "v.wav"],
                                "higgs-v3: error: The voice file 'v.wav' must end with .safetensors or .json."),
    "bad extension": (["speak", "Hi", "-o", "x.mp9"],
                      "higgs-v3: error: Cannot write audio file 'x.mp9': '.mp9' is not an audio format written here; use one of .wav, .flac, .ogg, .mp3, .aiff, .au, .caf, .w64, .rf64."),
    "bad codes name": (["speak", "Hi", "--save-codes", "c.npz"],
                       "higgs-v3: error: The codes file 'c.npz' must end with .safetensors."),
    "model is a file": (["speak", "Hi", "--model", "clip.wav"],
                        "higgs-v3: error: Model 'clip.wav' is a file; give a folder with a checkpoint (config.json), a Hub "
                        "repo id or 'tiny-random'."),
    "model folder without config": (["speak", "Hi", "--model", "."],
                                    "higgs-v3: error: Model folder '.' has no config.json; give a folder with a converted "
                                    "or original Higgs Audio v3 checkpoint."),
    "model config not an object": (["speak", "Hi", "--model", "listed"],
                                   "higgs-v3: error: The model config 'listed/config.json' holds a JSON list, not an "
                                   "object."),
    "bad top-p": (["speak", "Hi", "--top-p", "1.5"],
                  "higgs-v3 speak: error: argument --top-p: --top-p must be in (0, 1], got '1.5' (see higgs-v3 speak --help)"),
    "no command": ([], "usage: higgs-v3"),
    "convert bad input": (["convert", "--input", "no/such/dir", "--output", "out"],
                          "higgs-v3 convert: error: The input 'no/such/dir' is neither an existing folder nor a Hub repo id"),
}


@pytest.mark.parametrize("case", sorted(IN_PROCESS_ERRORS))
def test_error_messages(in_process, case):
    args, expected = IN_PROCESS_ERRORS[case]
    code, out, err = in_process(*args)
    assert code == 2, err
    assert out == "" and "Traceback" not in err
    assert err.startswith(expected), err
    if case != "no command":  # the bare command prints its help
        assert len(err.splitlines()) == 1, err


@pytest.mark.parametrize("text", ["", " \n "])
def test_a_blank_text_is_refused_before_any_model_is_resolved(in_process, monkeypatch, text):
    """`speak ""` names the problem without resolving (downloading) or loading a model: "nothing to speak" needs no
    tokenizer (`chunking_higgs_v3.nothing_to_speak`, which the processor's check_text starts with)."""
    for name in ("resolve_model", "load_processor", "load_model"):
        monkeypatch.setattr(cli_main, name, lambda *args, name=name: pytest.fail(f"speak called {name}"))
    code, out, err = in_process("speak", text, "--model", "bosonai/higgs-audio-v3-tts-4b")
    assert (code, out, err) == (2, "", "higgs-v3: error: The text is empty; there is nothing to speak.\n")


def test_ref_audio_url_is_fetched(in_process, tiny_model, tmp_path):
    """`--ref-audio http://...`: not checked as a local file; the clip is fetched and encoded (its voice is the file's
    voice), and an address that serves no clip is one line with exit code 2."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    clip = np.sin(np.arange(24000 * 1.2) / 7.0).astype(np.float32) * 0.3
    soundfile.write(str(tmp_path / "me.wav"), clip, 24000, subtype="FLOAT")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        code, out, err = in_process("speak", "Hi.", "--model", "tiny-random", "--ref-audio", f"{base}/me.wav",
                                    "--max-seconds", "0.12", "--save-voice", "voice.json", "-o", "out.wav")
        assert code == 0, err
        expected = tiny_model.encode_reference(clip, sampling_rate=24000).codes
        assert torch.equal(HiggsAudioV3Voice.load(tmp_path / "voice.json").codes, expected)
        code, out, err = in_process("speak", "Hi.", "--model", "tiny-random", "--ref-audio", f"{base}/gone.wav")
    finally:
        server.shutdown()
        server.server_close()
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"higgs-v3: error: Could not fetch reference audio URL '{base}/gone.wav' (HTTP 404 "), err


# ----------------------------------------------------------------------------------------- other commands
def test_make_tiny_and_tags(in_process, tmp_path):
    code, out, _ = in_process("make-tiny", "demo")
    assert code == 0 and out.startswith("Wrote the tiny random Higgs Audio v3 model to demo")
    generation = json.loads((tmp_path / "demo" / "generation_config.json").read_text())
    assert generation["max_new_tokens"] == TINY_RANDOM_MAX_SECONDS * 25 + 7
    for name in ("config.json", "model.safetensors", "tokenizer.json", "processor_config.json"):
        assert (tmp_path / "demo" / name).is_file()
    code, out, _ = in_process("tags", "--model", "demo")
    tags = out.splitlines()
    # Spec §2: 21 emotion, 3 style, 9 sfx, 10 prosody and 2 env tags, one token each, in id order.
    families = [re.fullmatch(r"<\|(emotion|style|sfx|prosody|env):[^|<>]+\|>", tag).group(1) for tag in tags]
    assert code == 0 and "<|emotion:anger|>" in tags and len(set(tags)) == len(tags)
    assert {family: families.count(family) for family in families} == {"emotion": 21, "style": 3, "sfx": 9,
                                                                        "prosody": 10, "env": 2}


def test_tags_reads_the_tokenizer_file_without_loading_a_processor(in_process, cache, monkeypatch):
    from higgs_v3.cli.main import load_processor as real_load_processor

    expected = real_load_processor(cache / "tiny-random").valid_tags()
    monkeypatch.setattr(cli_main, "load_processor", lambda path: pytest.fail("a processor was loaded"))
    code, out, _ = in_process("tags")
    assert code == 0 and out.splitlines() == expected and len(expected) == 45


@pytest.mark.integration
def test_tags_imports_no_torch(cache, tmp_path):
    """`higgs-v3 tags` on the built demo model: no torch, no transformers model code (it took 8 s, now about 1 s)."""
    script = ("import sys\nfrom higgs_v3.cli.main import main\ncode = main(['tags'])\n"
              "assert code == 0 and 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)[:3]")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "HIGGS_V3_CACHE": str(cache)})
    assert result.returncode == 0, result.stderr
    assert "<|emotion:anger|>" in result.stdout.splitlines()


def test_tiny_random_is_built_once(cache, monkeypatch):
    target = cache / "tiny-random"
    stamp = target / ".higgs_v3_tiny_random"
    before = (stamp.stat().st_mtime_ns, (target / "model.safetensors").stat().st_mtime_ns)
    assert ensure_tiny_random() == target
    assert (stamp.stat().st_mtime_ns, (target / "model.safetensors").stat().st_mtime_ns) == before
    monkeypatch.setenv("HIGGS_V3_TINY_RANDOM", str(cache / "elsewhere"))
    assert tiny_random_dir() == cache / "elsewhere"
    config = json.loads((target / "generation_config.json").read_text())  # the demo's default, for every caller
    assert config["higgs_v3_retries"] == 0


def test_tiny_random_refuses_a_file_or_another_folder_untouched(monkeypatch, tmp_path):
    (tmp_path / "notes.txt").write_text("my notes")
    (tmp_path / "documents").mkdir()
    (tmp_path / "documents" / "letter.txt").write_text("a letter")
    for name, what in [("notes.txt", "is a file; it must name a folder for the tiny random demo model (absent, empty, "
                                     "or built there before). The file was left as it is."),
                       ("documents", "is a folder that holds something else than the tiny random demo model; name an "
                                     "absent or empty folder (building the model there would replace it). The folder "
                                     "was left as it is.")]:
        monkeypatch.setenv("HIGGS_V3_TINY_RANDOM", str(tmp_path / name))
        with pytest.raises(ValueError) as raised:
            ensure_tiny_random()
        assert str(raised.value) == f"$HIGGS_V3_TINY_RANDOM ({str(tmp_path / name)!r}) {what}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["documents", "notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "my notes"
    assert [p.name for p in (tmp_path / "documents").iterdir()] == ["letter.txt"]


@pytest.mark.integration
def test_convert_then_speak_with_the_converted_model(cache, tmp_path):
    """make-tiny --original, convert it with the delegated converter, speak with the converted folder."""
    assert run(["make-tiny", "--original", "orig"], cwd=tmp_path).returncode == 0
    converted = run(["convert", "--input", "orig", "--output", "conv"], cwd=tmp_path)
    assert converted.returncode == 0, converted.stderr
    result = run(["speak", "Hello there.", "--model", "conv", "-o", "x.wav", "--max-seconds", "0.2", "--seed", "0",
                  "--save-codes", "c.safetensors"], cwd=tmp_path)
    assert_clean_success(result.returncode, result.stderr)
    _, (frames,), _ = read_codes(tmp_path / "c.safetensors")
    assert 0 < frames <= 5 and read_wav(tmp_path / "x.wav").shape == (frames * SPF,)
    shutil.rmtree(tmp_path / "conv")


def test_voice_specs_split_path_and_transcript(tmp_path, monkeypatch):
    """The clip is the whole spec when it is a file, else the shortest prefix before a ':' that is one."""
    monkeypatch.chdir(tmp_path)
    for name in ("a.wav", "odd:name.wav", "v.safetensors"):
        (tmp_path / name).write_bytes(b"x")
    voices = cli_main._parse_dialogue_voices(
        ["Ann=a.wav:Hi: I am Ann.", "Bob=v.safetensors", "Cy=odd:name.wav", "Di=odd:name.wav:Yes."]
    )
    assert voices == {
        "Ann": ("a.wav", "Hi: I am Ann."),
        "Bob": ("v.safetensors", None),
        "Cy": ("odd:name.wav", None),
        "Di": ("odd:name.wav", "Yes."),
    }
    with pytest.raises(cli_main.CliError, match=re.escape("--voice gives speaker 'Ann' twice.")):
        cli_main._parse_dialogue_voices(["Ann=a.wav", "Ann=v.safetensors"])
    with pytest.raises(cli_main.CliError, match=re.escape("--voice 'Ann=': with --dialogue each voice is")):
        cli_main._parse_dialogue_voices(["Ann="])


def test_convert_help_names_the_command(capsys):
    """`higgs-v3 convert --help` and its errors name `higgs-v3 convert`, not the module's file."""
    assert main_restoring_library_settings(["convert", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: higgs-v3 convert ") and "convert_checkpoint.py" not in out


@pytest.mark.parametrize("raised, code, message", [
    (None, 0, ""),
    (ValueError("The input 'x' is neither an existing folder nor a Hub repo id."), 2,
     "higgs-v3 convert: error: The input 'x' is neither an existing folder nor a Hub repo id.\n"),
    (KeyboardInterrupt(), 130, "higgs-v3 convert: interrupted\n"),
    (RuntimeError("boom"), 1, "higgs-v3 convert: internal error: RuntimeError: boom (set HIGGS_V3_DEBUG=1 for the "
                              "traceback)\n"),
], ids=["success", "user fault", "interrupted", "bug"])
def test_convert_runs_through_the_one_error_path(monkeypatch, capsys, raised, code, message):
    """`higgs-v3 convert` (and `python convert_checkpoint.py`, the same command) exits through the command line's one
    error path: 0, 2 for a fault of the input, output or options, 130 when interrupted, 1 for a bug; a failed upload of
    a complete conversion is 1 too (test_convert.py)."""
    from higgs_v3 import convert_checkpoint
    from higgs_v3.conversion.original_format import ConversionError

    def conversion(*args, **kwargs):
        if raised is not None:
            raise ConversionError(str(raised)) if isinstance(raised, ValueError) else raised
        return convert_checkpoint.ConversionResult(Path("out"), 3, ["model.safetensors"], {}, True)

    monkeypatch.setattr(convert_checkpoint, "convert", conversion)
    assert main_restoring_library_settings(["convert", "--input", "x", "--output", "y", "--no-verify"]) == code
    captured = capsys.readouterr()
    assert captured.err == message
    if raised is None:
        assert captured.out == "Converted 3 tensors into out (model.safetensors).\nNot verified (--no-verify).\n"


# ----------------------------------------------------------------------------------------- the README's commands
README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands(converted: str = "tiny-random") -> list[list[str]]:
    """Every `higgs-v3 ...` line of the README's shell blocks, as argument lists (comments dropped), with the model
    names replaced by the tiny random one (`path/to/converted-repo`, a folder, by `converted`)."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    lines = [line for block in blocks for line in block.splitlines() if line.startswith("higgs-v3 ")]
    commands = []
    for line in lines:
        args = shlex.split(line, comments=True)[1:]
        names = {"MODEL": "tiny-random", "bosonai/higgs-audio-v3-tts-4b": "tiny-random", "path/to/converted-repo": converted}
        commands.append([names.get(arg, arg) for arg in args])
    return commands


def write_readme_inputs(directory: Path) -> None:
    """The files the README's commands read: a text, a script, clips, a saved voice and fine-tuning data."""
    clip = (0.3 * np.sin(np.arange(int(1.5 * SR)) / 5)).astype(np.float32)
    for name in ("me.wav", "ann.wav"):
        soundfile.write(str(directory / name), clip, SR)
    HiggsAudioV3Voice(codes=torch.randint(0, 1024, (6, 8), generator=torch.Generator().manual_seed(0))).save(
        directory / "bob.safetensors"
    )
    (directory / "chapter.txt").write_text("A first sentence. A second one.", encoding="utf-8")
    (directory / "script.txt").write_text("[Ann] Hello Bob.\n[Bob] Hi Ann!\n", encoding="utf-8")
    (directory / "my_voice").mkdir()
    for i, line in enumerate(("Good morning.", "See you.")):
        soundfile.write(str(directory / "my_voice" / f"line{i}.wav"), clip[: int((0.5 + 0.1 * i) * SR)], SR)
        (directory / "my_voice" / f"line{i}.txt").write_text(line, encoding="utf-8")


def test_readme_commands_parse_and_validate(tmp_path, monkeypatch):
    """The README and the command line agree: each `speak` line of the README parses and passes every check that needs
    no model (the dialogue one reads its script from the file)."""
    monkeypatch.chdir(tmp_path)
    write_readme_inputs(tmp_path)
    commands = readme_commands()
    speak = [args for args in commands if args[0] == "speak"]
    assert len(speak) >= 4 and any("--dialogue" in args for args in speak)
    for args in speak:
        request = SpeakRequest.from_args(build_parser().parse_args(args))
        request.validate()
        if request.dialogue:
            assert request.text_file == "script.txt" and request.text.startswith("[Ann] Hello Bob.")
            assert set(request.voices) == {"Ann", "Bob"}


def test_an_unreachable_hub_gives_one_line_quickly(in_process, monkeypatch):
    """Online mode but no answer from the Hub: one short probe (no retry storm), then the local cache only, and one
    line naming the default model as such."""
    import time

    import huggingface_hub
    import huggingface_hub.constants

    from higgs_v3.conversion import original_format

    probes = []
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(original_format, "_can_connect", lambda *args: probes.append(args) or False)
    downloads, download = [], huggingface_hub.hf_hub_download
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: downloads.append(k) or download(*a, **k))
    began = time.perf_counter()
    code, out, err = in_process("speak", "Hello", "--model", "bosonai/higgs-audio-v3-tts-4b")
    assert time.perf_counter() - began < 20 and probes == [("huggingface.co", 443, 3.0)]
    assert downloads == [{"local_files_only": True}]  # the cache only: no request, so no retries
    assert (code, out) == (2, "")
    assert err == ("higgs-v3: error: Cannot load the default model 'bosonai/higgs-audio-v3-tts-4b': the Hub "
                   "(https://huggingface.co) did not answer within 3 s, and it is not in the local Hugging Face cache. "
                   "Connect and run again, or give a local folder with --model (or 'tiny-random' for the demo model).\n")



def test_ctrl_c_raised_inside_a_finalizer_is_delivered_again():
    """Python drops what a `__del__` raises (an "Exception ignored" message): a Ctrl-C that lands while a finalizer
    runs would be lost and the command would go on speaking. The command line's hook delivers it again; any other
    unraisable exception goes to the previous hook, as before."""
    from higgs_v3.cli.main import _keep_interrupts

    class Finalized:
        def __init__(self, error):
            self.error = error

        def __del__(self):
            raise self.error

    import signal

    passed_on = []
    # Ctrl-C as in the command's own process (a test worker may have another SIGINT handler, e.g. xdist's)
    previous_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    previous, sys.unraisablehook = sys.unraisablehook, _keep_interrupts(passed_on.append)
    try:
        Finalized(ValueError("not an interrupt"))  # finalized at once
        assert [type(u.exc_value) for u in passed_on] == [ValueError]
        with pytest.raises(KeyboardInterrupt):
            Finalized(KeyboardInterrupt())
            threading.Event().wait(timeout=120)  # interrupted at once (the wait ends on the signal, not the timeout)
        assert len(passed_on) == 1
    finally:
        sys.unraisablehook = previous
        signal.signal(signal.SIGINT, previous_handler)
