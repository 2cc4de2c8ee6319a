"""What the commands do: load and cross-check inputs, start or resume a run, derive its tables.

The CLI parses and prints; everything it runs is here.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import platform
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import pandas as pd

from orchestrator.analysis.prerun import mde_notes
from orchestrator.config.candidates import CeilingTable
from orchestrator.config.fleet import Fleet, HostDeviceConfig, IphoneDeviceConfig
from orchestrator.config.loader import ConfigError, Problem, key_line, load_fleet, load_plan
from orchestrator.config.plan import Plan
from orchestrator.config.sim import SimDeviceConfig
from orchestrator.derive import RunOutcome, all_ran, derive_locked, stop_reasons
from orchestrator.devices import open_device
from orchestrator.protocol.device import Artifacts, DeviceInfo, DeviceUnavailable, Health, Telemetry
from orchestrator.results.journal import Journal
from orchestrator.results.records import (
    Manifest,
    Record,
    RunFinished,
    RunStarted,
)
from orchestrator.results.store import RunDir, create_run, new_run_id, read_registry
from orchestrator.results.trials import trial_rows
from orchestrator.runtimes import catalog
from orchestrator.runtimes.artifacts import (
    artifacts_for,
    deploys,
    model_file,
    model_problem,
    sha256_file,
    tuning_file,
    tuning_problem,
)
from orchestrator.schedule import SessionState, resume_state, run_sessions, session_plan
from orchestrator.schedule.pool import classes, fleet_chips, share
from orchestrator.schedule.session import Observer


def load_inputs(fleet_path: Path, plan_path: Path) -> tuple[Fleet, Plan]:
    """Both files, validated alone and against each other; every problem located."""
    problems: list[Problem] = []
    loaded: dict[str, Fleet | Plan] = {}
    for key, path, loader in (("fleet", fleet_path, load_fleet), ("plan", plan_path, load_plan)):
        try:
            loaded[key] = loader(path)
        except ConfigError as exc:
            problems += exc.problems
    if problems:
        raise ConfigError(problems)
    fleet, plan = loaded["fleet"], loaded["plan"]
    assert isinstance(fleet, Fleet) and isinstance(plan, Plan)
    cross_check(fleet, plan, fleet_path, plan_path)
    return fleet, plan


def cross_check(fleet: Fleet, plan: Plan, fleet_path: Path, plan_path: Path) -> None:
    problems: list[Problem] = []

    def at(path: Path, field: str, message: str, *loc: int | str) -> None:
        problems.append(Problem(str(path), key_line(path, *loc), field, message))

    for i, arm in enumerate(plan.arms):
        if catalog.get(arm.runtime) is None:
            at(plan_path, f"arms[{i}].runtime",
               f"unknown runtime {arm.runtime!r} (known: {', '.join(catalog.CATALOG)})", "arms", i, "runtime")
    ids = [d.id for d in fleet.devices]
    for i, dev_id in enumerate(plan.devices or []):
        if dev_id not in ids:
            at(plan_path, f"devices[{i}]", f"no device {dev_id!r} in {fleet_path}", "devices", i)
    host, iphone = catalog.runs_on("host"), catalog.runs_on("iphone")
    for i, dev in enumerate(fleet.devices):
        if plan.devices is not None and dev.id not in plan.devices:
            continue
        for j, arm in enumerate(plan.arms):
            if isinstance(dev, HostDeviceConfig) and arm.runtime not in host:
                at(plan_path, f"arms[{j}].runtime",
                   f"host device {dev.id!r} runs {', '.join(host)} only, not {arm.runtime!r}",
                   "arms", j, "runtime")
            elif isinstance(dev, IphoneDeviceConfig) and arm.runtime not in (*iphone, *dev.engine_apps):
                at(fleet_path, f"devices[{i}].engine_apps",
                   f"iphone {dev.id!r}: no app runs {arm.runtime!r} (plan arm {arm.name!r}); the harness app runs "
                   f"{', '.join(iphone)}: map others in engine_apps", "devices", i)
            elif isinstance(dev, SimDeviceConfig) and arm.runtime not in dev.runtimes:
                at(fleet_path, f"devices[{i}].runtimes",
                   f"no ground truth for runtime {arm.runtime!r} (plan arm {arm.name!r})", "devices", i, "runtimes")
    if (why := model_problem(plan, fleet)) is not None:
        at(plan_path, "model", why, "model")
    for i, arm in enumerate(plan.arms):
        if (why := tuning_problem(arm)) is not None:
            at(plan_path, f"arms[{i}].tuning_table", why, "arms", i, "tuning_table")
    for k, name in enumerate(plan.trial.clear_caches):
        clears = [entry.caches if (entry := catalog.get(arm.runtime)) else None for arm in plan.arms]
        if all(caches is not None and name not in caches for caches in clears):
            names = sorted({c for caches in clears for c in caches or ()})
            at(plan_path, f"trial.clear_caches[{k}]", f"no arm's runtime has a cache {name!r} to clear "
               f"(they have: {', '.join(names) or 'none'})", "trial", "clear_caches", k)
    if problems:
        raise ConfigError(problems)


@dataclass(frozen=True)
class DeviceRow:
    id: str
    kind: str
    host: str
    health: Health
    info: DeviceInfo | None
    telemetry: Telemetry | None


async def survey(fleet: Fleet, timeout: float = 60.0) -> list[DeviceRow]:
    """Every device of the fleet, concurrently: health with its fix, identity, thermal readings."""

    async def one(dev_id: str) -> DeviceRow:
        cfg = fleet.device(dev_id)
        info, reading = None, None
        device, _clock = open_device(fleet, dev_id, launchers=catalog.adapter_for)
        try:
            health = await asyncio.wait_for(device.health(), timeout)
            if health.state == "ok":
                info = await asyncio.wait_for(device.info(), timeout)
                reading = await asyncio.wait_for(device.telemetry(), timeout)
            elif health.state == "harness_missing":  # reachable: say what it is, before anything is installed
                with contextlib.suppress(DeviceUnavailable, TimeoutError):
                    info = await asyncio.wait_for(device.info(), timeout)
                    reading = await asyncio.wait_for(device.telemetry(), timeout)
        except DeviceUnavailable as exc:
            health = Health(state=exc.state, fix=exc.fix, detail=str(exc))
        except TimeoutError:
            health = Health(state="unreachable", fix="check the device and its host",
                            detail=f"no answer in {timeout} s")
        finally:
            await device.close()
        return DeviceRow(dev_id, cfg.kind, cfg.host, health, info, reading)

    return list(await asyncio.gather(*(one(d.id) for d in fleet.devices)))


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("orchestrator", "numpy", "pandas", "pydantic", "scipy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "unknown"
    return out


def new_manifest(fleet: Fleet, plan: Plan, fleet_path: Path, plan_path: Path, seed: int | None = None) -> Manifest:
    """Everything the run commits to before its first trial, the decision rule's hash included."""
    seed = plan.seed if seed is None else seed
    devices = [d.id for d in fleet.devices if plan.devices is None or d.id in plan.devices]
    shares = {d: share(plan, len(members)) for members in classes(plan, fleet_chips(fleet), devices).values()
              for d in members}
    return Manifest(
        run_id=new_run_id(plan.name), created=datetime.now(UTC).isoformat(timespec="seconds"), plan=plan,
        plan_file=str(plan_path), plan_sha256=_digest(plan.model_dump(mode="json")), rule_digest=plan.decision.digest(),
        fleet=fleet, fleet_file=str(fleet_path), seed=seed,
        sessions=[session_plan(plan, d, seed, shares.get(d)) for d in devices], versions=_versions(),
        model_sha256=sha256_file(model_file(plan)) if deploys(plan, fleet) else None,
        tuning_sha256={arm.name: sha256_file(path) for arm in plan.arms if (path := tuning_file(arm)) is not None},
    )


