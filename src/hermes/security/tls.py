"""TLS: the certificate the HTTP listeners present (``--tls-cert-file``, ``--tls-key-file``), and what deliveries
to HTTPS subscribers trust (the system's CAs, plus ``--consumer-tls-ca-file``)."""

from __future__ import annotations

import ssl
from pathlib import Path

from hermes.errors import StartupError


def server_context(cert_file: Path | None, key_file: Path | None) -> ssl.SSLContext | None:
    """None: the listeners speak plain HTTP."""
    if cert_file is None and key_file is None:
        return None
    if cert_file is None or key_file is None:
        raise StartupError("--tls-cert-file and --tls-key-file go together: give both, or neither")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)  # TLS 1.2 or later, the library's ciphers
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise StartupError(f"the TLS certificate {cert_file} and key {key_file} cannot be loaded: {exc}") from None
    context.set_alpn_protocols(["http/1.1"])
    return context


def client_context(ca_file: Path | None) -> ssl.SSLContext:
    """Verifies a subscriber's certificate and host name against the system's CAs and ``ca_file``'s."""
    context = ssl.create_default_context()
    if ca_file is not None:
        try:
            context.load_verify_locations(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise StartupError(f"the CA file {ca_file} cannot be loaded: {exc}") from None
    return context
