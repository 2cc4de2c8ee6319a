"""The contract checker itself: it passes a conforming fake and names what a broken one breaks."""

from __future__ import annotations

import asyncio
import inspect
import typing

import pytest

from orchestrator.devices import FakeDevice
from orchestrator.devices.agent_client import AgentDevice, Request
from orchestrator.devices.base import Device
from orchestrator.devices.contract import check_device_contract
from orchestrator.protocol import Generation, TrialResult, TrialSpec
from orchestrator.protocol.device import TrialFailure


def good(spec: TrialSpec) -> TrialResult | TrialFailure:
    if spec.engine != "e":
        return TrialFailure(kind="launch_failed", message="no such engine")
    if spec.decode_tokens > 100:
        return TrialFailure(kind="hung", message="killed")
    n = spec.decode_tokens
    gen = Generation(prefill_ns=1000, ttft_ns=2000, token_ids=list(range(n)),
                     token_times_ns=[2000 + 1000 * i for i in range(n)])
    return TrialResult(run_id=spec.run_id, trial_id=spec.trial_id, status="ok", engine="e", engine_version="1",
                       harness_build="b", model=spec.model, prompt_tokens=spec.prompt_tokens, chunk_width=1,
                       trial1=gen)


def test_fake_device_conforms() -> None:
    device = FakeDevice("fake", good)
    asyncio.run(check_device_contract(device, engine="e", model="m", probes=False))
    assert device.closed and len(device.specs) == 3


def test_contract_catches_a_device_that_never_hangs() -> None:
    def never_hangs(spec: TrialSpec) -> TrialResult | TrialFailure:
        return good(spec.model_copy(update={"decode_tokens": 8})) if spec.engine == "e" else good(spec)

    with pytest.raises(AssertionError, match="hung"):
        asyncio.run(check_device_contract(FakeDevice("fake", never_hangs), engine="e", model="m", probes=False))


def test_the_agent_carries_every_operation_of_the_device_boundary() -> None:
    """Derived from `Device` itself: a new boundary operation that the agent protocol forgets fails here."""
    boundary = {name for name, f in vars(Device).items() if inspect.iscoroutinefunction(f) and not name.startswith("_")}
    ops = set(typing.get_args(Request.model_fields["op"].annotation)) - {"open"}
    assert boundary == ops, f"agent ops {sorted(ops)} vs the boundary {sorted(boundary)}"
    assert all(name in vars(AgentDevice) for name in boundary), "AgentDevice forwards each one to the agent"


def test_an_agent_of_another_protocol_says_so_and_keeps_serving() -> None:
    """A controller and an agent from different orch versions: the agent names both protocols and still
    answers requests of its own."""
    import io
    import json

    from orchestrator.agent_server import serve
    from orchestrator.devices.agent_client import AGENT_PROTOCOL, Reply

    lines = [json.dumps({"id": 1, "op": "probe", "protocol": AGENT_PROTOCOL - 1}),
             json.dumps({"id": 2, "op": "info", "protocol": AGENT_PROTOCOL})]
    out = io.StringIO()
    assert asyncio.run(serve(io.StringIO("\n".join(lines) + "\n"), out)) == 0
    first, second = (Reply.model_validate_json(x) for x in out.getvalue().splitlines())
    assert first.error is not None
    assert f"protocol {AGENT_PROTOCOL - 1}, this agent {AGENT_PROTOCOL}" in first.error.message
    assert second.id == 2 and second.error is not None and second.error.message == "no device open"
