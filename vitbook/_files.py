"""Files that must not be lost: one place for the shipped assets, checked paths, atomic writes.

The book's recorded results (``vitbook/assets``: the photo ladder, the digits experiments, the
transfer miniature, the shipped models) are real runs that took hours. Every script and module
that writes or reads them goes through this module, so that nothing recorded is lost by a
careless command:

- :data:`ASSETS` is the folder of the shipped files, named once.
- :func:`check_output` checks a results path *before* any training or test read: its folder
  exists or can be made, it is not a folder, it is writable, and it is not a shipped file unless
  the caller says so explicitly (``write_assets=True``, a script's ``--write-assets`` flag).
- :func:`write_json`, :func:`write_bytes` and :func:`write_with` write a temporary file in the
  same folder, flush it to the disk (``fsync``) and move it into place with ``os.replace``: a
  reader sees the old file or the new one, never half a file, and a failed write (a full disk,
  say) leaves the old file as it was and no temporary file behind.
- :func:`read_json` reads a results file with errors that name it and say what to do;
  :func:`check_finite` refuses, before a run trains, a file it could not write back (a NaN).
- :func:`hold` takes a file for one writer at a time (an OS lock on ``.NAME.lock`` beside it,
  released by the system when its process ends, even killed); :func:`update_json` reads,
  changes and writes a results file under it, so two runs on one file lose no run.
  :func:`new_path` reserves the name it returns, so two runs started in the same second never
  share a default output.

See chapter: Real photos.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import errno
import json
import math
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

if os.name == "nt":  # pragma: no cover - the tests run on POSIX
    import msvcrt
else:
    import fcntl

__all__ = [
    "ASSETS",
    "FileHeldError",
    "ResultsFileError",
    "ShippedFileError",
    "check_finite",
    "check_output",
    "hold",
    "is_shipped",
    "lock_path",
    "new_path",
    "read_json",
    "update_json",
    "write_bytes",
    "write_json",
    "write_with",
]

ASSETS = Path(__file__).parent / "assets"


class ResultsFileError(ValueError):
    """A results file that exists but cannot be read as results; the message names it.

    See chapter: Real photos.
    """


class FileHeldError(OSError):
    """A file that another process holds (:func:`hold`); the message names the file, that
    process (pid, host, command, since when) and what to do.

    See chapter: Real photos.
    """


class ShippedFileError(ValueError):
    """A write onto a file that ships with vitbook, without the explicit flag that allows it.

    See chapter: Real photos.
    """


def is_shipped(path: str | os.PathLike) -> bool:
    """Whether ``path`` lies in ``vitbook/assets``, the results and models the book ships.

    Example:
        >>> is_shipped(ASSETS / "cifar10_results.json"), is_shipped("runs/ladder.json")
        (True, False)

    See chapter: Real photos.
    """
    resolved = Path(path).expanduser().resolve()
    return resolved == ASSETS.resolve() or ASSETS.resolve() in resolved.parents


def new_path(folder: str | os.PathLike, stem: str, suffix: str = ".json") -> Path:
    """A file name in ``folder`` that does not exist yet: ``stem-YYYYmmddTHHMMSSZ.suffix``.

    A later run gets another name (``-2``, ``-3``... within the same second), so a script's
    default output never replaces an earlier one. The name is reserved atomically (a hidden
    ``.NAME.new`` made with ``O_EXCL``), so two runs started in the same second get two names;
    the file itself is not made. The reservation goes when :func:`write_with` writes the file,
    or when the process exits without writing it.

    Example:
        >>> import tempfile
        >>> path = new_path(tempfile.mkdtemp(), "ladder")
        >>> path.name.startswith("ladder-") and path.suffix == ".json" and not path.exists()
        True
        >>> write_json(path, {}); sorted(p.name for p in path.parent.iterdir()) == [path.name]
        True

    See chapter: Real photos.
    """
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        made = True
    except OSError:
        made = False
    count = 1
    while True:
        path = folder / f"{stem}-{stamp}{f'-{count}' if count > 1 else ''}{suffix}"
        count += 1
        if path.exists():
            continue
        if not made:
            return path
        try:
            handle = os.open(_reservation(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            continue
        except OSError:  # an unwritable folder: check_output names it
            return path
        os.write(handle, f"{os.getpid()}\n".encode())
        os.close(handle)
        if not _RESERVED:
            atexit.register(_unreserve)
        _RESERVED.append(path)
        return path


_RESERVED: list[Path] = []  # names this process reserved, freed at exit if never written


def _unreserve() -> None:
    for path in _RESERVED:
        if not path.exists():
            _reservation(path).unlink(missing_ok=True)


def _reservation(path: Path) -> Path:
    """The hidden file that reserves a name :func:`new_path` gave out."""
    return path.with_name(f".{path.name}.new")


def check_output(
    path: str | os.PathLike,
    *,
    write_assets: bool = False,
    flag: str = "--write-assets",
    exists_ok: bool = True,
) -> Path:
    """Check that a run can write ``path``, before it trains: a run must not end unable to save.

    Makes the folder if it is missing, then writes and removes a temporary file there, which
    proves that it is writable (permissions, a read-only or full file system).

    Args:
        path: the file a script will write.
        write_assets: allow a file in ``vitbook/assets`` (the files the book ships).
        flag: the script's flag that sets ``write_assets``, named in the error.
        exists_ok: allow an existing file (which the caller then appends to or checks);
            otherwise an existing file is refused.

    Returns:
        ``path`` as a ``Path``.

    Raises:
        TypeError: ``path`` is not a path.
        ShippedFileError: a shipped file without ``write_assets``.
        ValueError: ``path`` is a folder, or its folder cannot be made.
        FileExistsError: an existing file with ``exists_ok=False``.
        PermissionError: the folder or the file is not writable.

    Example:
        >>> import tempfile
        >>> out = check_output(Path(tempfile.mkdtemp()) / "new" / "ladder.json")
        >>> out.parent.is_dir(), out.exists()
        (True, False)

    See chapter: Real photos.
    """
    if not isinstance(path, str | os.PathLike) or not str(path):
        raise TypeError(f"the output must be a file path, got {path!r}.")
    path = Path(path).expanduser()
    if is_shipped(path) and not write_assets:
        raise ShippedFileError(
            f"{path} ships with vitbook (vitbook/assets): a run does not write it unless told "
            f"with {flag}. Write elsewhere (leave the output at its default, a new file), or "
            f"pass {flag} to record onto the shipped file."
        )
    if path.is_dir():
        raise ValueError(f"{path} is a folder; name a file in it, e.g. {path / 'results.json'}.")
    if path.exists() and not exists_ok:
        raise FileExistsError(f"{path} exists and this run does not replace it; choose a new path.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as error:
        raise ValueError(f"the folder of {path} is a file ({error.filename}); choose a path "
                         "whose folder is a folder.") from error  # fmt: skip
    except OSError as error:
        raise PermissionError(f"cannot make the folder {path.parent} ({error}); choose a "
                              "writable place.") from error  # fmt: skip
    try:
        handle, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".probe")
    except OSError as error:
        raise PermissionError(
            f"cannot write in {path.parent} ({error}); choose a writable place for {path.name}."
        ) from error
    os.close(handle)
    os.unlink(probe)
    if path.exists() and not os.access(path, os.W_OK):
        raise PermissionError(f"{path} is not writable; make it writable or choose a new path.")
    return path


def _size(count: int) -> str:
    """``27 bytes``, ``2.9 KiB``, ``41.3 MiB``..."""
    if count < 1024:
        return f"{count} bytes"
    value, unit = count / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"


def write_with(
    path: str | os.PathLike, write: Callable[[Path], object], *, size: int | None = None
) -> None:
    """Let ``write(temporary)`` write a file beside ``path``, then move it into place atomically.

    ``write`` gets the path of a new, empty temporary file in ``path``'s folder (a writer that
    refuses to replace foreign files needs its ``overwrite`` flag); the file is then flushed to
    the disk (``fsync``) and moved onto ``path`` with ``os.replace``. On any failure (a full disk,
    an interrupt) the temporary file is removed and an existing ``path`` is left as it was.
    A full disk (``ENOSPC``) is an ``OSError`` of that errno whose message names ``path``, how
    much was to be written (``size``, in bytes, when known; else what the writer had written)
    and what to do.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "note.txt"
        >>> write_with(path, lambda temporary: temporary.write_text("kept"))
        >>> path.read_text(), sorted(p.name for p in path.parent.iterdir())
        ('kept', ['note.txt'])

    See chapter: Real photos.
    """
    path = Path(path)
    if path.exists():  # keep the file's permissions; a new file gets the usual ones
        mode = path.stat().st_mode & 0o777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    temporary = Path(name)
    try:
        write(temporary)
        os.chmod(temporary, mode)  # mkstemp makes a file readable by its owner only
        handle = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)
        os.replace(temporary, path)
        _reservation(path).unlink(missing_ok=True)  # the name is taken by the file now
    except BaseException as error:
        written = temporary.stat().st_size if temporary.exists() else 0
        temporary.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            what = (f"{_size(size)} to write" if size is not None
                    else f"{_size(written)} written when the disk filled")  # fmt: skip
            raise OSError(
                errno.ENOSPC,
                f"{error.strerror or 'No space left on device'}: writing {path} ({what}) failed; "
                f"{path.name} is as it was and no temporary file is left. Free space on that "
                f"disk (df -h {path.parent}) or write elsewhere, then run the command again.",
            ) from error
        raise
    try:  # make the rename itself durable; not every file system lets a folder be opened
        folder = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(folder)
    except OSError:
        pass
    finally:
        os.close(folder)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`write_with`).

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "note.bin"
        >>> write_bytes(path, b"kept")
        >>> path.read_bytes()
        b'kept'

    See chapter: Real photos.
    """
    write_with(path, lambda temporary: temporary.write_bytes(data), size=len(data))


