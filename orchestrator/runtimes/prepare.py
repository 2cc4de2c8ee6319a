"""Make a plan's model artifacts ahead of its run, on this machine: each arm's runtime converts the
source model to what it loads (cached by content hash), so no trial waits behind a conversion
and the settle gate is not fooled by a conversion's heat."""

from __future__ import annotations

import os
import tempfile
import time

from orchestrator.config.plan import Plan
from orchestrator.devices.runners import LocalRunner
from orchestrator.protocol import TrialSpec
from orchestrator.runtimes.base import RuntimeContext, adapter_for
from orchestrator.runtimes.envs import installed
from orchestrator.runtimes.process import ArtifactError, DriverAdapter


async def prepare_plan(plan: Plan) -> list[tuple[str, str]]:
    """(arm, what happened) for every arm: made, ready, not installed, failed, or nothing to make."""
    out: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as work:
        ctx = RuntimeContext(LocalRunner(), work, "local")
        for arm in plan.arms:
            adapter = adapter_for(arm.runtime)
            if not isinstance(adapter, DriverAdapter):
                out.append((arm.name, f"{arm.runtime}: nothing to convert"))
                continue
            if installed(arm.runtime) is None:
                out.append((arm.name, f"failed: {arm.runtime} is not installed: run `orch runtimes install "
                                      f"{arm.runtime}`"))
                continue
            spec = TrialSpec(run_id="prepare", trial_id=arm.name, engine=arm.runtime,
                             model=os.path.expanduser(plan.model), prompt_tokens=plan.trial.prompt_tokens,
                             decode_tokens=plan.trial.decode_tokens, tuning=dict(arm.engine))
            t0 = time.monotonic()
            try:
                art = await adapter.artifact(ctx, spec)
            except ArtifactError as exc:
                out.append((arm.name, f"failed: {exc}" + (f"\n{exc.detail}" if exc.detail else "")))
                continue
            took = time.monotonic() - t0
            out.append((arm.name, f"{arm.runtime} {art.quant_class} ready ({took:.0f} s): {art.path}"))
    return out


__all__ = ["prepare_plan"]
