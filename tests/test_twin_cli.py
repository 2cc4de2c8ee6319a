"""`orch twin make-ipa`, `orch twin serve -- COMMAND` and `orch twin serve`'s input checks, through the CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from twin_support import ORCH, PMD, app_executable
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.twin.ipa import read_package


def test_make_ipa_builds_what_the_twin_installs(tmp_path: Path) -> None:
    exe = app_executable(tmp_path)
    out = tmp_path / "h.ipa"
    got = CliRunner().invoke(app, ["twin", "make-ipa", str(exe), "--out", str(out), "--bundle-id", "dev.orch.x",
                                   "--version", "2.1", "--build", "9", "--minimum-os", "16.0"])
    assert got.exit_code == 0, got.output
    package = read_package(out)
    assert package.bundle_id == "dev.orch.x" and package.executable == "HarnessApp"
    assert (package.info["CFBundleShortVersionString"], package.info["MinimumOSVersion"]) == ("2.1", "16.0")
    assert package.entitlements["get-task-allow"] is True and package.info["UIFileSharingEnabled"] is True

    store = tmp_path / "store.ipa"
    got = CliRunner().invoke(app, ["twin", "make-ipa", str(exe), "--out", str(store), "--no-development",
                                   "--no-file-sharing"])
    assert got.exit_code == 0, got.output
    package = read_package(store)
    assert package.profile is None and package.info["UIFileSharingEnabled"] is False


def test_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    got = CliRunner().invoke(app, ["twin", "serve", "--root", str(tmp_path), "--ios", "12.4"])
    assert got.exit_code == 2 and "iOS 14 and later" in got.output
    got = CliRunner().invoke(app, ["twin", "make-ipa", str(tmp_path / "missing"), "--out", str(tmp_path / "x.ipa")])
    assert got.exit_code == 2 and "not a file" in got.output


def test_serve_runs_a_command_against_the_twin_then_stops(tmp_path: Path) -> None:
    """What `make demo-twin` does: the command reaches the twin through USBMUXD_SOCKET_ADDRESS (here
    pymobiledevice3's own CLI lists it), the twin stops when the command ends, its temporary state is
    gone and orch exits with the command's code."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYMOBILEDEVICE3")}, "HOME": str(tmp_path),
           "NO_COLOR": "1", "TERM": "dumb"}
    listed = subprocess.run([str(ORCH), "twin", "serve", "--ephemeral", "--ios", "16.7", "--", str(PMD), "usbmux",
                             "list"], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert '"UniqueDeviceID": "00008140-001A2B3C4D5E6F70"' in listed.stdout, listed.stdout
    state = re.search(r"state in (\S+)", listed.stdout)
    assert state is not None and not Path(state[1]).exists()

    code = "import os, sys; print(os.environ['TUNNELD_ADDRESS']); sys.exit(3)"
    failed = subprocess.run([str(ORCH), "twin", "serve", "--ephemeral", "--", sys.executable, "-c", code], env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert failed.returncode == 3, failed.stdout + failed.stderr
    assert re.search(r"TUNNELD_ADDRESS=(127\.0\.0\.1:\d+)\n\1\n", failed.stdout), failed.stdout

    got = CliRunner().invoke(app, ["twin", "serve", "--ephemeral", "--root", str(tmp_path), "--", "true"])
    assert got.exit_code == 2 and "exclude each other" in got.output
