"""Which commands use which settings: each section's fields become flags of its commands, shown together in
their ``--help``."""

from __future__ import annotations

from dataclasses import dataclass

from hermes.config import Settings


@dataclass(frozen=True)
class Section:
    """Settings used by the same commands, shown together in those commands' ``--help``."""

    title: str
    commands: tuple[str, ...]
    fields: tuple[str, ...]


EVERY_PROCESS = ("run", "frontend", "consumers", "management", "pipeline")
SERVERS = ("run", "frontend", "consumers", "management")

# Shown first in a command's --help, in this order: what a new user sets before anything else.
ESSENTIALS = (
    "data_dir",
    "host",
    "frontend_port",
    "management_port",
    "log_level",
    "kafka_bootstrap_servers",
    "metadata_store",
    "zookeeper_connect",
    "pipeline",
    "pipeline_lake",
    "tls_cert_file",
    "tls_key_file",
    "auth_jwt_issuer",
)

# What a flag's value is, where neither its unit nor its type says it (the rest: ``hermes.cli.value_name``).
VALUE_NAMES = {
    "host": "ADDRESS",
    "cluster_name": "NAME",
    "node_id": "NAME",
    "inactive_topics_whitelist": "TOPIC,...",
    "auth_jwt_issuer": "URL",
    "auth_jwt_audience": "AUDIENCE",
    "kafka_bootstrap_servers": "HOST:PORT,...",
    "kafka_sasl_mechanism": "MECHANISM",
    "kafka_sasl_username": "NAME",
    "kafka_sasl_password": "PASSWORD",
    "kafka_scram_users": "NAME:PASSWORD,...",
    "zookeeper_connect": "HOST:PORT,...",
    "zookeeper_root": "ZNODE",
    "frontend_propagated_headers": "HEADER,...",
    "offload_s3_bucket": "BUCKET",
    "offload_s3_prefix": "PREFIX",
    "offload_s3_region": "REGION",
    "endpoint_address_resolver": "MODULE:CLASS",
    "cluster_session_timeout": "SECONDS",
    "cluster_load_high": "CORES",
    "cluster_load_low": "CORES",
    "spark_master": "MASTER_URL",
    "spark_remote": "sc://HOST:PORT",
    "pipeline_driver_memory": "SIZE",
    "pipeline_heap_release_after": "SECONDS",
    "pipeline_lake": "DIR_OR_URI",
    "pipeline_checkpoints": "DIR_OR_URI",
    "pipeline_jobs": "JOB,...",
}

