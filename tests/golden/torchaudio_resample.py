# Copyright 2026 the higgs-v3 authors. Licensed under the Apache License, Version 2.0.
"""torchaudio's own `functional.resample`, loaded from a torchaudio wheel without importing torchaudio (there is no
torchaudio build for current torch): the three pure-torch functions are read out of the wheel's
`torchaudio/functional/functional.py` and run under the installed torch. Used only by `make_golden.py` to make golden
vectors; the project never imports it.

    wheel = fetch_wheel("/tmp/ta")           # pip download --no-deps torchaudio==2.11.1
    resample = load_resample(wheel)          # the real torchaudio.functional.resample
"""

from __future__ import annotations

import ast
import math
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Optional

import torch


TORCHAUDIO_VERSION = "2.11.1"
FUNCTIONS = ("_get_sinc_resample_kernel", "_apply_sinc_resample_kernel", "resample")
SOURCE = "torchaudio/functional/functional.py"


def fetch_wheel(folder: str | Path, version: str = TORCHAUDIO_VERSION) -> Path:
    """Download torchaudio's wheel (no dependencies, nothing installed) into `folder`; return its path."""
    folder = Path(folder)
    wheels = sorted(folder.glob(f"torchaudio-{version}-*.whl"))
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), f"torchaudio=={version}"],
            check=True,
        )
        wheels = sorted(folder.glob(f"torchaudio-{version}-*.whl"))
    return wheels[0]


def load_resample(wheel: str | Path):
    """`torchaudio.functional.resample` as defined in `wheel`, bound to the installed torch."""
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read(SOURCE).decode("utf-8")
    tree = ast.parse(source)
    nodes = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in FUNCTIONS]
    if sorted(node.name for node in nodes) != sorted(FUNCTIONS):
        raise RuntimeError(f"{wheel} does not define {FUNCTIONS} in {SOURCE}")
    namespace = {
        "torch": torch, "math": math, "warnings": warnings, "Optional": Optional, "Tensor": torch.Tensor,
        "_CPU": torch.device("cpu"),
    }
    exec(compile(ast.Module(body=nodes, type_ignores=[]), f"{wheel.name}:{SOURCE}", "exec"), namespace)
    return namespace["resample"]
