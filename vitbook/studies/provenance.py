"""Where a recorded run comes from (machine, software, command), and one-thread determinism.

:func:`cpu_run` makes the ``provenance`` entry a CPU recording script writes beside its results;
``scripts/train_cifar10.py`` builds a GPU's from :func:`command`, :func:`now` and :func:`git`.
:func:`one_thread` is the block every recorded CPU run trains in.

See chapter: How the numbers were made.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

__all__ = ["KERNEL_VARIABLES", "command", "cpu_capability", "cpu_matrix_features",
           "cpu_model_name", "cpu_run", "git", "now", "one_thread"]  # fmt: skip

# The variables that choose torch's CPU kernels, recorded when set, and the threads (which do not
# change a one-thread run's arithmetic, whatever they say).
KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
RECORDED_VARIABLES = (*KERNEL_VARIABLES, "OMP_NUM_THREADS")


def cpu_model_name() -> str:
    """The CPU's model name (Linux), for the provenance of timings and of exact re-runs."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_capability() -> str:
    """The vector instructions torch's CPU kernels use here (``"AVX2"``, ``"AVX512"``, ...).

    Kernels of different widths round float sums differently, even under one CPU model name.
    """
    return str(torch.backends.cpu.get_cpu_capability())


# The CPU features that decide how fast bf16 trains: matrix units (AMX) and bf16 vector products.
MATRIX_FEATURES = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2")


def cpu_matrix_features() -> list[str]:
    """Which of :data:`MATRIX_FEATURES` this CPU reports (Linux; empty elsewhere).

    They decide whether bf16 trains faster or slower than fp32 on a CPU.
    """
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return [name for name in MATRIX_FEATURES if name in flags]
    except OSError:
        pass
    return []


def git(*args: str, where: str | os.PathLike) -> str:
    """``git args`` in the checkout holding ``where`` (a script's folder): its output, or
    ``"unknown"`` outside a checkout or without git."""
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                             cwd=Path(where).resolve())  # fmt: skip
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def command() -> str:
    """This process's command line, as one would type it again."""
    return "python " + shlex.join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])


def now() -> str:
    """The date and time in UTC, to the second."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def cpu_run(where: str | os.PathLike, **fields: object) -> dict[str, object]:
    """The provenance entry of a CPU recording (one thread, deterministic algorithms).

    Holds the command, the date, ``fields``, the commit of ``where``'s checkout, the software and
    the machine. ``uncommitted_changes`` is ``None`` where git cannot tell, and
    ``uncommitted_changes_unknown`` then says why.

    Example:
        >>> entry = cpu_run(".", seeds=[0, 1])
        >>> entry["seeds"], entry["torch_threads"], entry["cpu_capability"] == cpu_capability()
        ([0, 1], 1, True)
    """
    import numpy

    status = git("status", "--porcelain", "--untracked-files=no", where=where)
    changes = None if status == "unknown" else status != ""
    unknown = {"uncommitted_changes_unknown": f"{Path(where).resolve()} is not in a git "
               "checkout, or git is not installed: the commit and its changes are not "
               "known"} if changes is None else {}  # fmt: skip
    return {
        "command": command(),
        "date": now(),
        **fields,
        "git_commit": git("rev-parse", "HEAD", where=where),
        "uncommitted_changes": changes,
        **unknown,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "cpu": cpu_model_name(),
        "cpu_capability": cpu_capability(),  # AVX2 or AVX-512 kernels round differently
        "kernel_variables": {k: os.environ[k] for k in RECORDED_VARIABLES if k in os.environ},
        "cpu_count": os.cpu_count(),
        "torch_threads": 1,
        "deterministic_algorithms": True,
    }


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """One CPU thread and deterministic algorithms inside the block, restored afterwards: the
    same float sums in the same order on every run.

    Example:
        >>> with one_thread():
        ...     torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
        (1, True)
    """
    threads = torch.get_num_threads()
    deterministic = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())  # fmt: skip
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