def write_json(path: str | os.PathLike, data: object) -> None:
    """Write ``data`` as indented JSON to ``path``, atomically (see :func:`write_with`).

    JSON has no NaN or infinity: Python's ``json`` would write the literals ``NaN`` and
    ``Infinity``, which other readers (a browser, ``jq``, pandas' strict mode) refuse. Such a
    number is refused before anything is written, named by where it is in ``data``, and an
    existing file is left as it was.

    Raises:
        ValueError: a NaN or infinite float in ``data``, with its place (``runs[3].accuracy``).

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "results.json"
        >>> write_json(path, {"runs": []})
        >>> read_json(path, remedy="")
        {'runs': []}

    See chapter: Real photos.
    """
    try:
        text = json.dumps(data, indent=1, allow_nan=False)
    except ValueError as error:
        if "JSON compliant" not in str(error):
            raise
        where, value = _first_non_finite(data) or ("a number", math.nan)
        raise ValueError(
            f"{value} at {where} cannot be written to {path}: JSON has no NaN or infinity (a "
            "run that diverged, or a number never measured). Write None (null) there and say "
            "why beside it, or leave the entry out; nothing was written."
        ) from error
    write_bytes(path, (text + "\n").encode("utf-8"))


def check_finite(path: str | os.PathLike, data: object, *, remedy: str) -> None:
    """Refuse data read from ``path`` that :func:`write_json` could not write back: a NaN or an
    infinity, which an older ``write_json`` wrote as the literal ``NaN``. A script checks the
    file it appends to before it trains, so that a trained run is never left without a file.

    Raises:
        ResultsFileError: the first such number, with its place (``runs[3].accuracy``).

    Example:
        >>> try:
        ...     check_finite("old.json", {"runs": [{"loss": float("nan")}]}, remedy="")
        ... except ResultsFileError as error:
        ...     print(str(error).split(":")[0])
        old.json holds nan at runs[0].loss

    See chapter: Real photos.
    """
    found = _first_non_finite(data)
    if found is not None:
        raise ResultsFileError(
            f"{path} holds {found[1]} at {found[0]}: JSON has no NaN or infinity (an older "
            "write_json wrote the literal), so the file could not be written again once this "
            "run has trained. Nothing trained. Write null there (a run that diverged has no "
            f"number; say why beside it), or {remedy}"
        )


