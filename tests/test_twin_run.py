"""`orch run` end to end on a phone twin: the real harness app, launched through DVT over RSD on a
twin presenting iOS 18.2, the fleet pointing the iphone backend at the twin's usbmuxd and tunneld."""

from __future__ import annotations

import asyncio
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pymobiledevice3.services.house_arrest import HouseArrestService
from pymobiledevice3.services.installation_proxy import InstallationProxyService
from twin_support import BUNDLE, HARNESS, MODEL, ORCH, harness_has_app, lockdown, running_twin

from orchestrator.twin import make_ipa


@pytest.mark.skipif(not harness_has_app(), reason="no harness build with `harness app` (swift build in ios_harness)")
def test_orch_run_on_a_twin(tmp_path: Path) -> None:
    ipa = make_ipa(tmp_path / "twin.ipa", HARNESS, BUNDLE, minimum_os="16.0")
    with running_twin(tmp_path, ios="18.2") as twin:

        async def install_and_push() -> None:  # the model is already on the phone (model_location: device)
            client: Any = await lockdown(twin, tmp_path)
            try:
                async with InstallationProxyService(lockdown=client) as proxy:
                    await proxy.install_from_local(ipa)
                async with await HouseArrestService.create(client, BUNDLE) as box:
                    await box.set_file_contents("/Documents/t1.gguf", MODEL.read_bytes())
            finally:
                await client.close()

        asyncio.run(install_and_push())
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(textwrap.dedent(f"""\
            name: twin
            devices:
              - id: twin
                kind: iphone
                udid: {twin.phone.cfg.udid}
                usbmux_address: {twin.address}
                tunnel: tunneld
                tunneld_address: {twin.tunneld_address}
                ipa: {ipa}
                poll_s: 0.05
            """))
        plan = tmp_path / "plan.yaml"
        plan.write_text(textwrap.dedent("""\
            name: twin-threads
            model: t1.gguf
            model_location: device
            devices: [twin]
            arms:
              - {name: one-thread, runtime: rawloop-cpu, threads: 1}
              - {name: two-threads, runtime: rawloop-cpu, threads: 2}
            trial: {prompt_tokens: 8, decode_tokens: 16, timeout_s: 60}
            blocks: 6
            settle: {flat_window_s: 0, min_gap_s: 0, poll_s: 0.1, timeout_s: 60}
            """))
        env = {**os.environ, "HOME": str(tmp_path / "home"), "COLUMNS": "200"}
        run = subprocess.run([str(ORCH), "run", "--fleet", str(fleet), "--plan", str(plan), "--results",
                              str(tmp_path / "results")], env=env, capture_output=True, text=True, timeout=300,
                             check=False)
        launches = [argv for bundle, argv in twin.phone.processes.launches if bundle == BUNDLE]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "│ twin   │ 24      │ 24 │ 0      │" in run.stdout, run.stdout
    assert len(launches) == 24 and all(argv[1:3] == ["app", "--container"] for argv in launches)
    assert len(list((tmp_path / "results").glob("*/journal.jsonl"))) == 1
