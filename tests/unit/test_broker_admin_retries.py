"""Which broker answers about a topic created a moment ago are asked again (a fake admin client: the race is
rare against the real broker)."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.errors import BrokerError

pytestmark = pytest.mark.unit


class FlakyAdmin:
    """Answers ListOffsets with ``failures`` errors first, then offset 7 for each partition."""

    def __init__(self, *failures: int) -> None:
        self.failures = list(failures)
        self.calls = 0

    def list_topics(self, topic: str, timeout: float) -> Any:
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions={0: None, 1: None})})

    def list_offsets(self, wanted: dict[TopicPartition, Any], request_timeout: float) -> dict[TopicPartition, Any]:
        self.calls += 1
        if self.failures:
            raise KafkaException(KafkaError(self.failures.pop(0)))
        futures = {}
        for tp in wanted:
            future: Future[Any] = Future()
            future.set_result(SimpleNamespace(offset=7))
            futures[tp] = future
        return futures


def admin_with(fake: FlakyAdmin, timeout: float = 5.0) -> BrokerAdmin:
    admin = BrokerAdmin(KafkaConnection("127.0.0.1:1"), request_timeout=timeout)
    admin._admin = fake
    return admin


@pytest.mark.parametrize(
    "code", [KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH, KafkaError.LEADER_NOT_AVAILABLE]
)
def test_a_new_topics_leader_not_settled_yet_is_asked_again(code: int) -> None:
    fake = FlakyAdmin(code, code)
    assert admin_with(fake).end_offsets("g.t") == {0: 7, 1: 7}
    assert fake.calls == 3


def test_other_errors_are_not_retried() -> None:
    fake = FlakyAdmin(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(BrokerError, match=r"reading the offsets of g\.t"):
        admin_with(fake).end_offsets("g.t")
    assert fake.calls == 1


def test_a_leader_that_never_settles_fails_after_the_request_timeout() -> None:
    fake = FlakyAdmin(*[KafkaError.UNKNOWN_LEADER_EPOCH] * 1000)
    with pytest.raises(BrokerError, match="Leader epoch"):
        admin_with(fake, timeout=0.3).end_offsets("g.t")
    assert 2 <= fake.calls < 1000
