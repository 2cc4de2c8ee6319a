"""lockdownd on port 62078: identity values, pairing, the TLS session, and StartService.

One connection: plaintext plists until StartSession (with a trusted HostID) answers
``EnableSessionSSL``; the phone starts TLS right after that reply, with the DeviceCertificate of
that host's pair record, and everything after it is encrypted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from orchestrator.twin.wire import PeerGone, plist_frame, read_plist, send_plist

if TYPE_CHECKING:
    from orchestrator.twin.phone import Phone

log = logging.getLogger(__name__)
PAIR_FIELDS = ("DeviceCertificate", "HostCertificate", "HostID", "RootCertificate", "SystemBUID")


class Lockdown:
    def __init__(self, phone: Phone):
        self.phone = phone
        self.host_id: str | None = None  # the session's host, once StartSession succeeded
        self.session_id: str | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                request = await read_plist(reader)
            except PeerGone:
                return
            if not isinstance(request, dict) or not isinstance(request.get("Request"), str):
                await send_plist(writer, {"Error": "InvalidRequest"})
                continue
            name = request["Request"]
            reply = self.answer(name, request)
            reply.setdefault("Request", name)
            if name == "StartSession" and reply.get("EnableSessionSSL"):
                assert self.host_id is not None
                ctx = self.phone.trusted.server_context(self.host_id)
                writer.write(plist_frame(reply))
                # TLS from the very next byte: no await may run between the reply and the upgrade
                await writer.start_tls(ctx)
                continue
            await send_plist(writer, reply)

    def answer(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        phone = self.phone
        if name == "QueryType":
            return {"Type": "com.apple.mobile.lockdown"}
        if name == "GetValue":
            return self._get_value(request.get("Domain"), request.get("Key"))
        if name in ("SetValue", "RemoveValue"):
            return {"Error": "SetProhibited" if name == "SetValue" else "RemoveProhibited"}
        if name == "ValidatePair":
            return {} if self._trusted(request.get("PairRecord")) else {"Error": "InvalidHostID"}
        if name == "StartSession":
            host_id = str(request.get("HostID", ""))
            if not host_id or phone.trusted.get(host_id) is None:
                return {"Error": "InvalidHostID"}
            self.host_id = host_id
            self.session_id = host_id[:8] + "-SESSION"
            return {"SessionID": self.session_id, "EnableSessionSSL": True}
        if name == "StopSession":
            self.session_id = None
            return {"Result": "Success"}
        if name == "Pair":
            return self._pair(request)
        if name == "Unpair":
            record = request.get("PairRecord") or {}
            if isinstance(record, dict) and record.get("HostID"):
                phone.trusted.forget(str(record["HostID"]))
            return {}
        if name == "StartService":
            if self.session_id is None or self.host_id is None:
                return {"Error": "SessionInactive"}
            service = str(request.get("Service", ""))
            started = phone.start_service(service, self.host_id)
            if isinstance(started, str):
                return {"Error": started, "Service": service}
            port, ssl = started
            return {"Service": service, "Port": port, "EnableServiceSSL": ssl}
        if name == "EnterRecovery":
            return {"Error": "NotAllowed"}
        return {"Error": "InvalidRequest"}

    def _get_value(self, domain: Any, key: Any) -> dict[str, Any]:
        phone = self.phone
        in_session = self.session_id is not None
        if domain:
            if not in_session:
                return {"Error": "MissingValue"}
            values = phone.domain(str(domain))
            if values is None:
                return {"Error": "MissingValue"}
        else:
            values = phone.values(in_session)
        if key:
            if key not in values:
                return {"Error": "MissingValue"}
            return {"Key": key, "Value": values[key], **({"Domain": domain} if domain else {})}
        return {"Value": values, **({"Domain": domain} if domain else {})}

    def _trusted(self, record: Any) -> bool:
        return isinstance(record, dict) and self.phone.trusted.get(str(record.get("HostID", ""))) is not None

    def _pair(self, request: dict[str, Any]) -> dict[str, Any]:
        """The Trust dialog, answered as the twin was told to (accept, pending, deny)."""
        record = request.get("PairRecord")
        if not isinstance(record, dict) or any(k not in record for k in PAIR_FIELDS):
            return {"Error": "InvalidPairRecord"}
        if self.phone.locked or not self.phone.unlocked_since_boot:
            return {"Error": "PasswordProtected"}
        if self.phone.trust_answer == "pending":
            return {"Error": "PairingDialogResponsePending"}
        if self.phone.trust_answer == "deny":
            return {"Error": "UserDeniedPairing"}
        escrow = self.phone.trusted.trust(record)
        log.info("twin: trusting host %s", record["HostID"])
        return {"EscrowBag": escrow}
