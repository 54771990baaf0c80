"""How this package collects its lazy queries.

Its frames are small (a rank's few thousand activities, some tens of thousands of CPU events),
so a query's fixed cost is most of its time: Polars' default engine adds ~0.1 ms to every
collect of such a frame, its in-memory engine (the one eager DataFrame steps run on) a few
microseconds. The results are the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from polars._typing import EngineType

IN_MEMORY: EngineType = "in-memory"
