"""The Grafana dashboard and the Prometheus alerting rules of deploy/ name only metrics a running broker exports:
scraped from its /status/prometheus endpoints after deliveries that succeed and deliveries that are discarded."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from hermes.client import Connection, HermesClient
from tests.support.hermes import InProcessHermes, unique
from tests.support.subscriber import SubscriberServer, always
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
# Prometheus makes these itself, per scrape target: no process exports them
SCRAPE_METRICS = {"up"}
_NAME = re.compile(r"\b(?:hermes|process)_[a-z0-9_]+\b|\bup(?=\{)")


def _dashboard_expressions() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "hermes.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def _rule_expressions() -> list[str]:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def _family(sample_name: str) -> str:
    return re.sub(r"_(total|bucket|sum|count|created)$", "", sample_name)


def test_the_alerts_cover_what_on_call_must_know() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    names = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    assert {"HermesSubscriptionLagGrowing", "HermesSubscriptionFailing", "HermesNodeDown"} <= names
    assert {"HermesJournalNotEmpty", "HermesKafkaUnreachable"} <= names


def test_every_metric_the_dashboard_and_the_rules_name_is_exported(
    hermes: InProcessHermes, subscriber: SubscriberServer
) -> None:
    with HermesClient(Connection(hermes.management_url, hermes.frontend_url)) as client:
        group = unique("g")
        client.create_group(group)
        topic = f"{group}.{unique('topic')}"
        client.create_topic(topic)
        client.create_subscription(topic, "ok", subscriber.url)
        failing = {"messageTtl": 0, "messageBackoff": 10}
        client.create_subscription(topic, "failing", "http://127.0.0.1:1/", subscriptionPolicy=failing)
        for name in ("ok", "failing"):
            wait_until(lambda n=name: client.subscription(topic, n)["state"] == "ACTIVE", timeout=20)
        client.publish_many(topic, [b"{}"] * 3)
        subscriber.wait_for(3)
        wait_until(lambda: client.subscription_metrics(topic, "failing")["totals"]["discarded"] >= 3, timeout=20)
    exported: set[str] = set()
    for url in (hermes.management_url, hermes.frontend_url):
        text = httpx.get(f"{url}/status/prometheus", timeout=10).text
        exported |= {_family(family.name) for family in text_string_to_metric_families(text)}
        assert f'hermes_consumers_lag{{subscription="ok",topic="{topic}"}}' in text
    named = {_family(name) for expr in _dashboard_expressions() + _rule_expressions() for name in _NAME.findall(expr)}
    assert "hermes_consumers_lag" in named and len(named) > 10
    assert sorted(named - exported - SCRAPE_METRICS) == []


def test_the_lag_gauge_counts_what_the_subscriber_has_not_taken(hermes: InProcessHermes) -> None:
    refusing = SubscriberServer(always(503)).start()
    try:
        with HermesClient(Connection(hermes.management_url, hermes.frontend_url)) as client:
            group = unique("g")
            client.create_group(group)
            topic = f"{group}.{unique('topic')}"
            client.create_topic(topic)
            client.create_subscription(topic, "slow", refusing.url)
            wait_until(lambda: client.subscription(topic, "slow")["state"] == "ACTIVE", timeout=20)
            client.publish_many(topic, [b"{}"] * 5)
            sample = f'hermes_consumers_lag{{subscription="slow",topic="{topic}"}} 5.0'
            wait_until(lambda: sample in httpx.get(f"{hermes.management_url}/status/prometheus").text, timeout=20)
            assert client.subscription_metrics(topic, "slow")["lag"] == "5"  # the API's figure, from the broker
    finally:
        refusing.stop()
