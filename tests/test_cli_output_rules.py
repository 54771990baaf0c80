"""Where output may go: never onto what the command reads, and in the format it says."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceanalyze import files
from traceanalyze.analyses.variants.compare import comparison
from traceanalyze.cli import main
from traceanalyze.load.variants import load_variants

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "h200_default"


def test_output_onto_a_trace_inside_an_input_folder_is_refused(tmp_path: Path) -> None:
    folder = shutil.copytree(SAMPLES, tmp_path / "capture")
    # The capture's manifest: a file the command reads, with a suffix -o takes.
    target = folder / "manifest.json"
    before = target.read_bytes()
    result = CliRunner().invoke(main, ["summary", str(folder), "-o", str(target), "--force"])
    assert result.exit_code == 2
    assert "inside the input folder" in result.stderr
    assert target.read_bytes() == before
    # A new file in the input folder is fine.
    fresh = folder / "summary.json"
    assert CliRunner().invoke(main, ["summary", str(folder), "-o", str(fresh)]).exit_code == 0
    assert json.loads(fresh.read_text())[0]["variant"] == "naive"


def test_a_suffix_that_contradicts_the_format_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["summary", str(SAMPLES / "naive.json.gz"), "-o", str(tmp_path / "s.json"),
         "--format", "csv"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "says json by its suffix but --format says csv" in result.stderr
    assert not (tmp_path / "s.json").exists()


def test_a_trace_file_of_a_capture_folder_is_judged_against_its_median() -> None:
    # The same verdict for the file alone as for its folder: the manifest beside it is read.
    alone = json.loads(
        CliRunner()
        .invoke(main, ["summary", str(SAMPLES / "sdpa_flash.json.gz"), "--format", "json"])
        .stdout
    )
    folder = json.loads(
        CliRunner().invoke(main, ["summary", str(SAMPLES), "--format", "json"]).stdout
    )
    [flash] = [r for r in folder if r["variant"] == "sdpa_flash"]
    assert alone["wall_source"] == flash["wall_source"] == "capture median"
    assert (alone["bound"], alone["gpu_busy_pct_of_wall"]) == (
        flash["bound"],
        flash["gpu_busy_pct_of_wall"],
    )


def test_no_gpu_activity_gives_null_not_nan(public: Path) -> None:
    path = public / "hta_cpu_only_rank34.pt.trace.json.gz"
    out = CliRunner().invoke(main, ["compare", str(path), "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)[0]["reported_coverage_pct"] is None
    csv = CliRunner().invoke(main, ["compare", str(path), "--format", "csv"]).stdout
    assert "NaN" not in csv


FLASH = SAMPLES / "sdpa_flash.json.gz"


def test_output_dash_is_standard_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["summary", str(FLASH), "-o", "-", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kernels_per_iter"] == 1
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        ("a_file/out.md", "Not a directory"),  # a file where the folder should be
        ("missing.md", "Permission denied"),
        ("missing.md", "Read-only file system"),
    ],
)
def test_unwritable_output_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, reason: str
) -> None:
    (tmp_path / "a_file").write_text("in the way")
    if reason != "Not a directory":  # the tests may run as root, who may write anywhere
        errno = {"Permission denied": 13, "Read-only file system": 30}[reason]

        def refuse(target: Path) -> object:  # the file is written under a temporary name
            raise OSError(errno, reason, str(target))

        monkeypatch.setattr(files, "_create_beside", refuse)
    result = CliRunner().invoke(main, ["summary", str(FLASH), "-o", str(tmp_path / where)])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    [line] = result.stderr.splitlines()
    assert line.startswith(f"traceanalyze: error: cannot write {tmp_path / where}: {reason}")


def test_a_missing_output_folder_is_created(tmp_path: Path) -> None:
    target = tmp_path / "new" / "deeper" / "summary.json"
    result = CliRunner().invoke(main, ["summary", str(FLASH), "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert json.loads(target.read_text())["kernels_per_iter"] == 1


def test_check_refuses_a_text_key_as_a_metric() -> None:
    result = CliRunner().invoke(main, ["check", str(FLASH), "-e", "wall_source == 1"])
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert "'wall_source' is not a number" in line
    assert "wall_source" not in line.split("Use one of:")[1]


def test_library_functions_take_a_variant_set() -> None:
    found = load_variants([SAMPLES])
    assert [v.label for v in found][:2] == ["naive", "naive_inplace"]
    assert comparison(found).equals(comparison(found.variants))


def test_a_folder_of_variants_names_the_commands_that_take_it() -> None:
    result = CliRunner().invoke(main, ["explain", str(SAMPLES), str(FLASH)])
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert "traceanalyze compare FOLDER" in line
    assert "load_variants(" not in line
