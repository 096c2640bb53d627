"""`higgs-v3 batch` (`batch_cli`): the manifest's checks with their exact errors (unit layer); in the integration
layer, a one-process run (every item written, a record and results.jsonl that say what was made, a rerun that skips
everything), and a two-process `accelerate launch` killed mid-way whose rerun finishes it without redoing an item, the
audio of every item identical to the one-process run (one launch: it is the expensive part)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
import soundfile
import torch

from higgs_v3 import audio_io_higgs_v3

from higgs_v3.cli import batch as batch_cli
from higgs_v3.cli.batch import RECORDS_DIR, RESULTS_FILE, assign_default_seeds, read_manifest, run_batch
from higgs_v3.cli.main import main as cli_main
from higgs_v3.longform_higgs_v3 import speech_jobs
from higgs_v3.processing_higgs_v3 import HiggsAudioV3Processor


ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["Hello there.", "The quick brown fox jumps.", "Numbers like one, two and three.", "Good morning!",
         "She sells sea shells.", "How are you today?", "Let us read another sentence aloud.", "Thank you very much."]
OPTIONS = ["--model", "tiny-random", "--device", "cpu", "--max-seconds", "0.4", "--batch-size", "1"]


def _manifest(directory: Path, lines: list) -> Path:
    path = directory / "manifest.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n",
                    encoding="utf-8")
    return path


def _items() -> list[dict]:
    """Eight items: explicit seeds on some, the default (`--seed` + index) on the others, one output with `.wav`."""
    items = [{"text": text, "output": f"item{i}"} for i, text in enumerate(TEXTS)]
    items[0]["seed"], items[3]["seed"], items[5]["output"] = 41, 7, "item5.wav"
    return items


def _batch(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["batch", *argv])
    return code, out.getvalue(), err.getvalue()


# ------------------------------------------------------------------------------------------------ manifest (unit)
def test_manifest_items_seeds_and_paths(tmp_path):
    (tmp_path / "voices").mkdir()
    audio_io_higgs_v3.HiggsAudioV3Voice(codes=torch.zeros(3, 8, dtype=torch.long)).save(
        tmp_path / "voices" / "ann.safetensors")
    path = _manifest(tmp_path, [{"text": "One.", "output": "a"}, "", {"text": "Two.", "output": "b.flac", "seed": 5},
                                {"text": "Three.", "output": "c", "voice": "voices/ann.safetensors"}])
    items = read_manifest(path, base_seed=100)
    assert [(i.line, i.output, i.seed) for i in items] == [(1, "a.wav", 100), (3, "b.flac", 5), (4, "c.wav", 102)]
    assert items[2].voice == str((tmp_path / "voices" / "ann.safetensors").resolve())
    # a reference clip may be an http(s) URL (fetched when the item is spoken); a voice is a file
    url = "https://example.com/clips/me.wav"
    items = read_manifest(_manifest(tmp_path, [{"text": "One.", "output": "a", "reference": url, "reference_text": "Hi"}]))
    assert (items[0].reference, items[0].reference_text) == (url, "Hi")
    with pytest.raises(ValueError, match=re.escape("line 1: the voice file 'https://example.com/v.safetensors' does not")):
        read_manifest(_manifest(tmp_path, [{"text": "One.", "output": "a", "voice": "https://example.com/v.safetensors"}]))


@pytest.mark.parametrize("lines, message", [
    (["{not json"], "manifest.jsonl line 1 is not valid JSON (Expecting property name enclosed in double quotes)."),
    (['["a"]'], "manifest.jsonl line 1 must be a JSON object, got a list."),
    ([{"text": "Hi.", "output": "a", "speed": 2}], "manifest.jsonl line 1 has unknown key(s) ['speed']; accepted: "
                                                   "text, output, seed, voice, reference, reference_text."),
    ([{"text": " ", "output": "a"}], "manifest.jsonl line 1: 'text' must be a non-empty string, got ' '."),
    ([{"text": "Hi."}], "manifest.jsonl line 1: 'output' must be a non-empty file name, got None."),
    ([{"text": "Hi.", "output": "../a"}], "manifest.jsonl line 1: 'output' '../a' must be a plain file name (no "
                                          "folder, not hidden); the file is written into --out-dir."),
    ([{"text": "Hi.", "output": "a"}, {"text": "Yo.", "output": "a.wav"}],
     "manifest.jsonl line 2: output 'a.wav' is already written by line 1; each item needs its own output name."),
    ([{"text": "Hi.", "output": "a", "reference_text": "x"}],
     "manifest.jsonl line 1 has 'reference_text' without 'reference' (a saved voice carries its transcript)."),
    ([""], "has no items (one JSON object per line)."),
])
def test_manifest_refusals(tmp_path, lines, message):
    with pytest.raises(ValueError) as error:
        read_manifest(_manifest(tmp_path, lines))
    assert str(error.value).endswith(message)


def test_a_bad_voice_or_clip_is_refused_with_its_line_before_any_model_work(tmp_path):
    """The manifest's voices and clips are loaded as the library loads them (`HiggsAudioV3Voice.load`,
    `prepare_reference_waveform`) when it is read: a damaged one is refused naming its line, in the library's words."""
    (tmp_path / "v.safetensors").write_bytes(b"not a voice")
    (tmp_path / "clip.wav").write_text("not audio")
    with pytest.raises(ValueError) as error:
        read_manifest(_manifest(tmp_path, [{"text": "Hi.", "output": "a", "voice": "v.safetensors"}]))
    assert str(error.value).startswith(f"manifest.jsonl line 1: Could not load voice file "
                                       f"{str(tmp_path / 'v.safetensors')!r}: it is not a readable safetensors file")
    with pytest.raises(ValueError) as error:
        read_manifest(_manifest(tmp_path, [{"text": "Hi.", "output": "a"},
                                           {"text": "Yo.", "output": "b", "reference": "clip.wav"}]))
    assert str(error.value).startswith(f"manifest.jsonl line 2: Could not read reference audio file "
                                       f"{str(tmp_path / 'clip.wav')!r} (")
    code, out, err = _batch([str(tmp_path / "manifest.jsonl"), "--out-dir", str(tmp_path / "out")])
    assert (code, out) == (2, "") and err.startswith("higgs-v3: error: manifest.jsonl line 2: Could not read ")
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_manifest_refusals_on_the_command_line(tmp_path):
    path = _manifest(tmp_path, [{"text": "Hi.", "output": "a", "voice": "missing.safetensors"}])
    code, out, err = _batch([str(path), "--out-dir", str(tmp_path / "out")])
    assert (code, out) == (2, "")
    assert err == (f"higgs-v3: error: manifest.jsonl line 1: the voice file 'missing.safetensors' does not exist "
                   f"(relative paths are read from the manifest's folder, {str(tmp_path.resolve())!r}).\n")
    code, _, err = _batch([str(_manifest(tmp_path, [{"text": "Hi.", "output": "a", "seed": -1}])),
                           "--out-dir", str(tmp_path / "out")])
    assert code == 2 and err.startswith("higgs-v3: error: manifest.jsonl line 1: 'seed' must be")
    code, _, err = _batch([str(path), "--out-dir", str(tmp_path / "out"), "--seed", "-1"])
    assert (code, err) == (2, "higgs-v3: error: --seed must be an integer in [0, 2**62), got -1.\n")
    code, _, err = _batch([str(path), "--out-dir", str(tmp_path / "out"), "--max-seconds", "4e7"])
    assert code == 2 and err.startswith("higgs-v3: error: --max-seconds 4e+07 is more than one chunk can hold: ")
    assert not (tmp_path / "out").exists()  # nothing is created before the manifest passes


