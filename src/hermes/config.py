"""Configuration: one settings object for every process.

Precedence, highest first: command-line flags, ``HERMES_*`` environment variables, the TOML config file
(``--config`` or ``HERMES_CONFIG``), then the defaults below. Every field becomes a ``--flag`` of the CLI with
its description as help, so ``hermes --help`` documents all of them.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

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
    pipeline_port: int = Field(
        8060, ge=0, le=65535, description="Port of `hermes pipeline`'s health and Prometheus endpoints (0 = any free)."
    )
    consumers_port: int = Field(
        8070, ge=0, le=65535, description="Port of `hermes consumers`' health and Prometheus endpoints (0 = any free)."
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
    kafka_connect_timeout: float = Field(
        15.0, gt=0, description="Seconds to wait for the Kafka cluster to answer at start-up."
    )
    embedded_broker_port: int = Field(
        9092, ge=0, le=65535, description="Port of the embedded Kafka broker on --host (0 = any free)."
    )
    embedded_broker_heap_mb: int = Field(
        1024, ge=128, le=65536, description="Largest Java heap of the embedded Kafka broker, in MiB."
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

    # --- consumers ---
    consumer_commit_interval: float = Field(
        1.0, gt=0, description="Seconds between offset commits of each subscription consumer."
    )
    consumer_metrics_interval: float = Field(
        1.0, gt=0, description="Seconds between metric snapshots (and retransmission checks) of each consumer."
    )
    consumer_rate_period: float = Field(1.0, gt=0, description="Seconds between adaptive rate adjustments.")
    consumer_heartbeat_interval: float = Field(
        60.0, gt=0, description="Seconds between attempts in the rate limiter's heartbeat mode."
    )
    node_id: str = Field(
        default_factory=socket.gethostname, description="Name of this node in metrics (default: the host name)."
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
    # --- pipeline: the Spark process (hermes pipeline) and offline storage ---
    pipeline: bool = Field(True, description="`hermes run` also runs the Spark pipeline, as a child process.")
    spark_master: str = Field("local[*]", description="Spark master of the pipeline, e.g. spark://host:7077.")
    spark_remote: str | None = Field(
        None, description="Spark Connect server (sc://host:port) to run the pipeline on instead of a master."
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
        3600.0, gt=0, description="Seconds between checks for lake hour partitions past their topic's retention."
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
        600.0, gt=0, description="Seconds between compactions of the trace table's small files."
    )
    pipeline_trace_retention: float = Field(
        7 * 24 * 3600.0,
        gt=0,
        description="Seconds trace events and delivery statistics are kept (default 7 days); applied before each "
        "compaction of the trace table.",
    )
    pipeline_retransmission_poll: float = Field(
        2.0, gt=0, description="Seconds between looks for new offline retransmission tasks."
    )


def load_settings(overrides: dict[str, Any] | None = None, config_file: Path | None = None) -> Settings:
    """Build the settings from flags (``overrides``), the environment and an optional TOML file."""
    path = config_file or (Path(os.environ["HERMES_CONFIG"]) if os.environ.get("HERMES_CONFIG") else None)

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
            sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
            if path is not None:
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
            return tuple(sources)

    return _Settings(**{k: v for k, v in (overrides or {}).items() if v is not None})
