"""Files that must not be lost: the shipped assets, checked paths, atomic writes, one writer.

Whatever reads or writes the book's recorded runs (``vitbook/assets``) goes through here:
:func:`check_output` before a run trains; :func:`write_with`, :func:`write_bytes` and
:func:`write_json` write atomically (a reader sees the old file or the new one); :func:`read_json`
and :func:`check_finite` read with errors that say what to do; :func:`hold` and
:func:`update_json` admit one writer at a time; :func:`new_path` names a fresh default output.

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
    """A file that another process holds (:func:`hold`); the message names both and the fix.

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

    Within one second later calls get ``-2``, ``-3``... The name is reserved (a hidden
    ``.NAME.new``, made with ``O_EXCL``) until :func:`write_with` writes it or the process exits;
    the file itself is not made.

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
    for path in _RESERVED:  # written (by any writer) or never: the name needs no reservation
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
    """Check, before a run trains, that it can write ``path``; make its folder if missing.

    Args:
        write_assets: allow a file in ``vitbook/assets``.
        flag: the script's flag that sets ``write_assets``, named in the error.
        exists_ok: allow an existing file; otherwise it is refused.

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

    The temporary file is new and empty, in ``path``'s folder; it is flushed (``fsync``) and moved
    with ``os.replace``. On any failure it is removed and ``path`` is left as it was; a full disk
    raises ``OSError(ENOSPC)`` naming ``path`` and ``size`` (bytes, when known).

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

    Raises:
        ValueError: a NaN or infinite float in ``data`` (JSON has none), with its place
            (``runs[3].accuracy``); nothing is written.

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
    """Refuse data read from ``path`` that :func:`write_json` could not write back (NaN, inf).

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
    """A results file as a dict; ``remedy`` (how to make it again) ends each error.

    Raises:
        FileNotFoundError: no file at ``path``.
        ResultsFileError: a folder, not UTF-8 JSON, nested too deep, or not a JSON object.

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
    """Hold ``path`` for this process alone while the ``with`` block runs; yields the lock file.

    The lock is the system's (``flock``; ``msvcrt.locking`` on Windows) on ``.NAME.lock``, which
    notes the holder (pid, host, command, since); it goes when the process ends, even killed. The
    same thread may hold a path again inside its block.

    Args:
        path: the file or folder to hold; it need not exist.
        wait: ``False`` refuses at once; ``True`` waits, saying so once on stderr; a number waits
            that many seconds.

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
            refused = FileHeldError(
                errno.EAGAIN,
                f"{path} is in use{waited}: {who} (lock file {lock}). Two writers at once "
                "would lose one's runs. Wait for it to finish, or write elsewhere; if that "
                "process is yours and stuck, stop it (kill PID): the system then releases "
                "the lock, so never delete the lock file by hand.",
            )
            refused.holder = who  # the holder in words, for a caller's own message
            raise refused
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
    """Read ``path``, let ``change`` make its new content, write it, all under :func:`hold`.

    ``change`` gets what the file holds now (``None`` if nothing) and returns what to write, which
    is returned.

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
