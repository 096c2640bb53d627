"""Every command and snippet of README.md, run as written (`test_readme`: integration layer, fresh processes, about two
minutes; the parsing checks run in the unit layer).

The test reads every fenced ```bash and ```python block of the README and runs each command (bash, one line or a
`\\`-continued line) and each snippet (python, a whole block) in a fresh process, in README order, inside one
scratch folder that holds the input files the README names (and a copy of the repository's top-level modules, as a
checkout's root has, for `python convert_checkpoint.py`). Nothing of a command is changed except what cannot exist
offline, through one mapping (`PLACEHOLDERS`, `PYTHON_NAMES`); the lines it leaves out are listed one by one
(`NOT_RUN`) with the reason; a usage notation `[--option VALUE]` would be resolved through `OPTIONAL_GROUPS` (empty:
the README writes runnable commands). A block in another language, a command that is not `higgs-v3` or `python`, a
shell operator, a usage group or a free Python name that these tables do not know fails the test: the README cannot
drift away from what runs. A command passes when it exits with 0 and writes the file its `-o` / `--output` names.

Placeholders (`PLACEHOLDERS`, whole shell words or the text of Python string literals):
- `path/to/converted-repo` and `MODEL` -> a tiny random model in the converted layout
  (`tiny.make_tiny_random_model`);
- `bosonai/higgs-audio-v3-tts-4b` -> a tiny checkpoint in the ORIGINAL format
  (`tiny.write_tiny_original_checkpoint`), so that `convert_checkpoint.py`, `from_original` and the CLI's
  original-checkpoint path really run on the original layout;
- the free Python names `repo` (the pipeline block uses the notebook's variable) and `MODEL` -> the tiny converted
  model (`PYTHON_NAMES`).

Short generations: the README's commands are not edited; the tiny models' generation configs carry a small
`max_new_tokens` instead (`MAX_NEW_TOKENS`). The original checkpoint has no generation config (its converter writes
the official 2048 rows), so the fixture converts it once with `conversion.cache.converted_path`, the function the
CLI and `from_original` call on first use, into the cache they read (`$HF_HOME/higgs_v3/converted`) and shortens that
copy's generation config; the commands then take the cached path, as every use after the first does, while
`python convert_checkpoint.py ...` runs a whole conversion (with its numeric verification) of its own. `tiny-random`
is built by the CLI itself on first use (its own 3 s limit). Input files (`me.wav`, `ann.wav`, `chapter.txt`,
`script.txt`, `bob.safetensors`, the fine-tuning folder `my_voice/`) are created in the scratch folder first (`INPUT_FILES`). `HF_HOME` points into the
scratch folder, the Hub is offline, and each process runs one OpenMP thread (`OMP_NUM_THREADS=1`: the tiny models
gain nothing from a second thread, and on a busy 2-core machine waiting threads made the pipeline block 3x slower).
"""

from __future__ import annotations

import builtins
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import symtable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest


ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
ORIGINAL_REPO_ID = "bosonai/higgs-audio-v3-tts-4b"
MAX_NEW_TOKENS = 20  # rows per generation of the tiny converted models: 13 frames, about half a second
TIMEOUT = 600

# --------------------------------------------------------------------------------------------- the one mapping
PLACEHOLDERS = {
    "path/to/converted-repo": "converted",
    "MODEL": "converted",
    ORIGINAL_REPO_ID: "original",
}
"""Placeholder -> which tiny model stands in for it ("converted" or "original")."""

PYTHON_NAMES = {"repo": "converted", "MODEL": "converted"}
"""Free names a Python block may use without defining them -> the tiny model bound to them before the block runs."""

NOT_RUN = {
    'pip install torch==2.13.0 -e ".[test]"': "the install itself (CI's `.ci/run` runs it in a fresh virtualenv)",
    "python -m pytest": "the unit layer: this test is part of the test suite",
    "python -m pytest -m integration": "the integration layer: this test is part of it",
}
"""The only lines left out (exactly as written, comments removed), with the reason."""

OPTIONAL_GROUPS: dict[str, list[str] | None] = {}
"""Usage notation of a synopsis (`[--option VALUE]`) -> the words run in its place (None: left out, with the reason in a
comment). Empty while the README writes runnable commands only; a `[...]` group it does not list fails the test."""

