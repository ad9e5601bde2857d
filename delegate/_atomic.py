"""Atomic file replacement: write a temporary file beside the target, fsync it, rename it over.

A writer killed before the rename leaves its temporary file (``.NAME.PID.RANDOM.tmp``) and the
target untouched; ``remove_stale_temps`` deletes such leftovers on the next start (writer no
longer running, or the file older than an hour). Readers never look at temporary files.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

#: temporary files older than this are leftovers even when their writer's pid is in use again
STALE_AFTER_S = 3600.0
_TEMP = re.compile(r"^\..+\.(\d+)\.[^.]+\.tmp$")


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on directories; the rename itself is still atomic
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> Path:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never a mix.

    The data is fsynced before the rename and the folder after it, so after a crash or power
    loss the file is the complete old or the complete new version.
    """
    import tempfile  # here: it imports shutil and the compression modules, which a warm start never needs

    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, mode)  # mkstemp makes 0600
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)
    return target


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False  # gone (or a pid no process can have)
    except PermissionError:
        return True  # running, as another user
    return pid > 0


def remove_stale_temps(
    folder: str | os.PathLike[str],
    *,
    max_age_s: float = STALE_AFTER_S,
    on_error: Callable[[OSError], None] | None = None,
) -> int:
    """Delete temporary files ``atomic_write`` left in ``folder`` when its writer was killed.

    A temporary file is stale when the process that wrote it is gone or it is older than
    ``max_age_s``; files of writers still running are kept. Returns how many were removed. A
    folder that cannot be listed, or a leftover that cannot be removed (a read-only folder), is
    passed to ``on_error``, once; a folder that does not exist, or another user's leftover, is not
    an error.
    """
    removed = 0
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return 0
    except OSError as exc:
        if on_error is not None:
            on_error(exc)
        return 0
    for entry in entries:
        match = _TEMP.match(entry.name)
        if match is None or not entry.is_file(follow_symlinks=False):
            continue
        try:
            old = now - entry.stat(follow_symlinks=False).st_mtime > max_age_s
            if old or not _running(int(match.group(1))):
                os.unlink(entry.path)
                removed += 1
        except (FileNotFoundError, PermissionError):
            continue  # removed meanwhile, or another user's
        except OSError as exc:
            if on_error is not None:
                on_error(exc)
                on_error = None  # once per folder
    return removed
