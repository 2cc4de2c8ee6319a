"""The iPhone backend (``kind: iphone``) on pymobiledevice3 11.x.

Modules: ``device`` (the `Device`), ``connect`` (usbmux lockdown and iOS 17+ tunnels: the seam the
tests replace), ``install`` (prepare), ``container`` (house_arrest files), ``launch`` (DVT launch and
wait), ``crash`` (crash reports), ``telemetry``, ``errors`` (exceptions -> health and fixes),
``paths`` (validated container paths), ``chips`` (product type -> chip class).

What the app shell (``ios_harness/App``) must do for this backend:

- take ``--spec specs/<trial_id>.json --out results/<trial_id>.json``, paths relative to its
  ``Documents`` directory (reject absolute paths and ``..``); write the result atomically (temp +
  rename), then print ``HARNESS_DONE <trial_id> <path>`` on a line-buffered stdout and exit;
- optionally (``thermal_probe: true``) take ``--probe thermal --out results/probe-NNNNNN.json`` and
  write ``{"thermal_state": "nominal|fair|serious|critical", "low_power": bool}``;
- be development-signed (house_arrest's VendContainer: the whole container) or carry
  ``UIFileSharingEnabled`` (VendDocuments: only Documents). The backend learns which per app: the
  fleet's preference first (VendContainer; VendDocuments with ``documents_only: true``), the other
  when the phone refuses it, then the one that worked;
- keep its executable name in ``process_name`` (default ``HarnessApp``), which names its crash reports.
"""

from __future__ import annotations

from orchestrator.devices.iphone.connect import Connector, UsbConnector
from orchestrator.devices.iphone.device import IphoneDevice

__all__ = ["Connector", "IphoneDevice", "UsbConnector"]
