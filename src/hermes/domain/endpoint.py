"""Subscription endpoints, with the credentials that may be embedded in their URL: HTTP(S) URLs, and ``jms://``
destinations (``hermes.domain.jms``)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from hermes.domain.jms import DESTINATION_KINDS, DESTINATION_NAME, JMS_SCHEME, jms_destination
from hermes.errors import ValidationError

HTTP_SCHEMES = frozenset({"http", "https"})
SUPPORTED_SCHEMES = HTTP_SCHEMES | {JMS_SCHEME}
MASK = "*****"
_USERINFO = r"[A-Za-z0-9._~!$&'()*+,;=%-]"
_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
# RFC 3986's shape for what we send to: printable ASCII (other characters percent-encoded), a host name or an
# IPv6 literal, a port from 1; the OpenAPI document describes endpoints with the same expressions
_AUTHORITY = rf"(?:{_USERINFO}+(?::{_USERINFO}*)?@)?(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::{_PORT})?"
_HTTP_URL = rf"https?://{_AUTHORITY}(?:[/?#][!-~]*)?"
_JMS_URL = rf"{JMS_SCHEME}://{_AUTHORITY}/(?:(?:{'|'.join(DESTINATION_KINDS)})/)?{DESTINATION_NAME}"
URL_PATTERN = rf"^{_HTTP_URL}$"  # HTTP(S) only: OAuth token endpoints
ENDPOINT_PATTERN = rf"^(?:{_HTTP_URL}|{_JMS_URL})$"  # a subscription's endpoint
# any endpoint's shape; a jms:// one's path is then checked by jms_destination, which names what is wrong
_URL = re.compile(rf"^(?:https?|{JMS_SCHEME})://{_AUTHORITY}(?:[/?#][!-~]*)?$")


@dataclass(frozen=True)
class EndpointAddress:
    """The endpoint exactly as given (password included) with derived, secret-free views of it."""

    raw: str

    @classmethod
    def parse(cls, raw: str, field: str = "endpoint", schemes: frozenset[str] = SUPPORTED_SCHEMES) -> EndpointAddress:
        if not isinstance(raw, str) or not raw:
            raise ValidationError("must be a non-empty URI", field)
        try:
            parts = urlsplit(raw)
            port = parts.port  # raises ValueError on a bad port
        except ValueError as exc:
            raise ValidationError(f"is not a valid URI ({exc})", field) from None
        if "://" not in raw:  # "localhost:8299" parses as scheme "localhost"
            # an address with credentials is not repeated: the answer would show the password
            guess = f"http://{raw}" if "@" not in raw else "http://user:password@host:port/path"
            raise ValidationError(f"has no scheme: write it as {guess} (or https://)", field)
        if parts.scheme not in schemes:
            supported = ", ".join(sorted(schemes))
            raise ValidationError(f"scheme '{parts.scheme}' is not supported (use one of: {supported})", field)
        if not parts.hostname:
            raise ValidationError("must name a host", field)
        if port == 0 or not _URL.match(raw):
            raise ValidationError("is not a valid URI (printable ASCII, other characters percent-encoded)", field)
        if parts.scheme == JMS_SCHEME:
            jms_destination(raw, field)
        return cls(raw)

    # cached: every delivery asks (the instance is frozen, and a cached_property bypasses that, not its equality)
    @functools.cached_property
    def credentials(self) -> tuple[str, str] | None:
        parts = urlsplit(self.raw)
        if parts.username is None:
            return None
        return parts.username, parts.password or ""

    @functools.cached_property
    def url(self) -> str:
        """The URL to send to, with the credentials removed (they travel as an Authorization header, or as a
        JMS broker's login)."""
        parts = urlsplit(self.raw)
        if parts.username is None:
            return self.raw
        netloc = parts.hostname or ""
        if ":" in netloc:  # IPv6 literal
            netloc = f"[{netloc}]"
        if parts.port is not None:
            netloc = f"{netloc}:{parts.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    @property
    def is_jms(self) -> bool:
        return self.raw.startswith(f"{JMS_SCHEME}://")

    @property
    def masked(self) -> str:
        """The endpoint as shown by APIs, logs and metrics: the password replaced by a mask."""
        parts = urlsplit(self.raw)
        if parts.password is None:
            return self.raw
        host = self.url.split("://", 1)[1].split("/", 1)[0]
        netloc = f"{parts.username}:{MASK}@{host}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    def __repr__(self) -> str:
        return f"EndpointAddress({self.masked!r})"

    def __str__(self) -> str:
        return self.masked


def masked_endpoint(raw: str) -> str:
    """``EndpointAddress.masked`` of any text, a valid endpoint or not (one stored before a rule refused it)."""
    if "://" in raw:
        try:
            return EndpointAddress(raw).masked
        except ValueError:  # a bad port
            pass
    return re.sub(r"[^/@]*@", f"{MASK}@", raw, count=1)
