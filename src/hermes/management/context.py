"""The application key under which the management handlers find their service."""

from aiohttp import web

from hermes.management.services import ManagementService

SERVICE = web.AppKey("service", ManagementService)
