"""What the management API does, apart from HTTP: repository changes together with their Kafka side."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from hermes.broker.admin import BrokerAdmin
from hermes.broker.topics import KafkaTopics
from hermes.config import Settings
from hermes.domain import api_json
from hermes.domain.names import TopicName
from hermes.domain.subscription import Subscription, SubscriptionState
from hermes.domain.topic import ContentType, Group, Topic
from hermes.errors import (
    BrokerError,
    BrokerUnavailable,
    ServiceUnavailable,
    SubscriptionAlreadyExists,
    SubscriptionNotFound,
    TopicAlreadyExists,
    TopicNotFound,
    ValidationError,
)
from hermes.metadata.repository import MetadataRepository

log = logging.getLogger(__name__)


class ManagementService:
    def __init__(self, settings: Settings, repository: MetadataRepository, admin: BrokerAdmin) -> None:
        self.settings = settings
        self.repository = repository
        self.admin = admin
        self.kafka_topics = KafkaTopics(admin, settings.topic_partitions)

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    # --- groups ---

    async def create_group(self, name: str) -> Group:
        return await self._run(self.repository.create_group, Group(name))  # type: ignore[no-any-return]

    # --- topics ---

    async def create_topic(self, topic: Topic) -> Topic:
        await self._run(self.repository.get_group, topic.name.group)
        try:
            await self._run(self.repository.get_topic, topic.name)
            raise TopicAlreadyExists(f"Topic {topic.qualified_name} already exists")
        except TopicNotFound:
            pass
        await self._run(self.kafka_topics.create, topic)
        return await self._run(self.repository.create_topic, topic)  # type: ignore[no-any-return]

    async def update_topic(self, name: TopicName, patch: dict[str, Any]) -> Topic:
        def change(current: Topic) -> Topic:
            merged = {**api_json.topic_to_json(current), **patch, "name": name.qualified}
            updated = api_json.topic_from_json(merged)
            if updated.content_type is not current.content_type:
                raise ValidationError("cannot be changed on an existing topic", "contentType")
            return updated

        updated: Topic = await self._run(self.repository.update_topic, name, change)
        await self._run(self.kafka_topics.update, updated)
        return updated

    async def delete_topic(self, name: TopicName) -> None:
        """As Hermes: a topic whose subscriptions all have ``autoDeleteWithTopicEnabled`` takes them with it;
        any other subscription makes the topic not empty (403)."""
        subscriptions: list[Subscription] = await self._run(self.repository.list_subscriptions, name)
        if subscriptions and all(s.auto_delete_with_topic_enabled for s in subscriptions):
            for subscription in subscriptions:
                await self._run(self.repository.delete_subscription, name, subscription.name)
        await self._run(self.repository.delete_topic, name)
        await self._run(self.admin.delete_topic, name.qualified)

    # --- subscriptions ---

    async def create_subscription(self, subscription: Subscription) -> Subscription:
        topic: Topic = await self._run(self.repository.get_topic, subscription.topic_name)
        if subscription.content_type.value == "AVRO" and topic.content_type is not ContentType.AVRO:
            raise ValidationError("AVRO is only available on AVRO topics", "contentType")
        try:
            await self._run(self.repository.get_subscription, subscription.topic_name, subscription.name)
        except SubscriptionNotFound:
            pass
        else:
            raise SubscriptionAlreadyExists(f"Subscription {subscription.qualified_name} already exists")
        # Only messages published from now on are delivered: pin the group at the current end offsets
        # before any consumer can join it (a group without offsets would start wherever it joins).
        end = await self._end_offsets(topic.qualified_name)
        await self._pin_offsets(subscription.consumer_group_id, topic.qualified_name, end)
        return await self._run(self.repository.create_subscription, subscription)  # type: ignore[no-any-return]

    async def _end_offsets(self, topic: str) -> dict[int, int]:
        """The end offsets of every partition. The metadata of a topic created a moment ago may not list its
        partitions yet: pinning none would leave the group to start wherever it joins."""
        deadline = asyncio.get_running_loop().time() + 10.0
        while True:
            end: dict[int, int] = await asyncio.to_thread(self.admin.end_offsets, topic)
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
                await self._run(self.admin.commit_offsets, group_id, topic, offsets)
                return
            except (BrokerError, BrokerUnavailable) as exc:
                if asyncio.get_running_loop().time() > deadline:
                    raise ServiceUnavailable(f"the consumer group {group_id} is still busy; try again ({exc})") from exc
                await asyncio.sleep(0.5)

    async def update_subscription(self, topic: TopicName, name: str, patch: dict[str, Any]) -> Subscription:
        def change(current: Subscription) -> Subscription:
            base = api_json.subscription_to_json(current, mask_secrets=False)
            edit = dict(patch)
            if edit.get("endpoint") == current.endpoint.masked:
                del edit["endpoint"]  # the masked endpoint sent back unchanged keeps the stored credentials
            oauth = edit.get("oAuthPolicy")
            if isinstance(oauth, dict) and oauth.get("password") == api_json.SECRET_MASK and current.oauth_policy:
                edit["oAuthPolicy"] = {**oauth, "password": current.oauth_policy.password}  # likewise the password
            secrets = edit.get("signingSecrets")
            if isinstance(secrets, list) and api_json.SECRET_MASK in secrets:  # masks keep stored secrets, in order
                stored = iter(current.signing_secrets)
                edit["signingSecrets"] = [next(stored, s) if s == api_json.SECRET_MASK else s for s in secrets]
            if edit.get("state") == SubscriptionState.PENDING:
                del edit["state"]  # as Hermes: only consumers make a subscription leave PENDING, nobody enters it
            if "trackingEnabled" in edit and "trackingMode" not in edit:
                del base["trackingMode"]  # the older shape decides tracking
            if "supportTeam" in edit and "owner" not in edit:
                del base["owner"]
            merged = {**base, **edit, "name": name, "topicName": topic.qualified}
            policy = edit.get("subscriptionPolicy")
            if isinstance(policy, dict) and edit.get("deliveryType", current.delivery_type.value) == (
                current.delivery_type.value
            ):
                merged["subscriptionPolicy"] = {**base["subscriptionPolicy"], **policy}
            return api_json.subscription_from_json(merged, topic)

        return await self._run(self.repository.update_subscription, topic, name, change)  # type: ignore[no-any-return]

    async def change_state(self, topic: TopicName, name: str, state: SubscriptionState) -> Subscription:
        return await self._run(  # type: ignore[no-any-return]
            self.repository.update_subscription, topic, name, lambda s: dataclasses.replace(s, state=state)
        )
