"""How a recording spends its GPU sessions: how many runs share the GPU, how many budgets are left.

For ``scripts/train_cifar10.py --state`` (the folder: :mod:`vitbook.studies.session`).

See chapter: Real photos.
"""

from __future__ import annotations

import math

from vitbook import _checks

__all__ = ["Concurrency", "budgets_left"]


class Concurrency:
    """How many runs share one GPU, chosen by measuring.

    With ``P`` runs slowing the first run's epoch by ``s(P)``, the GPU does ``P / s(P)`` runs'
    work; runs join one at a time while that grows by at least :attr:`GAIN`, and the first
    ``P`` that gains less is taken back for good.

    Example:
        >>> chooser = Concurrency(most=4)
        >>> chooser.observe(1, 2.0); chooser.target
        2
        >>> chooser.observe(2, 2.4); chooser.target  # 2 / 1.2 = 1.67 times the work
        3
        >>> chooser.observe(3, 4.0); chooser.target, chooser.settled  # 3 / 2 = 1.5: less
        (2, True)

    See chapter: Real photos.
    """

    GAIN = 1.10

    def __init__(self, most: int = 8) -> None:
        _checks.integer("most", most, minimum=1, fix="1 for one run at a time")
        self.most, self.target, self.settled = most, 1, most <= 1
        self.seconds: dict[int, float] = {}

    def throughput(self, processes: int) -> float:
        """The work done with ``processes`` runs, in runs alone."""
        return processes * self.seconds[1] / self.seconds[processes]

    def observe(self, processes: int, seconds: float) -> None:
        """The reference run's epoch time with ``processes`` runs training.

        Raises:
            ValueError / TypeError: ``processes`` not an int >= 1, ``seconds`` not finite > 0.
        """
        _checks.integer("processes", processes, minimum=1)
        _checks.real("seconds", seconds, low=0, open_low=True,
                     fix="pass the reference run's epoch time")  # fmt: skip
        if self.settled or processes != self.target:
            return
        self.seconds[processes] = seconds
        if processes > 1 and self.throughput(processes) < self.GAIN * self.throughput(
                processes - 1):  # fmt: skip
            self.target, self.settled = processes - 1, True
        elif processes >= self.most:
            self.settled = True
        else:
            self.target = processes + 1

    def describe(self) -> str:
        """The measurements in words, for the session's report."""
        if not self.seconds:
            return f"{self.target} at a time (not measured)"
        parts = [f"{p} at a time: {s:.2f} s an epoch of the first run, "
                 f"{self.throughput(p):.2f}x one run's work" for p, s in sorted(
                     self.seconds.items())]  # fmt: skip
        return f"{self.target} at a time, measured ({'; '.join(parts)})"


def budgets_left(
    left: list[tuple[str, int, int]],
    epoch_seconds: dict[str, float],
    *,
    processes: int,
    budget_s: float,
    overhead_s: float,
) -> tuple[int | None, str]:
    """How many budgets of ``budget_s`` seconds the runs left need at the measured rates.

    Args:
        left: ``(row, seed, epochs left)`` of every unfinished run.
        epoch_seconds: row -> an epoch's seconds with ``processes`` runs sharing the GPU; an
            unmeasured row counts at its model kind's slowest (the name before ``-``), and a
            kind never measured gives ``None``.
        overhead_s: what a session spends before its first epoch ends.

    Returns:
        ``(budgets or None, the arithmetic in words)``.

    Raises:
        ValueError / TypeError: ``processes`` not an int >= 1, epochs left not an int >= 0,
            seconds or ``budget_s`` not finite > 0, ``overhead_s`` not finite >= 0.

    Example:
        >>> budgets_left([("vit-50", 0, 40), ("vit-50", 1, 50)], {"vit-50": 3.0},
        ...              processes=2, budget_s=600, overhead_s=60)
        (1, '135 s of training (90 epochs, 2 side by side) in budgets of 540 s usable')

    See chapter: Real photos.
    """
    _checks.integer("processes", processes, minimum=1, fix="the runs side by side")
    _checks.real("budget_s", budget_s, low=0, open_low=True, fix="a session's seconds")
    _checks.real("overhead_s", overhead_s, low=0, fix="a session's seconds before its first "
                 "epoch ends")  # fmt: skip
    for row, seconds in epoch_seconds.items():
        _checks.real(f"epoch_seconds[{row!r}]", seconds, low=0, open_low=True,
                     fix="an epoch's measured seconds")  # fmt: skip
    for row, seed, epochs in left:
        if isinstance(epochs, bool) or not isinstance(epochs, int):
            raise TypeError(f"{row} seed {seed} has {epochs!r} epochs left "
                            f"({type(epochs).__name__}); epochs left are an int >= 0.")
        if epochs < 0:
            raise ValueError(f"{row} seed {seed} has {epochs} epochs left; epochs left are an "
                             "int >= 0 (the run's epochs minus those done: is its progress file "
                             "right?).")  # fmt: skip
    if not left:
        return 0, "nothing left"
    work, borrowed, unknown = 0.0, set(), set()
    for row, _, epochs in left:
        seconds = epoch_seconds.get(row)
        if seconds is None:
            kind = row.split("-")[0]
            alike = [s for r, s in epoch_seconds.items() if r.split("-")[0] == kind]
            if not alike:
                unknown.add(row)
                continue
            seconds = max(alike)
            borrowed.add(row)
        work += epochs * seconds
    if unknown:
        return None, f"rows never timed: {', '.join(sorted(unknown))}"
    usable = budget_s - overhead_s
    if usable <= 0:
        return None, f"a budget of {budget_s:.0f} s is used up before the first epoch ends"
    seconds = work / processes
    epochs = sum(e for *_, e in left)
    words = (f"{seconds:.0f} s of training ({epochs} epochs, {processes} side by side) in "
             f"budgets of {usable:.0f} s usable")  # fmt: skip
    if borrowed:
        words += f"; {', '.join(sorted(borrowed))} at the slowest timed row of their model"
    return math.ceil(seconds / usable), words
