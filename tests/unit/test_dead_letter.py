"""Dead letters' pure parts: the topic's name, the record's round trip, a redrive's selection and document."""

from __future__ import annotations

import dataclasses
import io

from hermes.domain.dead_letter import DeadLetter, dead_letter_topic, is_dead_letter_topic
from hermes.domain.message import Message
from hermes.domain.names import SubscriptionName, TopicName
from hermes.domain.redrive import Redrive, RedriveStatus


def _name(group: str, topic: str, subscription: str) -> SubscriptionName:
    return SubscriptionName(TopicName(group, topic), subscription)


def test_the_topic_name_has_no_dot_fits_kafka_and_tells_subscriptions_apart() -> None:
    # a.b.c$d and a.b$c_d would share a name without the hash
    names = {dead_letter_topic(n) for n in (_name("a.b", "c", "d"), _name("a", "b_c", "d"), _name("a.b", "c", "d2"))}
    assert len(names) == 3
    longest = dead_letter_topic(_name("g" * 200, "t" * 200, "s" * 200))
    assert len(longest) <= 249 and all(is_dead_letter_topic(n) for n in (*names, longest))
    assert not is_dead_letter_topic("hermes-dead-letters_x.y")  # a Hermes topic's Kafka name has a dot


def test_a_dead_letter_keeps_the_message_as_it_was_read() -> None:
    message = Message(
        "g.t", 2, 41, "id-1", b"\xff\x00", 1000, b"key", 3, {"Trace-Id": "x"}, None, None, {"type": "t", "id": "1"}
    )
    letter = DeadLetter.of(message, "refused", 400, 2, 5000)
    read = DeadLetter.from_record(7, letter.key, letter.body, letter.record_headers())
    assert read is not None and read.id == 7
    assert (read.reason, read.last_status, read.attempts, read.time) == ("refused", 400, 2, 5000)
    again = read.message()
    assert again == message
    shown = read.to_json()
    assert (shown["body"], shown["bodyEncoding"], shown["key"]) == ("/wA=", "base64", "key")
    assert DeadLetter.from_record(0, None, b"{}", [("hermes-message-id", b"x")]) is None  # not a dead letter


def test_an_offloaded_message_keeps_its_placeholder() -> None:
    placeholder = b'{"url": "http://offload/blobs/1", "size": 9000000}'
    message = Message("g.t", 0, 1, "id-2", placeholder, 1000, None, None, {}, "http://offload/blobs/1")
    letter = DeadLetter.of(message, "timeout", None, 5, 6000)
    read = DeadLetter.from_record(0, None, letter.body, letter.record_headers())
    assert read is not None and read.to_json()["offloaded"] and read.to_json()["lastStatus"] is None
    assert read.message().external_url == "http://offload/blobs/1" and read.message().body == placeholder
    fetched = dataclasses.replace(message, external_url=None, stored=io.BytesIO(b"the body"))  # as delivered
    assert DeadLetter.of(fetched, "refused", 400, 1, 6000).headers == letter.headers


def test_a_redrive_selects_by_time_or_ids_and_keeps_its_document() -> None:
    letter = DeadLetter("r", 400, 1, 5000, "g.t", 0, 0, "id", (), None, b"", 4)
    assert Redrive("1", "g.t$s", 0, 0, 9, 0, since=5000, until=5000).selects(letter)
    assert not Redrive("1", "g.t$s", 0, 0, 9, 0, since=5001).selects(letter)
    assert Redrive("1", "g.t$s", 0, 0, 9, 0, ids=(1, 4, 8)).selects(letter)
    assert not Redrive("1", "g.t$s", 0, 0, 9, 0, ids=(1, 5)).selects(letter)
    redrive = Redrive("1", "g.t$s", 0, 0, 9, 0, ids=(1, 4)).progressed(5, 2, 100, done=True)
    assert redrive.status is RedriveStatus.DONE and redrive.finishedAt == 100
    assert Redrive.from_document(redrive.to_document()) == redrive
