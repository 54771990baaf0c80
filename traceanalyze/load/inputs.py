"""What a path given to traceanalyze is, decided once, from file heads, before any parse.

:func:`resolve` says whether a path is one trace, the ranks of one job (a rank folder) or a set
of variants compared side by side; ``load``, ``load_variants``, the CLI's loader, ``cold`` and
the engine all ask it, and this is the only module that lists a folder to decide. It reads no
more than the first chunk of each file (decompressed when it starts with the gzip magic): a
capture folder (``manifest.json``) is a variant set before any trace in it is parsed, and a
folder whose heads state the same rank twice is one before any is parsed either.

Some traces state their rank only after their events (older Kineto): a head that says nothing
leaves a folder a rank folder here, and loading confirms it once the traces are parsed
(:func:`traceanalyze.load.check_ranks`).
"""

from __future__ import annotations

import enum
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import msgspec

from capture.manifest import MANIFEST_FILE
from traceanalyze.errors import (
    EmptyTraceError,
    NotATraceError,
    TraceAnalyzeError,
    TraceReadError,
    path_error,
)
from traceanalyze.load.chunks import first_look
from traceanalyze.load.foreign import refuse_foreign
from traceanalyze.load.source import refuse_special
from traceanalyze.trace import Skipped

# The file a capture (python -m capture) writes beside its traces, as capture names it.
MANIFEST = MANIFEST_FILE
# Files of a folder known not to be traces, passed over without a warning.
KNOWN_NOT_TRACES = frozenset({MANIFEST})
TRACE_SUFFIXES = (".json", ".json.gz")


class InputKind(enum.StrEnum):
    """What a path holds."""

    TRACE = "trace"  # one trace file
    RANK_FOLDER = "rank_folder"  # a folder of the ranks of one job (or of one trace)
    VARIANT_SET = "variant_set"  # a capture folder, or a folder of separate traces