class _Reached(Exception):
    """Raised by `_Unreachable` when the run gets as far as the model."""


class _Unreachable:
    def __getattr__(self, name):
        raise _Reached(name)


def test_the_seed_of_an_items_last_chunk_is_checked_before_any_generation(tmp_path, tokenizer):
    """Chunk k is spoken with seed + k: a seed valid for the first chunk but not the last is refused up front, naming
    the manifest line (not inside `generate` after the first chunk, losing the group)."""
    processor = HiggsAudioV3Processor(tokenizer)
    text = "One two three four. Five six seven nine."  # sentences of 19 and 20 characters: two chunks of at most 20
    assert [job.text for job in speech_jobs(processor, text, 20)] == ["One two three four.", "Five six seven nine."]
    path = _manifest(tmp_path, [{"text": "Hi.", "output": "a", "seed": 2**62 - 1},  # one chunk: its seed is fine
                                {"text": text, "output": "b", "seed": 2**62 - 1}])
    with pytest.raises(ValueError) as error:
        run_batch(_Unreachable(), processor, read_manifest(path), tmp_path / "out", max_chars=20, progress=False)
    assert str(error.value) == ("The seed of line 2's last chunk (seed + 1) must be an integer in [0, 2**62), got "
                                "4611686018427387904.")
    assert not (tmp_path / "out").exists()  # nothing written
    path = _manifest(tmp_path, [{"text": text, "output": "b", "seed": 2**62 - 2}])
    with pytest.raises(_Reached):  # the largest valid seed for two chunks passes the checks
        run_batch(_Unreachable(), processor, read_manifest(path), tmp_path / "out", max_chars=20, progress=False)


