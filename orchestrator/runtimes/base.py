"""How a competitor runtime runs one fresh trial on a host: the adapter interface.

The harness engines (`rawloop-cpu`) run through the harness CLI (`devices/host.py`); every other
runtime has an adapter here: which model artifact it needs and how to make it from the one source
model, how to launch one fresh process per trial on the host's runner, and how to parse what it
prints into the typed TrialResult (or a typed TrialFailure holding the tail of its output).
"""

from __future__ import annotations

import abc

from orchestrator.protocol import TrialResult, TrialSpec
from orchestrator.protocol.device import TrialFailure
from orchestrator.runners.cache import RuntimeContext


class RuntimeAdapter(abc.ABC):
    name: str  # its entry in the catalog (``runtimes.catalog``), which holds every other fact about it

    @abc.abstractmethod
    async def run_trial(self, ctx: RuntimeContext, spec: TrialSpec, timeout: float) -> TrialResult | TrialFailure:
        """One fresh process of this runtime for `spec`; never raises for a runtime fault."""
