#!/usr/bin/env python3
"""Train the recipe ladder of "Real photos" on CIFAR-10 and record the results.

    python scripts/train_cifar10.py --data cifar10.npz      # the ladder, each row's planned seeds
    python scripts/train_cifar10.py --data cifar10.npz --rows vit-50 vit-200 --seeds 0
    torchrun --nproc_per_node=4 scripts/train_cifar10.py --data cifar10.npz   # 4 GPUs
    python scripts/train_cifar10.py --standin --tiny --epochs 1 --rows vit-50 --seeds 0  # smoke
    python scripts/train_cifar10.py --merge runs/a.json runs/b.json --out runs/ladder.json
    python scripts/train_cifar10.py --data cifar10.npz --rows resnet18-200 vit-200-deit-hard \
        vit-200-conv-stem --save-dir runs/weights        # the chapter on data-efficient ViTs
    python scripts/train_cifar10.py --data cifar10.npz --state runs/state --minutes 10  # a session
    python scripts/train_cifar10.py --plan-only --minutes 10    # the plan, priced, in budgets

The rows: ``vitbook.studies.ladder.ROWS`` (seeds from ``vitbook.studies.ladder.PLAN``), the shipped
recording's ``RECORDED_ROWS`` and the rows of "Can a ViT beat the CNN that taught it?"
(``DEIT_ROWS``). A distilled row needs its teacher's weights for each seed: trained earlier in the
same command, or in ``--teacher-dir`` as ``<teacher row>-seed<seed>.safetensors`` (what
``--save-dir`` writes), checked before anything trains. Every row trains with
``vitbook.train.fit``; each run records the validation accuracy after every epoch and reads the
test set once, at the end.

Nothing recorded is overwritten: results go to a new ``runs/cifar10-<UTC time>.json``, or to
``--out FILE``, which takes this run's runs only if they belong with its own (added under the
file's lock); ``vitbook/assets`` is written only with ``--write-assets``. Every output path is
checked before anything trains and every write is atomic. The file holds every run and one
provenance entry per process. ``--inside`` records the chapter's read-out of the best row's seed
0; ``--save-dir`` writes each run's weights and read-out.

Sessions (``--state DIR``, ``--minutes M``): the next recording, in
``vitbook.studies.ladder.recording_order``, goes into a state folder
(``vitbook.studies.session``). Each run saves its training state every ``--save-every`` minutes,
on SIGTERM or SIGINT and before the budget ends; the next session, on any machine with the folder
and the data file, continues it. A folder of other data, code, torch, precision or recipe is
refused. On a GPU the step is compiled (``--no-compile``: eager).

Under ``torchrun`` each process takes its share of every global batch (DistributedDataParallel;
gloo on the CPU) and only the first writes; a worker that waits longer than ``--dist-timeout``
seconds stops the others with a message.
"""


from __future__ import annotations

import argparse
import datetime
import os
import shlex
import sys
import time
from pathlib import Path

import torch

from vitbook import _files
from vitbook.studies import cpu_photos, records
from vitbook.studies.ladder import ALL_ROWS, BEST_ROW, PLAN, ROWS, recipe, recording_order
from vitbook.studies.session import StateFolder

if str(Path(__file__).resolve().parent) not in sys.path:  # imported by path (the tests)
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # its own modules lie beside it
import _cifar10_runs as runs  # noqa: E402
import _cifar10_sessions as sessions  # noqa: E402

STARTED = time.monotonic()  # a session's budget counts from here (after the imports)
DIST_TIMEOUT_S = 300  # a torchrun worker waits this long for the others, then stops with a message
MAX_MINUTES = 7 * 24 * 60  # the longest budget or save interval taken: a week


def world(timeout_s: int) -> tuple[int, int, int]:
    """Set up torch.distributed under torchrun; return (rank, local rank, processes)."""
    if "RANK" not in os.environ:
        return 0, 0, 1
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if os.environ["RANK"] == "0":
        print(f"torchrun: each of {os.environ.get('WORLD_SIZE')} workers waits at most "
              f"{timeout_s} s for the others, to start and at every step's gradient average "
              "(--dist-timeout)", flush=True)  # fmt: skip
    torch.distributed.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
    return torch.distributed.get_rank(), local, torch.distributed.get_world_size()