def test_default_seeds_avoid_every_other_chunks_seed_and_are_stable(tmp_path, tokenizer, monkeypatch):
    """A line without `seed` gets `--seed` plus its index unless another item's chunks use that range of seeds (chunk
    k of an item is spoken with seed + k): then the first free seed after it. Default seeds differ from each other and
    from every explicit item's chunk seeds, and a second read gives the same."""
    processor = HiggsAudioV3Processor(tokenizer)
    two = "One two three four. Five six seven nine."  # two chunks of at most 20 characters
    lines = [{"text": two, "output": "a"},                 # default: 0 (chunks 0, 1)
             {"text": "Hi.", "output": "b"},               # default: 1 is a's second chunk -> 2
             {"text": "Hi.", "output": "c", "seed": 3},    # explicit: 3
             {"text": "Hi.", "output": "d"},               # default: 3 is c's -> 4
             {"text": two, "output": "e", "seed": 5},      # explicit: 5, 6
             {"text": "Hi.", "output": "f"},               # default: 5 and 6 are e's -> 7
             {"text": two, "output": "g"}]                 # default: 6 is e's, 7 is f's -> 8 (chunks 8, 9)
    items = read_manifest(_manifest(tmp_path, lines))
    assert [i.seed for i in items] == [0, 1, 3, 3, 5, 5, 6]  # provisional: the collisions this test is about
    assert [i.default_seed for i in items] == [True, True, False, True, False, True, True]
    resolved = assign_default_seeds(processor, items, 20)
    assert [i.seed for i in resolved] == [0, 2, 3, 4, 5, 7, 8]
    chunk_seeds = [[i.seed + k for k in range(len(speech_jobs(processor, i.text, 20)))] for i in resolved]
    assert chunk_seeds == [[0, 1], [2], [3], [4], [5, 6], [7], [8, 9]]
    assert [i.seed for i in assign_default_seeds(processor, read_manifest(_manifest(tmp_path, lines)), 20)] == [
        0, 2, 3, 4, 5, 7, 8]  # a rerun reads the same seeds, so its records match
    # With --seed 100 nothing is in the way of the explicit seeds: --seed plus the index, past the previous range.
    assert [i.seed for i in assign_default_seeds(processor, read_manifest(_manifest(tmp_path, lines), 100), 20)] == [
        100, 102, 3, 103, 5, 105, 106]
    # run_batch speaks the items with the resolved seeds.
    spoken = []
    monkeypatch.setattr(batch_cli, "_spoken", lambda model, processor, group, voices, *args, **kwargs: spoken.extend(
        (i.output, i.seed) for i in group) or [])
    monkeypatch.setattr(batch_cli, "batch_recipe", lambda *args: {})  # it reads the model
    run_batch(_Unreachable(), processor, items, tmp_path / "out", max_chars=20, progress=False)
    assert spoken == [("a.wav", 0), ("b.wav", 2), ("c.wav", 3), ("d.wav", 4), ("e.wav", 5), ("f.wav", 7), ("g.wav", 8)]
    # A default range that would pass the seed limit is refused, naming the line.
    near = [{"text": two, "output": "a", "seed": 2**62 - 2}, {"text": "Hi.", "output": "b"}]  # a: the last two seeds
    near = read_manifest(_manifest(tmp_path, near), base_seed=2**62 - 3)
    with pytest.raises(ValueError) as error:
        assign_default_seeds(processor, near, 20)
    assert str(error.value) == (
        "Line 2 has no seed and its default one (4611686018427387904, the first free after --seed plus its index) "
        "leaves no room for its 1 chunks below 2**62; give a smaller --seed or a seed on the line.")


