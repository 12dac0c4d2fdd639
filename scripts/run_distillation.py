#!/usr/bin/env python3
"""Run the distillation miniature on the digits and record it, with provenance.

    python scripts/run_distillation.py                    # every setting, seeds 0 1 2 3 4,
                                                          # into a new file runs/distillation-*.json
    python scripts/run_distillation.py --write-assets     # into vitbook/assets/distillation.json
    python scripts/run_distillation.py --only "conv stem" --seeds 0 1 --out /tmp/a.json
    python scripts/run_distillation.py --merge /tmp/a.json /tmp/b.json --out /tmp/ab.json
    python scripts/run_distillation.py --check vitbook/assets/distillation.json --only \\
        "CNN teacher" --seeds 0

The settings, the models and one run are defined in vitbook.distill_digits, so that the chapter
and the tests use the same code. For every seed the teachers are trained first (the CNN, and
the ViT trained from scratch, which is the ViT teacher); every student of that seed learns from
them. Settings are compared by their validation accuracy; each model reads the test digits once,
after training, and no choice depends on them.

Nothing recorded is overwritten by default: without --out the results go to a new file in runs/
(not tracked), and the shipped files vitbook/assets/distillation.json and (seed 0's CNN teacher)
vitbook/assets/digits_cnn_teacher.safetensors are written only with --write-assets. The output
path is checked (its folder made, a test file written and removed) before anything trains,
and every write goes to a temporary file in the same folder that is flushed to disk and then
moved into place, so a reader sees the old file or the new one.

Every run trains on one CPU thread with deterministic algorithms: on the same machine and
software the numbers come out the same, which --check verifies by re-running a slice. Run it
beside other work with `nice -n 10` and OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy
import torch

from vitbook import records
from vitbook.distill_digits import (
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
from vitbook.experiments import CNN_CHANNELS, RECIPE, _cpu_capability, _cpu_model_name

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "runs"
# What --check accepts as the same number: exact on the machine that wrote the file.
CHECK_METRICS = ("validation_accuracy", "test_accuracy", "teacher_agreement", "head_agreement")


def _log(*parts: object) -> None:
    print(*parts, flush=True)


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=ROOT)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _constants() -> dict:
    return {
        "fraction": FRACTION,
        "student": STUDENT,
        "cnn_channels": list(CNN_CHANNELS),
        "recipe": RECIPE,
        "distillation": DISTILLATION,
        "settings": SETTINGS,
        "teachers": TEACHERS,
    }


def _provenance(settings: list[str], seeds: list[int], seconds: float, load: list[float]) -> dict:
    return {
        "command": "python " + shlex.join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "settings_run": settings,
        "seeds": seeds,
        "git_commit": _git("rev-parse", "HEAD"),
        "uncommitted_changes": _git("status", "--porcelain", "--untracked-files=no") != "",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "cpu": _cpu_model_name(),
        "cpu_capability": _cpu_capability(),
        "cpu_count": os.cpu_count(),
        "torch_threads": 1,
        "deterministic_algorithms": True,
        "load_average_start_end": [round(value, 2) for value in load],
        "wall_seconds": round(seconds, 1),
        "note": "seconds are wall-clock on a shared machine (see the load average); compare "
        "them within one run of the script only",
    }


def run(
    settings: list[str], seeds: list[int], out: Path, teacher_path: Path | None = None
) -> None:
    start, load_start = time.perf_counter(), os.getloadavg()[0]
    results = {**_constants(), "runs": {}}
    teachers: dict[int, dict[str, torch.nn.Module]] = {seed: {} for seed in seeds}
    order = sorted(settings, key=list(TEACHERS.values()).__contains__, reverse=True)
    for label in order:  # the teachers' settings first, then the students in SETTINGS order
        results["runs"][label] = []
        for seed in seeds:
            model, one = run_one(label, seed, teachers[seed])
            for kind, teacher_label in TEACHERS.items():
                if label == teacher_label:
                    teachers[seed][kind] = model
            if teacher_path is not None and label == TEACHERS["cnn"] and seed == 0:
                save_teacher(model, teacher_path, seed="0", commit=_git("rev-parse", "HEAD"),
                             validation_accuracy=str(one["validation_accuracy"]),
                             test_accuracy=str(one["test_accuracy"]))  # fmt: skip
                _log(f"wrote {teacher_path}")
            results["runs"][label].append(one)
            _log(f"{label:<24} seed {seed}: validation {one['validation_accuracy']:.3f}, "
                 f"test {one['test_accuracy']:.3f}, {one['seconds']:.1f} s")  # fmt: skip
        records.write_json(out, results)  # after each setting: a long run keeps its progress
    results["runs"] = {label: results["runs"][label] for label in SETTINGS if label in settings}
    seconds = time.perf_counter() - start
    results["provenance"] = [
        _provenance(settings, seeds, seconds, [load_start, os.getloadavg()[0]])
    ]
    records.write_json(out, results)
    _log(f"wrote {out} in {seconds:.0f} s")


def merge(paths: list[Path], out: Path) -> None:
    """Join files that ran disjoint settings with the same constants, seeds and software."""
    parts = [load_results(path) for path in paths]
    first = parts[0]

    def machine(part: dict) -> set:
        return {(p["torch"], p["python"], p["cpu"], p["cpu_capability"], tuple(p["seeds"]))
                for p in part["provenance"]}  # fmt: skip

    merged = {**{key: first[key] for key in _constants()}, "runs": {}, "provenance": []}
    for path, part in zip(paths, parts, strict=True):
        for key in _constants():
            if part[key] != first[key]:
                raise SystemExit(f"{path} has another {key} than {paths[0]}; not merged.")
        if machine(part) != machine(first):
            raise SystemExit(f"{path} was made with other software, CPU or seeds; not merged.")
        twice = set(merged["runs"]) & set(part["runs"])
        if twice:
            raise SystemExit(f"{path} repeats the settings {sorted(twice)}; not merged.")
        merged["runs"].update(part["runs"])
        merged["provenance"] += part["provenance"]
    merged["runs"] = {label: merged["runs"][label] for label in SETTINGS if label in merged["runs"]}
    merged["merge_command"] = "python " + shlex.join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])
    records.write_json(out, merged)
    _log(f"wrote {out}: settings {list(merged['runs'])}")


def check(settings: list[str], seeds: list[int], path: Path) -> int:
    """Re-run stored runs and compare them with the file; 1 if any number differs."""
    results = load_results(path)
    failures = 0
    for label in settings:
        for seed in seeds:
            stored, rerun = reproduce(results, label, seed)
            for metric in CHECK_METRICS:
                if metric not in stored:
                    continue
                ok = stored[metric] == rerun[metric]
                failures += not ok
                _log(f"{'ok ' if ok else 'BAD'} {label!r} seed {seed} {metric}: "
                     f"file {stored[metric]}, rerun {rerun[metric]}")  # fmt: skip
    return 1 if failures else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", type=Path, help="the results file (default: a new file in runs/)")
    parser.add_argument("--write-assets", action="store_true",
                        help=f"write {RESULTS_PATH.relative_to(ROOT)} (the shipped results)")
    parser.add_argument("--merge", nargs="+", type=Path, help="join these files into --out")
    parser.add_argument("--check", type=Path, help="re-run --only/--seeds, compare with this file")
    args = parser.parse_args()
    os.environ.setdefault("VITBOOK_PROGRESS", "0")
    if args.check:
        raise SystemExit(check(args.only, args.seeds, args.check))
    if args.write_assets and args.out is not None:
        parser.error("--write-assets writes the shipped file; leave out --out.")
    if args.write_assets:
        out = RESULTS_PATH
    elif args.out is not None:
        out = args.out
    else:  # a new file: a default run never replaces an earlier one
        out = records.new_path(RUNS, "distillation-merged" if args.merge else "distillation")
    out = records.check_output(out, write_assets=args.write_assets)
    if args.merge:
        merge(args.merge, out)
        return
    teacher_path = None
    if args.write_assets and "CNN teacher" in args.only and 0 in args.seeds:
        teacher_path = records.check_output(TEACHER_PATH, write_assets=True)
    _log(f"writing {out}")
    run(args.only, args.seeds, out, teacher_path)


if __name__ == "__main__":
    main()
