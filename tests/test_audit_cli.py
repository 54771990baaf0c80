"""`audit` on the command line, and every command's one line of audit warnings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.conftest import SHARED
from tests.micro import write_trace
from tests.test_audit_micro import clean_events, is_kernel, rank_events
from traceanalyze.cli import main

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
WARNING = "traceanalyze: warning: the trace's own faults"


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def dropped_kernel(folder: Path, name: str = "trace.json") -> Path:
    return write_trace(folder, [e for e in clean_events() if not is_kernel(e, 4)], name)


def audit_lines(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith(WARNING)]


def test_audit_writes_markdown_json_and_csv(tmp_path: Path) -> None:
    path = dropped_kernel(tmp_path)
    md = run("audit", path)
    assert md.exit_code == 0, md.output
    assert md.stdout.startswith("**not ok**: 1 error.")
    assert "| launches_without_activity | dropped | error | 1 |" in md.stdout
    record = json.loads(run("audit", path, "--format", "json").stdout)
    assert record["ok"] is False
    assert record["error_bars"]["kernels_per_iter"] == 1 / 3
    rows = {(r["check"], r["finding"]): r for r in record["checks"]}
    assert rows["launches_without_activity", "dropped"]["count"] == 1
    assert rows["clock_skew", "none"]["offsets_us"] is None
    csv = run("audit", path, "--format", "csv").stdout
    assert csv.splitlines()[0].startswith("check,finding,severity,count,affected_us_per_iter")
    assert audit_lines(md) == []  # the audit is the detail itself


def test_audit_help_has_an_example() -> None:
    result = run("audit", "--help")
    assert result.exit_code == 0 and "Example:" in result.stdout


def test_a_missing_trace_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = run("audit", tmp_path / "missing.json")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "traceanalyze: error:" in result.stderr


def test_a_command_warns_in_one_line_when_a_fault_moves_what_it_prints(tmp_path: Path) -> None:
    path = dropped_kernel(tmp_path)
    for command in ("summary", "kernels", "iterations"):
        result = run(command, path)
        assert result.exit_code == 0, result.output
        lines = audit_lines(result)
        assert len(lines) == 1, result.stderr
        assert "launches_without_activity/dropped: 1 event moves " in lines[0]
        assert f"see `traceanalyze audit {path}`" in lines[0]


def test_a_clean_trace_and_commands_that_print_no_figure_say_nothing(tmp_path: Path) -> None:
    clean = write_trace(tmp_path, clean_events(), "clean.json")
    for args in (("summary", clean), ("kernels", clean), ("info", dropped_kernel(tmp_path))):
        result = run(*args)
        assert result.exit_code == 0 and audit_lines(result) == [], result.stderr


def test_one_line_for_a_folder_of_faulty_variants(tmp_path: Path) -> None:
    dropped_kernel(tmp_path, "a.json")
    dropped_kernel(tmp_path, "b.json")
    lines = audit_lines(run("summary", tmp_path))
    assert len(lines) == 1 and "(and 1 more)" in lines[0]


def test_summary_json_carries_the_audit_warnings(tmp_path: Path) -> None:
    faulty = json.loads(run("summary", dropped_kernel(tmp_path), "--format", "json").stdout)
    warned = faulty["audit_warnings"]
    assert list(warned) == ["launches_without_activity/dropped"]
    assert warned["launches_without_activity/dropped"].startswith("1 event moves ")
    clean = write_trace(tmp_path, clean_events(), "clean.json")
    assert json.loads(run("summary", clean, "--format", "json").stdout)["audit_warnings"] == {}


def test_the_report_opens_with_the_audit_finding(tmp_path: Path) -> None:
    text = run("report", dropped_kernel(tmp_path)).stdout
    section = text.split("## What the traces say\n\n", 1)[1]
    assert section.startswith("- Trace faults move figures below by 1% or more: `trace`: ")
    assert "launches_without_activity/dropped" in section.splitlines()[0]
    assert "(`traceanalyze audit " in section.splitlines()[0]


def test_a_clean_report_has_no_audit_line(tmp_path: Path) -> None:
    text = run("report", write_trace(tmp_path, clean_events())).stdout
    assert "Trace faults" not in text


def shifted_folder(folder: Path) -> Path:
    for rank, shift in ((0, 0), (1, 1234)):
        write_trace(folder, rank_events(shift), f"rank{rank}.json", rank=rank)
    return folder


def test_ranks_clock_align_applies_the_audit_offsets(tmp_path: Path) -> None:
    result = run("ranks", shifted_folder(tmp_path), "--clock-align", "--format", "json")
    record = json.loads(result.stdout)
    assert record["clock_alignment"] == "clock-align"
    assert [r["clock_offset_us"] for r in record["ranks"]] == [0.0, 1234.0]
    assert record["notes"][0].startswith("Clocks aligned with the audit's clock_skew offsets")
    assert "rank 1 +1,234.000 µs" in record["notes"][0]
    # On aligned clocks the all-reduces start as the ranks joined them: 0 and 14 µs apart.
    assert record["max_start_spread_us"] < 50


def test_comms_clock_align_says_so(tmp_path: Path) -> None:
    folder = shifted_folder(tmp_path)
    text = run("comms", folder, "--clock-align").stdout
    assert "Note: Clocks aligned with the audit's clock_skew offsets" in text
    assert "--clock-align" not in run("comms", folder).stdout
    aligned = json.loads(run("comms", folder, "--clock-align", "--format", "json").stdout)
    raw = json.loads(run("comms", folder, "--format", "json").stdout)
    assert {r["rank"]: r["clock_offset_us"] for r in aligned} == {0: 0.0, 1: 1234.0}
    assert {r["clock_offset_us"] for r in raw} == {None}  # a declared column: null unaligned
    moved = {r["ts_ns"] - a["ts_ns"] for r, a in zip(raw, aligned, strict=True)}
    assert moved == {0, 1_234_000}


# --- a warning names only what the command prints (issue 41's second newcomer pass: `kernels`
# on zoology warned about memcpy_per_iter, which `kernels` does not print) ------------------


def _printed(command: str) -> set[str]:
    """The names ``command`` prints: its declared tables' columns and struct fields, the rows
    of its `figure` tables, and for `report` (markdown only) the keys of its headings."""
    from traceanalyze.analyses.audit.steps import STEP_FIGURES
    from traceanalyze.analyses.variants.diff import FIGURES as DIFF_ROWS
    from traceanalyze.analyses.variants.explain import CPU_FIGURES
    from traceanalyze.render.headings import heading
    from traceanalyze.tables.declared import DECLARED

    names: set[str] = set()
    for table in DECLARED:
        if table.command == command:
            names |= set(table.columns)
            for dtype in table.columns.values():
                names |= {f.name for f in getattr(dtype, "fields", ())}
    names |= {"diff": set(DIFF_ROWS), "explain": set(CPU_FIGURES)}.get(command, set())
    if command == "check":  # its `expectation` column names the metric, `measured` prints it
        names |= {c for t in DECLARED if t.command == "summary" for c in t.columns}
    if command == "report":
        golden = (Path(__file__).parent / "golden" / "report_h200_default.md").read_text()
        names |= {f for f in (*STEP_FIGURES, "bound") if f"| {heading(f)} |" in golden}
    return names


def test_every_command_names_only_figures_it_prints() -> None:
    from traceanalyze.analyses.audit.figures import COMMAND_FIGURES, FIGURES, VERDICT

    wrong = {
        (command, figure, shown)
        for command, printed in COMMAND_FIGURES.items()
        for figure, shown in printed.items()
        if shown.split()[0] not in _printed(command) or figure not in (*FIGURES, VERDICT)
    }
    assert not wrong, wrong


def test_kernels_on_a_trace_without_gpu_events_names_its_own_column() -> None:
    trace = SHARED / "traces/corpus/zoology_a100x8_no_gpu_events.json.gz"
    if not trace.exists():
        pytest.skip(f"{trace} absent (../shared)")
    lines = audit_lines(run("kernels", trace, "--format", "json"))
    assert len(lines) == 1
    assert (
        "launches_without_activity/dropped: 268 events move count_per_iter of the memcpy rows "
        "(their sum is memcpy_per_iter) ±8 per iteration" in lines[0]
    )
    # `check` prints only the metrics its expectations name
    assert audit_lines(run("check", trace, "-e", "gpu_busy_us_per_iter >= 0")) == []
    said = audit_lines(run("check", trace, "-e", "kernels_per_iter >= 0"))
    assert len(said) == 1 and "move kernels_per_iter ±260 per iteration" in said[0]


def test_a_command_without_a_verdict_runs_no_verdict_only_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The clock check builds the step model (most of an audit on a large trace) and moves
    # only the verdict: kernels prints none, so its audit line must not pay for it.
    import traceanalyze
    from traceanalyze.analyses import audit as audit_module
    from traceanalyze.analyses.audit.figures import COMMAND_FIGURES

    ran: list[str] = []
    real = audit_module.RUNNERS["gpu_clock_offset"]

    def counting(trace: traceanalyze.Trace) -> list[audit_module.Finding]:
        ran.append(trace.path.name)
        return real(trace)

    monkeypatch.setitem(audit_module.RUNNERS, "gpu_clock_offset", counting)
    trace = traceanalyze.load(SAMPLES / "h200_default" / "naive.json.gz")
    audit_module.command_warnings(trace, COMMAND_FIGURES["kernels"])
    assert ran == []
    audit_module.command_warnings(trace, COMMAND_FIGURES["summary"])
    assert ran == ["naive.json.gz"]