def start_run(manifest: Manifest, results: Path) -> RunDir:
    return create_run(results, manifest)


async def execute(run: RunDir, *, observe: Observer = lambda d, r: None, accept_change: bool = False,
                  ceilings: CeilingTable | None = None) -> RunOutcome:
    """Run (or resume) every session that has not ended; then derive its tables (the audit against `ceilings`).
    Holds the run's lock throughout (RunLocked if another process writes it); a journal that cannot
    be written (JournalWriteError) stops every session at once, the journal whole up to that point."""
    with run.lock():
        manifest = run.manifest()
        records = run.read(manifest).records
        states = resume_state(manifest, records)
        artifacts = _artifacts(manifest)
        journal = Journal(run.journal_path)
        try:
            journal.append(RunStarted(wall=datetime.now(UTC).timestamp(), resumed=bool(records), pid=os.getpid()))
            # Simulated noise follows the run's seed (reproducible), and is fresh for each resumption.
            stream = manifest.seed + sum(1 for r in records if isinstance(r, RunStarted))
            await run_sessions(
                manifest, journal,
                lambda d: open_device(manifest.fleet, d, stream=stream, launchers=catalog.adapter_for), states,
                observe=observe, artifacts=artifacts, records=records, accept_change=accept_change,
            )
            status = "completed" if all_ran(stop_reasons(manifest, run.records())) else "incomplete"
            journal.append(RunFinished(status=status, wall=datetime.now(UTC).timestamp()))
        finally:
            journal.close()
        return derive_locked(run, ceilings=ceilings)  # after the journal's last record: every table is current