def _first_non_finite(data: object, where: str = "") -> tuple[str, float] | None:
    """The place (``runs[3].accuracy``) and value of the first NaN or infinity in ``data``."""
    if isinstance(data, float):
        return None if math.isfinite(data) else (where or "the top", data)
    if isinstance(data, dict):
        items = [(f"{where}.{key}" if where else str(key), value) for key, value in data.items()]
    elif isinstance(data, list | tuple):
        items = [(f"{where}[{i}]", value) for i, value in enumerate(data)]
    else:
        return None
    for place, value in items:
        if found := _first_non_finite(value, place):
            return found
    return None


def read_json(path: str | os.PathLike, *, remedy: str) -> dict:
    """A results file as a dict, with errors that name the file and say what to do.

    Args:
        path: the file.
        remedy: how to make the file again, appended to the errors (a script's command).

    Raises:
        FileNotFoundError: no file at ``path``.
        ResultsFileError: a folder, a file that is not UTF-8 JSON (damaged or truncated), JSON
            nested too deep to read, or JSON that is not an object.

    Example:
        >>> import tempfile
        >>> broken = Path(tempfile.mkdtemp()) / "results.json"
        >>> _ = broken.write_text('{"runs": [')
        >>> try:
        ...     read_json(broken, remedy="record it again")
        ... except ResultsFileError as error:
        ...     print(str(error).split(":")[0].endswith("results.json is not valid JSON"))
        True

    See chapter: Real photos.
    """
    path = Path(path)
    if path.is_dir():
        raise ResultsFileError(f"{path} is a folder, not a results file; pass the file in it.")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; {remedy}")
    restore = f"restore it (git checkout -- {path}) or {remedy}" if is_shipped(path) else remedy
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ResultsFileError(
            f"{path} is not valid JSON: {error}. The file is damaged or was cut short; {restore}"
        ) from error
    except RecursionError as error:  # thousands of nested brackets: no results file nests so
        raise ResultsFileError(
            f"{path} nests deeper than a results file does (JSON's reader gave up: {error}); "
            f"it is not a results file; {restore}"
        ) from error
    if not isinstance(data, dict):
        raise ResultsFileError(
            f"{path} holds a JSON {type(data).__name__}, not the object of a results file; "
            f"{restore}"
        )
    return data


