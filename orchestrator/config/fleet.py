"""The fleet: hosts (where commands run) and devices (what is measured)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

from orchestrator.config.base import HOUR, MAX_NAME, Name, PollInterval, Strict, Timeout, Wait
from orchestrator.config.sim import SimDeviceConfig


class LocalHost(Strict):
    id: Name
    kind: Literal["local"]


class SshHost(Strict):
    id: Name
    kind: Literal["ssh"]
    address: str
    port: int = Field(default=22, ge=1, le=65535)
    user: str
    key: str | None = Field(default=None, description="Private key file; else the SSH agent")
    known_hosts: str = Field(default="~/.ssh/known_hosts")
    trust_new_host_key: bool = Field(default=False, description="Explicit opt-in to accept an unknown key")
    connect_timeout_s: Timeout = 10.0
    keepalive_s: float = Field(default=15.0, ge=0, le=HOUR, description="0: no keepalives")
    orch_command: str = Field(default="orch", description="How to start orch on this host (for `orch agent`)")
    python: str = Field(default="python3", description="Interpreter that runtime environments are made with")
    cache: str = Field(default="~/.cache/orch", description="Cache folder on this host: runtimes, converted models")


Host = Annotated[LocalHost | SshHost, Field(discriminator="kind")]


class HostDeviceConfig(Strict):
    """The host itself, measured through the `harness` CLI on its CPU."""

    id: Name
    kind: Literal["host"]
    host: str = "local"
    harness: str | None = Field(default=None, description="Prebuilt harness binary to push; else build")
    source: str | None = Field(default=None, description="Harness package to build locally (default: the repo's)")
    workdir: str = "~/.cache/orch/work"
    chip_class: str | None = None
    via: Literal["direct", "agent"] = Field(default="direct", description="agent: through `orch agent` on the host")


BUNDLE_ID = r"^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$"


class IphoneDeviceConfig(Strict):
    """An iPhone on USB, driven through pymobiledevice3 (``orchestrator.devices.iphone``)."""

    id: Name
    kind: Literal["iphone"]
    udid: str = Field(pattern=r"^[A-Za-z0-9-]+$", max_length=MAX_NAME)
    host: str = "local"
    tunnel: Literal["userspace", "tunneld"] = Field(
        default="userspace", description="iOS 17+ developer services: in-process userspace tunnel, or a root tunneld"
    )
    tunneld_address: str | None = Field(
        default=None, description="host:port of tunneld; default $TUNNELD_ADDRESS, else 127.0.0.1:49151"
    )
    usbmux_address: str | None = Field(default=None, description="usbmuxd socket; default the system's")
    bundle_id: str = Field(default="dev.orch.harness", pattern=BUNDLE_ID, max_length=255)
    process_name: Name = Field(default="HarnessApp", description="Executable name, for crash reports")
    ipa: str | None = Field(default=None, description="Harness .ipa (or .app dir) that prepare installs")
    competitor_apps: dict[str, str] = Field(default_factory=dict, description="bundle id -> .ipa to install")
    engine_apps: dict[str, str] = Field(
        default_factory=dict, description="engine -> bundle id of the app that runs it; default the harness app"
    )
    documents_only: bool = Field(default=False, description="house_arrest mode tried first: VendDocuments instead "
                                 "of VendContainer (the other is tried once if the phone refuses; remembered per app)")
    thermal_probe: bool = Field(default=False, description="telemetry launches the app with --probe thermal")
    thermal_max_age_s: Wait = Field(default=120.0, description="Use the last result's thermal state this long")
    connect_timeout_s: Timeout = 20.0
    call_timeout_s: Timeout = Field(default=30.0, description="Any one device call")
    install_timeout_s: Timeout = 900.0
    poll_s: PollInterval = Field(
        default=5.0, description="During a trial, one isRunningPid check this often (the sentinel and DVT's "
        "termination notice end the wait at once; nothing polls the phone's disk)")
    crash_report_wait_s: Wait = Field(
        default=10.0, le=300, description="After a death by signal, how long to look for its crash or memory-kill "
        "report (ReportCrash writes it a moment later)")

    @model_validator(mode="after")
    def _apps(self) -> IphoneDeviceConfig:
        for bundle in [*self.competitor_apps, *self.engine_apps.values()]:
            if len(bundle) > 255 or not re.fullmatch(BUNDLE_ID, bundle):
                raise ValueError(f"not a bundle id: {bundle!r}")
        return self


Device = Annotated[SimDeviceConfig | HostDeviceConfig | IphoneDeviceConfig, Field(discriminator="kind")]


class Fleet(Strict):
    name: str = "fleet"
    hosts: list[Host] = Field(default_factory=list)
    devices: list[Device] = Field(min_length=1)

    @model_validator(mode="after")
    def _references(self) -> Fleet:
        for what, ids in (("host", [h.id for h in self.hosts]), ("device", [d.id for d in self.devices])):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            if dupes:
                raise ValueError(f"duplicate {what} ids: {', '.join(dupes)}")
        known = {"local"} | {h.id for h in self.hosts}
        for d in self.devices:
            if d.host not in known:
                raise ValueError(f"device {d.id!r} names unknown host {d.host!r} (known: {', '.join(sorted(known))})")
        return self

    def device(self, device_id: str) -> SimDeviceConfig | HostDeviceConfig | IphoneDeviceConfig:
        return next(d for d in self.devices if d.id == device_id)