def test_an_item_is_written_once_each_file_through_atomic_output(tmp_path, monkeypatch):
    """The audio and the record each go through `atomic_output` once, under their own names (flushed to disk, then
    renamed into place), and leave no temporary file."""
    written = []
    atomic_output = audio_io_higgs_v3.atomic_output

    def spying(path):
        written.append(Path(path).relative_to(tmp_path).as_posix())
        return atomic_output(path)

    monkeypatch.setattr(audio_io_higgs_v3, "atomic_output", spying)
    (tmp_path / RECORDS_DIR).mkdir()
    item = batch_cli.BatchItem(3, "Hi.", "a.wav", 9, None, None, None)
    chunks = [SimpleNamespace(finished=True, seed=9 + 2**40, problem=None, attempts=[{"seed": 9}, {"seed": 9 + 2**40}])]
    duration = batch_cli._write_item(tmp_path, item, np.zeros(2400, dtype=np.float32), chunks, 24000, 0)
    assert duration == 0.1
    assert written == ["a.wav", f"{RECORDS_DIR}/a.wav.json"]
    assert soundfile.info(str(tmp_path / "a.wav")).frames == 2400
    record = json.loads((tmp_path / RECORDS_DIR / "a.wav.json").read_text())
    assert (record["chunk_seeds"], record["chunk_attempts"], record["failed_chunks"]) == ([9 + 2**40], [2], [])
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        RECORDS_DIR, f"{RECORDS_DIR}/a.wav.json", "a.wav"]


# -------------------------------------------------------------------------------------------- runs (integration)
@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> tuple[Path, Path, str]:
    """The manifest spoken by one in-process run: (manifest, out dir, printed summary)."""
    directory = tmp_path_factory.mktemp("batch")
    manifest = _manifest(directory, _items())
    code, out, err = _batch([str(manifest), "--out-dir", str(directory / "one"), *OPTIONS])
    assert code == 0, err
    return manifest, directory / "one", out


def _records(out_dir: Path) -> dict[str, dict]:
    """The records written (not a record being written: `atomic_output`'s hidden temporary file, which a killed run
    can also leave behind)."""
    return {p.name.removesuffix(".json"): json.loads(p.read_text()) for p in (out_dir / RECORDS_DIR).glob("[!.]*")}