def merge(args, parser: argparse.ArgumentParser) -> None:
    """Join result files into a new one: their runs, and every provenance entry."""
    out = args.out or _files.new_path(Path("runs"), "cifar10-merged")
    inputs = {path.expanduser().resolve() for path in args.merge}
    try:
        if out.exists() and out.expanduser().resolve() not in inputs:
            raise FileExistsError(
                f"{out} exists and is not among the files to merge, so its runs would be lost; "
                f"add it to --merge, or choose a new --out."
            )
        _files.check_output(out, write_assets=args.write_assets)
    except (OSError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: not merged: {error}\n")
    with _files.hold(out, wait=True):  # a run appending to --out finishes its write first
        try:
            parts = [(str(path), _files.read_json(path, remedy="pass a file written by this "
                                                   "script.")) for path in args.merge]  # fmt: skip
            note = {"command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
                    "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                    "files": [str(path) for path in args.merge]}  # fmt: skip
            joined = records.join(parts, allow_mixed=args.allow_mixed, note=note)
        except (OSError, ValueError) as error:
            parser.exit(2, f"{parser.prog}: not merged: {error}\n")
        _files.write_json(out, joined)
    print(f"merged {len(joined['runs'])} runs into {out}")


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number; give 1 or more")
    return value


def minutes(text: str) -> float:
    value = float(text)
    if not 0 < value:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of minutes; e.g. 10")
    if value > MAX_MINUTES:  # inf too; a session's timer takes no more than that, either
        raise argparse.ArgumentTypeError(
            f"{text} is more than {MAX_MINUTES} minutes (a week), the most a session takes; "
            "give this session's minutes, e.g. 10"
        )
    return value


def folder_arg(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty name is the current folder; name the state "
                                         "folder, e.g. runs/state")  # fmt: skip
    return Path(text)


def processes_arg(text: str) -> int | str:
    """A count, ``auto`` (measured on a GPU, one on a CPU) or ``auto:N`` (measured, at most N)."""
    if text == "auto" or (text.startswith("auto:") and positive(text[5:])):
        return text
    return positive(text)


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data", help="a .npz in torchvision's layout, or torchvision's folder")
    source.add_argument("--standin", action="store_true", help="the offline stand-in (smoke runs)")
    parser.add_argument("--download", action="store_true", help="let torchvision download")
    parser.add_argument("--data-note", default="", help="recorded with the data, e.g. its origin")
    parser.add_argument("--plan", choices=list(runs.PLANS), default="next",
                        help="what a state folder (or --plan-only) records: the GPU ladder's "
                             "next recording (next) or the photo ViT on a CPU (cpu)")
    parser.add_argument("--rows", nargs="+", choices=list(ALL_ROWS),
                        help="the rows to train (default: the next ladder; with --state or "
                             "--plan-only, the whole next recording)")  # fmt: skip
    parser.add_argument("--seeds", nargs="+", type=int,
                        help="every row's seeds (default: the ladder's plan; 0 1 2 for the "
                             "recorded rows)")  # fmt: skip
    parser.add_argument("--epochs", type=positive, help="override every row's epochs (smoke runs)")
    parser.add_argument("--batch-size", type=positive, help="override the global batch size")
    parser.add_argument("--tiny", action="store_true", help="a tiny ViT (smoke runs)")
    parser.add_argument("--inside", choices=list(ALL_ROWS),
                        help="the row whose seed 0 the chapter looks inside (default: "
                             f"{BEST_ROW}; with --plan cpu, {cpu_photos.ROW})")  # fmt: skip
    parser.add_argument("--out", type=Path, help="results file (default: a new file in runs/)")
    parser.add_argument("--write-assets", action="store_true",
                        help="allow --out (or --save-dir) in vitbook/assets, the shipped files")
    parser.add_argument("--save-dir", type=Path, help="write each run's weights and the read-out")
    parser.add_argument("--teacher-dir", type=Path,
                        help="where a distilled row finds its teacher's weights when the teacher "
                             "row is not in --rows (default runs/weights)")  # fmt: skip
    parser.add_argument("--merge", nargs="+", type=Path, help="join result files into --out")
    parser.add_argument("--allow-mixed", action="store_true",
                        help="join (--merge) or append to --out other data, devices, epochs or "
                             "recipes")  # fmt: skip
    parser.add_argument("--dist-timeout", type=positive, default=DIST_TIMEOUT_S,
                        help="seconds a torchrun worker waits for the others to start and at "
                             "each step's gradient average before it stops with a message "
                             f"(default {DIST_TIMEOUT_S})")  # fmt: skip
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction,
                        help="compile the training step (default: on a GPU, not under torchrun)")
    record = parser.add_argument_group("sessions of any length")
    record.add_argument("--state", type=folder_arg,
                        help="record the plan into this state folder, continuing its unfinished "
                             "runs (results in STATE/results.json)")  # fmt: skip
    record.add_argument("--minutes", type=minutes,
                        help="this session's budget: save and stop before it ends")
    record.add_argument("--processes", type=processes_arg, default="auto",
                        help="runs side by side on the GPU: a number, auto (measured on a GPU, "
                             "up to 8; 1 on a CPU) or auto:N (measured, up to N)")  # fmt: skip
    record.add_argument("--save-every", type=minutes,
                        help="minutes between two saves of a run's state (default 1)")
    record.add_argument("--plan-only", action="store_true",
                        help="print the plan and its cost from the measured compiled epoch, "
                             "train nothing")  # fmt: skip
    for hidden in ("--worker", "--deadline", "--session", "--beside"):  # a session's processes
        record.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.plan_name = args.plan
    if args.merge:
        merge_only(args, parser)
        return args, parser
    if args.inside is None:
        args.inside = cpu_photos.ROW if args.plan_name == "cpu" else BEST_ROW
    if args.seeds is not None and len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds {' '.join(map(str, args.seeds))} names a seed twice; one run "
                     "per seed (two would count as two seeds).")  # fmt: skip
    if args.minutes is not None and args.state is None and not args.plan_only:
        parser.error(f"--minutes {args.minutes:g} needs --state DIR: a budget stops the runs, "
                     "and only a state folder keeps what they did for the next session.")
    if args.save_every is not None and args.state is None:
        parser.error(f"--save-every {args.save_every:g} needs --state DIR: it says how often a "
                     "run's state is saved into a state folder, and without one nothing is.")
    if args.state is not None or args.plan_only:
        return state_plan(args, parser), parser
    args.rows = args.rows or list(ROWS)
    args.teacher_dir = args.teacher_dir or Path("runs/weights")
    if len(set(args.rows)) != len(args.rows):
        parser.error(f"--rows {' '.join(args.rows)} names a row twice; name each once.")
    # A teacher's row runs before the rows distilled from it.
    teachers = {ALL_ROWS[name]["teacher"] for name in args.rows if "teacher" in ALL_ROWS[name]}
    rows = sorted(args.rows, key=lambda name: name not in teachers)
    args.plan = [(name, tuple(args.seeds) if args.seeds is not None
                  else PLAN.get(name, (0, 1, 2))) for name in rows]  # fmt: skip
    check_teachers(args, parser, lambda name, seed: runs.teacher_path(args, name, seed).is_file())
    return args, parser