@dataclass(frozen=True)
class Input:
    """A path as :func:`resolve` found it.

    ``files``: the trace files, in name order (the path itself for a trace; for a capture
    folder, those found, though its manifest says which to load). ``skipped``: files of a
    folder that are not traces, each with why. ``manifest``: the capture manifest that
    describes the path (the folder's own, or the one beside a trace file), if any.
    ``ranks``: for a folder without a manifest, the rank each file's head states (None: the
    head does not say).
    """

    path: Path
    kind: InputKind
    files: tuple[Path, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    manifest: Path | None = None
    ranks: tuple[int | None, ...] = ()

    @property
    def ranks_known(self) -> bool:
        """Whether every file's head stated its rank (so no parse needs to confirm them)."""
        return all(rank is not None for rank in self.ranks)


def resolve(path: str | os.PathLike[str]) -> Input:
    """What ``path`` is: a trace file, a rank folder or a variant set (see :class:`Input`).

    A folder with no traces and no manifest is an :class:`EmptyTraceError` naming what was
    skipped; a
    missing path is a :class:`TraceReadError` unless its name is a trace's (loading it then
    says precisely what is wrong)."""
    source = Path(path)
    status = _status(source)
    if status is not None and stat.S_ISDIR(status.st_mode):
        return _folder(source)
    if status is None and not is_trace_name(source):
        raise TraceReadError("no such file or folder", source, "Check the path.")
    refuse_special(source)
    refuse_foreign(source)
    return Input(source, InputKind.TRACE, (source,), manifest=manifest_beside(source))


def _status(path: Path) -> os.stat_result | None:
    """``path``'s status; None when nothing is there (loading names the problem). A folder on
    its path that this user cannot search, or any other refusal (a name too long), is one error
    naming the path, not an OSError traceback."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except PermissionError:
        raise TraceReadError(
            "permission denied (a folder on its path cannot be searched)",
            path,
            "Make the folders on the path searchable for this user (chmod +x).",
        ) from None
    except OSError as exc:
        raise path_error(exc, path) from None


def manifest_beside(trace_file: Path) -> Path | None:
    """The capture manifest in the folder of ``trace_file``, if there is one."""
    manifest = trace_file.parent / MANIFEST
    return manifest if trace_file.is_file() and manifest.is_file() else None


def is_trace_name(path: Path) -> bool:
    return path.name.endswith(TRACE_SUFFIXES)


def _folder(folder: Path) -> Input:
    files, skipped, heads = _sort(folder)
    manifest = folder / MANIFEST
    if manifest.is_file():  # a capture: its traces are variants, whatever their heads say
        return Input(folder, InputKind.VARIANT_SET, tuple(files), tuple(skipped), manifest)
    if not files:
        raise no_traces(folder, skipped)
    ranks = tuple(_head_rank(head) for head in heads)
    stated = [rank for rank in ranks if rank is not None]
    kind = InputKind.RANK_FOLDER if len(stated) == len(set(stated)) else InputKind.VARIANT_SET
    return Input(folder, kind, tuple(files), tuple(skipped), ranks=ranks)


def listing(folder: Path) -> list[Path]:
    """The entries of ``folder``, sorted by name."""
    try:
        return sorted(folder.iterdir())
    except OSError as exc:
        raise TraceReadError(
            f"cannot list the folder ({exc.strerror})",
            folder,
            "Make the folder readable for this user, or pass the trace files.",
        ) from None


def candidates(folder: Path) -> list[Path]:
    """The visible files directly inside ``folder``, sorted by name."""
    return [
        p
        for p in listing(folder)
        if p.is_file() and not p.name.startswith(".") and p.name not in KNOWN_NOT_TRACES
    ]


def _sort(folder: Path) -> tuple[list[Path], list[Skipped], list[bytes | None]]:
    """The files of ``folder`` that look like traces (by their first chunk), with their
    heads, and those skipped, each with why."""
    skipped: list[Skipped] = []
    files: list[Path] = []
    heads: list[bytes | None] = []
    for path in candidates(folder):
        head, reason = _look(path)
        if reason is None:
            files.append(path)
            heads.append(head)
        else:
            skipped.append(Skipped(path, reason))
    return files, skipped, heads


def no_traces(folder: Path, skipped: list[Skipped]) -> EmptyTraceError:
    listed = "; ".join(f"{s.path.name}: {s.reason}" for s in skipped)
    # Folders are not searched: a folder of folders is not empty, and the fix names them.
    inner = [p.name for p in _subfolders(folder)]
    if inner:
        folders = "folders, not searched: " + ", ".join(f"{name}/" for name in inner[:5])
        listed = f"{listed}; {folders}" if listed else folders
        fix = f"Point at one of its folders (e.g. {folder / inner[0]}), or at a trace file."
    else:
        fix = "Point at the folder torch.profiler wrote, or at a trace file."
    return EmptyTraceError(f"the folder holds no traces ({listed or 'it is empty'})", folder, fix)


def _subfolders(folder: Path) -> list[Path]:
    return [p for p in listing(folder) if p.is_dir() and not p.name.startswith(".")]


def _look(path: Path) -> tuple[bytes | None, str | None]:
    """The head of ``path`` (see :func:`first_look`), and why it is not a trace (None: it
    may be one)."""
    try:
        refuse_foreign(path)
        return first_look(path), None
    except (NotATraceError, TraceReadError) as error:
        return None, reason_of(error, path)
    except TraceAnalyzeError:
        return None, None  # a damaged trace: loading it reports the problem
    except OSError as exc:
        return None, f"cannot be read ({os.strerror(exc.errno or 0)})"


class _Head(msgspec.Struct):
    distributedInfo: dict[str, object] = {}  # noqa: N815 (the trace's own key)


def _head_rank(head: bytes | None) -> int | None:
    """The rank a trace's head states in its distributedInfo (None: it states none there)."""
    if head is None:
        return None
    try:  # the head ends with the "[" of traceEvents: close the list and the object
        rank = msgspec.json.decode(head + b"]}", type=_Head).distributedInfo.get("rank")
    except (msgspec.MsgspecError, RecursionError):  # loading the file says what is wrong
        return None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def reason_of(error: TraceAnalyzeError, path: Path) -> str:
    """The error's message without the file name and the fix (the warning names the file)."""
    text = str(error).removeprefix(f"{path}: ")
    if error.fix:
        text = text.removesuffix(" " + error.fix.rstrip(".") + ".")
    return text.rstrip(".")