def noise_notes(run: RunDir, now: datetime | None = None) -> list[str]:
    """Before a run's first trial: each device's MDE from the noise registry of the run's results folder
    (or that it has no entry), and the registry's flag where a device's noise jumped."""
    manifest = run.manifest()
    return mde_notes(manifest.plan, [s.device for s in manifest.sessions], read_registry(run.path.parent),
                     now or datetime.now(UTC))


def _artifacts(manifest: Manifest) -> dict[str, Artifacts]:
    """What each device's prepare puts on it; a resumed run must find the model and tables it started with."""
    plan, fleet = manifest.plan, manifest.fleet
    where = Path(manifest.plan_file)
    problems: list[tuple[str, tuple[str | int, ...], str]] = []

    def changed(path: Path, then: str) -> str:
        return (f"{path} changed since run {manifest.run_id} started (sha256 {then[:16]}... then, "
                f"{sha256_file(path)[:16]}... now): put the one it started with back, or start a new run")

    if deploys(plan, fleet):
        problem = model_problem(plan, fleet)
        if problem is None and manifest.model_sha256 and sha256_file(model_file(plan)) != manifest.model_sha256:
            problem = changed(model_file(plan), manifest.model_sha256)
        if problem is not None:
            problems.append(("model", ("model",), problem))
    for i, arm in enumerate(plan.arms):
        path, then = tuning_file(arm), manifest.tuning_sha256.get(arm.name)
        problem = tuning_problem(arm)
        if problem is None and path is not None and then and sha256_file(path) != then:
            problem = changed(path, then)
        if problem is not None:
            problems.append((f"arms[{i}].tuning_table", ("arms", i, "tuning_table"), problem))
    if problems:
        raise ConfigError([Problem(str(where), _line(where, *loc), field, why) for field, loc, why in problems])
    return artifacts_for(plan, fleet)


def _line(path: Path, *loc: str | int) -> int:
    try:
        return key_line(path, *loc)
    except (ConfigError, OSError):  # the plan file moved or changed since: the manifest still names it
        return 0


def simulate(fleet: Fleet, plan: Plan) -> tuple[Manifest, list[Record], pd.DataFrame]:
    """A plan on a fleet of simulated devices, in memory (no results folder): the manifest, the journal's
    records and the trial table, through the real scheduler, settle gate, sessions and looks (benchmarks)."""
    from orchestrator.results import MemoryJournal

    manifest = new_manifest(fleet, plan, Path("memory"), Path("memory"))
    journal = MemoryJournal()
    asyncio.run(run_sessions(manifest, journal, lambda d: open_device(fleet, d, launchers=catalog.adapter_for),
                             {s.device: SessionState() for s in manifest.sessions}))
    records: list[Record] = list(journal.records)  # type: ignore[arg-type]
    return manifest, records, trial_rows(manifest, records)
