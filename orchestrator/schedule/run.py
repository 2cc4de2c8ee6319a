"""A run: every device's session concurrently, one journal, resumable."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from orchestrator.clock import Clock
from orchestrator.devices.base import Artifacts, Device
from orchestrator.results.records import (
    EARLY_STOPS,
    AttemptFailed,
    LookRecord,
    Manifest,
    ProbeRecord,
    Record,
    SessionStopped,
    StopReason,
    TrialRecord,
)
from orchestrator.schedule.session import Observer, Session, SessionState, Sink

OpenDevice = Callable[[str], tuple[Device, Clock]]


def resume_state(manifest: Manifest, records: list[Record]) -> dict[str, SessionState]:
    """What each device already did, from the journal; devices whose session ended are left out."""
    states = {s.device: SessionState() for s in manifest.sessions}
    for rec in records:
        if isinstance(rec, TrialRecord):
            st = states[rec.device]
            st.done.add(rec.trial_id)
            st.attempts.pop(rec.trial_id, None)
            if rec.result is not None:
                v = manifest.plan.decision.measure(rec.result)
                if v is not None:
                    st.values.setdefault(rec.arm, []).append((rec.block, v))
        elif isinstance(rec, AttemptFailed):
            states[rec.device].attempts[rec.trial_id] = rec.attempt
        elif isinstance(rec, LookRecord):
            states[rec.device].looks_done = rec.look + 1
        elif isinstance(rec, ProbeRecord):
            states[rec.device].probed = True
    ended = {r.device for r in records if isinstance(r, SessionStopped) and r.reason in ("completed", *EARLY_STOPS)}
    return {d: s for d, s in states.items() if d not in ended}


async def run_sessions(
    manifest: Manifest,
    journal: Sink,
    open_device: OpenDevice,
    states: dict[str, SessionState],
    *,
    observe: Observer = lambda device, record: None,
    artifacts: Artifacts | None = None,
) -> dict[str, StopReason]:
    """Run the sessions in `states` concurrently; each device's trials strictly in planned order."""

    async def one(device_id: str) -> StopReason:
        device, clock = open_device(device_id)
        session = Session(
            run_id=manifest.run_id, plan=manifest.plan, schedule=manifest.session(device_id), device=device,
            clock=clock, journal=journal, state=states[device_id], artifacts=artifacts or Artifacts(),
            observe=observe, seed=manifest.seed,
        )
        try:
            return await session.run()
        finally:
            await device.close()

    ids = [s.device for s in manifest.sessions if s.device in states]
    reasons = await asyncio.gather(*(one(d) for d in ids))
    return dict(zip(ids, reasons, strict=True))
