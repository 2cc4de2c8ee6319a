"""What a twin is: its identity, its state directory, and the knobs of its physics and policies."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from packaging.version import InvalidVersion, Version
from pydantic import Field, field_validator, model_validator

from orchestrator.config.base import Strict
from orchestrator.config.sim import ThermalModel

DEFAULT_UDID = "00008140-001A2B3C4D5E6F70"
DEFAULT_LAUNCH = ("{exe}", "app", "--container", "{container}", "--")

# Builds of the versions a twin is usually asked for; any other version gets a made-up build.
BUILDS = {"14.8": "18H17", "15.8": "19H370", "16.7": "20H19", "17.5": "21F79", "17.6": "21G80",
          "18.2": "22C152", "18.5": "22F76", "18.6": "22G86", "26.1": "23B85"}


class TwinConfig(Strict):
    """One emulated iPhone. Everything it keeps (keys, pair records, apps, containers, crash
    reports) lives under ``root``, so a twin restarted on the same root is the same phone."""

    root: Path = Field(description="State directory (made if missing)")
    udid: str = Field(default=DEFAULT_UDID, pattern=r"^[0-9A-F]{8}-[0-9A-F]{16}$",
                      description="<ChipID:08X>-<ECID:016X>, as phones from the A12 on")
    ios: str = "18.2"
    build: str | None = Field(default=None, description="BuildVersion; default: known for common versions")
    product_type: str = "iPhone17,1"
    device_name: str = "Twin iPhone"
    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535, description="usbmuxd TCP port; 0 picks a free one")
    paired: bool = Field(default=True, description="Trust this host from the start (usbmuxd serves the record); "
                         "false: no record until a client pairs (Pair, then SavePairRecord)")
    trust: Literal["accept", "pending", "deny"] = Field(
        default="accept", description="What the person at the phone answers to 'Trust This Computer?'")
    locked: bool = Field(default=False, description="Passcode-locked now: app launches and pairing are refused")
    unlocked_since_boot: bool = Field(
        default=True, description="False: not unlocked once since boot (data protection): services refuse to "
        "start with PasswordProtected")
    developer_mode: bool = True
    ddi_mounted: bool = True
    developer_over_lockdown: Literal["always", "as-ios"] = Field(
        default="as-ios",
        description="'as-ios': refuse DVT over lockdown from iOS 17 with InvalidService, as a phone does (DVT is "
        "then served over RSD); 'always': serve it at every version, which no iOS 17+ phone does (for clients "
        "that cannot reach the RSD)")
    rsd: bool | None = Field(
        default=None, description="Serve RemoteServiceDiscovery and a tunneld stand-in (the iOS 17+ developer "
        "path, from where a tunnel is up); default: from iOS 17, as phones")
    tunneld_port: int = Field(default=0, ge=0, le=65535, description="The tunneld stand-in's port; 0: any free one")
    launch: tuple[str, ...] = Field(
        default=DEFAULT_LAUNCH,
        description="argv before the app's arguments; {exe} the app's executable, {container} its data container")
    memory_limit_mb: float | None = Field(default=6144.0, gt=0, description="Jetsam limit on an app's resident "
                                          "memory; None: no limit")
    increased_memory_limit_mb: float | None = Field(
        default=None, gt=0, description="Limit for apps with the increased-memory-limit entitlement (default: "
        "the plain limit)")
    memory_poll_s: float = Field(default=0.05, gt=0, le=10)
    disk_bytes: int = Field(default=128 * 10**9, ge=0, description="Capacity of the data partition")
    thermal: ThermalModel = ThermalModel()
    thermal_speed: float = Field(default=1.0, gt=0, le=10_000, description="Model seconds per wall second")
    battery_temperature_scale: float = Field(
        default=100.0, gt=0, description="IOPMPowerSource Temperature units per degree C (unverified on a phone)")
    battery_percent: int = Field(default=80, ge=0, le=100)
    charging: bool = False
    low_power: bool = False
    crash_report_delay_s: float = Field(default=1.0, ge=0, le=600,
                                        description="How long a report stays pending before it shows")

    @field_validator("ios")
    @classmethod
    def _ios(cls, value: str) -> str:
        try:
            version = Version(value)
        except InvalidVersion:
            raise ValueError(f"{value!r} is not a version") from None
        if version.major < 14:
            raise ValueError("the twin emulates iOS 14 and later (older phones strip TLS from DVT)")
        return value

    @model_validator(mode="after")
    def _launch_has_exe(self) -> TwinConfig:
        if not self.launch or "{exe}" not in "".join(self.launch):
            raise ValueError("launch must name {exe}")
        return self

    @property
    def version(self) -> Version:
        return Version(self.ios)

    @property
    def serves_rsd(self) -> bool:
        return self.rsd if self.rsd is not None else self.version.major >= 17

    @property
    def build_version(self) -> str:
        if self.build:
            return self.build
        return BUILDS.get(self.ios, f"{20 + self.version.major - 14}A{100 + self.version.minor}")

    @property
    def chip_id(self) -> int:
        return int(self.udid[:8], 16)

    @property
    def ecid(self) -> int:
        return int(self.udid[9:], 16)

    def memory_limit(self, increased: bool) -> float | None:
        """Bytes an app may keep resident before jetsam kills it."""
        mb = (self.increased_memory_limit_mb or self.memory_limit_mb) if increased else self.memory_limit_mb
        return None if mb is None else mb * 2**20
