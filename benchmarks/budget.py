"""Book budget: every notebook in ``_toc.yml`` against its 30 s target (60 s hard limit), the
full book build, and the README's test command.

Each notebook runs top to bottom in a fresh ``python3`` kernel (nbclient, the executor that
Jupyter Book uses), with its own folder as working directory, as the book build runs it; its wall
time counts from kernel start to the end of the last cell. The contributing rules say a chapter
must run on 2 CPU cores in under 60 s. The kernels get OMP_NUM_THREADS / MKL_NUM_THREADS = 2
unless the caller set them.

The full build is ``jupyter-book build . --all -W -n --keep-going`` (the strict build of
``python3 tasks.py book``) into a temporary ``--path-output``, so ``_build/`` is left alone; it
executes every notebook again (``execute_notebooks: force``).

The test command is ``python3 tasks.py test`` on the existing ``.venv`` (warm): lint, unit tests,
the strict build, nbval on every notebook and the browser tests, as CI runs it; its target is
5 minutes. It runs twice: on the otherwise idle machine, then with one core kept busy by a busy
loop in another process, where it must still pass.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import yaml
from nbclient import NotebookClient

from benchmarks.common import ROOT, Table, cpu_sample, others_share, subprocess_env

NOTEBOOK_BUDGET_S = 60.0  # the hard limit of BOOK.md
NOTEBOOK_TARGET_S = 30.0  # what every chapter aims for, alone and inside the build
TEST_COMMAND_TARGET_S = 300.0
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")  # colours in tracebacks and logs
EXECUTED = re.compile(r"(\S+\.ipynb): Executed notebook in ([0-9.]+) seconds")
BUILD_ARGS = ("build", ".", "--all", "-W", "-n", "--keep-going")


def toc_files(toc: dict) -> list[str]:
    """Every ``file`` of a jb-book ``_toc.yml``: root first, then parts, chapters, sections."""
    files = [toc["root"]]

    def walk(items: list[dict]) -> None:
        for item in items:
            if "file" in item:
                files.append(item["file"])
            for key in ("parts", "chapters", "sections"):
                walk(item.get(key, []))

    walk([{key: toc.get(key, []) for key in ("parts", "chapters")}])
    return files


def toc_notebooks(root: Path = ROOT) -> list[Path]:
    """The notebooks that ``_toc.yml`` lists, in reading order (Markdown pages are skipped)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    paths = [root / f"{Path(entry).with_suffix('')}.ipynb" for entry in toc_files(toc)]
    return [path for path in paths if path.exists()]


def cell_timeout_s(root: Path = ROOT) -> int:
    """The per-cell limit of the book build (``execute.timeout`` in ``_config.yml``)."""
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    return int(config.get("execute", {}).get("timeout", 30))


