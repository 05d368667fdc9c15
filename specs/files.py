"""Files that several processes share: a lock, temporary files owned by a process, and
whether the process that left one behind is still running.

The lowest floor, so that every layer that writes shared files (the generators' output, the
exploration's Parquet parts, the simulator build cache) uses the same three rules.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created, with its directory, if missing)
    for the block; other processes asking for it wait."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def temporary_beside(path: Path) -> Path:
    """This process's temporary name for ``path``: ``.NAME.PID.tmp`` in the same directory,
    so that a rename puts it in place and :func:`remove_stale_temporaries` knows its owner."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def replace_atomically(path: Path, write: Callable[[Path], object]) -> Path:
    """Let ``write`` fill :func:`temporary_beside` ``path``, then rename it onto ``path``: a
    reader sees the previous file or the whole new one, never a part."""
    tmp = temporary_beside(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return Path(path)


def remove_stale_temporaries(directory: Path) -> None:
    """Remove the temporary files that processes killed while writing left in
    ``directory``."""
    for tmp in Path(directory).glob(".*.tmp"):
        pid = tmp.name.rsplit(".", 2)[-2]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            tmp.unlink(missing_ok=True)
