"""Output files and cache entries are written whole or not at all (issue 42): under a
temporary name, renamed into place once complete, so a failure, a Ctrl-C or a full disk
leaves the file that was there (or none) and no temporary file."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.test_load_paths import SAMPLES
from traceanalyze import files
from traceanalyze.cli import main
from traceanalyze.load import cache
from traceanalyze.load.parse import parse_file


def _full_disk(*args: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_file_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "out.md"
    files.write_text(target, "new")
    plain = tmp_path / "plain.md"
    plain.write_text("made by open()")
    assert target.read_text() == "new"
    assert target.stat().st_mode == plain.stat().st_mode  # the umask applies, as for open()
    target.chmod(0o600)
    files.write_bytes(target, b"newer")
    assert (target.read_bytes(), target.stat().st_mode & 0o777) == (b"newer", 0o600)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.md", "plain.md"]


@pytest.mark.parametrize("failure", [ValueError, KeyboardInterrupt, "full disk"])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: Any
) -> None:
    target = tmp_path / "out.md"
    target.write_text("old")
    if failure == "full disk":
        monkeypatch.setattr(files.os, "fsync", _full_disk)
        expected: type[BaseException] = OSError
    else:
        expected = failure
    with pytest.raises(expected), files.replacing(target) as file:
        file.write(b"half of the n")
        if failure != "full disk":
            raise failure
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.md"]


def test_a_full_disk_keeps_the_old_output_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "summary.md"
    target.write_text("the summary of before")
    monkeypatch.setattr(files.os, "fsync", _full_disk)
    result = CliRunner().invoke(
        main, ["summary", str(SAMPLES[0]), "-o", str(target), "--force", "--no-cache"]
    )
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"traceanalyze: error: cannot write {target}: No space left on device")
    assert target.read_text() == "the summary of before"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.md"]


@pytest.mark.parametrize("failure", [KeyboardInterrupt, "full disk"])
def test_an_interrupted_cache_write_leaves_no_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: Any
) -> None:
    trace = parse_file(SAMPLES[0])
    entry = cache.entry_for(SAMPLES[0], tmp_path)
    written = cache._frame_bytes
    calls = []

    def third_fails(frame: Any) -> bytes:
        calls.append(1)
        if len(calls) == 3:
            if failure == "full disk":
                _full_disk()
            raise failure
        return written(frame)

    monkeypatch.setattr(cache, "_frame_bytes", third_fails)
    if failure == "full disk":
        assert cache.write_entry(entry, trace) is False
    else:
        with pytest.raises(KeyboardInterrupt):
            cache.write_entry(entry, trace)
    assert list(tmp_path.iterdir()) == []  # no entry, no staging folder
    monkeypatch.setattr(cache, "_frame_bytes", written)
    assert cache.write_entry(entry, trace)  # the next load writes it whole
    assert cache.read_entry(entry) is not None


def test_the_next_write_removes_temporaries_left_by_a_killed_writer(tmp_path: Path) -> None:
    # kill -9 during a write runs no cleanup: its hidden temporary stayed for good. The next
    # write to the same target removes ours that are an hour old, and nothing else.
    target = tmp_path / "report.md"
    abandoned = tmp_path / ".report.md.0123456789ab.tmp"
    recent = tmp_path / ".report.md.ba9876543210.tmp"  # another writer's, at work now
    other_target = tmp_path / ".other.md.0123456789ab.tmp"
    not_ours = tmp_path / ".report.md.notours.tmp"
    for path in (abandoned, recent, other_target, not_ours):
        path.write_text("partial")
    two_hours_ago = time.time() - 7200
    for path in (abandoned, other_target, not_ours):
        os.utime(path, (two_hours_ago, two_hours_ago))
    files.write_text(target, "whole")
    assert target.read_text() == "whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [target.name, recent.name, other_target.name, not_ours.name]
    )
