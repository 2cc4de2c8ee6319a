"""Models are deployed artifacts: an SSH host gets the plan's model (and what its arms read beside
it) in its cache folder over SFTP, once per content, never half-written, refused up front without
room; a local host reads the controller's file; a run's specs name the device's path; a run through
`orch agent` stages the files on the agent's host first. Against the real OpenSSH server on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MODEL, ORCH, fleet_of, plan_with, sim_device
from sshd import Sshd
from test_fake_contract import good
from test_run import invoke, only_run, write_inputs

from orchestrator import core
from orchestrator.clock import VirtualClock
from orchestrator.config import Fleet, Plan
from orchestrator.devices import FakeDevice, open_device
from orchestrator.devices.contract import contract_spec
from orchestrator.models.maker import make_model
from orchestrator.protocol import TrialResult
from orchestrator.protocol.device import ArtifactFile, Artifacts, DeviceUnavailable, NoSpace, PrepareReport, Progress
from orchestrator.results import MemoryJournal
from orchestrator.results.records import PreparedRecord, SessionStopped, TrialRecord
from orchestrator.runners import LocalRunner, deploy
from orchestrator.runners.deploy import check_room, parse_df, push_to_host
from orchestrator.runners.ssh import SshRunner
from orchestrator.runtimes.artifacts import host_files, sha256_file
from orchestrator.schedule import SessionState, run_sessions

ARMS = [{"name": "raw", "runtime": "rawloop-cpu", "threads": 1},
        {"name": "llama", "runtime": "llamacpp", "engine": {"gguf": "Q4_0"}},
        {"name": "ort", "runtime": "ort-genai"}]
RAW = [{"name": "t1", "runtime": "rawloop-cpu", "threads": 1}, {"name": "t2", "runtime": "rawloop-cpu", "threads": 2}]


@pytest.fixture(scope="module")
def t1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model folder as `orch model make` writes it: GGUFs, safetensors, config.json, manifest.json."""
    out = tmp_path_factory.mktemp("models") / "llama-t1-s0"
    make_model("llama", "t1", 0, out)
    return out


def plan(model: Path | str, arms: list[dict[str, object]] = RAW, **over: object) -> Plan:
    fields: dict[str, object] = {
        "name": "deploy", "model": str(model), "blocks": 6, "order": "williams" if len(arms) > 2 else "abba",
        "arms": arms, "trial": {"prompt_tokens": 8, "decode_tokens": 8, "timeout_s": 120},
        "settle": {"min_gap_s": 0, "flat_window_s": 0, "poll_s": 1, "timeout_s": 60}, "probe": False,
        "interference": None,  # what these tests check does not depend on other work on this machine
    }
    fields.update(over)
    return Plan.model_validate(fields)


def lab(sshd: Sshd, tmp_path: Path, harness: Path, **device: object) -> Fleet:
    return Fleet.model_validate({
        "hosts": [sshd.host(orch_command=ORCH, cache=str(tmp_path / "cache")).model_dump()],
        "devices": [{"id": "box", "kind": "host", "host": "loop", "harness": str(harness),
                     "workdir": str(tmp_path / "work"), **device}],
    })


def prepare(fleet: Fleet, artifacts: Artifacts, seen: list[tuple[str, int, int]] | None = None) -> PrepareReport:
    async def go() -> PrepareReport:
        device, _ = open_device(fleet, "box")
        try:
            return await device.prepare(artifacts, progress=lambda *a: seen.append(a) if seen is not None else None)
        finally:
            await device.close()

    return asyncio.run(go())


