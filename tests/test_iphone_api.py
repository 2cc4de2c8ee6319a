"""Every pymobiledevice3 name and parameter the iPhone backend uses exists in the installed version.

An upgrade that moves or renames one fails here, not in the lab at night.
"""

from __future__ import annotations

import importlib
import inspect
import logging

import pytest

from orchestrator.devices.iphone import errors, launch

# (module, attribute path, parameters the backend passes by name or position)
CALLS: list[tuple[str, str, list[str]]] = [
    ("pymobiledevice3.lockdown", "create_using_usbmux", ["serial", "autopair", "connection_type", "usbmux_address"]),
    ("pymobiledevice3.lockdown", "LockdownClient.close", []),
    ("pymobiledevice3.lockdown_service_provider", "LockdownServiceProvider.get_developer_mode_status", []),
    ("pymobiledevice3.lockdown_service_provider", "LockdownServiceProvider.start_lockdown_service",
     ["name", "include_escrow_bag"]),
    ("pymobiledevice3.tunneld.api", "get_tunneld_tunnels", ["tunneld_address"]),
    ("pymobiledevice3.tunneld.api", "get_tunneld_device_by_udid", ["udid", "tunneld_address"]),
    ("pymobiledevice3.remote.userspace_tunnel", "UserspaceRsdTunnel", ["serial", "autopair", "remotepairing_fallback"]),
    ("pymobiledevice3.remote.userspace_tunnel", "UserspaceRsdTunnel.aopen", []),
    ("pymobiledevice3.remote.userspace_tunnel", "UserspaceRsdTunnel.aclose", []),
    ("pymobiledevice3.remote.remote_service_discovery", "RemoteServiceDiscoveryService.close", []),
    ("pymobiledevice3.services.house_arrest", "HouseArrestService.create", ["lockdown", "bundle_id", "documents_only"]),
    ("pymobiledevice3.services.afc", "AfcService.makedirs", ["filename"]),
    ("pymobiledevice3.services.afc", "AfcService.set_file_contents", ["filename", "data"]),
    ("pymobiledevice3.services.afc", "AfcService.rename", ["source", "target"]),
    ("pymobiledevice3.services.afc", "AfcService.exists", ["filename"]),
    ("pymobiledevice3.services.afc", "AfcService.stat", ["filename"]),
    ("pymobiledevice3.services.afc", "AfcService.get_file_contents", ["filename"]),
    ("pymobiledevice3.services.afc", "AfcService.rm_single", ["filename", "force"]),
    ("pymobiledevice3.services.afc", "AfcService.dirlist", ["root", "depth"]),
    ("pymobiledevice3.services.afc", "AfcService.aclose", []),
    ("pymobiledevice3.services.afc", "AfcService.fopen", ["filename", "mode"]),
    ("pymobiledevice3.services.afc", "AfcService.fwrite", ["handle", "data"]),
    ("pymobiledevice3.services.afc", "AfcService.fclose", ["handle"]),
    ("pymobiledevice3.services.afc", "AfcService.get_device_info", []),
    ("pymobiledevice3.services.installation_proxy", "InstallationProxyService", ["lockdown"]),
    ("pymobiledevice3.services.installation_proxy", "InstallationProxyService.get_apps",
     ["application_type", "bundle_identifiers"]),
    ("pymobiledevice3.services.installation_proxy", "InstallationProxyService.install_from_local", ["package_path"]),
    ("pymobiledevice3.services.installation_proxy", "ProgressBar", ["disable"]),
    ("pymobiledevice3.services.diagnostics", "DiagnosticsService", ["lockdown"]),
    ("pymobiledevice3.services.diagnostics", "DiagnosticsService.get_battery", []),
    ("pymobiledevice3.services.mobile_image_mounter", "MobileImageMounterService", ["lockdown"]),
    ("pymobiledevice3.services.mobile_image_mounter", "MobileImageMounterService.is_image_mounted", ["image_type"]),
    ("pymobiledevice3.services.mobile_image_mounter", "image_type_for_device", ["lockdown"]),
    ("pymobiledevice3.services.crash_reports", "CrashReportsManager", ["lockdown"]),
    ("pymobiledevice3.services.crash_reports", "CrashReportsManager.flush", []),
    ("pymobiledevice3.services.crash_reports", "CrashReportsManager.parse", ["path"]),
    ("pymobiledevice3.services.dvt.instruments.dvt_provider", "DvtProvider", ["lockdown"]),
    ("pymobiledevice3.services.dvt.instruments.dvt_provider", "DvtProvider.connect", []),
    ("pymobiledevice3.services.dvt.instruments.dvt_provider", "DvtProvider.close", []),
    ("pymobiledevice3.services.dvt.instruments.process_control", "ProcessControl", ["provider"]),
    ("pymobiledevice3.services.dvt.instruments.process_control", "ProcessControl.connect", []),
    ("pymobiledevice3.services.dvt.instruments.process_control", "ProcessControl.launch",
     ["bundle_id", "arguments", "kill_existing"]),
    ("pymobiledevice3.services.dvt.instruments.process_control", "ProcessControl.kill", ["pid"]),
    ("pymobiledevice3.services.dvt.instruments.process_control", "ProcessControl.__aiter__", []),
    ("pymobiledevice3.services.dvt.instruments.device_info", "DeviceInfo", ["provider"]),
    ("pymobiledevice3.services.dvt.instruments.device_info", "DeviceInfo.is_running_pid", ["pid"]),
    ("pymobiledevice3.service_connection", "ServiceConnection.from_socket", ["sock"]),
]

