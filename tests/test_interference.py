"""Interference during a trial: what other processes took from the CPU, retried, recorded, excluded."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from conftest import fleet_of, plan_with

from orchestrator import core
from orchestrator.analysis.audit import audit, noisy_reading, too_wide
from orchestrator.analysis.summary import verdicts
from orchestrator.clock import VirtualClock
from orchestrator.config.candidates import CeilingTable
from orchestrator.devices import FakeDevice
from orchestrator.devices.interference import CpuSample, between, read_cpu
from orchestrator.protocol import Generation, TrialResult, TrialSpec
from orchestrator.results import MemoryJournal
from orchestrator.results.records import AttemptSpoiled, TrialRecord
from orchestrator.results.trials import excluded_words, trial_rows, usable
from orchestrator.schedule import SessionState, run_sessions

CEILINGS = CeilingTable.model_validate({"workloads": {"decode": {"match": ".*", "fraction_of_stream": 1.0}}})

# -- the arithmetic ------------------------------------------------------------------------------


def test_between_is_the_machine_busy_time_less_our_own_over_all_cpus() -> None:
    a = CpuSample(t=10.0, busy_s=100.0, own_s=5.0, cpus=4, others={(7, 1): ("make", 2.0)})
    b = CpuSample(t=12.0, busy_s=104.0, own_s=7.0, cpus=4,
                  others={(7, 1): ("make", 3.0), (9, 5): ("cc1", 0.5), (7, 2): ("reused-pid", 0.25)})
    got = between(a, b)
    assert got.other_cpu_s == pytest.approx(2.0) and got.share == pytest.approx(2.0 / 8.0)
    assert got.top[0] == "make (pid 7): 1.00 s", "the largest other process first, by its delta"
    assert "cc1 (pid 9): 0.50 s" in got.top, "a process born inside the trial counts whole"
    assert "reused-pid (pid 7): 0.25 s" in got.top, "a pid reused by a new process is a new process"
    assert any(t.startswith("not attributed") for t in got.top), "work /proc/stat saw that no name accounts for"


def test_between_never_goes_negative_nor_over_the_whole_machine() -> None:
    a = CpuSample(t=0.0, busy_s=10.0, own_s=1.0, cpus=2)
    assert between(a, CpuSample(t=1.0, busy_s=10.5, own_s=2.0, cpus=2)).share == 0.0
    assert between(a, CpuSample(t=1.0, busy_s=30.0, own_s=1.0, cpus=2)).share == 1.0


# -- reading this machine (Linux /proc) -----------------------------------------------------------

BURN = "import time\nwhile True: time.perf_counter()\n"
ESCAPE = ("import os, time\nos.setsid()\npid = os.fork()\nif pid: print(pid, flush=True); os._exit(0)\n"
          "null = os.open(os.devnull, os.O_RDWR)\nfor fd in (0, 1, 2): os.dup2(null, fd)\n"
          "while True: time.perf_counter()\n")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _burned(pid: int, since: float, seconds: float = 0.05, limit_s: float = 120.0) -> None:
    """Until `pid` has used `seconds` of CPU past `since` (bounded: a stuck test fails, it never hangs)."""
    deadline = time.monotonic() + limit_s
    while _cpu_s(pid) - since < seconds:
        assert time.monotonic() < deadline, f"pid {pid} got no CPU in {limit_s} s"
        time.sleep(0.02)


@pytest.fixture
def outsider() -> Iterator[int]:
    """A CPU-bound process outside this test's process tree (double-forked, re-parented), killed after."""
    out = subprocess.run([sys.executable, "-c", ESCAPE], capture_output=True, text=True, timeout=60, check=True)
    pid = int(out.stdout.split()[0])
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="reads Linux /proc")
def test_read_cpu_counts_an_outside_process_and_leaves_our_own_tree_out(outsider: int) -> None:
    child = subprocess.Popen([sys.executable, "-c", BURN])
    try:
        a = read_cpu()
        assert a is not None
        assert child.pid not in {pid for pid, _ in a.others}, "our own child is ours, not interference"
        assert outsider in {pid for pid, _ in a.others}
        out0, own0 = _cpu_s(outsider), _cpu_s(child.pid)
        _burned(outsider, out0)
        _burned(child.pid, own0)
        b = read_cpu()
        assert b is not None
        got = between(a, b)
        theirs = {pid: cpu for (pid, _), (_, cpu) in b.others.items()}
        assert outsider in theirs and child.pid not in theirs
        assert not any(f"(pid {child.pid})" in t for t in got.top)
        assert got.other_cpu_s >= 0.05 - 1 / os.sysconf("SC_CLK_TCK"), "the outsider's CPU time is in the figure"
        assert b.own_s - a.own_s >= 0.05 - 1e-9, "our child's CPU time is our own"
    finally:
        child.kill()
        child.wait()


