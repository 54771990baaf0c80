"""Files written whole or not at all: every output file (``-o``, the charts beside it, an
annotated trace) is written under a temporary name in the target's folder and renamed onto the
target once complete, so a crash, a Ctrl-C or a full disk leaves the file that was there (or
none), never half a file in its place. A temporary file left by a process killed mid-write
(``kill -9``: no cleanup runs) is removed by the next write to the same target once it is an
hour old (a younger one may be another writer's, still at work). (Cache entries are whole
folders renamed into place the same way: :mod:`traceanalyze.load.cache`.)"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

# The temporary file's name: hidden, beside the target, unique to this write.
_TEMPORARY = ".{name}.{token}.tmp"
_TOKEN_HEX = 12
# A temporary file untouched this long was left by a writer that died (as the cache's staging).
_ABANDONED_S = 3600.0


@contextlib.contextmanager
def replacing(target: Path) -> Iterator[BinaryIO]:
    """A binary file to write that becomes ``target`` when the block ends without an
    exception (flushed to disk first); on any exception, KeyboardInterrupt included, the
    temporary file is removed and ``target`` is left as it was. A new file gets the mode a
    plain ``open`` would give it (0666 less the umask); a replaced one keeps its own."""
    _remove_abandoned(target)
    file, temporary = _create_beside(target)
    try:
        with file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temporary, os.stat(target).st_mode & 0o7777)
        os.replace(temporary, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def write_bytes(target: Path, data: bytes) -> None:
    """``target.write_bytes(data)``, whole or not at all."""
    with replacing(target) as file:
        file.write(data)


def write_text(target: Path, text: str) -> None:
    """``target.write_text(text)`` (UTF-8), whole or not at all."""
    write_bytes(target, text.encode())


def _create_beside(target: Path) -> tuple[BinaryIO, Path]:
    """A new, empty file in ``target``'s folder under a name no one else uses, open for
    writing (``O_EXCL``: never another writer's file)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        temporary = target.with_name(
            _TEMPORARY.format(name=target.name, token=secrets.token_hex(_TOKEN_HEX // 2))
        )
        try:
            handle = os.open(temporary, flags, 0o666)  # the umask applies, as for open()
        except FileExistsError:
            continue
        except OSError as exc:  # named as the target: the temporary name is ours, not the user's
            raise type(exc)(exc.errno, exc.strerror, str(target)) from None
        return os.fdopen(handle, "wb"), temporary


def _remove_abandoned(target: Path) -> None:
    """Remove the temporary files of earlier writes to ``target`` (our naming only) that are
    older than _ABANDONED_S: left by a process killed while it wrote."""
    ours = re.compile(rf"\.{re.escape(target.name)}\.[0-9a-f]{{{_TOKEN_HEX}}}\.tmp")
    oldest = time.time() - _ABANDONED_S
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return  # a folder that cannot be listed: the write itself says why
    for entry in entries:
        if not ours.fullmatch(entry.name):
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to remove
            if entry.stat(follow_symlinks=False).st_mtime < oldest:
                os.unlink(entry.path)
