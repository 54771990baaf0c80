"""Issue 41's paths and outputs: every system refusal of an input or output path is one line
naming the path, the system's reason and the fix; other tools' files (Nsight Systems reports,
SQLite exports) are named as such; corrupt gzip is told from truncated gzip; -o's suffix says
the format (Parquet included, an unknown suffix refused) and a folder is written inside by
`report` only."""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner, Result

import traceanalyze
from traceanalyze.cli import main
from traceanalyze.errors import NotATraceError, TraceFormatError, TraceReadError

REPO = Path(__file__).resolve().parents[1]
NAIVE = REPO / "sample_traces" / "h200_default" / "naive.json.gz"
CAPTURE = REPO / "sample_traces" / "h200_graph_replay"
LONG = "a" * 300  # longer than any file system's 255 bytes per name
_ERROR = "traceanalyze: error: "


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def one_error_line(result: Result, status: int) -> str:
    assert result.exit_code == status, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line]
    assert len(lines) == 1, result.stderr
    return lines[0]


# --- inputs and outputs the system refuses --------------------------------------------------


def test_a_trace_name_too_long_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / f"{LONG}.json.gz"
    line = one_error_line(run("summary", str(path)), 1)
    assert line.startswith(f"{_ERROR}{path}: cannot be read (File name too long). ")
    assert "shorter name" in line


def test_the_library_raises_its_own_error_for_a_name_too_long(tmp_path: Path) -> None:
    with pytest.raises(TraceReadError, match="File name too long") as caught:
        traceanalyze.load(tmp_path / f"{LONG}.json")
    assert caught.value.path == tmp_path / f"{LONG}.json"
    with pytest.raises(TraceReadError, match="File name too long"):
        traceanalyze.summary(tmp_path / f"{LONG}.json.gz")


@pytest.mark.parametrize("suffix", [".md", ".csv", ".parquet"])
def test_an_output_name_too_long_is_one_line(tmp_path: Path, suffix: str) -> None:
    target = tmp_path / f"{LONG}{suffix}"
    line = one_error_line(run("kernels", str(NAIVE), "-o", str(target)), 1)
    assert line.startswith(f"{_ERROR}cannot write {target}: File name too long.")
    assert "shorter name" in line


# Paths the file system itself refuses, made for real: (how to make the path, errno text).
_REFUSED: dict[str, tuple[Callable[[Path], Path], str]] = {
    "name too long": (lambda d: d / f"{LONG}.json", os.strerror(errno.ENAMETOOLONG)),
    "through a file": (lambda d: _file(d) / "x.json", os.strerror(errno.ENOTDIR)),
    "symbolic link loop": (lambda d: _loop(d) / "x.json", os.strerror(errno.ELOOP)),
}


def _file(folder: Path) -> Path:
    (folder / "plain").write_text("a file, not a folder")
    return folder / "plain"


def _loop(folder: Path) -> Path:
    (folder / "loop").symlink_to(folder / "loop")
    return folder / "loop"


@pytest.mark.parametrize("case", list(_REFUSED))
@pytest.mark.parametrize("side", ["input", "output"])
def test_every_path_the_system_refuses_is_one_line(tmp_path: Path, case: str, side: str) -> None:
    make, reason = _REFUSED[case]
    path = make(tmp_path)
    args = ["summary", str(path)] if side == "input" else ["kernels", str(NAIVE), "-o", str(path)]
    line = one_error_line(run(*args), 1)
    assert str(path) in line and reason in line, line
    assert line.rstrip(".").count(". ") >= 1  # the reason, then the fix
    if side == "input":
        with pytest.raises(TraceReadError, match=re.escape(reason)):
            traceanalyze.load(path)


# Errors no test can provoke for real (a failing disk, a full one): raised where the file is
# opened, each must still be one line with the system's words and a fix.
_INJECTED = [errno.EIO, errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EDQUOT, errno.EMFILE]


