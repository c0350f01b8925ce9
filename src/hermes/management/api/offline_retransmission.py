"""``/offline-retransmission/tasks``: Hermes' offline retransmission from the lake, run by the pipeline."""

from __future__ import annotations

from aiohttp import web

from hermes.http.server import json_response, read_json
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE

routes = web.RouteTableDef()


@routes.post("/offline-retransmission/tasks")
async def create_task(request: web.Request) -> web.Response:
    task = await request.app[SERVICE].create_task(await read_json(request))
    return json_response(task.to_document(), status=201)


@routes.get("/offline-retransmission/tasks")
async def list_tasks(request: web.Request) -> web.Response:
    return json_response(await request.app[SERVICE].tasks())


@routes.delete("/offline-retransmission/tasks/{taskId}")
async def delete_task(request: web.Request) -> web.Response:
    await request.app[SERVICE].delete_task(request.match_info["taskId"])
    return web.Response(status=200)


@routes.get("/offline-retransmission/topics/{topic}/tasks")
@routes.get("/offline-retransmission/topics/{topic}/tasks/")
async def topic_tasks(request: web.Request) -> web.Response:
    """Hermes' ``OfflineRetransmissionTaskMonitoringInfo`` of the tasks from or to the topic. There are no
    job logs or dashboards to link to (empty URLs); ``status`` and ``progress`` are added."""
    name = topic_name(request).qualified
    documents = await request.app[SERVICE].tasks()
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