# -- a session: spoiled attempts retried, the last one kept and excluded --------------------------


def result(spec: TrialSpec, tok_s: float = 50.0) -> TrialResult:
    n = spec.decode_tokens
    step = int(1e9 / tok_s)
    gen = Generation(prefill_ns=1000, ttft_ns=2000, token_ids=list(range(n)),
                     token_times_ns=[2000 + step * i for i in range(n)])
    return TrialResult(run_id=spec.run_id, trial_id=spec.trial_id, status="ok", engine=spec.engine,
                       engine_version="1", harness_build="b", model=spec.model, prompt_tokens=spec.prompt_tokens,
                       chunk_width=1, trial1=gen, bytes_per_decode_token=1_000_000)


class Busy:
    """CPU counters scripted per trial: `spoiled(n)` says whether trial launch n (0-based) had company."""

    def __init__(self, spoiled: object):
        self.spoiled, self.calls, self.busy = spoiled, 0, 0.0

    def __call__(self) -> CpuSample:
        launch, end = divmod(self.calls, 2)
        if end and self.spoiled(launch):  # type: ignore[operator]
            self.busy += 1.0  # one of the two CPUs for the whole (one-second) trial
        self.calls += 1
        return CpuSample(t=float(10 * launch + end), busy_s=self.busy, own_s=0.0, cpus=2,
                         others={(42, 1): ("hog", self.busy)})


def run_fake(spoiled: object, **plan: object) -> tuple[list[object], object]:
    fleet = fleet_of({"id": "d", "kind": "sim", "chip_class": "c", "bandwidth_gb_s": 60.0,
                      "runtimes": {"coreai": {"decode_tok_s": 50.0}}})
    p = plan_with(settle={"min_gap_s": 0, "flat_window_s": 0, "timeout_s": 30}, **plan)
    manifest = core.new_manifest(fleet, p, __file__, __file__)  # type: ignore[arg-type]
    journal = MemoryJournal()
    device = FakeDevice("d", result, cpu=Busy(spoiled))
    asyncio.run(run_sessions(manifest, journal, lambda d: (device, VirtualClock()),
                             {s.device: SessionState() for s in manifest.sessions}))
    return journal.records, manifest


def test_a_spoiled_attempt_is_retried_and_the_clean_one_kept() -> None:
    records, _ = run_fake(lambda launch: launch == 0)
    spoiled = [r for r in records if isinstance(r, AttemptSpoiled)]
    trials = [r for r in records if isinstance(r, TrialRecord)]
    assert len(spoiled) == 1 and spoiled[0].attempt == 1 and spoiled[0].interference is not None
    assert spoiled[0].interference.share == 0.5 and "hog (pid 42)" in spoiled[0].why
    first = trials[0]
    assert first.attempts == 2 and first.excluded is None
    assert first.interference is not None and first.interference.share == 0.0, "the clean attempt's reading"
    assert all(t.excluded is None for t in trials)


