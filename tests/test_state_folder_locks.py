"""vitbook.studies.session.StateFolder with two processes at once: no session entry lost, no run
joined twice or lost to a raw error, and one session per folder; its refusals name what to do.

Each race runs two processes released at the same moment by a barrier, over 40 folders.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time

import pytest

from vitbook import _files
from vitbook.studies.session import StateFolder, StateMismatchError

pytestmark = pytest.mark.skipif(os.name == "nt", reason="fork and SIGKILL are POSIX")
FOLDERS = 40
SEEDS = 20  # finished runs per folder: enough for the two joins to overlap
CONTEXT = multiprocessing.get_context("fork")  # torch is not used in the children
IDENTITY = {"data_sha256": "ab" * 32, "code_version": "0123", "model": "photo ViT"}


def _folders(tmp_path) -> list[StateFolder]:
    folders = [StateFolder(tmp_path / f"state{i}") for i in range(FOLDERS)]
    for folder in folders:
        folder.claim(IDENTITY)
    return folders


def _run_pair(target, folders):
    barrier = CONTEXT.Barrier(2)
    errors = CONTEXT.Queue()
    workers = [CONTEXT.Process(target=_guarded, args=(target, folders, who, barrier, errors))
               for who in (0, 1)]  # fmt: skip
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    raised = [errors.get() for _ in range(errors.qsize())] if not errors.empty() else []
    assert not raised, raised
    assert [worker.exitcode for worker in workers] == [0, 0]


def _guarded(target, folders, who, barrier, errors):
    try:
        target(folders, who, barrier)
    except BaseException as error:  # reported to the test, which names it
        barrier.abort()  # the other worker stops waiting for this one
        errors.put(f"worker {who}: {type(error).__name__}: {error}")
        raise


def _sessions(folders, who, barrier):
    for folder in folders:
        barrier.wait()
        index = folder.begin_session({"worker": who})
        barrier.wait()
        folder.end_session(index, ended=who)


def test_two_sessions_beginning_and_ending_at_once_lose_no_entry(tmp_path):
    folders = _folders(tmp_path)
    _run_pair(_sessions, folders)
    for folder in folders:
        provenance = folder.results()["provenance"]
        assert sorted((s["worker"], s.get("ended")) for s in provenance) == [(0, 0), (1, 1)], (
            f"{folder.root}: {provenance}"
        )
        assert [s["session"] for s in provenance] == [0, 1]


def _joins(folders, who, barrier):
    jitter = random.Random(who)
    for folder in folders:
        barrier.wait()
        time.sleep(jitter.random() * 0.004)  # so that one join may begin as the other ends
        folder.join_finished()


def test_two_processes_joining_at_once_join_every_run_once_and_raise_nothing(tmp_path):
    folders = _folders(tmp_path)
    for folder in folders:
        for seed in range(SEEDS):
            run = {"row": "vit-50", "seed": seed, "epochs": 50, "recipe": {}}
            _files.write_json(folder.path("vit-50", seed, ".done.json"), run)
    _run_pair(_joins, folders)
    for folder in folders:
        seeds = [run["seed"] for run in folder.results()["runs"]]
        assert sorted(seeds) == list(range(SEEDS)), f"{folder.root}: joined {seeds}"
        assert not list(folder.runs.glob("*.done.json"))


def _hold_session(folder, ready, release):
    with folder.session_lock():
        ready.set()
        release.wait(30)


def test_a_second_session_on_a_folder_is_refused_naming_the_first(tmp_path):
    folder = StateFolder(tmp_path / "state")
    ready, release = CONTEXT.Event(), CONTEXT.Event()
    first = CONTEXT.Process(target=_hold_session, args=(folder, ready, release))
    first.start()
    try:
        assert ready.wait(30)
        with pytest.raises(_files.FileHeldError) as refused:
            with StateFolder(tmp_path / "state").session_lock():
                pass
        message = str(refused.value)
        assert f"another session records into the state folder {folder.root}: process " \
               f"{first.pid} on " in message  # fmt: skip
        assert "since 20" in message and "give --state another folder" in message
        # the lock file is the folder's own, not a foreign file: a run process still claims it
        assert folder.claim(IDENTITY) is True
        assert folder.begin_session({"gpu": "none"}) == 0
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.join(30)
    with folder.session_lock():  # the killed session's lock blocks nothing
        assert folder.claim(IDENTITY) is False
    assert not (folder.root / ".session.lock").exists()


def test_ending_a_session_that_does_not_exist_names_those_that_do(tmp_path):
    folder = StateFolder(tmp_path)
    folder.claim(IDENTITY)
    with pytest.raises(ValueError, match=r"end_session\(5\): .*results\.json holds no session"):
        folder.end_session(5)
    for _ in range(3):
        folder.begin_session({})
    for index in (5, -1, True, "1"):
        with pytest.raises(ValueError, match=r"holds sessions 0 to 2; end the index that "):
            folder.end_session(index, minutes=1.0)
    assert all("minutes" not in s for s in folder.results()["provenance"])


def test_a_finished_run_holding_nan_is_refused_naming_its_own_file(tmp_path):
    folder = StateFolder(tmp_path)
    folder.claim(IDENTITY)
    done = folder.path("vit-50", 0, ".done.json")
    done.write_text('{"row": "vit-50", "seed": 0, "epochs": 50, "test_accuracy": NaN}')
    with pytest.raises(StateMismatchError) as refused:
        folder.join_finished()
    message = str(refused.value)
    assert message.startswith(f"{done} holds nan at test_accuracy") and "Nothing joined" in message
    assert done.exists() and folder.results()["runs"] == []
    assert json.loads(done.read_text().replace("NaN", "null"))["seed"] == 0