# -- free space -------------------------------------------------------------------------------------
def test_free_space_is_read_from_this_machines_df_and_a_push_that_does_not_fit_is_refused(tmp_path: Path) -> None:
    out = subprocess.run(["df", "-Pk", str(tmp_path)], capture_output=True, text=True, check=True).stdout
    st = os.statvfs(tmp_path)
    assert abs(parse_df(out) - st.f_bavail * st.f_frsize) < 64 << 20, (out, st)  # others write meanwhile
    spaced = "Filesystem 1024-blocks Used Available Capacity Mounted on\n" \
             "//nas/lab share 1000 400 600 40% /Volumes/lab share\n"
    assert parse_df(spaced) == 600 * 1024, "names with spaces on either side"
    with pytest.raises(ValueError, match="not df"):
        parse_df("df: /nowhere: No such file or directory\n")
    check_room("box", "/c", need=100 << 20, free=400 << 20)  # fits with the 256 MB reserve
    with pytest.raises(NoSpace) as refused:
        check_room("box", "/c", need=200 << 20, free=400 << 20)
    assert refused.value.state == "no_space" and isinstance(refused.value, DeviceUnavailable)
    assert "200.0 MB to push, 400.0 MB free at /c (256.0 MB kept free)" in str(refused.value)
    assert refused.value.fix and "free at least 56.0 MB on box" in refused.value.fix


# -- SSH hosts ----------------------------------------------------------------------------------------
def test_an_ssh_host_gets_the_model_and_what_its_arms_read_beside_it_once(
    sshd: Sshd, tmp_path: Path, harness: Path, t1: Path
) -> None:
    wanted = host_files(plan(t1 / "model-Q8_0.gguf", ARMS))
    key = sha256_file(t1 / "model-Q8_0.gguf")[:16]
    assert [f.name for f in wanted.files] == [f"models/{key}/{n}" for n in (
        "model-Q8_0.gguf", "config.json", "model-Q4_0.gguf", "model.safetensors", "manifest.json")]
    assert wanted.model == f"models/{key}/model-Q8_0.gguf"
    fleet, seen = lab(sshd, tmp_path, harness), []
    first = prepare(fleet, wanted, seen)
    folder = tmp_path / "cache" / "models" / key
    for f, placed in zip(wanted.files, first.files, strict=True):
        name = f.name.rsplit("/", 1)[1]
        assert placed.path == str(folder / name) and placed.bytes_sent == f.size == (t1 / name).stat().st_size
        assert (folder / name).read_bytes() == (t1 / name).read_bytes()
        assert (folder / f"{name}.sha256").read_text().strip() == f.sha256 == sha256_file(t1 / name)
        assert (f.name, f.size, f.size) in seen, "every push ends with its whole size reported"
    assert not list(folder.glob("*.part")), "no temporary left"
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir()}

    again = prepare(fleet, wanted)
    assert again.skipped and [p.bytes_sent for p in again.files] == [0] * 5, "the same sha256: no bytes moved"
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir()} == before

    (folder / "config.json").write_text("{}")  # changed on the host behind our back: its size no longer matches
    (folder / "model-Q4_0.gguf.sha256").unlink()  # or its marker is gone
    third = prepare(fleet, wanted)
    assert [p.bytes_sent > 0 for p in third.files] == [False, True, True, False, False]
    assert (folder / "config.json").read_bytes() == (t1 / "config.json").read_bytes()


