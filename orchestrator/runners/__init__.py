"""Where commands run: the local machine (subprocess) or a host over SSH (``ssh.py``).

Commands are argv lists, never shell strings: the local runner execs them directly, the SSH runner
quotes every word with ``shlex.quote`` so names with spaces, quotes or ``$(...)`` arrive intact and
execute nothing.
"""

from orchestrator.runners.base import (
    AuthRefused,
    CommandResult,
    ConnectionLost,
    HostKeyRejected,
    LineSink,
    Runner,
    RunnerError,
    Stream,
    Unreachable,
)
from orchestrator.runners.local import LocalRunner

__all__ = ["AuthRefused", "CommandResult", "ConnectionLost", "HostKeyRejected", "LineSink", "LocalRunner", "Runner",
           "RunnerError", "Stream", "Unreachable"]
