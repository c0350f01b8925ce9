"""Who may scrape ``/status/prometheus`` on a port without an API of its own (the consumers', the pipeline's):
while authentication is on, any authenticated caller, as on the management and publishing ports."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from hermes.errors import TooManyFailedLogins, Unauthorized
from hermes.security.authenticator import challenge
from hermes.security.setup import Security

Guard = Callable[[web.Request], Awaitable[web.StreamResponse | None]]


def scrape_guard(security: Security) -> Guard | None:
    """None while authentication is off: anyone who reaches the port (loopback only) may scrape."""
    authenticator = security.authenticator
    if authenticator is None:
        return None

    async def guard(request: web.Request) -> web.StreamResponse | None:
        try:
            await authenticator.authenticate(request.headers.get("Authorization"), request.remote or "")
        except (Unauthorized, TooManyFailedLogins) as exc:
            headers = challenge(exc, authenticator.methods)
            return web.json_response(exc.to_body(), status=exc.status, headers=headers)
        return None

    return guard
