"""A plan of runs ``(row, seed)`` and what a possibly partial results file holds of it.

See chapter: Real photos.
"""

from __future__ import annotations

from dataclasses import dataclass

from vitbook import _files

__all__ = ["Progress", "progress_of"]


@dataclass(frozen=True)
class Progress:
    """What a possibly partial recording holds, against its plan: ``(row, seed)`` pairs in
    recording order; ``runs``: pair -> the file's run; ``other``: runs outside the plan.

    See chapter: Real photos.
    """

    order: tuple[tuple[str, int], ...]
    recorded: tuple[tuple[str, int], ...]
    missing: tuple[tuple[str, int], ...]
    runs: dict[tuple[str, int], dict]
    provenance: tuple[dict, ...] = ()
    other: tuple[tuple[str, int], ...] = ()
    source: str = ""

    @property
    def complete(self) -> bool:
        """Every run of the plan is recorded."""
        return not self.missing

    @property
    def next(self) -> tuple[str, int] | None:
        """The first run of the plan not recorded yet (``None`` when complete)."""
        return self.missing[0] if self.missing else None

    @property
    def rows(self) -> tuple[str, ...]:
        """The plan's rows, in recording order of their first run."""
        return tuple(dict.fromkeys(row for row, _ in self.order))

    def planned_seeds(self, row: str) -> tuple[int, ...]:
        """The seeds the plan gives ``row``."""
        row = self._row(row)
        return tuple(seed for name, seed in self.order if name == row)

    def seeds(self, row: str) -> tuple[int, ...]:
        """The recorded seeds of ``row``, ascending."""
        row = self._row(row)
        return tuple(sorted(seed for name, seed in self.recorded if name == row))

    def missing_seeds(self, row: str) -> tuple[int, ...]:
        """The seeds of ``row`` not recorded yet, ascending."""
        row = self._row(row)
        return tuple(sorted(seed for name, seed in self.missing if name == row))

    def partial(self, row: str) -> bool:
        """Some, not all, of ``row``'s seeds are recorded."""
        return bool(self.seeds(row)) and bool(self.missing_seeds(row))

    def recorded_rows(self) -> tuple[str, ...]:
        """The rows with at least one recorded seed, in recording order."""
        return tuple(row for row in self.rows if self.seeds(row))

    def values(self, row: str, metric: str = "test_accuracy") -> dict[int, float]:
        """``{seed: value}`` of ``row``'s recorded runs (``metric``: a field of a run)."""
        return {seed: self.runs[self._row(row), seed][metric] for seed in self.seeds(row)}

    def shared(
        self, row_a: str, row_b: str, metric: str = "test_accuracy"
    ) -> tuple[dict[int, float], dict[int, float]]:
        """The two rows' values over their shared seeds, for
        :func:`vitbook.studies.comparison.paired_difference`."""
        a, b = self.values(row_a, metric), self.values(row_b, metric)
        both = sorted(a.keys() & b.keys())
        return {s: a[s] for s in both}, {s: b[s] for s in both}

    def results(self) -> dict:
        """The plan's recorded runs, in order, as a results file: ``{"runs", "provenance"}``."""
        return {"runs": [self.runs[key] for key in self.recorded],
                "provenance": list(self.provenance)}  # fmt: skip

    def label(self, row: str) -> str:
        """``row`` with what is recorded of it: ``"vit-200 (seed 0 of 0, 1, 2; partial)"``."""
        seeds, planned = self.seeds(row), self.planned_seeds(row)
        if not seeds:
            return f"{row} (not recorded)"
        if not self.partial(row):
            return f"{row} ({_seeds(seeds)})"
        return f"{row} ({_seeds(seeds)} of {', '.join(map(str, planned))}; partial)"

    def describe(self) -> str:
        """The recording's state: how much is recorded, each row's label, what is missing."""
        if self.complete:
            head = f"Recorded: all {len(self.order)} runs of the plan."
        elif not self.recorded:
            head = f"Nothing of the plan's {len(self.order)} runs is recorded yet."
        else:
            head = (f"Recorded so far: {len(self.recorded)} of {len(self.order)} runs of the "
                    "plan (a partial recording).")  # fmt: skip
        lines = [head]
        lines += [f"- {self.label(row)}" for row in self.recorded_rows()]
        waiting = [row for row in self.rows if self.missing_seeds(row)]
        if waiting:
            lines.append("Missing: " + "; ".join(
                f"{row} {_seeds(self.missing_seeds(row))}" for row in waiting) + ".")
            lines.append(f"Next: {self.next[0]} seed {self.next[1]}.")
        return "\n".join(lines)

    def _row(self, row: str) -> str:
        if row not in self.rows:
            raise ValueError(f"{row!r} is not a row of the plan; choose from {list(self.rows)}.")
        return row


