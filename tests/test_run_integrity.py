"""Nothing lost, nothing duplicated, no traceback: the run lock, whole journal records, corrupt lines,
run ids confined to --results, and a broken results folder. Real processes where it matters."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import fleet_of, plan_with, sim_device
from test_run import finals, invoke, write_inputs

from orchestrator import core
from orchestrator.derive import derive
from orchestrator.results.journal import Journal, JournalWriteError, read_records
from orchestrator.results.records import RunFinished, RunStarted
from orchestrator.results.store import RunDir

ORCH = [sys.executable, "-m", "orchestrator"]
ROOT = os.geteuid() == 0  # root ignores file modes: read-only folders are made as read-only mounts instead


def new_run(tmp_path: Path, devices: int = 1, blocks: int = 6, execute: bool = True) -> RunDir:
    fleet = fleet_of(*(sim_device(f"p{i}", seed=i) for i in range(devices)))
    f, p = write_inputs(tmp_path, fleet, plan_with(blocks=blocks))
    run = core.start_run(core.new_manifest(*core.load_inputs(f, p), f, p), tmp_path / "r")
    if execute:
        asyncio.run(core.execute(run))
    return run


def orch(*args: str, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ORCH, *args], capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload, no-any-return]


def no_traceback(res: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr


# --- 1. one writer per run ---------------------------------------------------------------------

HOLD = """
import sys, time
from pathlib import Path
from orchestrator.results.store import RunDir
with RunDir(Path(sys.argv[1])).lock():
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_run_another_process_writes_is_refused_and_freed_when_that_process_dies(tmp_path: Path) -> None:
    run = new_run(tmp_path, execute=False)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        code, out = invoke("run", "--resume", run.run_id, "--results", str(run.path.parent))
        assert code == 3, out
        assert f"being written by another orch process (pid {holder.pid})" in out
        assert not run.journal_path.exists() or not run.records(), "the refused resume wrote nothing"
        code, out = invoke("show", run.run_id, "--results", str(run.path.parent))  # reading is allowed
        assert code == 0 and "derived in memory" in out, out
        assert not run.trials_path.exists(), "show wrote nothing into a run being written"
    finally:
        holder.kill()  # SIGKILL: the OS releases the lock
        holder.wait()
    code, out = invoke("run", "--resume", run.run_id, "--results", str(run.path.parent))
    assert code == 0, out
    assert len(finals(run)) == 24 and set(finals(run).values()) == {1}


