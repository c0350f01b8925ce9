"""Filters on a stored (offloaded) body read and parse it in a thread, so the event loop serves other
subscriptions' deliveries meanwhile; a body in memory is filtered on the loop."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from types import SimpleNamespace
from typing import Any

from hermes.consumers.content import ContentConverter
from hermes.consumers.delivery import Delivery
from hermes.consumers.rate import RateSettings
from hermes.domain.endpoint import EndpointAddress
from hermes.domain.message import Message
from hermes.domain.names import TopicName
from hermes.domain.subscription import MatchingStrategy, MessageFilterSpecification, Subscription
from hermes.http.streamed import FileRegion


class _ReadWhere(FileRegion):
    def read(self) -> bytes:
        self.thread = threading.get_ident()
        return super().read()


def test_a_stored_body_is_filtered_off_the_event_loop() -> None:
    only_two = MessageFilterSpecification("jsonpath", "2", "$.n", None, MatchingStrategy.ALL)
    subscription = Subscription(TopicName("g", "t"), "s", EndpointAddress("http://x"), filters=(only_two,))
    context: Any = SimpleNamespace(content=ContentConverter(None), rate=RateSettings(), failure_log_interval=30.0)

    async def filtered(body: bytes) -> tuple[bool, bool]:
        delivery = Delivery(subscription, context)
        with tempfile.TemporaryFile() as spool:
            spool.write(b"head" + body)
            spool.flush()
            stored = _ReadWhere(spool, 4, len(body))
            message = Message("g.t", 0, 0, "id", b"placeholder", 0, stored=stored)
            passed = await delivery.passes(message, None)
        return passed, stored.thread != threading.get_ident()

    assert asyncio.run(filtered(b'{"n": "2"}')) == (True, True)
    assert asyncio.run(filtered(b'{"n": "3"}')) == (False, True)