def test_a_trial_spoiled_on_every_attempt_is_kept_and_excluded_from_verdicts_and_audit() -> None:
    records, manifest = run_fake(lambda launch: launch < 3, retry={"max_attempts": 3})
    trials = [r for r in records if isinstance(r, TrialRecord)]
    assert trials[0].attempts == 3 and trials[0].result is not None, "kept as data"
    assert trials[0].excluded is not None and trials[0].excluded.startswith("interference: other processes took 50%")
    assert all(t.excluded is None for t in trials[1:])
    rows = trial_rows(manifest, records)  # type: ignore[arg-type]
    assert rows.loc[0, "status"] == "ok" and rows.loc[0, "other_cpu_share"] == 0.5
    assert len(usable(rows)) == len(rows) - 1
    v = verdicts(rows, manifest.plan)  # type: ignore[attr-defined]
    assert int(v["n_baseline"].iloc[0]) + int(v["n_candidate"].iloc[0]) == len(rows) - 1
    words = excluded_words(rows)
    assert words is not None and words.startswith("1 finished trial excluded") and "d: 1 interference" in words
    assert words.endswith("other processes took more of the CPU than the plan allows"), "says only the reasons present"
    a = audit(rows, manifest, CEILINGS)  # type: ignore[arg-type]
    assert a["n_excluded"].sum() == 1 and a["n"].sum() == len(rows) - 1


def test_no_retry_when_the_plan_says_so_and_no_check_when_it_has_no_limit() -> None:
    records, _ = run_fake(lambda launch: launch == 0, interference={"max_other_cpu_share": 0.2, "retry": False})
    assert not [r for r in records if isinstance(r, AttemptSpoiled)]
    first = next(r for r in records if isinstance(r, TrialRecord))
    assert first.attempts == 1 and first.excluded is not None
    records, _ = run_fake(lambda launch: True, interference=None)
    assert all(r.interference is None and r.excluded is None for r in records if isinstance(r, TrialRecord))
    records, _ = run_fake(lambda launch: True, interference={"max_other_cpu_share": 0.6})
    assert all(r.excluded is None for r in records if isinstance(r, TrialRecord)), "under the limit"


# -- the audit -------------------------------------------------------------------------------------


def test_the_audit_gives_no_headroom_figure_when_its_ci_is_wider_than_the_reading() -> None:
    assert too_wide(0.08, 0.02, 0.15) and not too_wide(0.08, 0.06, 0.10)
    assert "no headroom figure" in noisy_reading(0.08, 0.02, 0.15, 12)
    rows = pd.DataFrame({"device": "d", "arm": "a", "runtime": "r", "build": None, "status": "ok",
                         "decode_tok_s": [5.0, 50.0, 15.0, 150.0, 12.0, 100.0, 8.0],
                         "bytes_per_decode_token": 1e9, "excluded": None, "probe_gb_s": 1000.0})
    _, manifest = run_fake(lambda launch: False)
    got = audit(rows, manifest, CEILINGS)  # type: ignore[arg-type]
    assert got["reading"].iloc[0].startswith("too noisy to read") and pd.isna(got["headroom"].iloc[0])
    quiet = rows.assign(decode_tok_s=[15.0, 15.1, 14.9, 15.0, 15.2, 14.8, 15.0])
    got = audit(quiet, manifest, CEILINGS)  # type: ignore[arg-type]
    assert "headroom" in got["reading"].iloc[0] and got["headroom"].iloc[0] > 0


# -- the settle gate waits for quiet, where the plan asks it to --------------------------------------


class Windows:
    """CPU counters whose successive one-second windows have the given shares of two CPUs taken by others."""

    def __init__(self, clock: VirtualClock, shares: list[float]):
        self.clock, self.shares, self.busy, self.calls = clock, list(shares), 0.0, 0

    def __call__(self) -> CpuSample:
        if self.calls % 2 and self.shares:
            self.busy += 2.0 * self.shares.pop(0)
        self.calls += 1
        return CpuSample(t=self.clock.now(), busy_s=self.busy, own_s=0.0, cpus=2, others={(7, 1): ("hog", self.busy)})


def quiet_gate(shares: list[float], wait_s: float) -> tuple[object, list[str], VirtualClock]:
    from orchestrator.config import SettlePolicy
    from orchestrator.config.plan import InterferenceLimit
    from orchestrator.protocol.device import Telemetry
    from orchestrator.schedule import SettleGate

    clock, said = VirtualClock(), []
    gate = SettleGate(SettlePolicy(min_gap_s=0, flat_window_s=0), clock, said.append,
                      InterferenceLimit(max_other_cpu_share=0.1, quiet_wait_s=wait_s))
    device = FakeDevice("d", result, telemetry=Telemetry(t=0, thermal_state="nominal", battery_c=30.0),
                        cpu=Windows(clock, shares))
    return asyncio.run(gate.wait(device)), said, clock


