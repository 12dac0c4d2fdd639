#!/usr/bin/env python3
"""Run the distillation miniature on the digits and record it, with provenance.

    python scripts/run_distillation.py                    # every setting, seeds 0 1 2 3 4,
                                                          # into a new file runs/distillation-*.json
    python scripts/run_distillation.py --only "conv stem" --seeds 0 1 --out runs/a.json
    python scripts/run_distillation.py --only "ViT, mean-pooled" --write-assets --allow-mixed
                                                          # appended to the shipped file
    python scripts/run_distillation.py --merge runs/a.json runs/b.json --out runs/ab.json
    python scripts/run_distillation.py --check vitbook/assets/distillation.json --only \\
        "CNN teacher" --seeds 0

The settings, the models and one run are ``vitbook.studies.distill_digits``'s. For every seed the
teachers train first and that seed's students learn from them; settings are compared on
validation, and each model reads the test digits once, after training.

Nothing recorded is replaced or lost (the rules of scripts/train_cifar10.py):

- Without --out the results go to a new file in runs/. An existing --out FILE takes this run's
  runs only if they belong with its own: the same digits, student, recipe, distillation constants
  and setting definitions, no setting and seed twice, and the same torch, CPU and CPU capability
  unless --allow-mixed (a run without "process" belongs to provenance entry 0). The shipped
  files in vitbook/assets are written only with --write-assets, and the teacher's file is never
  replaced. Runs are added under the file's lock (vitbook.studies.records.Appender), so two runs
  may write one --out at once.
- Seeds and settings are each named once.
- --merge joins files into --out by the same rules; an existing --out must be one of them. A
  file that is not a results file of this miniature is refused with what is wrong.

Every path is checked before anything trains; every write is atomic, after every run. Every run
trains on one CPU thread, deterministically, so --check can re-run a slice and compare; the
provenance records what decides the arithmetic (the CPU, its capability, ATEN_CPU_CAPABILITY,
ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS). Run it beside other work with `nice -n 10` and
OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch

from vitbook import _files
from vitbook.studies import experiments, provenance, records
from vitbook.studies.distill_digits import (
    DISTILLATION,
    FRACTION,
    RESULTS_PATH,
    SETTINGS,
    STUDENT,
    TEACHER_PATH,
    TEACHERS,
    load_results,
    reproduce,
    run_one,
    save_teacher,
)
from vitbook.studies.experiments import CNN_CHANNELS

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "runs"
# What --check accepts as the same number: exact on the machine that wrote the file.
CHECK_METRICS = ("validation_accuracy", "test_accuracy", "teacher_agreement", "head_agreement")
# Numbers of a run that are shares of the digits: each must be a number in [0, 1].
SHARES = ("validation_accuracy", "test_accuracy", "teacher_agreement", "class_head_accuracy",
          "distillation_head_accuracy", "head_agreement",
          "teacher_validation_accuracy")  # fmt: skip
# The variables that choose torch's CPU kernels, recorded when set (and OMP_NUM_THREADS, which
# does not change the runs' arithmetic: they train on one thread whatever it says).
# How this code counts a run's "macs" (the file's first two entries lack the note: they were
# counted with the fused attention, which leaves QK^T and AV out).
MACS_COUNTED = ("distill_digits.macs_per_image: a ViT on an attn_impl='explicit' copy, QK^T "
                "and AV included")
# What a provenance entry must name: the arithmetic that made its runs.
MACHINE = ("torch", "python", "cpu", "cpu_capability")


class NotTogether(ValueError):
    """Runs or files that do not belong in one results file; the message says why."""


def _log(*parts: object) -> None:
    print(*parts, flush=True)


def _constants() -> dict:
    """What every run of a file shares (``settings`` is checked per setting, see validate)."""
    return {
        "fraction": FRACTION,
        "student": STUDENT,
        "cnn_channels": list(CNN_CHANNELS),
        "recipe": experiments.recorded_recipe(),
        "distillation": DISTILLATION,
        "teachers": TEACHERS,
    }


def _provenance(settings: list[str], seeds: list[int]) -> dict:
    return provenance.cpu_run(
        ROOT, settings_run=settings, seeds=seeds,
        load_average_start_end=[round(os.getloadavg()[0], 2)],
        wall_seconds=None,  # filled in when the process ends
        note="seconds are wall-clock on a shared machine (see the load average); compare them "
        "within one run of the script only",
        macs=MACS_COUNTED,
    )  # fmt: skip


def _machine(entry: dict) -> tuple:
    """What decides a run's arithmetic: torch, Python, the CPU, its capability, the kernels."""
    variables = entry.get("kernel_variables", {})
    kernels = {k: v for k, v in variables.items() if k in provenance.KERNEL_VARIABLES}
    return (*(entry[key] for key in MACHINE), tuple(sorted(kernels.items())))


