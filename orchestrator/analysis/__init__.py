"""Pre-committed A/B decision rule and group-sequential looks (pure functions over numpy arrays)."""

from orchestrator.analysis.decision import (
    ArmSample,
    Comparison,
    InsufficientData,
    Verdict,
    compare,
    mde,
)
from orchestrator.analysis.sequential import LookAction, LookDecision, due_look, look

__all__ = [
    "ArmSample",
    "Comparison",
    "InsufficientData",
    "LookAction",
    "LookDecision",
    "Verdict",
    "compare",
    "due_look",
    "look",
    "mde",
]
