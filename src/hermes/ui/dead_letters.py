"""A subscription's dead letters (our extension, ``deadLetters``): the list, one letter, purging them, and redriving
them with the redrive jobs' progress."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from hermes.errors import ApiRefused
from hermes.ui import PREFIX
from hermes.ui.app import api, redirect, render, segment
from hermes.ui.forms import text, typed

routes = web.RouteTableDef()

_D = "/topics/{topic}/subscriptions/{subscription}/dead-letters"


def _path(request: web.Request) -> str:
    """The API's path of the subscription's dead letters (the console's is the same under ``/ui``)."""
    topic, name = segment(request.match_info["topic"]), segment(request.match_info["subscription"])
    return f"/topics/{topic}/subscriptions/{name}/dead-letters"


def _here(request: web.Request) -> str:
    """The console's page of the subscription."""
    return PREFIX + _path(request).removesuffix("/dead-letters")


async def _page(request: web.Request, error: ApiRefused | None = None) -> web.Response:
    path = _path(request)
    query = {key: request.query.get(key, "").strip() for key in ("limit", "from", "to")}
    asked = "&".join(f"{key}={segment(value)}" for key, value in query.items() if value)
    letters = await api(request).get(path + (f"?{asked}" if asked else ""))
    return render(
        request,
        "dead_letters.html",
        status=error.status if error else 200,
        letters=letters,
        query=query,
        redrives=await api(request).get(f"{path}/redrives"),
        error=error,
        subscription=request.match_info["subscription"],
        here=_here(request),
    )


@routes.get(_D)
async def dead_letters_page(request: web.Request) -> web.Response:
    return await _page(request)


@routes.get(_D + "/redrives")
async def redrives_fragment(request: web.Request) -> web.Response:
    """The redrive jobs alone: the page's htmx asks for them every two seconds."""
    return render(request, "redrives.html", redrives=await api(request).get(f"{_path(request)}/redrives"))


@routes.get(_D + "/{deadLetterId:[0-9]+}")
async def dead_letter_page(request: web.Request) -> web.Response:
    letter = await api(request).get(f"{_path(request)}/{request.match_info['deadLetterId']}")
    return render(
        request, "dead_letter.html", letter=letter, subscription=request.match_info["subscription"], here=_here(request)
    )


def redrive_body(form: Any) -> dict[str, Any]:
    """All dead letters, those discarded between two moments, or those of the ids listed (commas or blanks)."""
    ids = text(form, "ids").replace(",", " ").split()
    if ids:
        return {"ids": [typed(i) for i in ids]}
    moments = {key: text(form, key) for key in ("from", "to")}
    return {key: typed(value) for key, value in moments.items() if value}


@routes.post(_D + "/redrive")
async def redrive(request: web.Request) -> web.Response:
    path = _path(request)
    try:
        job = await api(request).call("POST", f"{path}/redrive", redrive_body(await request.post()))
    except ApiRefused as refused:
        return await _page(request, refused)
    raise redirect(f"{PREFIX}{path}", f"Redrive {job['id']} started")


@routes.get(_D + "/purge")
async def confirm_purge(request: web.Request) -> web.Response:
    topic, name = request.match_info["topic"], request.match_info["subscription"]
    back = request.path.removesuffix("/purge")
    return render(
        request, "confirm.html", what="dead letters", name=f"of {topic} / {name}", action=request.path, back=back
    )


@routes.post(_D + "/purge")
async def purge(request: web.Request) -> web.Response:
    path = _path(request)
    purged = await api(request).call("DELETE", path)
    raise redirect(f"{PREFIX}{path}", f"{purged['purged']} dead letters purged")
