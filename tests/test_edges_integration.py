"""Issue 23's edges (integration layer): what a new user sees while converting, in fresh processes or with real
conversions of the tiny original checkpoint."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


pytestmark = pytest.mark.integration


def test_the_converter_and_from_original_say_each_step_and_only_when_converting(tiny_original, tmp_path, capsys):
    """`higgs-v3 convert` says each step on stderr as it starts (it was silent until the end); `from_original` says
    that it converts, and each step, only on the call that converts: a cached entry loads silently (the "converting it
    once into the local cache" line was printed on every run)."""
    from higgs_v3 import from_original
    from higgs_v3.cli import main as cli_main

    assert cli_main.main(["convert", "--input", str(tiny_original), "--output", str(tmp_path / "out"),
                          "--no-verify", "--without-codec"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(rf"Read the original checkpoint {re.escape(repr(str(tiny_original)))}; writing \d+ tensors "
                        r"\(0\.01 GB in bfloat16, 1 shard\(s\)\) into out_converting_[0-9a-f]{8}\.\.\.", lines[0]), lines
    assert lines[1:] == ["Writing the config, tokenizer, processor and code..."]

    cache = tmp_path / "cache"
    model = from_original(tiny_original, cache_dir=cache)
    err = capsys.readouterr().err
    steps = [line.removeprefix("from_original: ") for line in err.splitlines() if line.startswith("from_original: ")]
    assert steps[0].startswith(f"{tiny_original.name} is an original checkpoint: converting it once into the local "
                               f"cache '{cache}")
    assert steps[1].startswith(f"Read the original checkpoint {str(tiny_original)!r}; writing ")
    assert steps[2:] == ["Writing the config, tokenizer, processor and code...",
                         "Verifying: reading every written tensor back...",
                         "Verifying: the converted model's audio logits against the original's (both models loaded)..."]
    again = from_original(tiny_original, cache_dir=cache)
    assert "from_original" not in capsys.readouterr().err  # cached: nothing to say
    assert type(again) is type(model)


def test_convert_help_imports_neither_torch_nor_transformers():
    """`higgs-v3 convert --help` is argparse only (the issue measured 7.5 s; lazy imports keep it at a fraction of a
    second): checked by what a fresh interpreter has imported after it."""
    code = ("import sys\nfrom higgs_v3.cli.main import main\ntry:\n    main(['convert', '--help'])\nexcept SystemExit:\n"
            "    pass\nprint(sorted(m for m in ('torch', 'transformers', 'numpy', 'safetensors') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "higgs-v3 convert" in done.stdout and done.stdout.rstrip().endswith("[]")


def test_the_export_to_the_original_layout_says_each_step(tiny_random_repo, tmp_path, capsys):
    from higgs_v3.cli import main as cli_main

    assert cli_main.main(["convert", "--to-original", "--input", str(tiny_random_repo),
                          "--output", str(tmp_path / "original")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(rf"Read {re.escape(repr(str(tiny_random_repo)))}; writing \d+ tensors in the original layout "
                        r"into original_exporting_[0-9a-f]{8}\.\.\.", lines[0]), lines
    assert lines[1:] == ["Writing the config, tokenizer and codec config...",
                         "Verifying: reading every written tensor back..."]