def test_the_gate_waits_for_a_quiet_second_and_says_what_it_waits_for() -> None:
    settle, said, clock = quiet_gate([0.5, 0.6, 0.05], wait_s=60)
    assert settle.quiet is not None and settle.quiet.share == 0.05  # type: ignore[attr-defined]
    assert settle.waited_s == 3 and clock.now() == 3  # type: ignore[attr-defined]
    assert len(said) == 2
    assert said[0].startswith("waiting for quiet: other processes took 50% of the CPU (limit 10%; hog")


def test_the_gate_launches_anyway_after_quiet_wait_s_and_not_at_all_without_it() -> None:
    settle, said, clock = quiet_gate([0.5] * 10, wait_s=3)
    assert settle.quiet is not None and settle.quiet.share == 0.5 and clock.now() == 3  # type: ignore[attr-defined]
    settle, said, clock = quiet_gate([0.5] * 10, wait_s=0)
    assert settle.quiet is None and not said and clock.now() == 0  # type: ignore[attr-defined]


def test_the_live_view_shows_waits_and_retries_with_process_names_as_plain_text() -> None:
    import io

    from rich.console import Console

    from orchestrator.report.console import LiveProgress
    from orchestrator.results.records import SettleWaiting

    _, manifest = run_fake(lambda launch: False)
    live = LiveProgress(Console(file=io.StringIO(), force_terminal=True), manifest)  # type: ignore[arg-type]
    with live:
        live.observe("d", SettleWaiting(why="waiting for quiet: other processes took 50% (limit 10%; [/x] (pid 7))"))
        live.progress.refresh()  # rendered: a name that reads as markup would raise here
        live.observe("d", AttemptSpoiled(device="d", trial_id="d-0000", attempt=1, why="interference: [/]", wall=0))
        live.progress.refresh()
    task = live.progress.tasks[0]
    assert "retrying d-0000" in task.fields["status"] and "[/]" in task.fields["status"]


def test_without_a_terminal_the_run_says_what_it_waits_for_and_what_it_kept_out_in_plain_lines() -> None:
    import io

    from rich.console import Console

    from orchestrator.report.console import LiveProgress
    from orchestrator.results.records import SettleWaiting

    records, manifest = run_fake(lambda launch: launch < 3, retry={"max_attempts": 3})
    out = io.StringIO()
    live = LiveProgress(Console(file=out, force_terminal=False, width=80), manifest)  # type: ignore[arg-type]
    quiet = "waiting for quiet: other processes took 50% of the CPU (limit 10%; [/x] (pid 7)), {} /15 s"
    with live:
        live.observe("d", SettleWaiting(why="min gap: 3 s to go"))  # every trial's: the bar's, not a line
        live.observe("d", SettleWaiting(why="throttle probe 12% slower than the session's baseline (limit 10%)"))
        live.observe("d", SettleWaiting(why="throttle probe 9.5% slower than the session's baseline (limit 10%)"))
        live.observe("d", SettleWaiting(why=quiet.format(1)))
        live.observe("d", SettleWaiting(why=quiet.format(2)))  # the same wait again: said once
        for r in records:
            if isinstance(r, AttemptSpoiled | TrialRecord) and r.trial_id.endswith("0000"):
                live.observe("d", r)
        live.observe("d", SettleWaiting(why=quiet.format(3)))  # the next trial's wait is said again
    lines = out.getvalue().splitlines()
    assert lines[0] == "d: waiting: throttle probe 12% slower than the session's baseline (limit 10%)", lines
    lines = lines[1:]
    assert lines[0] == "d: " + quiet.format(1), lines
    assert [line.split(":")[1].strip().split(" ")[0] for line in lines[1:3]] == ["retrying", "retrying"]
    assert "(attempt 1): interference: other processes took 50% of the CPU" in lines[1]
    assert lines[3].startswith("d: d-0000 (base) kept but excluded: interference: other processes took 50%")
    assert lines[4] == "d: " + quiet.format(3) and len(lines) == 5
