#!/usr/bin/env python3
"""Run the digits experiments and record them, with their provenance, in a new results file.

    python scripts/run_experiments.py                       # all four, seeds 0 1 2, into runs/
    python scripts/run_experiments.py --only patch_size --seeds 0 1 2 3 4
    python scripts/run_experiments.py --check --only data_size --setting "CNN 10%" --seeds 0
    python scripts/run_experiments.py --only positions --out vitbook/assets/experiments.json \
        --update --write-assets                             # re-record one shipped experiment

The experiments, the recipe and one training run are defined in vitbook.studies.experiments, so the
chapters and the tests use the same code. Every run trains on the training part of
vitbook.data.load_digits_split(validation=True) and records its validation accuracy (what the
chapters compare settings by), its accuracy on the validation digits moved one pixel, and its test
accuracy (quoted only for the setting chosen). Every run trains on one CPU thread with deterministic
algorithms: on the same machine and software versions the accuracies and losses come out the
same, which ``--check`` verifies by re-running a slice and comparing with the file. Runs that are
the same in two experiments (the base ViT on the full split, for example) are trained once.

Nothing recorded is overwritten by default: the results go to a new file in runs/ unless --out
names one. An existing --out is refused unless ``--update`` says to replace the experiments of
``--only`` in it (keeping the others); the shipped file (vitbook/assets) is written only with
``--write-assets``. Every output path is checked before anything trains, and every write is
atomic. ``--merge`` joins files that hold other seeds of the same experiments (run at the same
time, say) into a new file, keeping the provenance of each part:

    python scripts/run_experiments.py --seeds 3 4 --out /tmp/more.json
    python scripts/run_experiments.py --merge vitbook/assets/experiments.json /tmp/more.json \
        --out /tmp/five-seeds.json

Wall-clock seconds per run depend on what else the machine is doing; ``--timing`` adds a
measure that depends much less on it, the fastest of 30 training steps for each patch size.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from vitbook import _files
from vitbook.studies import provenance
from vitbook.studies.experiments import (
    AUGMENT,
    BASE_VIT,
    CNN_CHANNELS,
    EXPERIMENTS,
    RESULTS_PATH,
    load_results,
    recorded_recipe,
    reproduce,
    run_one,
    time_training_step,
)

# What --check accepts as the same number: exact on the machine that wrote the file.
CHECK_TOLERANCE = {
    "validation_accuracy": 0.0,
    "moved_validation_accuracy": 0.0,
    "test_accuracy": 0.0,
    "train_loss": 0.0,
}


def _key(setting: dict[str, object]) -> str:
    """What determines a run: the full model fields, the training fraction, the augmentation."""
    if setting.get("model") == "cnn":
        full = {"model": "cnn", "channels": list(CNN_CHANNELS)}
    else:
        full = {"model": "vit", **BASE_VIT, **{k: v for k, v in setting.items() if k != "model"}}
    full["fraction"] = float(setting.get("fraction", 1.0))
    full["augment"] = setting.get("augment", AUGMENT)
    return json.dumps(full, sort_keys=True)


def _provenance(names: list[str], seeds: list[int], seconds: float, load: list[float]) -> dict:
    return provenance.cpu_run(
        Path(__file__).parent, experiments_run=names, seeds=seeds,
        load_average_start_end=[round(value, 2) for value in load], wall_seconds=round(seconds, 1),
        note="seconds are wall-clock on a shared machine (see the load average); compare them "
        "within one experiment only",
    )  # fmt: skip


def run(names: list[str], seeds: list[int], out: Path) -> None:
    results = load_results(out) if out.is_file() else {"experiments": {}}  # --update: keep others
    start, load_start = time.perf_counter(), os.getloadavg()[0]
    done: dict[tuple[str, int], dict] = {}
    for name in names:
        experiment_start, experiment_load = time.perf_counter(), os.getloadavg()[0]
        settings = EXPERIMENTS[name]["settings"]
        runs: dict[str, list[dict]] = {}
        for label, setting in settings.items():
            runs[label] = []
            for seed in seeds:
                key = (_key(setting), seed)
                if key not in done:
                    done[key] = run_one(setting, seed)
                    r = done[key]
                    print(
                        f"{name:<12} {label:<16} seed {seed}: validation "
                        f"{r['validation_accuracy']:.4f}, moved "
                        f"{r['moved_validation_accuracy']:.4f}, loss {r['train_loss']:.4f}, "
                        f"{r['seconds']:.1f} s",
                        flush=True,
                    )
                runs[label].append(done[key])
        results["experiments"][name] = {
            "description": EXPERIMENTS[name]["description"],
            "settings": settings,
            "seeds": seeds,
            "runs": runs,
            "provenance": _provenance(
                [name], seeds, time.perf_counter() - experiment_start,
                [experiment_load, os.getloadavg()[0]],
            ),  # fmt: skip
        }
        _write(results, out)  # after each experiment, so that a long sweep keeps its progress
    seconds = time.perf_counter() - start
    results["provenance"] = _provenance(names, seeds, seconds, [load_start, os.getloadavg()[0]])
    _write(results, out)
    print(f"wrote {out} in {seconds:.0f} s")


def _write(results: dict, out: Path) -> None:
    results["recipe"] = recorded_recipe()
    results["base_vit"] = BASE_VIT
    results["cnn_channels"] = list(CNN_CHANNELS)
    _files.write_json(out, results)


def timing(out: Path) -> None:
    """Time one training step per patch size (minimum of 30) and store it in the file."""
    results = load_results(out)
    experiment = results["experiments"]["patch_size"]
    start, load = time.perf_counter(), os.getloadavg()[0]
    experiment["step_seconds"] = {
        label: round(time_training_step(setting), 6)
        for label, setting in EXPERIMENTS["patch_size"]["settings"].items()
    }
    experiment["step_seconds_provenance"] = _provenance(
        ["patch_size"], [0], time.perf_counter() - start, [load, os.getloadavg()[0]]
    )
    _write(results, out)
    print(f"wrote {out}: step seconds {experiment['step_seconds']}")


def _as_list(provenance: dict | list) -> list[dict]:
    return provenance if isinstance(provenance, list) else [provenance]


def merge(paths: list[Path], out: Path) -> None:
    """Join result files with the same recipe and software, seed by seed; keep every provenance."""
    parts = [load_results(path) for path in paths]
    first = parts[0]
    for path, part in zip(paths, parts, strict=True):
        for field in ("recipe", "base_vit", "cnn_channels"):
            if part[field] != first[field]:
                raise SystemExit(f"{path} has another {field} than {paths[0]}; not merged.")
        software = {
            (p["torch"], p["python"], p["cpu"]) for p in _as_list(part["provenance"])
        }
        if software != {(p["torch"], p["python"], p["cpu"]) for p in _as_list(first["provenance"])}:
            raise SystemExit(f"{path} was made with other software or CPU; not merged.")
    merged = {"experiments": {}}
    for name in first["experiments"]:
        pieces = [part["experiments"][name] for part in parts if name in part["experiments"]]
        seeds = [seed for piece in pieces for seed in piece["seeds"]]
        if len(set(seeds)) != len(seeds):
            raise SystemExit(f"experiment {name!r} has seeds {seeds} twice in {paths}; not merged.")
        order = sorted(range(len(seeds)), key=seeds.__getitem__)
        runs = {
            label: [[run for piece in pieces for run in piece["runs"][label]][i] for i in order]
            for label in pieces[0]["runs"]
        }
        merged["experiments"][name] = {
            **pieces[0],
            "seeds": sorted(seeds),
            "runs": runs,
            "provenance": [p for piece in pieces for p in _as_list(piece["provenance"])],
        }
    merged["provenance"] = [p for part in parts for p in _as_list(part["provenance"])]
    merged["merge_command"] = "python " + " ".join(
        [Path(sys.argv[0]).as_posix(), *sys.argv[1:]]
    )
    _write(merged, out)
    print(f"wrote {out}: seeds {merged['experiments'][name]['seeds']}")


def check(names: list[str], labels: list[str] | None, seeds: list[int], path: Path) -> int:
    results = load_results(path)
    failures = 0
    for name in names:
        for label in labels or list(EXPERIMENTS[name]["settings"]):
            for seed in seeds:
                stored, rerun = reproduce(results, name, label, seed)
                for metric, tolerance in CHECK_TOLERANCE.items():
                    gap = abs(stored[metric] - rerun[metric])
                    ok = gap <= tolerance
                    failures += not ok
                    print(
                        f"{'ok ' if ok else 'BAD'} {name} {label!r} seed {seed} {metric}: "
                        f"file {stored[metric]}, rerun {rerun[metric]} (tolerance {tolerance})"
                    )
    return 1 if failures else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(EXPERIMENTS), default=list(EXPERIMENTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--setting", nargs="+", help="with --check: these settings only")
    parser.add_argument("--check", action="store_true", help="re-run and compare with the file")
    parser.add_argument("--out", type=Path,
                        help="the results file (default: a new file in runs/; with --check and "
                             "--timing, the shipped file)")  # fmt: skip
    parser.add_argument("--update", action="store_true",
                        help="replace the experiments of --only in an existing --out")
    parser.add_argument("--write-assets", action="store_true",
                        help="allow writing the shipped results file in vitbook/assets")
    parser.add_argument("--merge", nargs="+", type=Path, help="join these files into --out")
    parser.add_argument(
        "--timing", action="store_true", help="time one step per patch size into --out"
    )
    args = parser.parse_args()
    if len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds {' '.join(map(str, args.seeds))} names a seed twice; one run per "
                     "seed.")  # fmt: skip
    os.environ.setdefault("VITBOOK_PROGRESS", "0")
    if args.check:
        raise SystemExit(check(args.only, args.setting, args.seeds, args.out or RESULTS_PATH))
    if args.merge:
        out = args.out or _files.new_path(Path("runs"), "experiments-merged")
        inputs = {path.expanduser().resolve() for path in args.merge}
    elif args.timing:
        out = args.out or RESULTS_PATH
    else:
        out = args.out or _files.new_path(Path("runs"), "experiments")
    try:  # before anything trains
        if args.timing and not out.is_file():
            raise FileNotFoundError(f"{out} does not exist; --timing adds to a results file.")
        if args.merge and out.exists() and out.expanduser().resolve() not in inputs:
            raise FileExistsError(f"{out} exists and is not among the files to merge; add it "
                                  "to --merge, or choose a new --out.")  # fmt: skip
        if not (args.merge or args.timing) and out.exists() and not args.update:
            raise FileExistsError(
                f"{out} exists; pass --update to replace its experiments {args.only} (keeping "
                "the others), or choose a new --out."
            )
        _files.check_output(out, write_assets=args.write_assets)
        if out.exists() and not args.merge:
            load_results(out)  # a damaged file is named now, not after the runs
    except (OSError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: nothing run: {error}\n")
    if args.merge:
        merge(args.merge, out)
    elif args.timing:
        timing(out)
    else:
        run(args.only, args.seeds, out)


if __name__ == "__main__":
    main()
