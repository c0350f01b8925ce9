"""``hermes bench``: the benchmark suite. Every scenario runs beside its ceiling in the same run; every figure
is the median of several repetitions with min and max; every published message is reconciled against what
the subscribers received, and a run with a missing message is void and says so."""

from __future__ import annotations

import asyncio
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import aiohttp

from hermes.bench import delivery, integrations, isolation, parking, publish
from hermes.bench.cluster import cluster
from hermes.bench.footprint import footprint
from hermes.bench.idle import idle_cost
from hermes.bench.kafka_alone import produce_consume
from hermes.bench.load import Sink
from hermes.bench.offloaded import offloaded_message
from hermes.bench.publish_auth import publish_auth
from hermes.bench.publish_overhead import overhead
from hermes.bench.startup import STARTUP_COMMAND, startup
from hermes.bench.sustained import sustained
from hermes.bench.system import Management, System, run_alone
from hermes.broker.embedded import java_executable
from hermes.errors import StartupError
from hermes.jars import jar_paths


@dataclass(frozen=True)
class Plan:
    """How much of each scenario to run; ``quick`` takes about four minutes, ``full`` about thirty-five, on 2 cores
    (ten of them the sustained run)."""

    name: str
    reps: int = 3
    seconds: float = 4.0
    concurrency: int = 128  # wrk's connections for the publish maxima (publish.ALSO_CONCURRENCY too)
    overhead_rounds: int = 10  # of the keyed and traced publishing runs beside plain, each in turn (even: ABBA)
    auth_rounds: int = 6  # of the publishing runs with Basic credentials beside without, likewise
    rates: list[float] = field(default_factory=lambda: [250.0, 500.0, 1000.0, 2000.0])
    fanouts: list[int] = field(default_factory=lambda: [1, 10, 100])
    deliveries_per_burst: int = 6000  # divided among the messages: 6,000 x 1, 600 x 10, 60 x 100
    delivery_rate: float = 1000.0  # deliveries/s of the latency runs (publish rate x subscriptions)
    slow_rate: float = 500.0
    slow_delay: float = 0.25
    isolation_rate: float = isolation.RATE
    isolation_seconds: float = isolation.SECONDS
    isolation_pairs: int = isolation.PAIRS  # of phases, beside the failing subscriptions then alone
    parking_rate: float = parking.RATE
    parking_seconds: float = parking.SECONDS
    parking_pairs: int = parking.PAIRS  # of phases, beside the parking subscription then alone
    large_sizes: list[int] = field(default_factory=lambda: [1024, 64 * 1024, 256 * 1024, 900_000, 4 * 1024**2])
    large_count: int = 8
    offloaded_size: int = 100_000_000  # over its topic's maxMessageSize: stored beside Kafka
    raw_kafka_messages: int = 20_000
    parquet_rows: int = 20_000
    spark: bool = True
    sustained_seconds: float = 600.0  # at delivery_rate to one subscription
    sustained_window: float = 60.0  # the first and the last window compared
    startup_reps: int = 3  # each a fresh data directory and a restart on it
    idle_counts: list[int] = field(default_factory=lambda: [10, 100, 1000])  # subscriptions, idle, on one process
    many_rate: float = 2.0  # messages/s to each of the most idle_counts subscriptions, then
    many_seconds: float = 20.0
    footprint_seconds: float = 300.0  # hermes run and its pipeline left idle (with spark only)


FULL = Plan("full")
QUICK = Plan(
    "quick",
    seconds=1.0,
    overhead_rounds=4,
    auth_rounds=2,
    rates=[1000.0],
    fanouts=[1, 10],
    deliveries_per_burst=1500,
    slow_rate=300.0,
    isolation_pairs=2,
    parking_pairs=2,
    large_sizes=[1024, 256 * 1024, 900_000],
    large_count=3,
    raw_kafka_messages=5000,
    parquet_rows=5000,
    spark=False,
    sustained_seconds=60.0,
    sustained_window=10.0,
    startup_reps=1,
    idle_counts=[10, 100],
    many_seconds=10.0,
)


