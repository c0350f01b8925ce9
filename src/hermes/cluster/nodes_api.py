"""``GET /consumers/nodes`` and ``GET /frontends/nodes`` of the management API: the cluster's live members, their
load and (consumer nodes) their subscriptions. Our extension of Hermes' API; both are empty lists without
distributed mode (the SQLite store: every subscription runs in the one consumers process)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aiohttp import web

from hermes.http.server import json_response

if TYPE_CHECKING:
    from hermes.cluster.registry import ClusterStore

CLUSTER: web.AppKey[ClusterStore] = web.AppKey("cluster")
routes = web.RouteTableDef()


def _consumer_nodes(store: ClusterStore) -> list[dict[str, Any]]:
    from hermes.cluster.registry import CONSUMERS

    members = store.members(CONSUMERS)
    assignment, _ = store.read_assignment()
    coordinator = store.coordinator()
    return [
        {
            "nodeId": node,
            "address": report.get("address"),
            "coordinator": node == coordinator,
            "load": report.get("load", {}),
            "subscriptions": sorted(assignment.of_node(node)),
            "standbyFor": sorted(s for s, nodes in assignment.standbys.items() if node in nodes),
            "running": report.get("running", []),
            "deliveriesPerSecond": report.get("deliveriesPerSecond", {}),
            "updatedAt": report.get("updatedAt"),
        }
        for node, report in sorted(members.items())
    ]


def _frontend_nodes(store: ClusterStore) -> list[dict[str, Any]]:
    from hermes.cluster.registry import FRONTENDS

    return [{"process": name, **report} for name, report in sorted(store.members(FRONTENDS).items())]


@routes.get("/consumers/nodes")
async def consumer_nodes(request: web.Request) -> web.Response:
    store = request.app.get(CLUSTER)
    return json_response(await asyncio.to_thread(_consumer_nodes, store) if store is not None else [])


@routes.get("/frontends/nodes")
async def frontend_nodes(request: web.Request) -> web.Response:
    store = request.app.get(CLUSTER)
    return json_response(await asyncio.to_thread(_frontend_nodes, store) if store is not None else [])
