"""`orch agent`: serve the device boundary of this host's devices as JSON lines on stdin/stdout."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import TextIO

from orchestrator.config.fleet import Fleet
from orchestrator.devices import open_device
from orchestrator.devices.agent_client import AGENT_PROTOCOL, AgentCpu, AgentError, Pushed, Reply, Request
from orchestrator.devices.base import Device
from orchestrator.protocol import TrialResult
from orchestrator.protocol.device import DeviceUnavailable
from orchestrator.runtimes import catalog


def _send(stdout: TextIO, reply: Reply) -> None:
    stdout.write(reply.model_dump_json() + "\n")
    stdout.flush()


async def _handle(req: Request, device: Device | None, stdout: TextIO) -> tuple[Reply, Device | None]:
    if req.op == "open":
        if req.device is None:
            return Reply(id=req.id, error=AgentError(kind="bad_request", message="open needs a device")), device
        if device is not None:
            await device.close()
        opened, _clock = open_device(Fleet(devices=[req.device]), req.device.id, launchers=catalog.adapter_for)
        return Reply(id=req.id), opened
    if device is None:
        return Reply(id=req.id, error=AgentError(kind="bad_request", message="no device open")), None
    if req.op == "info":
        return Reply(id=req.id, info=await device.info()), device
    if req.op == "prepare":
        if req.artifacts is None:
            return Reply(id=req.id, error=AgentError(kind="bad_request", message="prepare needs artifacts")), device

        def pushed(name: str, sent: int, total: int) -> None:  # progress replies ahead of the final one
            _send(stdout, Reply(id=req.id, pushed=Pushed(name=name, sent=sent, total=total)))

        return Reply(id=req.id, report=await device.prepare(req.artifacts, progress=pushed)), device
    if req.op == "telemetry":
        return Reply(id=req.id, telemetry=await device.telemetry()), device
    if req.op == "stream_probe":
        return Reply(id=req.id, stream_probe=await device.stream_probe()), device
    if req.op == "throttle_probe":
        return Reply(id=req.id, throughput=await device.throttle_probe()), device
    if req.op == "cpu_sample":
        sample = await device.cpu_sample()
        return Reply(id=req.id, cpu=AgentCpu.of(sample) if sample is not None else None), device
    if req.op == "health":
        return Reply(id=req.id, health=await device.health()), device
    if req.op == "run_trial":
        if req.spec is None or req.timeout is None:
            bad = AgentError(kind="bad_request", message="run_trial needs spec and timeout")
            return Reply(id=req.id, error=bad), device
        outcome = await device.run_trial(req.spec, req.timeout)
        if isinstance(outcome, TrialResult):
            return Reply(id=req.id, result=outcome), device
        return Reply(id=req.id, failure=outcome), device
    await device.close()
    return Reply(id=req.id), None


def _protocol_of(line: str) -> object:
    """The agent protocol a request line says it speaks (checked before the request itself: another
    version's operations would only read as a bad request)."""
    try:
        sent = json.loads(line)
    except ValueError:
        return AGENT_PROTOCOL  # not JSON: the request's own check says what is wrong
    return sent.get("protocol", AGENT_PROTOCOL) if isinstance(sent, dict) else AGENT_PROTOCOL


async def serve(stdin: TextIO, stdout: TextIO) -> int:
    """One request per line in, one reply per line out, until end of input or `close`."""
    loop = asyncio.get_running_loop()
    device: Device | None = None
    try:
        while True:
            line = await loop.run_in_executor(None, stdin.readline)
            if not line:
                return 0
            if not line.strip():
                continue
            if (theirs := _protocol_of(line)) != AGENT_PROTOCOL:
                _send(stdout, Reply(id=-1, error=AgentError(kind="bad_request", message=(
                    f"the controller speaks agent protocol {theirs}, this agent {AGENT_PROTOCOL}: run the same orch "
                    "on both (a fleet's host gets the controller's own when it connects)"))))
                continue
            try:
                req = Request.model_validate_json(line)
            except ValueError as exc:
                _send(stdout, Reply(id=-1, error=AgentError(kind="bad_request", message=f"bad request: {exc}")))
                continue
            try:
                reply, device = await _handle(req, device, stdout)
            except DeviceUnavailable as exc:
                reply = Reply(id=req.id, error=AgentError(kind="unavailable", message=str(exc), fix=exc.fix,
                                                          state=exc.state))
            except Exception as exc:  # the agent must answer, whatever a backend does
                reply = Reply(id=req.id, error=AgentError(kind="internal", message=f"{type(exc).__name__}: {exc}"))
            _send(stdout, reply)
            if req.op == "close":
                return 0
    finally:
        if device is not None:
            await device.close()


def main() -> int:
    # Libraries that print would corrupt the reply stream: give them stderr, keep stdout for replies.
    out = sys.stdout
    sys.stdout = sys.stderr
    return asyncio.run(serve(sys.stdin, out))