def test_a_push_refused_for_space_moves_nothing(
    sshd: Sshd, tmp_path: Path, harness: Path, t1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real `df` of the host's cache folder, with the reserve raised to this disk's whole size (not
    its free space at one moment, which other work on the disk changes): nothing fits, so nothing may move."""
    st = os.statvfs(tmp_path)
    monkeypatch.setattr(deploy, "RESERVE_BYTES", st.f_blocks * st.f_frsize)
    with pytest.raises(DeviceUnavailable) as refused:
        prepare(lab(sshd, tmp_path, harness), host_files(plan(t1 / "model-Q8_0.gguf")))
    assert refused.value.state == "no_space" and "to push" in str(refused.value) and refused.value.fix
    models = tmp_path / "cache" / "models"
    assert not [p for p in models.rglob("*") if p.is_file()], "not a byte, not a .part"


def big_model(tmp_path: Path, mib: int) -> ArtifactFile:
    path = tmp_path / "controller" / "model-F32.gguf"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))
    return ArtifactFile(source=str(path), sha256=sha256_file(path), size=path.stat().st_size,
                        name="models/0123456789abcdef/model-F32.gguf")


_PUSH = """
import asyncio, json, sys
from orchestrator.config import SshHost
from orchestrator.protocol.device import ArtifactFile
from orchestrator.runners.deploy import push_to_host
from orchestrator.runners.ssh import SshRunner
host, f, root = SshHost.model_validate_json(sys.argv[1]), ArtifactFile.model_validate_json(sys.argv[2]), sys.argv[3]
asyncio.run(push_to_host(SshRunner(host), root, [f], "box", lambda n, sent, total: print(sent, flush=True)))
"""


def test_a_controller_killed_mid_push_leaves_only_a_part_that_the_next_push_replaces(
    sshd: Sshd, tmp_path: Path
) -> None:
    big, root = big_model(tmp_path, 96), tmp_path / "cache"
    final = root / big.name
    proc = subprocess.Popen([sys.executable, "-c", _PUSH, sshd.host().model_dump_json(), big.model_dump_json(),
                             str(root)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if int(line) >= 16 << 20:  # well into the file
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    part = Path(str(final) + ".part")
    assert not final.exists() and not Path(str(final) + ".sha256").exists(), "nothing under the final name"
    assert part.exists() and 0 < part.stat().st_size < big.size, "only the temporary, partly written"

    async def again() -> int:
        runner = SshRunner(sshd.host())
        try:
            (placed,) = await push_to_host(runner, str(root), [big], "box")
        finally:
            await runner.close()
        return placed.bytes_sent

    assert asyncio.run(again()) == big.size
    assert sha256_file(final) == big.sha256 and not part.exists()


def test_a_connection_dropped_mid_push_is_a_typed_refusal_and_the_next_prepare_completes(
    sshd: Sshd, tmp_path: Path, harness: Path
) -> None:
    big = big_model(tmp_path, 48)
    wanted = Artifacts(files=[big], model=big.name)

    async def cut_then_again() -> tuple[BaseException, PrepareReport]:
        device, _ = open_device(lab(sshd, tmp_path, harness), "box")
        runner = device.runner  # type: ignore[attr-defined]

        def drop(name: str, sent: int, total: int) -> None:
            if sent >= 8 << 20 and runner._client is not None:
                runner._client.get_transport().close()  # the link goes down, as an unplugged cable would

        try:
            with pytest.raises(DeviceUnavailable) as cut:
                await device.prepare(wanted, progress=drop)
            return cut.value, await device.prepare(wanted)  # the runner reconnects
        finally:
            await device.close()

    cut, report = asyncio.run(cut_then_again())
    assert cut.state == "unreachable" and "put" in str(cut), cut
    assert report.files[0].bytes_sent == big.size
    assert sha256_file(Path(report.files[0].path)) == big.sha256


# -- runs ----------------------------------------------------------------------------------------------
def test_orch_run_over_ssh_specs_name_the_hosts_copy(sshd: Sshd, tmp_path: Path, harness: Path, t1: Path) -> None:
    controller = tmp_path / "controller"
    shutil.copytree(t1, controller)
    table = controller / "rawloop-cpu.json"  # a tuning table for arm t2, deployed beside the model
    table.write_text(json.dumps({"engine": "rawloop-cpu", "params": {"kv_cache": "f32"}}))
    arms = [RAW[0], {**RAW[1], "tuning_table": str(table)}]
    f, p = write_inputs(tmp_path, lab(sshd, tmp_path, harness), plan(controller / "model-Q8_0.gguf", arms))
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 0, out
    run = only_run(tmp_path / "r")
    sha = sha256_file(controller / "model-Q8_0.gguf")
    deployed = tmp_path / "cache" / "models" / sha[:16] / "model-Q8_0.gguf"
    assert run.manifest().model_sha256 == sha
    (prepared,) = [r for r in run.records() if isinstance(r, PreparedRecord)]
    assert prepared.model == str(deployed) and prepared.model_sha256 == sha
    assert [(x.name.rsplit("/")[-1], x.bytes_sent) for x in prepared.files] == [
        ("model-Q8_0.gguf", deployed.stat().st_size), ("rawloop-cpu.json", table.stat().st_size)
    ], "the harness engines read the GGUF alone (and the arm's tuning table)"
    placed = tmp_path / "cache" / "tuning" / sha256_file(table)[:16] / "rawloop-cpu.json"
    assert prepared.tuning == {"t2": str(placed)} and placed.read_bytes() == table.read_bytes()
    assert run.manifest().tuning_sha256 == {"t2": sha256_file(table)}
    trials = [r for r in run.records() if isinstance(r, TrialRecord)]
    results = [r.result for r in trials]
    assert len(results) == 24 and all(r is not None and r.model == str(deployed) for r in results)
    tuned = {r.arm: json.dumps(r.result.tuning) for r in trials if r.result is not None}
    assert tuned == {"t1": "{}", "t2": '{"kv_cache": "f32"}'}, "the harness loaded the host's copy of the table"

    # Resumed with a different model under the same name: refused, the run untouched.
    (controller / "model-Q8_0.gguf").write_bytes((t1 / "model-Q4_0.gguf").read_bytes())
    code, out = invoke("run", "--resume", run.run_id, "--results", str(tmp_path / "r"))
    assert code == 2 and "model: " in out and "changed since run" in " ".join(out.split()), out


def test_a_missing_model_is_a_located_error_and_a_device_path_is_used_as_written(
    tmp_path: Path, harness: Path
) -> None:
    here = Fleet.model_validate({"devices": [{"id": "box", "kind": "host", "harness": str(harness),
                                              "workdir": str(tmp_path / "work")}]})
    f, p = write_inputs(tmp_path, here, plan(tmp_path / "nowhere" / "model-Q8_0.gguf"))
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    said = " ".join(out.split())  # the console wraps long lines
    assert code == 2 and f"{p}:3: model: no model file {tmp_path}/nowhere/model-Q8_0.gguf on this machine" in said, out
    assert not (tmp_path / "r").exists(), "nothing written"

    # model_location: device: a path on the device itself, nothing deployed, the spec carries it as written.
    f, p = write_inputs(tmp_path, here, plan(MODEL, model_location="device"))
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 0, out
    run = only_run(tmp_path / "r")
    (prepared,) = [r for r in run.records() if isinstance(r, PreparedRecord)]
    assert prepared.files == [] and prepared.model == MODEL and run.manifest().model_sha256 is None
    assert {r.result.model for r in run.records() if isinstance(r, TrialRecord) and r.result} == {MODEL}


def test_a_tuning_table_that_cannot_be_deployed_is_a_located_error(tmp_path: Path, harness: Path) -> None:
    here = Fleet.model_validate({"devices": [{"id": "box", "kind": "host", "harness": str(harness),
                                              "workdir": str(tmp_path / "work")}]})
    metal = tmp_path / "metal.json"
    metal.write_text(json.dumps({"engine": "rawloop-metal", "params": {}}))
    junk = tmp_path / "junk.json"
    junk.write_text('{"engine": "rawloop-cpu", "params": {}, "tiles": 3}')
    cases = [
        (tmp_path / "none.json", "no tuning table"),
        (metal, "is a table for 'rawloop-metal'; the arm runs 'rawloop-cpu'"),
        (junk, "is not a harness tuning table"),
    ]
    for table, why in cases:
        arms = [RAW[0], {**RAW[1], "tuning_table": str(table)}]
        f, p = write_inputs(tmp_path, here, plan(MODEL, arms, model_location="device"))
        code, out = invoke("validate", str(f), str(p))
        said = " ".join(out.split())
        assert code == 2 and "arms[1].tuning_table: " in said and why in said, out
    arms = [RAW[0], {"name": "llama", "runtime": "llamacpp", "tuning_table": str(metal)}]
    f, p = write_inputs(tmp_path, here, plan(MODEL, arms, model_location="device"))
    code, out = invoke("validate", str(f), str(p))
    assert code == 2, out
    said = " ".join(out.split())
    assert "only the harness's engines (rawloop-cpu, rawloop-metal, harness-llamacpp) read a tuning table" in said, out
    # llama.cpp in the harness: its tables carry the harness's engine name (`llamacpp`), as export-tuning writes them
    for engine, ok in (("llamacpp", True), ("harness-llamacpp", False)):
        table = tmp_path / f"{engine}.json"
        table.write_text(json.dumps({"engine": engine, "params": {"n_batch": 32}}))
        arms = [RAW[0], {"name": "inh", "runtime": "harness-llamacpp", "tuning_table": str(table)}]
        f, p = write_inputs(tmp_path, here, plan(MODEL, arms, model_location="device"))
        code, out = invoke("validate", str(f), str(p))
        assert (code == 0) == ok, out
        assert ok or "the arm runs 'harness-llamacpp' (engine 'llamacpp')" in " ".join(out.split()), out


def test_a_local_host_reads_the_controllers_file_where_it_is(tmp_path: Path, harness: Path, t1: Path) -> None:
    here = Fleet.model_validate({"devices": [{"id": "box", "kind": "host", "harness": str(harness),
                                              "workdir": str(tmp_path / "work")}]})
    wanted = host_files(plan(t1 / "model-Q8_0.gguf", ARMS))
    report = prepare(here, wanted)
    assert [(p.path, p.bytes_sent) for p in report.files] == [(f.source, 0) for f in wanted.files]
    assert report.path_of(wanted.model or "") == str(t1 / "model-Q8_0.gguf")


# -- through `orch agent` on the host ------------------------------------------------------------------
def test_through_the_agent_the_files_are_staged_on_its_host_and_read_there(
    sshd: Sshd, tmp_path: Path, harness: Path, t1: Path
) -> None:
    fleet = lab(sshd, tmp_path, harness, via="agent")
    wanted = host_files(plan(t1 / "model-Q8_0.gguf"))
    (model,) = wanted.files

    async def go() -> tuple[PrepareReport, PrepareReport, TrialResult | object, list[tuple[str, int, int]]]:
        device, _ = open_device(fleet, "box")
        assert type(device).__name__ == "AgentDevice"
        seen: list[tuple[str, int, int]] = []
        try:
            first = await device.prepare(wanted, progress=lambda *a: seen.append(a))
            again = await device.prepare(wanted)
            path = first.path_of(model.name)
            assert path is not None
            outcome = await device.run_trial(contract_spec("rawloop-cpu", path), 120)
        finally:
            await device.close()
        return first, again, outcome, seen

    first, again, outcome, seen = asyncio.run(go())
    staged = tmp_path / "cache" / model.name
    assert first.files[0].path == str(staged) and staged.read_bytes() == (t1 / "model-Q8_0.gguf").read_bytes()
    assert first.files[0].bytes_sent == model.size and again.files[0].bytes_sent == 0
    assert (model.name, model.size, model.size) in seen
    assert isinstance(outcome, TrialResult) and outcome.model == str(staged)


def test_a_plan_names_its_model_file_plainly(tmp_path: Path, t1: Path, harness: Path) -> None:
    odd = tmp_path / "my model (q8).gguf"
    shutil.copy(t1 / "model-Q8_0.gguf", odd)
    here = Fleet.model_validate({"devices": [{"id": "box", "kind": "host", "harness": str(harness)}]})
    f, p = write_inputs(tmp_path, here, plan(odd))
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 2 and "is not plain" in out and "rename the file" in " ".join(out.split()), out


def test_artifact_names_stay_inside_the_devices_root() -> None:
    ok = {"source": "/m", "sha256": "0" * 64, "size": 1}
    ArtifactFile.model_validate({**ok, "name": "models/0123/model-Q8_0.gguf"})
    for bad in ("../x", "/abs", "models/../../x", "models//x", "a b", "models/x.part", "models/x.sha256", ""):
        with pytest.raises(ValueError):
            ArtifactFile.model_validate({**ok, "name": bad})



# -- the session: the spec names where prepare put the model -----------------------------------------
def session_records(device: FakeDevice, wanted: Artifacts) -> list[object]:
    fleet = fleet_of(sim_device("dev"))
    plan = plan_with(settle={"min_gap_s": 0, "flat_window_s": 0}, arms=[{"name": "a", "runtime": "e"},
                                                                      {"name": "b", "runtime": "e"}])
    manifest = core.new_manifest(fleet, plan, Path(__file__), Path(__file__))
    journal = MemoryJournal()
    asyncio.run(run_sessions(manifest, journal, lambda d: (device, VirtualClock()), {"dev": SessionState()},
                             artifacts={"dev": wanted}))
    return journal.records


def test_every_spec_names_the_devices_path_and_the_journal_its_sha256(tmp_path: Path) -> None:
    path = tmp_path / "model-Q8_0.gguf"
    shutil.copy(MODEL, path)
    f = ArtifactFile(source=str(path), sha256=sha256_file(path), size=path.stat().st_size, name="models/k/m.gguf")
    device = FakeDevice("dev", good)
    records = session_records(device, Artifacts(files=[f], model=f.name))
    assert {s.model for s in device.specs} == {"/fake/models/k/m.gguf"}, "where the fake put it, not the controller's"
    (prepared,) = [r for r in records if isinstance(r, PreparedRecord)]
    assert prepared.model == "/fake/models/k/m.gguf" and prepared.model_sha256 == f.sha256
    assert prepared.files[0].path == "/fake/models/k/m.gguf"

    class Forgetful(FakeDevice):  # a backend that puts the files somewhere and does not say where
        async def prepare(self, artifacts: Artifacts, progress: Progress | None = None) -> PrepareReport:
            return (await super().prepare(artifacts, progress)).model_copy(update={"files": []})

    records = session_records(Forgetful("dev", good), Artifacts(files=[f], model=f.name))
    (stop,) = [r for r in records if isinstance(r, SessionStopped)]
    assert stop.reason == "prepare_failed" and "did not say where the model models/k/m.gguf landed" in stop.detail


def test_the_agent_relays_push_progress_ahead_of_its_reply(t1: Path) -> None:
    """Both ends of the relay: `orch agent` writes `pushed` replies while its device pushes, and the
    controller's AgentDevice hands them to its progress callback before the final reply."""
    import io

    from orchestrator.agent_server import _handle
    from orchestrator.config import HostDeviceConfig
    from orchestrator.devices.agent_client import AgentDevice, Reply, Request

    f = host_files(plan(t1 / "model-Q8_0.gguf")).files[0]

    class Pushing(FakeDevice):  # a device whose push reports twice
        async def prepare(self, artifacts: Artifacts, progress: Progress | None = None) -> PrepareReport:
            assert progress is not None
            progress(f.name, 1, f.size)
            progress(f.name, f.size, f.size)
            return await super().prepare(artifacts, progress)

    out = io.StringIO()
    req = Request(id=7, op="prepare", artifacts=Artifacts(files=[f], model=f.name))
    reply, _ = asyncio.run(_handle(req, Pushing("dev", good), out))
    lines = [*out.getvalue().splitlines(), reply.model_dump_json()]
    pushed = [Reply.model_validate_json(ln).pushed for ln in lines]
    assert [(p.sent, p.total) if p else None for p in pushed] == [(1, f.size), (f.size, f.size), None]
    assert reply.report is not None and reply.id == 7

    class Wire:  # the stream those lines arrive on
        def __init__(self) -> None:
            self.sent: list[str] = []

        async def send(self, line: str) -> None:
            self.sent.append(line)

        async def receive(self, timeout: float) -> str:
            return lines.pop(0).replace('"id":7', f'"id":{json.loads(self.sent[-1])["id"]}')

        async def close(self) -> None:
            return None

    device = AgentDevice(HostDeviceConfig(id="dev", kind="host"), LocalRunner(), ["orch"])
    device._stream = Wire()  # type: ignore[assignment]
    seen: list[tuple[str, int, int]] = []
    report = asyncio.run(device.prepare(Artifacts(files=[f], model=f.name), progress=lambda *a: seen.append(a)))
    assert seen == [(f.name, 1, f.size), (f.name, f.size, f.size)]
    assert report.path_of(f.name) == f"/fake/{f.name}"
