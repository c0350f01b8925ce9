"""``/groups``: create, list, get, delete."""

from __future__ import annotations

import asyncio

from aiohttp import web

from hermes.domain.names import validate_group_name
from hermes.errors import FormattingError
from hermes.http.server import json_response, read_json
from hermes.management.context import SERVICE


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/groups", list_groups)
    router.add_post("/groups", create_group)
    router.add_get("/groups/{group}", get_group)
    router.add_delete("/groups/{group}", delete_group)


async def list_groups(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    groups = await asyncio.to_thread(service.repository.list_groups)
    return json_response([g.name for g in groups])


async def create_group(request: web.Request) -> web.Response:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise FormattingError('the body must be a JSON object like {"groupName": "..."}')
    name = validate_group_name(body.get("groupName"))  # type: ignore[arg-type]
    group = await request.app[SERVICE].create_group(name)
    return json_response({"groupName": group.name}, status=201)


async def get_group(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    group = await asyncio.to_thread(service.repository.get_group, request.match_info["group"])
    return json_response({"groupName": group.name})


async def delete_group(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    await asyncio.to_thread(service.repository.delete_group, request.match_info["group"])
    return web.Response(status=200)
