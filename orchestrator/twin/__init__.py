"""The phone twin: an emulated iPhone that unmodified pymobiledevice3 reaches through usbmuxd.

It speaks usbmuxd over TCP and lockdown (its own pair record, a TLS session) and serves what orch
uses: installation_proxy, AFC, house_arrest, diagnostics_relay, mobile_image_mounter, the crash
report copier and mover, and DVT process control and device info; from iOS 17 also
RemoteServiceDiscovery and a tunneld stand-in (the developer path once a tunnel is up). Launching
an app runs its real executable (a Linux build of the harness) in the app's container. See
docs/twin.md for what it covers and what it does not.

Modules: ``config`` (TwinConfig), ``server`` (Twin, ThreadedTwin), ``phone`` (state and the service
table), ``usbmux``, ``lockdown``, ``pairing`` (keys, records, TLS), ``services`` (plist services),
``rsd`` (RSD, tunneld), ``afc``, ``dvt``, ``processes`` (app processes, jetsam), ``crashes``, ``apps`` (installd),
``ipa`` (the twin's .ipa), ``thermal``, ``disk``, ``wire``.
"""

from orchestrator.twin.config import TwinConfig
from orchestrator.twin.ipa import make_ipa
from orchestrator.twin.server import ThreadedTwin, Twin, serve_forever, serve_while

__all__ = ["ThreadedTwin", "Twin", "TwinConfig", "make_ipa", "serve_forever", "serve_while"]
