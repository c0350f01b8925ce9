"""``/offline-retransmission/tasks``: Hermes' offline retransmission from the lake, run by the pipeline."""

from __future__ import annotations

import asyncio

from aiohttp import web

from hermes.http.server import json_response, read_json
from hermes.management import offline_retransmission as tasks
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE

routes = web.RouteTableDef()


@routes.post("/offline-retransmission/tasks")
async def create_task(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    body = await read_json(request)
    task = await asyncio.to_thread(tasks.create_task, service.repository, body)
    return json_response(task.to_document(), status=201)


@routes.get("/offline-retransmission/tasks")
async def list_tasks(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    return json_response(await asyncio.to_thread(tasks.list_tasks, service.repository))


@routes.delete("/offline-retransmission/tasks/{taskId}")
async def delete_task(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    await asyncio.to_thread(tasks.delete_task, service.repository, request.match_info["taskId"])
    return web.Response(status=200)


@routes.get("/offline-retransmission/topics/{topic}/tasks")
@routes.get("/offline-retransmission/topics/{topic}/tasks/")
async def topic_tasks(request: web.Request) -> web.Response:
    """Hermes' ``OfflineRetransmissionTaskMonitoringInfo`` of the tasks from or to the topic. There are no
    job logs or dashboards to link to (empty URLs); ``status`` and ``progress`` are added."""
    name = topic_name(request).qualified
    documents = await asyncio.to_thread(tasks.list_tasks, request.app[SERVICE].repository)
    return json_response(
        [
            {
                "type": d["type"],
                "taskId": d["taskId"],
                "logsUrl": "",
                "metricsUrl": "",
                "jobDetailsUrl": "",
                "status": d["status"],
                "progress": d["progress"],
            }
            for d in documents
            if name in (d.get("sourceTopic"), d.get("targetTopic"))
        ]
    )