def _stamps(out_dir: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime_ns) of every audio file and record: a file written again gets a new inode (os.replace)."""
    files = list(out_dir.glob("[!.]*.wav")) + list((out_dir / RECORDS_DIR).glob("[!.]*"))
    return {str(p.relative_to(out_dir)): (p.stat().st_ino, p.stat().st_mtime_ns) for p in files}


@pytest.mark.integration
def test_one_process_writes_every_item_with_its_record(one_process):
    manifest, out_dir, printed = one_process
    outputs = [f"item{i}.wav" for i in range(8)]
    assert sorted(p.name for p in out_dir.iterdir()) == sorted([*outputs, RECORDS_DIR, RESULTS_FILE])
    results = [json.loads(line) for line in (out_dir / RESULTS_FILE).read_text().splitlines()]
    assert [r["output"] for r in results] == outputs  # manifest order
    assert [r["seed"] for r in results] == [41, 1, 2, 7, 4, 5, 6, 8]  # explicit, else --seed 0 + index (7 is taken)
    for record in results:
        assert record["chunks"] == 1 and record["chunk_seeds"] == [record["seed"]] and record["process"] == 0
        assert record["chunk_attempts"] == [1]  # tiny-random's takes are not redone unless --retries asks
        assert record["duration"] > 0 and record["finished"] is (record["unfinished_chunks"] == [])
    assert _records(out_dir) == {r["output"]: r for r in results}
    assert printed.startswith("Batch: 8 items, 8 written now (process 0: 8), 0 already complete; ")


@pytest.mark.integration
def test_batch_invariant_files_are_byte_identical_at_batch_sizes_1_and_8(tmp_path):
    """`--batch-invariant`: every file is byte-identical whether its items were spoken one per `generate` call or all
    in one (without it, `item0` and `item1` differ here: the batch changes the logits and the codec's grouped decode
    by float rounding; docs/RELIABILITY.md, "Batch invariance"). One item has a voice clip."""
    clip = np.random.default_rng(4).uniform(-0.3, 0.3, size=48000).astype(np.float32)
    soundfile.write(tmp_path / "voice.wav", clip, 24000)
    manifest = _manifest(tmp_path, [
        {"text": TEXTS[0], "output": "item0"},
        {"text": "A long item spoken in a cloned voice, which goes on and on.", "output": "ch01",
         "reference": str(tmp_path / "voice.wav"), "reference_text": "Reference words."},
        {"text": TEXTS[1], "output": "item1"},
    ])
    for size in ("1", "8"):
        code, _, err = _batch([str(manifest), "--out-dir", str(tmp_path / size), "--model", "tiny-random", "--device",
                               "cpu", "--max-seconds", "4", "--batch-size", size, "--batch-invariant", "--no-progress"])
        assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "1").glob("*.wav"))
    assert names == ["ch01.wav", "item0.wav", "item1.wav"]
    assert [(tmp_path / "1" / n).read_bytes() == (tmp_path / "8" / n).read_bytes() for n in names] == [True] * 3


@pytest.mark.integration
def test_the_decode_session_writes_the_files_static_batching_writes_with_batch_invariant(tmp_path, tokenizer):
    """`run_batch`'s decode session (chunks join as others end) against the former static batches (`generate` calls of
    `batch_size`), with `batch_invariant`: the same files and records, byte for byte, on a manifest of unequal lengths
    with a voiceless item of three chunks (its first chunk's take the voice of the rest) and bad takes redone."""
    from conftest import tiny_tts_model

    model = tiny_tts_model(60)
    processor = HiggsAudioV3Processor.from_model_config(tokenizer, model.config)
    manifest = _manifest(tmp_path, [
        {"text": "One long item. It has three chunks of text. Each one spoken in turn.", "output": "long", "seed": 3},
        *({"text": text, "output": f"item{i}", "seed": 10 + i} for i, text in enumerate(TEXTS[:5]))])
    for scheduling in ("static", "session"):
        run_batch(model, processor, read_manifest(manifest), tmp_path / scheduling, batch_size=3, max_chars=30,
                  max_seconds=2.0, progress=False, scheduling=scheduling, batch_invariant=True, retries=1,
                  seconds_per_char=(0.001, 0.05))
    names = sorted(p.name for p in (tmp_path / "static").glob("*.wav"))
    assert len(names) == 6
    assert all((tmp_path / "static" / n).read_bytes() == (tmp_path / "session" / n).read_bytes() for n in names)
    records = [_records(tmp_path / scheduling) for scheduling in ("static", "session")]
    assert records[0] == records[1] and records[0]["long.wav"]["chunks"] == 3
    assert any(attempts == 2 for record in records[0].values() for attempts in record["chunk_attempts"])


@pytest.mark.integration
def test_a_rerun_skips_complete_items_and_redoes_a_changed_one(one_process, tmp_path):
    manifest, out_dir, _ = one_process
    copy = Path(shutil.copytree(out_dir, tmp_path / "copy"))
    before = _stamps(copy)
    items = _items()
    items[2]["text"] = "A different text now."  # its record no longer matches: it is generated again
    code, out, err = _batch([str(_manifest(tmp_path, items)), "--out-dir", str(copy), *OPTIONS])
    assert code == 0, err
    assert out.startswith("Batch: 8 items, 1 written now (process 0: 1) (spoken again as what produced them changed: "
                          "text 1), 7 already complete; ")
    after = _stamps(copy)
    changed = sorted(name for name in before if after[name] != before[name])
    assert changed == [f"{RECORDS_DIR}/item2.wav.json", "item2.wav"]


@pytest.mark.integration
def test_two_processes_killed_mid_way_then_resumed_give_the_one_process_audio(one_process, tmp_path):
    manifest, reference_dir, _ = one_process
    out_dir = tmp_path / "two"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT.parent), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    launch = subprocess.Popen(
        [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
         "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "higgs_v3.cli",
         "batch", str(manifest), "--out-dir", str(out_dir), *OPTIONS, "--no-progress"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and launch.poll() is None:
            records = _records(out_dir) if (out_dir / RECORDS_DIR).is_dir() else {}
            if {record["process"] for record in records.values()} == {0, 1}:
                break  # both processes have written: kill the whole launch mid-way
            time.sleep(0.02)
    finally:
        # Kill the launcher and every process it started (torchrun starts each worker in a session of its own).
        processes = [launch.pid] + [child.pid for child in psutil.Process(launch.pid).children(recursive=True)]
        for pid in processes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, errors = launch.communicate(timeout=60)
    killed = _records(out_dir)
    assert {record["process"] for record in killed.values()} == {0, 1}, errors.decode()[-2000:]
    assert 2 <= len(killed) < 8, f"the kill came too late to test a resume: {sorted(killed)}"
    # The complete items of the killed run (a wav whose record was not yet written is not complete: it is redone).
    before = {name: stamp for name, stamp in _stamps(out_dir).items()
              if name.removeprefix(f"{RECORDS_DIR}/").removesuffix(".json") in killed}

    code, out, err = _batch([str(manifest), "--out-dir", str(out_dir), *OPTIONS])  # the rerun, one process
    assert code == 0, err
    remaining = 8 - len(killed)
    assert out.startswith(f"Batch: 8 items, {remaining} written now (process 0: {remaining}), {len(killed)} already "
                          "complete; ")
    after = _stamps(out_dir)
    assert all(after[name] == stamp for name, stamp in before.items())  # nothing of the killed run written again
    records = _records(out_dir)
    assert sorted(records) == [f"item{i}.wav" for i in range(8)]  # every item exactly once: one record, one file
    for name in records:
        assert (out_dir / name).read_bytes() == (reference_dir / name).read_bytes(), name
        assert {k: v for k, v in records[name].items() if k != "process"} == {
            k: v for k, v in _records(reference_dir)[name].items() if k != "process"}


@pytest.mark.integration
def test_reruns_redo_what_a_changed_recipe_made_and_keep_going_skips_a_dead_reference(tmp_path):
    """A dead URL stops a run at its line (the items before it kept); `--keep-going` skips it and reports it (exit 1).
    A voice file replaced at the same path, or another dtype, speaks the items made with the old one again, and the
    summary says what changed."""
    import socket

    from higgs_v3.audio_io_higgs_v3 import HiggsAudioV3Voice

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/me.wav"
    HiggsAudioV3Voice(codes=torch.randint(0, 16, (30, 8), generator=torch.Generator().manual_seed(0))).save(
        tmp_path / "ann.safetensors")
    manifest = _manifest(tmp_path, [{"text": "Hello there.", "output": "a", "seed": 1, "voice": "ann.safetensors"},
                                    {"text": "Good morning!", "output": "b", "seed": 2},
                                    {"text": "Thank you.", "output": "c", "seed": 3, "reference": dead}])
    out_dir = str(tmp_path / "out")
    code, out, err = _batch([str(manifest), "--out-dir", out_dir, *OPTIONS])
    assert code == 2 and f"higgs-v3: error: Could not fetch reference audio URL '{dead}' (" in err
    assert sorted(p.name for p in Path(out_dir).glob("*.wav")) == ["a.wav", "b.wav"]
    code, out, err = _batch([str(manifest), "--out-dir", out_dir, *OPTIONS, "--keep-going"])
    assert code == 1, err
    assert out.startswith("Batch: 3 items, 0 written now (process 0: 0), 2 already complete; ")
    assert out.rstrip().endswith(f"; 1 failed and skipped: line 3 (c.wav): Could not fetch reference audio URL "
                                 f"'{dead}' ([Errno 111] Connection refused); check the address and the network, or "
                                 "download the clip and pass its file path..")
    HiggsAudioV3Voice(codes=torch.randint(0, 16, (30, 8), generator=torch.Generator().manual_seed(1))).save(
        tmp_path / "ann.safetensors")  # another voice under the same name
    code, out, err = _batch([str(manifest), "--out-dir", out_dir, *OPTIONS, "--keep-going"])
    assert out.startswith("Batch: 3 items, 1 written now (process 0: 1) (spoken again as what produced them changed: "
                          "voice file 1), 1 already complete; ")
    code, out, err = _batch([str(manifest), "--out-dir", out_dir, *OPTIONS, "--keep-going", "--dtype", "bfloat16"])
    assert out.startswith("Batch: 3 items, 2 written now (process 0: 2) (spoken again as what produced them changed: "
                          "dtype 2), 0 already complete; ")


def test_the_take_options_reach_every_group_of_a_run(processor, monkeypatch):
    """`run_batch(..., retries=0)` speaks its items in groups: each group's synthesizer gets the take options (not
    only the first's), and `generate` gets none of them."""
    from higgs_v3 import longform_higgs_v3

    built = []

    class Synthesizer:
        def __init__(self, model, processor, **options):
            built.append(options)

        def speak(self, jobs, voices):
            return SimpleNamespace(line_waveforms=lambda: [(None, None)] * len(voices), chunks=[])

    monkeypatch.setattr(longform_higgs_v3, "_Synthesizer", Synthesizer)
    options = {"retries": 0, "max_wer": 0.2, "temperature": 0.9}
    items = [batch_cli.BatchItem(i + 1, "Hi.", f"{i}.wav", i) for i in range(2)]
    for item in items:  # one group each
        batch_cli._speak_group(None, processor, [item], {item.output: None}, batch_size=1, max_chars=300,
                               max_seconds=None, generate_kwargs=options)
    assert options == {"retries": 0, "max_wer": 0.2, "temperature": 0.9}
    assert [(o["retries"], o["max_wer"], o["generate_kwargs"]) for o in built] == [(0, 0.2, {"temperature": 0.9})] * 2
