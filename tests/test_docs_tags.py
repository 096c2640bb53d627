# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""Every `<|...|>` written in the README, the docs, the notebooks and the package's own source (its messages and
examples; the served page too) is a tag the processor knows: a control tag of `processor.valid_tags()` or a token
of the tokenizer, so an example copied from anywhere is not refused. Tests are not read (they write wrong tags on
purpose)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from higgs_v3.chunking_higgs_v3 import TAG_PATTERN
from higgs_v3.processing_higgs_v3 import CONTROL_TAG_FAMILIES


ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = re.compile(r"<\|(?:(?:%s):)?(?:\.\.\.|name)\|>" % "|".join(("family", *CONTROL_TAG_FAMILIES)))
"""Notation, not a tag: `<|...|>`, `<|emotion:...|>`, `<|family:name|>`."""
NOT_OURS = {
    "<|audio_out_bos|>": "Higgs Audio v2's token, in the v2 comparison (benchmarks/bench_v2.py, docs/PERFORMANCE.md)",
    "<|tiny_filler_N|>": "the tiny test tokenizer's filler tokens (testing/tiny.py)",
    "<|tiny_filler_{token_id}|>": "the same, as the f-string that writes them",
}
SUFFIXES = (".py", ".md", ".ipynb", ".html", ".js", ".cfg", ".toml", ".sh")


def test_every_tag_in_the_docs_notebooks_and_messages_is_valid(processor):
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    files = [name for name in tracked if name.endswith(SUFFIXES) and not name.startswith("tests/")]
    assert {"README.md", "docs/SERVING.md", "examples/01_quickstart.ipynb", "serving/app.py"} <= set(files)
    control, known = set(processor.valid_tags()), set(processor.tokenizer.get_added_vocab())
    families = tuple(f"<|{family}:" for family in CONTROL_TAG_FAMILIES)
    bad, seen = [], 0
    for name in files:
        text = (ROOT / name).read_text(encoding="utf-8")
        for match in TAG_PATTERN.finditer(text):
            tag, seen = match.group(0), seen + 1
            if PLACEHOLDER.fullmatch(tag) or tag in NOT_OURS:
                continue
            if tag not in (control if tag.startswith(families) else known):
                bad.append(f"{name}:{text.count(chr(10), 0, match.start()) + 1}: {tag}")
    assert seen > 50 and not bad, "tags the processor refuses:\n" + "\n".join(bad)
