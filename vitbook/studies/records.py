"""Recorded results that belong together: the seeds' spread of a number, and ladder files joined.

:func:`spread` summarises one number over seeds; :func:`check_summable` and
:func:`check_together` refuse runs that cannot be averaged or joined; :func:`join` joins files;
:class:`Appender` adds runs to a file that other processes may be adding to.

See chapter: Real photos.
"""

from __future__ import annotations

import copy
import json
import math
import numbers
import os
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from vitbook import _files
from vitbook._files import ResultsFileError

__all__ = ["Appender", "RefusedRun", "check_summable", "check_together", "join", "spread"]


def spread(values: Sequence[float]) -> dict[str, float]:
    """The seeds' spread of one number: ``n``, ``mean``, ``std`` (0.0 for one seed), ``min``,
    ``max``. TypeError for a value that is not a real number, ValueError for none or a NaN or
    infinite one, each named with its position.

    Example:
        >>> {name: round(value, 4) for name, value in spread([0.8, 0.9]).items()}
        {'n': 2, 'mean': 0.85, 'std': 0.0707, 'min': 0.8, 'max': 0.9}
    """
    values = list(values)
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(
                f"spread takes numbers, got {value!r} ({type(value).__name__}) at position {i} "
                f"of {len(values)}; read the file's numbers as numbers (float(...)) or fix the "
                "file that holds this one."
            )
        if not math.isfinite(value):
            raise ValueError(
                f"spread got {value} at position {i} of {len(values)}: a run that diverged or "
                "was never recorded has no number to average. Leave it out and say so, or "
                "record that run again."
            )
    values = [float(value) for value in values]
    if not values:
        raise ValueError("spread needs at least one value, got none.")
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def check_summable(runs: list) -> None:
    """Runs ``ladder.summarize`` can average: a row, an integer seed and both accuracies as
    fractions in [0, 1] each, and no (row, seed) twice; else a TypeError / ValueError naming the
    run."""
    accuracies = ("final_val_accuracy", "test_accuracy")
    seen: dict[tuple[str, int], int] = {}
    for i, run in enumerate(runs):
        missing = [key for key in ("row", "seed", *accuracies) if key not in run]
        if missing:
            raise ValueError(
                f"run {i} lacks {missing}; summarize reads each run's row, seed, "
                "final_val_accuracy and test_accuracy, as scripts/train_cifar10.py writes them."
            )
        row, seed = run["row"], run["seed"]
        where = f"run {i} (row {row!r} seed {seed!r})"
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(
                f"{where} has a seed of type {type(seed).__name__}; seeds are integers (seed '0' "
                "and 0 would count as two seeds): write it as a number."
            )
        for key in accuracies:
            value = run[key]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{where} has {key}={value!r}, not a number; fix the run.")
            if not 0 <= value <= 1:  # NaN too
                raise ValueError(
                    f"{where} has {key}={value!r}; accuracies here are fractions in [0, 1] (79 % "
                    "is 0.79): divide percentages by 100, or fix the run."
                )
        if (row, seed) in seen:
            raise ValueError(
                f"row {row!r} seed {seed} comes twice (runs {seen[row, seed]} and {i}): one run "
                "would count as two seeds. Keep one of them."
            )
        seen[row, seed] = i


def _layout(part: dict, name: str) -> None:
    """A ladder results file: ``{"runs": [...], "provenance": [...]}``."""
    runs, provenance = part.get("runs"), part.get("provenance")
    if (
        not isinstance(runs, list)
        or not isinstance(provenance, list)
        or not provenance
        or not all(isinstance(entry, dict) for entry in provenance)
    ):
        raise ResultsFileError(
            f"{name} is not a ladder results file (it needs a list of runs and a non-empty list "
            "of provenance entries); pass a file written by scripts/train_cifar10.py."
        )
    for j, entry in enumerate(provenance):
        data = entry.get("data")
        if data is not None and not isinstance(data, dict):
            raise ResultsFileError(
                f"provenance entry {j} of {name} has data {data!r} ({type(data).__name__}), not "
                'the object a script writes ({"source": ..., "sha256": ..., ...}); restore the '
                "file or record its runs again with scripts/train_cifar10.py."
            )
    for i, run in enumerate(runs):
        if not isinstance(run, dict) or not {"row", "seed", "epochs", "recipe"} <= set(run):
            raise ResultsFileError(f"{name} holds a run without row, seed, epochs or recipe.")
        row, seed, process = run["row"], run["seed"], run.get("process")
        if not isinstance(row, str) or isinstance(seed, bool) or not isinstance(seed, int):
            raise ResultsFileError(
                f"run {i} of {name} has row {row!r} and seed {seed!r} ({type(seed).__name__}); "
                "a row is a name and a seed an integer (seed '0' and 0 would count as two "
                "seeds): write the seed as a number, e.g. 0, as the scripts do."
            )
        if process is not None and (
            isinstance(process, bool)
            or not isinstance(process, int)
            or not 0 <= process < len(provenance)
        ):
            raise ResultsFileError(
                f"run {i} of {name} (row {row!r} seed {seed}) names process {process!r}, but "
                f"the file has provenance entries 0 .. {len(provenance) - 1} only"
                "; a run must point at the entry of the process that made it. Restore the file "
                "or record that run again."
            )


