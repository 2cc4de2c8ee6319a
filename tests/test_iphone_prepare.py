"""prepare on the in-process fake phone: only what the twin cannot serve stays here (the rest runs on
the twin, tests/test_twin_prepare.py). A package whose hash differs from the declared one is refused
on the host, before any phone is asked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from iphone_fakes import FakePhone, make_device

from orchestrator.protocol.device import Artifacts, DeviceUnavailable


# a host-side check (the .ipa against its declared sha256): no phone is asked, so the twin adds nothing
def test_a_package_whose_hash_differs_from_the_declared_one_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        phone = FakePhone()
        device, _ = make_device(phone, tmp_path)
        with pytest.raises(DeviceUnavailable, match="differs"):
            await device.prepare(Artifacts(harness=str(tmp_path / "harness.ipa"), harness_sha256="0" * 64))
        assert phone.installs == []

    asyncio.run(main())
