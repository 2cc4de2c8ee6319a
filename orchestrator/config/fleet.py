"""The fleet: hosts (where commands run) and devices (what is measured)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from orchestrator.config.base import Strict
from orchestrator.config.sim import SimDeviceConfig

ID = Field(pattern=r"^[A-Za-z0-9_.-]+$")


class LocalHost(Strict):
    id: str = ID
    kind: Literal["local"]


class SshHost(Strict):
    id: str = ID
    kind: Literal["ssh"]
    address: str
    port: int = Field(default=22, ge=1, le=65535)
    user: str
    key: str | None = Field(default=None, description="Private key file; else the SSH agent")
    known_hosts: str = Field(default="~/.ssh/known_hosts")
    trust_new_host_key: bool = Field(default=False, description="Explicit opt-in to accept an unknown key")
    connect_timeout_s: float = Field(default=10.0, gt=0)
    keepalive_s: float = Field(default=15.0, ge=0)


Host = Annotated[LocalHost | SshHost, Field(discriminator="kind")]


class HostDeviceConfig(Strict):
    """The host itself, measured through the `harness` CLI on its CPU."""

    id: str = ID
    kind: Literal["host"]
    host: str = "local"
    harness: str | None = Field(default=None, description="Prebuilt harness binary to push; else build")
    workdir: str = "~/.cache/orch/work"
    chip_class: str | None = None


class IphoneDeviceConfig(Strict):
    id: str = ID
    kind: Literal["iphone"]
    udid: str
    host: str = "local"
    tunnel: Literal["userspace", "tunneld"] = "userspace"
    tunneld_address: str | None = None
    bundle_id: str = "dev.orch.harness"


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