def _share(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and 0.0 <= value <= 1.0)  # fmt: skip


def _earlier_teachers(teachers: object) -> bool:
    """True when every teacher a file's ``teachers`` names is trained by the same setting here."""
    return isinstance(teachers, dict) and teachers.items() <= TEACHERS.items()


def validate(results: dict, name: str) -> None:
    """Refuse a results file that is not one of this miniature's, naming what is wrong.

    Raises:
        _files.ResultsFileError: other constants, a setting this code does not know or defines
            otherwise, a run without an int seed, a seed twice, a share (an accuracy, an
            agreement) that is not a number in [0, 1], a provenance entry without its machine,
            a run whose ``process`` names no provenance entry.
    """
    problems = []
    for key, value in _constants().items():
        if key == "teachers" and _earlier_teachers(results.get(key)):
            continue  # recorded before this code named more teachers: the ones it names agree
        if results.get(key) != value:
            problems.append(f"its {key!r} is {results.get(key)!r}, this code's is {value!r}")
    settings = results.get("settings")
    runs = results.get("runs")
    provenance = results.get("provenance")
    if not isinstance(settings, dict) or not isinstance(runs, dict):
        problems.append("it has no 'settings' and 'runs' of settings")
        settings, runs = {}, {}
    for label in sorted(set(settings) | set(runs)):
        if label not in SETTINGS:
            problems.append(f"setting {label!r} is unknown to this code (it knows "
                            f"{', '.join(map(repr, SETTINGS))})")  # fmt: skip
        elif settings.get(label) != SETTINGS[label]:
            problems.append(f"setting {label!r} is {settings.get(label)!r} in the file and "
                            f"{SETTINGS[label]!r} in this code")  # fmt: skip
    if not isinstance(provenance, list) or not provenance or not all(
        isinstance(entry, dict) for entry in provenance
    ):
        problems.append("it has no list of provenance entries")
        provenance = []
    for index, entry in enumerate(provenance):
        missing = [key for key in MACHINE if key not in entry]
        if missing:
            problems.append(f"provenance entry {index} does not name its {', '.join(missing)}")
    for label, label_runs in runs.items():
        if not isinstance(label_runs, list) or not all(isinstance(r, dict) for r in label_runs):
            problems.append(f"setting {label!r} holds no list of runs")
            continue
        seeds = [run.get("seed") for run in label_runs]
        for run, seed in zip(label_runs, seeds, strict=True):
            where = f"setting {label!r} seed {seed!r}"
            if isinstance(seed, bool) or not isinstance(seed, int):
                problems.append(f"{where}: the seed is not an int")
            for key in SHARES:
                if key in run and not _share(run[key]):
                    problems.append(f"{where}: {key} is {run[key]!r}, not a number in [0, 1]")
            for key in ("validation_accuracy", "test_accuracy"):
                if key not in run:
                    problems.append(f"{where}: no {key}")
            process = run.get("process", 0)
            if isinstance(process, bool) or not isinstance(process, int) or not (
                0 <= process < max(len(provenance), 1)
            ):
                problems.append(f"{where}: process {process!r} names no provenance entry")
        twice = sorted({seed for seed in seeds if seeds.count(seed) > 1}, key=repr)
        if twice:
            problems.append(f"setting {label!r} has seed(s) {twice} twice")
    if problems:
        raise _files.ResultsFileError(
            f"{name} is not a results file of this miniature, or not of this code:\n- "
            + "\n- ".join(problems)
            + "\nPass a file written by scripts/run_distillation.py with the code it was made "
            "with."
        )


