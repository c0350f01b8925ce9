"""What a subscriber receives: JSON as published, or for Avro topics either Avro binary (AVRO subscriptions)
or the message converted to JSON (JSON subscriptions); a CloudEvent in the subscription's mode: binary (its data,
``ce-`` headers), or structured (one JSON object, and always so in a BATCH subscription's batch)."""

from __future__ import annotations

from typing import Any

import orjson

from hermes.domain.avro import AVRO_DECODING_ERRORS, avro_problem, avro_to_json, avro_to_record
from hermes.domain.cloudevents import STRUCTURED, binary_headers, http_content_type, structured
from hermes.domain.message import SCHEMA_VERSION_HEADER, Message
from hermes.domain.names import TopicName
from hermes.domain.subscription import CloudEventsMode, Subscription
from hermes.domain.topic import ContentType
from hermes.errors import UndeliverableMessage
from hermes.http.streamed import Body, FileRegion, StreamedBody
from hermes.metadata.repository import MetadataRepository, until_reachable

JSON = "application/json"
AVRO = "avro/binary"


class ContentConverter:
    def __init__(self, repository: MetadataRepository) -> None:
        self._repository = repository
        self._schemas: dict[tuple[str, int], str] = {}

    async def schema(self, message: Message) -> str | None:
        """The Avro schema of an Avro message (None for JSON); each version is read from the store once."""
        if message.schema_version is None:
            return None
        key = (message.topic, message.schema_version)
        if key not in self._schemas:
            _, self._schemas[key] = await until_reachable(  # the message waits for ZooKeeper, if it must
                self._repository.get_schema, TopicName.parse(message.topic), message.schema_version
            )
        return self._schemas[key]

    @staticmethod
    def document(message: Message, schema: str | None) -> Any:
        """The message as a document filters' paths are evaluated on."""
        body = message.whole_body()
        return orjson.loads(body) if schema is None else avro_to_record(schema, body)

    @staticmethod
    def body(subscription: Subscription, message: Message, schema: str | None) -> tuple[Body, str, dict[str, str]]:
        """A stored (offloaded) body is streamed from its file, unless it is converted."""
        stored = message.stored
        as_is: Body = message.body
        if isinstance(stored, FileRegion):
            as_is = StreamedBody((stored,))
        event = message.cloud_event
        if event is not None:
            if subscription.is_batch or subscription.cloud_events_mode is CloudEventsMode.STRUCTURED:
                return structured(event, message.whole_body()), STRUCTURED, {}
            return as_is, http_content_type(event), binary_headers(event)
        if schema is None:
            return as_is, JSON, {}
        if subscription.content_type is ContentType.AVRO:
            return as_is, AVRO, {SCHEMA_VERSION_HEADER: str(message.schema_version)}
        try:
            return avro_to_json(schema, message.whole_body()), JSON, {}
        except AVRO_DECODING_ERRORS as exc:
            raise UndeliverableMessage(
                f"the message is not Avro binary of schema version {message.schema_version} of {message.topic}: "
                f"{avro_problem(exc)}"
            ) from None
