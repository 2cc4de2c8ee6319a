"""A run: every device's session concurrently, one journal, resumable."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from orchestrator.clock import Clock
from orchestrator.devices.base import Device
from orchestrator.protocol.device import Artifacts
from orchestrator.results.records import (
    EARLY_STOPS,
    AttemptFailed,
    AttemptSpoiled,
    LookRecord,
    Manifest,
    PreparedRecord,
    Record,
    SessionStopped,
    StopReason,
    StreamProbeRecord,
    TrialRecord,
)
from orchestrator.schedule.pool import pools_for
from orchestrator.schedule.session import Observer, Session, SessionState, Sink

OpenDevice = Callable[[str], tuple[Device, Clock]]


def resume_state(manifest: Manifest, records: list[Record]) -> dict[str, SessionState]:
    """What each device already did, from the journal; devices whose session ended are left out."""
    states = {s.device: SessionState() for s in manifest.sessions}
    for rec in records:
        if isinstance(rec, TrialRecord):
            st = states[rec.device]
            st.used_s += rec.settle.waited_s + rec.duration_s
            st.done.add(rec.trial_id)
            st.attempts.pop(rec.trial_id, None)
            if rec.result is not None and rec.excluded is None:
                v = manifest.plan.decision.measure(rec.result)
                if v is not None:
                    st.values.setdefault(rec.arm, []).append((rec.block, v))
        elif isinstance(rec, AttemptFailed | AttemptSpoiled):
            states[rec.device].attempts[rec.trial_id] = rec.attempt
            states[rec.device].used_s += rec.settle_waited_s + rec.duration_s
        elif isinstance(rec, PreparedRecord):
            states[rec.device].used_s += rec.seconds
            states[rec.device].prepared = rec
        elif isinstance(rec, LookRecord):
            states[rec.device].looks_done = rec.look + 1
        elif isinstance(rec, StreamProbeRecord):
            states[rec.device].probed = True
    return {d: s for d, s in states.items() if not ended(manifest, records, d, s)}


def ended(manifest: Manifest, records: list[Record], device: str, state: SessionState) -> bool:
    """The session stopped where its rule said, or completed with every planned trial on record (a
    trial whose record was lost to a corrupt line runs again)."""
    last = next((r for r in reversed(records) if isinstance(r, SessionStopped) and r.device == device), None)
    if last is None:
        return False
    return last.reason in EARLY_STOPS or (
        last.reason == "completed" and len(state.done) == len(manifest.session(device).trials))


async def run_sessions(
    manifest: Manifest,
    journal: Sink,
    open_device: OpenDevice,
    states: dict[str, SessionState],
    *,
    observe: Observer = lambda device, record: None,
    artifacts: Mapping[str, Artifacts] | None = None,
    records: list[Record] | None = None,
    accept_change: bool = False,
) -> dict[str, StopReason]:
    """Run the sessions in `states` concurrently; each device's trials strictly in planned order.
    `artifacts`: what each device's prepare puts on it (by device id; none where absent). `records`:
    the journal so far (a resumed run), for the class pools of pooled phones. `accept_change`: resume
    sessions on devices that now say they are another model, chip, OS or harness build."""
    pools = pools_for(manifest, records or [], list(states))

    async def one(device_id: str) -> StopReason:
        device, clock = open_device(device_id)
        session = Session(
            run_id=manifest.run_id, plan=manifest.plan, schedule=manifest.session(device_id), device=device,
            clock=clock, journal=journal, state=states[device_id],
            artifacts=(artifacts or {}).get(device_id, Artifacts()), observe=observe, look_seed=manifest.seed,
            pool=pools.get(device_id), accept_change=accept_change,
        )
        try:
            return await session.run()
        finally:
            await device.close()

    ids = [s.device for s in manifest.sessions if s.device in states]
    tasks = [asyncio.ensure_future(one(d)) for d in ids]
    try:
        reasons = await asyncio.gather(*tasks)
    except BaseException:  # a journal that cannot be written, Ctrl-C: no session runs on behind the failure
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return dict(zip(ids, reasons, strict=True))
