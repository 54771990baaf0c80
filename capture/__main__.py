"""``python -m capture``: needs only torch, click (and optionally rich)."""

from capture.cli import capture

capture(prog_name="python -m capture")
