"""Helpers for the book tests: where things are, how to read the TOC, how to start kernels, and
how a test run executes each notebook once.

**One execution per notebook and test run.** nbval runs every notebook of the TOC
(:func:`execute_notebook`), and the plugin ``tests/nbval_outputs.py`` writes each executed
notebook, outputs and all, into a copy of the book's sources (``_build/source``), whose
``_config.yml`` differs from the book's in one line: the notebooks are not executed again. The
test run's strict build reads that copy (``tests/conftest.py``). Under pytest-xdist every
notebook has a lock: whichever worker needs a notebook first (its nbval test, or the build)
executes it, and the other waits for it and reuses it. ``python3 tasks.py book`` still builds
from the sources, executing every notebook.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from filelock import FileLock, Timeout

ROOT = Path(__file__).resolve().parents[1]
BUILD_DIR = ROOT / "_build"
HTML_DIR = BUILD_DIR / "html"
BUILD_LOG = BUILD_DIR / "book-build.log"
BUILD_RUN = BUILD_DIR / "book-build.run"  # which test run built _build/html, and its exit code
# The executed copy of the book's sources that the test run builds (see the module docstring).
SOURCE_DIR = BUILD_DIR / "source"
BUILD_COMMAND = (
    "jupyter-book", "build", str(SOURCE_DIR.relative_to(ROOT)), "--path-output", ".",
    "--all", "-W", "-n", "--keep-going",
)  # fmt: skip
CELL_TIMEOUT_S = 120  # the same per-cell limit as execute.timeout in _config.yml
LOG_TAIL_LINES = 80
# What the browser test saw (pages, figures, controls moved, requests refused), for the summary
# that tests/conftest.py prints at the end of the run.
BROWSER_SUMMARY = pytest.StashKey[dict]()
# Headless Chromium for the browser tests: Debian's `chromium` (never `playwright install`), no
# sandbox (tests may run as root), and nothing that would reach for the network on its own.
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
)
# How the classic Notebook inserts an HTML output (jQuery's .html()): the markup first, then each
# inline script evaluated from a temporary <script> in <head>, so that document.currentScript is
# not inside the output. A page defines it with <script>{INSERT_LIKE_JQUERY}</script>.
INSERT_LIKE_JQUERY = """window.insertLikeJQuery = function (id, html) {
  var target = document.getElementById(id);
  target.innerHTML = html;
  var scripts = target.querySelectorAll("script");
  for (var i = 0; i < scripts.length; i++) {
    var type = scripts[i].getAttribute("type");
    if (type && type !== "text/javascript") continue;
    var script = document.createElement("script");
    script.text = scripts[i].textContent;
    document.head.appendChild(script).parentNode.removeChild(script);
  }
};"""


@functools.cache
def _tasks():
    """tasks.py, the set-up commands, as a module (it is a script, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("vitbook_tasks", ROOT / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def browser_path() -> str:
    """The Chromium or Chrome the browser tests drive: the one ``tasks.py`` finds
    (``$VITBOOK_BROWSER``, the PATH, the usual places); the test fails saying how to get one."""
    tasks = _tasks()
    found = tasks.find_browser()
    if found is None:
        pytest.fail(tasks.HOW_TO_GET_A_BROWSER.format(names=", ".join(tasks.BROWSER_NAMES),
                                                      variable=tasks.BROWSER_VARIABLE),
                    pytrace=False)  # fmt: skip
    return found


def venv_executable(name: str) -> str:
    """The console script `name` installed beside the running Python (the venv's own copy)."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


def kernel_env() -> dict[str, str]:
    """The environment for subprocesses that start notebook kernels.

    The venv comes first on PATH. MPLBACKEND is removed: the test command sets it to Agg for
    pytest itself, but a kernel that inherits it would draw no figures into the notebook.
    """
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")  # no downloads at test time (see tasks.py)
    return env


def tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


def read_yaml(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text(encoding="utf-8"))


def toc_entries(toc: dict) -> list[str]:
    """Every `file` of a jb-book `_toc.yml`, root first, in reading order, without suffix."""
    entries = [toc["root"]]

    def walk(items: list[dict]) -> None:
        for item in items:
            if "file" in item:
                entries.append(item["file"])
            for key in ("parts", "chapters", "sections"):
                walk(item.get(key, []))

    walk([{key: toc.get(key, []) for key in ("parts", "chapters")}])
    return entries


PAGE_SUFFIXES = (".ipynb", ".md")


def source_files(entry: str) -> list[Path]:
    """The source files that a TOC entry may name (one, when the book is consistent)."""
    return [
        ROOT / f"{entry}{suffix}"
        for suffix in PAGE_SUFFIXES
        if (ROOT / f"{entry}{suffix}").exists()
    ]


def book_sources() -> list[Path]:
    """Every page source under book/, checkpoints aside."""
    return sorted(
        path
        for suffix in PAGE_SUFFIXES
        for path in (ROOT / "book").rglob(f"*{suffix}")
        if ".ipynb_checkpoints" not in path.parts
    )


def toc_notebooks() -> list[Path]:
    """The notebooks listed in _toc.yml, in reading order."""
    entries = toc_entries(read_yaml("_toc.yml"))
    return [ROOT / f"{entry}.ipynb" for entry in entries if (ROOT / f"{entry}.ipynb").exists()]


def explorer_frames(html: str) -> tuple[dict[str, tuple[str, ...]], str]:
    """The pictures of every frame of a static figure by key (one ``data:`` URI per piece of
    the figure, vitbook.widgets._panels), and the key of the frame shown first."""
    stored = json.loads(
        re.search(r'<script type="application/json" class="vbx-frames">(.*?)</script>', html)[1]
    )
    first = re.search(r'<div class="vitbook-explorer" data-key="([\d,]*)"', html)[1]
    assert stored["first"] == first, "the figure starts at the default frame"
    shown = re.findall(r'<img class="vbx-piece" data-piece="(\d+)" src="([^"]+)"', html)
    assert [int(k) for k, _ in shown] == list(range(len(stored["pieces"]))), "one <img> a piece"
    pieces = [list(variants) for variants in stored["pieces"]]
    for (k, src), variant in zip(shown, stored["frames"][first], strict=True):
        assert pieces[int(k)][variant] is None, "the first frame's pictures are stored once"
        pieces[int(k)][variant] = src
    return {
        key: tuple(pieces[k][variant] for k, variant in enumerate(chosen))
        for key, chosen in stored["frames"].items()
    }, first


# --- a second machine's arithmetic for the notebooks ------------------------------------------

# torch picks CPU kernels by instruction set (ATen's own, oneDNN's, MKL's BLAS), and the thread
# count changes the order of sums: the same seeded chapter gives other last bits on another CPU,
# and live training amplifies them. `python3 tasks.py book` runs the notebooks with this machine's
# own kernels; the test run's nbval executes them as an older or different machine would, so
# that the two commands together always cover two arithmetics. Each profile caps the three
# libraries together (capping ATen alone below AVX-512 on a CPU with AMX makes torch 2.13's bf16
# attention fail in oneDNN's packing, a limitation of the emulation that no real machine has).
NUMERICS_VARIABLE = "VITBOOK_NOTEBOOK_NUMERICS"  # "native", or "NAME=VALUE NAME=VALUE ..."
KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
# (what the profile needs from the CPU, ATen, oneDNN, MKL; None: left as it is). The first that
# the CPU can run and that changes ATen's kernels (and oneDNN's or MKL's, where it caps them)
# wins. On an AVX2 machine only ATen's kernels and the threads change: capping oneDNN and MKL
# below AVX2 (to AVX, without fused multiply-add) doubles the notebooks' time.
X86_PROFILES = (
    ("avx512", "default", "AVX2", "AVX2"),  # an AVX2 machine with ATen's portable kernels
    ("avx512", "avx2", "AVX512_CORE", "AVX512"),  # AVX-512 without BF16 or AMX, ATen's AVX2
    ("avx2", "default", None, None),  # ATen's portable kernels, the BLAS as it is
    ("avx2", "avx2", None, None),  # for a reader who capped ATen to its portable kernels
)
# Ranks of the instruction sets that oneDNN and MKL may be capped to; a cap above what the CPU
# has changes nothing. Names not listed (AVX512_CORE_AMX, say) rank above AVX-512.
_ONEDNN_RANK = {"SSE41": 0, "AVX": 1, "AVX2": 2, "AVX512_CORE": 3}
_MKL_RANK = {"SSE4_2": 0, "AVX": 1, "AVX2": 2, "AVX512": 3}


def _probe(env: dict[str, str]) -> dict:
    """What torch sees in a process with ``env``: ATen's capability and the CPU's features."""
    return dict(_probe_once(env.get("ATEN_CPU_CAPABILITY"), env.get("PATH", "")))


@functools.cache
def _probe_once(aten: str | None, path: str) -> tuple:
    env = {"PATH": path, **({"ATEN_CPU_CAPABILITY": aten} if aten is not None else {})}
    code = (
        "import json, platform, torch\n"
        "cpu = torch.cpu\n"
        "has = lambda name: bool(getattr(cpu, name, lambda: False)())\n"
        "print(json.dumps({'capability': torch.backends.cpu.get_cpu_capability().lower(),"
        " 'machine': platform.machine().lower(), 'avx2': has('_is_avx2_supported'),"
        " 'avx512': has('_is_avx512_supported'),"
        " 'beyond': has('_is_avx512_bf16_supported') or has('_is_amx_tile_supported')}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return tuple(json.loads(result.stdout).items())


def foreign_numerics(env: dict[str, str] | None = None) -> dict[str, str]:
    """The variables under which the test run executes the notebooks: CPU kernels that differ
    from the ones ``env`` (default: this process's environment) gets, and one thread where the
    book build uses two (two where it uses one).

    The first profile of ``X86_PROFILES`` that the CPU can run and that changes ATen's kernels
    (and oneDNN's or MKL's, where it caps them) wins. ``VITBOOK_NOTEBOOK_NUMERICS=native``
    keeps the environment's own kernels (to tell a failure of the arithmetic from another);
    ``VITBOOK_NOTEBOOK_NUMERICS="ATEN_CPU_CAPABILITY=avx2 ..."`` names the variables outright.
    """
    env = dict(os.environ if env is None else env)
    chosen = env.get(NUMERICS_VARIABLE, "").strip()
    if chosen == "native":
        return {}
    if chosen:
        pairs = [item.partition("=") for item in chosen.split()]
        if any(not name or not sep for name, sep, _ in pairs):
            raise ValueError(
                f"{NUMERICS_VARIABLE}={chosen!r}: write 'native' or NAME=VALUE pairs separated "
                "by spaces, e.g. 'ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=AVX2'."
            )
        return {name: value for name, _, value in pairs}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = {name: "1" if (cores or 1) > 1 else "2"
               for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}  # fmt: skip
    seen = _probe(env)
    if seen["machine"] not in ("x86_64", "amd64"):
        other = {"ATEN_CPU_CAPABILITY": "default"} if seen["capability"] != "default" else {}
        return threads | other
    top = 4 if seen["beyond"] else 3 if seen["avx512"] else 2 if seen["avx2"] else 1

    def onednn(name: str) -> int:  # the rank a cap gives on this CPU
        return min(_ONEDNN_RANK.get(name.upper(), 4), top)

    def mkl(name: str) -> int:
        return min(_MKL_RANK.get(name.upper(), 4), top, 3)

    onednn_now = onednn(env.get("ONEDNN_MAX_CPU_ISA", "native"))
    mkl_now = mkl(env.get("MKL_ENABLE_INSTRUCTIONS", "native"))
    for needs, aten, onednn_cap, mkl_cap in X86_PROFILES:
        if not seen[needs] or aten == seen["capability"]:
            continue
        caps = {"ONEDNN_MAX_CPU_ISA": onednn_cap, "MKL_ENABLE_INSTRUCTIONS": mkl_cap}
        if onednn_cap is None or onednn(onednn_cap) != onednn_now or mkl(mkl_cap) != mkl_now:
            if onednn_cap is None and seen["beyond"] and "ONEDNN_MAX_CPU_ISA" not in env:
                caps["ONEDNN_MAX_CPU_ISA"] = "AVX512_CORE_BF16"  # no AMX beside a capped ATen
            chosen = {"ATEN_CPU_CAPABILITY": aten, **caps}
            return threads | {name: value for name, value in chosen.items() if value is not None}
    return threads


def describe_numerics(variables: dict[str, str]) -> str:
    """One line for the test summary: the variables the notebooks ran under."""
    if not variables:
        return "this machine's own kernels and threads"
    return " ".join(f"{name}={value}" for name, value in sorted(variables.items()))


# --- executing the notebooks, once per test run ----------------------------------------------


def run_id() -> str:
    """This test run, the same in every pytest-xdist worker."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"


@dataclass(frozen=True)
class Execution:
    """One nbval run of one notebook: its exit code, its output, and the executed notebook."""

    notebook: Path
    returncode: int
    log: str
    executed: Path


def execute_notebook(notebook: Path, *, wait: bool = True) -> Execution | None:
    """Run ``notebook`` (a page of the book) under nbval, once per test run, and keep it executed.

    nbval (``--nbval-lax``) runs every cell in a kernel of this environment and fails on an
    error or a cell over the time limit; its outputs are written into the executed copy of the
    sources, at the notebook's place under ``SOURCE_DIR``. A second call in the same test run,
    in any worker, returns the first one's result; while another worker runs the notebook, the
    call waits for it (or, with ``wait=False``, returns None at once).

    The kernels get ``MPLBACKEND=Agg``, as a headless CI runner may set it: the chapters must
    show their figures all the same (``use_book_style`` selects the inline backend), and the
    strict build checks that every figure cell holds a picture (book/_ext/figure_guard.py).
    """
    name = notebook.relative_to(ROOT).as_posix()
    executed = SOURCE_DIR / name
    stamp = executed.with_name(executed.name + ".run")
    BUILD_DIR.mkdir(exist_ok=True)
    lock = FileLock(BUILD_DIR / f"execute-{name.replace('/', '--')}.lock")
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        return None
    try:
        if stamp.exists():
            run, code, log = stamp.read_text(encoding="utf-8").split("\n", 2)
            if run == run_id():
                return Execution(notebook, int(code), log, executed)
        executed.unlink(missing_ok=True)
        command = [
            sys.executable, "-m", "pytest", name,
            "--nbval-lax", "--nbval-current-env", f"--nbval-cell-timeout={CELL_TIMEOUT_S}",
            "-p", "no:cacheprovider", "-p", "nbval_outputs", "-q",
        ]  # fmt: skip
        # The package under test first (an installed copy may belong to another checkout), then
        # the plugin that keeps the outputs.
        path = os.pathsep.join(
            p for p in (str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH")) if p
        )
        env = {
            **kernel_env(),
            **foreign_numerics(),  # another machine's arithmetic than `tasks.py book`'s
            "MPLBACKEND": "Agg",
            "PYTHONPATH": path,
            "VITBOOK_EXECUTED_NOTEBOOK": str(executed),
        }
        result = subprocess.run(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, check=False,
        )  # fmt: skip
        code = result.returncode if executed.exists() or result.returncode else 1
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(f"{run_id()}\n{code}\n{result.stdout}", encoding="utf-8")
        return Execution(notebook, code, result.stdout, executed)
    finally:
        lock.release()


def execute_every_notebook(notebooks: list[Path]) -> list[Execution]:
    """:func:`execute_notebook` for each notebook: first those no other worker is running, from
    the last (another worker running nbval's tests goes from the first), then the others."""
    done = {}
    for notebook in reversed(notebooks):
        execution = execute_notebook(notebook, wait=False)
        if execution is not None:
            done[notebook] = execution
    for notebook in notebooks:
        if notebook not in done:
            done[notebook] = execute_notebook(notebook)
    return [done[notebook] for notebook in notebooks]


def prepare_sources() -> None:
    """Copy what the book is built from into ``SOURCE_DIR``, beside the executed notebooks:
    ``_toc.yml``, everything in ``book/`` but the notebooks, and ``_config.yml`` with the
    notebooks' execution turned off (the one difference from the book's own build)."""
    config = (ROOT / "_config.yml").read_text(encoding="utf-8")
    if config.count("execute_notebooks: force") != 1:
        raise RuntimeError("_config.yml must say `execute_notebooks: force` once (execute:)")
    SOURCE_DIR.mkdir(parents=True, exist_ok=True)
    (SOURCE_DIR / "_config.yml").write_text(
        config.replace("execute_notebooks: force", 'execute_notebooks: "off"'), encoding="utf-8"
    )
    shutil.copy2(ROOT / "_toc.yml", SOURCE_DIR / "_toc.yml")
    for path in (ROOT / "book").rglob("*"):
        if path.is_file() and path.suffix != ".ipynb" and "__pycache__" not in path.parts:
            target = SOURCE_DIR / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
