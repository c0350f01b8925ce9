"""``/oauth/providers``: create, list, get, update, delete. Client secrets are shown as ``******``."""

from __future__ import annotations

from aiohttp import web

from hermes.domain import api_json
from hermes.http.server import json_response
from hermes.management.api.bodies import ignored_fields_header, read_object
from hermes.management.context import SERVICE

routes = web.RouteTableDef()


@routes.get("/oauth/providers")
async def list_providers(request: web.Request) -> web.Response:
    providers = await request.app[SERVICE].oauth_providers()
    return json_response([p.name for p in providers])


@routes.get("/oauth/providers/{provider}")
async def get_provider(request: web.Request) -> web.Response:
    provider = await request.app[SERVICE].oauth_provider(request.match_info["provider"])
    return json_response(api_json.oauth_provider_to_json(provider))


@routes.post("/oauth/providers")
async def create_provider(request: web.Request) -> web.Response:
    body = await read_object(request)
    created = await request.app[SERVICE].create_oauth_provider(api_json.oauth_provider_from_json(body))
    headers = ignored_fields_header(request, body, "OAuthProvider")
    return json_response(api_json.oauth_provider_to_json(created), status=201, headers=headers)


@routes.put("/oauth/providers/{provider}")
async def update_provider(request: web.Request) -> web.Response:
    patch = await read_object(request)
    headers = ignored_fields_header(request, patch, "OAuthProvider")
    updated = await request.app[SERVICE].update_oauth_provider(request.match_info["provider"], patch)
    return json_response(api_json.oauth_provider_to_json(updated), headers=headers)


@routes.delete("/oauth/providers/{provider}")
async def delete_provider(request: web.Request) -> web.Response:
    await request.app[SERVICE].delete_oauth_provider(request.match_info["provider"])
    return web.Response(status=200)
