"""Hermes' multi-datacenter routes, answered for the one datacenter there is (the Kafka cluster,
``--cluster-name``): readiness, and ``/consistency/*``, which compares the metadata of datacenters with one
another and with Kafka. Groups, topics and subscriptions are never inconsistent between datacenters and a sync
has nothing to do; between the metadata store and Kafka, Kafka topics that no Hermes topic accounts for are
listed, and can be removed."""

from __future__ import annotations

from aiohttp import web

from hermes.domain.names import TopicName, validate_simple_name
from hermes.errors import NotFoundError, TopicNotFound, ValidationError
from hermes.http.server import json_response
from hermes.management.api.bodies import ignored_fields_header, read_object
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE
from hermes.management.services import ManagementService, protect_internal
from hermes.metadata.documents import DATACENTER_READINESS

routes = web.RouteTableDef()


def the_datacenter(service: ManagementService, name: str, kind: str = "datacenter") -> str:
    """``name`` when it names the one datacenter (Hermes' brokers cluster), a 404 otherwise."""
    if name != service.settings.cluster_name:
        raise NotFoundError(f"No {kind} {name}: the one {kind} is {service.settings.cluster_name}")
    return name


# --- readiness ---


@routes.get("/readiness/datacenters")
async def list_readiness(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = service.settings.cluster_name
    document = await service.document(DATACENTER_READINESS, name)
    ready = document is None or bool(document.get("isReady", True))
    return json_response([{"datacenter": name, "status": "READY" if ready else "NOT_READY"}])


@routes.post("/readiness/datacenters/{datacenter}")
async def set_readiness(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name = the_datacenter(service, request.match_info["datacenter"])
    body = await read_object(request)
    if not isinstance(body.get("isReady"), bool):
        raise ValidationError("must be true or false", "isReady")
    await service.put_document(DATACENTER_READINESS, name, {"isReady": body["isReady"]})
    return web.Response(status=202, headers=ignored_fields_header(request, body, "Readiness"))


# --- consistency ---


@routes.get("/consistency/groups")
async def list_groups(request: web.Request) -> web.Response:
    return json_response(sorted(g.name for g in await request.app[SERVICE].groups()))


@routes.get("/consistency/inconsistencies/groups")
async def inconsistent_groups(_: web.Request) -> web.Response:
    return json_response([])


@routes.post("/consistency/sync/groups/{group}")
async def sync_group(request: web.Request) -> web.Response:
    await request.app[SERVICE].group(request.match_info["group"])
    return web.Response(status=200)


@routes.post("/consistency/sync/topics/{topic}")
async def sync_topic(request: web.Request) -> web.Response:
    await request.app[SERVICE].topic(topic_name(request))
    return web.Response(status=200)


@routes.post("/consistency/sync/topics/{topic}/subscriptions/{subscription}")
async def sync_subscription(request: web.Request) -> web.Response:
    name = validate_simple_name(request.match_info["subscription"], "subscriptionName")
    await request.app[SERVICE].subscription(topic_name(request), name)
    return web.Response(status=200)


@routes.get("/consistency/inconsistencies/topics")
async def inconsistent_topics(request: web.Request) -> web.Response:
    return json_response(await request.app[SERVICE].kafka_topics_outside_hermes())


@routes.delete("/consistency/inconsistencies/topics")
async def remove_inconsistent_topic(request: web.Request) -> web.Response:
    """Deletes a Kafka topic that no Hermes topic accounts for (``?topicName=``); a Hermes topic's Kafka
    topic is deleted with the Hermes topic, never here; Hermes' own topics never (403)."""
    service = request.app[SERVICE]
    name = request.query.get("topicName", "")
    protect_internal(name)
    if name not in await service.kafka_topics_outside_hermes():
        try:
            await service.topic(TopicName.parse(name, "topicName"))
        except (TopicNotFound, ValidationError):
            raise TopicNotFound(f"No Kafka topic {name!r} outside Hermes' topics") from None
        raise ValidationError(f"{name} is a Hermes topic: delete it with DELETE /topics/{name}", "topicName")
    await service.delete_kafka_topic(name)
    return web.Response(status=200)
