"""The README shows what the code prints: every tour block is the command's current output."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_tour_blocks_are_current() -> None:
    spec = importlib.util.spec_from_file_location("readme_tour", REPO / "scripts/readme_tour.py")
    assert spec is not None and spec.loader is not None
    tour = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tour)
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert tour.BLOCK.search(text), "the README has no tour blocks"
    assert tour.regenerate(text) == text, "run: python scripts/readme_tour.py"
