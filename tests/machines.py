"""Which machine the tests run on, and machines that are not it, derived from this one.

A recorded file names the machine that made each run (its CPU model name and the vector kernels
torch chose there, ``cpu_capability``), and some checks depend on it: a script refuses to put
runs of two machines in one file, and a re-run is compared exactly only on the machine of the
file. A test that needs "another machine" must not name one outright: "AMD EPYC with AVX2" is
another machine on an Intel Xeon and this very machine on many cloud hosts. So
:func:`another_machine` derives a CPU name and a capability that differ from what this machine
reports, and :func:`pretend` makes the code under test see a chosen machine, so that a test can
run as if on an AMD EPYC and as if on an Intel Xeon on whatever CPU it really runs on.
"""

from __future__ import annotations

import platform

import pytest
import torch

from vitbook.studies import provenance

# Machines the checks are also run as (tests/test_machines.py): the two kinds a reader or a
# cloud host most often has. Names as Linux's /proc/cpuinfo and torch report them.
FAKES = {
    "AMD EPYC with AVX2": ("AMD EPYC", "AVX2"),
    "Intel Xeon with AVX-512": ("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "AVX512"),
}
# Capabilities torch reports (torch.backends.cpu.get_cpu_capability), in no particular order.
CAPABILITIES = ("AVX2", "AVX512", "DEFAULT", "VSX", "ZVECTOR", "SVE256")


def this_machine() -> tuple[str, str]:
    """``(cpu, cpu_capability)`` as the scripts record them here (or as :func:`pretend` set)."""
    return provenance.cpu_model_name(), provenance.cpu_capability()


def another_machine(here: tuple[str, str] | None = None) -> tuple[str, str]:
    """A CPU name and a capability that both differ from ``here`` (default: this machine)."""
    cpu, capability = here or this_machine()
    other_capability = next(c for c in CAPABILITIES if c != capability)
    return f"{cpu} (another one)", other_capability


def made_here(entries: list[dict]) -> bool:
    """Whether every provenance entry names this machine: the same CPU model and vector kernels
    (an entry that does not record its kernels cannot be shown to be), torch and Python."""
    here = (*this_machine(), torch.__version__, platform.python_version())
    return all(
        (entry["cpu"], entry.get("cpu_capability"), entry["torch"], entry["python"]) == here
        for entry in entries
    )


def pretend(monkeypatch: pytest.MonkeyPatch, machine: tuple[str, str]) -> None:
    """Make :mod:`vitbook.studies.provenance`, which every recording script asks, report
    ``machine`` as this one until the test ends."""
    cpu, capability = machine
    monkeypatch.setattr(provenance, "cpu_model_name", lambda: cpu)
    monkeypatch.setattr(provenance, "cpu_capability", lambda: capability)