def check_together(parts: list[tuple[str, dict]], *, allow_mixed: bool) -> None:
    """Refuse parts (files, or this run's plan) whose runs do not belong in one file.

    ``parts``: ``(name, results)``, planned runs with a seed only. No setting and seed twice;
    runs of other arithmetic (torch, CPU, kernel variables) join only with ``allow_mixed``.
    """
    seen: dict[tuple[str, int], str] = {}
    twice, machines = [], {}
    for name, part in parts:
        for label, label_runs in part["runs"].items():
            for run in label_runs:
                key = (label, run["seed"])
                if key in seen:
                    twice.append(f"- setting {label!r} seed {run['seed']} twice ({seen[key]}, "
                                 f"{name})")  # fmt: skip
                seen.setdefault(key, name)
        for entry in part["provenance"]:
            machines.setdefault(_machine(entry), []).append(name)
    problems = list(twice)
    if len(machines) > 1 and not allow_mixed:
        listed = "; ".join(f"{m[2]}, {m[3]}, torch {m[0]}{' ' + str(dict(m[4])) if m[4] else ''}"
                           f" ({', '.join(dict.fromkeys(names))})"
                           for m, names in machines.items())  # fmt: skip
        problems.append(f"- the runs come from different machines or software: {listed}. Runs "
                        "of different arithmetic give different numbers for the same seed; "
                        "say that they may share a file with --allow-mixed (each run names "
                        "the provenance of the process that made it)")  # fmt: skip
    if problems:
        raise NotTogether("these runs do not belong together:\n" + "\n".join(problems))