@pytest.mark.parametrize("number", _INJECTED, ids=errno.errorcode.get)
def test_an_injected_os_error_on_an_output_is_one_line(
    tmp_path: Path, number: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def failing(path: Any, flags: int, *args: Any) -> int:
        if str(path).startswith(str(tmp_path)):
            raise OSError(number, os.strerror(number), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", failing)
    target = tmp_path / "k.csv"
    line = one_error_line(run("kernels", str(NAIVE), "-o", str(target)), 1)
    assert line.startswith(f"{_ERROR}cannot write {target}: {os.strerror(number)}. "), line
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("number", _INJECTED, ids=errno.errorcode.get)
def test_an_injected_os_error_on_an_input_is_one_line(
    tmp_path: Path, number: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(NAIVE.read_bytes())
    real_open = Path.open

    def failing(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == trace:
            raise OSError(number, os.strerror(number), str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", failing)
    monkeypatch.setenv("TRACEANALYZE_CACHE_DIR", str(tmp_path / "cache"))
    line = one_error_line(run("summary", str(trace), "--no-cache"), 1)
    assert line.startswith(f"{_ERROR}{trace}: "), line
    assert os.strerror(number).lower() in line.lower(), line
    with pytest.raises(TraceReadError, match=f"(?i){re.escape(os.strerror(number))}"):
        traceanalyze.load(trace, cache=False)


def test_an_input_folder_without_permission_is_one_line(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "t.json.gz").write_bytes(NAIVE.read_bytes())
    locked.chmod(0)
    try:
        if (locked / "t.json.gz").exists():  # running as a user the mode does not stop
            pytest.skip("permissions do not apply to this user")
        line = one_error_line(run("summary", str(locked / "t.json.gz")), 1)
    finally:
        locked.chmod(0o755)
    assert "Permission denied" in line or "permission denied" in line
    assert str(locked / "t.json.gz") in line


# --- other tools' files ---------------------------------------------------------------------

SQLITE_HEAD = b"SQLite format 3\x00" + bytes(84)


@pytest.mark.parametrize(
    ("name", "content", "what"),
    [
        ("report.nsys-rep", b"\x00\x01binary Nsight report", "an Nsight Systems report"),
        ("old.qdrep", b"\x00binary", "an Nsight Systems report"),
        ("report.sqlite", SQLITE_HEAD, "an SQLite database"),
        ("export.db.json", SQLITE_HEAD, "an SQLite database"),  # by content, whatever its name
        ("kernels.ncu-rep", b"\x00binary", "an Nsight Compute report"),
    ],
)
def test_other_tools_files_are_named_with_what_to_export(
    tmp_path: Path, name: str, content: bytes, what: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    line = one_error_line(run("summary", str(path)), 1)
    assert line.startswith(f"{_ERROR}{path}: is {what}")
    assert "not a PyTorch profiler trace" in line and "export_chrome_trace" in line
    with pytest.raises(NotATraceError, match=what):
        traceanalyze.load(path)


def test_a_trace_with_an_odd_name_is_still_read(tmp_path: Path) -> None:
    renamed = tmp_path / "run.nsys-rep.json.gz"
    renamed.write_bytes(NAIVE.read_bytes())
    assert traceanalyze.load(renamed).gpu.height


def test_an_nsight_report_in_a_folder_is_skipped_with_its_name(tmp_path: Path) -> None:
    (tmp_path / "naive.json.gz").write_bytes(NAIVE.read_bytes())
    (tmp_path / "profile.nsys-rep").write_bytes(b"\x00binary")
    result = run("summary", str(tmp_path), "--format", "json")
    assert result.exit_code == 0, result.output
    assert "skipped" in result.stderr and "an Nsight Systems report" in result.stderr


# --- corrupt against truncated gzip ---------------------------------------------------------

PACKED = NAIVE.read_bytes()


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"\x1f\x8b\x08\x00garbage", "corrupt gzip"),  # a header no gzip writer wrote
        # Cut-off gzip of something else: what it holds is named (not JSON), not the cut.
        (gzip.compress(bytes(range(256)) * 40)[:3000], "not valid JSON"),
        (PACKED[: len(PACKED) // 2], "truncated"),  # a trace cut off
        (PACKED[:10], "truncated"),  # a sound header, then nothing
    ],
    ids=["bad_header", "not_json_inside", "half", "header_only"],
)
def test_corrupt_gzip_is_told_from_truncated_gzip(
    tmp_path: Path, content: bytes, words: str
) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(content)
    with pytest.raises(TraceFormatError) as caught:
        traceanalyze.load(path, cache=False)
    assert words in str(caught.value)
    assert ("truncated" in str(caught.value)) == (words == "truncated")


def test_gzip_cut_in_its_trailer_loads_with_the_cut_noted(tmp_path: Path) -> None:
    # The checksum and size missing after whole JSON: main's loader (issue 40's audit) loads
    # it and notes the cut; neither corrupt nor an error.
    path = tmp_path / "t.json.gz"
    path.write_bytes(PACKED[:-8])
    trace = traceanalyze.load(path, cache=False)
    [meta] = trace.meta
    assert meta.gzip_cut["missing_bytes"] == 8


# --- -o: the format from the suffix, folders ------------------------------------------------


def test_parquet_output_is_the_table_with_its_schema(tmp_path: Path) -> None:
    target = tmp_path / "k.parquet"
    result = run("kernels", str(NAIVE), "-o", str(target))
    assert result.exit_code == 0, result.output
    frame = pl.read_parquet(target)
    assert frame.schema == traceanalyze.kernels(NAIVE).schema
    assert frame.equals(traceanalyze.kernels(NAIVE))


def test_parquet_needs_a_file(tmp_path: Path) -> None:
    line = one_error_line(run("kernels", str(NAIVE), "--format", "parquet"), 2)
    assert "binary format" in line and "-o FILE.parquet" in line


@pytest.mark.parametrize("name", ["k.xlsx", "k.txt", "kernels"])
def test_an_unknown_suffix_is_a_usage_error(tmp_path: Path, name: str) -> None:
    target = tmp_path / name
    line = one_error_line(run("kernels", str(NAIVE), "-o", str(target)), 2)
    assert ".md, .json, .csv or .parquet" in line
    assert not target.exists()
    # --format does not make it one: a sheet would open a .xlsx of CSV text as damaged.
    one_error_line(run("kernels", str(NAIVE), "-o", str(target), "--format", "csv"), 2)
    assert not target.exists()


@pytest.mark.parametrize("trailing", ["/", ""])
def test_a_folder_is_refused_where_one_file_is_written(tmp_path: Path, trailing: str) -> None:
    folder = tmp_path / "out"
    if not trailing:
        folder.mkdir()  # an existing folder, named without the slash
    line = one_error_line(run("kernels", str(NAIVE), "-o", f"{folder}{trailing}"), 2)
    assert "is a folder; name a file" in line
    assert not (tmp_path / "out").is_file()


@pytest.mark.parametrize("existing", [False, True])
def test_report_writes_inside_a_folder(tmp_path: Path, existing: bool) -> None:
    folder = tmp_path / "rep"
    if existing:
        folder.mkdir()
    given = str(folder) if existing else f"{folder}/"
    result = run("report", str(CAPTURE), "-o", given)
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in folder.iterdir())
    assert written[0] == "report.md"
    assert all(name.startswith("report_") and name.endswith(".png") for name in written[1:])
    assert len(written) > 1
    assert not (tmp_path / "rep.md").exists()


def test_csv_and_json_of_one_table_of_a_nested_answer() -> None:
    csv = run("idle", str(NAIVE), "--table", "largest_gaps", "--format", "csv")
    assert csv.exit_code == 0, csv.output
    gaps = pl.read_csv(io.StringIO(csv.stdout))
    assert gaps.columns[:3] == ["iteration", "device", "stream"]
    rows = json.loads(run("idle", str(NAIVE), "--table", "largest_gaps", "--format", "json").stdout)
    assert len(rows) == gaps.height
    whole = json.loads(run("idle", str(NAIVE), "--format", "json").stdout)
    assert whole["largest_gaps"] == rows


def test_help_lists_every_command_on_one_line_that_fits() -> None:
    from traceanalyze.cli import SECTIONS

    listed = {name: line for section in SECTIONS.values() for name, line in section.items()}
    assert set(listed) == set(main.commands), "give each command a line in cli.SECTIONS"
    longest = max(map(len, main.commands))
    for name, line in listed.items():
        assert len(line) + longest + 6 <= 80, name  # fits an 80-column terminal whole
    shown = CliRunner().invoke(main, ["--help"], terminal_width=80).stdout
    for name, line in listed.items():
        assert f"  {name}" in shown and line in shown, name
    assert "..." not in shown.split("\nOptions:", 1)[1]  # the usage line ends in one
