"""A pytest plugin for an nbval run: keep what the notebook printed and showed, as a notebook.

nbval executes every code cell of a notebook in one kernel and checks that it runs; it reads what
each cell prints and shows (``IPyNbCell.test_outputs``) only to compare it with the stored
outputs, and then drops it. With this plugin (``-p nbval_outputs``, the ``tests`` folder on
``PYTHONPATH``) the run also writes the executed notebook, every cell with its outputs, to the
path in the environment variable ``VITBOOK_EXECUTED_NOTEBOOK``. The test run builds the HTML
book from these notebooks (tests/booktools.py), so that each notebook runs once per test run.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import nbformat
import pytest

TARGET = "VITBOOK_EXECUTED_NOTEBOOK"
# What an IPython kernel reports about its language; the HTML build picks the code highlighting
# from it (a kernel's own report would say the same; nbval does not keep it).
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
    "version": platform.python_version(),
}
_outputs: dict[Path, dict[int, list]] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    yield
    outputs = getattr(item, "test_outputs", None)
    if outputs is not None and hasattr(item, "cell_num"):
        _outputs.setdefault(Path(str(item.fspath)), {})[item.cell_num] = list(outputs)


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get(TARGET)
    if not target:
        return
    if len(_outputs) != 1:
        raise pytest.UsageError(f"{TARGET} takes one notebook per run, not {len(_outputs)}")
    ((source, outputs),) = _outputs.items()
    notebook = nbformat.read(source, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    for number, cell in enumerate(code):
        if number in outputs:
            cell.outputs = [nbformat.from_dict(output) for output in outputs[number]]
            cell.execution_count = number + 1
            for output in cell.outputs:
                if output.output_type == "execute_result":
                    output.execution_count = number + 1
    notebook.metadata["language_info"] = LANGUAGE_INFO
    nbformat.validate(notebook)
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
