"""`orch twin serve | make-ipa`: the phone twin, an emulated iPhone that unmodified pymobiledevice3
reaches through usbmuxd over TCP (docs/twin.md). Parse, call, print.

Exit codes: 0 stopped cleanly (SIGINT/SIGTERM) or the .ipa written, 2 bad input; with a command after
`--`, the command's.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from orchestrator.cli_common import bad_input

twin_app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)


class DeveloperOverLockdown(StrEnum):
    always = "always"
    as_ios = "as-ios"



def default_root(udid: str) -> Path:
    return Path("~/.cache/orch/twin").expanduser() / udid


@twin_app.command("serve")
def serve(
    udid: Annotated[str | None, typer.Option(help="UDID, <ChipID:08X>-<ECID:016X>")] = None,
    ios: Annotated[str, typer.Option(help="iOS version the twin presents (14 and later)")] = "18.2",
    product_type: Annotated[str, typer.Option(help="ProductType, e.g. iPhone17,1")] = "iPhone17,1",
    root: Annotated[Path | None, typer.Option(help="State directory (default ~/.cache/orch/twin/<udid>)")] = None,
    host: Annotated[str, typer.Option(help="Address usbmuxd listens on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="usbmuxd TCP port (0: any free port)")] = 0,
    unpaired: Annotated[bool, typer.Option(help="Start untrusted: clients must pair first")] = False,
    launch: Annotated[str | None, typer.Option(
        help="Command before the app's arguments ({exe}, {container}); default: '{exe} app --container "
        "{container} --'")] = None,
    memory_limit_mb: Annotated[float, typer.Option(help="Jetsam limit on an app's resident memory (0: none)")]
    = 6144.0,
    disk_gb: Annotated[float, typer.Option(help="Data partition capacity")] = 128.0,
    thermal_speed: Annotated[float, typer.Option(help="Thermal model seconds per wall second")] = 1.0,
    developer_over_lockdown: Annotated[DeveloperOverLockdown, typer.Option(
        help="'as-ios': DVT over lockdown refused from iOS 17 as on a phone (served over RSD); 'always': served "
        "at any iOS, which no iOS 17+ phone does")] = DeveloperOverLockdown.as_ios,
    tunneld_port: Annotated[int, typer.Option(help="Port of the tunneld stand-in (iOS 17+; 0: any free port)")] = 0,
    ephemeral: Annotated[bool, typer.Option(help="Keep the state in a temporary directory, removed on stop")]
    = False,
    command: Annotated[list[str] | None, typer.Argument(
        help="After --: a command to run with the twin's addresses in its environment; the twin stops when "
        "it ends and orch exits with its code")] = None,
) -> None:
    """Run a twin until Ctrl-C / SIGTERM. Prints USBMUXD_SOCKET_ADDRESS=HOST:PORT when it is ready (and
    TUNNELD_ADDRESS=HOST:PORT from iOS 17: the tunneld stand-in naming its RSD). With a command after
    `--`, runs it with those variables set and stops when it ends: `orch twin serve -- orch run ...`."""
    from orchestrator.twin.config import DEFAULT_UDID

    udid = udid or DEFAULT_UDID
    if ephemeral and root is not None:
        bad_input("orch twin serve: --ephemeral and --root exclude each other")
    with tempfile.TemporaryDirectory(prefix="orch-twin-") if ephemeral else contextlib.nullcontext() as tmp:
        code = _serve(Path(tmp) / udid if tmp else root or default_root(udid), udid, ios, product_type, host, port,
                      unpaired, launch, memory_limit_mb, disk_gb, thermal_speed, developer_over_lockdown,
                      tunneld_port, command or [])
    raise typer.Exit(code)


def _serve(root: Path, udid: str, ios: str, product_type: str, host: str, port: int, unpaired: bool,
           launch: str | None, memory_limit_mb: float, disk_gb: float, thermal_speed: float,
           developer_over_lockdown: DeveloperOverLockdown, tunneld_port: int, command: list[str]) -> int:
    from orchestrator.twin import TwinConfig, serve_forever, serve_while
    from orchestrator.twin.config import DEFAULT_LAUNCH

    try:
        cfg = TwinConfig(
            root=root, udid=udid, ios=ios, product_type=product_type, host=host, port=port,
            paired=not unpaired, launch=tuple(shlex.split(launch)) if launch else DEFAULT_LAUNCH,
            memory_limit_mb=memory_limit_mb or None, disk_bytes=int(disk_gb * 1e9), thermal_speed=thermal_speed,
            developer_over_lockdown=developer_over_lockdown.value, tunneld_port=tunneld_port,
        )
    except ValidationError as exc:
        bad_input("orch twin serve: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                                   for e in exc.errors()))

    def ready(twin: object) -> None:
        address = getattr(twin, "address", "")
        print(f"twin {cfg.udid} ({cfg.product_type}, iOS {cfg.ios}) state in {cfg.root}", flush=True)
        print(f"USBMUXD_SOCKET_ADDRESS={address}", flush=True)
        tunneld = getattr(twin, "tunneld_address", None)
        if tunneld:
            print(f"TUNNELD_ADDRESS={tunneld}", flush=True)

    if command:
        return asyncio.run(serve_while(cfg, command, ready))
    asyncio.run(serve_forever(cfg, ready))
    return 0


@twin_app.command("make-ipa")
def make_ipa(
    executable: Annotated[Path, typer.Argument(help="The app's executable: a Linux harness build")],
    out: Annotated[Path, typer.Option(help="Where to write the .ipa")],
    bundle_id: Annotated[str, typer.Option(help="CFBundleIdentifier")] = "dev.orch.harness",
    name: Annotated[str, typer.Option(help="CFBundleExecutable (names crash reports)")] = "HarnessApp",
    version: Annotated[str, typer.Option(help="CFBundleShortVersionString")] = "1.0",
    build: Annotated[str, typer.Option(help="CFBundleVersion")] = "1",
    minimum_os: Annotated[str, typer.Option(help="MinimumOSVersion")] = "17.0",
    file_sharing: Annotated[bool, typer.Option(help="UIFileSharingEnabled (VendDocuments)")] = True,
    development: Annotated[bool, typer.Option(help="Development profile with get-task-allow (VendContainer)")]
    = True,
    device: Annotated[list[str] | None, typer.Option(help="UDID the profile lists (repeatable; default: all)")]
    = None,
) -> None:
    """Build the twin's .ipa: Payload/<name>.app with Info.plist, the executable and a profile."""
    from orchestrator.twin import make_ipa as build_ipa

    if not executable.is_file():
        bad_input(f"{executable}: not a file")
    path = build_ipa(out, executable, bundle_id, name=name, version=version, build=build, minimum_os=minimum_os,
                     file_sharing=file_sharing, development=development, devices=device)
    print(path)


def register(app: typer.Typer) -> None:
    app.add_typer(twin_app, name="twin")
