"""Helpers for the phone twin's tests: a twin per test on an ephemeral loopback port in the
test's own directory, pymobiledevice3 (the unmodified CLI or API) pointed at it, and a small
stand-in app executable for the launch tests."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.twin import ThreadedTwin, TwinConfig, make_ipa

PMD = Path(sys.executable).with_name("pymobiledevice3")  # the CLI beside the running interpreter
ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "ios_harness" / ".build" / "release" / "harness"
MODEL = ROOT / "ios_harness" / "Tests" / "Fixtures" / "models" / "llama-t1-s0" / "model-Q8_0.gguf"
ORCH = Path(sys.executable).with_name("orch")
BUNDLE = "dev.orch.harness"
T = TypeVar("T")

# What the stand-in app does with its arguments (after `app --container DIR --`):
#   --spec S --out O   write a TrialResult to Documents/O, print HARNESS_DONE <id> <path>, exit 0
#   --say TEXT         print TEXT      --sleep S   sleep      --exit N    exit with N
#   --signal NAME      kill itself     --alloc MB  hold MB resident, then sleep
# It always records its argv and environment in Documents/launch.json first. Documents/stand-in.json,
# when present, maps a trial id to more of these arguments (run before the ones it was launched with).
# It opens the spec's model as the real app does (HarnessCore's AppLaunch): a path relative to Documents
# that must be there (an absolute one or one with `..` is bad_spec, a missing one model_not_found).
APP = textwrap.dedent('''\
    #!{python} -IS
    import json, os, signal, sys, time
    argv = sys.argv
    container = argv[argv.index("--container") + 1]
    args = argv[argv.index("--") + 1:]
    docs = os.path.join(container, "Documents")
    os.makedirs(docs, exist_ok=True)
    with open(os.path.join(docs, "launch.json"), "w") as fh:
        json.dump({{"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}}, fh)
    opts = dict(zip(args[::2], args[1::2]))
    plan = os.path.join(docs, "stand-in.json")  # per-trial behaviour a test sets: {{trial id: [args]}}
    if "--spec" in opts and os.path.exists(plan):
        args = json.load(open(plan)).get(os.path.basename(opts["--spec"])[:-5], []) + args
    held = []
    for key, value in zip(args[::2], args[1::2]):
        if key == "--say":
            print(value, flush=True)
        elif key == "--sleep":
            time.sleep(float(value))
        elif key == "--exit":
            sys.exit(int(value))
        elif key == "--signal":
            print("Fatal error: about to die", flush=True)
            os.kill(os.getpid(), getattr(signal, value))
            time.sleep(5)
        elif key == "--alloc":
            block = bytearray(int(float(value) * 2**20))
            for i in range(0, len(block), 4096):
                block[i] = 1
            held.append(block)
    if "--spec" in opts:
        spec = json.load(open(os.path.join(docs, opts["--spec"])))
        out = os.path.join(docs, opts["--out"])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        n = spec["decode_tokens"]
        times = [2000000 + 10000000 * i for i in range(n)]
        result = {{
            "schema_version": 1, "run_id": spec["run_id"], "trial_id": spec["trial_id"], "status": "ok",
            "engine": spec["engine"], "engine_version": "stand-in", "harness_build": "stand-in",
            "model": spec["model"], "prompt_tokens": spec["prompt_tokens"], "chunk_width": spec["chunk_width"],
            "trial1": {{"prefill_ns": 1000000, "ttft_ns": times[0], "token_ids": [7 * i for i in range(n)],
                       "token_times_ns": times}},
            "thermal": [{{"t_ns": 0, "state": os.environ.get("HARNESS_THERMAL_STATE", "nominal")}}],
        }}
        model = spec["model"]
        if model.startswith("/") or ".." in model.split("/"):
            error = {{"kind": "bad_spec", "message": "model: " + model + " is not a path relative to Documents"}}
        elif not os.path.isfile(os.path.join(docs, model)):
            error = {{"kind": "model_not_found", "message": "no model at " + model}}
        else:
            error = None
        if error is not None:
            del result["trial1"]
            result.update(status="error", error=error)
        with open(out + ".tmp", "w") as fh:
            json.dump(result, fh)
        os.replace(out + ".tmp", out)
        print("HARNESS_DONE", spec["trial_id"], out, flush=True)
        sys.exit(0 if error is None else 2)
''')


@functools.cache
def harness_has_app() -> bool:
    """The harness is built, with its `app` command (the app's logic on a host)."""
    if not HARNESS.exists():
        return False
    probe = subprocess.run([str(HARNESS), "app"], capture_output=True, text=True, timeout=30, check=False)
    return "--container" in probe.stdout + probe.stderr


STAND_IN_MODEL = "models/m.gguf"  # where the stand-in app's tests put a model (a few bytes: it reads none)


def app_executable(directory: Path) -> Path:
    path = directory / "stand-in-app"
    path.write_text(APP.format(python=sys.executable))
    path.chmod(0o755)
    return path


def app_ipa(directory: Path, **over: Any) -> Path:
    """An .ipa of the stand-in app (development-signed, file sharing on, unless told otherwise)."""
    fields: dict[str, Any] = {"bundle_id": BUNDLE, "minimum_os": "16.0"}
    fields.update(over)
    bundle = fields.pop("bundle_id")
    name = f"app-{bundle}-{abs(hash(json.dumps(fields, sort_keys=True, default=str)))}.ipa"
    return make_ipa(directory / name, app_executable(directory), bundle, **fields)


@contextmanager
def running_twin(tmp_path: Path, **over: Any) -> Iterator[ThreadedTwin]:
    fields: dict[str, Any] = {"root": tmp_path / "twin", "crash_report_delay_s": 30.0}
    fields.update(over)
    with ThreadedTwin(TwinConfig(**fields)) as twin:
        yield twin


def twin_fleet(path: Path, twin: ThreadedTwin, ipa: Path) -> Path:
    """A fleet file with the twin as its one iPhone (`twin`), reached over its usbmux and tunneld addresses."""
    path.write_text(textwrap.dedent(f"""\
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
    return path


def pmd_env(twin: ThreadedTwin, tmp_path: Path) -> dict[str, str]:
    """The environment for the pymobiledevice3 CLI: this twin's usbmuxd, a HOME of the test's own."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYMOBILEDEVICE3", "XDG_"))}
    env.update({"USBMUXD_SOCKET_ADDRESS": twin.address, "HOME": str(home), "NO_COLOR": "1", "TERM": "dumb"})
    return env


