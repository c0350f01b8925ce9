"""Who may call each management endpoint (docs/security.md shows this table, and a test walks it). Rules use
Hermes' role names: ``any`` is every authenticated caller, ``topicOwner`` and ``subscriptionOwner`` the
callers whose owner ids include the topic's or subscription's ``owner.id``; admins may do everything."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from hermes.domain.names import TopicName
from hermes.domain.subscription import Subscription
from hermes.domain.topic import Topic
from hermes.errors import (
    Forbidden,
    FormattingError,
    HermesError,
    PayloadTooLarge,
    StoredEntityInvalid,
    TooManyFailedLogins,
    Unauthorized,
)
from hermes.http.server import json_response, read_json
from hermes.management.context import SERVICE
from hermes.security.authenticator import ANONYMOUS, OPEN, Principal, challenge
from hermes.security.setup import Security
from hermes.ui import PREFIX

SECURITY = web.AppKey("security", Security)
_PRINCIPAL = web.RequestKey("principal", Principal)


class Rule(StrEnum):
    PUBLIC = "public"  # no credentials needed
    ANY = "any"
    ADMIN = "admin"
    TOPIC_OWNER = "topicOwner"
    SUBSCRIPTION_OWNER = "subscriptionOwner"
    OWNER_IN_BODY = "owner in body"  # the body's owner.id: you create what you will own
    SUBSCRIBER = "owner in body; topicOwner if subscribingRestricted"


_T, _S = "/topics/{topic}", "/topics/{topic}/subscriptions/{subscription}"
# (method, path) -> rule; every GET not named here is ``any``.
RULES: dict[tuple[str, str], Rule] = {
    **{("GET", path): Rule.PUBLIC for path in ("/status/health", "/status/ready", "/openapi.json", "/console")},
    **{
        ("POST", path): Rule.ANY
        for path in (
            "/query/groups",
            "/query/topics",
            "/query/subscriptions",
            "/query/topics/metrics",
            "/query/subscriptions/metrics",
            "/topics/query",
            f"{_T}/subscriptions/query",
            "/filters/{topic}",
        )
    },
    **{
        ("GET", path): Rule.TOPIC_OWNER  # message contents
        for path in (
            f"{_T}/preview",
            f"{_T}/preview/{{idx}}",
            f"{_T}/preview/cluster/{{cluster}}/partition/{{partition}}/offset/{{offset}}",
        )
    },
    **{
        ("GET", path): Rule.SUBSCRIPTION_OWNER  # message contents
        for path in (f"{_S}/undelivered", f"{_S}/undelivered/last", f"{_S}/events/{{messageId}}/trace")
    },
    **{  # message contents, and the subscription's own messages
        (method, path): Rule.SUBSCRIPTION_OWNER
        for method, path in (
            ("GET", f"{_S}/dead-letters"),
            ("GET", f"{_S}/dead-letters/{{deadLetterId}}"),
            ("DELETE", f"{_S}/dead-letters"),
            ("POST", f"{_S}/dead-letters/redrive"),
        )
    },
    ("POST", "/groups"): Rule.ADMIN,
    ("PUT", "/groups/{group}"): Rule.ADMIN,
    ("DELETE", "/groups/{group}"): Rule.ADMIN,
    ("POST", "/topics"): Rule.OWNER_IN_BODY,
    ("PUT", _T): Rule.TOPIC_OWNER,
    ("DELETE", _T): Rule.TOPIC_OWNER,
    ("POST", f"{_T}/schema"): Rule.TOPIC_OWNER,
    ("DELETE", f"{_T}/schema"): Rule.TOPIC_OWNER,
    ("POST", f"{_T}/subscriptions"): Rule.SUBSCRIBER,
    ("PUT", _S): Rule.SUBSCRIPTION_OWNER,
    ("DELETE", _S): Rule.SUBSCRIPTION_OWNER,
    ("POST", f"{_S}/state"): Rule.SUBSCRIPTION_OWNER,
    ("PUT", f"{_S}/state"): Rule.SUBSCRIPTION_OWNER,
    ("POST", f"{_S}/retransmission"): Rule.SUBSCRIPTION_OWNER,
    ("PUT", f"{_S}/retransmission"): Rule.SUBSCRIPTION_OWNER,
    ("POST", f"{_S}/signing-secret"): Rule.SUBSCRIPTION_OWNER,
    ("POST", "/oauth/providers"): Rule.ADMIN,
    ("PUT", "/oauth/providers/{provider}"): Rule.ADMIN,
    ("DELETE", "/oauth/providers/{provider}"): Rule.ADMIN,
    ("POST", "/offline-retransmission/tasks"): Rule.ADMIN,
    ("DELETE", "/offline-retransmission/tasks/{taskId}"): Rule.ADMIN,
    ("POST", "/mode"): Rule.ADMIN,
    ("POST", "/readiness/datacenters/{datacenter}"): Rule.ADMIN,
    ("DELETE", "/consistency/inconsistencies/topics"): Rule.ADMIN,
    ("POST", "/consistency/sync/groups/{group}"): Rule.ADMIN,
    ("POST", "/consistency/sync/topics/{topic}"): Rule.ADMIN,
    ("POST", f"/consistency/sync{_S}"): Rule.ADMIN,
    ("PUT", "/workload-constraints/topic"): Rule.ADMIN,
    ("PUT", "/workload-constraints/subscription"): Rule.ADMIN,
    ("DELETE", "/workload-constraints/topic/{topic}"): Rule.ADMIN,
    ("DELETE", "/workload-constraints/subscription/{topic}/{subscription}"): Rule.ADMIN,
}


def rule_of(method: str, path: str) -> Rule:
    method = "GET" if method == "HEAD" else method
    if path == PREFIX or path.startswith(PREFIX + "/"):
        return Rule.PUBLIC  # the console's pages: each API call they make is checked with the user's credentials
    return RULES.get((method, path), Rule.ANY if method == "GET" else Rule.ADMIN)  # unlisted changes: admins


def principal(request: web.Request) -> Principal:
    """The caller: the authenticated one; ``OPEN`` while authentication is off; ``ANONYMOUS`` on a public route."""
    caller: Principal = request.get(_PRINCIPAL, ANONYMOUS)
    return caller


@web.middleware
async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.content_length is not None and request.content_length > request.app._client_max_size:
        raise PayloadTooLarge(f"the body is larger than {request.app._client_max_size} bytes")  # before reading it
    authenticator = request.app[SECURITY].authenticator
    resource = request.match_info.route.resource
    rule = rule_of(request.method, resource.canonical) if resource is not None else Rule.ANY
    if authenticator is None:
        request[_PRINCIPAL] = OPEN
        return await handler(request)
    if rule is Rule.PUBLIC:
        return await handler(request)
    try:
        caller = await authenticator.authenticate(request.headers.get("Authorization"), request.remote or "")
    except (Unauthorized, TooManyFailedLogins) as exc:
        return json_response(exc.to_body(), status=exc.status, headers=challenge(exc, authenticator.methods))
    request[_PRINCIPAL] = caller
    if not caller.is_admin and not await _allowed(request, rule, caller):
        raise Forbidden(f"{caller.name} may not {request.method} {request.path} (needs: {rule.value})")
    return await handler(request)


async def _allowed(request: web.Request, rule: Rule, caller: Principal) -> bool:
    if rule is Rule.ANY:
        return True
    if rule is Rule.ADMIN:
        return False
    body = await _body(request)
    if rule is Rule.OWNER_IN_BODY:
        return caller.owns(_owner_id(body))
    topic = await _topic(request)
    if topic is None:  # let the handler answer 400 or 404
        return True
    if isinstance(topic, StoredEntityInvalid):  # its owner as stored, who may correct it
        topic_owner, restricted = _owner_id(topic.stored), topic.stored.get("subscribingRestricted") is not False
    else:
        topic_owner, restricted = topic.owner.id, topic.subscribing_restricted
    if rule is Rule.SUBSCRIBER:
        return caller.owns(_owner_id(body)) and (not restricted or caller.owns(topic_owner))
    if rule is Rule.TOPIC_OWNER:
        owner = topic_owner
    else:
        subscription = await _subscription(request, TopicName.parse(request.match_info["topic"]))
        if subscription is None:
            return True
        owner = subscription.owner.id if isinstance(subscription, Subscription) else _owner_id(subscription.stored)
    # a change of owner must hand the thing to owner ids the caller also holds
    return caller.owns(owner) and ("owner" not in body or caller.owns(_owner_id(body)))


async def _body(request: web.Request) -> dict[str, Any]:
    if request.method not in ("POST", "PUT") or not request.can_read_body:
        return {}
    try:
        body = await read_json(request)  # aiohttp keeps the bytes: the handler reads them again
    except FormattingError:
        return {}
    return body if isinstance(body, dict) else {}


def _owner_id(body: dict[str, Any]) -> str:
    owner = body.get("owner")
    return str(owner.get("id", "")) if isinstance(owner, dict) else ""


async def _topic(request: web.Request) -> Topic | StoredEntityInvalid | None:
    try:
        name = TopicName.parse(request.match_info["topic"], "topicName")
        return await request.app[SERVICE].topic(name)
    except StoredEntityInvalid as invalid:
        return invalid
    except (HermesError, KeyError):
        return None


async def _subscription(request: web.Request, topic: TopicName) -> Subscription | StoredEntityInvalid | None:
    name = request.match_info.get("subscription", "")
    try:
        return await request.app[SERVICE].subscription(topic, name)
    except StoredEntityInvalid as invalid:
        return invalid
    except HermesError:
        return None
