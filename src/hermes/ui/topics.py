"""Groups and topics: the list (with search), creating and deleting groups, a topic's page (settings, schema,
publish rate, its subscriptions with their health, a test message), editing and deleting a topic."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from hermes.errors import ApiRefused
from hermes.ui import PREFIX
from hermes.ui.api import Api
from hermes.ui.app import api, redirect, render, segment, stored_invalid
from hermes.ui.forms import text, topic_body

routes = web.RouteTableDef()


async def _index(request: web.Request, error: ApiRefused | None = None, form: Any = None) -> web.Response:
    client = api(request)
    roles, groups, topics = await asyncio.gather(client.get("/roles"), client.get("/groups"), client.get("/topics"))
    search = request.query.get("q", "").strip().lower()
    listed = {group: [t for t in topics if t.rpartition(".")[0] == group] for group in groups}
    if search:
        listed = {
            group: [t for t in names if search in t.lower()]
            for group, names in listed.items()
            if search in group.lower() or any(search in t.lower() for t in names)
        }
    return render(
        request,
        "index.html",
        status=error.status if error else 200,
        groups=listed,
        search=request.query.get("q", ""),
        admin="admin" in roles,
        error=error,
        form=form or {},
    )


@routes.get("")
async def index_without_slash(_: web.Request) -> web.Response:
    raise web.HTTPFound(PREFIX + "/")


@routes.get("/")
async def index(request: web.Request) -> web.Response:
    return await _index(request)


@routes.post("/groups")
async def create_group(request: web.Request) -> web.Response:
    form = await request.post()
    name = text(form, "groupName")
    try:
        await api(request).call("POST", "/groups", {"groupName": name})
    except ApiRefused as refused:
        return await _index(request, refused, form)
    raise redirect(PREFIX + "/", f"Group {name} created")


@routes.post("/topics")
async def create_topic(request: web.Request) -> web.Response:
    form = await request.post()
    name = text(form, "name")
    body = {"name": name, "contentType": text(form, "contentType") or "JSON", **topic_body(form)}
    if schema := text(form, "schema"):
        body["schema"] = schema
    try:
        await api(request).call("POST", "/topics", body)
    except ApiRefused as refused:
        return await _index(request, refused, form)
    raise redirect(f"{PREFIX}/topics/{segment(name)}", f"Topic {name} created")


# what the page shows of a topic, for one stored without it (its JSON as stored, which fails validation)
_SHOWN_WHEN_MISSING = {
    "description": "",
    "owner": {"id": ""},
    "contentType": "JSON",
    "ack": "LEADER",
    "retentionTime": {"duration": "", "retentionUnit": "DAYS"},
    "maxMessageSize": "",
    "trackingEnabled": False,
    "offlineStorage": {"enabled": False, "retentionTime": {"duration": "", "infinite": False}},
}


async def _nothing() -> None:
    return None


async def _health(client: Api, path: str, subscription: dict[str, Any]) -> dict[str, Any]:
    """The subscription's health; one stored that fails validation has none: INVALID, and why."""
    if (invalid := subscription.get("invalid")) is not None:
        return {"status": "INVALID", "problems": [{"description": invalid["message"]}]}
    health: dict[str, Any] = await client.get(f"{path}/health")
    return health


async def topic_view(
    request: web.Request, error: ApiRefused | None = None, published: str | None = None
) -> web.Response:
    client = api(request)
    name = segment(request.match_info["topic"])
    topic = await client.get(f"/topics/{name}")
    if (invalid := stored_invalid(topic)) is not None:  # stored before a rule refused it: the form corrects it
        topic, error = {**_SHOWN_WHEN_MISSING, **topic}, error or invalid
    roles, metrics, names, tasks = await asyncio.gather(
        client.get(f"/roles/topics/{name}"),
        client.get(f"/topics/{name}/metrics") if invalid is None else _nothing(),
        client.get(f"/topics/{name}/subscriptions"),
        client.get(f"/offline-retransmission/topics/{name}/tasks"),
    )
    paths = [f"/topics/{name}/subscriptions/{segment(s)}" for s in names]
    states = await asyncio.gather(*(client.get(path) for path in paths))
    healths = await asyncio.gather(*(_health(client, path, d) for path, d in zip(paths, states, strict=True)))
    subscriptions = [
        {
            "name": s,
            "health": h["status"],
            "problems": h.get("problems", []),
            "state": d.get("state", ""),
            "endpoint": d.get("endpoint", ""),
        }
        for s, h, d in zip(names, healths, states, strict=True)
    ]
    return render(
        request,
        "topic.html",
        status=error.status if error else 200,
        topic=topic,
        metrics=metrics,
        subscriptions=subscriptions,
        tasks=tasks,
        owner="topicOwner" in roles or "admin" in roles,
        admin="admin" in roles,
        error=error,
        published=published,
    )


@routes.get("/topics/{topic}")
async def topic_page(request: web.Request) -> web.Response:
    return await topic_view(request)


@routes.post("/topics/{topic}")
async def update_topic(request: web.Request) -> web.Response:
    name = segment(request.match_info["topic"])
    form = await request.post()
    client = api(request)
    try:
        await client.call("PUT", f"/topics/{name}", topic_body(form))
        schema = text(form, "schema")
        if schema and schema != text(form, "previousSchema"):  # each save of a schema is a new version
            await client.call("POST", f"/topics/{name}/schema", raw=schema)
    except ApiRefused as refused:
        return await topic_view(request, refused)
    raise redirect(f"{PREFIX}/topics/{name}", "Topic saved")


@routes.post("/topics/{topic}/publish")
async def publish(request: web.Request) -> web.Response:
    name = segment(request.match_info["topic"])
    form = await request.post()
    content_type = "avro/json" if text(form, "contentType") == "AVRO" else "application/json"
    try:
        message_id = await api(request).publish(name, str(form.get("body", "")), content_type)
    except ApiRefused as refused:
        return await topic_view(request, refused)
    return await topic_view(request, published=message_id)


@routes.get("/groups/{group}/delete")
@routes.get("/topics/{topic}/delete")
async def confirm_delete(request: web.Request) -> web.Response:
    what, name = next(iter(request.match_info.items()))
    back = PREFIX + "/" if what == "group" else request.path.removesuffix("/delete")
    return render(request, "confirm.html", what=what, name=name, action=request.path, back=back)


@routes.post("/groups/{group}/delete")
async def delete_group(request: web.Request) -> web.Response:
    name = segment(request.match_info["group"])
    await api(request).call("DELETE", f"/groups/{name}")
    raise redirect(PREFIX + "/", f"Group {name} deleted")


@routes.post("/topics/{topic}/delete")
async def delete_topic(request: web.Request) -> web.Response:
    name = segment(request.match_info["topic"])
    await api(request).call("DELETE", f"/topics/{name}")
    raise redirect(PREFIX + "/", f"Topic {name} deleted")
