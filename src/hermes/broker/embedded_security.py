"""SCRAM users and TLS for the embedded broker, to run Hermes against a Kafka that authenticates clients as
production clusters do. The CA and the broker's certificate (for the broker's address) are generated once in
its directory; the broker itself signs in to its own listener as the user ``hermes-broker``, whose password is
generated at format time and kept beside its data (mode 0600)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

MECHANISM = "SCRAM-SHA-512"
BROKER_USER = "hermes-broker"


@dataclass(frozen=True)
class BrokerSecurity:
    """``users``: SCRAM user name -> password, created when the log directory is formatted (a directory
    formatted earlier keeps the users it had). ``tls``: the listener speaks TLS (SASL_SSL), else SASL_PLAINTEXT."""

    users: dict[str, str] = field(default_factory=dict)
    tls: bool = True

    @property
    def protocol(self) -> str:
        return "SASL_SSL" if self.tls else "SASL_PLAINTEXT"


def write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)


def broker_password(directory: Path) -> str:
    path = directory / "broker.secret"
    if not path.exists():
        write_private(path, secrets.token_urlsafe(24).encode())
    return path.read_text()


def certificates(directory: Path, host: str) -> tuple[Path, Path]:
    """The CA certificate clients trust and the broker's key and certificate chain (PEM, key in PKCS#8)."""
    tls = directory / "tls"
    ca_path, server_path = tls / "ca.pem", tls / "server.pem"
    if ca_path.exists() and server_path.exists():
        return ca_path, server_path
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Hermes embedded Kafka CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    try:
        names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(host))]
    except ValueError:
        names = [x509.DNSName(host)]
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    pkcs8 = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    write_private(server_path, pkcs8 + server.public_bytes(pem) + ca.public_bytes(pem))
    write_private(ca_path, ca.public_bytes(pem))
    return ca_path, server_path


def server_settings(security: BrokerSecurity, directory: Path, host: str) -> dict[str, str]:
    """The server.properties entries of the client listener ``CLIENT`` with SCRAM (and TLS)."""
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{BROKER_USER}" password="{broker_password(directory)}";'
    )
    settings = {
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,CLIENT:{security.protocol}",
        "inter.broker.listener.name": "CLIENT",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.client.{MECHANISM.lower()}.sasl.jaas.config": jaas,
    }
    if security.tls:
        ca, server = certificates(directory, host)
        settings |= {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(server),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca),
        }
    return settings


def format_arguments(security: BrokerSecurity, directory: Path) -> list[str]:
    users = {**security.users, BROKER_USER: broker_password(directory)}
    return [
        arg
        for name, password in users.items()
        for arg in ("--add-scram", f"{MECHANISM}=[name={name},password={password}]")
    ]


def client_settings(security: BrokerSecurity, directory: Path, host: str) -> dict[str, str]:
    """librdkafka settings with which the broker's own user reaches it (its readiness check)."""
    settings = {
        "security.protocol": security.protocol,
        "sasl.mechanism": MECHANISM,
        "sasl.username": BROKER_USER,
        "sasl.password": broker_password(directory),
    }
    if security.tls:
        settings["ssl.ca.location"] = str(certificates(directory, host)[0])
    return settings
