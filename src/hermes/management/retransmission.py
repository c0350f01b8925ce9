"""Retransmission: moving a subscription back to the first message at or after a moment."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from hermes.broker.admin import RETRANSMISSION_NOTE, BrokerAdmin
from hermes.domain.subscription import Subscription, SubscriptionState
from hermes.errors import HermesError, OffsetsNotMovable, ValidationError
from hermes.metadata.documents import RETRANSMISSION
from hermes.metadata.repository import MetadataRepository

_RELATIVE = re.compile(r"^-(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # Kafka's timestamps are milliseconds since then, never negative


def parse_retransmission_date(body: Any, field: str = "retransmissionDate") -> datetime:
    """An ISO-8601 date (without an offset it is UTC) or, in the older form, a relative ``-6h``."""
    text = body.get(field) if isinstance(body, dict) else body
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("must be an ISO-8601 date such as 2021-10-25T00:00:00+02:00, or -6h", field)
    text = text.strip().strip('"')
    relative = _RELATIVE.match(text)
    try:
        if relative:
            moment = datetime.now(UTC) - timedelta(**{_UNITS[relative.group(2)]: int(relative.group(1))})
        else:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (OverflowError, ValueError):  # a relative date too far back is before 1970 too
        raise ValidationError(f"'{text[:100]}' is not an ISO-8601 date after 1970 or a relative -6h", field) from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    if moment < _EPOCH:
        raise ValidationError(f"'{text[:100]}' is before 1970-01-01T00:00:00Z, where Kafka's timestamps start", field)
    return moment


def retransmit(
    repository: MetadataRepository,
    admin: BrokerAdmin,
    subscription: Subscription,
    moment: datetime,
    cluster: str,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Moves every partition of the subscription to the first offset at or after ``moment``; a dry run only
    answers which offsets those are.

    A running consumer picks the request up from the repository and seeks. The offsets are committed to the
    subscription's consumer group too, so that a suspended subscription, or one whose consumers are down or
    restarting (Hermes issue #1618), starts from them; a group whose members run refuses that commit, and they
    apply the request.
    """
    topic = subscription.topic_name.qualified
    timestamp = int(moment.timestamp() * 1000)
    offsets = admin.offsets_for_time(topic, timestamp)
    oldest = admin.beginning_offsets(topic)
    partitions = [
        {"partition": p, "offset": o, "oldestAvailable": o == oldest.get(p, 0)} for p, o in sorted(offsets.items())
    ]
    summary = {"partitionOffsetListPerBrokerName": {cluster: partitions}}
    if dry_run:
        return summary
    if subscription.state is SubscriptionState.PENDING:
        raise OffsetsNotMovable("Cannot retransmit messages for subscription in PENDING state")
    requested_at = int(time.time() * 1000)
    try:  # noting the request applied (consumers/retransmission.py)
        admin.commit_offsets(subscription.consumer_group_id, topic, offsets, f"{RETRANSMISSION_NOTE}{requested_at}")
    except HermesError:
        if subscription.state is SubscriptionState.SUSPENDED:
            raise
    repository.put_document(
        RETRANSMISSION,
        subscription.qualified_name.qualified,
        {
            "offsets": {str(p): o for p, o in offsets.items()},
            "requestedAt": requested_at,
            "retransmissionDate": moment.isoformat(),
        },
    )
    return summary
