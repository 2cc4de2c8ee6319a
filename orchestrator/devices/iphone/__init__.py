"""The iPhone backend (``kind: iphone``) on pymobiledevice3 11.x.

Modules: ``device`` (the `Device`), ``connect`` (usbmux lockdown and iOS 17+ tunnels: the seam the
tests replace), ``install`` (prepare), ``container`` (house_arrest files), ``launch`` (DVT launch and
wait), ``crash`` (crash reports), ``telemetry``, ``errors`` (exceptions -> health and fixes),
``paths`` (validated container paths), ``chips`` (product type -> chip class).
"""

from __future__ import annotations

from orchestrator.devices.iphone.connect import Connector, UsbConnector
from orchestrator.devices.iphone.device import IphoneDevice

__all__ = ["Connector", "IphoneDevice", "UsbConnector"]
