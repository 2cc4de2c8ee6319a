"""The iPhone backend passes the device contract against a fake phone at pymobiledevice3's seams."""

from __future__ import annotations

import asyncio
from pathlib import Path

from iphone_fakes import FakeConnector, FakePhone, make_ipa

from orchestrator.config.fleet import IphoneDeviceConfig
from orchestrator.devices.contract import check_device_contract
from orchestrator.devices.iphone import IphoneDevice

BUNDLE = "dev.orch.harness"


def device_for(phone: FakePhone, tmp_path: Path, **over: object) -> tuple[IphoneDevice, FakeConnector]:
    fields: dict[str, object] = {
        "id": "phone", "kind": "iphone", "udid": phone.udid, "ipa": str(make_ipa(tmp_path / "h.ipa", BUNDLE)),
        "poll_s": 0.01, "call_timeout_s": 5.0,
    }
    fields.update(over)
    connector = FakeConnector(phone)
    return IphoneDevice(IphoneDeviceConfig.model_validate(fields), connector=connector), connector


def test_contract(tmp_path: Path) -> None:
    phone = FakePhone()
    device, _ = device_for(phone, tmp_path)
    asyncio.run(check_device_contract(device, engine="rawloop-metal", model="/models/tiny.gguf"))
    assert phone.installs == [BUNDLE]
