"""A gzip file cut short (issue 40's `truncated`): where the JSON inside is whole (the cut lies in
the trailer, or in a member after the document), the trace loads with the cut noted on its
metadata, and the audit and every command say so; where the JSON is cut, one line and exit 1 as
before; corrupt gzip stays corrupt. On both decoders (the C scanner, one thread and threaded on
tiny chunks, and msgspec) alike, and the input is never modified."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import traceanalyze
from tests.micro import write_trace
from tests.test_audit_micro import clean_events, rank_events
from tests.test_load_errors import raises, snapshot
from traceanalyze.analyses.audit import audit
from traceanalyze.cli import main
from traceanalyze.errors import TraceFormatError
from traceanalyze.load import fast, parallel, parse
from traceanalyze.load.parse import parse_file
from traceanalyze.trace import Trace

RAW = json.dumps({"traceEvents": clean_events()}).encode()
PACKED = gzip.compress(RAW, mtime=0)
# A second member of white space after the document (a writer that flushes by member, `cat`).
TWO = PACKED + gzip.compress(b"\n" * 100, mtime=0)
TRAILER = 8
# The document itself in three members (a writer that flushes by member): the JSON spans them.
THIRDS = [RAW[: len(RAW) // 3], RAW[len(RAW) // 3 : 2 * len(RAW) // 3], RAW[2 * len(RAW) // 3 :]]
SPLIT = [gzip.compress(part, mtime=0) for part in THIRDS]

# How each path is asked for: the C scanner on one thread, threaded on tiny chunks, msgspec.
PATHS = ["c", "c_threaded", "msgspec"]


def load_by(path: Path, how: str) -> Trace:
    if how == "msgspec":
        return parse_file(path, native=False)
    if not fast.AVAILABLE:
        if os.environ.get("TRACEANALYZE_REQUIRE_SCANNER"):
            raise AssertionError("the C scanner is required but not built")
        pytest.skip("the C scanner is not built")
    if how == "c":
        return parse_file(path, threads=1)
    # the threaded gzip path, cut every 300 inflated bytes: a cut stream is scanned again whole
    try:
        scanned = parallel.scan_file(path, threads=2, chunk_bytes=300)
    except fast.Declined:
        pass  # a cut inside the JSON: the msgspec path names it
    else:
        assert scanned.gzip_cut == parse.scan(path, threads=1).gzip_cut
    return parse_file(path, threads=2)


def c_only(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """The C paths must take the file themselves, not decline it to msgspec."""
    if how != "msgspec":

        def refuse(*_args: object, **_kwargs: object) -> None:
            raise AssertionError("the C scanner declined the file")

        monkeypatch.setattr(parse, "scan_document", refuse)


def written(folder: Path, data: bytes, name: str = "t.json.gz") -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("how", PATHS)
@pytest.mark.parametrize("cut", range(1, TRAILER + 1))
def test_a_cut_trailer_loads_with_the_bytes_missing_noted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, cut: int
) -> None:
    path = written(tmp_path, PACKED[:-cut])
    whole = parse_file(written(tmp_path, PACKED, "whole.json.gz"), native=False)
    before = snapshot(tmp_path)
    c_only(monkeypatch, how)
    trace = load_by(path, how)
    assert trace.meta[0].gzip_cut == {
        "member": 1,
        "member_offset_bytes": 0,
        "member_inflated_bytes": len(RAW),
        "missing_bytes": cut,
    }
    assert whole.meta[0].gzip_cut == {}
    assert trace.gpu.equals(whole.gpu) and trace.cpu.equals(whole.cpu)
    assert snapshot(tmp_path) == before


# name -> (content, the cut expected: member, offset, inflated bytes, missing bytes)
MEMBER_CUTS = {
    # the last deflate byte (the end-of-block code) cut: every byte of the JSON inflated
    "last_deflate_byte": (PACKED[: -TRAILER - 1], (1, 0, len(RAW), None)),
    "second_member_header": (TWO[: len(PACKED) + 5], (2, len(PACKED), 0, None)),
    "second_member_data": (TWO[:-12], (2, len(PACKED), None, None)),
    "second_member_trailer": (TWO[:-3], (2, len(PACKED), 100, 3)),
    "last_of_three_members_trailer": (
        b"".join(SPLIT)[:-4],
        (3, len(SPLIT[0]) + len(SPLIT[1]), len(THIRDS[2]), 4),
    ),
}


@pytest.mark.parametrize("how", PATHS)
@pytest.mark.parametrize("case", list(MEMBER_CUTS))
def test_a_member_cut_after_the_whole_json_loads_naming_the_member(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, case: str
) -> None:
    data, (member, offset, inflated, missing) = MEMBER_CUTS[case]
    path = written(tmp_path, data)
    c_only(monkeypatch, how)
    cut = load_by(path, how).meta[0].gzip_cut
    assert (cut["member"], cut["member_offset_bytes"], cut["missing_bytes"]) == (
        member,
        offset,
        missing,
    )
    if inflated is not None:
        assert cut["member_inflated_bytes"] == inflated
    else:  # some of the second member's 100 bytes of white space
        assert 0 <= (cut["member_inflated_bytes"] or 0) < 100


@pytest.mark.parametrize("how", PATHS)
def test_a_cut_between_members_is_no_cut(tmp_path: Path, how: str) -> None:
    # the first member whole, the second never begun: nothing says the file went on
    assert load_by(written(tmp_path, TWO[: len(PACKED)]), how).meta[0].gzip_cut == {}
    assert load_by(written(tmp_path, TWO, "two.json.gz"), how).meta[0].gzip_cut == {}


# name -> (content, words of the one line)
REFUSED = {
    "inside_the_json": (PACKED[: len(PACKED) // 2], "the gzip stream is truncated"),
    "just_before_the_json_ends": (PACKED[: -TRAILER - 6], "the gzip stream is truncated"),
    "json_cut_then_gzip_cut": (
        gzip.compress(RAW[:-3], mtime=0)[:-2],
        "the gzip stream is truncated",
    ),
    "json_cut_in_a_whole_gzip": (gzip.compress(RAW[:-3], mtime=0), "the JSON ends early"),
    "header_only": (PACKED[:6], "the gzip stream is truncated"),
    "last_of_three_members_inside_the_json": (
        b"".join(SPLIT)[: -TRAILER - 20],
        "the gzip stream is truncated",
    ),
    "bad_crc": (PACKED[:-TRAILER] + b"\0\0\0\0" + PACKED[-4:], "incorrect data check"),
    "bad_size": (PACKED[:-4] + b"\1\0\0\0", "incorrect length check"),
    "garbage_in_the_middle": (
        PACKED[:40] + b"\xff" * 16 + PACKED[56:],
        "corrupt gzip data",
    ),
    "garbage_after_the_last_member": (PACKED + b"xyz", "corrupt gzip data"),
}


@pytest.mark.parametrize("how", PATHS)
@pytest.mark.parametrize("case", list(REFUSED))
def test_a_cut_json_or_corrupt_gzip_is_refused_in_one_line(
    tmp_path: Path, how: str, case: str
) -> None:
    data, words = REFUSED[case]
    path = written(tmp_path, data)
    before = snapshot(tmp_path)
    error = raises(TraceFormatError, lambda: load_by(path, how), path, words)
    assert type(error) is TraceFormatError
    assert snapshot(tmp_path) == before


def test_the_cut_is_kept_by_the_cache(tmp_path: Path) -> None:
    path = written(tmp_path, PACKED[:-3])
    cache = tmp_path / "cache"
    first = traceanalyze.load(path, cache_dir=cache)
    again = traceanalyze.load(path, cache_dir=cache)
    assert first.meta[0].gzip_cut["missing_bytes"] == 3
    assert again.meta == first.meta and any(cache.iterdir())


def test_the_audit_reports_the_cut_file_as_a_warning(tmp_path: Path) -> None:
    path = written(tmp_path, TWO[:-12], "rank0.json.gz")
    result = audit(traceanalyze.load(path, cache=False))
    rows = result.checks.filter(result.checks["check"] == "truncated").to_dicts()
    assert [(r["finding"], r["severity"], r["count"], r["figures"]) for r in rows] == [
        ("gzip_cut", "warning", 1, [])
    ]
    assert rows[0]["detail"].startswith(
        f"gzip member 2 of rank0.json.gz (from byte {len(PACKED):,}) ends inside its "
        "compressed data after "
    )
    assert not result.ok and result.error_bars == {}
    whole = audit(traceanalyze.load(written(tmp_path, PACKED, "whole.json.gz"), cache=False))
    assert whole.ok


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def test_every_command_says_the_cut_in_one_line(tmp_path: Path) -> None:
    path = written(tmp_path, PACKED[:-5])
    said = (
        "traceanalyze: warning: the trace's own faults leave what this command read "
        "unverified: t.json.gz: truncated/gzip_cut: gzip member 1 of t.json.gz (from byte 0) "
        "lacks 5 of its 8 trailer bytes (checksum and size); the JSON is whole, so no event is "
        f"lost, but the data is unverified: copy or re-export the file; see `traceanalyze audit "
        f"{path}`"
    )
    for command in ("summary", "kernels", "iterations", "idle"):
        result = run(command, path, "--no-cache")
        assert result.exit_code == 0, result.output
        assert result.stderr.splitlines() == [said], command
    summary = json.loads(run("summary", path, "--format", "json", "--no-cache").stdout)
    assert list(summary["audit_warnings"]) == ["truncated/gzip_cut"]
    record = json.loads(run("audit", path, "--format", "json", "--no-cache").stdout)
    assert record["ok"] is False
    rows = {(r["check"], r["finding"]): r for r in record["checks"]}
    assert rows["truncated", "gzip_cut"]["severity"] == "warning"
    assert "t.json.gz" in rows["truncated", "gzip_cut"]["detail"]


def test_a_command_on_a_cut_json_fails_in_one_line(tmp_path: Path) -> None:
    path = written(tmp_path, PACKED[: len(PACKED) // 2])
    for command in ("summary", "audit"):
        result = run(command, path, "--no-cache")
        assert result.exit_code == 1
        assert result.stderr.splitlines() == [
            f"traceanalyze: error: {path}: the gzip stream is truncated. Copy or re-export the "
            "file again; it was cut off while being written or copied."
        ]


def test_the_report_opens_with_the_cut_moving_no_figure(tmp_path: Path) -> None:
    path = written(tmp_path, PACKED[:-2])
    result = run("report", path, "--no-cache")
    assert result.exit_code == 0, result.output
    section = result.stdout.split("## What the traces say\n\n", 1)[1]
    assert section.startswith(
        "- Trace faults leave a file unverified: `t`: truncated/gzip_cut: gzip member 1 of "
        "t.json.gz (from byte 0) lacks 2 of its 8 trailer bytes"
    ), section.splitlines()[0]


def test_a_folder_of_ranks_names_the_cut_rank_file(tmp_path: Path) -> None:
    for rank in (0, 1):
        raw = write_trace(tmp_path, rank_events(0), f"rank{rank}.json", rank=rank)
        packed = gzip.compress(raw.read_bytes(), mtime=0)
        (tmp_path / f"rank{rank}.json.gz").write_bytes(packed[:-6] if rank else packed)
        raw.unlink()
    trace = traceanalyze.load(tmp_path, cache=False)
    assert [bool(m.gzip_cut) for m in sorted(trace.meta, key=lambda m: m.rank)] == [False, True]
    result = audit(trace)
    row = result.checks.filter(result.checks["finding"] == "gzip_cut").row(0, named=True)
    assert row["count"] == 1 and row["severity"] == "warning"
    assert row["detail"].startswith("gzip member 1 of rank1.json.gz (from byte 0) lacks 6 of ")
    lines = run("ranks", tmp_path, "--no-cache").stderr.splitlines()
    assert len(lines) == 1 and "truncated/gzip_cut: gzip member 1 of rank1.json.gz" in lines[0]
