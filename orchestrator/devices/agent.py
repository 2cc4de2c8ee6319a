"""Remote devices through `orch agent`: the device boundary as JSON lines over a runner's stream.

The controller starts `orch agent` on the lab host (over SSH), sends `open` with the device's
config, then one request per boundary call; replies are typed with the same pydantic models. A
device behind an agent looks exactly like a local one to the scheduler.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.config.fleet import HostDeviceConfig, IphoneDeviceConfig
from orchestrator.config.sim import SimDeviceConfig
from orchestrator.devices.base import (
    Artifacts,
    Device,
    DeviceInfo,
    DeviceUnavailable,
    Health,
    HealthState,
    PrepareReport,
    Telemetry,
    TrialFailure,
)
from orchestrator.devices.runners import ConnectionLost, Runner, RunnerError, Stream
from orchestrator.protocol import TrialResult, TrialSpec

AGENT_PROTOCOL = 1
CALL_TIMEOUT_S = 120.0
PREPARE_TIMEOUT_S = 1900.0

DeviceConfig = Annotated[SimDeviceConfig | HostDeviceConfig | IphoneDeviceConfig, Field(discriminator="kind")]


class _Msg(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Request(_Msg):
    id: int
    op: Literal["open", "info", "prepare", "telemetry", "run_trial", "health", "close"]
    protocol: int = AGENT_PROTOCOL
    device: DeviceConfig | None = None
    artifacts: Artifacts | None = None
    spec: TrialSpec | None = None
    timeout: float | None = None


class AgentError(_Msg):
    kind: Literal["unavailable", "bad_request", "internal"]
    message: str
    fix: str | None = None
    state: HealthState = "error"


class Reply(_Msg):
    id: int
    info: DeviceInfo | None = None
    report: PrepareReport | None = None
    telemetry: Telemetry | None = None
    result: TrialResult | None = None
    failure: TrialFailure | None = None
    health: Health | None = None
    error: AgentError | None = None


class AgentDevice(Device):
    """A device served by `orch agent` on another host."""

    def __init__(self, config: DeviceConfig, runner: Runner, command: list[str]):
        self.id = config.id
        # On the agent's host the device is local.
        local = {"host": "local", **({"via": "direct"} if config.kind == "host" else {})}
        self.config = config.model_copy(update=local)
        self.runner = runner
        self.command = command
        self._stream: Stream | None = None
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()

    async def _open(self) -> Stream:
        stream = await self.runner.open_stream([*self.command, "agent"])
        self._stream = stream
        await self._exchange(Request(id=next(self._ids), op="open", device=self.config), CALL_TIMEOUT_S)
        return stream

    async def _exchange(self, request: Request, timeout: float) -> Reply:
        assert self._stream is not None
        await self._stream.send(request.model_dump_json())
        while True:
            line = await self._stream.receive(timeout)
            try:
                reply = Reply.model_validate_json(line)
            except ValueError:
                continue  # not ours: a library printing to stdout on the far side
            if reply.id == request.id:
                break
        if reply.error is not None:
            raise DeviceUnavailable(f"{self.id} (agent): {reply.error.message}", fix=reply.error.fix,
                                    state=reply.error.state)
        return reply

    async def _call(self, wait: float, **fields: object) -> Reply:
        """One request; on a dead link, reconnect once before giving up."""
        async with self._lock:
            for attempt in (1, 2):
                try:
                    if self._stream is None:
                        await self._open()
                    return await self._exchange(Request.model_validate({"id": next(self._ids), **fields}), wait)
                except (RunnerError, TimeoutError) as exc:
                    await self._drop()
                    if attempt == 2 or isinstance(exc, TimeoutError):
                        state = exc.state if isinstance(exc, RunnerError) else "unreachable"
                        raise DeviceUnavailable(f"{self.id} (agent): {exc or 'no reply'}",
                                                fix=getattr(exc, "fix", None), state=state) from None
            raise AssertionError("unreachable")

    async def _drop(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.close()

    async def info(self) -> DeviceInfo:
        reply = await self._call(CALL_TIMEOUT_S, op="info")
        assert reply.info is not None
        return reply.info

    async def prepare(self, artifacts: Artifacts) -> PrepareReport:
        reply = await self._call(PREPARE_TIMEOUT_S, op="prepare", artifacts=artifacts)
        assert reply.report is not None
        return reply.report

    async def telemetry(self) -> Telemetry:
        reply = await self._call(CALL_TIMEOUT_S, op="telemetry")
        assert reply.telemetry is not None
        return reply.telemetry

    async def health(self) -> Health:
        try:
            reply = await self._call(CALL_TIMEOUT_S, op="health")
        except DeviceUnavailable as exc:
            return Health(state=exc.state, fix=exc.fix, detail=str(exc))
        assert reply.health is not None
        return reply.health

    async def run_trial(self, spec: TrialSpec, timeout: float) -> TrialResult | TrialFailure:
        try:
            reply = await self._call(timeout + CALL_TIMEOUT_S, op="run_trial", spec=spec, timeout=timeout)
        except DeviceUnavailable as exc:
            return TrialFailure(kind="disconnected", message=str(exc))
        if reply.result is not None:
            return reply.result
        assert reply.failure is not None
        return reply.failure

    async def close(self) -> None:
        if self._stream is not None:
            try:
                async with self._lock:
                    await self._exchange(Request(id=next(self._ids), op="close"), 30)
            except (RunnerError, TimeoutError, DeviceUnavailable, ConnectionLost):
                pass
            await self._drop()
        await self.runner.close()
