#!/usr/bin/env python3
"""Set up, test and build vitbook with nothing but Python 3.11+ and pip.

    python3 tasks.py book   # set up (once), then build the HTML book into _build/html
    python3 tasks.py test   # ruff, then pytest: unit tests, doctests, book build, notebooks
    python3 tasks.py setup  # everything the two need: the environments and a headless Chromium
    python3 tasks.py colab  # Colab-ready copies of the chapters into _build/colab/book/
    python3 tasks.py bench  # benchmarks (not part of the tests), see benchmarks/README.md

Every command first creates or refreshes the virtual environment `.venv`, installing
`-r requirements.txt -c constraints.txt`; it reinstalls only when one of requirements.txt,
constraints.txt or pyproject.toml has changed. `book` needs nothing else. The browser tests need
a Chromium or Chrome: `test` finds one (on the PATH, in the usual places, or named by
$VITBOOK_BROWSER) and, without one, says how to get one; only `setup` installs one, Debian's
`chromium` through apt-get (and sudo where needed). Extra arguments after `test` go to pytest
(for example `python3 tasks.py test -m "not book"`).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / "vitbook-requirements.sha256"  # tests/test_project.py looks for this name
INPUTS = ("requirements.txt", "constraints.txt", "pyproject.toml")
# The classic Notebook with ipywidgets 7 for tests/test_frontends.py (see requirements-classic.txt).
CLASSIC_VENV = ROOT / ".venv-classic"
CLASSIC_PYTHON = CLASSIC_VENV / ("Scripts" if os.name == "nt" else "bin") / PYTHON.name
CLASSIC_STAMP = CLASSIC_VENV / "vitbook-classic.sha256"
CLASSIC_REQUIREMENTS = "requirements-classic.txt"
BOOK_INDEX = ROOT / "_build" / "html" / "index.html"
COLAB_DIR = ROOT / "_build" / "colab"


def say(message: str) -> None:
    print(f"[tasks] {message}", flush=True)


def run(*cmd: str | Path, env: dict[str, str] | None = None, log: Path | None = None) -> int:
    """Run a command from the repository root and return its exit code. Its output streams to
    this terminal, or with ``log`` goes to that file (for a command run beside another)."""
    say("$ " + " ".join(str(part) for part in cmd) + (f"  (output: {log.name})" if log else ""))
    if log is None:
        return subprocess.run([str(part) for part in cmd], cwd=ROOT, env=env).returncode
    with log.open("w") as out:
        return subprocess.run(
            [str(part) for part in cmd], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        ).returncode


BROWSER_VARIABLE = "VITBOOK_BROWSER"  # a Chromium or Chrome to use, named by its path
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable",
                 "chrome", "msedge")  # fmt: skip
BROWSER_PLACES = (  # where the installers put them, for a browser not on the PATH
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
    "/snap/bin/chromium",
    r"C:\Program Files\Google\Chrome\Application\chrome.exe",
    r"C:\Program Files (x86)\Google\Chrome\Application\chrome.exe",
    r"C:\Program Files (x86)\Microsoft\Edge\Application\msedge.exe",
)
HOW_TO_GET_A_BROWSER = """the browser tests need Chromium or Google Chrome, and none was found \
(not on the PATH as {names}, not in the usual places, and {variable} is not set). Install one:
  Debian, Ubuntu:  sudo apt-get install chromium     (or: python3 tasks.py setup)
  Fedora:          sudo dnf install chromium
  macOS:           brew install --cask chromium      (or install Google Chrome)
  Windows:         winget install Google.Chrome
