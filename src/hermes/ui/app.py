"""The console's aiohttp application, mounted at ``/ui`` by the management role: its pages, the signed-in
user's API, and the refusals of the API shown as pages (a 401 sends the user to the login page)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import jinja2
from aiohttp import web
from aiohttp.typedefs import Handler
from markupsafe import Markup

from hermes.errors import ApiRefused
from hermes.ui import PREFIX
from hermes.ui.api import Api, Upstream
from hermes.ui.charts import MetricsHistory
from hermes.ui.forms import BREAKER_FIELDS, RULE_ACTIONS
from hermes.ui.sessions import COOKIE, Sessions

log = logging.getLogger(__name__)

JS_DIR_ENV = "HERMES_JS_DIR"
HTMX = "htmx.min.js"


class Console:
    """What the pages share: templates, where the APIs are, the signed-in users, the charts' history."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.sessions = Sessions()
        self.history = MetricsHistory()
        self.templates = jinja2.Environment(
            loader=jinja2.PackageLoader("hermes.ui", "templates"), autoescape=True, undefined=jinja2.StrictUndefined
        )
        self.templates.globals["ui"] = PREFIX
        self.templates.globals["units"] = ("SECONDS", "MINUTES", "HOURS", "DAYS")  # a topic's retentionUnit
        self.templates.globals["rule_actions"] = RULE_ACTIONS
        self.templates.globals["breaker_fields"] = BREAKER_FIELDS
        self.templates.filters["q"] = lambda value: quote(str(value), safe="")
        self.templates.filters["when"] = when
        self.client: aiohttp.ClientSession | None = None


CONSOLE = web.AppKey("console", Console)


def when(millis: Any) -> str:
    """Epoch millis as an ISO-8601 time in UTC (what is not a number, as it is)."""
    if not isinstance(millis, int):
        return str(millis)
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def js_dir() -> Path:
    """Where ``make setup`` put htmx (fetched from the npm registry); HERMES_JS_DIR overrides it."""
    return Path(os.environ.get(JS_DIR_ENV) or Path(sys.prefix) / "share" / "hermes" / "js")


def create_app(upstream: Upstream) -> web.Application:
    from hermes.ui import dead_letters, login, operations, subscriptions, topics

    app = web.Application(middlewares=[_refusals])
    app[CONSOLE] = Console(upstream)
    app.cleanup_ctx.append(_client)
    for module in (login, topics, subscriptions, dead_letters, operations):
        app.router.add_routes(module.routes)
    app.router.add_get("/static/" + HTMX, _htmx)
    if not (js_dir() / HTMX).is_file():
        log.warning(
            "the console's %s is missing in %s: run `make setup` (pages work, charts do not refresh)", HTMX, js_dir()
        )
    return app


async def _client(app: web.Application) -> AsyncIterator[None]:
    console = app[CONSOLE]
    console.client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    yield
    await console.client.close()


def console(request: web.Request) -> Console:
    return request.config_dict[CONSOLE]


def api(request: web.Request) -> Api:
    """The APIs with the credentials of the request's signed-in user (none while nobody signed in)."""
    found = console(request)
    session = found.sessions.get(request.cookies.get(COOKIE))
    assert found.client is not None
    return Api(found.client, found.upstream, session.authorization if session else None)


def user(request: web.Request) -> str | None:
    session = console(request).sessions.get(request.cookies.get(COOKIE))
    return session.user if session else None


def segment(value: str) -> str:
    """A name in a path of the API or the console: quoted, and never a dot segment that would climb up."""
    quoted = quote(value, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


# Pages load only their own script and are never framed by another site (no clickjacking of the forms); the
# styles are inline. They show the user's data: not cached.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    page = console(request).templates.get_template(template)
    context.setdefault("error", None)
    text = page.render(user=user(request), notice=request.query.get("done"), **context)
    return web.Response(text=text, status=status, content_type="text/html", headers=PAGE_HEADERS)


def stored_invalid(shown: dict[str, Any]) -> ApiRefused | None:
    """Why a topic or subscription the API answered as stored (``invalid``) fails validation: shown above its
    settings form, which corrects it."""
    invalid = shown.get("invalid")
    if invalid is None:
        return None
    return ApiRefused(400, "STORED_ENTITY_INVALID", f"{invalid['message']} (as stored: save to correct it)")


def markup(html: str) -> Markup:
    """HTML the console made itself (charts), not from the API's data."""
    return Markup(html)


def redirect(location: str, done: str | None = None) -> web.HTTPSeeOther:
    return web.HTTPSeeOther(location + (f"?done={quote(done)}" if done else ""))


@web.middleware
async def _refusals(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiRefused as refused:
        if refused.status == 401:
            raise web.HTTPSeeOther(f"{PREFIX}/login?next={quote(request.path_qs, safe='')}") from None
        return render(request, "refused.html", status=refused.status, refused=refused)
    except aiohttp.ClientError as exc:
        log.warning("the console could not reach the API: %s", exc)
        return render(
            request, "refused.html", status=502, refused=ApiRefused(502, "", f"the API is unreachable: {exc}")
        )


async def _htmx(_: web.Request) -> web.StreamResponse:
    path = js_dir() / HTMX
    if not path.is_file():
        raise web.HTTPNotFound(reason=f"{HTMX} is missing: run `make setup`")
    return web.FileResponse(path, headers={"Cache-Control": "max-age=86400"})
