"""A subscription's dead letters (``hermes.domain.dead_letter``), read from and purged in its dead-letter topic.

They are there whether the policy is on now or not: turning it off keeps what was written (purge deletes it),
and a subscription that never had one has none. The topic has one partition, partition 0.
"""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import Counter

from hermes.broker.admin import BrokerAdmin
from hermes.broker.records import read_records
from hermes.domain.dead_letter import DeadLetter, dead_letter_topic
from hermes.domain.subscription import Subscription
from hermes.errors import DeadLetterNotFound, ValidationError

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
_PARTITION = 0

REQUESTS = Counter(
    "hermes_management_dead_letter_requests", "Dead-letter requests answered, by operation", ("operation",)
)
PURGED = Counter("hermes_management_dead_letters_purged", "Dead letters deleted by purges", ("topic", "subscription"))


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
                return found
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
