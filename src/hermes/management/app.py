"""The management API application: Hermes' paths, field names and status codes."""

from __future__ import annotations

from aiohttp import web

from hermes.cluster import nodes_api
from hermes.http import status as status_routes
from hermes.http.server import error_middleware, json_response
from hermes.management import openapi
from hermes.management.access import SECURITY, access_middleware
from hermes.management.api import (
    cluster,
    console,
    datacenters,
    dead_letters,
    filters,
    groups,
    integrations,
    oauth,
    offline_retransmission,
    operations,
    owners,
    preview,
    queries,
    subscriptions,
    topics,
    tracking,
)
from hermes.management.context import SERVICE
from hermes.management.metadata_age import metadata_age_middleware
from hermes.management.services import ManagementService
from hermes.security.setup import Security


def create_app(service: ManagementService, security: Security) -> web.Application:
    app = web.Application(
        middlewares=[error_middleware, access_middleware, cluster.read_only_middleware, metadata_age_middleware],
        client_max_size=16 * 1024 * 1024,
    )
    app[SERVICE] = service
    app[SECURITY] = security
    status_routes.register(app.router)
    for module in (
        groups,
        topics,
        subscriptions,
        dead_letters,
        operations,
        oauth,
        tracking,
        offline_retransmission,
        queries,
        owners,
        filters,
        preview,
        integrations,
        cluster,
        datacenters,
        console,
        nodes_api,
    ):
        app.router.add_routes(module.routes)
    app.router.add_get("/openapi.json", _openapi)
    return app


async def _openapi(_: web.Request) -> web.Response:
    return json_response(openapi.document())
