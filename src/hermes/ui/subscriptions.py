"""A subscription: creating one, its page (settings, state, health, live metrics and circuit breaker, last
undelivered message, retransmission, a message's trace, the topic's offline retransmission tasks), editing and
deleting it."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from hermes.errors import ApiRefused
from hermes.ui import PREFIX
from hermes.ui.app import api, console, markup, redirect, render, segment, stored_invalid
from hermes.ui.charts import CHARTS, svg
from hermes.ui.forms import subscription_body, text
from hermes.ui.topics import topic_view

routes = web.RouteTableDef()

_S = "/topics/{topic}/subscriptions/{subscription}"


def _names(request: web.Request) -> tuple[str, str]:
    return segment(request.match_info["topic"]), segment(request.match_info["subscription"])


@routes.post("/topics/{topic}/subscriptions")
async def create_subscription(request: web.Request) -> web.Response:
    topic = segment(request.match_info["topic"])
    form = await request.post()
    name = text(form, "name")
    try:
        await api(request).call(
            "POST", f"/topics/{topic}/subscriptions", {"name": name, "topicName": topic, **subscription_body(form)}
        )
    except ApiRefused as refused:
        return await topic_view(request, refused)
    raise redirect(f"{PREFIX}/topics/{topic}/subscriptions/{segment(name)}", f"Subscription {name} created")


# what the page shows of a subscription, for one stored without it (its JSON as stored, which fails validation)
_SHOWN_WHEN_MISSING = {
    "state": "",
    "endpoint": "",
    "description": "",
    "owner": {"id": ""},
    "contentType": "JSON",
    "deliveryType": "SERIAL",
    "mode": "ANYCAST",
    "trackingMode": "trackingOff",
    "subscriptionPolicy": {},
}


async def _page(request: web.Request, error: ApiRefused | None = None, **shown: Any) -> web.Response:
    client = api(request)
    topic, name = _names(request)
    base = f"/topics/{topic}/subscriptions/{name}"
    subscription = await client.get(base)
    roles, tasks = await asyncio.gather(
        client.get(f"/roles{base}"), client.get(f"/offline-retransmission/topics/{topic}/tasks")
    )
    owner = "subscriptionOwner" in roles or "admin" in roles
    if (invalid := stored_invalid(subscription)) is not None:  # stored before a rule refused it: the form corrects it
        subscription, error = {**_SHOWN_WHEN_MISSING, **subscription}, error or invalid
        shown = {**shown, "metrics": None}
    undelivered = await client.get_or_none(f"{base}/undelivered/last") if owner and invalid is None else None
    if "metrics" not in shown:
        shown["metrics"] = await _metrics_view(request, breaker="circuitBreaker" in subscription)
    return render(
        request,
        "subscription.html",
        status=error.status if error else 200,
        topic=topic,
        subscription=subscription,
        owner=owner,
        admin="admin" in roles,
        undelivered=undelivered,
        tasks=tasks,
        error=error,
        **{"trace": None, "trace_id": "", "retransmitted": None, **shown},
    )


async def _metrics_view(request: web.Request, breaker: bool) -> dict[str, Any]:
    """Metrics, health, charts, and the circuit breaker's state when the subscription has one (``breaker``)."""
    client = api(request)
    topic, name = _names(request)
    base = f"/topics/{topic}/subscriptions/{name}"
    calls = [client.get(f"{base}/metrics"), client.get(f"{base}/health")]
    if breaker:
        calls.append(client.get(f"{base}/circuit-breaker"))
    metrics, health, *state = await asyncio.gather(*calls)
    history = console(request).history.add(f"{topic}${name}", metrics)
    charts = [markup(svg(history, title, names)) for title, names in CHARTS]
    return {"metrics": metrics, "health": health, "charts": charts, "breaker": state[0] if state else None}


@routes.get(_S)
async def subscription_page(request: web.Request) -> web.Response:
    return await _page(request)


@routes.get(_S + "/metrics")
async def metrics_fragment(request: web.Request) -> web.Response:
    """The metrics panel alone: the page's htmx asks for it every two seconds (``?breaker`` with a circuit
    breaker)."""
    return render(request, "metrics.html", metrics=await _metrics_view(request, "breaker" in request.query))


@routes.post(_S)
async def update_subscription(request: web.Request) -> web.Response:
    topic, name = _names(request)
    form = await request.post()
    try:
        await api(request).call("PUT", f"/topics/{topic}/subscriptions/{name}", subscription_body(form))
    except ApiRefused as refused:
        return await _page(request, refused)
    raise redirect(f"{PREFIX}/topics/{topic}/subscriptions/{name}", "Subscription saved")


@routes.post(_S + "/state")
async def change_state(request: web.Request) -> web.Response:
    topic, name = _names(request)
    state = text(await request.post(), "state")
    try:
        await api(request).call("PUT", f"/topics/{topic}/subscriptions/{name}/state", raw=f'"{state}"')
    except ApiRefused as refused:
        return await _page(request, refused)
    raise redirect(f"{PREFIX}/topics/{topic}/subscriptions/{name}", f"Subscription {state.lower()}")


@routes.post(_S + "/retransmission")
async def retransmit(request: web.Request) -> web.Response:
    """From a date the user picked (UTC), or an hour ago."""
    topic, name = _names(request)
    form = await request.post()
    moment = "-1h" if form.get("hourAgo") is not None else text(form, "retransmissionDate")
    try:
        moved = await api(request).call(
            "PUT", f"/topics/{topic}/subscriptions/{name}/retransmission", {"retransmissionDate": moment}
        )
    except ApiRefused as refused:
        return await _page(request, refused)
    return await _page(request, retransmitted=moved)


@routes.get(_S + "/trace")
async def trace(request: web.Request) -> web.Response:
    topic, name = _names(request)
    message_id = request.query.get("messageId", "").strip()
    if not message_id:
        return await _page(request)
    try:
        events = await api(request).get(f"/topics/{topic}/subscriptions/{name}/events/{segment(message_id)}/trace")
    except ApiRefused as refused:
        return await _page(request, refused, trace_id=message_id)
    return await _page(request, trace=events, trace_id=message_id)


@routes.get(_S + "/delete")
async def confirm_delete(request: web.Request) -> web.Response:
    topic, name = _names(request)
    back = request.path.removesuffix("/delete")
    return render(
        request, "confirm.html", what="subscription", name=f"{topic} / {name}", action=request.path, back=back
    )


@routes.post(_S + "/delete")
async def delete_subscription(request: web.Request) -> web.Response:
    topic, name = _names(request)
    await api(request).call("DELETE", f"/topics/{topic}/subscriptions/{name}")
    raise redirect(f"{PREFIX}/topics/{topic}", f"Subscription {name} deleted")