INPUT_FILES = {
    "me.wav": "a 1.5 s 24 kHz clip (a tone with a little noise)",
    "ann.wav": "a 1.2 s 24 kHz clip",
    "chapter.txt": "about 500 characters of sentences: two chunks",
    "script.txt": "a two-line dialogue script, '[Name] text' per line",
    "bob.safetensors": "a voice encoded from a clip with the tiny converted model",
    "my_voice": "fine-tuning data: a folder of two name.wav + name.txt pairs (0.6 and 0.8 s)",
}

RUNNABLE = {"bash", "python"}
NOT_CODE = {"text"}  # pictures and output listings: shown, not run


# --------------------------------------------------------------------------------------------- README parsing
@dataclass
class Item:
    id: str
    kind: str  # "bash", "python", "skip" or "error"
    text: str  # the command line or the block, as written
    detail: object = None  # bash: argv (placeholders unresolved); skip/error: the reason


def fenced_blocks(markdown: str) -> list[tuple[str, str, int]]:
    """`(language, body, first line number)` of every fenced block; an unclosed fence is an error block."""
    blocks, lines, i = [], markdown.splitlines(), 0
    while i < len(lines):
        match = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)\s*$", lines[i])
        if not match:
            i += 1
            continue
        fence, language, start = match.group(2), match.group(3), i + 1
        end = next((j for j in range(start, len(lines)) if lines[j].strip() == fence), None)
        if end is None:
            blocks.append(("<unclosed>", "", start))
            break
        blocks.append((language, "\n".join(lines[start:end]), start))
        i = end + 1
    return blocks


def bash_commands(body: str) -> list[str]:
    """One string per command: `\\`-continued lines joined, blank lines dropped."""
    commands, current = [], ""
    for line in body.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip():
            commands.append(current.strip())
        current = ""
    if current.strip():
        commands.append(current.strip())
    return commands


def strip_comment_and_resolve_groups(command: str) -> str:
    """The command without its trailing `# comment`, each `[...]` usage group (nesting allowed, outside quotes)
    replaced by its `OPTIONAL_GROUPS` words. An unknown group raises `ValueError`."""
    out, i, quote = [], 0, None
    while i < len(command):
        char = command[i]
        at_word_start = i == 0 or command[i - 1].isspace()
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and at_word_start:
            break
        elif char == "[" and at_word_start:
            depth, j = 0, i
            while j < len(command):
                depth += {"[": 1, "]": -1}.get(command[j], 0)
                if depth == 0:
                    break
                j += 1
            group = " ".join(command[i : j + 1].split())
            if depth != 0 or group not in OPTIONAL_GROUPS:
                raise ValueError(f"unknown usage group {group!r}: add it to OPTIONAL_GROUPS with the words to run")
            out.append(shlex.join(OPTIONAL_GROUPS[group] or []))
            i = j + 1
            continue
        out.append(char)
        i += 1
    return "".join(out).strip()


def parse_bash(command: str) -> Item:
    try:
        resolved = strip_comment_and_resolve_groups(command)
        lexer = shlex.shlex(resolved, posix=True, punctuation_chars=";&|<>()")
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError as error:
        return Item("", "error", command, f"cannot parse the command: {error}")
    operators = [word for word in words if set(word) <= set(";&|<>()")]
    if operators:
        return Item("", "error", command, f"shell operators {operators} are not supported: one command per line")
    for written, reason in NOT_RUN.items():
        if shlex.split(written) == words:
            return Item("", "skip", command, reason)
    if not words or words[0] not in ("higgs-v3", "python"):
        return Item("", "error", command, f"unknown command {words[:1]}: only `higgs-v3` and `python` are run "
                                          "(and the NOT_RUN lines are left out)")
    return Item("", "bash", command, words)


