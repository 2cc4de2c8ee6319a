"""Keys, pair records and TLS: the phone's side (its key, the hosts it trusts) and usbmuxd's side
(the host's pair record for this phone).

Certificates come from pymobiledevice3's own ``ca`` helpers, exactly as a host makes them when it
pairs, so a record the twin mints is indistinguishable from one ``lockdown pair`` would write.
"""

from __future__ import annotations

import contextlib
import os
import plistlib
import re
import secrets
import ssl
import uuid
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

_HOST_ID = re.compile(r"^[0-9A-Fa-f-]{1,64}$")


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


class DeviceKey:
    """The phone's RSA key pair (lockdown's DevicePublicKey), kept under ``<root>/lockdown``."""

    def __init__(self, root: Path):
        path = root / "lockdown" / "device_key.pem"
        if path.exists():
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
            assert isinstance(key, rsa.RSAPrivateKey)
        else:
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            _write_private(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
        self.key = key
        self.path = path
        # lockdown hands out the public key as PKCS#1 PEM ("BEGIN RSA PUBLIC KEY")
        self.public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.PKCS1)


def mint_pair_record(device: DeviceKey, system_buid: str, wifi_mac: str) -> dict[str, Any]:
    """A complete host pair record for this phone, as ``LockdownClient.pair`` builds one."""
    from pymobiledevice3.ca import generate_pairing_cert_chain

    host_cert, host_key, device_cert, root_cert, root_key = generate_pairing_cert_chain(device.public_pem)
    return {
        "DeviceCertificate": device_cert, "HostCertificate": host_cert, "HostPrivateKey": host_key,
        "RootCertificate": root_cert, "RootPrivateKey": root_key, "HostID": str(uuid.uuid4()).upper(),
        "SystemBUID": system_buid, "WiFiMACAddress": wifi_mac, "EscrowBag": secrets.token_bytes(32),
    }


class TrustStore:
    """The hosts this phone trusts (lockdownd's pair records), by HostID."""

    def __init__(self, root: Path, device: DeviceKey):
        self.dir = root / "lockdown" / "trusted"
        self.device = device
        self._contexts: dict[str, ssl.SSLContext] = {}

    def _path(self, host_id: str) -> Path:
        if not _HOST_ID.match(host_id):
            raise KeyError(host_id)
        return self.dir / f"{host_id.upper()}.plist"

    def trust(self, record: dict[str, Any]) -> bytes:
        """Remember a host (what the phone keeps of a pair record); returns its escrow bag."""
        escrow = record.get("EscrowBag") or secrets.token_bytes(32)
        fields = ("HostID", "HostCertificate", "RootCertificate", "DeviceCertificate", "SystemBUID")
        kept: dict[str, Any] = {k: record[k] for k in fields if k in record}
        kept["EscrowBag"] = escrow
        _write_private(self._path(str(record["HostID"])), plistlib.dumps(kept))
        return bytes(escrow)

    def get(self, host_id: str) -> dict[str, Any] | None:
        try:
            value = plistlib.loads(self._path(host_id).read_bytes())
        except (KeyError, OSError, plistlib.InvalidFileException):
            return None
        return value if isinstance(value, dict) else None

    def forget(self, host_id: str) -> None:
        self._contexts.pop(host_id.upper(), None)
        with contextlib.suppress(KeyError, FileNotFoundError):
            self._path(host_id).unlink()

    def server_context(self, host_id: str) -> ssl.SSLContext:
        """The phone's TLS context for a session with a trusted host: its DeviceCertificate and key.

        Like the client's context (``service_connection.create_ssl_context``): TLS 1.2-1.3, any
        cipher, no peer verification. No session tickets: a ticket sent after the handshake would
        be the first bytes a DTX reader sees when a client strips TLS.
        """
        host_id = host_id.upper()
        if host_id in self._contexts:
            return self._contexts[host_id]
        record = self.get(host_id)
        if record is None or "DeviceCertificate" not in record:
            raise KeyError(host_id)
        pem = self.dir.parent / "tls" / f"{host_id}.pem"
        cert = record["DeviceCertificate"]
        key = self.device.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption())
        _write_private(pem, bytes(cert).rstrip(b"\n") + b"\n" + key)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.maximum_version = ssl.TLSVersion.TLSv1_3
        if ssl.OPENSSL_VERSION.lower().startswith("openssl"):
            ctx.set_ciphers("ALL:!aNULL:!eNULL:@SECLEVEL=0")
        ctx.num_tickets = 0
        ctx.verify_mode = ssl.CERT_NONE
        ctx.load_cert_chain(str(pem))
        self._contexts[host_id] = ctx
        return ctx


class HostRecords:
    """usbmuxd's store: the host's pair record for each phone, by UDID (``ReadPairRecord``)."""

    def __init__(self, root: Path):
        self.dir = root / "usbmuxd"

    def _path(self, udid: str) -> Path:
        if not _HOST_ID.match(udid):
            raise KeyError(udid)
        return self.dir / f"{udid}.plist"

    def read(self, udid: str) -> bytes | None:
        try:
            return self._path(udid).read_bytes()
        except (KeyError, OSError):
            return None

    def save(self, udid: str, data: bytes) -> None:
        plistlib.loads(data)  # refuse what is not a plist
        _write_private(self._path(udid), data)

    def delete(self, udid: str) -> None:
        with contextlib.suppress(KeyError, FileNotFoundError):
            self._path(udid).unlink()
