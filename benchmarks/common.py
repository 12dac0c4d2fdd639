"""What every benchmark section shares: threads, interleaved timing, tables, the machine's identity.

Timing rules (the reason the numbers can be compared at all on a shared, noisy 2-core machine):

* everything that is compared is measured **in one process, interleaved**: one repetition of
  every candidate, then the next round, the starting candidate rotating from round to round, so
  that a burst of noise from a neighbour hits all candidates alike;
* warm-up rounds first (they are not kept), then at least :data:`MIN_REPEATS` timed rounds;
* each candidate is summarised by the **median** of its rounds, and compared as a **ratio** of
  medians, never as an absolute time from another run;
* the CPU time that *other* processes took during a measurement is read from ``/proc/stat`` and
  reported beside it; a measurement during which others took more than :data:`DISTURBED` of the
  machine is thrown away and taken again once the machine is quiet (at most :data:`RETRIES`
  times, waiting at most :data:`QUIET_WAIT_BUDGET_S` in a whole run; the count is reported),
  because with 2 threads on 2 cores a neighbour that takes one core stalls every parallel region
  of the one being timed.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

import torch

ROOT = Path(__file__).resolve().parents[1]
THREADS = 2  # the book's target: a 2-core laptop or Colab's free CPU runtime
MIN_REPEATS = 5
DISTURBED = 0.05  # share of the machine's CPU time taken by other processes
RETRIES = 2
QUIET_WAIT_BUDGET_S = 180.0  # in one run, for all retries together
MIN_JUDGED_S = 1.0  # /proc/stat counts in 10 ms ticks: shorter measurements are not judged
T = TypeVar("T")
_quiet_wait_left = [QUIET_WAIT_BUDGET_S]


def set_threads(threads: int = THREADS) -> None:
    """Fix torch's intra-op thread count, so that runs and machines compare like with like."""
    torch.set_num_threads(threads)


def interleaved_times(
    candidates: dict[str, Callable[[], object]], *, warmup: int, repeats: int
) -> dict[str, list[float]]:
    """Time each candidate ``repeats`` times, one round of all candidates after another.

    Args:
        candidates: name -> a function doing one unit of work (a forward pass, a training step).
        warmup: untimed rounds first (first-call allocations, caches, thread pools).
        repeats: timed rounds; at least :data:`MIN_REPEATS`.

    Returns:
        name -> the ``repeats`` wall times in seconds, in the order they were taken.
    """
    if repeats < MIN_REPEATS:
        raise ValueError(f"repeats={repeats} is too few for a median; use >= {MIN_REPEATS}.")
    names = list(candidates)
    for _ in range(warmup):
        for name in names:
            candidates[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        shift = round_ % len(names)  # rotate, so that no candidate always runs first
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            candidates[name]()
            times[name].append(time.perf_counter() - start)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float]) -> float:
    """Relative spread of repeated timings: (max - min) / median, to show how noisy a row was."""
    return (max(values) - min(values)) / statistics.median(values)


def quartile_spread(values: list[float]) -> float:
    """Relative spread that one slow round cannot dominate: interquartile range / median."""
    low, _, high = statistics.quantiles(values, n=4, method="inclusive")
    return (high - low) / statistics.median(values)


@dataclass(frozen=True)
class CpuSample:
    """Wall clock, CPU seconds of the whole machine, and of this process and its children."""

    wall: float
    machine: float | None
    own: float


def cpu_sample() -> CpuSample:
    machine_busy = None
    stat = Path("/proc/stat")
    if stat.exists():
        # user nice system idle iowait irq softirq steal ...: everything but idle and iowait
        ticks = [int(v) for v in stat.read_text().splitlines()[0].split()[1:9]]
        machine_busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    own = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        own += usage.ru_utime + usage.ru_stime
    return CpuSample(time.perf_counter(), machine_busy, own)


def others_share(start: CpuSample, end: CpuSample) -> float | None:
    """The share of the machine's CPU capacity that other processes used between two samples.

    None where ``/proc/stat`` is missing or the interval is too short to judge.
    """
    if start.machine is None or end.machine is None or end.wall - start.wall < MIN_JUDGED_S:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    others = (end.machine - start.machine) - (end.own - start.own)
    return min(1.0, max(0.0, others / ((end.wall - start.wall) * (cores or 1))))