def test_two_resumes_at_once_one_runs_the_other_is_refused(tmp_path: Path) -> None:
    run = new_run(tmp_path, devices=12, blocks=20, execute=False)
    results = str(run.path.parent)
    first = subprocess.Popen([*ORCH, "run", "--resume", run.run_id, "--results", results],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (run.journal_path.exists() and run.journal_path.stat().st_size):
        time.sleep(0.001)  # the first holds the lock once it has journaled its start
    first.send_signal(signal.SIGSTOP)  # mid-run, lock held, for as long as the second needs
    try:
        size = run.journal_path.stat().st_size
        second = orch("run", "--resume", run.run_id, "--results", results)
        assert run.journal_path.stat().st_size == size, "the refused resume wrote nothing"
    finally:
        first.send_signal(signal.SIGCONT)
    out, errs = first.communicate(timeout=300)
    assert first.returncode == 0, out + errs
    assert second.returncode == 3 and "being written by another orch process" in second.stderr, second
    no_traceback(second)
    assert len(finals(run)) == 960 and set(finals(run).values()) == {1}
    assert sum(isinstance(r, RunStarted) for r in run.records()) == 1


# --- 2. whole records or a clean stop --------------------------------------------------------------

class Disk:
    """os.write as a nearly full disk does it: a few bytes per call, then no space at all."""

    def __init__(self, room: int, step: int = 7):
        self.room, self.step = room, step

    def __call__(self, fd: int, data: memoryview) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = os.write(fd, data[: min(self.step, self.room)])
        self.room -= n
        return n


def test_short_writes_are_continued_and_a_full_disk_leaves_only_whole_records(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    disk = Disk(room=250)
    journal = Journal(path, write=disk)
    record = RunStarted(wall=1.0, resumed=False, pid=1)
    size = len(record.model_dump_json()) + 1
    written = 0
    with pytest.raises(JournalWriteError, match="No space left on device"):
        while True:
            journal.append(record)  # seven bytes at a time: each record still lands whole
            written += 1
    assert written == 250 // size
    assert path.read_bytes() == (record.model_dump_json().encode() + b"\n") * written, "the partial record is cut"
    disk.room = 10_000  # space comes back: the journal stays failed, nothing lands after a hole
    with pytest.raises(JournalWriteError):
        journal.append(record)
    journal.close()
    assert len(read_records(path).records) == written and not read_records(path).skipped


def _limit_file_size(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))


def test_a_journal_the_kernel_cuts_short_stops_the_run_cleanly_and_it_resumes(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the kernel do what a full disk does: a short write, then an error (EFBIG)."""
    run = new_run(tmp_path, devices=3, execute=False)
    results = str(run.path.parent)
    res = subprocess.run([*ORCH, "run", "--resume", run.run_id, "--results", results], capture_output=True,
                         text=True, timeout=120, preexec_fn=lambda: _limit_file_size(40_000))
    assert res.returncode == 3, res
    no_traceback(res)
    assert "cannot write the journal: File too large" in res.stderr and f"--resume {run.run_id}" in res.stderr
    reading = read_records(run.journal_path)
    assert not reading.skipped and 0 < len(finals(run)) < 72, "stopped mid-run, every record whole"
    assert not any(isinstance(r, RunFinished) for r in reading.records)
    res = orch("run", "--resume", run.run_id, "--results", results)
    assert res.returncode == 0, res
    assert len(finals(run)) == 72 and set(finals(run).values()) == {1}


@pytest.mark.skipif(not ROOT, reason="mounting a small tmpfs needs root (the RLIMIT_FSIZE test covers the rest)")
def test_a_full_disk_stops_the_run_and_it_resumes_when_space_comes_back(tmp_path: Path) -> None:
    results = tmp_path / "small"
    results.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(results)], check=True)
    try:
        fleet = fleet_of(*(sim_device(f"p{i}", seed=i) for i in range(3)))
        f, p = write_inputs(tmp_path, fleet, plan_with(blocks=20))
        res = orch("run", "--fleet", str(f), "--plan", str(p), "--results", str(results))
        assert res.returncode == 3, res
        no_traceback(res)
        assert "No space left on device" in res.stderr
        (run_path,) = results.iterdir()
        run = RunDir(run_path)
        assert not read_records(run.journal_path).skipped
        before = len(finals(run))
        subprocess.run(["mount", "-o", "remount,size=16m", str(results)], check=True)
        res = orch("run", "--resume", run.run_id, "--results", str(results))
        assert res.returncode == 0, res
        assert 0 < before < 240 and len(finals(run)) == 240 and set(finals(run).values()) == {1}
    finally:
        subprocess.run(["umount", "-l", str(results)], check=False)


# --- 3. a corrupt line costs that line only ---------------------------------------------------------

def test_corrupt_middle_lines_are_skipped_by_line_and_their_trials_run_again(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    lines = run.journal_path.read_bytes().split(b"\n")
    trial_lines = [i for i, line in enumerate(lines) if b'"type":"trial"' in line]
    garbage, nul = trial_lines[3], trial_lines[7]
    lines[garbage] = b"{not json at all"
    lines[nul] = b"\x00" * 40
    lines.insert(trial_lines[10], lines[trial_lines[11]])  # a second record of one trial
    lines.insert(5, b'{"type": "trial", "device": "p0"}')  # a record of the wrong shape
    lines.insert(6, lines[trial_lines[1]].replace(b'"device":"p0"', b'"device":"ghost"'))  # no such session
    run.journal_path.write_bytes(b"\n".join(lines))
    code, out = invoke("show", run.run_id, "--results", str(run.path.parent))
    assert code == 0, out
    warned = [line for line in out.splitlines() if ": skipped: " in line]
    assert len(warned) == 5, out
    flat = " ".join(out.split())  # the console wraps long lines
    assert f"journal.jsonl:{garbage + 3}: skipped: not a journal record" in flat  # two lines inserted above it
    assert "a second record of trial" in flat and "'ghost', which has no session" in flat
    assert "runs it again" in flat
    assert len(finals(run)) == 22 and set(finals(run).values()) == {1}
    code, out = invoke("run", "--resume", run.run_id, "--results", str(run.path.parent))
    assert code == 0, out
    assert len(finals(run)) == 24 and set(finals(run).values()) == {1}


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[list[str]]:
    """A command prefix that runs with `folder` read-only: a read-only bind mount in a mount namespace
    of its own as root, file modes otherwise."""
    if ROOT:
        script = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" && exec "$@"'
        yield ["unshare", "-m", "sh", "-c", script, str(folder)]
        return
    modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")]}
    for p in modes:
        p.chmod(modes[p] & ~0o222)
    try:
        yield []
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


def test_a_read_only_results_folder(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    for derived in (run.trials_path, run.verdicts_path):
        derived.unlink()
    results = run.path.parent
    with read_only(results) as prefix:
        show = subprocess.run([*prefix, *ORCH, "show", run.run_id, "--results", str(results)],
                              capture_output=True, text=True, timeout=120)
        f, p = write_inputs(tmp_path, fleet_of(sim_device("p0")), plan_with())
        new = subprocess.run([*prefix, *ORCH, "run", "--fleet", str(f), "--plan", str(p), "--results", str(results)],
                             capture_output=True, text=True, timeout=120)
        resume = subprocess.run([*prefix, *ORCH, "run", "--resume", run.run_id, "--results", str(results)],
                                capture_output=True, text=True, timeout=120)
    assert show.returncode == 0 and "faster" in show.stdout and "derived in memory" in show.stderr, show
    assert not run.trials_path.exists()
    for res in (new, resume):
        no_traceback(res)
        assert res.returncode == 3, res
        assert "Read-only file system" in res.stderr or "Permission denied" in res.stderr, res
    assert [p.name for p in results.iterdir()] == [run.run_id], "no half-made run directory"


# --- 4. a run id is a name under --results ----------------------------------------------------------

def test_run_ids_are_names_under_results_never_paths(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    outside = tmp_path / "outside"
    shutil.copytree(run.path, outside / run.run_id)
    before = sorted(p.relative_to(tmp_path) for p in outside.rglob("*"))
    results = str(tmp_path / "r")
    escapes = [f"../outside/{run.run_id}", str(outside / run.run_id), "..", ".", "-rf", ".hidden", "a/b",
               "x" * 300, "a\x00b"]
    for name in escapes:
        for command in (["show", name], ["run", "--resume", name], ["audit", name], ["report", name],
                        ["export-tuning", name, "--out", str(tmp_path / "t.json")], ["runtimes", "gate", name]):
            code, out = invoke(*command, "--results", results)
            assert code == 2 and ("is not a run id" in out or name.startswith("-")), (command, out)
    assert sorted(p.relative_to(tmp_path) for p in outside.rglob("*")) == before, "nothing written outside"
    code, out = invoke("show", run.run_id, "--results", str(outside))  # the explicit way to another folder
    assert code == 0, out


# --- 8. a broken run directory gets one line, never a traceback ------------------------------------

@pytest.mark.parametrize("manifest", [b"", b"{", b"\xff\xfe garbage", b"[1, 2]", b'{"run_id": "x"}'])
def test_an_unreadable_manifest_is_one_line_exit_2(tmp_path: Path, manifest: bytes) -> None:
    run = new_run(tmp_path)
    run.manifest_path.write_bytes(manifest)
    for command in ("show", "audit", "report"):
        code, out = invoke(command, run.run_id, "--results", str(run.path.parent))
        assert code == 2 and "manifest.json: not a run manifest" in out, (command, out)


def test_broken_run_directories_say_what_is_wrong(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    results = str(run.path.parent)
    manifest = run.manifest()
    edited = manifest.model_copy(update={"sessions": []})  # sessions edited out: their records belong to none
    run.manifest_path.write_text(edited.model_dump_json())
    code, out = invoke("show", run.run_id, "--results", results)
    assert code == 0 and "which has no session in the manifest" in out, out
    run.manifest_path.write_text(manifest.model_dump_json())
    journal = run.journal_path.read_bytes()
    run.journal_path.unlink()
    run.journal_path.mkdir()
    for command in (["show"], ["run", "--resume"]):
        code, out = invoke(*command, run.run_id, "--results", results)
        assert code == 2 and "journal.jsonl: Is a directory" in out, out
    run.journal_path.rmdir()
    code, out = invoke("audit", run.run_id, "--results", results)  # no journal yet
    assert code == 2 and "no finished trials" in out, out
    run.journal_path.write_bytes(journal)
    run.manifest_path.unlink()
    code, out = invoke("show", run.run_id, "--results", results)
    assert code == 2 and "has a journal but no manifest.json" in out, out


def test_outputs_that_cannot_be_written_are_one_line(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    results = str(run.path.parent)
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    code, out = invoke("report", run.run_id, "--results", results, "--out", str(a_file))
    assert code == 3 and out.startswith("orch: ") and "Traceback" not in out, out


def test_ctrl_c_while_a_run_is_created_leaves_no_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.results import store

    def interrupted(path: Path, data: bytes) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(store, "write_atomic", interrupted)
    f, p = write_inputs(tmp_path, fleet_of(sim_device("p0")), plan_with())
    code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"))
    assert code == 130 and "interrupted" in out, out
    assert list((tmp_path / "r").iterdir()) == []


def test_a_killed_writer_leaves_a_lock_anyone_can_take(tmp_path: Path) -> None:
    run = new_run(tmp_path, execute=False)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run.path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with run.lock():
        assert run.lock_path.read_text().strip() == str(os.getpid())


@pytest.mark.parametrize("delay", [0.1, 0.4, 0.9])
def test_ctrl_c_at_any_moment_of_start_up_is_130_and_leaves_nothing_half_made(tmp_path: Path, delay: float) -> None:
    """While the libraries load, while the inputs are read, while the run directory is made."""
    f, p = write_inputs(tmp_path, fleet_of(*(sim_device(f"p{i}", seed=i) for i in range(4))), plan_with(blocks=20))
    proc = subprocess.Popen([*ORCH, "run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    if proc.returncode != -signal.SIGINT and "Failed to import the site module" not in out:
        # (those two: the interrupt came before the interpreter had started orch, which has nothing to say yet)
        assert proc.returncode in (0, 130) and "Traceback" not in out, out  # 0: it had finished already
    for run in (tmp_path / "r").iterdir() if (tmp_path / "r").exists() else []:
        assert (run / "manifest.json").is_file(), "a run directory is a run (resumable) or is not there"


def test_a_seed_out_of_range_is_refused_before_anything_runs(tmp_path: Path) -> None:
    f, p = write_inputs(tmp_path, fleet_of(sim_device("p0")), plan_with())
    for seed in ("-1", str(2**32), str(10**30)):
        code, out = invoke("run", "--fleet", str(f), "--plan", str(p), "--results", str(tmp_path / "r"), "--seed", seed)
        assert code == 2 and "--seed" in out, out
    assert not (tmp_path / "r").exists()


def test_an_unknown_run_names_the_latest_run_by_its_id(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    code, out = invoke("show", "20990101-000000-nope-0000", "--results", str(run.path.parent))
    assert code == 2 and f"(latest: {run.run_id})" in out, out


def test_derived_tables_are_current_by_the_journal_they_were_made_from_not_by_file_times(tmp_path: Path) -> None:
    """derive stamps its tables with the journal's length and sha256 (derived.json): a copy that changes
    file times keeps them current; a journal that gained a record makes them stale, whatever the times say."""
    run = new_run(tmp_path)
    derive(run)
    stamp = json.loads(run.stamp_path.read_text())
    assert {"trials.parquet", "verdicts.csv", "sessions.csv"} <= set(stamp["tables"])
    assert stamp["journal_bytes"] == run.journal_path.stat().st_size and run.fresh(run.trials_path)

    copy = RunDir(tmp_path / "copy" / run.run_id)
    shutil.copytree(run.path, copy.path)  # copies times too; then make the journal look newer than every table
    later = time.time() + 3600
    os.utime(copy.journal_path, (later, later))
    assert copy.fresh(copy.trials_path) and copy.fresh(copy.verdicts_path)
    assert not copy.fresh(copy.path / "manifest.json"), "only what derive listed counts as derived"

    for table in (copy.trials_path, copy.verdicts_path):  # tables newer than a journal that changed: stale
        os.utime(table, (later + 60, later + 60))
    with open(copy.journal_path, "ab") as f:
        f.write(RunStarted(wall=0.0, resumed=True, pid=1).model_dump_json().encode() + b"\n")
    assert not copy.fresh(copy.trials_path) and not copy.fresh(copy.verdicts_path)
    derive(copy)
    assert copy.fresh(copy.trials_path)