def _sources(found: dict[object, list[str]]) -> str:
    """``value (file, file); value (file)``: each value with the files it comes from."""
    return "; ".join(f"{v} ({', '.join(dict.fromkeys(names))})" for v, names in found.items())


def check_together(parts: Sequence[tuple[str, dict]], *, allow_mixed: bool = False) -> None:
    """Refuse ladder runs that do not belong in one table, naming what differs and where.

    ``parts``: ``(name, {"runs": [...], "provenance": [...]})``. Together means one data
    checksum and device, one epochs and recipe per row, no (row, seed) twice; ``allow_mixed``
    waives all but the last. Only ``row``, ``seed``, ``epochs``, ``recipe`` are read.

    Raises:
        ResultsFileError: a part that is not a ladder results file (no runs or provenance, a
            non-integer seed, a ``process`` that points at no entry, ``data`` not an object).
        ValueError: what does not belong together, with the files it comes from.

    Example:
        >>> run = {"row": "r", "seed": 0, "epochs": 2, "recipe": {"lr": 1e-3}}
        >>> part = {"runs": [run], "provenance": [{"device": "cpu", "data": {"sha256": "a"}}]}
        >>> try:
        ...     check_together([("a.json", part), ("b.json", part)])
        ... except ValueError as error:
        ...     print(str(error).splitlines()[1])
        - row 'r' seed 0 twice (a.json, b.json)

    See chapter: Real photos.
    """
    for name, part in parts:
        _layout(part, name)
    problems = []
    seen: dict[tuple[str, int], str] = {}
    for name, part in parts:
        for run in part["runs"]:
            key = (run["row"], run["seed"])
            if key in seen:
                problems.append(f"- row {key[0]!r} seed {key[1]} twice ({seen[key]}, {name})")
            seen.setdefault(key, name)
    mixed = []
    for label, value in (
        ("data checksum", lambda p: str((p.get("data") or {}).get("sha256"))[:12]),
        ("device", lambda p: p.get("device")),
    ):
        found: dict[object, list[str]] = {}
        for name, part in parts:
            for entry in part["provenance"]:
                found.setdefault(value(entry), []).append(name)
        if len(found) > 1:
            mixed.append(f"- {label}s differ: {_sources(found)}")
    rows: dict[str, dict[str, list[str]]] = {}
    for name, part in parts:
        for run in part["runs"]:
            how = json.dumps({"epochs": run["epochs"], "recipe": run["recipe"]}, sort_keys=True)
            rows.setdefault(run["row"], {}).setdefault(how, []).append(name)
    for row, hows in rows.items():
        if len(hows) > 1:
            mixed.append(f"- row {row!r} has {len(hows)} epochs or recipes: {_sources(hows)}")
    if not allow_mixed:
        problems += mixed
    if problems:
        hint = "" if allow_mixed or not mixed else (
            "\nIf you mean to put different data, devices or recipes in one table, say so with "
            "--allow-mixed; the page then shows every provenance."
        )  # fmt: skip
        raise ValueError("these runs do not belong together:\n" + "\n".join(problems) + hint)