def wait_for_quiet(window: float = 2.0) -> bool:
    """Wait until other processes leave the machine idle for one ``window``.

    Spends at most what is left of :data:`QUIET_WAIT_BUDGET_S`; False when it runs out.
    """
    while _quiet_wait_left[0] > 0:
        start = cpu_sample()
        time.sleep(window)
        _quiet_wait_left[0] -= window
        share = others_share(start, cpu_sample())
        if share is None or share <= DISTURBED:
            return True
    return False


def undisturbed(
    measure: Callable[[], T], label: str, *, retry: bool = True
) -> tuple[T, float | None, int]:
    """Run ``measure``; with ``retry``, take it again if other processes took the CPU meanwhile.

    Returns:
        ``(result, others' share of the CPU during the kept attempt, attempts)``.
    """
    attempt = 0
    while True:
        attempt += 1
        start = cpu_sample()
        result = measure()
        share = others_share(start, cpu_sample())
        if not retry or share is None or share <= DISTURBED or attempt > RETRIES:
            return result, share, attempt
        print(
            f"[bench] {label}: other processes took {share:.0%} of the CPU; waiting for a quiet "
            "machine to measure again",
            file=sys.stderr,
            flush=True,
        )
        if not wait_for_quiet():
            print(
                "[bench] no quiet machine within the wait budget: measuring anyway",
                file=sys.stderr,
                flush=True,
            )


@dataclass
class Table:
    """One result table: printable as Markdown, stored as JSON.

    ``rows`` hold plain values (str, int, float, bool or None); ``formats`` holds one Python
    format spec per column, used only for printing, so the JSON keeps full precision.
    """

    key: str
    title: str
    columns: list[str]
    formats: list[str]
    rows: list[list[object]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.formats) != len(self.columns):
            raise ValueError(f"table {self.key!r}: one format per column is needed.")

    def add(self, *row: object) -> None:
        if len(row) != len(self.columns):
            raise ValueError(f"table {self.key!r}: {row} needs {len(self.columns)} cells.")
        self.rows.append(list(row))

    def column(self, name: str) -> list[object]:
        index = self.columns.index(name)
        return [row[index] for row in self.rows]

    def to_markdown(self) -> str:
        lines = [
            f"**{self.title}**",
            "",
            "| " + " | ".join(self.columns) + " |",
            "|" + "|".join(" --- " for _ in self.columns) + "|",
        ]
        for row in self.rows:
            cells = map(format_cell, row, self.formats)
            lines.append("| " + " | ".join(cells) + " |")
        if self.notes:
            lines.append("")
            lines.extend(f"- {note}" for note in self.notes)
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Table:
        return cls(**data)


def format_cell(value: object, spec: str) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float | int) and spec:
        return format(value, spec)
    return str(value)


def machine() -> dict[str, object]:
    """Where the numbers come from: CPU model, cores, memory, torch and its threads."""
    cpu_model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    memory_gib = None
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        total_kib = int(meminfo.read_text().split("MemTotal:")[1].split()[0])
        memory_gib = round(total_kib / 2**20, 1)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu_model": cpu_model,
        "cores": cores,
        "memory_gib": memory_gib,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def subprocess_env(threads: int = THREADS) -> dict[str, str]:
    """The environment for child processes (memory probes, notebook kernels, the book build).

    This interpreter's folder comes first on PATH (the kernel spec says plain ``python``), the
    working tree comes first on PYTHONPATH (its ``vitbook`` is the one measured, installed or
    not), MPLBACKEND is dropped (kernels keep the inline backend), OpenMP/MKL get the same
    thread count as this process unless the caller set one, and the Hugging Face hub is offline
    unless the caller set ``HF_HUB_OFFLINE``: builds and tests never download (as in
    ``tasks.py``), and without it the pretrained chapter would time its wait for a network.
    """
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, str(threads))
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env
