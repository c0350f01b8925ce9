"""Signing in and out: the name and password are checked by the management API itself (``GET /roles`` with
them), and kept for the session on the server side only."""

from __future__ import annotations

from aiohttp import web

from hermes.errors import ApiRefused
from hermes.ui import PREFIX
from hermes.ui.api import Api
from hermes.ui.app import console, redirect, render
from hermes.ui.sessions import COOKIE, basic_authorization

routes = web.RouteTableDef()


def next_page(value: str | None) -> str:
    """Where to go after signing in: a console page only (never another site)."""
    return value if value and value.startswith(PREFIX + "/") else PREFIX + "/"


@routes.get("/login")
async def login_page(request: web.Request) -> web.Response:
    return render(request, "login.html", next=next_page(request.query.get("next")), login_error=None, name="")


@routes.post("/login")
async def login(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    name, password = str(form.get("name", "")).strip(), str(form.get("password", ""))
    target = next_page(str(form.get("next", "")))
    found = console(request)
    assert found.client is not None
    authorization = basic_authorization(name, password)
    try:
        await Api(found.client, found.upstream, authorization).get("/roles")
    except ApiRefused as refused:
        message = "wrong name or password" if refused.status == 401 else refused.message
        return render(request, "login.html", status=refused.status, next=target, login_error=message, name=name)
    response = web.HTTPSeeOther(target)
    cookie_path = PREFIX + "/"
    response.set_cookie(
        COOKIE,
        found.sessions.open(name, authorization),
        path=cookie_path,
        httponly=True,
        samesite="Strict",  # forms of other sites do not carry it: no cross-site requests in the user's name
        secure=request.secure,
    )
    raise response


@routes.post("/logout")
async def logout(request: web.Request) -> web.StreamResponse:
    console(request).sessions.close(request.cookies.get(COOKIE))
    response = redirect(PREFIX + "/login")
    response.del_cookie(COOKIE, path=PREFIX + "/")
    raise response
