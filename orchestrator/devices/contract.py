"""The contract every device backend passes: sim, host (local, ssh, agent), iphone (fakes).

Shipped with the package, like a conformance checker, so each backend's tests call it unchanged.
"""

from __future__ import annotations

from orchestrator.devices.base import Device
from orchestrator.protocol import TrialResult, TrialSpec
from orchestrator.protocol.device import Artifacts, DeviceInfo, PrepareReport, StreamProbe, Telemetry, TrialFailure


def contract_spec(engine: str, model: str, trial_id: str = "contract-0000", **over: object) -> TrialSpec:
    fields: dict[str, object] = {
        "run_id": "contract", "trial_id": trial_id, "engine": engine, "model": model, "prompt_tokens": 8,
        "decode_tokens": 8, "chunk_width": 1, "seed": 1,
    }
    fields.update(over)
    return TrialSpec.model_validate(fields)


async def check_device_contract(device: Device, *, engine: str, model: str, timeout: float = 300.0,
                                probes: bool = True) -> None:
    """Raise AssertionError naming the broken clause; return None when the backend conforms. `probes`: the
    backend measures its stream ceiling and runs the throttle probe (False: it says None to both)."""
    info = await device.info()
    assert isinstance(info, DeviceInfo), "info() must return DeviceInfo"
    assert info.id == device.id, f"info().id {info.id!r} != device.id {device.id!r}"

    first = await device.prepare(Artifacts())
    again = await device.prepare(Artifacts())
    assert isinstance(first, PrepareReport) and isinstance(again, PrepareReport)
    assert again.skipped, "a second prepare() of the same harness must skip the install"
    assert again.installed == first.installed

    measured, throughput = await device.stream_probe(), await device.throttle_probe()
    if probes:
        assert isinstance(measured, StreamProbe) and measured.gb_s > 0, f"probe() must measure GB/s: {measured!r}"
        assert isinstance(throughput, float) and throughput > 0, f"throttle_probe() must measure: {throughput!r}"
    else:
        assert measured is None and throughput is None, "a backend without probes says None"

    reading = await device.telemetry()
    assert isinstance(reading, Telemetry), "telemetry() must return Telemetry"
    if reading.thermal_state is None:
        assert "thermal_state" in reading.unavailable, "an unreadable thermal state must be named in unavailable"

    spec = contract_spec(engine, model)
    result = await device.run_trial(spec, timeout)
    assert isinstance(result, TrialResult), f"a valid trial must succeed, got {result!r}"
    assert result.trial_id == spec.trial_id and result.run_id == spec.run_id, "result must name its trial"
    assert result.trial1 is not None and len(result.trial1.token_ids) == spec.decode_tokens
    assert (result.decode_tok_s() or 0) > 0, "decode tok/s must be positive"

    for bad in (contract_spec("no-such-engine", model, "contract-0001"),):
        failure = await device.run_trial(bad, timeout)
        assert isinstance(failure, TrialFailure), f"an unknown engine must come back as a TrialFailure: {failure!r}"

    hung = await device.run_trial(contract_spec(engine, model, "contract-0002", decode_tokens=4096), 1e-3)
    assert isinstance(hung, TrialFailure) and hung.kind == "hung", f"a trial over its timeout is 'hung': {hung!r}"

    await device.close()
    await device.close()
