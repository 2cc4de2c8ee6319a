"""The iPhone backend passes the device contract against a fake phone at pymobiledevice3's seams."""

from __future__ import annotations

import asyncio
from pathlib import Path

from iphone_fakes import HARNESS, FakePhone, make_device

from orchestrator.devices.contract import check_device_contract


def test_contract(tmp_path: Path) -> None:
    phone = FakePhone()
    device, connector = make_device(phone, tmp_path)
    asyncio.run(check_device_contract(device, engine="rawloop-metal", model="/models/tiny.gguf"))
    assert phone.installs == [HARNESS]
    assert connector.resets >= 1  # close() dropped the connections
    assert any(sig == 9 for _pid, sig in phone.signals), "the hung trial was killed"
