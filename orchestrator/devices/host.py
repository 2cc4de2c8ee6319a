"""A host measured through the `harness` CLI on its own CPU, over a local or SSH runner."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from orchestrator.config.fleet import HostDeviceConfig
from orchestrator.devices.base import Device
from orchestrator.devices.interference import CpuSample, read_cpu
from orchestrator.devices.remote_cpu import parse_darwin, parse_linux, sample_script
from orchestrator.protocol import TrialResult, TrialSpec, for_harness
from orchestrator.protocol.device import (
    ArtifactFile,
    Artifacts,
    DeviceInfo,
    DeviceUnavailable,
    Placed,
    PrepareReport,
    Progress,
    StreamProbe,
    Telemetry,
    TrialFailure,
    result_or_failure,
)
from orchestrator.runners import CommandResult, LocalRunner, Runner, RunnerError
from orchestrator.runners.cache import RuntimeContext, host_cache
from orchestrator.runners.deploy import push_to_host, remote_sha256

REPO_HARNESS = Path(__file__).resolve().parents[2] / "ios_harness"
BUILD_TIMEOUT_S = 1800.0
PROBE_TIMEOUT_S = 600.0
# The throttle probe: the same fixed work every time (a million loop passes), timed inside the process so
# interpreter start-up is not in it; the best of three runs.
PROBE_LOOP = ("import time\nbest = 1e9\nfor _ in range(3):\n    t = time.perf_counter(); x = 0\n"
              "    for i in range(1_000_000): x += i * i\n    best = min(best, time.perf_counter() - t)\n"
              "print(best)")
DONE = re.compile(r"^HARNESS_DONE (\S+) (.+)$")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Launcher(Protocol):
    """What launches a runtime that is not the harness: a runtime adapter (``runtimes.base``)."""

    async def run_trial(self, ctx: RuntimeContext, spec: TrialSpec, timeout: float) -> TrialResult | TrialFailure: ...


Launchers = Callable[[str], Launcher | None]
"""A runtime's launcher by name; None: the harness CLI runs it. The app injects the runtime catalog's."""


def harness_only(runtime: str) -> Launcher | None:
    return None


class HostDevice(Device):
    def __init__(self, cfg: HostDeviceConfig, runner: Runner, *, launchers: Launchers = harness_only,
                 source: Path | None = None):
        self.id = cfg.id
        self.launchers = launchers
        self.cfg = cfg
        self.runner = runner
        self.source = Path(cfg.source).expanduser() if cfg.source else (source or REPO_HARNESS)
        self._harness: str | None = None
        self._system: str | None = None
        self._cpus: int | None = None

    # -- helpers -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _reachable(self) -> Iterator[None]:
        """A runner that cannot reach the host makes the device unavailable, with the runner's fix."""
        try:
            yield
        except RunnerError as exc:
            raise DeviceUnavailable(f"{self.id}: {exc}", fix=exc.fix, state=exc.state) from None

    async def _run(self, argv: list[str], timeout: float) -> CommandResult:
        return await self.runner.run(argv, timeout=timeout)

    async def _workdir(self) -> str:
        return (await self.runner.expand(self.cfg.workdir)).rstrip("/")

    async def _harness_path(self) -> str:
        if self._harness is None:
            if self.cfg.harness is not None:
                self._harness = f"{await self._workdir()}/bin/harness"
            elif isinstance(self.runner, LocalRunner):
                self._harness = str(self.source / ".build" / "release" / "harness")
            else:
                raise DeviceUnavailable(
                    f"{self.id}: no harness binary configured for a remote host", state="harness_missing",
                    fix="build it (make -C ios_harness or swift build -c release) and set `harness:` to the binary",
                )
        return self._harness

    async def _remote_sha256(self, path: str) -> str | None:
        return await remote_sha256(self.runner, path, timeout=60)

    # -- the device boundary ---------------------------------------------------------------
    async def info(self) -> DeviceInfo:
        with self._reachable():
            return await self._info()

    async def _info(self) -> DeviceInfo:
        harness = await self._harness_path()
        res = await self._run([harness, "info"], timeout=60)
        info: dict[str, object] = {}
        if res.ok:
            try:
                info = json.loads(res.stdout)
            except json.JSONDecodeError:
                info = {}
        host = info.get("host", {}) if isinstance(info.get("host"), dict) else {}
        assert isinstance(host, dict)
        if not info:  # no harness yet: still say what the machine is
            uname = await self._run(["uname", "-srm"], timeout=30)
            host = {"os": uname.stdout.strip() or "unknown", "cpu_model": "unknown"}
        return DeviceInfo(
            id=self.id, kind="host", model=str(host.get("cpu_model", "unknown")),
            chip_class=self.cfg.chip_class or str(host.get("cpu_model", "unknown")), os=str(host.get("os", "unknown")),
            harness_version=str(info["harness_build"]) if "harness_build" in info else None, host=self.cfg.host,
        )

    async def prepare(self, artifacts: Artifacts, progress: Progress | None = None) -> PrepareReport:
        with self._reachable():
            report = await self._prepare(artifacts)
            return report.model_copy(update={"files": await self._place(artifacts.files, progress)})

    async def _place(self, files: list[ArtifactFile], progress: Progress | None) -> list[Placed]:
        """The files where the host's programs will read them: on this machine the controller's own
        files are the device's; an SSH host gets them in its cache folder."""
        if isinstance(self.runner, LocalRunner):
            for f in files:
                if not Path(f.source).is_file():
                    raise DeviceUnavailable(f"{self.id}: {f.source} not found", state="error",
                                            fix="make the model (orch model make) or fix the plan's model path")
            return [Placed(name=f.name, path=f.source, sha256=f.sha256, bytes_sent=0) for f in files]
        return await push_to_host(self.runner, await host_cache(self.runner), files, self.id, progress)

    async def _prepare(self, artifacts: Artifacts) -> PrepareReport:
        binary = artifacts.harness or self.cfg.harness
        harness = await self._harness_path()
        if binary is None:
            return await self._build_locally(harness)
        local = Path(binary).expanduser()
        if not local.is_file():
            raise DeviceUnavailable(f"{self.id}: harness binary {local} not found", state="harness_missing",
                                    fix="build the harness and point `harness:` at the binary")
        want = sha256_file(local)
        if artifacts.harness_sha256 and artifacts.harness_sha256 != want:
            raise DeviceUnavailable(f"{self.id}: {local} has sha256 {want}, expected {artifacts.harness_sha256}",
                                    state="harness_missing", fix="rebuild or re-download the harness")
        if await self._remote_sha256(harness) == want:
            return PrepareReport(installed=want, skipped=True)
        await self.runner.put(local, harness)
        await self._run(["chmod", "755", harness], timeout=30)
        got = await self._remote_sha256(harness)
        if got != want:
            raise DeviceUnavailable(f"{self.id}: pushed harness has sha256 {got}, expected {want}", state="error")
        return PrepareReport(installed=want, skipped=False)

    async def _build_locally(self, harness: str) -> PrepareReport:
        path = Path(harness)
        before = sha256_file(path) if path.is_file() else None
        if not (self.source / "Package.swift").is_file():
            raise DeviceUnavailable(f"{self.id}: no harness package at {self.source}", state="harness_missing",
                                    fix="set `source:` to the ios_harness directory, or `harness:` to a binary")
        res = await self._run(["swift", "build", "-c", "release", "--package-path", str(self.source)],
                              timeout=BUILD_TIMEOUT_S)
        if not res.ok or not path.is_file():
            tail = (res.stderr or res.stdout).strip().splitlines()[-5:]
            raise DeviceUnavailable(f"{self.id}: swift build failed: {' | '.join(tail)}", state="harness_missing",
                                    fix=f"fix the build: swift build -c release --package-path {self.source}")
        after = sha256_file(path)
        return PrepareReport(installed=after, skipped=before == after)

    async def stream_probe(self) -> StreamProbe | None:
        with self._reachable():
            harness = await self._harness_path()
            out = f"{await self._workdir()}/probe.json"
            res = await self._run([harness, "probe", "--out", out], timeout=PROBE_TIMEOUT_S)
            with tempfile.TemporaryDirectory() as tmp:
                got = await self._fetch(out, Path(tmp) / "probe.json") if res.ok else None
        if got is None:
            return None
        try:
            report = json.loads(got)
            best = {str(r["pattern"]): float(r["best_gb_s"]) for r in report["results"]}
        except (ValueError, KeyError, TypeError):
            return None
        if best.get("stream", 0) <= 0:
            return None
        return StreamProbe(gb_s=best["stream"], patterns=best, buffer_bytes=report.get("buffer_bytes"),
                           threads=report.get("threads"))

    async def throttle_probe(self) -> float | None:
        """A fixed integer loop in the host's Python, best of three runs: loop passes per second (millions)."""
        with self._reachable():
            res = await self._run([self.runner.python, "-c", PROBE_LOOP], timeout=60)
        try:
            return 1.0 / float(res.stdout.split()[-1]) if res.ok else None
        except (ValueError, IndexError, ZeroDivisionError):
            return None

    async def cpu_sample(self) -> CpuSample | None:
        """The host's CPU counters: this machine's read in process; a remote host's by one short command
        (None where its system has no way to read them, or the runner does not measure its own commands)."""
        if isinstance(self.runner, LocalRunner):
            return await asyncio.to_thread(read_cpu)
        if self.runner.commands_cpu_s is None:
            return None
        with self._reachable():
            system = await self._uname()
            script = sample_script(system)
            if script is None:
                return None
            if system == "Darwin" and self._cpus is None:
                self._cpus = int((await self._run(["sysctl", "-n", "hw.ncpu"], timeout=30)).stdout.strip() or 1)
            res = await self._run(["sh", "-c", script], timeout=30)
        if not res.ok:
            return None
        mine = self.runner.commands_cpu_s or 0.0
        try:
            return parse_darwin(res.stdout, mine, self._cpus or 1) if system == "Darwin" else \
                parse_linux(res.stdout, mine)
        except ValueError:
            return None

    async def telemetry(self) -> Telemetry:
        with self._reachable():
            return await self._telemetry()

    async def _uname(self) -> str:
        if self._system is None:
            self._system = (await self._run(["uname", "-s"], timeout=30)).stdout.strip()
        return self._system

    async def _telemetry(self) -> Telemetry:
        if await self._uname() == "Darwin":
            return await self._darwin()
        return await self._linux()

    async def _linux(self) -> Telemetry:
        script = "cat /proc/loadavg; cat /sys/class/thermal/thermal_zone*/temp 2>/dev/null; true"
        res = await self._run(["sh", "-c", script], timeout=30)
        lines = res.stdout.split("\n")
        load = float(lines[0].split()[0]) if lines and lines[0] else None
        temps = [int(x) / 1000.0 for x in lines[1:] if x.strip().lstrip("-").isdigit()]
        missing = ["thermal_state", "battery_c", "charging", "low_power"] + ([] if temps else ["cpu_c"])
        return Telemetry(t=time.monotonic(), thermal_state=None, cpu_c=max(temps) if temps else None, load_1m=load,
                         unavailable=missing)

    async def _darwin(self) -> Telemetry:
        therm = await self._run(["pmset", "-g", "therm"], timeout=30)
        load = await self._run(["sysctl", "-n", "vm.loadavg"], timeout=30)
        limit = re.search(r"CPU_Speed_Limit\s*=\s*(\d+)", therm.stdout)
        warning = re.search(r"thermal warning level .*?(\d+)", therm.stdout, re.IGNORECASE)
        state = None
        if limit or "No thermal warning level" in therm.stdout:
            speed = int(limit.group(1)) if limit else 100
            level = int(warning.group(1)) if warning else 0
            state = "nominal" if speed >= 100 and level == 0 else ("fair" if speed >= 80 else "serious")
        words = load.stdout.strip("{} \n").split()
        return Telemetry(
            t=time.monotonic(), thermal_state=state, load_1m=float(words[0]) if words else None,
            unavailable=["battery_c", "cpu_c", "charging", "low_power"] + ([] if state else ["thermal_state"]),
        )

    async def run_trial(self, spec: TrialSpec, timeout: float) -> TrialResult | TrialFailure:
        try:
            return await self._trial(spec, timeout)
        except DeviceUnavailable as exc:
            kind = "launch_failed" if exc.state == "harness_missing" else "disconnected"
            return TrialFailure(kind=kind, message=str(exc))
        except RunnerError as exc:
            return TrialFailure(kind="disconnected", message=f"{self.id}: {exc}")
        except _UnreadableResult as exc:
            return TrialFailure(kind="bad_output", message=str(exc))

    async def _trial(self, spec: TrialSpec, timeout: float) -> TrialResult | TrialFailure:
        if spec.model.startswith("~"):  # a path as the host sees it: its home, not ours
            spec = spec.model_copy(update={"model": await self.runner.expand(spec.model)})
        if (launcher := self.launchers(spec.engine)) is not None:
            return await launcher.run_trial(RuntimeContext(self.runner, await self._workdir(), self.id), spec, timeout)
        harness = await self._harness_path()
        base = f"{await self._workdir()}/runs/{spec.run_id}"
        spec_path, out_path = f"{base}/specs/{spec.trial_id}.json", f"{base}/results/{spec.trial_id}.json"
        with tempfile.TemporaryDirectory() as tmp:
            local_spec = Path(tmp) / "spec.json"
            local_spec.write_text(for_harness(spec).model_dump_json())
            try:
                await self.runner.put(local_spec, spec_path)
                # one round trip: the results folder, and no stale result an earlier attempt left
                await self.runner.run(["sh", "-c", 'mkdir -p "$1" && rm -f "$2"', "orch", f"{base}/results", out_path],
                                      timeout=30)
            except RunnerError as exc:
                return TrialFailure(kind="disconnected", message=f"{self.id}: {exc}")
            done: list[str] = []

            def watch(line: str) -> None:
                m = DONE.match(line)
                if m and m.group(1) == spec.trial_id:
                    done.append(m.group(2))

            try:
                res = await self.runner.run([harness, "run", "--spec", spec_path, "--out", out_path],
                                            timeout=timeout, on_line=watch)
            except RunnerError as exc:
                # One reconnect: the harness may have finished while the connection was down.
                got = await self._fetch(out_path, Path(tmp) / "result.json")
                return result_or_failure(got, spec) if got else TrialFailure(
                    kind="disconnected", message=f"{self.id}: {exc}")
            tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-8:]) or None
            if res.timed_out:
                return TrialFailure(kind="hung", message=f"no result after {timeout:.0f} s; killed", detail=tail)
            if res.returncode == 127:
                return TrialFailure(kind="launch_failed", message=f"harness not found at {harness}", detail=tail)
            got = await self._fetch(out_path, Path(tmp) / "result.json")
            if res.returncode != 0:
                if got is not None:  # a typed error result from the harness
                    return result_or_failure(got, spec)
                code = res.returncode or 0
                signum = -code if code < 0 else code - 128 if code > 128 else None
                why = f"killed by signal {signum}" if signum else f"exit {code}"
                return TrialFailure(kind="crashed", message=f"harness {why}, no result", detail=tail)
            if got is None:
                return TrialFailure(kind="bad_output", message="exit 0 but no result file", detail=tail)
            outcome = result_or_failure(got, spec)
            if isinstance(outcome, TrialResult) and not done:
                return TrialFailure(kind="bad_output", message="no HARNESS_DONE line for this trial", detail=tail)
            return outcome

    async def _fetch(self, remote: str, local: Path) -> bytes | None:
        try:
            await self.runner.get(remote, local)
        except (RunnerError, FileNotFoundError):
            return None
        except OSError as exc:  # a directory, or a file we may not read, where the result should be
            raise _UnreadableResult(f"result {remote}: {exc.strerror or exc}") from None
        return local.read_bytes()

    async def close(self) -> None:
        await self.runner.close()


class _UnreadableResult(Exception):
    """Something is at the result path, but it is not a result file the harness wrote."""