def readme_items() -> list[Item]:
    items = []
    for language, body, line in fenced_blocks(README.read_text(encoding="utf-8")):
        if language == "bash":
            for number, command in enumerate(bash_commands(body)):
                item = parse_bash(command)
                item.id = f"L{line}-{number}-" + re.sub(r"[^\w.-]+", "_", command.split("#")[0].strip())[:60]
                items.append(item)
        elif language == "python":
            items.append(Item(f"L{line}-python", "python", body))
        elif language not in NOT_CODE:
            items.append(Item(f"L{line}-{language or 'unlabelled'}", "error", body,
                              f"a ```{language} block: only {sorted(RUNNABLE)} are run and {sorted(NOT_CODE)} are "
                              "shown; label it or teach this test to run it"))
    return items


ITEMS = readme_items()


# --------------------------------------------------------------------------------------------- the scratch folder
def _write_clip(path: Path, seconds: float, frequency: float, seed: int) -> None:
    import soundfile

    rate = 24000
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(seed).normal(0, 0.02, t.shape)
    soundfile.write(path, (0.3 * np.sin(2 * np.pi * frequency * t) + noise).astype(np.float32), rate,
                    subtype="PCM_16")


def _shorten_generation(directory: Path) -> None:
    path = directory / "generation_config.json"
    config = json.loads(path.read_text())
    config["max_new_tokens"] = MAX_NEW_TOKENS
    path.write_text(json.dumps(config, indent=2) + "\n")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """The working folder (inputs, outputs, a copy of the repository's top-level modules as in a checkout's root,
    for `python convert_checkpoint.py`), the tiny models, and the environment every command runs with."""
    from higgs_v3.conversion.cache import converted_path
    from higgs_v3.modeling_higgs_v3 import HiggsAudioV3ForConditionalGeneration
    from higgs_v3.testing.tiny import make_tiny_random_model, write_tiny_original_checkpoint

    base = tmp_path_factory.mktemp("readme")
    work, models, hf_home = base / "work", base / "models", base / "hf_home"
    for folder in (work, models, hf_home):
        folder.mkdir()
    for module in ROOT.glob("*.py"):
        shutil.copy2(module, work / module.name)
    paths = {
        "converted": make_tiny_random_model(models / "tiny-converted"),
        "original": write_tiny_original_checkpoint(models / "tiny-original"),
    }
    _shorten_generation(paths["converted"])
    # What the CLI and `from_original` do on first use, into the cache they read; then short generations.
    _shorten_generation(converted_path(paths["original"], hf_home / "higgs_v3" / "converted"))

    _write_clip(work / "me.wav", 1.5, 220.0, seed=0)
    _write_clip(work / "ann.wav", 1.2, 330.0, seed=1)
    (work / "chapter.txt").write_text(
        "It was a quiet morning in the valley. The river ran slow and clear under the old stone bridge. "
        "Birds sang in the willows, and the baker opened his shop at six, as he had done for forty years. "
        "Nobody in the village remembered a day when the bread was late. "
        "That morning, however, the ovens were cold. A letter lay on the counter, sealed with red wax. "
        "The baker read it twice, put on his coat, and walked to the station without a word to anyone. "
        "By noon the whole village knew.\n",
        encoding="utf-8",
    )
    (work / "script.txt").write_text("[Ann] Hello Bob, did you sleep well?\n[Bob] Not at all, the storm kept me "
                                     "awake.\n", encoding="utf-8")
    (work / "my_voice").mkdir()
    for i, (seconds, line) in enumerate(((0.6, "Good morning."), (0.8, "See you tomorrow."))):
        _write_clip(work / "my_voice" / f"line{i}.wav", seconds, 200.0 + 50 * i, seed=2 + i)
        (work / "my_voice" / f"line{i}.txt").write_text(line + "\n", encoding="utf-8")
    model = HiggsAudioV3ForConditionalGeneration.from_pretrained(paths["converted"])
    model.encode_reference(str(work / "ann.wav"), text="Hello there.").save(work / "bob.safetensors")
    assert sorted(p.name for p in work.iterdir() if not p.name.endswith(".py")) == sorted(INPUT_FILES)

    env = {key: value for key, value in os.environ.items() if not key.startswith("HIGGS_V3_")}
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return {"work": work, "paths": paths, "env": env, "snippets": base / "snippets"}


def substitute(word: str, paths: dict) -> str:
    return str(paths[PLACEHOLDERS[word]]) if word in PLACEHOLDERS else word