def merge_only(args, parser: argparse.ArgumentParser) -> None:
    """Refuse with --merge every option that only a session or a training command reads."""
    ignored = [flag for flag, given in (
        ("--state", args.state is not None), ("--minutes", args.minutes is not None),
        ("--save-every", args.save_every is not None), ("--plan-only", args.plan_only))
        if given]  # fmt: skip
    if ignored:
        flags = " and ".join(ignored)
        parser.error(f"--merge joins result files and trains nothing, so {flags} would be "
                     "ignored; merge in a command of its own (a state folder's "
                     "STATE/results.json merges as any results file).")  # fmt: skip
    ignored = [flag for flag, given in (
        ("--rows", args.rows is not None), ("--seeds", args.seeds is not None),
        ("--epochs", args.epochs is not None), ("--batch-size", args.batch_size is not None),
        ("--tiny", args.tiny), ("--inside", args.inside is not None),
        ("--save-dir", args.save_dir is not None), ("--teacher-dir", args.teacher_dir is not None),
        ("--data", args.data is not None), ("--standin", args.standin),
        ("--download", args.download)) if given]  # fmt: skip
    if ignored:
        flags = " and ".join(ignored)
        parser.error(f"--merge joins result files and trains nothing, so {flags} would be "
                     "ignored: a merge keeps every run of its files, whatever their rows, seeds "
                     "or epochs. Merge in a command of its own, and train the runs you want in "
                     "another.")  # fmt: skip


