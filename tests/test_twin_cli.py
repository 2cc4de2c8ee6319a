"""`orch twin make-ipa` and `orch twin serve`'s input checks, through the CLI."""

from __future__ import annotations

from pathlib import Path

from twin_support import app_executable
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
