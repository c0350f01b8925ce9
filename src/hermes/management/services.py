"""What the management API does, apart from HTTP: its one way to the metadata store and to Kafka.

Handlers ask the service and never hold the repository or the broker admin: each method does its blocking work
in a thread, and changes that have a Kafka side (topics, a new subscription's offsets) do both.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Hashable
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from hermes.broker.admin import BrokerAdmin
from hermes.broker.topics import INTERNAL_TOPICS, KafkaTopics
from hermes.config import Settings
from hermes.domain import api_json, signing
from hermes.domain.dead_letter import DeadLetter, dead_letter_topic, is_dead_letter_topic
from hermes.domain.endpoint import masked_endpoint
from hermes.domain.message import Message
from hermes.domain.names import SubscriptionName, TopicName
from hermes.domain.oauth import OAuthProvider
from hermes.domain.redrive import Redrive
from hermes.domain.retransmission_task import RetransmissionTask
from hermes.domain.subscription import DeliveryType, Subscription, SubscriptionState, retry_topic
from hermes.domain.subscription_events import SUBSCRIPTION_EVENTS, subscription_events_topic
from hermes.domain.topic import ContentType, Group, Topic
from hermes.domain.trace import TRACKING_TOPIC
from hermes.errors import (
    BrokerError,
    BrokerUnavailable,
    GroupAlreadyExists,
    HermesError,
    InternalTopicProtected,
    SchemaNotFound,
    ServiceUnavailable,
    StoredEntityInvalid,
    SubscriptionAlreadyExists,
    SubscriptionNotFound,
    TopicAlreadyExists,
    TopicNotFound,
    ValidationError,
)
from hermes.management import dead_letters, monitoring, offline_retransmission, preview, retransmission
from hermes.management.metadata_age import LastReads
from hermes.metadata.repository import MetadataRepository
from hermes.pipeline.traces import (
    STATISTICS_QUERY,
    TRACE_QUERY,
    TrackingStore,
    query_checkpoint,
    read_offsets,
    tracking_root,
)

log = logging.getLogger(__name__)

_P = ParamSpec("_P")
_T = TypeVar("_T")
Json = dict[str, Any]


def protect_internal(name: str) -> None:
    """Hermes' own Kafka topics are kept whatever the API is asked (clients and the pipeline depend on them)."""
    if is_dead_letter_topic(name):
        raise InternalTopicProtected(f"{name} holds a subscription's dead letters: it goes with the subscription")
    if name in INTERNAL_TOPICS:
        raise InternalTopicProtected(
            f"{name} is a Kafka topic Hermes itself owns (message tracking, large-message discovery, idempotency "
            "keys): it cannot be created or deleted through the API"
        )


def _protect_subscription_events(name: TopicName) -> None:
    """Hermes' topic of subscription events: management creates it only at start, so a deleted one would lose
    every event (and its subscriptions) until the next."""
    if name == SUBSCRIPTION_EVENTS:
        raise InternalTopicProtected(f"{name.qualified} is Hermes' topic of subscription events: it cannot be deleted")


def _check_inflight_size(subscription: Subscription, allowed: int | None = None) -> None:
    """Hermes' rule for callers who are not admins: a SERIAL subscription's ``inflightSize`` stays as it was
    (unset, for a new subscription)."""
    if not subscription.is_batch and subscription.serial_policy.inflight_size != allowed:
        raise ValidationError("only admins may set or change it", "subscriptionPolicy.inflightSize")