def check_teachers(args, parser: argparse.ArgumentParser, saved) -> None:
    """Every distilled run has its teacher: trained earlier in the plan, or saved."""
    planned = {(name, seed) for name, seeds in args.plan for seed in seeds}
    for name, seeds in args.plan:
        teacher = ALL_ROWS[name].get("teacher")
        if teacher is None:
            continue
        absent = [seed for seed in seeds if (teacher, seed) not in planned
                  and not saved(name, seed)]  # fmt: skip
        if not absent:
            continue
        if args.state is None and args.plan_only:  # a plan is what a new state folder records
            parser.error(f"{name} learns from {teacher}, which is not in --rows for seeds "
                         f"{absent}; add {teacher} to --rows: a state folder trains a teacher "
                         "before the rows distilled from it, and the plan prices both.")
        missing = runs.teacher_path(args, name, absent[0])
        if args.state is not None:
            parser.error(f"{name} learns from {teacher}, which is neither in --rows for seeds "
                         f"{absent} nor saved in the state folder ({missing}); add {teacher} to "
                         "--rows (the session trains it first and keeps its weights in "
                         f"{missing.parent}), or copy its trained weights there as "
                         f"{missing.name}.")  # fmt: skip
        parser.error(f"{name} learns from {teacher}, which is neither in --rows for seeds "
                     f"{absent} nor saved in --teacher-dir ({missing}); add {teacher} to "
                     "--rows (with --save-dir to keep it), or point --teacher-dir at its "
                     "weights.")  # fmt: skip