def join(parts: Sequence[tuple[str, dict]], *, allow_mixed: bool = False, note: dict) -> dict:
    """Join ladder result files after :func:`check_together`: all runs, every provenance entry.

    Each run's ``"process"`` index is shifted into the joined provenance; ``note`` is appended
    to ``"joins"``.

    Example:
        >>> run = {"row": "r", "seed": 0, "epochs": 2, "recipe": {}, "process": 0}
        >>> part = {"runs": [run], "provenance": [{"device": "cpu", "data": {"sha256": "a"}}]}
        >>> other = {"runs": [{**run, "seed": 1}], "provenance": part["provenance"]}
        >>> joined = join([("a", part), ("b", other)], note={"command": "merge"})
        >>> [r["process"] for r in joined["runs"]], len(joined["provenance"])
        ([0, 1], 2)

    See chapter: Real photos.
    """
    check_together(parts, allow_mixed=allow_mixed)
    joined: dict = {"runs": [], "provenance": [], "joins": []}
    for _, part in parts:
        offset = len(joined["provenance"])
        for run in part["runs"]:
            moved = dict(run)
            if isinstance(run.get("process"), int):
                moved["process"] = run["process"] + offset
            joined["runs"].append(moved)
        joined["provenance"] += part["provenance"]
        joined["joins"] += part.get("joins", [])
    joined["joins"].append({**note, "allow_mixed": allow_mixed})
    return joined


class RefusedRun(ValueError):
    """A trained run that its results file does not take; the message names where it is kept.

    See chapter: Real photos.
    """


class Appender:
    """This process's runs, added to a results file that other processes may be adding to.

    Each :meth:`add`, under the file's lock (``vitbook._files.update_json``), reads the file as
    it is now, appends ``entry`` to its provenance the first time, calls ``add(data, run,
    process)`` and ``check(data)`` (raises ``ValueError`` to refuse) and writes it atomically. A
    refused run goes to a file beside ``path``, named in the :class:`RefusedRun` raised.
    ``empty``: a new file's content; ``remedy``: how to make a damaged file again.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "results.json"
        >>> def add(data, run, process):
        ...     data["runs"].append({**run, "process": process})
        >>> first = Appender(path, {"device": "a"}, empty={"runs": []}, add=add, remedy="")
        >>> second = Appender(path, {"device": "b"}, empty={"runs": []}, add=add, remedy="")
        >>> first.add({"seed": 0}); second.add({"seed": 1}); first.add({"seed": 2})
        >>> [(run["seed"], run["process"]) for run in _files.read_json(path, remedy="")["runs"]]
        [(0, 0), (1, 1), (2, 0)]

    See chapter: Real photos.
    """

    def __init__(self, path: str | os.PathLike, entry: dict, *, empty: dict,
                 add: Callable[[dict, dict, int], None],
                 check: Callable[[dict], None] | None = None, remedy: str) -> None:  # fmt: skip
        self.path, self.entry, self.empty = Path(path), entry, empty
        self._add, self._check, self.remedy = add, check, remedy
        self.process: int | None = None  # the index of entry, once the file holds it
        self.added = 0  # runs of this process in the file

    def add(self, run: dict) -> None:
        """Add ``run`` to the file as it is now, under its lock."""
        try:
            _files.update_json(self.path, lambda data: self._with(data, run), remedy=self.remedy)
        except ValueError as error:  # refused: kept beside, never lost
            aside = _files.new_path(self.path.parent, f"{self.path.stem}-refused")
            _files.write_json(aside, {**copy.deepcopy(self.empty),
                                      "refused": str(error), "runs_of": str(self.path),
                                      "provenance": [self.entry], "run": run})  # fmt: skip
            raise RefusedRun(f"{self.path} does not take this run: {error} The run is kept in "
                             f"{aside}.") from error  # fmt: skip
        self.added += 1

    def update_entry(self, change: Callable[[dict], None] | None = None) -> None:
        """Write this process's ``entry`` again and let ``change(data)`` tidy the file, locked."""
        if self.process is None:
            return

        def update(data: dict | None) -> dict:
            data = self._entered(data)
            if change is not None:
                change(data)
            return data

        _files.update_json(self.path, update, remedy=self.remedy)

    def _entered(self, data: dict | None) -> dict:
        """``data`` (``empty`` if none) holding this process's entry, its index in ``process``."""
        data = copy.deepcopy(self.empty) if data is None else data
        entries = data.setdefault("provenance", [])
        if self.process is None:
            entries.append(self.entry)
            self.process = len(entries) - 1
        elif self.process < len(entries):  # entries are only ever appended
            entries[self.process] = self.entry
        else:
            raise ResultsFileError(
                f"{self.path} lost provenance entries while this process wrote to it (it was "
                f"replaced: it holds {len(entries)}, and this process's is number "
                f"{self.process}); {self.remedy}"
            )
        return data

    def _with(self, data: dict | None, run: dict) -> dict:
        process = self.process
        data = self._entered(data)
        try:
            self._add(data, run, self.process)
            if self._check is not None:
                self._check(data)
        except ValueError:
            self.process = process  # nothing written: the entry is not in the file yet
            raise
        return data
