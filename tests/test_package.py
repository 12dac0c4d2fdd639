"""The package as a whole: a quiet import and documented public names."""

import inspect
import subprocess
import sys

import vitbook

IMPORT_PROBE = """
import sys
import matplotlib
import torch
rc_before = dict(matplotlib.rcParams)
rng_before = torch.random.get_rng_state()
modules_before = set(sys.modules)
import vitbook
assert dict(matplotlib.rcParams) == rc_before, "importing vitbook changed matplotlib.rcParams"
assert torch.equal(torch.random.get_rng_state(), rng_before), "importing vitbook used the RNG"
new = {m.split(".")[0] for m in set(sys.modules) - modules_before}
optional = sorted(new & {"ipywidgets", "sklearn", "IPython", "tqdm", "safetensors"})
assert not optional, f"importing vitbook imported optional modules: {optional}"
"""


def test_import_has_no_side_effects():
    result = subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "", f"importing vitbook printed: {result.stdout!r}"


def test_public_names_are_documented_with_a_chapter():
    undocumented = []
    for name in vitbook.__all__:
        obj = getattr(vitbook, name)
        if name.startswith("__") or not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        doc = inspect.getdoc(obj) or ""
        if "See chapter:" not in doc or "Example:" not in doc:
            undocumented.append(name)
    assert not undocumented, (
        f"public names without an example and a chapter reference: {undocumented}"
    )
