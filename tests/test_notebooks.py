"""Every notebook of `examples/` runs top to bottom in a real Jupyter kernel (nbclient + ipykernel), as a user opens it:
on the tiny demo model as shipped (`higgs_v3.tiny_random()`), loaded through `trust_remote_code=True` (its classes
from `transformers_modules...`) and mixed with the installed `higgs_v3` package. Any error cell fails the test
(integration layer: one kernel per notebook, the tiny model built once for all of them)."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient


ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "examples").glob("*.ipynb"))
TIMEOUT = 120  # seconds per cell

# Appended to the executed copy (never to the notebook): the kernel is this interpreter, the model and the processor
# came through trust_remote_code (a Hub repo's copy of the modules), and `higgs_v3` is the installed package.
CHECK_CELL = f"""import sys, higgs_v3
assert sys.executable == {sys.executable!r}, sys.executable
assert Path(higgs_v3.__file__).resolve().parent == Path({str(ROOT)!r}), higgs_v3.__file__
for value in (model, processor):
    assert type(value).__module__.startswith("transformers_modules."), type(value).__module__
"""


def test_the_examples_folder_has_the_five_notebooks_and_the_readme_links_each():
    names = [path.name for path in NOTEBOOKS]
    assert names == ["01_quickstart.ipynb", "02_voices.ipynb", "03_long_text_and_dialogue.ipynb",
                     "04_streaming.ipynb", "05_finetune_a_voice.ipynb"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(f"(examples/{name})" in readme for name in names)


def test_the_notebooks_extra_installs_jupyter_and_widgets():
    import configparser

    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg", encoding="utf-8")
    extra = [line.split(">")[0].split("=")[0] for line in setup["options.extras_require"]["notebooks"].split()]
    assert extra == ["notebook", "ipywidgets", "ipykernel"]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """One kernel for every notebook (each starts from an empty namespace, `%reset -f`, in a folder of its own, which
    stands for the notebook's own: a notebook writes its files into a scratch folder and leaves nothing there): a
    kernel start and the torch / transformers imports are most of a tiny notebook's time. One HF_HOME, so the demo
    model is built once; offline; one thread."""
    env = {"HF_HOME": str(tmp_path_factory.mktemp("notebooks-hf-home")), "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        for name in ("HIGGS_V3_TINY_RANDOM", "HIGGS_V3_CACHE"):
            patch.delenv(name, raising=False)
        client = NotebookClient(nbformat.v4.new_notebook(), timeout=TIMEOUT, kernel_name="python3")
        with client.setup_kernel():
            yield client


def run_cell(client: NotebookClient, cell, index: int):
    """`cell` executed in the kernel; a CellExecutionError (the cell and its traceback) if it fails."""
    return client.execute_cell(cell, index)


@pytest.mark.integration
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, kernel, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")  # shipped clean
    kernel.nb = notebook
    run_cell(kernel, nbformat.v4.new_code_cell(f"%reset -f\nimport os\nos.chdir({str(tmp_path)!r})\ndel os"), 0)
    notebook.cells.append(nbformat.v4.new_code_cell("from pathlib import Path\n" + CHECK_CELL))
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            run_cell(kernel, cell, index)  # stops at the first error cell
    errors = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
              if output.output_type == "error"]
    assert errors == []
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # run in place, it leaves nothing beside the notebook
    players = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
               if "text/html" in output.get("data", {}) and "data:audio/wav;base64," in output.data["text/html"]]
    assert players, "each notebook plays audio where it is returned"