def _ordered(runs: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Settings in SETTINGS order, each setting's runs by seed (nothing dropped)."""
    return {label: sorted(runs[label], key=lambda run: run["seed"])
            for label in SETTINGS if label in runs}  # fmt: skip


def _settings_of(runs: dict) -> dict:
    return {label: SETTINGS[label] for label in SETTINGS if label in runs}


def plan(settings: list[str], seeds: list[int], out: Path, allow_mixed: bool) -> dict | None:
    """Check, before anything trains, that this run's runs may go into ``out``; its contents."""
    existing = None
    if out.exists():
        existing = load_results(out)
        validate(existing, str(out))
    here = {"runs": {label: [{"seed": seed} for seed in seeds] for label in settings},
            "provenance": [_provenance(settings, seeds)]}  # fmt: skip
    check_together([(str(out), existing)] * (existing is not None) + [("this run", here)],
                   allow_mixed=allow_mixed)  # fmt: skip
    return existing


def run(
    settings: list[str],
    seeds: list[int],
    out: Path,
    teacher_path: Path | None = None,
    *,
    allow_mixed: bool = False,
) -> None:
    """Train ``settings`` x ``seeds`` and append them to ``out`` (a new file if there is none)."""
    start = time.perf_counter()
    plan(settings, seeds, out, allow_mixed)
    here = _provenance(settings, seeds)

    def add(data: dict, run: dict, process: int) -> None:
        one = {k: v for k, v in run.items() if k != "setting"}
        if process:  # a run of a file with one provenance entry needs no index
            one["process"] = process
        data["teachers"] = TEACHERS  # the same, or more teachers than the file named (validate)
        data["runs"].setdefault(run["setting"], []).append(one)
        data["settings"] = _settings_of(data["runs"])

    def check(data: dict) -> None:
        validate(data, str(out))
        check_together([(str(out), data)], allow_mixed=allow_mixed)

    def tidy(data: dict) -> None:
        data["runs"] = _ordered(data["runs"])
        data["settings"] = _settings_of(data["runs"])

    # Each run is added under the file's lock to what the file holds then (another process's
    # runs included), after every run: a long run keeps its progress.
    written = records.Appender(out, here, add=add, check=check, remedy="choose another --out.",
                               empty={**_constants(), "settings": {}, "runs": {}})  # fmt: skip
    teachers: dict[int, dict[str, torch.nn.Module]] = {seed: {} for seed in seeds}
    order = sorted(settings, key=list(TEACHERS.values()).__contains__, reverse=True)
    for label in order:  # the teachers' settings first, then the students in SETTINGS order
        for seed in seeds:
            model, one = run_one(label, seed, teachers[seed])
            for kind, teacher_label in TEACHERS.items():
                if label == teacher_label:
                    teachers[seed][kind] = model
            if teacher_path is not None and label == TEACHERS["cnn"] and seed == 0:
                commit = provenance.git("rev-parse", "HEAD", where=ROOT)
                save_teacher(model, teacher_path, seed="0", commit=commit,
                             validation_accuracy=str(one["validation_accuracy"]),
                             test_accuracy=str(one["test_accuracy"]))  # fmt: skip
                _log(f"wrote {teacher_path}")
            written.add({"setting": label, **one})
            _log(f"{label:<30} seed {seed}: validation {one['validation_accuracy']:.3f}, "
                 f"test {one['test_accuracy']:.3f}, {one['seconds']:.1f} s")  # fmt: skip
    seconds = time.perf_counter() - start
    here["load_average_start_end"].append(round(os.getloadavg()[0], 2))
    here["wall_seconds"] = round(seconds, 1)
    written.update_entry(tidy)
    _log(f"wrote {out} in {seconds:.0f} s")


def merge(paths: list[Path], out: Path, *, allow_mixed: bool = False) -> None:
    """Join results files into ``out``: every run, every provenance entry (see the docstring)."""
    with _files.hold(out, wait=True):  # a run appending to out finishes its write first
        _merge(paths, out, allow_mixed=allow_mixed)


def _merge(paths: list[Path], out: Path, *, allow_mixed: bool) -> None:
    inputs = {path.expanduser().resolve() for path in paths}
    if out.exists() and out.expanduser().resolve() not in inputs:
        raise FileExistsError(
            f"{out} exists and is not among the files to merge, so its runs would be lost; add "
            "it to --merge, or choose a new --out."
        )
    parts = []
    for path in paths:
        part = load_results(path)
        validate(part, str(path))
        parts.append((str(path), part))
    check_together(parts, allow_mixed=allow_mixed)
    joined = {**_constants(), "settings": {}, "runs": {}, "provenance": [], "joins": []}
    for _, part in parts:
        offset = len(joined["provenance"])
        for label, label_runs in part["runs"].items():
            for run in label_runs:
                moved = dict(run)
                index = run.get("process", 0) + offset
                if index:  # entry 0 of the joined file needs no index
                    moved["process"] = index
                joined["runs"].setdefault(label, []).append(moved)
        joined["provenance"] += part["provenance"]
        joined["joins"] += part.get("joins", [])
        if "merge_command" in part:  # what an earlier version of this script wrote
            joined["joins"].append({"command": part["merge_command"]})
    joined["runs"] = _ordered(joined["runs"])
    joined["settings"] = _settings_of(joined["runs"])
    joined["joins"].append({"command": provenance.command(), "date": provenance.now(),
                            "files": [str(path) for path in paths], "allow_mixed": allow_mixed})
    _files.write_json(out, joined)
    _log(f"wrote {out}: settings {list(joined['runs'])}")


def check(settings: list[str], seeds: list[int], path: Path) -> int:
    """Re-run stored runs and compare them with the file; 1 if any number differs."""
    results = load_results(path)
    validate(results, str(path))
    failures = 0
    for label in settings:
        for seed in seeds:
            stored, rerun = reproduce(results, label, seed)
            made_by = results["provenance"][stored.get("process", 0)]
            here = f"{provenance.cpu_model_name()} ({provenance.cpu_capability()})"
            _log(f"{label!r} seed {seed} was made on {made_by['cpu']} ({made_by['cpu_capability']}"
                 f"); this is {here}")  # fmt: skip
            for metric in CHECK_METRICS:
                if metric not in stored:
                    continue
                ok = stored[metric] == rerun[metric]
                failures += not ok
                _log(f"{'ok ' if ok else 'BAD'} {label!r} seed {seed} {metric}: "
                     f"file {stored[metric]}, rerun {rerun[metric]}")  # fmt: skip
    return 1 if failures else 0


def _once(parser: argparse.ArgumentParser, flag: str, values: list) -> None:
    twice = sorted({v for v in values if values.count(v) > 1}, key=str)
    if twice:
        parser.error(f"{flag} names {', '.join(map(str, twice))} twice; name each once (one run "
                     "per setting and seed: two would count as two seeds).")  # fmt: skip


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path,
                        help="the results file; an existing one is appended to (default: a "
                             "new file in runs/)")  # fmt: skip
    parser.add_argument("--write-assets", action="store_true",
                        help=f"write {RESULTS_PATH.relative_to(ROOT)} (the shipped results; "
                             "appended to)")  # fmt: skip
    parser.add_argument("--allow-mixed", action="store_true",
                        help="let runs of another torch, CPU or CPU capability join the file")
    parser.add_argument("--merge", nargs="+", type=Path, help="join these files into --out")
    parser.add_argument("--check", type=Path, help="re-run --only/--seeds, compare with this file")
    args = parser.parse_args(argv)
    _once(parser, "--seeds", args.seeds)
    _once(parser, "--only", args.only)
    if any(seed < 0 for seed in args.seeds):
        parser.error(f"--seeds {' '.join(map(str, args.seeds))}: seeds are 0 or more.")
    if args.merge:
        _once(parser, "--merge", [path.expanduser().resolve() for path in args.merge])
    if args.write_assets and args.out is not None and not _files.is_shipped(args.out):
        parser.error("--write-assets writes the shipped file; leave out --out, or name it.")
    args.parser = parser
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    os.environ.setdefault("VITBOOK_PROGRESS", "0")
    if args.check:
        return check(args.only, args.seeds, args.check)
    if args.write_assets:
        out = args.out or RESULTS_PATH
    elif args.out is not None:
        out = args.out
    else:  # a new file: a default run never replaces an earlier one
        out = _files.new_path(RUNS, "distillation-merged" if args.merge else "distillation")
    what = "not merged" if args.merge else "nothing trained"
    try:
        out = _files.check_output(out, write_assets=args.write_assets)
        if args.merge:
            merge(args.merge, out, allow_mixed=args.allow_mixed)
            return 0
        plan(args.only, args.seeds, out, args.allow_mixed)
        teacher_path = None
        if args.write_assets and "CNN teacher" in args.only and 0 in args.seeds:
            teacher_path = _files.check_output(TEACHER_PATH, write_assets=True, exists_ok=False)
    except (OSError, ValueError) as error:
        args.parser.exit(2, f"{args.parser.prog}: {what}, {out} unchanged: {error}\n")
    _log(f"writing {out}")
    try:
        run(args.only, args.seeds, out, teacher_path, allow_mixed=args.allow_mixed)
    except records.RefusedRun as error:  # another process wrote the same run meanwhile
        args.parser.exit(2, f"{args.parser.prog}: {error}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