# Every field belongs to one section (a unit test checks); a field missing here is shown by every command.
SECTIONS = (
    Section("process", (*EVERY_PROCESS, "users", "secrets"), ("data_dir", "host", "log_level")),
    Section(
        "authentication",
        EVERY_PROCESS,  # each serves metrics to authenticated scrapes
        (
            "auth_jwt_issuer",
            "auth_jwt_jwks_url",
            "auth_jwt_audience",
            "auth_failed_logins_per_minute",
            "publish_authentication",
        ),
    ),
    Section("TLS", SERVERS, ("tls_cert_file", "tls_key_file")),
    Section(
        "HTTP edge",
        EVERY_PROCESS,
        (
            "http_header_timeout",
            "http_body_timeout",
            "http_body_min_rate",
            "http_keepalive_timeout",
            "http_max_connections",
        ),
    ),
    Section(
        "Kafka cluster",
        EVERY_PROCESS,
        (
            "kafka_bootstrap_servers",
            "kafka_security_protocol",
            "kafka_sasl_mechanism",
            "kafka_sasl_username",
            "kafka_sasl_password",
            "kafka_ssl_ca_location",
            "kafka_scram_users",
            "kafka_connect_timeout",
            "kafka_admin_timeout",
        ),
    ),
    Section(
        "metadata store",
        (*EVERY_PROCESS, "secrets"),
        ("metadata_store", "zookeeper_connect", "zookeeper_root", "metadata_poll_interval"),
    ),
    Section(
        "roles",
        SERVERS,
        (
            "event_loop",
            "cluster_name",
            "node_id",
            "embedded_broker_port",
            "topic_partitions",
            "topic_reconcile_interval",
        ),
    ),
    Section("hermes run", ("run",), ("embedded_broker_heap_mb", "embedded_broker_restart_backoff", "pipeline")),
    Section(
        "frontend",
        ("run", "frontend"),
        (
            "frontend_port",
            "frontend_ack_leader_timeout",
            "frontend_ack_all_timeout",
            "frontend_propagated_headers",
            "frontend_journal_max_bytes",
            "frontend_journal_fsync",
            "frontend_journal_fsync_interval",
            "frontend_shutdown_wait",
        ),
    ),
    Section(
        "large messages",
        ("run", "frontend"),
        (
            "offload_max_message_size",
            "offload_advertised_url",
            "offload_expiry_interval",
            "offload_store",
            "offload_s3_bucket",
            "offload_s3_prefix",
            "offload_s3_endpoint_url",
            "offload_s3_region",
        ),
    ),
    Section("hermes frontend", ("frontend",), ("workers",)),
    Section(
        "management",
        ("run", "management"),
        (
            "management_port",
            "inactive_topics_threshold",
            "inactive_topics_whitelist",
            "signing_secret_overlap",
            "ui",
            "ui_frontend_url",
        ),
    ),
    Section(
        "consumers",
        ("run", "consumers"),
        (
            "consumer_tls_ca_file",
            "consumer_commit_interval",
            "consumer_metrics_interval",
            "consumer_rate_period",
            "consumer_heartbeat_interval",
            "consumer_failure_log_interval",
            "consumer_reading",
            "consumer_session_timeout_ms",
            "consumer_fetch_wait_ms",
            "consumer_read_ahead_messages",
            "consumer_read_ahead_bytes",
            "consumer_offloaded_bytes",
            "consumer_restart_backoff",
            "consumer_restart_backoff_max",
            "endpoint_address_resolver",
        ),
    ),
    Section("hermes consumers", ("consumers",), ("consumers_port",)),
    Section("cluster", SERVERS, ("cluster_session_timeout", "cluster_report_interval")),
    Section(
        "consumers cluster",
        ("run", "consumers"),
        (
            "consumers_per_subscription",
            "max_subscriptions_per_consumer",
            "cluster_standby_timeout",
            "cluster_move_interval",
            "cluster_load_high",
            "cluster_load_low",
        ),
    ),
    Section("tracing", ("run", "frontend", "consumers"), ("tracing",)),
    Section("tracking", ("run", "management", "pipeline"), ("pipeline_tracking_dir",)),
    Section(
        "pipeline",
        ("run", "pipeline"),
        (
            "pipeline_port",
            "spark_master",
            "spark_remote",
            "pipeline_driver_memory",
            "pipeline_heap_release_after",
            "pipeline_lake",
            "pipeline_checkpoints",
            "pipeline_trigger_interval",
            "pipeline_max_records_per_batch",
            "pipeline_retention_interval",
            "pipeline_optimize_interval",
            "pipeline_vacuum_retention_hours",
            "pipeline_jobs",
            "pipeline_tracking_trigger",
            "pipeline_statistics_trigger",
            "pipeline_tracking_compaction_interval",
            "pipeline_trace_retention",
            "pipeline_retransmission_poll",
        ),
    ),
)


def sections_of(command: str) -> list[Section]:
    """The sections of the settings ``command`` uses, in order, plus any field no section names yet."""
    sections = [section for section in SECTIONS if command in section.commands]
    named = {name for section in SECTIONS for name in section.fields}
    unsorted = tuple(name for name in Settings.model_fields if name not in named)
    if unsorted and command in EVERY_PROCESS:
        sections.append(Section("other", EVERY_PROCESS, unsorted))
    return sections


def commands_of(name: str) -> tuple[str, ...]:
    """The commands that use the setting ``name``."""
    return next((section.commands for section in SECTIONS if name in section.fields), EVERY_PROCESS)
