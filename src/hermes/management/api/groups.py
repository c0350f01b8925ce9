"""``/groups``: create, list, get, update, delete."""

from __future__ import annotations

from aiohttp import web

from hermes.domain.names import validate_group_name
from hermes.errors import ValidationError
from hermes.http.server import json_response
from hermes.management.api.bodies import ignored_fields_header, read_object
from hermes.management.context import SERVICE

routes = web.RouteTableDef()


@routes.get("/groups")
async def list_groups(request: web.Request) -> web.Response:
    return json_response([g.name for g in await request.app[SERVICE].groups()])


@routes.post("/groups")
async def create_group(request: web.Request) -> web.Response:
    body = await read_object(request)
    name = validate_group_name(body.get("groupName"))  # type: ignore[arg-type]
    group = await request.app[SERVICE].create_group(name)
    return json_response({"groupName": group.name}, status=201, headers=ignored_fields_header(request, body, "Group"))


@routes.get("/groups/{group}")
async def get_group(request: web.Request) -> web.Response:
    group = await request.app[SERVICE].group(request.match_info["group"])
    return json_response({"groupName": group.name})


@routes.put("/groups/{group}")
async def update_group(request: web.Request) -> web.Response:
    """A group has nothing but its name, which cannot change: Hermes' 204 once the group is found."""
    body = await read_object(request)
    name = request.match_info["group"]
    await request.app[SERVICE].group(name)
    if body.get("groupName", name) != name:
        raise ValidationError("a group cannot be renamed", "groupName")
    return web.Response(status=204, headers=ignored_fields_header(request, body, "Group"))


@routes.delete("/groups/{group}")
async def delete_group(request: web.Request) -> web.Response:
    await request.app[SERVICE].delete_group(request.match_info["group"])
    return web.Response(status=200)
