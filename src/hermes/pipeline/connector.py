"""Spark's Kafka connector (``spark-sql-kafka-0-10``, ``format("kafka")``): the jars that give it to a session and
the options that reach Hermes' cluster with it.

``make setup`` fetches the connector and what it needs beside PySpark's own jars (``jars/spark.pom.xml``, at the
version of the pinned PySpark) into the environment; sessions get them as local paths (``spark.jars``, see
:func:`hermes.pipeline.session.pipeline_jars`), so nothing is downloaded at run time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hermes.broker.connection import KafkaConnection
from hermes.errors import StartupError

KAFKA_FORMAT = "kafka"

# The fetches of the connector's consumer in a task. A task reads a range of offsets that Kafka already has, and
# each of its polls costs round trips to the broker: the fetch, then the partition's earliest and latest offsets
# (asked after every poll). With the consumer's defaults the archive's tasks waited for the broker half of their
# time: a broker may hold a fetch it cannot fill for up to fetch.max.wait.ms (500 ms), and a poll returned at most
# 500 records of 1 MiB a partition. 5 ms removed most of that wait, and 2,000 records of 2 MiB take a quarter of
# the polls (a consumer Spark keeps for the next batch holds up to one poll's records). docs/pipeline.md, third pass.
_FETCH_MAX_WAIT_MS = 5
_MAX_POLL_RECORDS = 2000
_MAX_PARTITION_FETCH_BYTES = 2 << 20

# The SASL mechanisms Hermes' username and password settings are for, and their JAAS login modules in Java.
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def client_options(connection: KafkaConnection) -> dict[str, str]:
    """The connector's ``kafka.*`` options: the cluster and Hermes' security settings (librdkafka's names in
    ``connection``) in the Java client's terms."""
    security = dict(connection.security)
    options = {"kafka.bootstrap.servers": connection.bootstrap_servers}
    if "security.protocol" in security:
        options["kafka.security.protocol"] = security["security.protocol"].upper()
    mechanism = security.get("sasl.mechanism", "").upper()
    if mechanism:
        options["kafka.sasl.mechanism"] = mechanism
    if "sasl.username" in security or "sasl.password" in security:
        module = _LOGIN_MODULES.get(mechanism)
        if module is None:
            raise StartupError(
                f"the pipeline reads Kafka with a SASL username and password only with kafka_sasl_mechanism "
                f"{', '.join(_LOGIN_MODULES)}, not {mechanism or 'unset'}"
            )
        username, password = (_jaas_quoted(security.get(k, "")) for k in ("sasl.username", "sasl.password"))
        # Spark redacts an option in query plans when its value matches spark.redaction.regex: this one's
        # "password=" does, so the password never shows
        options["kafka.sasl.jaas.config"] = f'{module} required username="{username}" password="{password}";'
    if "ssl.ca.location" in security:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = security["ssl.ca.location"]
    return options


def _jaas_quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def topics_pattern(topics: Iterable[str]) -> str:
    """A ``subscribePattern`` matching exactly ``topics``. A pattern rather than ``subscribe``: the connector
    fails a query when a topic it subscribes to does not exist (not yet, or no longer), while a pattern
    matches what is there and picks a topic up once it is created."""
    return "^(?:" + "|".join(re.escape(topic) for topic in sorted(topics)) + ")$"


def kafka_options(connection: KafkaConnection, topics: Iterable[str], max_records: int | None = None) -> dict[str, str]:
    """Options of a stream of ``topics`` with Kafka headers. Partitions the query has no position for (all of
    them without a checkpoint, and partitions or topics new to it) are read from their earliest offset. Records
    Kafka no longer has (retention), and topics deleted or no longer read, are not an error
    (``failOnDataLoss`` false): the pipeline archives what Kafka still holds."""
    options = {
        **client_options(connection),
        "subscribePattern": topics_pattern(topics),
        "startingOffsets": "earliest",
        "includeHeaders": "true",
        "failOnDataLoss": "false",
        "kafka.fetch.max.wait.ms": str(_FETCH_MAX_WAIT_MS),
        "kafka.max.poll.records": str(_MAX_POLL_RECORDS),
        "kafka.max.partition.fetch.bytes": str(_MAX_PARTITION_FETCH_BYTES),
    }
    if max_records:
        options["maxOffsetsPerTrigger"] = str(max_records)
    return options
