"""Topic administration and offset look-ups."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from hermes.broker.connection import KafkaConnection
from hermes.errors import BrokerError, BrokerUnavailable

log = logging.getLogger(__name__)

# The metadata of offsets a consumers node's shared reader commits, followed by the node's id: the groups it
# commits for have no Kafka members, and management shows the committing node as their member instead.
SHARED_READER = "hermes-shared-reader:"
# What may follow it, each note starting with NOTE_START: the requestedAt of the last retransmission applied to
# the partition (consumers/retransmission.py), then the attempts of its unfinished messages (consumers/attempts.py)
NOTE_START = ";"
RETRANSMISSION_NOTE = NOTE_START + "retransmission="
ATTEMPTS_NOTE = NOTE_START + "attempts="


class BrokerAdmin:
    def __init__(self, connection: KafkaConnection, request_timeout: float = 10.0) -> None:
        self._connection = connection
        self._timeout = request_timeout
        self._admin = AdminClient(connection.config())
        # Requests to a group's coordinator go through a client of their own, destroyed when one of them timed out
        # and made again once a broker answers: a coordinator look-up left waiting for a broker when none was up
        # made librdkafka 2.16 abort the process (rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt >
        # 0') when a broker came back, e.g. after each restart of the embedded broker (confluentinc/librdkafka#4605).
        # A client destroyed before then does not; meanwhile group requests fail at once, unsent. It is made with
        # the first group request: an admin that makes none (most of a consumers process's) holds one client's
        # threads, each waking once a second, instead of two.
        self._groups: AdminClient | None = None
        self._groups_made = False
        self._groups_timed_out = False  # set on the client's own thread, which must not destroy it
        self._next_probe = 0.0

    @property
    def connection(self) -> KafkaConnection:
        return self._connection

    def close(self) -> None:
        """Frees its clients' librdkafka handles (threads, pipes, sockets) now rather than whenever the garbage
        collector gets to them. A call under way in another thread returns first (the destroy waits for it); one
        after this raises RuntimeError."""
        for client in (self._admin, self._groups):
            if client is not None:
                client.__exit__(None, None, None)  # destroys the handle: AdminClient has no close of its own

    def __enter__(self) -> BrokerAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_until_reachable(self, timeout: float) -> None:
        """Raises BrokerUnavailable unless the cluster answers a metadata request within ``timeout``."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                self._admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
                return
            except KafkaException as exc:
                last = exc
        raise BrokerUnavailable(
            f"the Kafka cluster at {self._connection.bootstrap_servers} did not answer within {timeout:.0f} s"
            + (f" ({last})" if last else "")
        )

    def create_topic(
        self, name: str, partitions: int, *, retention_ms: int | None = None, max_message_bytes: int | None = None
    ) -> None:
        config = {}
        if retention_ms is not None:
            config["retention.ms"] = str(retention_ms)
        if max_message_bytes is not None:
            config["max.message.bytes"] = str(max_message_bytes)
        futures = self._admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=-1, config=config)],
            request_timeout=self._timeout,
        )
        try:
            futures[name].result(timeout=self._timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise _to_error(exc, f"creating Kafka topic {name}") from exc

    def alter_topic(self, name: str, *, retention_ms: int | None = None, max_message_bytes: int | None = None) -> None:
        entries = []
        if retention_ms is not None:
            entries.append(ConfigEntry("retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET))
        if max_message_bytes is not None:
            entries.append(
                ConfigEntry("max.message.bytes", str(max_message_bytes), incremental_operation=AlterConfigOpType.SET)
            )
        if not entries:
            return
        futures = self._admin.incremental_alter_configs([ConfigResource("topic", name, incremental_configs=entries)])
        try:
            for future in futures.values():
                future.result(timeout=self._timeout)
        except KafkaException as exc:
            raise _to_error(exc, f"altering Kafka topic {name}") from exc

    def delete_topic(self, name: str) -> None:
        futures = self._admin.delete_topics([name], request_timeout=self._timeout)
        try:
            futures[name].result(timeout=self._timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise _to_error(exc, f"deleting Kafka topic {name}") from exc

    def topic_exists(self, name: str) -> bool:
        return name in self.topic_names()

    def topic_names(self) -> set[str]:
        try:
            return set(self._admin.list_topics(timeout=self._timeout).topics)
        except KafkaException as exc:
            raise _to_error(exc, "listing Kafka topics") from exc

    def topic_config(self, name: str) -> dict[str, str]:
        futures = self._admin.describe_configs([ConfigResource("topic", name)], request_timeout=self._timeout)
        try:
            [entries] = [future.result(timeout=self._timeout) for future in futures.values()]
        except KafkaException as exc:
            raise _to_error(exc, f"describing Kafka topic {name}") from exc
        return {key: entry.value for key, entry in entries.items()}

    def add_partitions(self, name: str, total: int) -> None:
        futures = self._admin.create_partitions([NewPartitions(name, total)], request_timeout=self._timeout)
        try:
            futures[name].result(timeout=self._timeout)
        except KafkaException as exc:
            raise _to_error(exc, f"adding partitions to Kafka topic {name}") from exc

    def delete_records(self, name: str, before: Mapping[int, int]) -> None:
        """Deletes every record of partition ``p`` below offset ``before[p]`` (Kafka's DeleteRecords)."""
        futures = self._admin.delete_records(
            [TopicPartition(name, p, o) for p, o in before.items()], request_timeout=self._timeout
        )
        try:
            for future in futures.values():
                future.result(timeout=self._timeout)
        except KafkaException as exc:
            raise _to_error(exc, f"deleting records of Kafka topic {name}") from exc

    def partitions(self, topic: str) -> list[int]:
        metadata = self._admin.list_topics(topic, timeout=self._timeout).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return []
        return sorted(metadata.partitions)

    def newest_timestamps(self, topics: Iterable[str]) -> dict[str, int]:
        """The timestamp (ms) of each topic's newest record (Kafka's max-timestamp offset look-up, one request
        for every partition); a topic whose partitions hold no record is left out."""
        metadata = self._admin.list_topics(timeout=self._timeout).topics
        wanted = {
            TopicPartition(name, p): OffsetSpec.max_timestamp()  # type: ignore[no-untyped-call]
            for name in topics
            if (found := metadata.get(name)) is not None and found.error is None
            for p in found.partitions
        }
        if not wanted:
            return {}
        newest: dict[str, int] = {}
        try:
            for tp, future in self._admin.list_offsets(wanted, request_timeout=self._timeout).items():
                timestamp = future.result().timestamp
                if timestamp >= 0:
                    newest[tp.topic] = max(timestamp, newest.get(tp.topic, timestamp))
        except KafkaException as exc:
            raise _to_error(exc, "reading the newest records' timestamps") from exc
        return newest

    # --- offsets (the admin client's ListOffsets and OffsetFetch; a short-lived consumer for look-ups by time and
    # commits from outside a group, which the admin client does not do) ---

    def _offset_consumer(self, group_id: str = "hermes-offsets") -> Any:
        return Consumer(self._connection.config(**{"group.id": group_id, "enable.auto.commit": False}))

    def _watermarks(self, topic: str, consumer: Any = None) -> dict[int, tuple[int, int]]:
        own = consumer is None
        consumer = self._offset_consumer() if own else consumer
        try:
            return {p: self._watermark(consumer, topic, p) for p in self.partitions(topic)}
        finally:
            if own:
                consumer.close()

    def _watermark(self, consumer: Any, topic: str, partition: int) -> tuple[int, int]:
        """A partition's low and high watermarks. A topic created a moment ago may not have its leader yet
        (NOT_LEADER_FOR_PARTITION): asked again until the request timeout."""
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=self._timeout, cached=False
                )
                return low, high
            except KafkaException as exc:
                if exc.args[0].code() not in _NO_LEADER_YET or time.monotonic() > deadline:
                    raise _to_error(exc, f"reading the offsets of {topic}/{partition}") from exc
                time.sleep(0.05)

    def last_value(self, topic: str, timeout: float = 10.0) -> bytes | None:
        """The value of the latest record of the topic's partition 0, None when it has none."""
        consumer = self._offset_consumer()
        try:
            _, high = self._watermark(consumer, topic, 0)
            if high == 0:
                return None
            consumer.assign([TopicPartition(topic, 0, high - 1)])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                record = consumer.poll(0.2)
                if record is None:
                    continue
                if record.error() is not None:
                    raise _to_error(KafkaException(record.error()), f"reading the latest record of {topic}")
                value: bytes | None = record.value()
                return value
            raise BrokerUnavailable(f"the latest record of {topic} did not arrive within {timeout:.0f} s")
        finally:
            consumer.close()

    def end_offsets(self, topic: str) -> dict[int, int]:
        return self._listed_offsets(topic, OffsetSpec.latest())  # type: ignore[no-untyped-call]

    def beginning_offsets(self, topic: str) -> dict[int, int]:
        return self._listed_offsets(topic, OffsetSpec.earliest())  # type: ignore[no-untyped-call]

    def _listed_offsets(self, topic: str, spec: Any) -> dict[int, int]:
        """One ListOffsets request for every partition of the topic (a short-lived consumer per look-up cost
        tens to hundreds of ms: a metrics query over every subscription took seconds). A topic created a moment
        ago may not have its leaders yet: asked again until the request timeout."""
        deadline = time.monotonic() + self._timeout
        while True:
            wanted = {TopicPartition(topic, p): spec for p in self.partitions(topic)}
            if not wanted:
                return {}
            try:
                futures = self._admin.list_offsets(wanted, request_timeout=self._timeout)
                return {tp.partition: future.result().offset for tp, future in futures.items()}
            except KafkaException as exc:
                if exc.args[0].code() not in _NO_LEADER_YET or time.monotonic() > deadline:
                    raise _to_error(exc, f"reading the offsets of {topic}") from exc
                time.sleep(0.05)

    def offsets_for_time(self, topic: str, timestamp_ms: int) -> dict[int, int]:
        """Per partition, the first offset whose timestamp is at or after ``timestamp_ms`` (the end offset when
        there is none)."""
        consumer = self._offset_consumer()
        try:
            watermarks = self._watermarks(topic, consumer)
            found = consumer.offsets_for_times(
                [TopicPartition(topic, p, timestamp_ms) for p in watermarks], timeout=self._timeout
            )
            return {tp.partition: tp.offset if tp.offset >= 0 else watermarks[tp.partition][1] for tp in found}
        finally:
            consumer.close()

    def committed_offsets(self, group_id: str, topic: str) -> dict[int, int]:
        """The group's committed offset of each partition of the topic that has one (one OffsetFetch request)."""
        return {p: offset for p, (offset, _) in self.committed(group_id, topic).items()}

    def committed(self, group_id: str, topic: str) -> dict[int, tuple[int, str]]:
        """The group's committed offset and its metadata (``set_group_offsets``' committer) of each partition of
        the topic that has one."""
        partitions = [TopicPartition(topic, p) for p in self.partitions(topic)]
        if not partitions or not self._group_exists(group_id):
            return {}
        request = [ConsumerGroupTopicPartitions(group_id, partitions)]
        try:
            futures = self._group_client().list_consumer_group_offsets(request, request_timeout=self._timeout)
            result = futures[group_id].result(timeout=self._timeout)
        except (KafkaException, TimeoutError) as exc:
            raise self._group_request_failed(exc, f"reading the committed offsets of {group_id}") from exc
        return {tp.partition: (tp.offset, tp.metadata or "") for tp in result.topic_partitions if tp.offset >= 0}

    def _group_exists(self, group_id: str) -> bool:
        """Whether the group has a coordinator's record (offsets or members), asked until its coordinator answers.
        An OffsetFetch through the admin client that meets a coordinator not ready yet (a broker just started, a
        coordinator moved) crashes librdkafka 2.16 (NULL group in rd_kafka_handle_OffsetFetch:
        confluentinc/librdkafka#5040); a group description meets the same as an error, and once it is answered,
        the group's coordinator is ready for the OffsetFetch."""
        deadline = time.monotonic() + self._timeout
        while True:
            futures = self._group_client().describe_consumer_groups([group_id], request_timeout=self._timeout)
            try:
                found = futures[group_id].result(timeout=self._timeout)
            except (KafkaException, TimeoutError) as exc:
                err = exc.args[0] if isinstance(exc, KafkaException) else None
                if isinstance(err, KafkaError) and err.code() in _COORDINATOR_NOT_READY and time.monotonic() < deadline:
                    time.sleep(_COORDINATOR_WAIT)
                    continue
                raise self._group_request_failed(exc, f"finding the coordinator of {group_id}") from exc
            return bool(found.state != ConsumerGroupState.DEAD)

    def commit_offsets(self, group_id: str, topic: str, offsets: Mapping[int, int], metadata: str = "") -> None:
        """Sets a group's committed offsets from outside the group (e.g. a new or suspended subscription), each
        with ``metadata``."""
        consumer = self._offset_consumer(group_id)
        try:
            partitions = [TopicPartition(topic, p, o, metadata=metadata) for p, o in offsets.items()]
            consumer.commit(offsets=partitions, asynchronous=False)
        except KafkaException as exc:
            raise _to_error(exc, f"committing offsets of {group_id}") from exc
        finally:
            consumer.close()

    def set_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[tuple[str, int], int],
        committer: str,
        done: Callable[[Exception | None], None],
        notes: Mapping[tuple[str, int], str] | None = None,
    ) -> None:
        """Sets a group's committed offsets without being its member, asynchronously: ``done`` is called (on the
        client's thread) with None or the error. One request, through this client's connection: a group with no
        members (which Kafka requires for it) costs no client of its own. ``committer`` is kept as each offset's
        metadata (``committed``), followed by the partition's ``notes``."""
        notes = notes or {}
        request = [
            ConsumerGroupTopicPartitions(
                group_id,
                [TopicPartition(t, p, o, metadata=committer + notes.get((t, p), "")) for (t, p), o in offsets.items()],
            )
        ]
        future = self._group_client().alter_consumer_group_offsets(request, request_timeout=self._timeout)[group_id]

        def finished(result: Any) -> None:
            error = result.exception()
            if error is None:
                failed = [tp for tp in result.result().topic_partitions if tp.error is not None]
                error = BrokerError(f"committing offsets of {group_id} failed: {failed[0].error}") if failed else None
            elif isinstance(error, KafkaException):
                # on the client's own thread, which must not destroy it: the next group request replaces it
                error = self._group_request_failed(error, f"committing offsets of {group_id}", replace=False)
            done(error)

        future.add_done_callback(finished)

    def describe_group(self, group_id: str) -> GroupDescription:
        """The consumer group's state and members, each with the partitions assigned to it."""
        futures = self._group_client().describe_consumer_groups([group_id], request_timeout=self._timeout)
        try:
            found = futures[group_id].result(timeout=self._timeout)
        except (KafkaException, TimeoutError) as exc:
            raise self._group_request_failed(exc, f"describing consumer group {group_id}") from exc
        members = tuple(
            GroupMember(
                m.member_id,
                m.client_id,
                m.host,
                tuple((tp.topic, tp.partition) for tp in m.assignment.topic_partitions),
            )
            for m in found.members
        )
        return GroupDescription(found.state.name, members)

    def _group_client(self) -> AdminClient:
        """The client of group requests (see ``__init__``); BrokerUnavailable while no broker answers after one of
        them timed out (asked again at most every ``_PROBE_INTERVAL`` seconds)."""
        if self._groups_timed_out:
            self._groups_timed_out = False
            self._groups = None
        if self._groups is None:
            if self._groups_made:  # destroyed after a timeout: made again once a broker answers
                now = time.monotonic()
                if now < self._next_probe:
                    raise BrokerUnavailable("no Kafka broker answers: a request to a group's coordinator timed out")
                self._next_probe = now + _PROBE_INTERVAL
                try:
                    self._admin.list_topics(timeout=_PROBE_TIMEOUT)
                except KafkaException as exc:
                    raise BrokerUnavailable(f"no Kafka broker answers: {exc.args[0].str()}") from None
            self._groups, self._groups_made = AdminClient(self._connection.config()), True
        return self._groups

    def _group_request_failed(self, exc: Exception, doing: str, replace: bool = True) -> Exception:
        """The error to raise for a failed group request; after a timeout, the client is destroyed (see
        ``__init__``), at once unless ``replace`` is False."""
        if isinstance(exc, TimeoutError):
            error: Exception = BrokerUnavailable(f"{doing} timed out after {self._timeout:.0f} s")
        else:
            assert isinstance(exc, KafkaException)
            error = _to_error(exc, doing)
            err = exc.args[0]
            if not isinstance(err, KafkaError) or err.code() != KafkaError._TIMED_OUT:
                return error
        if replace:
            self._groups = None
        else:
            self._groups_timed_out = True
        return error


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    client_id: str
    host: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class GroupDescription:
    state: str  # Kafka's: STABLE, EMPTY, PREPARING_REBALANCING, ...
    members: tuple[GroupMember, ...]


# While no broker answers, group requests wait this long between metadata requests asking whether one does.
_PROBE_INTERVAL = 2.0
_PROBE_TIMEOUT = 0.5

# A group's coordinator being found, loading its share of the offsets topic, or just moved: asked again after a moment
_COORDINATOR_NOT_READY = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)
_COORDINATOR_WAIT = 0.1

_NO_LEADER_YET = (
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,  # the client has not seen a topic created a moment ago yet
    # The client's metadata and the broker's disagree on the new leader's epoch for a moment (one CI run's
    # subscription creation failed with it right after its topic's)
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.FENCED_LEADER_EPOCH,
)


def _to_error(exc: KafkaException, doing: str) -> Exception:
    err = exc.args[0]
    if isinstance(err, KafkaError) and (
        err.retriable() or err.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT)
    ):
        return BrokerUnavailable(f"{doing} failed: {err.str()}")
    return BrokerError(f"{doing} failed: {exc}")
