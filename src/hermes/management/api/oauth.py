"""``/oauth/providers``: create, list, get, update, delete. Client secrets are shown as ``******``."""

from __future__ import annotations

import asyncio
import dataclasses

from aiohttp import web

from hermes.domain import api_json
from hermes.domain.oauth import OAuthProvider
from hermes.http.server import json_response
from hermes.management.api.bodies import ignored_fields_header, read_object
from hermes.management.context import SERVICE

routes = web.RouteTableDef()


@routes.get("/oauth/providers")
async def list_providers(request: web.Request) -> web.Response:
    providers = await asyncio.to_thread(request.app[SERVICE].repository.list_oauth_providers)
    return json_response([p.name for p in providers])


@routes.post("/oauth/providers")
async def create_provider(request: web.Request) -> web.Response:
    body = await read_object(request)
    provider = api_json.oauth_provider_from_json(body)
    created = await asyncio.to_thread(request.app[SERVICE].repository.create_oauth_provider, provider)
    headers = ignored_fields_header(request, body, "OAuthProvider")
    return json_response(api_json.oauth_provider_to_json(created), status=201, headers=headers)


@routes.get("/oauth/providers/{provider}")
async def get_provider(request: web.Request) -> web.Response:
    repository = request.app[SERVICE].repository
    provider = await asyncio.to_thread(repository.get_oauth_provider, request.match_info["provider"])
    return json_response(api_json.oauth_provider_to_json(provider))


@routes.put("/oauth/providers/{provider}")
async def update_provider(request: web.Request) -> web.Response:
    patch = await read_object(request)
    headers = ignored_fields_header(request, patch, "OAuthProvider")
    name = request.match_info["provider"]
    if patch.get("clientSecret") == api_json.SECRET_MASK:
        patch = {k: v for k, v in patch.items() if k != "clientSecret"}  # the mask means "unchanged"

    def change(current: OAuthProvider) -> OAuthProvider:
        merged = {**api_json.oauth_provider_to_json(current, mask_secrets=False), **patch, "name": name}
        return dataclasses.replace(api_json.oauth_provider_from_json(merged), name=name)

    updated = await asyncio.to_thread(request.app[SERVICE].repository.update_oauth_provider, name, change)
    return json_response(api_json.oauth_provider_to_json(updated), headers=headers)


@routes.delete("/oauth/providers/{provider}")
async def delete_provider(request: web.Request) -> web.Response:
    await asyncio.to_thread(request.app[SERVICE].repository.delete_oauth_provider, request.match_info["provider"])
    return web.Response(status=200)
