"""Configuration: one settings object for every process.

Precedence, highest first: command-line flags, ``HERMES_*`` environment variables, the TOML config file
(``--config`` or ``HERMES_CONFIG``), then the defaults below. Every field becomes a ``--flag`` of the commands
that use it (``hermes.config_sections``), with its description as help, so each command's ``--help`` documents
its settings.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic import ValidationError as PydanticValidationError
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from hermes.config_errors import problem, read_config_file
from hermes.errors import UsageError

ENV_PREFIX = "HERMES_"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    # --- process-wide ---
    data_dir: Path = Field(Path(".hermes"), description="Directory for the SQLite metadata, journal and logs.")
    host: str = Field("127.0.0.1", description="Address the HTTP servers listen on.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level.")
    cluster_name: str = Field("primary", description="Name of this Kafka cluster in undelivered records/traces.")
    event_loop: Literal["auto", "asyncio", "uvloop"] = Field(
        "auto",
        description="Event loop: uvloop (the `fast` extra) costs less CPU per request; auto uses it if installed.",
    )

    # --- HTTP ports ---
    frontend_port: int = Field(8080, ge=0, le=65535, description="Port of the publishing API (0 = any free).")
    management_port: int = Field(8090, ge=0, le=65535, description="Port of the management API (0 = any free).")
    inactive_topics_threshold: float = Field(
        60 * 24 * 3600,
        gt=0,
        description="Seconds without a published message after which /inactive-topics lists a topic (Hermes: 60 days).",
    )
    inactive_topics_whitelist: str = Field(
        "", description="Comma-separated qualified topic names /inactive-topics marks whitelisted."
    )
    ui: bool = Field(True, description="Serve the web console at /ui on the management port (docs/console.md).")
    ui_frontend_url: str | None = Field(
        None,
        description="The publishing API the console's test messages go to; default: --frontend-port on this host.",
    )
    signing_secret_overlap: float = Field(
        86_400.0,
        gt=0,
        description="Seconds a subscription's previous signing secret still signs beside a newly generated one.",
    )
    pipeline_port: int = Field(
        8060, ge=0, le=65535, description="Port of `hermes pipeline`'s health and Prometheus endpoints (0 = any free)."
    )
    consumers_port: int = Field(
        8070, ge=0, le=65535, description="Port of `hermes consumers`' health and Prometheus endpoints (0 = any free)."
    )

    # --- the HTTP edge: every port's limits (http/edge.py; defaults as nginx and Apache's, docs/operations.md) ---
    http_header_timeout: float = Field(
        60.0,
        gt=0,
        description="Seconds a client has to send a request's line and headers, from its connection or (kept "
        "alive) the request's first byte; then 408 and the connection closes.",
    )
    http_body_timeout: float = Field(
        60.0,
        gt=0,
        description="Seconds a request's body may take, plus one per --http-body-min-rate bytes received; then 408.",
    )
    http_body_min_rate: int = Field(
        500, ge=1, description="Bytes per second a slow body must keep up to earn more time (--http-body-timeout)."
    )
    http_keepalive_timeout: float = Field(
        75.0, gt=0, description="Seconds an idle connection stays open after its last answer."
    )
    http_max_connections: int = Field(
        4096,
        ge=1,
        description="Open connections per port; a new one beyond closes the longest idle one, or is refused "
        "with 503 while none is idle. Keep it below the open-files limit (ulimit -n).",
    )

    # --- authentication ---
    auth_jwt_issuer: str | None = Field(
        None, description="Issuer (iss) of the OAuth 2 / OIDC bearer tokens the APIs accept; unset: Basic only."
    )
    auth_jwt_jwks_url: str | None = Field(
        None, description="URL of the issuer's key set (JWKS); default: the issuer's /.well-known/jwks.json."
    )
    auth_jwt_audience: str | None = Field(None, description="Audience (aud) the bearer tokens must name, if any.")
    auth_failed_logins_per_minute: int = Field(
        10, ge=1, le=10_000, description="Failed logins a client address may make per minute before it must wait."
    )
    tls_cert_file: Path | None = Field(
        None,
        description="Certificate chain (PEM) of the HTTP listeners: with --tls-key-file, they speak HTTPS only.",
    )
    tls_key_file: Path | None = Field(None, description="Private key (PEM, unencrypted) of --tls-cert-file.")
    publish_authentication: Literal["required", "optional"] = Field(
        "required",
        description="While authentication is on: whether every publish must authenticate (required) or only those "
        "a topic's auth asks for (optional: Hermes' authNonRequired).",
    )

    # --- Kafka ---
    kafka_bootstrap_servers: str | None = Field(
        None,
        description="External Kafka cluster (host:port,...). When unset, `hermes run` starts the embedded Apache "
        "Kafka broker and the role subcommands use the one it started.",
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="librdkafka security.protocol for the external cluster."
    )
    kafka_sasl_mechanism: str | None = Field(None, description="SASL mechanism, e.g. PLAIN or SCRAM-SHA-512.")
    kafka_sasl_username: str | None = Field(None, description="SASL username.")
    kafka_sasl_password: SecretStr | None = Field(None, description="SASL password (never logged).")
    kafka_ssl_ca_location: str | None = Field(None, description="CA certificate file for TLS.")
    kafka_scram_users: SecretStr | None = Field(
        None,
        description="SCRAM-SHA-512 users, name:password,...: `hermes run`'s embedded Kafka creates them (its "
        "listener then takes SCRAM over TLS) and the offload service of large messages signs them in by HTTP SCRAM.",
    )
    kafka_connect_timeout: float = Field(
        15.0, gt=0, description="Seconds to wait for the Kafka cluster to answer at start-up."
    )
    kafka_admin_timeout: float = Field(
        10.0,
        gt=0,
        description="Seconds an administrative request to Kafka (topics, consumer groups, committed offsets) waits "
        "for the cluster's answer; the management API answers 503 when it runs out.",
    )
    embedded_broker_port: int = Field(
        9092, ge=0, le=65535, description="Port of the embedded Kafka broker on --host (0 = any free)."
    )
    embedded_broker_heap_mb: int = Field(
        1024, ge=128, le=65536, description="Largest Java heap of the embedded Kafka broker, in MiB."
    )
    embedded_broker_restart_backoff: float = Field(
        1.0,
        gt=0,
        le=60,
        description="Seconds before the embedded Kafka broker is started again after it exited; doubled while it "
        "keeps exiting within a minute, up to 60.",
    )
    topic_partitions: int = Field(
        2,
        ge=1,
        le=1000,
        description="Partitions of each new Kafka topic; raising it grows a topic's partitions at its next update.",
    )
    topic_reconcile_interval: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="Seconds between checks that every topic of the metadata store exists in Kafka (a missing one "
        "is created again with its settings).",
    )

    # --- metadata ---
    metadata_store: Literal["sqlite", "zookeeper"] = Field("sqlite", description="Metadata repository.")
    zookeeper_connect: str = Field("127.0.0.1:2181", description="ZooKeeper connect string.")
    zookeeper_root: str = Field("/hermes", description="Root znode of the Hermes metadata.")
    metadata_poll_interval: float = Field(
        0.2, gt=0, le=10, description="Seconds between polls of the SQLite change log by other processes."
    )

    # --- frontend ---
    frontend_ack_leader_timeout: float = Field(
        65, gt=0, description="Millis a publish waits for an ack LEADER topic's broker ack before answering 202."
    )
    frontend_ack_all_timeout: float = Field(
        400, gt=0, description="Millis a publish waits for an ack ALL topic's broker ack before answering 202."
    )
    tracing: bool = Field(
        False,
        description="Export OpenTelemetry spans of publishes and deliveries (OTLP; OTEL_* variables, docs/tracing.md).",
    )
    frontend_propagated_headers: str = Field(
        "Trace-Id,Span-Id,Parent-Span-Id,Trace-Sampled,Trace-Reported",
        description="Comma-separated publisher request headers passed on to subscribers.",
    )

    frontend_journal_max_bytes: int = Field(
        256 * 1024 * 1024, ge=1024, description="Bytes of unacknowledged messages the journal keeps before 503s."
    )
    frontend_journal_fsync: Literal["always", "interval", "never"] = Field(
        "interval", description="When the journal forces its file to disk (process crashes are safe with any)."
    )
    frontend_journal_fsync_interval: float = Field(0.05, gt=0, description="Seconds between journal fsyncs.")
    frontend_shutdown_wait: float = Field(
        0.0,
        ge=0,
        le=300,
        description="Seconds a stopping frontend goes on publishing after /status/ready answers 503 and it left the "
        "cluster, before it closes its port: let load balancers see it (docs/cluster.md, Rolling restarts).",
    )
    workers: int = Field(
        default_factory=lambda: os.cpu_count() or 1,
        ge=1,
        le=256,
        description="Processes of `hermes frontend`, each with its own producer and journal, all on --frontend-port "
        "(default: the number of cores). `hermes run` is one process.",
    )

    # --- large messages ---
    offload_max_message_size: int = Field(
        100 * 1024 * 1024,
        ge=1,
        description="Bytes a message may have when offloaded beside Kafka (the offload service's limit).",
    )
    offload_advertised_url: str | None = Field(
        None,
        description="URL of the offload service that sys.metadata advertises to Kafka clients; default: the "
        "frontend's URL + /offload (set it when the frontend listens on all addresses or behind a proxy).",
    )
    offload_store: Literal["local", "s3"] = Field(
        "local", description="Where offloaded messages are kept: local (the data directory) or s3 (a bucket)."
    )
    offload_s3_bucket: str | None = Field(None, description="Bucket of the s3 offload store.")
    offload_s3_prefix: str = Field("hermes-offload/", description="Key prefix of the s3 offload store's objects.")
    offload_s3_endpoint_url: str | None = Field(
        None, description="Endpoint of an S3-compatible service (MinIO, Ceph, ...); unset: AWS S3."
    )
    offload_s3_region: str | None = Field(None, description="Region of the s3 offload store's bucket.")
    offload_expiry_interval: float = Field(
        60.0, gt=0, description="Seconds between sweeps deleting offloaded messages past their topic's retention."
    )

    # --- consumers ---
    consumer_tls_ca_file: Path | None = Field(
        None, description="CA certificates (PEM) trusted for HTTPS subscribers, beside the system's."
    )
    consumer_commit_interval: float = Field(
        1.0, gt=0, description="Seconds between offset commits of each subscription consumer."
    )
    consumer_metrics_interval: float = Field(
        1.0, gt=0, description="Seconds between metric snapshots of each consumer."
    )
    consumer_rate_period: float = Field(1.0, gt=0, description="Seconds between adaptive rate adjustments.")
    consumer_heartbeat_interval: float = Field(
        60.0, gt=0, description="Seconds between attempts in the rate limiter's heartbeat mode."
    )
    consumer_failure_log_interval: float = Field(
        30.0, gt=0, description="Seconds between INFO lines summing up a subscription's failed delivery attempts."
    )
    node_id: str = Field(
        default_factory=socket.gethostname, description="Name of this node in metrics (default: the host name)."
    )
    consumer_reading: Literal["shared", "group"] = Field(
        "shared",
        description="How a consumers process that runs every partition of its subscriptions (one node, not a "
        "cluster) reads Kafka: 'shared', one Kafka consumer for all of them (a subscription that falls behind reads "
        "on its own until it catches up); 'group', a Kafka consumer per subscription in its consumer group, as a "
        "cluster's nodes always do (docs/subscribing.md).",
    )
    consumer_session_timeout_ms: int = Field(
        6000,
        ge=1000,
        le=300_000,
        description="Kafka consumer group session timeout: how soon a crashed consumer node's partitions go to "
        "another (a node that stops leaves its groups at once). Kafka's default smallest allowed is 6000; the "
        "embedded broker allows 1000.",
    )
    consumer_fetch_wait_ms: int = Field(
        500,
        ge=1,
        le=60_000,
        description="Longest wait of a consumer's fetch for new messages (librdkafka fetch.wait.max.ms). Kafka "
        "answers as soon as a message arrives, so this bounds idle fetches, not delivery latency.",
    )
    consumer_read_ahead_messages: int = Field(
        200,
        ge=0,
        le=100_000,
        description="Messages a SERIAL consumer reads ahead of its inflightSize window, so that a finished "
        "delivery starts the next one at once (read but unfinished messages are never committed).",
    )
    consumer_read_ahead_bytes: int = Field(
        4 * 1024 * 1024,
        ge=64 * 1024,
        description="Bytes of read-ahead messages a SERIAL consumer holds at most (per subscription).",
    )
    consumer_offloaded_bytes: int = Field(
        512 * 1024 * 1024,
        ge=1024 * 1024,
        description="Bytes of fetched offloaded (large) message bodies the consumers process holds at once, across "
        "all subscriptions, from their fetch until their message is finished; a fetch waits for room, and a body "
        "larger than this goes alone.",
    )
    consumer_restart_backoff: float = Field(
        1.0, gt=0, description="Seconds before restarting a crashed consumer; doubles with each crash in a row."
    )
    consumer_restart_backoff_max: float = Field(
        60.0, gt=0, description="Longest wait before restarting a crashed consumer (seconds)."
    )
    endpoint_address_resolver: str = Field(
        "hermes.consumers.resolver:EndpointItself",
        description="Endpoint address resolver (module:Class): the endpoint itself, or e.g. "
        "hermes.consumers.resolver:StaticAddressList for the addresses listed in endpointAddressResolverMetadata.",
    )
    # --- cluster: distributed mode, with the ZooKeeper metadata store (docs/cluster.md) ---
    consumers_per_subscription: int = Field(
        2, ge=1, le=100, description="Consumer nodes that deliver each subscription (a workload constraint overrides)."
    )
    max_subscriptions_per_consumer: int = Field(
        200, ge=1, le=100_000, description="Most subscriptions the coordinator assigns to one consumer node."
    )
    cluster_session_timeout: float = Field(
        10.0,
        ge=1,
        le=300,
        description="ZooKeeper session timeout of a cluster member: a dead node leaves the cluster (and its "
        "subscriptions are assigned anew) this long after it stopped answering. A ZooKeeper that falls silent is "
        "noticed within two thirds of it.",
    )
    cluster_report_interval: float = Field(
        5.0, gt=0, le=300, description="Seconds between a member's load reports (and the coordinator's rounds)."
    )
    cluster_standby_timeout: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="Seconds after the node of a one-node subscription left before its first standby takes it "
        "over if no coordinator did; the second standby waits twice as long, and so on.",
    )
    cluster_move_interval: float = Field(
        60.0, gt=0, description="Least seconds between two moves of a subscription by load."
    )
    cluster_load_high: float = Field(
        0.8, gt=0, description="CPU load (cores, smoothed) above which a node sheds its heaviest subscription."
    )
    cluster_load_low: float = Field(
        0.5,
        gt=0,
        description="CPU load below which a node may take a subscription moved by load (less than the high one).",
    )
    # --- pipeline: the Spark process (hermes pipeline) and offline storage ---
    pipeline: bool = Field(True, description="`hermes run` also runs the Spark pipeline, as a child process.")
    spark_master: str = Field("local[*]", description="Spark master of the pipeline, e.g. spark://host:7077.")
    spark_remote: str | None = Field(
        None, description="Spark Connect server (sc://host:port) to run the pipeline on instead of a master."
    )
    pipeline_driver_memory: str = Field(
        "1g",
        pattern=r"^[1-9][0-9]*[mMgG]$",
        description="Largest Java heap of the pipeline's Spark driver (spark.driver.memory; with a local master it "
        "runs the executors too). The heap starts at 64 MiB and grows only as far as the work needs, so an idle "
        "pipeline holds far less; below 1g archiving a backlog mostly collects garbage. Spark needs at least 450m.",
    )
    pipeline_heap_release_after: float = Field(
        60.0,
        ge=0,
        description="Seconds without a Spark job or micro-batch after which the pipeline's Spark driver gives back "
        "the heap a backlog grew (a few full collections, once per idle period); 0: never.",
    )
    pipeline_lake: str | None = Field(
        None,
        description="Root of the offline storage lake: a directory or any Spark-writable URI "
        "(default: pipeline/lake in the data directory).",
    )
    pipeline_checkpoints: str | None = Field(
        None,
        description="Directory or URI of the pipeline's streaming checkpoints "
        "(default: pipeline/checkpoints in the data directory).",
    )
    pipeline_trigger_interval: float = Field(1.0, gt=0, description="Seconds between archive micro-batches.")
    pipeline_max_records_per_batch: int | None = Field(
        None, ge=1, description="At most this many Kafka records per archive micro-batch (default: all available)."
    )
    pipeline_retention_interval: float = Field(
        3600.0,
        gt=0,
        description="Seconds between retention passes over the lake: DELETE of the hours past their topic's "
        "retention, then VACUUM.",
    )
    pipeline_optimize_interval: float = Field(
        3600.0, ge=0, description="Seconds between compactions of the lake (Delta's OPTIMIZE); 0: never."
    )
    pipeline_vacuum_retention_hours: float = Field(
        168.0,
        ge=0,
        description="Hours VACUUM keeps the files that the lake's newest version no longer uses (readers and "
        "time travel to versions this young keep working).",
    )
    pipeline_jobs: str = Field(
        "all", description="Comma-separated names of the pipeline jobs to run (archive, tracking, ...), or all."
    )

    # --- pipeline: tracking and offline retransmission ---
    pipeline_tracking_dir: Path | None = Field(
        None,
        description="Where the tracking job writes traces and delivery statistics and management reads them "
        "(default: pipeline/tracking in the data directory). A local directory: management reads it.",
    )
    pipeline_tracking_trigger: float = Field(
        1.0, gt=0, description="Seconds between micro-batches of the trace table (a trace shows up within ~this)."
    )
    pipeline_statistics_trigger: float = Field(
        5.0, gt=0, description="Seconds between micro-batches of the per-minute delivery statistics."
    )
    pipeline_tracking_compaction_interval: float = Field(
        600.0, gt=0, description="Seconds between upkeep passes of the tracking tables (retention, VACUUM, OPTIMIZE)."
    )
    pipeline_trace_retention: float = Field(
        7 * 24 * 3600.0,
        gt=0,
        description="Seconds trace events and delivery statistics are kept (default 7 days); applied at each "
        "upkeep pass of the tracking tables.",
    )
    pipeline_retransmission_poll: float = Field(
        2.0, gt=0, description="Seconds between looks for new offline retransmission tasks."
    )


# Settings whose values must keep an order: (lower, upper, whether they may be equal).
_ORDERED = (
    ("cluster_load_low", "cluster_load_high", False),  # the gap between them is what stops moves oscillating
    ("consumer_restart_backoff", "consumer_restart_backoff_max", True),
)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def scram_users(settings: Settings) -> dict[str, str]:
    """``--kafka-scram-users`` as user name -> password."""
    users = {}
    text = settings.kafka_scram_users.get_secret_value() if settings.kafka_scram_users else ""
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, colon, password = entry.partition(":")
        if not colon or not name.strip() or not password:
            raise UsageError("--kafka-scram-users: each user is name:password (the passwords are not shown)")
        users[name.strip()] = password
    return users


def load_settings(overrides: dict[str, Any] | None = None, config_file: Path | None = None) -> Settings:
    """Build the settings from flags (``overrides``), the environment and an optional TOML file. Raises
    ``UsageError`` naming the flag, environment variable or file key of each bad value."""
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    path, named_by = config_file, "--config"
    if path is None and os.environ.get("HERMES_CONFIG"):
        path, named_by = Path(os.environ["HERMES_CONFIG"]), "HERMES_CONFIG"
    file_values = read_config_file(path, named_by) if path is not None else {}

    class _Settings(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return init_settings, env_settings, InitSettingsSource(settings_cls, file_values)

    def origin(name: str) -> str:  # the first source that has a value for it, in order of precedence
        env = ENV_PREFIX + name.upper()
        if name in flags:
            return flag(name)
        if any(key.upper() == env for key in os.environ):
            return env
        return f"{name} in {path}" if name in file_values else name

    try:
        settings = _Settings(**flags)
    except PydanticValidationError as exc:
        lines = dict.fromkeys(
            f"{origin(str(error['loc'][0]) if error['loc'] else 'settings')}: {problem(error, Settings.model_fields)}"
            for error in exc.errors()
        )
        raise UsageError("\n".join(lines)) from None
    disordered = [
        f"{origin(low)} ({getattr(settings, low):g}) must be {'at most' if equal else 'less than'} "
        f"{origin(high)} ({getattr(settings, high):g})"
        for low, high, equal in _ORDERED
        if getattr(settings, low) > getattr(settings, high)
        or (not equal and getattr(settings, low) == getattr(settings, high))
    ]
    if disordered:
        raise UsageError("\n".join(disordered))
    return settings