def machine() -> dict[str, Any]:
    cpu = "unknown"
    memory = 0
    try:
        cpu = next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            cpu,
        )
        memory = int(Path("/proc/meminfo").read_text().split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    versions = {}
    for package in ("hermes-broker", "aiohttp", "orjson", "confluent-kafka", "pyarrow", "pyspark"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "not installed"
    versions["Apache Kafka"] = _kafka_version()
    versions["Java"] = _java_version()
    loadavg = os.getloadavg()
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "ram_mib": memory,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "load_average_at_start": [round(x, 2) for x in loadavg],
    }


def _kafka_version() -> str:
    """The embedded broker's version, from its server jar's name (kafka-server-4.3.1.jar)."""
    try:
        server = [p.stem for p in jar_paths("kafka") if p.stem.startswith("kafka-server-")]
    except StartupError:
        return "not installed"
    return server[0].removeprefix("kafka-server-") if server else "unknown"


def _java_version() -> str:
    """The first line of ``java -version``, which the embedded broker runs on."""
    try:
        java = java_executable()
        result = subprocess.run([java, "-version"], check=False, capture_output=True, text=True, timeout=30)
    except (StartupError, OSError, subprocess.TimeoutExpired):
        return "not installed"
    return (result.stderr.splitlines() or ["unknown"])[0]


async def _scenarios(system: System, plan: Plan, log: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sink = Sink()
    await sink.start()
    try:
        async with aiohttp.ClientSession() as session:
            api = Management(session, system.management)
            log("publish: closed loop and fixed rates, beside a no-op endpoint")
            out["publish"] = await publish.publish(system, api, plan.seconds, plan.concurrency, plan.rates, plan.reps)
            log("delivery ceiling: a raw POST loop to the subscriber")
            out["raw_post"] = await delivery.raw_post_ceiling(sink, plan.seconds, 100, plan.reps)
            # before the fan-outs, so that what the 100-subscription fan-out leaves behind cannot affect it
            log("a slow subscription beside a fast one")
            out["slow_beside_fast"] = await delivery.slow_beside_fast(
                system, sink, api, plan.slow_rate, plan.seconds, plan.reps, plan.slow_delay
            )
            log("failing subscriptions beside a healthy one")
            out["failing_beside_healthy"] = await isolation.failing_beside_healthy(
                system, sink, api, plan.isolation_rate, plan.isolation_seconds, plan.isolation_pairs
            )
            log("a healthy subscription beside one parking its failures")
            out["healthy_beside_parking"] = await parking.healthy_beside_parking(
                system, sink, api, plan.parking_rate, plan.parking_seconds, plan.parking_pairs
            )
            log("a new subscription's first delivery")
            out["subscription_start"] = await delivery.subscription_start(system, sink, api, plan.reps)
            fanouts = []
            for n in plan.fanouts:
                log(f"SERIAL delivery to {n} subscription(s), and the same through Kafka alone")
                fanouts.append(
                    await delivery.serial_fanout(
                        system,
                        sink,
                        api,
                        n,
                        max(1, plan.deliveries_per_burst // n),
                        plan.delivery_rate / n,
                        plan.seconds,
                        plan.reps,
                    )
                )
            out["serial"] = fanouts
            log(f"a busy machine: {plan.delivery_rate:,.0f} msg/s to one subscription, quiet and beside two busy cores")
            out["busy_machine"] = await delivery.busy_machine(
                system, sink, api, plan.delivery_rate, plan.seconds, plan.reps
            )
            log(f"sustained: {plan.sustained_seconds:.0f} s at {plan.delivery_rate:,.0f} msg/s to one subscription")
            out["sustained"] = await sustained(
                system, sink, api, plan.delivery_rate, plan.sustained_seconds, plan.sustained_window
            )
            log("large messages")
            out["large"] = await publish.large_messages(system, sink, api, plan.large_sizes, plan.large_count)
            log(f"an offloaded message of {plan.offloaded_size:,} bytes")
            out["large"]["offloaded"] = await offloaded_message(system, sink, api, plan.offloaded_size)
        log("distributed mode: one subscription on one node vs two, and a node's failover")
        out["cluster"] = await cluster(system.broker.bootstrap_servers, sink, system.data_dir / "cluster")
    finally:
        await sink.stop()
    return out


def run(plan: Plan, log: Any = print) -> dict[str, Any]:
    began = time.monotonic()
    results: dict[str, Any] = {
        "command": shlex.join(["hermes", "bench", *sys.argv[2:]]) if sys.argv[1:2] == ["bench"] else "hermes bench",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "plan": asdict(plan),
        "machine": machine(),
    }
    log(f"start-up of `{STARTUP_COMMAND}` to ready, on a fresh data directory and on an existing one")
    started = startup(plan.startup_reps)  # first, on the machine alone
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as directory, System(Path(directory)) as system:
        broker_idle = system.memory()["broker"]
        results["scenarios"] = asyncio.run(_scenarios(system, plan, log))
        results["scenarios"]["startup"] = started
        results["scenarios"]["broker_idle_memory_kib"] = broker_idle
        log("ceiling: a raw confluent-kafka producer/consumer loop")
        results["raw_kafka"] = produce_consume(system.broker.bootstrap_servers, plan.raw_kafka_messages, 1024)
        log("BATCH delivery")
        consumers_pid = system.processes["consumers"].pid
        results["scenarios"]["batch"] = integrations.batch(
            system.management, system.frontend, consumers_pid, plan.name == "quick"
        )
        results["raw_parquet"] = integrations.pyarrow_writer(plan.parquet_rows, plan.reps)
        if plan.spark:
            log("Spark archive")
            results["scenarios"]["archive"] = integrations.archive()
        else:
            results["scenarios"]["archive"] = {"available": False, "note": "skipped by --quick"}
    log(f"subscriptions at rest ({', '.join(map(str, plan.idle_counts))}) and at {plan.many_rate:g} msg/s each")

    async def many(system: System, sink: Sink, api: Management) -> dict[str, Any]:
        return await idle_cost(system, sink, api, tuple(plan.idle_counts), plan.many_rate, plan.many_seconds)

    results["scenarios"]["many_subscriptions"] = asyncio.run(run_alone(many))
    log("publishing with and without publisher authentication (its own broker and users)")
    results["scenarios"]["publish_auth"] = publish_auth(plan.seconds, plan.concurrency, plan.auth_rounds)
    log("publishing with an Idempotency-Key and with tracing beside plain publishing, runs in turn")
    results["scenarios"]["publish_overhead"] = overhead(plan.seconds, plan.overhead_rounds, plan.concurrency)
    if plan.spark:
        log("the default install's memory: hermes run and its pipeline, one topic archived and one tracked, idle")
        results["scenarios"]["footprint"] = footprint(plan.footprint_seconds)
    results["void_reasons"] = void_reasons(results["scenarios"])
    results["void"] = bool(results["void_reasons"])
    results["duration_s"] = round(time.monotonic() - began, 1)
    return results


def void_reasons(scenarios: dict[str, Any]) -> list[str]:
    """The scenarios with a missing message (or that could not start): their figures do not count."""
    reasons = []
    for fanout in scenarios.get("serial", []):
        for part in ("latency", "throughput", "drain"):
            if fanout.get(part, {}).get("void") or fanout.get("error"):
                reasons.append(
                    f"serial x{fanout.get('subscriptions')} {part}: {fanout.get('error') or 'missing messages'}"
                )
        kafka = fanout.get("latency", {}).get("kafka_alone", {})
        if kafka.get("void"):
            reasons.append(
                f"Kafka alone x{fanout.get('subscriptions')} latency: {kafka.get('error') or 'missing messages'}"
            )
    for name in (
        "slow_beside_fast",
        "failing_beside_healthy",
        "subscription_start",
        "sustained",
        "startup",
        "large",
        "batch",
        "cluster",
        "footprint",
    ):
        scenario = scenarios.get(name, {})
        if scenario.get("void"):
            reasons.append(f"{name}: {scenario.get('error') or 'missing messages'}")
    return reasons
