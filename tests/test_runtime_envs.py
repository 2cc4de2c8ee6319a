"""Isolated environments and `orch runtimes`: install progress from pip's output, what counts as
installed, the not-installed message, list and gate through the CLI."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import pytest
import typer
from conftest import MODEL
from sshd import Sshd, free_port
from typer.testing import CliRunner

from orchestrator.cli_runtimes import register
from orchestrator.config import HostDeviceConfig
from orchestrator.devices.host import HostDevice
from orchestrator.protocol import TrialSpec
from orchestrator.runners import LocalRunner
from orchestrator.runtimes import catalog, envs
from orchestrator.runtimes.envs import install, installed

PIP_LINES = """Using pip 23.2.1 from /x/venv/lib/python3.11/site-packages/pip (python 3.11)
Collecting llama-cpp-python==0.3.36
  Downloading llama_cpp_python-0.3.36.tar.gz (52.3 MB)
Building wheels for collected packages: llama-cpp-python
  Building wheel for llama-cpp-python (pyproject.toml): started
  [1/193] /usr/bin/cc -O3 -c ggml.c
  [96/193] /usr/bin/g++ -O3 -c llama.cpp
  [193/193] Linking CXX shared library libllama.so
Installing collected packages: llama-cpp-python
Successfully installed llama-cpp-python-0.3.36
"""


def app() -> typer.Typer:
    a = typer.Typer()

    @a.command()
    def version() -> None:  # a second command keeps `runtimes` a group, as in the real app
        pass

    register(a)
    return a


def test_pip_output_becomes_monotonic_progress() -> None:
    seen: list[tuple[str, float]] = []
    pip = envs.PipProgress(lambda what, frac: seen.append((what, frac)))
    for line in PIP_LINES.splitlines(True):
        pip(line)
    assert seen[0] == ("resolving llama-cpp-python==0.3.36", 0.05)
    assert ("compiling", pytest.approx(0.1 + 0.8 * 96 / 193)) in seen
    assert seen[-1] == ("installing", 0.92) and pip.tail(1) == "Successfully installed llama-cpp-python-0.3.36"


def test_installed_needs_the_stamp_and_the_interpreter(tmp_path: Path) -> None:
    assert installed("llamacpp", tmp_path) is None
    d = tmp_path / "runtimes" / "llamacpp"
    (d / "venv" / "bin").mkdir(parents=True)
    (d / "venv" / "bin" / "python").write_text("")
    assert installed("llamacpp", tmp_path) is None, "an interrupted install has no stamp"
    (d / "installed.json").write_text(json.dumps({"versions": {"llama-cpp-python": "0.3.36"}, "seconds": 400.0}))
    got = installed("llamacpp", tmp_path)
    assert got is not None and got.versions == {"llama-cpp-python": "0.3.36"} and got.seconds == 400.0
    assert asyncio.run(envs.disk_used(LocalRunner(), got.path)) > 0


@pytest.mark.parametrize("runtime", ["llamacpp", "ort-genai", "mlx"])
def test_a_runtime_not_installed_names_the_install_command(
    runtime: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_CACHE", str(tmp_path / "cache"))
    device = HostDevice(HostDeviceConfig(id="here", kind="host", workdir=str(tmp_path)), LocalRunner(),
                        launchers=catalog.adapter_for)
    spec = TrialSpec(run_id="r", trial_id="t", engine=runtime, model=str(tmp_path / "model-Q8_0.gguf"),
                     prompt_tokens=4, decode_tokens=4)
    failure = asyncio.run(device.run_trial(spec, 30))
    assert failure.kind == "launch_failed"  # type: ignore[union-attr]
    assert f"orch runtimes install {runtime}" in failure.message  # type: ignore[union-attr]


def test_a_run_whose_runtime_is_not_installed_stops_and_says_how_to_install_it(
    harness: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_run import invoke, write_inputs

    from orchestrator.config import Fleet, Plan

    monkeypatch.setenv("ORCH_CACHE", str(tmp_path / "cache"))
    shutil.copy(MODEL, tmp_path / "model-Q8_0.gguf")  # the model is there; the runtimes are not
    fleet = Fleet.model_validate({"name": "here", "devices": [
        {"id": "here", "kind": "host", "workdir": str(tmp_path / "w")}]})
    plan = Plan.model_validate({"name": "p", "model": str(tmp_path / "model-Q8_0.gguf"), "blocks": 6, "probe": False,
                                "arms": [{"name": "a", "runtime": "llamacpp"}, {"name": "b", "runtime": "mlx"}],
                                "settle": {"min_gap_s": 0, "flat_window_s": 0, "poll_s": 1, "timeout_s": 30}})
    f, p = write_inputs(tmp_path, fleet, plan)
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 1, out
    assert "here: too_many_failures:" in out and "trials in a row failed; last: launch_failed:" in out
    assert "is not installed on here: run `orch runtimes install " in out, out


def test_cli_list_install_and_gate_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_CACHE", str(tmp_path))
    res = CliRunner().invoke(app(), ["runtimes", "list", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["runtime"]: r for r in json.loads(res.stdout)["runtimes"]}
    assert rows["llamacpp"]["installed"] is False and rows["llamacpp"]["install"] == "orch runtimes install llamacpp"
    assert rows["numpy"]["installed"] is True and set(rows) >= {"rawloop-cpu", "ort-genai", "mlx", "litert-lm"}
    res = CliRunner().invoke(app(), ["runtimes", "list"])
    assert res.exit_code == 0 and "orch runtimes install ort-genai" in res.output
    res = CliRunner().invoke(app(), ["runtimes", "install", "tensorflow"])
    assert res.exit_code == 2 and "installable runtimes are llamacpp" in res.output
    res = CliRunner().invoke(app(), ["runtimes", "gate", "no-such-run", "--results", str(tmp_path)])
    assert res.exit_code == 2


def test_cli_prepare_names_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_CACHE", str(tmp_path))
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: p\nmodel: /nowhere/model-Q8_0.gguf\narms:\n  - {name: ref, runtime: numpy}\n"
                    "  - {name: ort, runtime: ort-genai}\n")
    res = CliRunner().invoke(app(), ["runtimes", "prepare", str(plan)])
    assert res.exit_code == 1, res.output
    assert "ref: numpy: nothing to convert" in res.output
    assert "ort: failed: ort-genai is not installed: run `orch runtimes install ort-genai`" in res.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: p\n")
    assert CliRunner().invoke(app(), ["runtimes", "prepare", str(bad)]).exit_code == 2


# pip itself: "Requirement already satisfied", so no index is needed; --no-index makes a missing package fail offline.
TINY = envs.EnvSpec("tiny", ("pip",), "import json, pip; print(json.dumps({'pip': pip.__version__}))", "seconds")
BROKEN = envs.EnvSpec("broken", ("--no-index", "orch-no-such-package"), "import sys", "seconds")


def test_install_on_an_ssh_host_through_the_cli(sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`orch runtimes install --fleet F --host H` makes the environment in the SSH host's cache folder,
    stamps it only once it imports, skips it the second time; a failed install leaves no stamp."""
    monkeypatch.setenv("ORCH_CACHE", str(tmp_path / "here"))
    for spec in (TINY, BROKEN):
        monkeypatch.setitem(catalog.CATALOG, spec.name, catalog.Runtime(spec.name, "driver", "a test environment",
                                                                         spec.name, env=spec))

    remote = tmp_path / "there"
    fleet = tmp_path / "fleet.yaml"
    host = sshd.host(python=sys.executable, cache=str(remote)).model_dump()
    fleet.write_text(json.dumps({"name": "lab", "hosts": [host], "devices": [  # JSON is YAML
        {"id": "cpu", "kind": "host", "host": "loop"}]}))
    res = CliRunner().invoke(app(), ["runtimes", "install", "tiny", "--fleet", str(fleet)])
    assert res.exit_code == 0, res.output
    assert "tiny on loop: installed in" in res.output
    stamp = json.loads((remote / "runtimes" / "tiny" / "installed.json").read_text())
    assert stamp["versions"]["pip"] and "Requirement already satisfied: pip" in (
        remote / "runtimes" / "tiny" / "install.log").read_text()
    assert not (tmp_path / "here" / "runtimes" / "tiny").exists(), "installed there, not here"
    res = CliRunner().invoke(app(), ["runtimes", "install", "tiny", "--fleet", str(fleet), "--host", "loop"])
    assert res.exit_code == 0 and "tiny on loop: installed (pip " in res.output, res.output
    res = CliRunner().invoke(app(), ["runtimes", "list", "--json", "--fleet", str(fleet)])
    rows = {r["runtime"]: r for r in json.loads(res.stdout)["runtimes"]}
    assert rows["tiny"]["host"] == "loop" and rows["tiny"]["installed"] is True and rows["tiny"]["disk_bytes"] > 1e6
    assert rows["broken"]["install"] == "orch runtimes install broken --fleet F --host loop"
    artifacts = remote / "artifacts" / "tiny"
    artifacts.mkdir(parents=True)
    (artifacts / "converted.bin").write_bytes(b"x" * 5000)
    res = CliRunner().invoke(app(), ["runtimes", "uninstall", "tiny", "--fleet", str(fleet)])
    assert res.exit_code == 0 and "tiny on loop: removed (" in res.output and "MB freed" in res.output, res.output
    assert not (remote / "runtimes" / "tiny").exists() and not artifacts.exists(), "the env and its conversions"
    res = CliRunner().invoke(app(), ["runtimes", "uninstall", "tiny", "--fleet", str(fleet)])
    assert res.exit_code == 0 and "tiny on loop: not installed" in res.output
    res = CliRunner().invoke(app(), ["runtimes", "install", "broken", "--fleet", str(fleet)])
    assert res.exit_code == 1 and "pip install failed for broken on loop (exit 1)" in res.output, res.output
    assert "orch-no-such-package" in res.output, "the tail of pip's output says why"
    assert not (remote / "runtimes" / "broken" / "installed.json").exists()
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: p\nmodel: ~/m/model-Q8_0.gguf\narms:\n  - {name: ref, runtime: numpy}\n"
                    "  - {name: ort, runtime: ort-genai}\n")
    res = CliRunner().invoke(app(), ["runtimes", "prepare", str(plan), "--fleet", str(fleet)])
    assert res.exit_code == 1 and "ref: numpy: nothing to convert" in res.output
    assert "ort: failed: ort-genai is not installed on loop: run `orch runtimes install ort-genai --fleet F --host " \
           "loop`" in res.output, res.output
    res = CliRunner().invoke(app(), ["runtimes", "install", "tiny", "--fleet", str(fleet), "--host", "moon"])
    assert res.exit_code == 2 and "no host moon (hosts: local, loop)" in res.output
    res = CliRunner().invoke(app(), ["runtimes", "install", "tiny", "--host", "loop"])
    assert res.exit_code == 2 and "needs --fleet FILE" in res.output


def test_install_here_makes_and_stamps_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_CACHE", str(tmp_path))
    seen: list[str] = []
    got = asyncio.run(install(LocalRunner(), TINY, lambda what, frac: seen.append(what)))
    assert got.path == str(tmp_path / "runtimes" / "tiny") and installed("tiny") == got
    assert seen[0] == "creating the environment" and seen[-2:] == ["checking", "done"]


def test_an_unreachable_host_fails_the_command_and_says_so(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(json.dumps({"name": "lab", "devices": [{"id": "cpu", "kind": "host", "host": "gone"}], "hosts": [
        {"id": "gone", "kind": "ssh", "address": "127.0.0.1", "port": free_port(), "user": "x",
         "connect_timeout_s": 2}]}))
    res = CliRunner().invoke(app(), ["runtimes", "list", "--fleet", str(fleet)])
    assert res.exit_code == 1 and "gone (x@127.0.0.1" in res.output and "cannot connect" in res.output, res.output
    assert "rawloop-cpu" not in res.output, "no rows for a host that could not be asked"
