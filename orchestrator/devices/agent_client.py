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
from orchestrator.devices.base import Device
from orchestrator.devices.interference import CpuSample
from orchestrator.protocol import TrialResult, TrialSpec
from orchestrator.protocol.device import (
    Artifacts,
    DeviceInfo,
    DeviceUnavailable,
    Health,
    HealthState,
    Placed,
    PrepareReport,
    Progress,
    StreamProbe,
    Telemetry,
    TrialFailure,
)
from orchestrator.runners import ConnectionLost, LocalRunner, Runner, RunnerError, Stream
from orchestrator.runners.cache import host_cache
from orchestrator.runners.deploy import push_to_host

# 1: first; 2: the stream probe's operation is `stream_probe` (was `probe`).
AGENT_PROTOCOL = 2
CALL_TIMEOUT_S = 120.0
PREPARE_TIMEOUT_S = 1900.0
PROBE_TIMEOUT_S = 700.0  # the host's own probe allows 600 s

DeviceConfig = Annotated[SimDeviceConfig | HostDeviceConfig | IphoneDeviceConfig, Field(discriminator="kind")]


class _Msg(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Request(_Msg):
    id: int
    op: Literal["open", "info", "prepare", "telemetry", "run_trial", "stream_probe", "throttle_probe", "cpu_sample",
                "health", "close"]
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


class Pushed(_Msg):
    """Progress of a push during `prepare`: sent before the request's final reply, any number of times."""

    name: str
    sent: int
    total: int


class AgentCpu(_Msg):
    """A ``CpuSample`` on the wire (its per-process table as rows: pid, start, name, CPU seconds)."""

    t: float
    busy_s: float
    own_s: float
    cpus: int
    others: list[tuple[int, int, str, float]] = Field(default_factory=list)
    source: str

    @classmethod
    def of(cls, s: CpuSample) -> AgentCpu:
        return cls(t=s.t, busy_s=s.busy_s, own_s=s.own_s, cpus=s.cpus, source=s.source,
                   others=[(pid, start, name, cpu) for (pid, start), (name, cpu) in s.others.items()])

    def sample(self) -> CpuSample:
        return CpuSample(t=self.t, busy_s=self.busy_s, own_s=self.own_s, cpus=self.cpus, source=self.source,
                         others={(pid, start): (name, cpu) for pid, start, name, cpu in self.others})


class Reply(_Msg):
    id: int
    pushed: Pushed | None = None
    info: DeviceInfo | None = None
    report: PrepareReport | None = None
    telemetry: Telemetry | None = None
    result: TrialResult | None = None
    failure: TrialFailure | None = None
    health: Health | None = None
    stream_probe: StreamProbe | None = None
    throughput: float | None = Field(default=None, description="throttle_probe's answer")
    cpu: AgentCpu | None = None
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

    async def _exchange(self, request: Request, timeout: float, progress: Progress | None = None) -> Reply:
        assert self._stream is not None
        await self._stream.send(request.model_dump_json())
        while True:
            line = await self._stream.receive(timeout)
            try:
                reply = Reply.model_validate_json(line)
            except ValueError:
                continue  # not ours: a library printing to stdout on the far side
            if reply.id == request.id and reply.pushed is not None:
                if progress is not None:
                    progress(reply.pushed.name, reply.pushed.sent, reply.pushed.total)
                continue
            if reply.id == request.id:
                break
        if reply.error is not None:
            raise DeviceUnavailable(f"{self.id} (agent): {reply.error.message}", fix=reply.error.fix,
                                    state=reply.error.state)
        return reply

    async def _call(self, wait: float, progress: Progress | None = None, **fields: object) -> Reply:
        """One request; on a dead link, reconnect once before giving up."""
        async with self._lock:
            for attempt in (1, 2):
                try:
                    if self._stream is None:
                        await self._open()
                    request = Request.model_validate({"id": next(self._ids), **fields})
                    return await self._exchange(request, wait, progress)
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

    async def prepare(self, artifacts: Artifacts, progress: Progress | None = None) -> PrepareReport:
        staged, hop = await self._stage(artifacts, progress)
        reply = await self._call(PREPARE_TIMEOUT_S, progress, op="prepare", artifacts=staged)
        assert reply.report is not None
        if not hop:
            return reply.report
        # Bytes sent count both legs: to the agent's host, and from there on to the device (the first
        # leg once, where a phone puts one file into several apps).
        first = {p.name: p for p in hop}
        files = []
        for p in reply.report.files:
            leg = first.pop(p.name, None)
            files.append(p if leg is None else p.model_copy(update={
                "bytes_sent": p.bytes_sent + leg.bytes_sent, "seconds": round(p.seconds + leg.seconds, 3)}))
        return reply.report.model_copy(update={"files": files})

    async def _stage(self, artifacts: Artifacts, progress: Progress | None) -> tuple[Artifacts, list[Placed]]:
        """The files onto the agent's host first (its cache folder, skipped by sha256 like any push);
        the agent's device then takes them from there: a host reads them in place, a phone gets them
        over AFC. An agent on this machine reads the controller's files directly."""
        if not artifacts.files or isinstance(self.runner, LocalRunner):
            return artifacts, []
        try:
            placed = await push_to_host(self.runner, await host_cache(self.runner), artifacts.files,
                                        f"{self.id} (agent host {self.runner.name})", progress)
        except RunnerError as exc:
            raise DeviceUnavailable(f"{self.id} (agent host): {exc}", fix=exc.fix, state=exc.state) from None
        files = [f.model_copy(update={"source": p.path}) for f, p in zip(artifacts.files, placed, strict=True)]
        return artifacts.model_copy(update={"files": files}), placed

    async def telemetry(self) -> Telemetry:
        reply = await self._call(CALL_TIMEOUT_S, op="telemetry")
        assert reply.telemetry is not None
        return reply.telemetry

    async def stream_probe(self) -> StreamProbe | None:
        return (await self._call(PROBE_TIMEOUT_S, op="stream_probe")).stream_probe

    async def throttle_probe(self) -> float | None:
        return (await self._call(PROBE_TIMEOUT_S, op="throttle_probe")).throughput

    async def cpu_sample(self) -> CpuSample | None:
        """The agent's host's counters (the agent and the trials it launches are its `own`)."""
        cpu = (await self._call(CALL_TIMEOUT_S, op="cpu_sample")).cpu
        return cpu.sample() if cpu is not None else None

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
