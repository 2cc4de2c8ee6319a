"""Make a plan's model artifacts ahead of its run, on this machine or a fleet's hosts: each arm's runtime converts the
source model to what it loads (cached by content hash), so no trial waits behind a conversion
and the settle gate is not fooled by a conversion's heat."""

from __future__ import annotations

import time
from typing import NamedTuple

from orchestrator.config.plan import Plan
from orchestrator.protocol.device import DeviceUnavailable
from orchestrator.runners import LocalRunner, Runner, RunnerError
from orchestrator.runners.cache import RuntimeContext, host_cache
from orchestrator.runtimes import catalog
from orchestrator.runtimes.envs import installed_on
from orchestrator.runtimes.process import ArtifactError, DriverAdapter


class ArmPrepared(NamedTuple):
    arm: str
    message: str  # made, ready, nothing to make, or why it failed
    failed: bool = False


async def prepare_plan(plan: Plan, runner: Runner | None = None) -> list[ArmPrepared]:
    """(arm, what happened) for every arm: made, ready, not installed, failed, or nothing to make.
    On this machine, or on the runner's host (the model put in its cache folder as a run would put it,
    or, with `model_location: device`, read at the plan's path as that host sees it)."""
    runner = runner or LocalRunner()
    where = "" if isinstance(runner, LocalRunner) else f" on {runner.name}"
    out: list[ArmPrepared] = []
    ctx = RuntimeContext(runner, f"{await host_cache(runner)}/work", runner.name)
    model: str | Exception | None = None  # put on the host once, when the first arm needs it
    for arm in plan.arms:
        adapter = catalog.adapter_for(arm.runtime)
        if not isinstance(adapter, DriverAdapter):
            out.append(ArmPrepared(arm.name, f"{arm.runtime}: nothing to convert"))
            continue
        if await installed_on(runner, arm.runtime) is None:
            fleet = "" if isinstance(runner, LocalRunner) else f" --fleet F --host {runner.name}"
            out.append(ArmPrepared(arm.name, f"failed: {arm.runtime} is not installed{where}: run `orch runtimes "
                                             f"install {arm.runtime}{fleet}`", failed=True))
            continue
        if model is None:
            try:
                model = await _model_on(runner, plan)
            except (DeviceUnavailable, RunnerError, FileNotFoundError) as exc:
                model = exc
        if isinstance(model, Exception):
            out.append(ArmPrepared(arm.name, f"failed: the model could not be put{where}: {model}", failed=True))
            continue
        spec = plan.spec_for(arm.name, run_id="prepare", trial_id=arm.name, model=model)
        t0 = time.monotonic()
        try:
            art = await adapter.artifact(ctx, spec)
        except ArtifactError as exc:
            out.append(ArmPrepared(arm.name, f"failed: {exc}" + (f"\n{exc.detail}" if exc.detail else ""), failed=True))
            continue
        took = time.monotonic() - t0
        out.append(ArmPrepared(arm.name, f"{arm.runtime} {art.quant_class} ready{where} ({took:.0f} s): {art.path}"))
    return out


async def _model_on(runner: Runner, plan: Plan) -> str:
    """The plan's model as the runner's host reads it: an SSH host gets the controller's file (and what
    the arms read beside it) in its cache folder first, exactly where a run's prepare puts them."""
    if plan.model_location == "device" or isinstance(runner, LocalRunner):
        return await runner.expand(plan.model)
    from orchestrator.runners.deploy import push_to_host
    from orchestrator.runtimes.artifacts import host_files, model_file

    if not model_file(plan).is_file():
        raise FileNotFoundError(f"no model file {model_file(plan)} on this machine (model_location: controller)")
    wanted = host_files(plan)
    placed = await push_to_host(runner, await host_cache(runner), wanted.files, runner.name)
    return next(p.path for p in placed if p.name == wanted.model)


__all__ = ["ArmPrepared", "prepare_plan"]
