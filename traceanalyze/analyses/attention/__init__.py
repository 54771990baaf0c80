"""`attention`: every attention call in a trace, what ran, how well, and why not faster.

Rules (which ops and kernels are attention, where ops record their arguments, PyTorch's SDPA
dispatch rules) are data in :mod:`.rules` and :mod:`.dispatch`; :mod:`.model` assembles the
result.
"""

from traceanalyze.analyses.attention.model import (
    ATTENTION_COLUMNS,
    DEFINITIONS,
    AttentionResult,
    attention,
    attention_steps,
)

__all__ = ["ATTENTION_COLUMNS", "DEFINITIONS", "AttentionResult", "attention", "attention_steps"]
