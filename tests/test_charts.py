"""Charts: colours told apart, honest bar lengths, labelled values (render/charts.py and
render/waterfall.py)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.micro import annotation, call, kernel, op, write_trace
from traceanalyze import load
from traceanalyze.analyses.variants.explain import explain
from traceanalyze.classify.rules import CATEGORIES
from traceanalyze.render.charts import (
    CATEGORY_STYLES,
    MIN_CATEGORY_DELTA_E,
    cpu_vs_gpu,
    gpu_time_by_category,
)
from traceanalyze.render.waterfall import waterfall

PNG = b"\x89PNG\r\n\x1a\n"


def lab(colour: str) -> tuple[float, float, float]:
    """CIELAB (D65) of an sRGB hex colour."""
    rgb = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(v: float) -> float:
        return v ** (1 / 3) if v > 216 / 24389 else (24389 / 27 * v + 16) / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def delta_e(a: str, b: str) -> float:
    """CIE76 colour difference."""
    return float(sum((p - q) ** 2 for p, q in zip(lab(a), lab(b), strict=True)) ** 0.5)


def test_lab_of_known_colours() -> None:
    assert lab("#FFFFFF") == pytest.approx((100.0, 0.0, 0.0), abs=0.05)
    assert lab("#000000") == pytest.approx((0.0, 0.0, 0.0), abs=0.05)
    assert lab("#FF0000") == pytest.approx((53.24, 80.09, 67.20), abs=0.1)


def test_every_category_has_a_style() -> None:
    assert set(CATEGORY_STYLES) == set(CATEGORIES)


@pytest.mark.parametrize(("a", "b"), list(itertools.combinations(CATEGORY_STYLES, 2)))
def test_every_pair_of_categories_is_far_apart(a: str, b: str) -> None:
    distance = delta_e(CATEGORY_STYLES[a][0], CATEGORY_STYLES[b][0])
    assert distance >= MIN_CATEGORY_DELTA_E, f"{a} and {b}: deltaE {distance:.1f}"


def comparison(cpu: list[float], gpu: list[float]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "variant": [f"v{i}" for i in range(len(cpu))],
            "cpu_op_us_per_iter": cpu,
            "gpu_busy_us_per_iter": gpu,
        }
    )


def test_cpu_vs_gpu_draws_a_linear_axis_and_a_ratio_panel(saved_figures: list[Any]) -> None:
    png = cpu_vs_gpu(comparison([200.0, 50.0], [1000.0, 20.0]))

    assert png.startswith(PNG)
    times, ratio = saved_figures[0].axes
    assert times.get_xscale() == "linear"
    assert ratio.get_xscale() == "linear"
    # Each bar carries its value; the ratio panel its CPU ÷ GPU figure.
    assert [t.get_text() for t in times.texts] == ["200", "50", "1,000", "20"]  # CPU, then GPU
    assert [t.get_text() for t in ratio.texts] == ["0.2", "2.5"]


def test_category_chart_is_a_png() -> None:
    table = pl.DataFrame(
        {
            "variant": ["a", "a", "b"],
            "category": ["gemm", "mask", "gemm"],
            "us_per_iter": [1.0, 2, 3],
        }
    )
    assert gpu_time_by_category(table).startswith(PNG)


@pytest.fixture
def saved_figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures the charts save, kept for a look at their axes."""
    from matplotlib.figure import Figure

    saved: list[Any] = []
    original = Figure.savefig

    def keep(self: Figure, *args: Any, **kwargs: Any) -> None:
        saved.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def test_the_waterfall_labels_whole_and_values_on_its_bars(
    tmp_path: Path, saved_figures: list[Any]
) -> None:
    # BASE: a 10 us softmax after a long-named op's 6 us copy; NEW: the softmax alone.
    chain = "aten::masked_fill -> aten::clone -> aten::copy_"
    base = [
        annotation("ProfilerStep#1", 100, 100),
        op("aten::masked_fill", 110, 30),
        op("aten::clone", 112, 20),
        op("aten::copy_", 114, 10),
        call("cudaMemcpyAsync", 115, 3, 1),
        kernel("Memcpy DtoD (Device -> Device)", 120, 6, 1, cat="gpu_memcpy", bytes=1024),
        op("aten::softmax", 150, 10),
        call("cudaLaunchKernel", 151, 5, 2),
        kernel("softmax_warp_forward", 160, 10, 2),
    ]
    new = [base[0], *base[6:]]
    explanation = explain(
        load(write_trace(tmp_path, base, "base.json"), cache=False),
        load(write_trace(tmp_path, new, "new.json"), cache=False),
        "base",
        "new",
    )
    assert waterfall(explanation).startswith(PNG)

    axes = saved_figures[0].axes[0]
    labels = [t.get_text().replace("\n", " ") for t in axes.get_yticklabels()]
    assert any(chain in label for label in labels), labels  # whole, not cut with "…"
    assert not any("…" in label for label in labels)
    values = [t.get_text() for t in axes.texts]
    assert values[0] == f"{explanation.base_figures['gpu_span_us_per_iter']:,.1f} µs"
    assert values[-1] == f"{explanation.new_figures['gpu_span_us_per_iter']:,.1f} µs"
    assert "\u22126.0" in values  # the copy's part, with a minus sign
