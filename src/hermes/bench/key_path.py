"""The CPU an ``Idempotency-Key`` costs a publish in-process, split into its stages (issue 34): the publish's look-up
and in-flight slot (``IdempotencyKeys.publish``, the key table's), the first publish's answer (which keeps its key),
and the 10 ms flush that builds their record, over ``KEYS`` new UUID keys on one topic (the table grows by as many
each round), with a
producer that keeps nothing. ``time.process_time_ns`` around each stage of each batch of 160 publishes (10 ms at
16,000 publishes/s), the objects made beforehand frozen out of the garbage collector's way, as a frontend does.

``python -m hermes.bench.key_path [KEYS [ROUNDS]]`` prints ns per key of each stage, each round, and the load."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
import uuid
from collections.abc import Mapping
from typing import Any

from hermes.bench.interrupt import alone
from hermes.bench.publish import BODY
from hermes.domain.message import new_message_id
from hermes.domain.names import TopicName
from hermes.domain.topic import Topic
from hermes.frontend.idempotency import IdempotencyKeys
from hermes.frontend.publishing import Answer, PublishResult

BATCH = 160


class _Producer:
    def produce(self, *_: Any, **__: Any) -> None:
        pass


def stages(keys: int, rounds: int) -> list[dict[str, float]]:
    async def measure() -> list[dict[str, float]]:
        index = IdempotencyKeys(_Producer(), None, None)  # type: ignore[arg-type]  # only the producer is used
        topic = Topic(TopicName.parse("bench.keys"))
        firsts: list[Answer] = []

        def produce(topic: Topic, message_id: str, body: Any, headers: Mapping[str, str], answer: Answer) -> None:
            firsts.append(answer)

        def answered(outcome: PublishResult | Exception) -> None:
            pass

        out = []
        for _ in range(rounds):
            ids = [new_message_id() for _ in range(keys)]
            names = [str(uuid.uuid4()) for _ in range(keys)]
            results = [PublishResult(message_id, True) for message_id in ids]
            gc.collect()
            gc.freeze()
            spent = [0, 0, 0]
            for start in range(0, keys, BATCH):
                firsts.clear()
                began = time.process_time_ns()
                for i in range(start, min(keys, start + BATCH)):
                    index.publish(produce, topic, ids[i], BODY, {}, names[i], answered)
                published = time.process_time_ns()
                for i, first in enumerate(firsts, start):
                    first(results[i])
                answers = time.process_time_ns()
                if index._flushing is not None:  # flushed here instead of by the loop's timer
                    index._flushing.cancel()
                index._flush()
                spent[0] += published - began
                spent[1] += answers - published
                spent[2] += time.process_time_ns() - answers
            gc.unfreeze()
            out.append(
                {
                    "keys_in_index": len(index),
                    "publish_ns": round(spent[0] / keys),
                    "answer_ns": round(spent[1] / keys),
                    "flush_ns": round(spent[2] / keys),
                    "total_ns": round(sum(spent) / keys),
                    "load": round(os.getloadavg()[0], 1),
                }
            )
        return out

    return asyncio.run(measure())


if __name__ == "__main__":
    arguments = [int(arg) for arg in sys.argv[1:]]
    count = arguments[0] if arguments else 300_000
    rounds = arguments[1] if len(arguments) > 1 else 3
    alone(lambda: print(json.dumps(stages(count, rounds))))