def state_plan(args, parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The runs of a state folder (or of --plan-only), in recording order, checked."""
    if "RANK" in os.environ:
        parser.error("--state records side by side on one GPU, not under torchrun; run it "
                     "with python, or use torchrun without --state.")  # fmt: skip
    for flag, value in (("--out", args.out), ("--save-dir", args.save_dir),
                        ("--teacher-dir", args.teacher_dir)):  # fmt: skip
        if value is not None and args.state is not None:
            parser.error(f"{flag} with --state: the state folder keeps the results "
                         "(results.json), the weights and the teachers (weights/); leave "
                         f"{flag} out, and merge STATE/results.json where it should go.")
    if args.state is None:  # --plan-only prints the plan; it trains and writes nothing
        given = [flag for flag, value in (("--out", args.out), ("--save-dir", args.save_dir),
                                          ("--teacher-dir", args.teacher_dir)) if value]
        if given:
            parser.error(f"--plan-only prints the plan and writes nothing, so {' and '.join(given)}"
                         " would be ignored; leave it out to see the plan, or drop --plan-only "
                         "to train and write.")  # fmt: skip
    plan_rows, plan_seeds = runs.PLANS[args.plan_name]
    rows = args.rows or list(plan_rows)
    old = [name for name in rows if name not in plan_rows]
    if old:
        parser.error(f"{old} are not rows of --plan {args.plan_name}; a state folder of it "
                     f"records {list(plan_rows)}.")  # fmt: skip
    if len(set(rows)) != len(rows):
        parser.error(f"--rows {' '.join(rows)} names a row twice; name each once.")
    seeds = {name: tuple(args.seeds) if args.seeds is not None
             else plan_seeds[name] for name in rows}  # fmt: skip
    if args.plan_name == "next":
        args.order = recording_order(seeds)
    else:  # one row after another, seed by seed
        args.order = [(name, seed) for name in rows for seed in seeds[name]]
    args.rows = rows
    args.plan = [(name, seeds[name]) for name in dict.fromkeys(r for r, _ in args.order)]
    if args.state is not None:
        try:
            args.folder = StateFolder(args.state)
        except ValueError as error:  # a file, or a folder in vitbook/assets
            parser.error(str(error))
        args.teacher_dir = args.folder.weights
        saved = lambda name, seed: runs.teacher_path(args, name, seed).is_file()  # noqa: E731
        check_teachers(args, parser, saved)
    else:
        check_teachers(args, parser, lambda name, seed: False)
    return args


def check_outputs(args, parser: argparse.ArgumentParser) -> dict | None:
    """Every path this run writes, checked before it trains; the --out file's runs, if any."""
    args.out = args.out or _files.new_path(Path("runs"), "cifar10")
    try:
        _files.check_output(args.out, write_assets=args.write_assets)
        existing = None
        if args.out.exists():
            existing = _files.read_json(args.out, remedy="choose another --out.")
            records.check_together([(str(args.out), existing)], allow_mixed=True)
            _files.check_finite(args.out, existing, remedy="choose another --out.")
        if args.save_dir is not None:
            for name, seeds in args.plan:
                for seed in seeds:
                    weights = args.save_dir / f"{name}-seed{seed}.safetensors"
                    _files.check_output(weights, write_assets=args.write_assets, exists_ok=False)
    except (OSError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: nothing trained: {error}\n")
    return existing


def main(argv: list[str] | None = None) -> int:
    started = STARTED if argv is None else time.monotonic()
    args, parser = parse(argv)
    args.started = started
    if args.merge:
        merge(args, parser)
        return 0
    if args.plan_only:
        sessions.print_plan(args)
        return 0
    if args.state is not None:
        return sessions.work(args, parser) if args.worker else sessions.record(args, parser)
    existing = check_outputs(args, parser)
    try:
        rank, local, processes = world(args.dist_timeout)
    except RuntimeError as error:  # torch.distributed.DistError is one
        raise SystemExit(
            f"process {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')}: waited for "
            f"the other workers to start, and they did not all start within "
            f"--dist-timeout={args.dist_timeout} s ({error}). Nothing trained; check that every "
            "worker runs (torchrun starts them all)."
        ) from error
    device = torch.device(f"cuda:{local}" if torch.cuda.is_available() else "cpu")
    splits = runs.load_splits(args)
    planned = {(name, seed) for name, seeds in args.plan for seed in seeds}
    try:  # every teacher file read before anything trains
        for name, seed in sorted(planned):
            teacher = ALL_ROWS[name].get("teacher")
            if teacher is not None and (teacher, seed) not in planned:
                runs.load_teacher(args, name, seed, splits.num_classes, torch.device("cpu"))
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: nothing trained: {error}\n")
    here = runs.provenance(args, splits, processes, device)
    planned = [{"row": name, "seed": seed, "epochs": runs.epochs_of(name, args),
                "recipe": recipe(name, args.batch_size)}
               for name, seeds in args.plan for seed in seeds]  # fmt: skip
    this = [("this run", {"runs": planned, "provenance": [here]})]
    try:
        records.check_together([(str(args.out), existing)] * (existing is not None) + this,
                               allow_mixed=args.allow_mixed)  # fmt: skip
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: nothing trained, {args.out} unchanged: {error}\n")
    written = records.Appender(  # each run added under the file's lock, to what it holds then
        args.out, here, empty={"runs": []}, remedy="choose another --out.",
        add=lambda data, run, process: data["runs"].append({**run, "process": process}),
        check=lambda data: records.check_together([(str(args.out), data)],
                                                  allow_mixed=args.allow_mixed))  # fmt: skip
    needed = {ALL_ROWS[name]["teacher"] for name, _ in args.plan if "teacher" in ALL_ROWS[name]}
    args.teachers = {}  # (row, seed) -> a model trained here, for the rows distilled from it
    try:
        for name, seeds in args.plan:
            for seed in seeds:
                result, model = runs.run(name, seed, splits, args, device, rank)
                if name in needed:
                    args.teachers[name, seed] = model
                if rank != 0:
                    continue
                if args.save_dir is not None:
                    weights = args.save_dir / f"{name}-seed{seed}.safetensors"
                    runs.save_weights(model, weights, result)
                    if "inside" in result:
                        _files.write_json(args.save_dir / f"{name}-seed{seed}-readout.json",
                                           result["inside"])  # fmt: skip
                try:
                    written.add(result)
                except records.RefusedRun as error:
                    parser.exit(2, f"{parser.prog}: {error}\n")
                print(f"{name} seed {seed}: val {result['final_val_accuracy']:.4f}, test "
                      f"{result['test_accuracy']:.4f}, {result['wall_clock_minutes']:.1f} min "
                      f"wall-clock; in {args.out}", flush=True)  # fmt: skip
    except RuntimeError as error:
        if processes == 1:
            raise
        kept = (f"; {written.added} finished run(s) are in {args.out}"
                if rank == 0 and written.added else "")  # fmt: skip
        raise SystemExit(
            f"process {rank} of {processes} stopped: {error}\nIt waited for the other workers "
            "(at a step's gradient average, or for the epoch's sums): another worker stopped, "
            f"failed or did not answer within --dist-timeout={args.dist_timeout} s{kept}. Rerun "
            "the missing rows and seeds (--rows, --seeds) into a new --out and --merge the files."
        ) from error
    if processes > 1:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
