"""tests/machines.py: 'another machine' differs from this one, whatever this one is."""

from __future__ import annotations

import platform

import pytest
import torch
from machines import FAKES, another_machine, made_here, pretend, this_machine

from vitbook.studies import provenance


def entry(cpu: str, capability: str | None) -> dict:
    return {"cpu": cpu, "cpu_capability": capability, "torch": torch.__version__,
            "python": platform.python_version()}  # fmt: skip


@pytest.mark.parametrize("faked", [None, *FAKES], ids=["this machine", *FAKES])
def test_another_machine_differs_from_the_one_the_code_sees(monkeypatch, faked):
    if faked is not None:
        pretend(monkeypatch, FAKES[faked])
        assert this_machine() == FAKES[faked]
        assert provenance.cpu_model_name() == FAKES[faked][0]
    here = this_machine()
    other = another_machine()
    assert other[0] != here[0] and other[1] != here[1]
    assert made_here([entry(*here)])
    assert not made_here([entry(*here), entry(*other)])
    assert not made_here([entry(here[0], other[1])])  # one model name, other kernels
    assert not made_here([entry(other[0], here[1])])
    assert not made_here([entry(here[0], None)])  # kernels not recorded: cannot be shown


def test_the_fakes_are_told_apart_and_undone(monkeypatch):
    real = this_machine()
    assert another_machine(FAKES["AMD EPYC with AVX2"]) != FAKES["AMD EPYC with AVX2"]
    with monkeypatch.context() as patched:
        pretend(patched, FAKES["Intel Xeon with AVX-512"])
        assert made_here([entry(*FAKES["Intel Xeon with AVX-512"])])
        assert not made_here([entry(*FAKES["AMD EPYC with AVX2"])])
    assert this_machine() == real  # the real functions are back