def free_names(source: str) -> set[str]:
    """Names a block reads (at module level, or as globals inside its functions and comprehensions) but never binds
    at module level, builtins excepted."""
    table = symtable.symtable(source, "<readme>", "exec")
    bound = {symbol.get_name() for symbol in table.get_symbols() if symbol.is_assigned() or symbol.is_imported()}
    names = set()

    def visit(scope):
        for symbol in scope.get_symbols():
            if symbol.is_referenced() and (scope is table or symbol.is_global()):
                names.add(symbol.get_name())
        for child in scope.get_children():
            visit(child)

    visit(table)
    return {name for name in names - bound if not hasattr(builtins, name)}


def _run(argv: list[str], scratch: dict) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=scratch["work"], env=scratch["env"], capture_output=True, text=True,
                          timeout=TIMEOUT)


def _report(result: subprocess.CompletedProcess) -> str:
    return f"exit code {result.returncode}\n--- stdout ---\n{result.stdout[-3000:]}\n--- stderr ---\n" \
           f"{result.stderr[-5000:]}"


# --------------------------------------------------------------------------------------------- the tests
def test_every_readme_block_is_understood():
    """Unit layer, no process started: every block parses into commands this test knows how to run (the integration
    test below runs them), so that a README edit the runner cannot follow fails at once."""
    problems = [f"{item.id}: {item.detail}" for item in ITEMS if item.kind == "error"]
    assert not problems, "\n".join(problems)


def test_the_readme_has_runnable_blocks_and_every_table_entry_is_used():
    text = README.read_text(encoding="utf-8")
    assert sum(item.kind == "bash" for item in ITEMS) >= 5 and sum(item.kind == "python" for item in ITEMS) >= 2
    commands = {item.text for item in ITEMS if item.kind == "skip"}
    unused = [line for line in NOT_RUN if not any(shlex.split(line) == shlex.split(c, comments=True) for c in commands)]
    assert not unused, f"NOT_RUN lists lines the README no longer has: {unused}"
    stale = [group for group in OPTIONAL_GROUPS if group not in " ".join(text.split())]
    assert not stale, f"OPTIONAL_GROUPS lists groups the README no longer has: {stale}"
    stale = [word for word in PLACEHOLDERS if word not in text]
    assert not stale, f"PLACEHOLDERS lists words the README no longer has: {stale}"


RUN = [item for item in ITEMS if item.kind != "skip"]  # the NOT_RUN lines are accounted for above, not run


@pytest.mark.integration
@pytest.mark.parametrize("item", RUN, ids=[item.id for item in RUN])
def test_readme(item: Item, scratch):
    if item.kind == "error":
        pytest.fail(f"README block cannot be run by this test: {item.detail}\n{item.text}")
    if item.kind == "bash":
        words = [substitute(word, scratch["paths"]) for word in item.detail]
        if words[0] == "higgs-v3":
            words[0] = str(Path(sys.executable).with_name("higgs-v3"))
        else:
            words[0] = sys.executable
        result = _run(words, scratch)
        assert result.returncode == 0, f"README command failed: {item.text}\nran: {shlex.join(words)}\n" \
                                       f"{_report(result)}"
        for flag in ("-o", "--output"):
            if flag in words:
                output = scratch["work"] / words[words.index(flag) + 1]
                assert output.exists(), f"{item.text}: {output.name} was not written"
        return
    source = item.text
    for word, which in PLACEHOLDERS.items():
        for quote in ('"', "'"):
            source = source.replace(f"{quote}{word}{quote}", repr(str(scratch["paths"][which])))
    unknown = free_names(source) - set(PYTHON_NAMES)
    assert not unknown, f"the block uses {sorted(unknown)}, defined nowhere in it and not in PYTHON_NAMES"
    prelude = "".join(f"{name} = {str(scratch['paths'][PYTHON_NAMES[name]])!r}\n"
                      for name in sorted(free_names(source) & set(PYTHON_NAMES)))
    scratch["snippets"].mkdir(exist_ok=True)
    snippet = scratch["snippets"] / f"{item.id}.py"
    snippet.write_text(prelude + source + "\n", encoding="utf-8")
    result = _run([sys.executable, str(snippet)], scratch)
    assert result.returncode == 0, f"README snippet failed:\n{prelude}{item.text}\n{_report(result)}"
