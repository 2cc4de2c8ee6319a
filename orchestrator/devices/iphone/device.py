"""`IphoneDevice`: the device boundary over pymobiledevice3 for a phone on USB.

All device work happens in coroutines on the caller's (the controller's single) event loop;
connections are opened lazily inside them and kept until a fault or `close`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.clock import Clock, SystemClock
from orchestrator.config.fleet import IphoneDeviceConfig
from orchestrator.devices.base import Device
from orchestrator.devices.iphone import install as inst
from orchestrator.devices.iphone.artifacts import place_in
from orchestrator.devices.iphone.chips import chip_class, model_name
from orchestrator.devices.iphone.connect import Connector, UsbConnector
from orchestrator.devices.iphone.container import BadPush, Container, VendModes
from orchestrator.devices.iphone.crash import latest_crash
from orchestrator.devices.iphone.errors import call, developer_service, fixes, opened, unavailable
from orchestrator.devices.iphone.launch import Outcome, launch_and_wait
from orchestrator.devices.iphone.paths import (
    Place,
    UnsafeName,
    check_bundle_id,
    check_id,
    documents,
    result_place,
    spec_place,
)
from orchestrator.devices.iphone.telemetry import ThermalProbe, battery, last_thermal
from orchestrator.protocol import ThermalState, TrialResult, TrialSpec, for_harness
from orchestrator.protocol.device import (
    Artifacts,
    DeviceInfo,
    DeviceUnavailable,
    Health,
    Placed,
    PrepareReport,
    Progress,
    Telemetry,
    TrialFailure,
    result_or_failure,
)

if TYPE_CHECKING:
    from pymobiledevice3.lockdown_service_provider import LockdownServiceProvider

PROBE_TIMEOUT_S = 30.0


class IphoneDevice(Device):
    def __init__(self, cfg: IphoneDeviceConfig, *, connector: Connector | None = None, clock: Clock | None = None):
        self.id = cfg.id
        self.cfg = cfg
        self.connector: Connector = connector or UsbConnector(cfg)
        self.clock = clock or SystemClock()
        self._thermal: tuple[float, ThermalState] | None = None
        self._probes = 0
        self._crashes_seen: set[str] = set()
        self._vend = VendModes(prefer_documents=cfg.documents_only)  # house_arrest's command, learnt per app

    # -- connections -----------------------------------------------------------------------------
    def _unavailable(self, exc: BaseException, doing: str, *, developer: bool = False) -> DeviceUnavailable:
        return unavailable(exc, self.id, self.cfg.udid, doing, developer=developer)

    async def _lockdown(self, doing: str) -> LockdownServiceProvider:
        try:
            return await self.connector.lockdown()
        except Exception as exc:
            await self.connector.reset()
            raise self._unavailable(exc, doing) from exc

    async def _guard(self, exc: Exception, doing: str, *, developer: bool = False) -> DeviceUnavailable:
        """Map a fault; drop the connections when the phone itself went away."""
        err = self._unavailable(exc, doing, developer=developer)
        if err.state == "not_connected":
            await self.connector.reset()
        return err

    # -- identity and health -----------------------------------------------------------------------
    async def info(self) -> DeviceInfo:
        lockdown = await self._lockdown("identify")
        try:
            values = dict(lockdown.all_values or {})
            product_type = lockdown.product_type or values.get("ProductType")
            chip_id = values.get("ChipID")
            build = lockdown.product_build_version
            harness = await self._harness_version(lockdown)
        except Exception as exc:
            raise await self._guard(exc, "identify") from exc
        return DeviceInfo(
            id=self.id, kind="iphone", model=model_name(product_type),
            chip_class=chip_class(product_type, chip_id if isinstance(chip_id, int) else None),
            os=f"iOS {lockdown.product_version}" + (f" ({build})" if build else ""),
            harness_version=harness, host=self.cfg.host,
        )

    async def _harness_version(self, lockdown: LockdownServiceProvider) -> str | None:
        t = self.cfg.call_timeout_s
        apps = await inst.installed_apps(lockdown, [self.cfg.bundle_id], t)
        app = apps.get(self.cfg.bundle_id)
        if app is None:
            return None
        version = inst.bundle_version(app)
        marker = inst.parse_marker(await inst.read_marker(lockdown, self.cfg.bundle_id, self._vend, t))
        mine = marker.get(self.cfg.bundle_id)
        if mine and mine["version"] == version and mine["sha256"] != "unknown":
            return f"{version} sha256:{mine['sha256'][:12]}"
        return version

    async def health(self) -> Health:
        """Connected, trusted, unlocked, Developer Mode on, tunnel up, disk image mounted, harness installed."""
        try:
            await self._check_health()
        except DeviceUnavailable as exc:
            return Health(state=exc.state, fix=exc.fix, detail=str(exc))
        return Health(state="ok")

    async def _check_health(self) -> None:
        from pymobiledevice3.exceptions import MissingValueError
        from pymobiledevice3.services.mobile_image_mounter import MobileImageMounterService, image_type_for_device

        lockdown = await self._lockdown("connect")
        t, fix = self.cfg.call_timeout_s, fixes(self.cfg.udid)
        try:
            # locked after its first unlock, a phone still starts services (only launches fail); lockdown's
            # PasswordProtected says whether it is locked now (a phone that does not say is not held up)
            with contextlib.suppress(MissingValueError):
                if await call(lockdown.get_value(key="PasswordProtected"), t, "read the lock state") is True:
                    raise DeviceUnavailable(f"{self.id}: the phone is locked", fix["locked"], "locked")
            if lockdown.has_developer_mode and not await call(
                lockdown.get_developer_mode_status(), t, "read Developer Mode"
            ):
                raise DeviceUnavailable(f"{self.id}: Developer Mode is off", fix["developer_mode_off"],
                                        "developer_mode_off")
            async with opened(MobileImageMounterService(lockdown=lockdown), t, "the image mounter") as mounter:
                image = image_type_for_device(lockdown)
                if not await call(mounter.is_image_mounted(image), t, "look up the developer disk image"):
                    raise DeviceUnavailable(f"{self.id}: no {image} disk image mounted", fix["ddi_missing"],
                                            "ddi_missing")
        except DeviceUnavailable:
            raise
        except Exception as exc:
            raise await self._guard(exc, "health check") from exc
        try:
            await self.connector.developer()
        except Exception as exc:
            raise await self._guard(exc, "reach developer services", developer=True) from exc
        try:
            apps = await inst.installed_apps(lockdown, [self.cfg.bundle_id], t)
        except Exception as exc:
            raise await self._guard(exc, "list apps") from exc
        if self.cfg.bundle_id not in apps:
            raise DeviceUnavailable(f"{self.id}: {self.cfg.bundle_id} is not installed", fix["harness_missing"],
                                    "harness_missing")

    # -- prepare -----------------------------------------------------------------------------------
    async def prepare(self, artifacts: Artifacts, progress: Progress | None = None) -> PrepareReport:
        try:
            wanted = self._wanted(artifacts)
        except (inst.PackageError, UnsafeName, OSError) as exc:
            raise DeviceUnavailable(f"{self.id}: {exc}", fix=fixes(self.cfg.udid)["harness_missing"],
                                    state="harness_missing") from exc
        lockdown = await self._lockdown("prepare")
        try:
            report = await inst.reconcile(lockdown, wanted, self.cfg, self._vend, self.id)
        except DeviceUnavailable:
            raise
        except Exception as exc:
            raise await self._guard(exc, "install") from exc
        try:
            files = await self._place(lockdown, artifacts, progress)
        except (DeviceUnavailable, UnsafeName, OSError, BadPush) as exc:
            if isinstance(exc, DeviceUnavailable):
                raise
            raise DeviceUnavailable(f"{self.id}: {exc}", state="error") from exc
        except Exception as exc:
            raise await self._guard(exc, "push the model") from exc
        return report.model_copy(update={"files": files})

    def _apps_for(self, engines: list[str]) -> list[str]:
        """The apps whose Documents the run's files go to: each that runs one of ``engines``."""
        apps = [self.cfg.engine_apps.get(e, self.cfg.bundle_id) for e in engines] or [self.cfg.bundle_id]
        return [check_bundle_id(b) for b in dict.fromkeys(apps)]

    async def _place(
        self, lockdown: LockdownServiceProvider, artifacts: Artifacts, progress: Progress | None
    ) -> list[Placed]:
        placed: list[Placed] = []
        if artifacts.files:
            for bundle in self._apps_for(artifacts.engines):
                placed += await place_in(lockdown, bundle, artifacts.files, progress, device=self.id,
                                         vend=self._vend, timeout=self.cfg.call_timeout_s, clock=self.clock)
        return placed

    def _wanted(self, artifacts: Artifacts) -> list[inst.Wanted]:
        harness_path = artifacts.harness or self.cfg.ipa
        package = Path(harness_path).expanduser() if harness_path else None
        sha = artifacts.harness_sha256
        if package is not None and sha is None:
            sha = inst.sha256_of(package)
        elif package is not None and artifacts.harness and sha != inst.sha256_of(package):
            raise inst.PackageError(f"{package}: sha256 differs from the declared {sha}")
        wanted = [inst.Wanted(check_bundle_id(self.cfg.bundle_id), package, sha)]
        for bundle, path in self.cfg.competitor_apps.items():
            p = Path(artifacts.extra.get(bundle, path)).expanduser()
            wanted.append(inst.Wanted(check_bundle_id(bundle), p, inst.sha256_of(p)))
        return wanted

    # -- telemetry ---------------------------------------------------------------------------------
    async def telemetry(self) -> Telemetry:
        from pymobiledevice3.services.diagnostics import DiagnosticsService

        lockdown = await self._lockdown("read telemetry")
        try:
            t = self.cfg.call_timeout_s
            async with opened(DiagnosticsService(lockdown=lockdown), t, "diagnostics") as diagnostics:
                raw = await call(diagnostics.get_battery(), t, "read the battery")
        except Exception as exc:
            raise await self._guard(exc, "read telemetry") from exc
        battery_c, charging, missing = battery(raw)
        thermal, low_power = await self._thermal_now()
        if thermal is None:
            missing.append("thermal_state")
        if low_power is None:
            missing.append("low_power")
        return Telemetry(t=self.clock.now(), thermal_state=thermal, battery_c=battery_c, charging=charging,
                         low_power=low_power, unavailable=missing)

    async def _thermal_now(self) -> tuple[ThermalState | None, bool | None]:
        if self.cfg.thermal_probe:
            probe = await self._thermal_probe()
            if probe is not None:
                return probe.thermal_state, probe.low_power
        if self._thermal is not None and self.clock.now() - self._thermal[0] <= self.cfg.thermal_max_age_s:
            return self._thermal[1], None
        return None, None

    async def _thermal_probe(self) -> ThermalProbe | None:
        """A short ``--probe thermal`` launch; None when it cannot be read (named in unavailable)."""
        self._probes += 1
        token = f"probe-{self._probes:06d}"
        place = documents("results", token + ".json")
        try:
            outcome = await self._launch(self.cfg.bundle_id, ["--probe", "thermal", "--out", place.app], token,
                                         place, PROBE_TIMEOUT_S, spec=None)
        except Exception:
            return None
        if outcome.kind == "done" and outcome.raw is not None:
            with contextlib.suppress(ValueError):
                return ThermalProbe.model_validate_json(outcome.raw)
        return None

    # -- trials ------------------------------------------------------------------------------------
    async def run_trial(self, spec: TrialSpec, timeout: float) -> TrialResult | TrialFailure:
        """Push the spec, launch, and wait ``timeout`` seconds from the launch for the result."""
        try:
            return await self._run_trial(spec, timeout)
        except Exception as exc:  # the boundary's promise: a typed failure, never an exception
            err = self._unavailable(exc, "trial")  # developer-service faults carry their own mark
            if err.state == "not_connected":
                await self.connector.reset()
                return TrialFailure(kind="disconnected", message=str(err), detail=err.fix)
            return TrialFailure(kind="launch_failed", message=str(err), detail=err.fix)

    async def _run_trial(self, spec: TrialSpec, timeout: float) -> TrialResult | TrialFailure:
        try:
            check_id(spec.run_id, "run id")
            bundle = check_bundle_id(self.cfg.engine_apps.get(spec.engine, self.cfg.bundle_id))
            spec_at, result_at = spec_place(spec.trial_id), result_place(spec.trial_id)
        except UnsafeName as exc:
            return TrialFailure(kind="launch_failed", message=str(exc))
        args = ["--spec", spec_at.app, "--out", result_at.app]
        started = self.clock.wall()
        outcome = await self._launch(bundle, args, spec.trial_id, result_at, timeout, spec=for_harness(spec))
        if outcome.kind == "done" and outcome.raw is not None:
            mapped = result_or_failure(outcome.raw, spec)
            if isinstance(mapped, TrialResult) and (state := last_thermal(mapped)) is not None:
                self._thermal = (self.clock.now(), state)
            return mapped
        return await self._failure(outcome, bundle, started)

    async def _launch(
        self, bundle: str, args: list[str], token: str, result_at: Place, timeout: float, *, spec: TrialSpec | None
    ) -> Outcome:
        """Push the spec (if any), launch, wait, clean up. Faults before the launch raise."""
        cfg, t = self.cfg, self.cfg.call_timeout_s
        lockdown = await self.connector.lockdown()
        with developer_service():
            developer = await self.connector.developer()
        async with Container(lockdown, bundle, documents_only=self._vend, timeout=t) as box:
            await box.remove(result_at)  # a stale result from an earlier attempt must never count
            spec_at = spec_place(spec.trial_id) if spec is not None else None
            if spec is not None and spec_at is not None:
                await box.write(spec_at, spec.model_dump_json().encode())
            outcome = await launch_and_wait(
                developer, box, bundle_id=bundle, arguments=args, result=result_at, token=token,
                timeout=timeout, liveness_s=cfg.poll_s, call_timeout=t,
            )
            if outcome.kind != "disconnected":
                for place in (result_at, spec_at):
                    if place is not None:
                        with contextlib.suppress(Exception):
                            await box.remove(place)
        if outcome.kind == "disconnected":
            await self.connector.reset()
        return outcome

    async def _failure(self, outcome: Outcome, bundle: str, started: float) -> TrialFailure:
        tail = outcome.tail()
        if outcome.kind == "hung":
            return TrialFailure(kind="hung", message=outcome.message, detail=tail)
        if outcome.kind == "disconnected":
            return TrialFailure(kind="disconnected", message=f"{self.id}: {outcome.message}", detail=tail)
        if outcome.kind == "bad_file":
            return TrialFailure(kind="bad_output", message=outcome.message, detail=tail)
        if outcome.kind == "launch_failed":
            fix = fixes(self.cfg.udid)["locked"] if "lock" in outcome.message.lower() else None
            return TrialFailure(kind="launch_failed", message=outcome.message, detail=fix or tail)
        # exited without a result: a crash report says why, if the phone wrote one
        crash = None
        with contextlib.suppress(Exception):
            lockdown = await self.connector.lockdown()
            process = self.cfg.process_name
            if bundle != self.cfg.bundle_id:  # a competitor app: its executable names its reports
                app = (await inst.installed_apps(lockdown, [bundle], self.cfg.call_timeout_s)).get(bundle, {})
                process = str(app.get("CFBundleExecutable") or bundle.rsplit(".", 1)[-1])
            died = outcome.signal or outcome.exit_code is None  # killed: a report is likely on its way
            crash = await latest_crash(lockdown, process, started, self.cfg.call_timeout_s, self._crashes_seen,
                                       wait_s=self.cfg.crash_report_wait_s if died else 0.0,
                                       sleep=self.clock.sleep)
        how = (f"signal {outcome.signal}" if outcome.signal else
               f"exit code {outcome.exit_code}" if outcome.exit_code is not None else "unknown status")
        message = f"app exited ({how}) without writing a result"
        if crash is not None or outcome.signal:
            return TrialFailure(kind="crashed", message=message, detail=crash or tail)
        if outcome.exit_code not in (None, 0):
            return TrialFailure(kind="harness_error", message=message, detail=tail)
        return TrialFailure(kind="crashed" if outcome.exit_code is None else "bad_output", message=message,
                            detail=tail)

    async def close(self) -> None:
        await self.connector.reset()