def pmd(twin: ThreadedTwin, tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PMD), *args], env=pmd_env(twin, tmp_path), capture_output=True, text=True,
                          timeout=timeout, check=False)


def run(coro: Awaitable[T], timeout: float = 60) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def lockdown(twin: ThreadedTwin, tmp_path: Path, **over: Any) -> Any:
    """A pymobiledevice3 lockdown client on the twin, as the iphone backend opens one."""
    from pymobiledevice3.lockdown import create_using_usbmux

    fields: dict[str, Any] = {"serial": twin.phone.cfg.udid, "autopair": False, "connection_type": "USB",
                              "usbmux_address": twin.address, "pairing_records_cache_folder": tmp_path / "pmd"}
    fields.update(over)
    return await create_using_usbmux(**fields)


def with_developer(twin: ThreadedTwin, tmp_path: Path, body: Callable[[Any], Awaitable[T]]) -> T:
    """``body(provider)`` with the provider developer services go through, as the iphone backend picks
    it: the lockdown client before iOS 17; from 17 the RSD that the twin's tunneld stand-in names."""
    from pymobiledevice3.tunneld.api import get_tunneld_device_by_udid

    async def go() -> T:
        if twin.tunneld_address is None:
            client = await lockdown(twin, tmp_path)
            try:
                return await body(client)
            finally:
                await client.close()
        host, port = twin.tunneld_address.rsplit(":", 1)
        rsd = await get_tunneld_device_by_udid(twin.phone.cfg.udid, (host, int(port)))
        assert rsd is not None, "the tunneld stand-in names no tunnel"
        try:
            return await body(rsd)
        finally:
            await rsd.close()

    return run(go())


def with_lockdown(twin: ThreadedTwin, tmp_path: Path, body: Callable[[Any], Awaitable[T]], **over: Any) -> T:
    async def go() -> T:
        client = await lockdown(twin, tmp_path, **over)
        try:
            return await body(client)
        finally:
            await client.close()

    return run(go())
