"""How to reach the Kafka cluster: the librdkafka settings shared by producers, consumers and admins."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from hermes.config import Settings

_KAFKA_LOG = logging.getLogger("hermes.kafka")


@dataclass(frozen=True)
class KafkaConnection:
    bootstrap_servers: str
    security: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings, bootstrap_servers: str) -> KafkaConnection:
        security: dict[str, str] = {"security.protocol": settings.kafka_security_protocol.lower()}
        if settings.kafka_sasl_mechanism:
            security["sasl.mechanism"] = settings.kafka_sasl_mechanism
        if settings.kafka_sasl_username:
            security["sasl.username"] = settings.kafka_sasl_username
        if settings.kafka_sasl_password is not None:
            security["sasl.password"] = settings.kafka_sasl_password.get_secret_value()
        if settings.kafka_ssl_ca_location:
            security["ssl.ca.location"] = settings.kafka_ssl_ca_location
        return cls(bootstrap_servers, tuple(sorted(security.items())))

    def config(self, **extra: Any) -> dict[str, Any]:
        # librdkafka's own log lines go through Python logging instead of straight to stderr
        return {"bootstrap.servers": self.bootstrap_servers, "logger": _KAFKA_LOG, **dict(self.security), **extra}

    def __repr__(self) -> str:  # never show the SASL password
        return f"KafkaConnection({self.bootstrap_servers!r})"