def _merged_subscription(base: Json, patch: Json, topic: TopicName, name: str) -> Json:
    """``patch`` over ``base``, a subscription's JSON (secrets unmasked), as Hermes' PUT changes the fields sent."""
    base, edit = dict(base), dict(patch)
    endpoint = base.get("endpoint")
    if isinstance(endpoint, str) and edit.get("endpoint") == masked_endpoint(endpoint):
        del edit["endpoint"]  # the masked endpoint sent back unchanged keeps the stored credentials
    oauth, stored_oauth = edit.get("oAuthPolicy"), base.get("oAuthPolicy")
    if isinstance(oauth, dict) and oauth.get("password") == api_json.SECRET_MASK and isinstance(stored_oauth, dict):
        edit["oAuthPolicy"] = {**oauth, "password": stored_oauth.get("password")}  # likewise the password
    secrets, stored_secrets = edit.get("signingSecrets"), base.get("signingSecrets")
    if isinstance(secrets, list) and api_json.SECRET_MASK in secrets:  # masks keep stored secrets, in order
        stored = iter(stored_secrets if isinstance(stored_secrets, list) else [])
        edit["signingSecrets"] = [next(stored, s) if s == api_json.SECRET_MASK else s for s in secrets]
    if "signingSecrets" in edit:
        base.pop("previousSigningSecretExpiresAt", None)  # secrets the owner sets sign until the owner says
    if edit.get("state") == SubscriptionState.PENDING:
        del edit["state"]  # as Hermes: only consumers make a subscription leave PENDING, nobody enters it
    if "trackingEnabled" in edit and "trackingMode" not in edit:
        base.pop("trackingMode", None)  # the older shape decides tracking
    if "supportTeam" in edit and "owner" not in edit:
        base.pop("owner", None)
    merged = {**base, **edit, "name": name, "topicName": topic.qualified}
    policy, stored_policy = edit.get("subscriptionPolicy"), base.get("subscriptionPolicy")
    delivery = base.get("deliveryType", DeliveryType.SERIAL.value)
    if isinstance(policy, dict) and isinstance(stored_policy, dict) and edit.get("deliveryType", delivery) == delivery:
        merged["subscriptionPolicy"] = {**stored_policy, **policy}
    return merged


