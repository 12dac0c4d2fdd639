"""The test run executes the notebooks under another machine's arithmetic than the book build's
(tests/booktools.py, ``foreign_numerics``): other CPU kernels and another thread count."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from booktools import ROOT, _probe, describe_numerics, foreign_numerics

CHECK = """
import json, torch
torch.manual_seed(0)
q = torch.randn(2, 4, 65, 32)
with torch.autocast("cpu", dtype=torch.bfloat16):  # the photo chapter's bf16 attention
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability().lower(),
                  "threads": torch.get_num_threads(), "finite": bool(out.isfinite().all())}))
"""


def run_under(variables: dict[str, str]) -> dict:
    env = {**os.environ, **variables}
    env.pop("VITBOOK_NOTEBOOK_NUMERICS", None)
    out = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def clean_env(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
                        "VITBOOK_NOTEBOOK_NUMERICS")}  # fmt: skip
    return env | variables


def test_the_notebooks_run_on_other_kernels_and_threads_than_the_build():
    # The book build: this machine's kernels, 2 threads (tasks.py sets OMP_NUM_THREADS and
    # MKL_NUM_THREADS, and torch takes MKL's where both are set: the test run exports 1).
    build_threads = {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    env = clean_env(**build_threads)
    variables = foreign_numerics(env)
    native = run_under(build_threads | {k: v for k, v in env.items()
                                        if k.startswith(("ATEN", "ONEDNN", "MKL_E"))})
    foreign = run_under(variables)
    assert foreign["threads"] != native["threads"]
    if native["capability"] in ("avx2", "avx512"):  # x86 with vector kernels: others chosen
        assert variables["ATEN_CPU_CAPABILITY"] != native["capability"]
        assert foreign["capability"] == variables["ATEN_CPU_CAPABILITY"]
    if native["capability"] == "avx512":  # and oneDNN's and MKL's, capped at AVX2
        assert variables["ONEDNN_MAX_CPU_ISA"] == variables["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"
    assert foreign["finite"]  # bf16 attention runs under the chosen caps


@pytest.mark.parametrize("exported", [
    {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
    {"ATEN_CPU_CAPABILITY": "default"},
    {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "AVX2",
     "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    {"OMP_NUM_THREADS": "4"},
], ids=lambda e: " ".join(f"{k}={v}" for k, v in e.items()))
def test_a_reader_who_caps_the_kernels_still_gets_a_second_arithmetic(exported):
    env = clean_env(**exported)
    seen = _probe(env)
    if seen["machine"] not in ("x86_64", "amd64") or not seen["avx2"]:
        pytest.skip("the profiles for x86 CPUs with AVX2")
    variables = foreign_numerics(env)
    assert variables["ATEN_CPU_CAPABILITY"] != seen["capability"]
    capped = [name for name in ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
              if name in variables]  # fmt: skip
    if seen["avx512"]:  # oneDNN and MKL capped too, at least one of them otherwise
        assert any(variables[name] != exported.get(name) for name in capped), variables
    assert run_under(variables)["capability"] == variables["ATEN_CPU_CAPABILITY"]


def test_the_choice_can_be_named_or_turned_off():
    assert foreign_numerics(clean_env(VITBOOK_NOTEBOOK_NUMERICS="native")) == {}
    named = clean_env(VITBOOK_NOTEBOOK_NUMERICS="ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=3")
    assert foreign_numerics(named) == {"ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "3"}
    with pytest.raises(ValueError, match="NAME=VALUE pairs"):
        foreign_numerics(clean_env(VITBOOK_NOTEBOOK_NUMERICS="avx2"))
    assert describe_numerics({}) == "this machine's own kernels and threads"
    assert describe_numerics({"B": "2", "A": "1"}) == "A=1 B=2"


def test_tasks_caps_onednn_with_aten_on_a_cpu_with_amx(monkeypatch):
    sys.path.insert(0, str(ROOT))
    try:
        import tasks
    finally:
        sys.path.remove(str(ROOT))
    monkeypatch.setattr(tasks, "cpu_flags", lambda: {"avx2", "avx512f", "amx_tile"})
    env = {"ATEN_CPU_CAPABILITY": "default"}
    tasks.pair_kernel_caps(env)
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX512_CORE_BF16"
    chosen = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    tasks.pair_kernel_caps(chosen)  # the reader's own cap is kept
    assert chosen["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    monkeypatch.setattr(tasks, "cpu_flags", lambda: {"avx2", "avx512f"})
    plain = {"ATEN_CPU_CAPABILITY": "default"}
    tasks.pair_kernel_caps(plain)  # without AMX nothing needs pairing
    assert "ONEDNN_MAX_CPU_ISA" not in plain
    # and the pair runs the photo chapter's bf16 attention on this machine
    assert run_under(env)["finite"]
