"""A subscription's dead letters (``hermes.domain.dead_letter``), read from and purged in its dead-letter topic.

They are there whether the policy is on now or not: turning it off keeps what was written (purge deletes it),
and a subscription that never had one has none. The topic has one partition, partition 0.
"""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Counter

from hermes.broker.admin import BrokerAdmin
from hermes.broker.records import read_records
from hermes.domain.dead_letter import DeadLetter, dead_letter_topic
from hermes.domain.redrive import Redrive
from hermes.domain.subscription import Subscription
from hermes.errors import DeadLetterNotFound, FormattingError, ValidationError
from hermes.metadata.documents import DEAD_LETTER_REDRIVES
from hermes.metadata.repository import MetadataRepository

MAX_LIMIT = 1000
MAX_REDRIVE_IDS = 10_000
DEFAULT_LIMIT = 100
_PARTITION = 0

REQUESTS = Counter(
    "hermes_management_dead_letter_requests", "Dead-letter requests answered, by operation", ("operation",)
)
PURGED = Counter("hermes_management_dead_letters_purged", "Dead letters deleted by purges", ("topic", "subscription"))
REDRIVES = Counter("hermes_management_dead_letter_redrives", "Redrives requested", ("topic", "subscription"))


def parse_limit(text: str | None) -> int:
    if text is None:
        return DEFAULT_LIMIT
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_LIMIT:
        raise ValidationError(f"must be a whole number from 1 to {MAX_LIMIT}", "limit")
    return int(text)


def parse_moment(text: str | None, field: str) -> int | None:
    """Epoch millis, or an ISO-8601 date (UTC without an offset), as epoch millis."""
    if text is None:
        return None
    text = text.strip()
    if text.isascii() and text.isdigit() and len(text) <= 15:
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(
            f"'{text[:100]}' is neither epoch milliseconds nor an ISO-8601 date such as 2026-11-27T06:00:00Z", field
        ) from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return max(int(moment.timestamp() * 1000), 0)


def _bounds(admin: BrokerAdmin, topic: str) -> tuple[int, int]:
    """The first and the next offset of the dead-letter topic; (0, 0) when it does not exist (yet)."""
    if not admin.partitions(topic):
        return 0, 0
    return admin.beginning_offsets(topic).get(_PARTITION, 0), admin.end_offsets(topic).get(_PARTITION, 0)


# Dead letters are written in the order their writes reach the producer, not always the order of their discard
# times: messages given up at once in parallel (inflightSize) may be written a few milliseconds out of order. A
# listing up to a time reads on this far past it for those.
_WRITE_ORDER_SLACK_MS = 10_000


def list_dead_letters(
    admin: BrokerAdmin, subscription: Subscription, limit: int, since: int | None, until: int | None
) -> list[DeadLetter]:
    """Up to ``limit`` dead letters, oldest first, discarded from ``since`` to ``until`` (epoch millis, both
    included)."""
    topic = dead_letter_topic(subscription.qualified_name)
    first, end = _bounds(admin, topic)
    if since is not None and first < end:
        first = max(first, admin.offsets_for_time(topic, since).get(_PARTITION, end))
    found: list[DeadLetter] = []
    while first < end and len(found) < limit:
        records = read_records(admin.connection, topic, _PARTITION, first, end, limit - len(found))
        if not records:
            break
        for record in records:
            letter = DeadLetter.from_record(record.offset, record.key, record.value, record.headers)
            if letter is None or (since is not None and letter.time < since):
                continue
            if until is not None and letter.time > until:
                if letter.time > until + _WRITE_ORDER_SLACK_MS:
                    return found
                continue
            found.append(letter)
        first = records[-1].offset + 1
    return found


def dead_letter(admin: BrokerAdmin, subscription: Subscription, letter_id: str) -> DeadLetter:
    topic = dead_letter_topic(subscription.qualified_name)
    missing = DeadLetterNotFound(f"no dead letter {letter_id[:40]} of {subscription.qualified_name}")
    if not (letter_id.isascii() and letter_id.isdigit()) or len(letter_id) > 18:
        raise missing
    offset = int(letter_id)
    first, end = _bounds(admin, topic)
    if not first <= offset < end:
        raise missing
    records = read_records(admin.connection, topic, _PARTITION, offset, offset + 1, 1)
    if not records or records[0].offset != offset:
        raise missing
    letter = DeadLetter.from_record(offset, records[0].key, records[0].value, records[0].headers)
    if letter is None:
        raise missing
    return letter


