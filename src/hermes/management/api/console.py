"""``GET /console``: the Hermes console's configuration document, pointing the console at this installation
and offering only what it has (no OAuth login, no dashboards, costs or offline clients; the Plaintext owner
source; JSON and AVRO topics)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from hermes.domain.subscription import SerialSubscriptionPolicy
from hermes.domain.topic import RetentionUnit
from hermes.http.server import json_response
from hermes.management.api.owners import PLAINTEXT
from hermes.management.context import SERVICE

routes = web.RouteTableDef()

_DOCS = "https://hermes-pubsub.readthedocs.io/"


def _choices(*values: str) -> list[dict[str, str]]:
    return [{"value": v, "label": v} for v in values]


@routes.get("/console")
async def configuration(request: web.Request) -> web.Response:
    settings = request.app[SERVICE].settings
    here = f"{request.scheme}://{request.host}"
    serial = SerialSubscriptionPolicy()
    document: dict[str, Any] = {
        "console": {
            "title": "Hermes console",
            "contactLink": "",
            "environmentName": settings.cluster_name,
            "criticalEnvironment": False,
            "knownEnvironments": [{"name": settings.cluster_name, "url": here}],
        },
        "dashboard": {"metrics": "", "docs": _DOCS},
        "metrics": {"fetchingDashboardUrlEnabled": False},
        "auth": {
            "oauth": {
                "enabled": False,
                "url": "",
                "authorizationEndpoint": "",
                "tokenEndpoint": "",
                "clientId": "",
                "scope": "",
            }
        },
        "owner": {"sources": [{"name": PLAINTEXT, "placeholder": "the owning team's name"}]},
        "topic": {
            "messagePreviewEnabled": True,
            "offlineClientsEnabled": False,
            "defaults": {
                "ack": "LEADER",
                "contentType": "JSON",
                "retentionTime": {"duration": 1, "retentionUnit": "DAYS"},
                "offlineStorage": {"enabled": False, "retentionTime": {"duration": 60, "retentionUnit": "DAYS"}},
            },
            "contentTypes": _choices("JSON", "AVRO"),
            "readOnlyModeEnabled": False,  # the console would refuse to edit topics
            "retentionUnits": _choices(*(u.value for u in RetentionUnit)),
            "offlineRetransmission": {
                "enabled": True,
                "description": "Republish a time range of a topic's offline storage to a topic.",
                "fromViewDocsUrl": _DOCS,
                "globalTaskQueueUrl": f"{here}/offline-retransmission/tasks",
                "monitoringDocsUrl": _DOCS,
            },
        },
        "subscription": {
            "endpointAddressResolverMetadata": {},
            # Hermes' value: the console warns from it on, so the default timeout (1000) gets no warning
            "requestTimeoutWarningThreshold": 1001,
            "defaults": {
                "subscriptionPolicy": {"messageTtl": serial.message_ttl, "requestTimeout": serial.request_timeout},
                "deliveryType": "SERIAL",
            },
            "deliveryTypes": _choices("SERIAL", "BATCH"),
        },
        "consistency": {"maxGroupBatchSize": 10},
        "group": {"nonAdminCreationEnabled": True},
        "costs": {
            "enabled": False,
            "globalDetailsUrl": "",
            "topicIframeUrl": "",
            "topicDetailsUrl": "",
            "subscriptionIframeUrl": "",
            "subscriptionDetailsUrl": "",
        },
    }
    return json_response(document)