NAMES: list[tuple[str, str]] = [
    ("pymobiledevice3.dtx", "DTXNsError"),
    ("pymobiledevice3.dtx", "DTXProtocolError"),
    ("pymobiledevice3.irecv_devices", "IRECV_DEVICES"),
    ("pymobiledevice3.services.crash_reports", "CrashReportsManager"),
    ("pymobiledevice3.lockdown_service_provider", "LockdownServiceProvider.has_developer_mode"),
    ("pymobiledevice3.lockdown_service_provider", "LockdownServiceProvider.product_version"),
    ("pymobiledevice3.lockdown_service_provider", "LockdownServiceProvider.product_build_version"),
    ("pymobiledevice3.services.dvt.instruments.process_control", "OutputReceivedEvent"),
    *[("pymobiledevice3.exceptions", n) for n in (
        "PasswordRequiredError", "PasscodeRequiredError", "PairingDialogResponsePendingError", "UserDeniedPairingError",
        "NotPairedError", "NotTrustedError", "InvalidHostIDError", "FatalPairingError", "PairingError",
        "AppNotInstalledError", "DeveloperModeIsNotEnabledError", "DeveloperModeError", "InvalidServiceError",
        "DeveloperDiskImageNotFoundError", "NotMountedError", "StartServiceError", "TunneldConnectionError",
        "UserspaceTunnelUnavailableError", "RSDRequiredError", "NoDeviceConnectedError", "DeviceNotFoundError",
        "ConnectionFailedError", "MuxException", "ConnectionTerminatedError", "NotConnectedError",
        "AfcFileNotFoundError", "PyMobileDevice3Exception", "AppInstallError",
    )],
]


def resolve(module: str, path: str) -> object:
    obj: object = importlib.import_module(module)
    for part in path.split("."):
        obj = inspect.getattr_static(obj, part) if inspect.isclass(obj) else getattr(obj, part)
    return obj


@pytest.mark.parametrize(("module", "path", "params"), CALLS, ids=[f"{m.split('.')[-1]}.{p}" for m, p, _ in CALLS])
def test_call_exists_with_parameters(module: str, path: str, params: list[str]) -> None:
    obj = resolve(module, path)
    if isinstance(obj, classmethod | staticmethod):
        obj = obj.__func__
    target = obj.__init__ if inspect.isclass(obj) else obj  # type: ignore[misc]
    signature = inspect.signature(target)  # type: ignore[arg-type]
    missing = [p for p in params if p not in signature.parameters]
    assert not missing, f"{module}.{path}{signature} lacks {missing}"


@pytest.mark.parametrize(("module", "path"), NAMES, ids=[p for _, p in NAMES])
def test_name_exists(module: str, path: str) -> None:
    resolve(module, path)


def test_every_classified_exception_is_a_real_name() -> None:
    source = inspect.getsource(errors.classify)
    used = set(__import__("re").findall(r"pmd\.(\w+)", source))
    from pymobiledevice3 import exceptions

    assert used and all(hasattr(exceptions, n) for n in used), sorted(n for n in used if not hasattr(exceptions, n))


def test_crash_reports_manager_names_its_mover_and_flush_reads_a_ping() -> None:
    from pymobiledevice3.services.crash_reports import CrashReportsManager

    init, flush = inspect.getsource(CrashReportsManager.__init__), inspect.getsource(CrashReportsManager.flush)
    assert "self.crash_mover_service_name" in init and 'b"ping\\x00"' in flush


def test_process_control_logs_terminations_where_the_tap_listens() -> None:
    from pymobiledevice3.services.dvt.instruments import process_control

    assert process_control.__name__ == launch.PROCESS_CONTROL_LOGGER
    source = inspect.getsource(process_control.ProcessControlService._on_process_terminated)
    assert "terminated with exit code" in source and "crashing signal" in source
    tap = launch.TerminationTap()
    record = logging.LogRecord("x", logging.WARNING, __file__, 1,
                               "Process with PID 42 terminated with exit code None or crashing signal 11", None, None)
    assert tap.filter(record) is False and tap.pop(42) == (None, 11)