# --- one writer at a time ------------------------------------------------------------------------

_HELD: dict[tuple[str, int], int] = {}  # (lock file, thread) -> depth: a thread may re-enter


def lock_path(path: str | os.PathLike) -> Path:
    """The lock file of ``path`` for :func:`hold`: ``.NAME.lock`` beside it."""
    path = Path(path).expanduser()
    return path.with_name(f".{path.name}.lock")


def _try_lock(handle: int) -> bool:
    """Take the OS's exclusive lock on an open file without waiting; whether it was taken."""
    try:
        if os.name == "nt":  # pragma: no cover - a byte far past the holder's note
            os.lseek(handle, 1 << 30, os.SEEK_SET)
            msvcrt.locking(handle, msvcrt.LK_NBLCK, 1)
        else:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK, errno.EDEADLK):
            return False
        raise
    return True


def _holder(lock: Path) -> str:
    """Who holds ``lock``, in words, from the note its holder wrote into it."""
    try:
        note = json.loads(lock.read_text(encoding="utf-8"))
        return (f"process {note['pid']} on {note['host']} ({note['command']}), holding it "
                f"since {note['since']}")  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not yet written who it is (it is starting)"


@contextlib.contextmanager
def hold(path: str | os.PathLike, *, wait: bool | float = False) -> Iterator[Path]:
    """Hold ``path`` for this process alone while the ``with`` block runs.

    Takes the system's exclusive lock (``flock``; ``msvcrt.locking`` on Windows) on
    ``.NAME.lock`` beside ``path`` and writes into it who holds it (pid, host, command, since).
    The system releases it when the process ends, even killed, so a dead holder never blocks.
    The same thread may hold a path again inside its block; a process forked while holding
    shares the lock until it ends.

    Args:
        path: the file (or folder) to hold; it need not exist.
        wait: ``False`` refuses at once if another process holds it; ``True`` waits as long as
            it takes, saying once on stderr for whom; a number waits that many seconds.

    Raises:
        FileHeldError: another process holds ``path`` (and ``wait`` ran out), naming it.

    Example:
        >>> import tempfile
        >>> results = Path(tempfile.mkdtemp()) / "results.json"
        >>> with hold(results) as lock:
        ...     json.loads(lock.read_text())["pid"] == os.getpid()
        True

    See chapter: Real photos.
    """
    lock = lock_path(path)
    key = (str(lock.resolve()), threading.get_ident())  # only this thread touches its key
    handle = None if _HELD.get(key) else _acquire(lock, path, wait)
    _HELD[key] = _HELD.get(key, 0) + 1
    try:
        yield lock
    finally:
        _HELD[key] -= 1
        if handle is not None:
            del _HELD[key]
            if os.name != "nt":  # removed while locked: a waiter that opened it sees it go
                lock.unlink(missing_ok=True)
            os.close(handle)  # releases the lock


