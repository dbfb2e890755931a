"""The webhook's serving certificate: self-managed (a private CA and a leaf it signs) or mounted files.

Owns issuing, with ``cryptography``, an ECDSA P-256 CA and a serving certificate for the Service's DNS
names (``<service>``, ``<service>.<namespace>``, ``<service>.<namespace>.svc`` and ``.svc.cluster.local``)
plus any extra DNS names or IP addresses; deciding when to renew (``renew_fraction`` of the validity, 80%
by default); optionally keeping them in a ``--cert-dir`` so a restart reuses the same CA; and turning a
certificate into an ``ssl.SSLContext`` (files only exist for the instant ``load_cert_chain`` needs them).
``MountedCert`` watches ``--tls-cert-file``/``--tls-key-file`` (e.g. cert-manager's Secret volume) and
reloads them when their modification times change. CA bundle merging for the registration lives here
too: our CA plus the still-valid CAs already registered (other replicas, or the previous CA during a
rotation), newest first, at most ``MAX_BUNDLE_CAS``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

MAX_BUNDLE_CAS = 5
RENEW_FRACTION = 0.8


class CertError(Exception):
    """A certificate or key that cannot be read or used (bad files, bad names)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingCert:
    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes
    """The CA to register as caBundle (for mounted files: --tls-ca-file, or empty)."""
    not_before_s: float
    not_after_s: float

    def renew_at_s(self, fraction: float = RENEW_FRACTION) -> float:
        return self.not_before_s + fraction * (self.not_after_s - self.not_before_s)


def service_names(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def _san(names: Sequence[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in dict.fromkeys(n for n in names if n):
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    if not entries:
        raise CertError("a serving certificate needs at least one DNS name or IP address")
    return x509.SubjectAlternativeName(entries)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, now: dt.datetime,
             validity_s: float) -> x509.CertificateBuilder:
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(seconds=validity_s)))


def issue(names: Sequence[str], validity_s: float, now_s: float) -> ServingCert:
    """A fresh CA (valid as long as the leaf) and a serving certificate for ``names`` (DNS names or IPs)."""
    now = dt.datetime.fromtimestamp(now_s, dt.UTC)
    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"podtailor-webhook-ca-{int(now_s)}")])
    ca = (_builder(ca_name, ca_name, ca_key, now, validity_s)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    leaf_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64] if names else "podtailor")])
    leaf = (_builder(leaf_name, ca_name, leaf_key, now, validity_s)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(_san(names), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return ServingCert(cert_pem=leaf.public_bytes(serialization.Encoding.PEM), key_pem=_pem_key(leaf_key),
                       ca_pem=ca.public_bytes(serialization.Encoding.PEM),
                       not_before_s=leaf.not_valid_before_utc.timestamp(),
                       not_after_s=leaf.not_valid_after_utc.timestamp())


def _validity(cert_pem: bytes) -> tuple[float, float]:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as err:
        raise CertError(f"unreadable certificate: {err}") from None
    return cert.not_valid_before_utc.timestamp(), cert.not_valid_after_utc.timestamp()


def server_context(cert: ServingCert) -> ssl.SSLContext:
    """A TLS 1.2+ server context holding ``cert``; raises CertError when the pair does not load."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="podtailor-tls-") as tmp:
        cert_path, key_path = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        cert_path.write_bytes(cert.cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(cert.key_pem)
        try:
            ctx.load_cert_chain(str(cert_path), str(key_path))
        except (ssl.SSLError, OSError) as err:
            raise CertError(f"certificate and key do not load: {err}") from None
    return ctx


# --------------------------------------------------------------------------------------- persistence
def load_dir(cert_dir: Path) -> ServingCert | None:
    """The pair kept in ``cert_dir`` (ca.crt, tls.crt, tls.key), None when absent or unreadable."""
    try:
        ca, cert, key = (Path(cert_dir, n).read_bytes() for n in ("ca.crt", "tls.crt", "tls.key"))
        not_before, not_after = _validity(cert)
    except (OSError, CertError):
        return None
    return ServingCert(cert_pem=cert, key_pem=key, ca_pem=ca, not_before_s=not_before, not_after_s=not_after)


def save_dir(cert_dir: Path, cert: ServingCert) -> None:
    cert_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name, data in (("ca.crt", cert.ca_pem), ("tls.crt", cert.cert_pem), ("tls.key", cert.key_pem)):
        tmp = Path(cert_dir, f".{name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        tmp.replace(Path(cert_dir, name))


def covers(cert: ServingCert, names: Sequence[str]) -> bool:
    """Every name is in the certificate's SANs (a kept certificate must still fit the flags)."""
    try:
        san = x509.load_pem_x509_certificate(cert.cert_pem).extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    have = {str(v) for v in san.get_values_for_type(x509.DNSName)}
    have |= {str(v) for v in san.get_values_for_type(x509.IPAddress)}
    return all(str(ipaddress.ip_address(n)) in have if _is_ip(n) else n in have for n in names if n)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


# --------------------------------------------------------------------------------------- mounted files
class MountedCert:
    """``--tls-cert-file``/``--tls-key-file`` (and optional ``--tls-ca-file``), reloaded on change."""

    def __init__(self, cert_file: Path, key_file: Path, ca_file: Path | None = None) -> None:
        self.files = (cert_file, key_file, ca_file)
        self.stamp: tuple[float, ...] = ()

    def _mtimes(self) -> tuple[float, ...]:
        try:
            return tuple(p.stat().st_mtime_ns for p in self.files if p is not None)
        except OSError as err:
            raise CertError(f"cannot read the mounted certificate: {err}") from None

    def changed(self) -> bool:
        return self._mtimes() != self.stamp

    def load(self) -> ServingCert:
        cert_file, key_file, ca_file = self.files
        stamp = self._mtimes()
        try:
            cert, key = cert_file.read_bytes(), key_file.read_bytes()
            ca = ca_file.read_bytes() if ca_file is not None else b""
        except OSError as err:
            raise CertError(f"cannot read the mounted certificate: {err}") from None
        not_before, not_after = _validity(cert)
        self.stamp = stamp
        return ServingCert(cert_pem=cert, key_pem=key, ca_pem=ca, not_before_s=not_before, not_after_s=not_after)


# ------------------------------------------------------------------------------------------ CA bundle
def merge_bundle(ours: bytes, existing: bytes, now_s: float, limit: int = MAX_BUNDLE_CAS) -> bytes:
    """Our CA first, then the still-valid certificates of ``existing`` (newest first), deduplicated."""
    try:
        certs = x509.load_pem_x509_certificates(existing) if existing.strip() else []
    except ValueError:
        certs = []
    mine = x509.load_pem_x509_certificates(ours)
    keep = [c for c in certs if c.not_valid_after_utc.timestamp() > now_s and c not in mine]
    keep.sort(key=lambda c: c.not_valid_before_utc, reverse=True)
    chosen = (mine + keep)[:limit]
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chosen)