def _seeds(seeds: tuple[int, ...]) -> str:
    return f"seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}"


def progress_of(
    results: dict | None,
    order: list[tuple[str, int]],
    planned: dict[str, tuple[int, dict]],
    *,
    source: str = "",
) -> Progress:
    """What ``results`` (or ``None``) holds of the plan ``order``, given ``planned``: row ->
    ``(epochs, recipe)``; ``source`` is named in errors.

    Raises:
        vitbook._files.ResultsFileError: no list of runs, or a run without a named row, an int
            seed, epochs or recipe.
        ValueError: a run of the plan recorded twice, or with other epochs or another recipe.

    Example:
        >>> run = {"row": "a", "seed": 1, "epochs": 2, "recipe": {}}
        >>> progress = progress_of({"runs": [run]}, [("a", 0), ("a", 1)], {"a": (2, {})})
        >>> progress.recorded, progress.missing, progress.label("a")
        ((('a', 1),), (('a', 0),), 'a (seed 1 of 0, 1; partial)')

    See chapter: Real photos.
    """
    name = source or "the results"
    results = {"runs": []} if results is None else results
    if not isinstance(results, dict) or not isinstance(results.get("runs"), list):
        raise _files.ResultsFileError(
            f"{name} holds no list of runs; pass a file written by scripts/train_cifar10.py.")
    in_plan, found, other = set(order), {}, []
    for i, run in enumerate(results["runs"]):
        if not isinstance(run, dict) or not {"row", "seed", "epochs", "recipe"} <= set(run):
            raise _files.ResultsFileError(f"{name} holds a run without row, seed, epochs or "
                                           "recipe.")  # fmt: skip
        key = (run["row"], run["seed"])
        if not isinstance(key[0], str) or isinstance(key[1], bool) or not isinstance(key[1], int):
            raise _files.ResultsFileError(
                f"run {i} of {name} has row {key[0]!r} and seed {key[1]!r} "
                f"({type(key[1]).__name__}); a row is a name and a seed an integer (seed '0' "
                "and 0 would count as two seeds): write the seed as a number, e.g. 0, as the "
                "scripts do."
            )
        if key not in in_plan:
            other.append(key)
            continue
        if key in found:
            raise ValueError(f"row {key[0]!r} seed {key[1]} is recorded twice in {name}; keep "
                             "one run per seed.")  # fmt: skip
        epochs, recipe = planned[key[0]]
        if run["epochs"] != epochs or run["recipe"] != recipe:
            raise ValueError(
                f"row {key[0]!r} seed {key[1]} in {name} was trained for {run['epochs']} epochs "
                f"with recipe {run['recipe']}, but the plan has {epochs} epochs and {recipe} (a "
                "smoke run?); keep it out of the plan's results file."
            )
        found[key] = run
    return Progress(
        order=tuple(order),
        recorded=tuple(key for key in order if key in found),
        missing=tuple(key for key in order if key not in found),
        runs=found,
        provenance=tuple(results.get("provenance") or ()),
        other=tuple(other),
        source=source,
    )