def execute_notebook(path: Path, timeout: int | None = None) -> dict[str, object]:
    """Run one notebook in a fresh kernel; return its wall time and the error, if any."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=timeout or cell_timeout_s(),
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    error = None
    start = cpu_sample()
    try:
        client.execute(env=subprocess_env())
    except Exception as exc:  # a failing notebook is a result to report, not a crash
        lines = ANSI_ESCAPE.sub("", str(exc)).strip().splitlines()
        error = f"{type(exc).__name__}: {lines[-1] if lines else ''}"
    end = cpu_sample()
    return {"seconds": end.wall - start.wall, "error": error, "others": others_share(start, end)}


def build_book() -> dict[str, object]:
    """The strict full build into a temporary folder; its wall time, exit code and log tail."""
    candidate = Path(sys.executable).parent / "jupyter-book"
    jupyter_book = str(candidate) if candidate.exists() else "jupyter-book"
    with tempfile.TemporaryDirectory(prefix="vitbook-build-") as out:
        command = [jupyter_book, *BUILD_ARGS, "--path-output", out]
        start = cpu_sample()
        result = subprocess.run(
            command,
            cwd=ROOT,
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        end = cpu_sample()
    return {
        "seconds": end.wall - start.wall,
        "others": others_share(start, end),
        "returncode": result.returncode,
        "log_tail": ANSI_ESCAPE.sub("", "\n".join(result.stdout.splitlines()[-40:])),
        "notebook_seconds": executed_in_build(ANSI_ESCAPE.sub("", result.stdout)),
    }


def executed_in_build(log: str) -> dict[str, float]:
    """Per-notebook execution times from a build log (myst-nb's "Executed notebook in" lines)."""
    times = {}
    for path, seconds in EXECUTED.findall(log):
        notebook = (ROOT / path).resolve()  # the build runs in ROOT
        name = notebook.relative_to(ROOT).as_posix() if notebook.is_relative_to(ROOT) else path
        times[name] = float(seconds)
    return times


def run_test_command(busy_core: bool = False) -> dict[str, object]:
    """``python3 tasks.py test`` on the existing .venv: its wall time, exit code and summary.

    With ``busy_core``, another process spins on one core for the whole run (a Python busy
    loop), as when a CI runner shares its machine: the tests must still pass, only slower.
    """
    env = dict(os.environ)
    # As a user's shell would have it: tasks.py sets its own backend and thread counts.
    for name in ("MPLBACKEND", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.pop(name, None)
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy_core else None
    start = cpu_sample()
    try:
        result = subprocess.run(
            [sys.executable, str(ROOT / "tasks.py"), "test"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
    finally:
        if loop is not None:
            loop.kill()
            loop.wait()
    end = cpu_sample()
    log = ANSI_ESCAPE.sub("", result.stdout)
    passed = re.findall(r"(\d+) passed", log)
    return {
        "seconds": end.wall - start.wall,
        "others": others_share(start, end),
        "returncode": result.returncode,
        "passed": int(passed[-1]) if passed else None,
        "log_tail": "\n".join(log.splitlines()[-30:]),
    }


def run(quick: bool = False) -> list[Table]:
    """Time every notebook of the TOC, then the full strict book build, then the test command.

    With ``quick``, only the first notebook runs (to check the machinery): no build, no tests.
    """
    table = Table(
        key="budget",
        title=f"Book budget: notebooks in _toc.yml (target {NOTEBOOK_TARGET_S:.0f} s each, "
        f"limit {NOTEBOOK_BUDGET_S:.0f} s), the full build and the test command",
        columns=[
            "page", "alone s", "in build s", "target s", "within target", "status", "others' CPU",
        ],
        formats=["", ".1f", ".1f", ".0f", "", "", ".0%"],
    )  # fmt: skip
    paths = toc_notebooks()
    notebooks = {}
    for index, path in enumerate(paths):
        name = path.relative_to(ROOT).as_posix()
        if quick and index > 0:
            notebooks[name] = None
            continue
        notebooks[name] = execute_notebook(path)
    build = None if quick else build_book()
    tests = None if quick else run_test_command()
    busy_tests = None if quick else run_test_command(busy_core=True)
    in_build = build["notebook_seconds"] if build else {}
    for name, result in notebooks.items():
        if result is None:
            table.add(f"`{name}`", None, None, NOTEBOOK_TARGET_S, None, "skipped (--quick)", None)
            continue
        ok = result["error"] is None
        slowest = max(result["seconds"], in_build.get(name, 0.0))
        table.add(
            f"`{name}`",
            result["seconds"],
            in_build.get(name),
            NOTEBOOK_TARGET_S,
            slowest <= NOTEBOOK_TARGET_S if ok else None,
            "ran" if ok else f"FAILED: {result['error']}",
            result["others"],
        )
    label = "full book build (`jupyter-book " + " ".join(BUILD_ARGS) + "`)"
    if build is None:
        table.add(label, None, None, None, None, "skipped (--quick)", None)
    else:
        status = "built" if build["returncode"] == 0 else f"FAILED (exit {build['returncode']})"
        table.add(label, build["seconds"], None, None, None, status, build["others"])
        if build["returncode"] != 0:
            table.notes.append("The build failed; the end of its log is in the JSON report.")
    for label, result, target in (
        ("test command (`python3 tasks.py test`, warm .venv)", tests, TEST_COMMAND_TARGET_S),
        ("the same, one core kept busy by another process", busy_tests, None),
    ):
        if result is None:
            table.add(label, None, None, target, None, "skipped (--quick)", None)
            continue
        passed = result["returncode"] == 0
        status = (
            f"passed ({result['passed']} tests)"
            if passed
            else (f"FAILED (exit {result['returncode']})")
        )
        within = result["seconds"] <= target if passed and target else None
        table.add(label, result["seconds"], None, target, within, status, result["others"])
    table.notes += [
        "alone s: the notebook alone in a fresh python3 kernel (nbclient), kernel start to last "
        "cell, working directory = its folder. in build s: its execution time inside the full "
        "build, as Jupyter Book's executor logs it. Within target = both at most "
        f"{NOTEBOOK_TARGET_S:.0f} s (the hard limit is {NOTEBOOK_BUDGET_S:.0f} s; the book "
        "build's per-cell timeout is 120 s).",
        "The build runs into a temporary --path-output and executes every notebook again, so this "
        "section takes about twice the book's execution time.",
        "others' CPU = share of the machine's CPU time that other processes took meanwhile "
        "(these rows are not re-measured); in the last row it includes the busy loop, which "
        "alone is half of a 2-core machine. The test command has no target there: it must pass.",
    ]
    table.data = {
        "notebooks": notebooks,
        "build": build,
        "tests": tests,
        "tests_with_a_busy_core": busy_tests,
        "budget_s": NOTEBOOK_BUDGET_S,
        "target_s": NOTEBOOK_TARGET_S,
    }
    return [table]