or point {variable} at a Chromium or Chrome you have, e.g.
  {variable}=/path/to/chrome python3 tasks.py test"""


def find_browser() -> str | None:
    """The Chromium or Chrome that the browser tests drive: $VITBOOK_BROWSER, else the first of
    BROWSER_NAMES on the PATH, else the first of BROWSER_PLACES that exists; None without one.
    tests/booktools.py asks the same function, so the tests and this command agree."""
    chosen = os.environ.get(BROWSER_VARIABLE, "").strip()
    if chosen:
        found = shutil.which(chosen) or (chosen if Path(chosen).is_file() else None)
        if found is None:
            sys.exit(f"[tasks] {BROWSER_VARIABLE}={chosen} is not a file or a command; point it "
                     "at a Chromium or Chrome, or unset it.")  # fmt: skip
        return found
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return next((place for place in BROWSER_PLACES if Path(place).is_file()), None)


def ensure_browser(install: bool) -> None:
    """A headless-capable Chromium or Chrome for the browser tests of the HTML book.

    The tests (tests/test_browser.py and the playground tests) drive it with Playwright;
    Playwright's own browser download is never used. ``setup`` (``install``) installs Debian's
    ``chromium`` with apt-get, through sudo when not root, where there is apt-get and no browser
    yet; ``test`` installs nothing and, without a browser, says how to get one on each system.
    ``book`` needs no browser at all.
    """
    if find_browser():
        return
    message = HOW_TO_GET_A_BROWSER.format(names=", ".join(BROWSER_NAMES),
                                          variable=BROWSER_VARIABLE)  # fmt: skip
    apt = shutil.which("apt-get")
    if not install or apt is None:
        sys.exit(f"[tasks] {message}")
    sudo: list[str] = []
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        if shutil.which("sudo") is None:
            sys.exit("[tasks] `chromium` is missing: as root, run apt-get install -y chromium")
        sudo = ["sudo", "env", "DEBIAN_FRONTEND=noninteractive"]  # sudo drops the environment
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    say("no Chromium or Chrome found: installing Debian's chromium for the browser tests")
    installed = (
        run(*sudo, apt, "update", env=env) == 0
        and run(*sudo, apt, "install", "-y", "chromium", env=env) == 0
        and find_browser()
    )
    if not installed:
        sys.exit("[tasks] could not install chromium; run apt-get install -y chromium yourself")


def requirements_hash() -> str:
    digest = hashlib.sha256()
    for name in INPUTS:
        digest.update(name.encode() + b"\0" + (ROOT / name).read_bytes() + b"\0")
    return digest.hexdigest()


def create_venv(venv: Path, python: Path) -> None:
    if venv.is_symlink() and not venv.exists():  # venv would fail, and python3-venv be blamed
        sys.exit(f"[tasks] {venv.name} is a link to {os.readlink(venv)}, which does not exist; "
                 f"restore what it points to, or remove the link (rm {venv}) and run again to "
                 f"make a new {venv.name}.")  # fmt: skip
    if not python.exists():
        say(f"creating virtual environment {venv}")
        if run(sys.executable, "-m", "venv", venv) != 0:
            # Some Linux distributions ship Python without ensurepip: make the venv without pip,
            # then let this interpreter's pip put pip into it.
            say("venv without ensurepip; bootstrapping pip into it with this Python's pip")
            created = run(sys.executable, "-m", "venv", "--clear", "--without-pip", venv) == 0
            bootstrap = (sys.executable, "-m", "pip", "--python", python, "install", "pip")
            if not (created and run(*bootstrap) == 0):
                sys.exit(f"[tasks] could not create {venv.name}: install the python3-venv package")


def ensure_venv() -> None:
    """Create `.venv` if needed and install the locked requirements when they have changed."""
    create_venv(VENV, PYTHON)
    wanted = requirements_hash()
    if STAMP.exists() and STAMP.read_text().strip() == wanted:
        say(".venv is up to date")
        return
    say("installing requirements into .venv (exact versions from constraints.txt)")
    pip = (PYTHON, "-m", "pip", "install", "--disable-pip-version-check")
    if run(*pip, "-r", "requirements.txt", "-c", "constraints.txt") != 0:
        sys.exit("[tasks] pip install failed; .venv left as it is")
    STAMP.write_text(wanted + "\n")


def cpu_count() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def torch_pin() -> str:
    """The torch line of constraints.txt (the CPU build that the book is tested with)."""
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.split("==")[0].strip().lower() == "torch":
            return line.strip()
    sys.exit("[tasks] constraints.txt pins no torch")


CLASSIC_LOG = ROOT / ".venv-classic.log"


def ensure_classic_venv(log: Path | None = None) -> None:
    """Create `.venv-classic`, the classic Notebook with ipywidgets 7, for the front-end tests.

    It holds requirements-classic.txt (notebook 6.5.7, ipywidgets 7.7.1, widgetsnbextension
    3.6.10, vitbook itself) and the torch of constraints.txt, everything from PyPI; it is
    reinstalled only when that list, the torch pin or pyproject.toml change.
    """
    create_venv(CLASSIC_VENV, CLASSIC_PYTHON)
    pins = (ROOT / CLASSIC_REQUIREMENTS).read_text() + torch_pin() + "\n"
    pins += (ROOT / "pyproject.toml").read_text()
    wanted = hashlib.sha256(pins.encode()).hexdigest()
    if CLASSIC_STAMP.exists() and CLASSIC_STAMP.read_text().strip() == wanted:
        say(".venv-classic is up to date")
        return
    say("installing the classic Notebook with ipywidgets 7 into .venv-classic")
    pip = (CLASSIC_PYTHON, "-m", "pip", "install", "--disable-pip-version-check")
    if run(*pip, "-r", CLASSIC_REQUIREMENTS, torch_pin(), log=log) != 0:
        if log is not None:
            print("".join(log.read_text().splitlines(keepends=True)[-30:]), flush=True)
        sys.exit(
            "[tasks] pip install into .venv-classic failed (it needs PyPI, and the PyTorch CPU "
            "index for torch: PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu); delete "
            ".venv-classic and run python3 tasks.py test again"
        )
    CLASSIC_STAMP.write_text(wanted + "\n")


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them (empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def pair_kernel_caps(env: dict[str, str]) -> None:
    """Cap oneDNN below AMX when ATen is capped below AVX-512 on a CPU with AMX.

    ATEN_CPU_CAPABILITY=default (or avx2) gives the CPU kernels of an older machine, as
    CONTRIBUTING.md suggests for trying the book on another arithmetic. On a CPU with AMX, torch
    2.13's bf16 attention then fails ("pack_vnni2 is only supported when avx512 is supported":
    oneDNN still packs for AMX while ATen's AVX-512 code is switched off), a combination no real
    machine has. Capping oneDNN at AVX-512 with BF16 as well makes the pair consistent.
    """
    aten = env.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if aten in ("default", "avx2") and "ONEDNN_MAX_CPU_ISA" not in env:
        if "amx_tile" in cpu_flags():
            env["ONEDNN_MAX_CPU_ISA"] = "AVX512_CORE_BF16"
            say(f"ATEN_CPU_CAPABILITY={aten} on a CPU with AMX: "
                "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 as well (see pair_kernel_caps in tasks.py)")


def tool_env(threads: int | None = None) -> dict[str, str]:
    """The environment for every command: the venv first on PATH, unbuffered, few threads."""
    env = dict(os.environ)
    env.pop("PYTHONHOME", None)
    env["VIRTUAL_ENV"] = str(VENV)
    env["PATH"] = str(BIN) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    # The models here are toys. On an idle 2-core machine two threads train and run them faster
    # than one; with the other core busy, one thread is faster, by 1.2 to 6 times (the threads
    # section of benchmarks/run.py). So: two threads for the book build alone, one per process
    # when pytest runs a worker per core beside the build's kernels. Users may override each.
    threads = threads or max(1, min(2, cpu_count()))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(name, str(threads))
    pair_kernel_caps(env)
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # quiets a debugger warning in kernels
    # Builds and tests never download: the pretrained-ViT chapter then takes its offline path.
    # Set HF_HUB_OFFLINE=0 to build that chapter with the real model, downloaded once and cached.
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def pytest_workers(pytest_args: list[str]) -> list[str]:
    """pytest-xdist arguments: one worker per core (at most 4), unless the caller chose.

    `--dist loadgroup` keeps the tests that share the book build (xdist_group "book") on one
    worker, while the others (unit tests, nbval on each notebook) run beside it.
    """
    chosen = any(
        arg.startswith(("-n", "--numprocesses", "--dist")) or arg in ("-p", "no:xdist")
        for arg in pytest_args
    )
    workers = min(4, cpu_count())
    return [] if chosen or workers < 2 else ["-n", str(workers), "--dist", "loadgroup"]


def book() -> int:
    """Build the HTML book, re-executing every notebook (`--all`: pages reflect today's vitbook)."""
    env = tool_env()
    # Notebook kernels inherit this environment: with MPLBACKEND=Agg (common on headless servers)
    # they would draw no figures. book/_ext/figure_guard.py removes it too, and fails the build
    # on a figure cell without a picture.
    env.pop("MPLBACKEND", None)
    code = run(BIN / "jupyter-book", "build", ".", "--all", "-W", "-n", "--keep-going", env=env)
    if code != 0 or not BOOK_INDEX.exists():
        say(f"book build FAILED (exit code {code})")
        return code or 1
    say(f"book built: {BOOK_INDEX}")
    print(BOOK_INDEX, flush=True)
    return 0


def start_classic_venv() -> Callable[[], None]:
    """Set up `.venv-classic` in a thread, beside the set-up of `.venv` (each install waits on
    downloads and the disk as much as on a core, so together they take about the time of the
    longer one); return the function that waits for it and reports a failure. Its pip output
    goes to .venv-classic.log."""
    failure: list[str] = []

    def work() -> None:
        try:
            ensure_classic_venv(log=CLASSIC_LOG)
        except SystemExit as error:
            failure.append(str(error))

    thread = threading.Thread(target=work, name="venv-classic")
    thread.start()

    def wait() -> None:
        thread.join()
        if failure:  # the other tests still run; tests/test_frontends.py says why
            say(f"{failure[0]} (continuing: the classic-Notebook test will fail)")

    return wait


# pytest's options that take a value as the next argument: that value is not a test path
VALUE_OPTIONS = {"-k", "-m", "-p", "-n", "-o", "-c", "-r", "-W", "--deselect", "--ignore",
                 "--ignore-glob", "--rootdir", "--maxfail", "--dist", "--tb", "--durations",
                 "--numprocesses", "--basetemp", "--confcutdir", "--junit-xml", "--override-ini",
                 "--log-level", "--timeout"}  # fmt: skip


def missing_test_paths(pytest_args: list[str]) -> list[str]:
    """The test files and folders that ``pytest_args`` name but that do not exist (a path, or
    a path before ``::``); options and their values are not paths."""
    missing, after_option = [], False
    for arg in pytest_args:
        if after_option or arg.startswith("-"):
            after_option = arg in VALUE_OPTIONS
            continue
        path = arg.split("::", 1)[0]
        if not (ROOT / path).exists() and not Path(path).exists():
            missing.append(arg)
    return missing


def check_test_paths(pytest_args: list[str]) -> None:
    """Refuse, before any set-up, test paths that do not exist, naming them and what exists."""
    missing = missing_test_paths(pytest_args)
    if missing:
        files = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
        near = dict.fromkeys(m for arg in missing for m in difflib.get_close_matches(
            Path(arg.split("::", 1)[0]).name, files, n=3, cutoff=0.8))  # best first
        hint = f" (did you mean {', '.join(f'tests/{m}' for m in near)}?)" if near else ""
        sys.exit(f"[tasks] no such test file or folder: {', '.join(missing)}{hint}; name a "
                 "file of tests/ (ls tests), or leave the arguments out to run every test.")


def test(pytest_args: list[str], classic_ready: Callable[[], None]) -> int:
    """Lint, then run pytest: unit tests, doctests, the book build and every notebook."""
    ensure_browser(install=False)
    classic_ready()
    workers = pytest_workers(pytest_args)
    env = tool_env(threads=1 if workers else None)
    if workers:
        # A worker per core, beside the build's kernels and their frame workers: with more than
        # one thread per process the cores are oversubscribed and OpenMP's waiting threads slow
        # the tiny models down by several times (cells then run into their timeouts). So one
        # thread per process here, even where the shell asked for more.
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            if env[name] != "1":
                say(f"{name}={env[name]} -> 1 for the parallel test run (one thread per process)")
                env[name] = "1"
    # Agg for figures made inside pytest itself. Notebook kernels started by the book tests get
    # this variable removed, so that they keep Jupyter's inline backend and show their figures.
    env["MPLBACKEND"] = "Agg"
    env[BROWSER_VARIABLE] = find_browser() or ""  # the browser the tests drive, found once
    steps = {
        "ruff check": [BIN / "ruff", "check", "."],
        "pytest": [PYTHON, "-m", "pytest", *workers, *pytest_args],
    }
    results = {}
    for name, cmd in steps.items():
        start = time.monotonic()
        code = run(*cmd, env=env)
        if name == "pytest" and code == 5:
            say("pytest collected no tests: counted as a failure")
        results[name] = (code, time.monotonic() - start)
    say("summary")
    for name, (code, seconds) in results.items():
        verdict = "passed" if code == 0 else f"FAILED (exit code {code})"
        print(f"  {name:<12} {verdict:<24} {seconds:7.1f} s", flush=True)
    failed = [name for name, (code, _) in results.items() if code != 0]
    print(f"  {'all passed' if not failed else 'failed: ' + ', '.join(failed)}", flush=True)
    return 1 if failed else 0


def colab() -> int:
    """Write the Colab-ready copy of every chapter into _build/colab/book/ (plain Markdown)."""
    code = run(PYTHON, ROOT / "book" / "_ext" / "colab.py", COLAB_DIR, env=tool_env())
    if code == 0:
        say(f"Colab notebooks written to {COLAB_DIR / 'book'}")
    return code


def bench(bench_args: list[str]) -> int:
    """Run the benchmarks (not part of the tests): speed, machine limit, memory, book budget."""
    return run(PYTHON, ROOT / "benchmarks" / "run.py", *bench_args, env=tool_env())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["book", "test", "setup", "colab", "bench"])
    args, extra = parser.parse_known_args()
    if args.command in ("book", "setup", "colab") and extra:
        parser.error(f"unexpected arguments for {args.command}: {' '.join(extra)}")
    if sys.version_info < (3, 11):  # noqa: UP036 (the guard is for older interpreters)
        # The oldest Python that every pin of constraints.txt installs on (tests/test_project.py).
        sys.exit(f"[tasks] vitbook needs Python 3.11 or newer, not {sys.version.split()[0]}")
    os.chdir(ROOT)
    if args.command == "test":
        check_test_paths(extra)
    classic_ready = start_classic_venv() if args.command in ("test", "setup") else None
    try:
        ensure_venv()
    except SystemExit:
        if classic_ready is not None:
            classic_ready()
        raise
    if args.command == "setup":
        classic_ready()
        ensure_browser(install=True)
        say(f"set up: .venv, .venv-classic and a browser for the tests ({find_browser()}) are "
            "ready")  # fmt: skip
        return 0
    if args.command == "bench":
        return bench(extra)
    if args.command == "colab":
        return colab()
    if args.command == "book":
        return book()  # installs no system package: the book needs none
    return test(extra, classic_ready)


if __name__ == "__main__":
    sys.exit(main())