def purge(admin: BrokerAdmin, subscription: Subscription) -> int:
    """Deletes every dead letter written so far (Kafka's DeleteRecords up to the end offset); how many."""
    topic = dead_letter_topic(subscription.qualified_name)
    first, end = _bounds(admin, topic)
    if first < end:
        admin.delete_records(topic, {_PARTITION: end})
        PURGED.labels(topic=subscription.topic_name.qualified, subscription=subscription.name).inc(end - first)
    return end - first


def _redrive_moment(body: dict[str, Any], field: str) -> int | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**15:
        return value
    if not isinstance(value, str):
        raise ValidationError("must be epoch milliseconds or an ISO-8601 date", field)
    return parse_moment(value, field)


def _redrive_ids(value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_REDRIVE_IDS:
        raise ValidationError(f"must be a list of 1 to {MAX_REDRIVE_IDS} dead-letter ids", "ids")
    ids = []
    for i, item in enumerate(value):
        text = str(item) if isinstance(item, int) and not isinstance(item, bool) else item
        if not isinstance(text, str) or not (text.isascii() and text.isdigit()) or len(text) > 18:
            raise ValidationError("must be a dead-letter id (its digits, as listed)", f"ids[{i}]")
        ids.append(int(text))
    return tuple(sorted(set(ids)))


def create_redrive(
    repository: MetadataRepository, admin: BrokerAdmin, subscription: Subscription, body: Any
) -> Redrive:
    """Stores a redrive of the dead letters written so far that ``body`` selects: all (``{}``), those discarded
    ``from``/``to``, or those of ``ids``. The subscription's consumer runs it."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise FormattingError('must be a JSON object: {}, {"from": ..., "to": ...} or {"ids": [...]}', "redrive")
    if not subscription.dead_letters.enabled:
        raise ValidationError(
            "must be on to redrive: a redriven message that fails again would be lost", "deadLetters.enabled"
        )
    since, until = _redrive_moment(body, "from"), _redrive_moment(body, "to")
    ids = _redrive_ids(body.get("ids"))
    if ids is not None and (since is not None or until is not None):
        raise ValidationError("selects dead letters by id: not with from or to", "ids")
    topic = dead_letter_topic(subscription.qualified_name)
    start, end = _bounds(admin, topic)
    if since is not None and start < end:
        start = max(start, admin.offsets_for_time(topic, since).get(_PARTITION, end))
    if ids is not None:
        start, end = max(start, ids[0]), min(end, ids[-1] + 1)
    now = int(time.time() * 1000)
    redrive = Redrive(
        id=f"{now:013d}-{secrets.token_hex(3)}",
        subscription=subscription.qualified_name.qualified,
        createdAt=now,
        start=start,
        end=max(start, end),
        position=start,
        since=since,
        until=until,
        ids=ids,
        updatedAt=now,
    )
    repository.put_document(DEAD_LETTER_REDRIVES, redrive.key, redrive.to_document())
    REDRIVES.labels(topic=subscription.topic_name.qualified, subscription=subscription.name).inc()
    return redrive


def redrives(repository: MetadataRepository, subscription: Subscription) -> list[Redrive]:
    """The subscription's redrives, newest first."""
    prefix = f"{subscription.qualified_name.qualified}/"
    found = [
        Redrive.from_document(document)
        for key, document in repository.list_documents(DEAD_LETTER_REDRIVES).items()
        if key.startswith(prefix)
    ]
    return sorted(found, key=lambda redrive: redrive.id, reverse=True)


def delete_redrives(repository: MetadataRepository, subscription: str) -> None:
    """Those of a deleted subscription."""
    for key in repository.list_documents(DEAD_LETTER_REDRIVES):
        if key.startswith(f"{subscription}/"):
            repository.delete_document(DEAD_LETTER_REDRIVES, key)