def _acquire(lock: Path, path: str | os.PathLike, wait: bool | float) -> int:
    """Open and lock ``lock`` as ``wait`` says; the handle, the holder's note written in it."""
    deadline = None if wait is True else time.monotonic() + (0.0 if wait is False else wait)
    said = False
    while True:
        try:
            handle = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError as error:
            raise FileNotFoundError(f"cannot lock {path}: its folder {lock.parent} does not "
                                    "exist; make it first.") from error  # fmt: skip
        if _try_lock(handle):
            with contextlib.suppress(FileNotFoundError):  # a holder removes it before unlocking
                if os.name == "nt" or os.stat(lock).st_ino == os.fstat(handle).st_ino:
                    break
            os.close(handle)
            continue
        os.close(handle)
        who = _holder(lock)
        if deadline is not None and time.monotonic() >= deadline:
            waited = "" if wait is False else f" after waiting {wait} s"
            raise FileHeldError(
                errno.EAGAIN,
                f"{path} is in use{waited}: {who} (lock file {lock}). Two writers at once "
                "would lose one's runs. Wait for it to finish, or write elsewhere; if that "
                "process is yours and stuck, stop it (kill PID): the system then releases "
                "the lock, so never delete the lock file by hand.",
            )
        if not said:
            said = print(f"waiting for {path}: {who}", file=sys.stderr, flush=True) or True
        time.sleep(0.02)
    since = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    note = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv),
            "since": since}  # fmt: skip
    os.ftruncate(handle, 0)
    os.lseek(handle, 0, os.SEEK_SET)
    os.write(handle, (json.dumps(note) + "\n").encode())
    return handle


def update_json(path: str | os.PathLike, change: Callable[[dict | None], dict], *, remedy: str,
                wait: bool | float = True) -> dict:  # fmt: skip
    """Read ``path``, let ``change`` make its new content, write it: all under :func:`hold`.

    ``change`` gets what the file holds *now* (``None`` if nothing yet), including what another
    run wrote meanwhile, and returns what to write, which is also returned.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "results.json"
        >>> def add(run):
        ...     return lambda data: {"runs": (data or {"runs": []})["runs"] + [run]}
        >>> _ = update_json(path, add(1), remedy=""); update_json(path, add(2), remedy="")
        {'runs': [1, 2]}

    See chapter: Real photos.
    """
    with hold(path, wait=wait):
        data = read_json(path, remedy=remedy) if Path(path).exists() else None
        new = change(data)
        write_json(path, new)
    return new
