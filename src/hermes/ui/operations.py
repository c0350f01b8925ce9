"""Pages beyond topics: OAuth providers, the consumer nodes of distributed mode and their load, and the
offline retransmission tasks."""

from __future__ import annotations

import asyncio

from aiohttp import web

from hermes.errors import ApiRefused
from hermes.ui import PREFIX
from hermes.ui.app import api, redirect, render, segment
from hermes.ui.forms import text

routes = web.RouteTableDef()


async def _providers(request: web.Request, error: ApiRefused | None = None) -> web.Response:
    client = api(request)
    roles, names = await asyncio.gather(client.get("/roles"), client.get("/oauth/providers"))
    providers = await asyncio.gather(*(client.get(f"/oauth/providers/{segment(name)}") for name in names))
    return render(
        request,
        "oauth.html",
        status=error.status if error else 200,
        providers=providers,
        admin="admin" in roles,
        error=error,
    )


@routes.get("/oauth-providers")
async def providers_page(request: web.Request) -> web.Response:
    return await _providers(request)


@routes.post("/oauth-providers")
async def create_provider(request: web.Request) -> web.Response:
    form = await request.post()
    body = {name: text(form, name) for name in ("name", "tokenEndpoint", "clientId", "clientSecret")}
    try:
        await api(request).call("POST", "/oauth/providers", body)
    except ApiRefused as refused:
        return await _providers(request, refused)
    raise redirect(PREFIX + "/oauth-providers", f"OAuth provider {body['name']} created")


@routes.post("/oauth-providers/{provider}/delete")
async def delete_provider(request: web.Request) -> web.Response:
    name = segment(request.match_info["provider"])
    await api(request).call("DELETE", f"/oauth/providers/{name}")
    raise redirect(PREFIX + "/oauth-providers", f"OAuth provider {name} deleted")


@routes.get("/consumer-nodes")
async def consumer_nodes(request: web.Request) -> web.Response:
    client = api(request)
    nodes, frontends = await asyncio.gather(client.get("/consumers/nodes"), client.get("/frontends/nodes"))
    return render(request, "nodes.html", nodes=nodes, frontends=frontends)


async def _tasks(request: web.Request, error: ApiRefused | None = None) -> web.Response:
    client = api(request)
    roles, tasks = await asyncio.gather(client.get("/roles"), client.get("/offline-retransmission/tasks"))
    return render(
        request, "tasks.html", status=error.status if error else 200, tasks=tasks, admin="admin" in roles, error=error
    )


@routes.get("/offline-retransmission")
async def tasks_page(request: web.Request) -> web.Response:
    return await _tasks(request)


@routes.post("/offline-retransmission")
async def create_task(request: web.Request) -> web.Response:
    form = await request.post()
    body = {name: text(form, name) for name in ("sourceTopic", "targetTopic", "startTimestamp", "endTimestamp")}
    try:
        await api(request).call("POST", "/offline-retransmission/tasks", {"type": "TOPIC", **body})
    except ApiRefused as refused:
        return await _tasks(request, refused)
    raise redirect(PREFIX + "/offline-retransmission", "Offline retransmission task created")


@routes.post("/offline-retransmission/{task}/delete")
async def delete_task(request: web.Request) -> web.Response:
    task = segment(request.match_info["task"])
    await api(request).call("DELETE", f"/offline-retransmission/tasks/{task}")
    raise redirect(PREFIX + "/offline-retransmission", "Offline retransmission task deleted")
