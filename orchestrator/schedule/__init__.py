"""Trial order, the settle gate, per-device sessions and whole runs. Never imports a backend."""

from orchestrator.schedule.order import session_plan, williams
from orchestrator.schedule.run import OpenDevice, resume_state, run_sessions
from orchestrator.schedule.session import Session, SessionState
from orchestrator.schedule.settle import SettleGate

__all__ = [
    "OpenDevice", "Session", "SessionState", "SettleGate", "resume_state", "run_sessions", "session_plan", "williams",
]
