"""``jms://`` endpoints: a queue or a topic of a JMS broker, which the consumers reach over STOMP.

``jms://[user:password@]host[:port]/NAME`` is the JMS topic NAME, as in Hermes; ``.../queue/NAME`` and
``.../topic/NAME`` say which kind of destination. The port is the broker's STOMP port (61613 when absent).
The message goes as a JMS BytesMessage; its Hermes headers become JMS properties named as Hermes names them:
without dashes (``Hermes-Message-Id`` is ``HermesMessageId``), since a JMS property name is a Java identifier.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from hermes.errors import ValidationError

JMS_SCHEME = "jms"
STOMP_PORT = 61613
DESTINATION_KINDS = ("queue", "topic")
DESTINATION_NAME = r"[A-Za-z0-9._~-]+"
_NAME = re.compile(DESTINATION_NAME)
# the frame's own headers, set by the sender (a stray ``transaction`` would make the broker refuse the frame)
FRAME_HEADERS = frozenset({"destination", "receipt", "persistent", "transaction"})
_FORMS = "jms://host:port/NAME (a topic, as in Hermes), jms://host:port/queue/NAME or jms://host:port/topic/NAME"


@dataclass(frozen=True)
class JmsDestination:
    host: str
    port: int
    kind: str  # "queue" or "topic"
    name: str

    @property
    def stomp(self) -> str:
        """The destination as ActiveMQ's STOMP connector names it."""
        return f"/{self.kind}/{self.name}"

    @property
    def broker(self) -> str:
        return f"{self.host}:{self.port}"


@functools.lru_cache(maxsize=1024)  # every delivery asks; endpoints are few
def jms_destination(url: str, field: str = "endpoint") -> JmsDestination:
    """The destination of a ``jms://`` URL (credentials ignored); a ValidationError naming ``field`` if it has none."""
    parts = urlsplit(url)
    if "?" in url or "#" in url:
        raise ValidationError(f"a jms:// endpoint has no query or fragment: write it as {_FORMS}", field)
    segments = parts.path.split("/")[1:]
    if len(segments) == 1:
        kind, name = "topic", segments[0]
    elif len(segments) == 2 and segments[0] in DESTINATION_KINDS:
        kind, name = segments
    else:
        kind, name = "", ""
    if not name:
        raise ValidationError(f"must name one destination: write it as {_FORMS}", field)
    if not _NAME.fullmatch(name):
        raise ValidationError(
            f"destination name '{name}' must be letters, digits and . _ ~ - (write it as {_FORMS})", field
        )
    return JmsDestination(parts.hostname or "", parts.port or STOMP_PORT, kind, name)


def jms_properties(headers: Mapping[str, str]) -> dict[str, str]:
    """A delivery's HTTP headers as the JMS message's properties: names without dashes, as Hermes' JMS sender
    writes them; ``Content-Type`` stays the frame's ``content-type``. The frame's own headers cannot be set."""
    properties = {}
    for name, value in headers.items():
        key = "content-type" if name.lower() == "content-type" else name.replace("-", "")
        if key not in FRAME_HEADERS:
            properties[key] = value
    return properties