class ManagementService:
    def __init__(
        self, settings: Settings, repository: MetadataRepository, admin: BrokerAdmin, kafka_topics: KafkaTopics
    ) -> None:
        self.settings = settings
        self._repository = repository
        self._admin = admin
        self._kafka_topics = kafka_topics
        self._tracking = TrackingStore(tracking_root(settings))
        self._last_reads = LastReads()

    @staticmethod
    async def _run(fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def _read(self, read: Callable[..., _T], *key: Hashable) -> _T:
        """A read of the store; while the store is unreachable, its last answer (metadata_age.py)."""
        return await self._last_reads.read((read.__name__, key), lambda: self._run(read, *key))

    # --- groups ---

    async def groups(self) -> list[Group]:
        return await self._read(self._repository.list_groups)

    async def group(self, name: str) -> Group:
        return await self._read(self._repository.get_group, name)

    async def create_group(self, name: str) -> Group:
        return await self._run(self._repository.create_group, Group(name))

    async def delete_group(self, name: str) -> None:
        await self._run(self._repository.delete_group, name)

    # --- topics and schemas ---

    async def topics(self, group: str | None = None) -> list[Topic]:
        return await self._read(self._repository.list_topics, group)

    async def stored_topics(self, group: str | None = None) -> list[Topic | StoredEntityInvalid]:
        """``topics``, and those that fail validation."""
        return await self._read(self._repository.stored_topics, group)

    async def topic(self, name: TopicName) -> Topic:
        return await self._read(self._repository.get_topic, name)

    async def schema(self, name: TopicName, version: int | None = None) -> tuple[int, str] | None:
        """The schema version (the latest by default), None when there is none."""
        try:
            return await self._read(self._repository.get_schema, name, version)
        except SchemaNotFound:
            return None

    async def schema_versions(self, name: TopicName) -> list[int]:
        return await self._read(self._repository.list_schema_versions, name)

    async def save_schema(self, name: TopicName, schema: str) -> int:
        return await self._run(self._repository.save_schema, name, schema)

    async def create_topic(self, topic: Topic) -> Topic:
        protect_internal(topic.qualified_name)
        await self._run(self._repository.get_group, topic.name.group)
        try:
            await self._run(self._repository.get_topic, topic.name)
        except TopicNotFound:
            pass
        except StoredEntityInvalid:
            raise TopicAlreadyExists(f"Topic {topic.qualified_name} already exists (as stored, invalid)") from None
        else:
            raise TopicAlreadyExists(f"Topic {topic.qualified_name} already exists")
        await self._run(self._kafka_topics.create, topic)
        return await self._run(self._repository.create_topic, topic)

    async def create_subscription_events_topic(self) -> None:
        """Hermes' topic of operational events (and its group ``hermes``), when the store does not have it yet."""
        topic = subscription_events_topic()
        with contextlib.suppress(GroupAlreadyExists):
            await self._run(self._repository.create_group, Group(topic.name.group))
        with contextlib.suppress(TopicAlreadyExists):
            await self.create_topic(topic)

    async def update_topic(self, name: TopicName, patch: dict[str, Any]) -> Topic:
        """Changes the fields ``patch`` names; of a stored topic that fails validation (``StoredEntityInvalid``),
        over what is stored, and the result must pass."""

        def from_base(base: Json) -> Topic:
            topic = api_json.topic_from_json({**base, **patch, "name": name.qualified})
            # what its publishers and subscribers rely on is kept (unless what is stored is no value of it)
            content_type = base.get("contentType", ContentType.JSON.value)
            if content_type in {c.value for c in ContentType} and topic.content_type.value != content_type:
                raise ValidationError("cannot be changed on an existing topic", "contentType")
            cloud_events = base.get("cloudEvents", False)
            if isinstance(cloud_events, bool) and topic.cloud_events is not cloud_events:
                raise ValidationError("cannot be changed on an existing topic", "cloudEvents")
            return topic

        repaired = False

        def repair(stored: Json) -> Topic:
            nonlocal repaired
            repaired = True
            return from_base(stored)

        updated = await self._run(
            self._repository.update_topic, name, lambda current: from_base(api_json.topic_to_json(current)), repair
        )
        if repaired:  # the reconciliation left its Kafka topic alone while it was invalid: created if missing
            await self._run(self._kafka_topics.reconcile, [updated])
        await self._run(self._kafka_topics.update, updated)
        return updated

    async def delete_topic(self, name: TopicName) -> None:
        """As Hermes: a topic whose subscriptions all have ``autoDeleteWithTopicEnabled`` takes them with it;
        any other subscription makes the topic not empty (403)."""
        protect_internal(name.qualified)
        _protect_subscription_events(name)
        subscriptions = await self._run(self._repository.list_subscriptions, name)
        if subscriptions and all(s.auto_delete_with_topic_enabled for s in subscriptions):
            for subscription in subscriptions:
                await self.delete_subscription(name, subscription.name)
        await self._run(self._repository.delete_topic, name)
        await self._run(self._admin.delete_topic, name.qualified)

    # --- subscriptions ---

    async def subscriptions(self, topic: TopicName | None = None) -> list[Subscription]:
        """Every subscription, or the topic's (an unknown topic is a 404)."""
        if topic is not None:
            await self._read(self._repository.get_topic, topic)
        return await self._read(self._repository.list_subscriptions, topic)

    async def stored_subscriptions(self, topic: TopicName) -> list[Subscription | StoredEntityInvalid]:
        """The topic's subscriptions, and those that fail validation (of a topic that may fail it too)."""
        with contextlib.suppress(StoredEntityInvalid):
            await self._read(self._repository.get_topic, topic)
        return await self._read(self._repository.stored_subscriptions, topic)

    async def subscription(self, topic: TopicName, name: str) -> Subscription:
        return await self._read(self._repository.get_subscription, topic, name)

    async def delete_subscription(self, topic: TopicName, name: str) -> None:
        """The subscription, with its retry topic (retryParking), dead letters and redrives."""
        await self._run(self._repository.delete_subscription, topic, name)
        subscription = SubscriptionName(topic, name)
        await self._run(dead_letters.delete_redrives, self._repository, subscription.qualified)
        for kafka_topic in (retry_topic(topic, name), dead_letter_topic(subscription)):  # retryParking, deadLetters
            try:
                await self._run(self._admin.delete_topic, kafka_topic)
            except HermesError as exc:  # the subscription is gone all the same
                log.warning("could not delete %s of %s: %s", kafka_topic, subscription.qualified, exc.message)

    async def create_subscription(
        self, subscription: Subscription, *, inflight_size_changes: bool = True
    ) -> Subscription:
        """Pins the new subscription's group at the topic's end, then stores it; as Hermes, only admins
        (``inflight_size_changes``) may set ``inflightSize``."""
        if not inflight_size_changes:
            _check_inflight_size(subscription)
        topic = await self._run(self._repository.get_topic, subscription.topic_name)
        if subscription.content_type.value == "AVRO" and topic.content_type is not ContentType.AVRO:
            raise ValidationError("AVRO is only available on AVRO topics", "contentType")
        if subscription.cloud_events_mode is not None and not topic.cloud_events:
            raise ValidationError("is for subscriptions of CloudEvents topics (cloudEvents: true)", "cloudEventsMode")
        try:
            await self._run(self._repository.get_subscription, subscription.topic_name, subscription.name)
        except SubscriptionNotFound:
            pass
        except StoredEntityInvalid:
            raise SubscriptionAlreadyExists(
                f"Subscription {subscription.qualified_name} already exists (as stored, invalid)"
            ) from None
        else:
            raise SubscriptionAlreadyExists(f"Subscription {subscription.qualified_name} already exists")
        # Only messages published from now on are delivered: pin the group at the current end offsets
        # before any consumer can join it (a group without offsets would start wherever it joins).
        end = await self._end_offsets(topic.qualified_name)
        await self._pin_offsets(subscription.consumer_group_id, topic.qualified_name, end)
        return await self._run(self._repository.create_subscription, subscription)

    async def _end_offsets(self, topic: str) -> dict[int, int]:
        """The end offsets of every partition. The metadata of a topic created a moment ago may not list its
        partitions yet: pinning none would leave the group to start wherever it joins."""
        deadline = asyncio.get_running_loop().time() + 10.0
        while True:
            end = await self._run(self._admin.end_offsets, topic)
            if end:
                return end
            if asyncio.get_running_loop().time() > deadline:
                raise ServiceUnavailable(f"the Kafka topic {topic} has no partitions yet; try again")
            await asyncio.sleep(0.1)

    async def _pin_offsets(self, group_id: str, topic: str, offsets: dict[int, int]) -> None:
        """Commits ``offsets`` for the group. A consumer of a just-deleted subscription of the same name may
        still be leaving the group, and the broker refuses commits from outside while it is a member."""
        deadline = asyncio.get_running_loop().time() + 15.0
        while True:
            try:
                await self._run(self._admin.commit_offsets, group_id, topic, offsets)
                return
            except (BrokerError, BrokerUnavailable) as exc:
                if asyncio.get_running_loop().time() > deadline:
                    raise ServiceUnavailable(f"the consumer group {group_id} is still busy; try again ({exc})") from exc
                await asyncio.sleep(0.5)

    async def update_subscription(
        self, topic: TopicName, name: str, patch: dict[str, Any], *, inflight_size_changes: bool = True
    ) -> Subscription:
        """Changes the fields ``patch`` names; of a stored subscription that fails validation
        (``StoredEntityInvalid``), over what is stored, and the result must pass. As Hermes, only admins
        (``inflight_size_changes``) may change a SERIAL subscription's ``inflightSize``."""

        def from_base(base: Json) -> Subscription:
            subscription = api_json.subscription_from_json(_merged_subscription(base, patch, topic, name), topic)
            if not inflight_size_changes:
                policy = base.get("subscriptionPolicy")
                _check_inflight_size(subscription, policy.get("inflightSize") if isinstance(policy, dict) else None)
            return subscription

        def change(current: Subscription) -> Subscription:
            return from_base(api_json.subscription_to_json(current, mask_secrets=False))

        return await self._run(self._repository.update_subscription, topic, name, change, from_base)

    async def generate_signing_secret(self, topic: TopicName, name: str) -> tuple[str, int]:
        """A new secret that signs from now on, and the epoch millis until which the current one still signs
        beside it (0 if there was none); a previous one still in its window stops at once."""
        secret = signing.generate_secret()  # outside ``change``, which a conflicting write may run again
        expires_at = 0

        def change(current: Subscription) -> Subscription:
            nonlocal expires_at
            kept = current.signing_secrets[:1]
            expires_at = int(time.time() * 1000 + self.settings.signing_secret_overlap * 1000) if kept else 0
            return dataclasses.replace(current, signing_secrets=(secret, *kept), previous_secret_expires_at=expires_at)

        await self._run(self._repository.update_subscription, topic, name, change)
        return secret, expires_at

    async def change_state(self, topic: TopicName, name: str, state: SubscriptionState) -> Subscription:
        return await self._run(
            self._repository.update_subscription, topic, name, lambda s: dataclasses.replace(s, state=state)
        )

    # --- OAuth providers ---

    async def oauth_providers(self) -> list[OAuthProvider]:
        return await self._read(self._repository.list_oauth_providers)

    async def oauth_provider(self, name: str) -> OAuthProvider:
        return await self._read(self._repository.get_oauth_provider, name)

    async def create_oauth_provider(self, provider: OAuthProvider) -> OAuthProvider:
        return await self._run(self._repository.create_oauth_provider, provider)

    async def update_oauth_provider(self, name: str, patch: Json) -> OAuthProvider:
        """Changes the fields sent; a ``clientSecret`` sent back masked keeps the stored one."""
        if patch.get("clientSecret") == api_json.SECRET_MASK:
            patch = {k: v for k, v in patch.items() if k != "clientSecret"}

        def change(current: OAuthProvider) -> OAuthProvider:
            merged = {**api_json.oauth_provider_to_json(current, mask_secrets=False), **patch, "name": name}
            return dataclasses.replace(api_json.oauth_provider_from_json(merged), name=name)

        return await self._run(self._repository.update_oauth_provider, name, change)

    async def delete_oauth_provider(self, name: str) -> None:
        await self._run(self._repository.delete_oauth_provider, name)

    # --- operational documents (mode, readiness, constraints, undelivered messages) ---

    async def document(self, namespace: str, key: str) -> Json | None:
        return await self._read(self._repository.get_document, namespace, key)

    async def documents(self, namespace: str) -> dict[str, Json]:
        return await self._read(self._repository.list_documents, namespace)

    async def put_document(self, namespace: str, key: str, document: Json) -> None:
        await self._run(self._repository.put_document, namespace, key, document)

    async def delete_document(self, namespace: str, key: str) -> None:
        await self._run(self._repository.delete_document, namespace, key)

    # --- monitoring and retransmission ---

    async def subscription_metrics(self, subscription: Subscription) -> Json:
        return await self._run(monitoring.subscription_metrics, self._repository, self._admin, subscription)

    async def topic_metrics(self, name: TopicName) -> Json:
        return await self._run(monitoring.topic_metrics, self._repository, self._admin, name)

    async def consumer_groups(self, subscription: Subscription) -> list[Json]:
        cluster = self.settings.cluster_name
        return await self._run(monitoring.consumer_groups, self._admin, subscription, cluster)

    async def inactive_topics(self) -> list[Json]:
        return await self._run(monitoring.inactive_topics, self._repository, self._admin, self.settings)

    async def retransmit(self, subscription: Subscription, moment: datetime, dry_run: bool) -> Json:
        cluster = self.settings.cluster_name
        return await self._run(
            retransmission.retransmit, self._repository, self._admin, subscription, moment, cluster, dry_run
        )

    # --- Kafka topics outside Hermes' ---

    async def kafka_topics_outside_hermes(self) -> list[str]:
        """Kafka topics no Hermes topic accounts for, apart from Kafka's own (``__consumer_offsets``) and
        Hermes' (``INTERNAL_TOPICS``, dead-letter topics)."""

        def find() -> list[str]:  # those of stored topics and subscriptions that fail validation are Hermes' too
            known = {t.qualified_name if isinstance(t, Topic) else t.name for t in self._repository.stored_topics()}
            known |= {
                s.retry_topic
                if isinstance(s, Subscription)
                else retry_topic(TopicName.parse(s.stored["topicName"]), s.name)
                for s in self._repository.stored_subscriptions(None)
            }
            names = self._admin.topic_names() - known
            return sorted(
                n for n in names if not n.startswith("_") and n not in INTERNAL_TOPICS and not is_dead_letter_topic(n)
            )

        return await self._run(find)

    async def delete_kafka_topic(self, name: str) -> None:
        protect_internal(name)
        await self._run(self._admin.delete_topic, name)

    # --- message tracking: what the pipeline's tracking job wrote ---

    async def trace(self, subscription: Subscription, message_id: str) -> list[Json]:
        topic, name = subscription.topic_name.qualified, subscription.name
        return await self._run(self._tracking.trace, topic, name, message_id)

    async def undelivered(self, subscription: Subscription) -> list[Json]:
        return await self._run(self._tracking.undelivered, subscription.topic_name.qualified, subscription.name)

    async def delivery_statistics(self, subscription: Subscription, since_ms: int) -> list[Json]:
        topic, name = subscription.topic_name.qualified, subscription.name
        return await self._run(self._tracking.statistics, topic, name, since_ms)

    async def tracking_progress(self, *, statistics: bool = False) -> str:
        """How far the tracking job's trace (or ``statistics``) query has read the tracking topic, so that an
        empty answer says whether nothing was tracked or the pipeline has not got there: ``not-started`` (no
        batch finished: the pipeline is starting, or not running), ``caught-up``, ``behind=<events not yet
        read>``, or ``unknown`` (the checkpoints are not a local directory)."""
        checkpoint = query_checkpoint(self.settings, STATISTICS_QUERY if statistics else TRACE_QUERY)
        if checkpoint is None:
            return "unknown"
        done = await self._run(read_offsets, checkpoint, TRACKING_TOPIC)
        if done is None:
            return "not-started"
        end = await self._run(self._admin.end_offsets, TRACKING_TOPIC)
        behind = sum(max(0, offset - done.get(partition, 0)) for partition, offset in end.items())
        return f"behind={behind}" if behind else "caught-up"

    # --- preview ---

    async def recent_messages(self, topic: Topic) -> list[bytes]:
        """The newest messages of the topic as Hermes' preview shows them (Avro as JSON), oldest first."""

        def read() -> list[bytes]:
            messages = preview.recent_messages(self._admin, topic)
            return [preview.as_json(self._repository, topic, m) for m in messages]

        return await self._run(read)

    async def message_at(self, topic: Topic, partition: int, offset: int) -> bytes | None:
        def read() -> bytes | None:
            found: Message | None = preview.message_at(self._admin, topic, partition, offset)
            return None if found is None else preview.as_json(self._repository, topic, found)

        return await self._run(read)

    # --- offline retransmission tasks ---

    async def create_task(self, body: Any) -> RetransmissionTask:
        return await self._run(offline_retransmission.create_task, self._repository, body)

    async def tasks(self) -> list[Json]:
        return await self._run(offline_retransmission.list_tasks, self._repository)

    async def delete_task(self, task_id: str) -> None:
        await self._run(offline_retransmission.delete_task, self._repository, task_id)

    # --- dead letters ---

    async def dead_letters(
        self, subscription: Subscription, limit: int, since: int | None, until: int | None
    ) -> list[DeadLetter]:
        return await self._run(dead_letters.list_dead_letters, self._admin, subscription, limit, since, until)

    async def dead_letter(self, subscription: Subscription, letter_id: str) -> DeadLetter:
        return await self._run(dead_letters.dead_letter, self._admin, subscription, letter_id)

    async def purge_dead_letters(self, subscription: Subscription) -> int:
        return await self._run(dead_letters.purge, self._admin, subscription)

    async def redrive(self, subscription: Subscription, body: Any) -> Redrive:
        return await self._run(dead_letters.create_redrive, self._repository, self._admin, subscription, body)

    async def redrives(self, subscription: Subscription) -> list[Redrive]:
        return await self._run(dead_letters.redrives, self._repository, subscription)
