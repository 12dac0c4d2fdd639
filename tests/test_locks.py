"""vitbook._files.hold, update_json and new_path: one writer at a time, tried with real processes.

Each race is run by two processes released at the same moment by a barrier, many times over, so
that a read-modify-write without a lock, or a name picked without a reservation, fails here.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

from vitbook import _files

pytestmark = pytest.mark.skipif(os.name == "nt", reason="fork and SIGKILL are POSIX")
ROUNDS = 30
CONTEXT = multiprocessing.get_context("fork")  # torch is not used in the children


def _run_pair(target, folder):
    barrier = CONTEXT.Barrier(2)
    workers = [CONTEXT.Process(target=target, args=(folder, who, barrier)) for who in (0, 1)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0, f"worker exited with {worker.exitcode}"


def _append_runs(folder, who, barrier):
    for round_ in range(ROUNDS):
        barrier.wait()
        path = folder / f"results-{round_}.json"
        _files.update_json(path, lambda data: {"runs": (data or {"runs": []})["runs"] + [who]},
                           remedy="")  # fmt: skip


def test_two_processes_appending_to_one_file_at_once_lose_no_run(tmp_path):
    _run_pair(_append_runs, tmp_path)
    for round_ in range(ROUNDS):
        runs = json.loads((tmp_path / f"results-{round_}.json").read_text())["runs"]
        assert sorted(runs) == [0, 1], f"round {round_}: {runs}"
    assert not list(tmp_path.glob(".*")), "a lock or temporary file was left behind"


def _new_names(folder, who, barrier):
    for round_ in range(ROUNDS):
        barrier.wait()
        name = _files.new_path(folder / str(round_), "cifar10").name
        (folder / str(round_) / f"picked-{who}").write_text(name)


def test_two_runs_started_in_the_same_second_get_two_default_names(tmp_path):
    for round_ in range(ROUNDS):
        (tmp_path / str(round_)).mkdir()
    _run_pair(_new_names, tmp_path)
    for round_ in range(ROUNDS):
        names = {(tmp_path / str(round_) / f"picked-{who}").read_text() for who in (0, 1)}
        assert len(names) == 2, f"round {round_}: both runs picked {names}"
        for name in names:  # reserved, yet the file itself is not there: a script sees no file
            assert not (tmp_path / str(round_) / name).exists()


def _hold_until_told(path, ready, release):
    with _files.hold(path):
        ready.set()
        release.wait(30)


def _holder_process(path):
    ready, release = CONTEXT.Event(), CONTEXT.Event()
    process = CONTEXT.Process(target=_hold_until_told, args=(path, ready, release))
    process.start()
    assert ready.wait(30), "the holder never took the lock"
    return process, release


def test_a_held_file_is_refused_naming_its_holder_and_a_killed_holder_blocks_nothing(tmp_path):
    path = tmp_path / "results.json"
    process, _ = _holder_process(path)
    try:
        with pytest.raises(_files.FileHeldError) as refused:
            with _files.hold(path):
                pass
        message = str(refused.value)
        assert str(path) in message and f"process {process.pid} on " in message
        assert "since 20" in message and " UTC" in message and "Wait for it to finish" in message
        assert os.path.basename(sys.argv[0]) in message  # the holder's command
        started = time.monotonic()
        with pytest.raises(_files.FileHeldError, match=r"in use after waiting 0\.3 s"):
            with _files.hold(path, wait=0.3):
                pass
        assert time.monotonic() - started >= 0.3
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.join(30)
    assert process.exitcode == -signal.SIGKILL
    assert _files.lock_path(path).exists()  # left by the killed process: it must not block
    started = time.monotonic()
    with _files.hold(path) as lock:
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert time.monotonic() - started < 1 and not lock.exists()


def test_a_waiting_writer_says_once_for_whom_it_waits_then_writes(tmp_path, capfd):
    path = tmp_path / "results.json"
    process, release = _holder_process(path)
    CONTEXT.Process(target=_release_later, args=(release,)).start()
    data = _files.update_json(path, lambda data: {"runs": [1]}, remedy="", wait=True)
    process.join(30)
    said = capfd.readouterr().err
    assert data == {"runs": [1]} and json.loads(path.read_text()) == data
    assert said.count("waiting for") == 1 and f"process {process.pid} on " in said


def _release_later(release):
    time.sleep(0.5)
    release.set()


def test_the_same_thread_may_hold_a_file_again_inside_its_block(tmp_path):
    path = tmp_path / "results.json"
    with _files.hold(path) as lock:
        with _files.hold(path):
            assert lock.exists()
        assert lock.exists()  # still held by the outer block
        _files.update_json(path, lambda data: {"runs": []}, remedy="")
    assert not lock.exists()


def test_a_reserved_name_is_freed_by_the_first_write_and_skipped_until_then(tmp_path):
    first = _files.new_path(tmp_path, "ladder")
    second = _files.new_path(tmp_path, "ladder")
    assert first != second and not first.exists() and not second.exists()
    _files.write_json(first, {"runs": []})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, f".{second.name}.new"])
    assert _files.new_path(tmp_path / "made" / "here", "x").parent.is_dir()


def test_a_run_that_exits_without_writing_leaves_no_reservation(tmp_path):
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('files', {str(_files.__file__)!r})\n"
        "files = importlib.util.module_from_spec(spec); spec.loader.exec_module(files)\n"
        f"print(files.new_path({str(tmp_path)!r}, 'cifar10').name)\n"
        "sys.exit(2)\n"  # a refused run
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout.startswith("cifar10-"), done.stderr
    assert not list(tmp_path.iterdir())
