#!/usr/bin/env python3
"""Run the transfer miniature on the digits and record it, with provenance, in a new results file.

    python scripts/run_transfer.py                  # every setting, seeds 0 1 2 3 4, into runs/
    python scripts/run_transfer.py --only scratch "linear probe" --out /tmp/a.json
    python scripts/run_transfer.py --merge /tmp/a.json /tmp/b.json --out /tmp/ab.json
    python scripts/run_transfer.py --check --only fine-tune --shots 1 --seeds 0
    python scripts/run_transfer.py --out vitbook/assets/transfer.json --write-assets  # re-record

The protocol, the models and one run are defined in vitbook.studies.transfer_digits, so the chapter
and the tests use the same code. For each setting and number of labels, every learning rate of the
grid is trained with every seed; the learning rate with the best mean validation accuracy is
chosen, and only the chosen runs are evaluated on the test digits (the test set is read once).
The higher-resolution settings use the learning rate chosen for fine-tuning at 8 px. Seed 0's
pre-trained model is written beside the results (``<out>-pretrained.safetensors``) with
--save-pretrained, and into vitbook/assets/digits04_vit.safetensors when the results go to the
shipped file (the default there).

Nothing recorded is overwritten: the results go to a new file in runs/ unless --out names one;
an existing --out is refused, and the shipped files in vitbook/assets are written only with
--write-assets. Every output path is checked before anything trains, and every write is atomic.

Every run trains on one CPU thread with deterministic algorithms: on the same machine and
software versions the numbers come out the same, which --check verifies by re-running a slice.
--only runs some settings (two processes can share the work: the settings of each are disjoint;
the higher-resolution ones need "fine-tune" in the same process); --merge joins such files,
keeping the provenance of each part, and with --replace a later file's setting replaces an
earlier one's (the file lists what replaced what):

    python scripts/run_transfer.py --only "linear probe" --out /tmp/c.json
    python scripts/run_transfer.py --merge /tmp/a.json /tmp/b.json /tmp/c.json --replace
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

from vitbook import _files
from vitbook.pretrained.checkpoints import save_model
from vitbook.studies import provenance
from vitbook.studies.experiments import RECORDED_FIELDS
from vitbook.studies.transfer_digits import (
    HIGH_RES,
    HIGH_RES_SETTINGS,
    LONG_STEPS,
    LR_GRID,
    METHODS,
    MODEL,
    PRETRAIN_RECIPE,
    PRETRAINED_PATH,
    RESULTS_PATH,
    SETTINGS,
    SHOTS,
    STEPS,
    VAL_PER_CLASS,
    evaluate_test,
    load_results,
    pretrain,
    reproduce,
    train_one,
)

# What --check accepts as the same number: exact on the machine that wrote the file.
CHECK_METRICS = ("val_accuracy", "train_loss", "test_accuracy")


def _provenance(settings: list[str], seeds: list[int], seconds: float, load: list[float]) -> dict:
    return provenance.cpu_run(
        Path(__file__).parent, settings_run=settings, seeds=seeds,
        load_average_start_end=[round(value, 2) for value in load], wall_seconds=round(seconds, 1),
        note="seconds are wall-clock on a shared machine (see the load average); compare them "
        "within one run of the script only",
    )  # fmt: skip


def _constants() -> dict:
    return {
        "model": MODEL,
        "pretrain_recipe": PRETRAIN_RECIPE.to_dict(keys=RECORDED_FIELDS),
        "methods": METHODS,
        "lr_grid": {name: list(grid) for name, grid in LR_GRID.items()},
        "shots": list(SHOTS),
        "steps": STEPS,
        "long_steps": LONG_STEPS,
        "high_res": HIGH_RES,
        "val_per_class": VAL_PER_CLASS,
        "augment": "random_shift(1)",
    }


def _log(*parts: object) -> None:
    print(*parts, flush=True)


def choose(
    setting: str, shots: str, seeds: list[int], pretrained: dict, grid: tuple[float, ...]
) -> tuple[float, list[dict], list[dict]]:
    """Sweep ``grid``; return (chosen lr, the chosen runs with their test accuracy, the sweep)."""
    sweep, models = [], {}
    for lr in grid:
        for seed in seeds:
            try:
                model, run = train_one(setting, shots, lr, seed, pretrained.get(seed))
            except ValueError as error:  # fit stopped at a non-finite loss or gradient
                sweep.append({"seed": seed, "lr": lr, "val_accuracy": None, "diverged": str(error)})
                _log(f"  {setting:<31} {shots:>4} lr {lr:<6g} seed {seed}: diverged")
                continue
            models[lr, seed] = model
            sweep.append(run)
            _log(f"  {setting:<31} {shots:>4} lr {lr:<6g} seed {seed}: "
                 f"val {run['val_accuracy']:.3f}, {run['seconds']:.1f} s")  # fmt: skip
    means = {  # a learning rate that diverged for any seed is not a candidate
        lr: statistics.fmean(run["val_accuracy"] for run in sweep if run["lr"] == lr)
        for lr in grid
        if all(run["val_accuracy"] is not None for run in sweep if run["lr"] == lr)
    }
    chosen = max(means, key=lambda lr: (means[lr], -grid.index(lr)))  # ties: the first
    runs = []
    for seed in seeds:
        run = next(r for r in sweep if r["lr"] == chosen and r["seed"] == seed)
        runs.append({**run, "test_accuracy": evaluate_test(models[chosen, seed])})
    _log(f"{setting} {shots}: chose lr {chosen:g} (mean val {means[chosen]:.3f}); test "
         f"{statistics.fmean(r['test_accuracy'] for r in runs):.3f}")  # fmt: skip
    return chosen, runs, sweep


def run(settings: list[str], seeds: list[int], out: Path, pretrained_path: Path | None) -> None:
    start, load_start = time.perf_counter(), os.getloadavg()[0]
    results = {**_constants(), "settings": {}, "sweep": {}, "pretraining": []}
    pretrained = {}
    if any(setting != "scratch" and not setting.startswith("scratch,") for setting in settings):
        for seed in seeds:
            model, info = pretrain(seed)
            pretrained[seed] = model
            results["pretraining"].append({"seed": seed, **info})
            _log(f"pre-trained seed {seed}: {info}")
            if seed == 0 and pretrained_path is not None:
                recipe = PRETRAIN_RECIPE.to_dict(keys=RECORDED_FIELDS)
                notes = {"source_test_accuracy": str(info["source_test_accuracy"]), "seed": "0",
                         "recipe": json.dumps(recipe)}  # fmt: skip
                _files.write_with(pretrained_path, lambda path, model=model, notes=notes:
                                   save_model(model, path, overwrite=True, **notes))  # fmt: skip
                _log(f"wrote {pretrained_path}")
    for setting in settings:
        results["settings"][setting] = {}
        for shots in SETTINGS[setting]:
            if setting in HIGH_RES_SETTINGS:  # the learning rate chosen for fine-tuning at 8 px
                lr = results["settings"]["fine-tune"][shots]["lr"]
                runs = []
                for seed in seeds:
                    model, one = train_one(setting, shots, lr, seed, pretrained[seed])
                    runs.append({**one, "test_accuracy": evaluate_test(model)})
                    _log(f"  {setting} {shots} seed {seed}: {runs[-1]}")
                results["settings"][setting][shots] = {"lr": lr, "runs": runs}
                continue
            grid = LR_GRID[setting.split(",")[0]]
            lr, runs, sweep = choose(setting, shots, seeds, pretrained, grid)
            results["settings"][setting][shots] = {"lr": lr, "runs": runs}
            results["sweep"].setdefault(setting, {})[shots] = sweep
        _write(results, out)  # after each setting, so that a long sweep keeps its progress
    seconds = time.perf_counter() - start
    results["provenance"] = _provenance(settings, seeds, seconds, [load_start, os.getloadavg()[0]])
    _write(results, out)
    _log(f"wrote {out} in {seconds:.0f} s")


def _write(results: dict, out: Path) -> None:
    _files.write_json(out, results)


def _as_list(provenance: dict | list) -> list[dict]:
    return provenance if isinstance(provenance, list) else [provenance]


def _method(setting: str) -> str:
    """The method whose learning-rate grid a setting uses ("scratch, 1000 steps" -> "scratch")."""
    return setting.split(",")[0].split(" 12 px")[0]


def _models(pretraining: list[dict]) -> list[tuple]:
    """What identifies the pre-trained models of a part: seed, accuracy and final loss."""
    return [(p["seed"], p["source_test_accuracy"], p["train_loss"]) for p in pretraining]


def merge(paths: list[Path], out: Path, replace: bool = False) -> None:
    """Join files that ran disjoint settings with the same constants, seeds and software.

    A part's learning-rate grids need to agree only for the methods whose settings the merged
    file takes from it. With ``replace``, a later part's setting replaces an earlier part's of
    the same name (a rerun with a wider grid, say); the file lists every replacement.
    """
    parts = [load_results(path) for path in paths]
    first = parts[0]
    for path, part in zip(paths, parts, strict=True):
        for key in _constants():
            if key != "lr_grid" and part[key] != first[key]:
                raise SystemExit(f"{path} has another {key} than {paths[0]}; not merged.")
        here = {(p["torch"], p["python"], p["cpu"], tuple(p["seeds"]))
                for p in _as_list(part["provenance"])}  # fmt: skip
        if here != {(p["torch"], p["python"], p["cpu"], tuple(p["seeds"]))
                    for p in _as_list(first["provenance"])}:  # fmt: skip
            raise SystemExit(f"{path} was made with other software, CPU or seeds; not merged.")
    merged = {**{key: first[key] for key in _constants()}, "settings": {}, "sweep": {},
              "pretraining": []}  # fmt: skip
    source: dict[str, int] = {}  # setting -> the index of the part it is taken from
    replaced = []

    def command(index: int) -> str:
        return _as_list(parts[index]["provenance"])[0]["command"]

    for index, (path, part) in enumerate(zip(paths, parts, strict=True)):
        twice = set(merged["settings"]) & set(part["settings"])
        if twice and not replace:
            raise SystemExit(f"{path} repeats the settings {sorted(twice)}; not merged.")
        for setting in sorted(twice):
            replaced.append(
                {"setting": setting, "by": command(index), "replaces": command(source[setting])}
            )
            merged["sweep"].pop(setting, None)
        if part["pretraining"] and merged["pretraining"]:  # the same models; seconds differ
            if _models(part["pretraining"]) != _models(merged["pretraining"]):
                raise SystemExit(f"{path} pre-trained other models; not merged.")
        merged["pretraining"] = merged["pretraining"] or part["pretraining"]
        merged["settings"].update(part["settings"])
        merged["sweep"].update(part["sweep"])
        source.update({setting: index for setting in part["settings"]})
    grids = {}  # each method's grid, from the part its settings come from; one per method
    for setting, index in source.items():
        if setting in HIGH_RES_SETTINGS:
            continue  # no grid: fine-tuning's choice
        grid = parts[index]["lr_grid"][_method(setting)]
        if grids.setdefault(_method(setting), grid) != grid:
            raise SystemExit(f"{setting!r} was chosen on another grid than the other "
                             f"{_method(setting)!r} settings; not merged.")  # fmt: skip
    merged["lr_grid"] = {**merged["lr_grid"], **grids}
    if replaced:
        merged["replaced"] = replaced
    order = list(SETTINGS)
    merged["settings"] = {k: merged["settings"][k] for k in order if k in merged["settings"]}
    merged["sweep"] = {k: merged["sweep"][k] for k in order if k in merged["sweep"]}
    merged["provenance"] = [p for part in parts for p in _as_list(part["provenance"])]
    merged["merge_command"] = "python " + shlex.join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])
    _write(merged, out)
    _log(f"wrote {out}: settings {list(merged['settings'])}")


def check(settings: list[str], shots: list[str] | None, seeds: list[int], path: Path) -> int:
    """Re-run stored runs and compare them with the file; 1 if any number differs."""
    results = load_results(path)
    failures = 0
    for setting in settings:
        for count in shots or list(results["settings"][setting]):
            for seed in seeds:
                stored, rerun = reproduce(results, setting, count, seed)
                for metric in CHECK_METRICS:
                    ok = stored[metric] == rerun[metric]
                    failures += not ok
                    _log(f"{'ok ' if ok else 'BAD'} {setting!r} {count} seed {seed} {metric}: "
                         f"file {stored[metric]}, rerun {rerun[metric]}")  # fmt: skip
    return 1 if failures else 0


def _outputs(args, parser: argparse.ArgumentParser) -> tuple[Path, Path | None]:
    """The results file and the pre-trained model's file, checked before anything trains."""
    out = args.out or _files.new_path(Path("runs"), "transfer")
    shipped = _files.is_shipped(out)
    save = args.save_pretrained if args.save_pretrained is not None else shipped
    pretrained = None
    if save:
        pretrained = PRETRAINED_PATH if shipped else out.with_name(f"{out.stem}-pretrained"
                                                                   ".safetensors")  # fmt: skip
    try:
        for path in (out, pretrained):
            if path is None:
                continue
            _files.check_output(path, write_assets=args.write_assets)
            replace = _files.is_shipped(path) and args.write_assets  # a deliberate re-record
            if path.exists() and not replace:
                raise FileExistsError(
                    f"{path} exists, and this script does not overwrite recorded results; "
                    "choose a new --out (or leave it out: a new file in runs/), or --merge."
                )
    except (OSError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: nothing trained: {error}\n")
    return out, pretrained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--shots", nargs="+", choices=list(SHOTS), help="with --check")
    parser.add_argument("--check", action="store_true", help="re-run and compare with the file")
    parser.add_argument("--out", type=Path,
                        help="the results file (default: a new file in runs/; with --check, the "
                             "shipped file)")  # fmt: skip
    parser.add_argument("--write-assets", action="store_true",
                        help="allow writing the shipped files in vitbook/assets")
    parser.add_argument("--merge", nargs="+", type=Path, help="join these files into --out")
    parser.add_argument("--replace", action="store_true",
                        help="with --merge: a later file's setting replaces an earlier one's")
    parser.add_argument("--save-pretrained", action=argparse.BooleanOptionalAction, default=None,
                        help="write seed 0's pre-trained model (default: when --out is the "
                        "shipped results file)")  # fmt: skip
    args = parser.parse_args()
    if len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds {' '.join(map(str, args.seeds))} names a seed twice; one run per "
                     "seed.")  # fmt: skip
    if args.shots is not None and not args.check:
        parser.error(f"--shots {' '.join(args.shots)} is read by --check only (a run trains every "
                     "setting's shots, a merge joins whole files); add --check to re-run those "
                     "shots, or leave --shots out.")  # fmt: skip
    os.environ.setdefault("VITBOOK_PROGRESS", "0")
    if args.merge:
        out = args.out or _files.new_path(Path("runs"), "transfer-merged")
        inputs = {path.expanduser().resolve() for path in args.merge}
        try:
            if out.exists() and out.expanduser().resolve() not in inputs:
                raise FileExistsError(f"{out} exists and is not among the files to merge; "
                                      "add it to --merge, or choose a new --out.")  # fmt: skip
            _files.check_output(out, write_assets=args.write_assets)
            for path in args.merge:  # a NaN read back from a file could not be written again
                _files.check_finite(path, load_results(path),
                                    remedy="leave the file out of --merge.")  # fmt: skip
        except (OSError, ValueError) as error:
            parser.exit(2, f"{parser.prog}: not merged: {error}\n")
        merge(args.merge, out, replace=args.replace)
        return
    if args.check:
        raise SystemExit(check(args.only, args.shots, args.seeds, args.out or RESULTS_PATH))
    needs = [s for s in args.only if s in HIGH_RES_SETTINGS]
    if needs and "fine-tune" not in args.only:
        parser.error(f"{needs} use the learning rate chosen for 'fine-tune'; run them together.")
    out, pretrained = _outputs(args, parser)
    run(args.only, args.seeds, out, pretrained)


if __name__ == "__main__":
    main()
