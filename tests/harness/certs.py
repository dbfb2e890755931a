"""Certificates and keys for the local control plane.

Owns the PKI of one local cluster: a CA, the API server's serving certificate (127.0.0.1, localhost and
the in-cluster names), client certificates (admin in ``system:masters``, the controller manager and the
scheduler as their RBAC-bootstrapped users) and the service-account signing key pair. Everything is
generated with ``cryptography`` into one folder with 0600 keys; nothing here is ever committed.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=30)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientCert:
    cert: Path
    key: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class Pki:
    """Paths of every file the control plane and its clients need."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_public_key: Path
    sa_private_key: Path
    admin: ClientCert
    controller_manager: ClientCert
    scheduler: ClientCert


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def _issue(
    directory: Path,
    stem: str,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    subject: x509.Name,
    *,
    server: bool,
) -> ClientCert:
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = _builder(subject, ca_name, key.public_key()).add_extension(
        x509.ExtendedKeyUsage([usage]), critical=False
    )
    if server:
        sans: list[x509.GeneralName] = [
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes"),
            x509.DNSName("kubernetes.default"),
            x509.DNSName("kubernetes.default.svc"),
            x509.DNSName("kubernetes.default.svc.cluster.local"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
        ]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return ClientCert(cert=cert_path, key=key_path)


def generate(directory: Path) -> Pki:
    """Create a fresh PKI in ``directory`` (created if missing) and return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("podtailor-local-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    (directory / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(directory / "ca.key", ca_key)

    serving = _issue(directory, "apiserver", ca_key, ca_name, _name("kube-apiserver"), server=True)
    admin = _issue(directory, "admin", ca_key, ca_name, _name("podtailor-admin", "system:masters"), server=False)
    kcm = _issue(directory, "controller-manager", ca_key, ca_name, _name("system:kube-controller-manager"),
                 server=False)
    sched = _issue(directory, "scheduler", ca_key, ca_name, _name("system:kube-scheduler"), server=False)

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(directory / "sa.key", sa_key)
    (directory / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return Pki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=serving.cert,
        serving_key=serving.key,
        sa_public_key=directory / "sa.pub",
        sa_private_key=directory / "sa.key",
        admin=admin,
        controller_manager=kcm,
        scheduler=sched,
    )


def _load_ca(directory: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Name]:
    key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{directory / 'ca.key'} is not the EC key this module writes")
    return key, x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes()).subject


def issue_client(directory: Path, stem: str, common_name: str, organization: str | None = None) -> ClientCert:
    """A client certificate from the CA that ``generate`` wrote into ``directory``: another user of the same
    cluster (``organization`` is its group, e.g. ``system:masters``), so the audit log tells its writes apart."""
    ca_key, ca_name = _load_ca(directory)
    return _issue(directory, stem, ca_key, ca_name, _name(common_name, organization), server=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingPki:
    """A CA of its own and a serving certificate (127.0.0.1 and localhost) signed by it: a webhook's TLS."""

    ca_cert: Path
    cert: Path
    key: Path


def generate_serving(directory: Path, common_name: str) -> ServingPki:
    """A fresh CA and a loopback serving certificate in ``directory`` (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"{common_name}-ca")
    ca_cert = (_builder(ca_name, ca_name, ca_key.public_key())
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .sign(ca_key, hashes.SHA256()))
    (directory / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    served = _issue(directory, "serving", ca_key, ca_name, _name(common_name), server=True)
    return ServingPki(ca_cert=directory / "ca.crt", cert=served.cert, key=served.key)
