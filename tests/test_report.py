"""`traceanalyze report`: golden markdown of the H200 capture, its PNG charts, its sections and
the rules every command keeps (usage errors, no overwriting, inputs left alone).

Golden files are rewritten only with TRACEANALYZE_UPDATE_GOLDEN=1; otherwise a mismatch fails
with a unified diff.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import struct
import sys
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from traceanalyze.cli import main

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
CAPTURE = SAMPLES / "h200_default"
GOLDEN = Path(__file__).resolve().parent / "golden"
VARIANTS = [
    "naive", "naive_inplace", "sdpa_math", "sdpa_efficient", "sdpa_flash", "sdpa_cudnn",
    "sdpa_auto", "flex_attention", "compiled_naive",
]  # fmt: skip
CHARTS = {"report_gpu_time_by_category.png", "report_cpu_vs_gpu.png"}
# Public NVIDIA traces (PROVENANCE.md there) for a report from a folder without a manifest.
PUBLIC_NVIDIA = (
    "hta_alexnet_a100.json.gz",
    "hta_triton_example_a100.json.gz",
    "hta_no_distributed_info_a100.json.gz",
    "tl_h100_bert_small.json.gz",
)
_SPEC = importlib.util.spec_from_file_location("example_report", REPO / "scripts/example_report.py")
assert _SPEC is not None and _SPEC.loader is not None
example_report = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(example_report)
IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")
UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


# ---------------------------------------------------------------------------------------------
# helpers shared with test_compare_diff.py


def check_golden(name: str, actual: str) -> None:
    """Compare ``actual`` with ``tests/golden/<name>``, or rewrite that file where
    TRACEANALYZE_UPDATE_GOLDEN=1 (and skip, saying so)."""
    path = GOLDEN / name
    if os.environ.get("TRACEANALYZE_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        pytest.skip(f"updated golden file tests/golden/{name}")
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                f"tests/golden/{name}",
                "actual",
            )
        )
        pytest.fail(
            f"output differs from tests/golden/{name} (TRACEANALYZE_UPDATE_GOLDEN=1 rewrites "
            f"it):\n{diff}",
            pytrace=False,
        )


def invoke(args: Sequence[str], cache: Path) -> Result:
    """Run the CLI with its own Parquet cache (one per test module, so traces parse once)."""
    return CliRunner().invoke(
        main, list(args), env={"TRACEANALYZE_CACHE_DIR": str(cache)}, catch_exceptions=False
    )


def linked_samples(folder: Path) -> Path:
    """``folder/sample_traces`` -> the repository's, so a command run in ``folder`` names its
    inputs and its -o file by stable relative paths (they are recorded in the report)."""
    (folder / "sample_traces").symlink_to(SAMPLES, target_is_directory=True)
    return folder


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("module-cache")


# ---------------------------------------------------------------------------------------------
# PNG and markdown checks (stdlib only)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height of a PNG, after checking its signature, every chunk's CRC, that IHDR
    comes first and IEND last, and that the image data inflates to the size IHDR implies."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    chunks, offset = [], 8
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind!r}"
        chunks.append((kind, body))
        offset += 12 + length
    assert chunks[0][0] == b"IHDR" and len(chunks[0][1]) == 13
    assert chunks[-1][0] == b"IEND"
    width, height, depth, colour = struct.unpack(">IIBB", chunks[0][1][:10])
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
    pixels = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    assert depth == 8
    assert len(pixels) == height * (1 + width * channels)
    return width, height


def table_blocks(markdown: str) -> list[list[str]]:
    """Runs of consecutive lines that start with '|'."""
    blocks: list[list[str]] = []
    previous = False
    for line in markdown.splitlines():
        is_row = line.startswith("|")
        if is_row and previous:
            blocks[-1].append(line)
        elif is_row:
            blocks.append([line])
        previous = is_row
    return blocks


def cells(row: str) -> list[str]:
    assert row.startswith("|") and row.endswith("|") and not row.endswith("\\|"), row
    return [c.strip() for c in UNESCAPED_PIPE.split(row[1:-1])]


def check_gfm(markdown: str, folder: Path) -> None:
    """GitHub-flavoured markdown sanity: each table has a delimiter row and every row has as
    many cells as its header (a raw '|' in a cell would add one); image links resolve."""
    blocks = table_blocks(markdown)
    assert blocks
    for block in blocks:
        width = len(cells(block[0]))
        assert len(block) >= 2, block
        assert all(re.fullmatch(r":?-{3,}:?", c) for c in cells(block[1])), block[1]
        for row in block:
            assert len(cells(row)) == width, f"{len(cells(row))} cells, header has {width}: {row}"
    for link in IMAGE_LINK.findall(markdown):
        assert (folder / link).is_file(), link
    assert markdown.endswith("\n") and not markdown.endswith("\n\n\n")


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``folder`` (links followed): content hash and modification time."""
    return {
        str(p.relative_to(folder)): (
            hashlib.sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mtime_ns,
        )
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def sections(markdown: str) -> list[str]:
    return [line[3:] for line in markdown.splitlines() if line.startswith("## ")]


def report_sections(variants: Sequence[str]) -> list[str]:
    """The second-level headings of a report with charts, comparing ``variants`` (attention
    variants: the Attention section comes last before the glossary)."""
    return [
        "What the traces say", "Comparison", "Charts", "Environment",
        *[f"`{v}`" for v in variants], "Attention", "How to read this",
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# the H200 capture folder: one report, many checks


@dataclass(frozen=True)
class ReportRun:
    folder: Path
    result: Result
    text: str
    inputs_before: dict[str, tuple[str, int]]
    inputs_after: dict[str, tuple[str, int]]


@pytest.fixture(scope="module")
def h200_report(tmp_path_factory: pytest.TempPathFactory, module_cache: Path) -> ReportRun:
    folder = linked_samples(tmp_path_factory.mktemp("report"))
    before = snapshot(CAPTURE)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        result = invoke(["report", "sample_traces/h200_default", "-o", "report.md"], module_cache)
    assert result.exit_code == 0, result.output
    text = (folder / "report.md").read_text(encoding="utf-8")
    return ReportRun(folder, result, text, before, snapshot(CAPTURE))


def test_report_matches_golden(h200_report: ReportRun) -> None:
    check_golden("report_h200_default.md", h200_report.text)


def test_the_example_report_in_docs_is_current(h200_report: ReportRun) -> None:
    # docs/example_report is what `report` writes on the sample captures today (the -o path of
    # its "Produced by" line aside), with the same charts: scripts/example_report.py rewrites it.
    docs = REPO / "docs" / "example_report"
    committed = (docs / "report.md").read_text(encoding="utf-8")
    assert example_report.comparable(h200_report.text) == example_report.comparable(committed), (
        "docs/example_report is out of date: run PYTHONPATH=$PWD python scripts/example_report.py"
    )
    assert {p.name for p in docs.iterdir() if p.suffix == ".png"} == CHARTS
    for chart in CHARTS:
        fresh = (h200_report.folder / chart).read_bytes()
        assert png_size((docs / chart).read_bytes()) == png_size(fresh), chart


def test_report_records_the_command_as_given(h200_report: ReportRun) -> None:
    # Rebuilt from click's context: sys.argv is pytest's here.
    assert (
        "Produced by traceanalyze 0.1.0: `traceanalyze report sample_traces/h200_default "
        "-o report.md`." in h200_report.text
    )


def test_report_writes_valid_pngs_beside_it_and_links_exactly_them(h200_report: ReportRun) -> None:
    written = {p.name for p in h200_report.folder.iterdir() if p.suffix == ".png"}
    assert written == CHARTS
    for name in written:
        width, height = png_size((h200_report.folder / name).read_bytes())
        assert width > 0 and height > 0
    assert set(IMAGE_LINK.findall(h200_report.text)) == CHARTS
    assert h200_report.result.stderr.splitlines() == [
        "wrote report.md",
        "wrote report_gpu_time_by_category.png",
        "wrote report_cpu_vs_gpu.png",
    ]


def test_report_sections(h200_report: ReportRun) -> None:
    text = h200_report.text
    assert text.startswith("# Attention variants compared: profiling report\n")
    assert sections(text) == report_sections(VARIANTS)
    environment = json.loads((CAPTURE / "manifest.json").read_text())["environment"]
    for key in ("gpu", "driver", "cuda", "cudnn", "torch"):
        assert f"| {key} | {environment[key]} |" in text
    comparison = table_blocks(text.split("## Comparison")[1])[0]
    assert [cells(row)[0] for row in comparison[2:]] == VARIANTS
    assert text.count("**Findings**") == len(VARIANTS)
    assert "Memcpy DtoD" in text.split("## `naive`")[1].split("## `naive_inplace`")[0]
    assert "Not compared" not in text


def test_report_is_well_formed_markdown(h200_report: ReportRun) -> None:
    check_gfm(h200_report.text, h200_report.folder)


def test_report_never_modifies_its_inputs(h200_report: ReportRun) -> None:
    assert h200_report.inputs_after == h200_report.inputs_before


# ---------------------------------------------------------------------------------------------
# other inputs


def test_skipped_variant_is_listed_under_not_compared(tmp_path: Path, module_cache: Path) -> None:
    capture = tmp_path / "capture"
    capture.mkdir()
    manifest = json.loads((CAPTURE / "manifest.json").read_text())
    kept = ("naive", "sdpa_flash", "sdpa_cudnn")
    manifest["variants"] = {k: v for k, v in manifest["variants"].items() if k in kept}
    manifest["variants"]["sdpa_cudnn"] |= {
        "status": "skipped",
        "reason": "cuDNN attention needs sm80 or newer",
        "trace": None,
    }
    (capture / "manifest.json").write_text(json.dumps(manifest))
    for name in ("naive", "sdpa_flash"):
        shutil.copy2(CAPTURE / f"{name}.json.gz", capture)

    result = invoke(["report", str(capture), "-o", str(tmp_path / "report.md")], module_cache)

    assert result.exit_code == 0, result.output
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    not_compared = text.split("Not compared:\n\n")[1].split("\n\n")[0]
    assert not_compared == "- `sdpa_cudnn`: skipped (cuDNN attention needs sm80 or newer)"
    assert sections(text) == report_sections(["naive", "sdpa_flash"])
    comparison = table_blocks(text.split("## Comparison")[1])[0]
    assert [cells(row)[0] for row in comparison[2:]] == ["naive", "sdpa_flash"]
    check_gfm(text, tmp_path)


def test_report_from_public_traces_without_manifest(
    tmp_path: Path, public: Path, module_cache: Path
) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    for name in PUBLIC_NVIDIA:
        shutil.copy2(public / name, traces)
    before = snapshot(traces)

    out = tmp_path / "out"
    result = invoke(["report", str(traces), "-o", str(out / "report.md")], module_cache)

    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text(encoding="utf-8")
    labels = sorted(name.removesuffix(".json.gz") for name in PUBLIC_NVIDIA)
    assert sections(text) == report_sections(labels)
    assert "| gpu | " in text and "NVIDIA A100" in text and "NVIDIA H100" in text
    # No manifest: the speed-up is relative to the first trace.
    assert f"relative to `{labels[0]}`" in text
    check_gfm(text, out)
    assert {p.name for p in out.glob("*.png")} == CHARTS
    for name in CHARTS:
        assert min(png_size((out / name).read_bytes())) > 0
    assert snapshot(traces) == before


def test_report_from_trace_files(tmp_path: Path, module_cache: Path) -> None:
    files = [str(CAPTURE / "sdpa_flash.json.gz"), str(CAPTURE / "naive.json.gz")]

    result = invoke(["report", *files, "-o", str(tmp_path / "report.md")], module_cache)

    assert result.exit_code == 0, result.output
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert sections(text) == report_sections(["sdpa_flash", "naive"])
    # Without a manifest the header comes from the traces themselves.
    assert "| gpu | NVIDIA H200 |" in text
    assert "| cuda_runtime_version | 13000 |" in text
    assert "Capture configuration" not in text
    assert "relative to `naive`" in text
    check_gfm(text, tmp_path)


def test_report_to_standard_output_links_no_charts(module_cache: Path) -> None:
    result = invoke(["report", str(CAPTURE / "naive.json.gz")], module_cache)

    assert result.exit_code == 0, result.output
    # One forward-only trace: an inference trace, whatever it computes.
    assert result.stdout.startswith("# An inference trace: profiling report\n")
    assert "## Charts" not in result.stdout and "![" not in result.stdout


# ---------------------------------------------------------------------------------------------
# usage errors and files


@pytest.mark.parametrize(
    "args", [["--format", "json"], ["--format", "csv"], ["-o", "report.json"]], ids=str
)
def test_report_is_markdown_only(
    tmp_path: Path, module_cache: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke(["report", str(CAPTURE / "naive.json.gz"), *args], module_cache)

    assert result.exit_code == 2
    assert "report writes markdown; use `compare` for JSON or CSV" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_report_refuses_to_overwrite_without_force(
    tmp_path: Path, module_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(linked_samples(tmp_path))
    Path("report.md").write_text("keep me\n")
    args = ["report", "sample_traces/h200_default/naive.json.gz", "-o", "report.md"]

    refused = invoke(args, module_cache)

    assert refused.exit_code == 2
    assert "report.md exists; pass --force to overwrite it." in refused.stderr
    assert Path("report.md").read_text() == "keep me\n"
    assert not list(tmp_path.glob("*.png"))

    forced = invoke([*args, "--force"], module_cache)

    assert forced.exit_code == 0, forced.output
    assert (
        "`traceanalyze report sample_traces/h200_default/naive.json.gz -o report.md --force`"
        in Path("report.md").read_text()
    )


# ---------------------------------------------------------------------------------------------
# --hta


@pytest.mark.hta
def test_report_with_hta_section(tmp_path: Path, module_cache: Path) -> None:
    pytest.importorskip("hta")
    files = [str(CAPTURE / f"{v}.json.gz") for v in ("naive", "sdpa_flash", "sdpa_cudnn")]
    out = tmp_path / "report.md"

    result = invoke(["report", *files, "--hta", "-o", str(out)], module_cache)

    assert result.exit_code == 0, result.output
    # HTA's own logging (some 20 lines a trace) stays out of the terminal.
    assert result.stderr.splitlines() == [
        f"wrote {out}",
        *(f"wrote {tmp_path / name}" for name in sorted(CHARTS, reverse=True)),
    ]
    text = out.read_text(encoding="utf-8")
    section = text.split("## Holistic Trace Analysis cross-view")[1].split("\n## ")[0]
    assert "totals over the trace as HTA reads it, not per iteration" in section
    header, _, *rows = table_blocks(section)[0]
    assert cells(header)[1:4] == [
        "kernel span µs (total)",
        "compute µs (total)",
        "non-compute µs (total)",
    ]
    assert [cells(row)[0] for row in rows] == ["naive", "sdpa_flash", "sdpa_cudnn"]
    # HTA reads all three (the cuDNN trace of 2026-12-03 11:19 made it fail on a negative
    # duration; tests/test_hta_breakdown.py keeps that case), so the section has no error column.
    assert "error" not in cells(header)
    assert all(cells(row)[1] not in ("", "—") for row in rows)
    check_gfm(text, tmp_path)


def test_report_hta_without_the_extra_is_one_line(
    tmp_path: Path, module_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes `import hta...` raise ImportError, installed or not.
    monkeypatch.setitem(sys.modules, "hta", None)
    monkeypatch.setitem(sys.modules, "hta.trace_analysis", None)

    result = invoke(
        ["report", str(CAPTURE / "naive.json.gz"), "--hta", "-o", str(tmp_path / "report.md")],
        module_cache,
    )

    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("traceanalyze: ")
    assert line.endswith(
        "--hta needs Holistic Trace Analysis, which is not installed. "
        "Install the extra: pip install 'traceanalyze[hta]'."
    )
    assert list(tmp_path.iterdir()) == []
