"""The model onto an iPhone: streamed over AFC into the harness app's Documents, once per content,
never half-written, refused up front when the phone lacks room; the spec then names it relative to
Documents. Through the real pymobiledevice3 HouseArrestService/AfcService client against the fakes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from iphone_fakes import HARNESS, FakePhone, make_device

from orchestrator.artifacts import sha256_file
from orchestrator.devices.base import ArtifactFile, Artifacts, DeviceUnavailable, TrialFailure
from orchestrator.devices.contract import contract_spec
from orchestrator.devices.iphone.container import CHUNK
from orchestrator.protocol import TrialResult


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def model(tmp_path: Path, mib: int = 10) -> Artifacts:
    """A model bigger than one AFC write (4 MB), so it streams in several."""
    path = tmp_path / "model-Q8_0.gguf"
    path.write_bytes(os.urandom(mib << 20) + b"tail")
    sha = sha256_file(path)
    f = ArtifactFile(source=str(path), sha256=sha, size=path.stat().st_size, name=f"models/{sha[:16]}/{path.name}")
    return Artifacts(files=[f], model=f.name)


def test_pushed_once_into_documents_then_skipped_and_the_app_reads_it_there(tmp_path: Path) -> None:
    wanted = model(tmp_path)
    (f,) = wanted.files

    async def main() -> None:
        phone = FakePhone()
        device, _ = make_device(phone, tmp_path)
        seen: list[tuple[str, int, int]] = []
        first = await device.prepare(wanted, progress=lambda *a: seen.append(a))
        box = phone.containers[HARNESS]
        assert first.path_of(f.name) == f.name, "the spec names it relative to Documents"
        assert box.read(f"/Documents/{f.name}") == Path(f.source).read_bytes()
        assert box.read(f"/Documents/{f.name}.sha256") == f"{f.sha256}\n".encode()
        assert not [p for p in box.files if p.endswith(".part")]
        assert first.files[0].bytes_sent == f.size
        assert seen[-1] == (f.name, f.size, f.size) and len(seen) >= f.size // CHUNK

        written = box.written
        again = await device.prepare(wanted)
        assert again.files[0].bytes_sent == 0 and box.written == written, "the same sha256: no bytes moved"

        ok = await device.run_trial(contract_spec("rawloop-metal", first.path_of(f.name) or ""), 30)
        assert isinstance(ok, TrialResult) and ok.model == f.name
        lost = await device.run_trial(contract_spec("rawloop-metal", f.source, "contract-0001"), 30)
        assert isinstance(lost, TrialFailure) and "model_not_found" in lost.message, "a controller path is no use"
        await device.close()

    run(main())


def test_a_phone_without_room_is_refused_before_a_byte_moves(tmp_path: Path) -> None:
    wanted = model(tmp_path)

    async def main() -> None:
        phone = FakePhone()
        device, _ = make_device(phone, tmp_path)
        await device.prepare(Artifacts())  # the app (and its container) first
        box = phone.containers[HARNESS]
        box.capacity = sum(len(d) for d in box.files.values()) + (64 << 20)  # 64 MB free: under the reserve
        with pytest.raises(DeviceUnavailable) as refused:
            await device.prepare(wanted)
        assert refused.value.state == "no_space" and "to push" in str(refused.value) and refused.value.fix
        assert not [p for p in box.files if "/models/" in p], "not a byte, not a .part"
        await device.close()

    run(main())


def test_an_unplug_mid_push_leaves_only_a_part_and_the_next_prepare_completes(tmp_path: Path) -> None:
    wanted = model(tmp_path, 12)
    (f,) = wanted.files

    async def main() -> None:
        phone = FakePhone()
        device, _ = make_device(phone, tmp_path)

        def unplug(name: str, sent: int, total: int) -> None:
            if sent >= 5 << 20 and phone.plugged:
                phone.unplug()

        with pytest.raises(DeviceUnavailable) as cut:
            await device.prepare(wanted, progress=unplug)
        assert cut.value.state == "not_connected"
        box = phone.containers[HARNESS]
        final = f"/Documents/{f.name}"
        assert final not in box.files and final + ".sha256" not in box.files, "nothing under the final name"
        assert 0 < len(box.files[final + ".part"]) < f.size, "only the temporary, partly written"

        phone.plugged = True
        report = await device.prepare(wanted)
        assert report.files[0].bytes_sent == f.size and box.read(final) == Path(f.source).read_bytes()
        assert final + ".part" not in box.files
        await device.close()

    run(main())


def test_a_model_changed_during_the_push_is_not_put_in_place(tmp_path: Path) -> None:
    wanted = model(tmp_path)
    (f,) = wanted.files
    Path(f.source).write_bytes(b"other bytes than were hashed")

    async def main() -> None:
        phone = FakePhone()
        device, _ = make_device(phone, tmp_path)
        with pytest.raises(DeviceUnavailable, match="changed since it was hashed"):
            await device.prepare(wanted)
        box = phone.containers[HARNESS]
        assert not [p for p in box.files if "/models/" in p]
        await device.close()

    run(main())
