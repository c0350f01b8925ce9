"""The operator's commands of ``hermes`` (topics, subscriptions, publish, tail) against a running broker: in this
process through ``main(argv)``, and ``tail`` and the start-up as real processes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermes.cli import main
from hermes.client import Connection, HermesClient
from tests.support.hermes import InProcessHermes, unique
from tests.support.subscriber import SubscriberServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e


def _hermes(capsys: pytest.CaptureFixture[str], hermes: InProcessHermes, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    urls = ["--management-url", hermes.management_url, "--frontend-url", hermes.frontend_url]
    code = main([*argv, *urls])
    out, err = capsys.readouterr()
    return code, out, err


def _topic(capsys: pytest.CaptureFixture[str], hermes: InProcessHermes) -> str:
    name = f"{unique('g')}.{unique('topic')}"
    code, _, err = _hermes(capsys, hermes, "topics", "create", name, "--owner", "team-a")
    assert code == 0 and "creating the group" in err
    return name


def test_topics_create_list_show_delete(capsys: pytest.CaptureFixture[str], hermes: InProcessHermes) -> None:
    topic = _topic(capsys, hermes)
    assert topic in _hermes(capsys, hermes, "topics", "list")[1].splitlines()
    code, out, _ = _hermes(capsys, hermes, "topics", "show", topic, "--output", "json")
    shown = json.loads(out)
    assert code == 0 and shown["name"] == topic and shown["owner"]["id"] == "team-a" and "published" in shown["metrics"]
    table = _hermes(capsys, hermes, "topics", "show", topic)[1]
    assert any(line.split() == ["contentType", "JSON"] for line in table.splitlines())
    assert _hermes(capsys, hermes, "topics", "delete", topic)[0] == 0
    assert topic not in _hermes(capsys, hermes, "topics", "list")[1].splitlines()


def test_errors_are_one_line_with_the_apis_message(capsys: pytest.CaptureFixture[str], hermes: InProcessHermes) -> None:
    code, out, err = _hermes(capsys, hermes, "topics", "show", "nogroup.nothing")
    assert (code, out) == (1, "") and err.startswith("hermes: ") and "nogroup.nothing" in err
    assert len(err.splitlines()) == 1
    code, _, err = _hermes(capsys, hermes, "subscriptions", "retransmit", "a.b", "c")
    assert code == 2 and "--since" in err and len(err.splitlines()) == 1
    code, _, err = _hermes(capsys, hermes, "subscriptions", "create", "a.b", "c", "http://x/", "--set", "oops")
    assert code == 2 and err == "hermes: --set: expected KEY=VALUE (got oops)\n"


def test_subscriptions_and_publish(
    capsys: pytest.CaptureFixture[str], hermes: InProcessHermes, subscriber: SubscriberServer, tmp_path: Path
) -> None:
    topic = _topic(capsys, hermes)
    policy = 'subscriptionPolicy={"rate": 50}'
    code, _, _ = _hermes(capsys, hermes, "subscriptions", "create", topic, "printer", subscriber.url, "--set", policy)
    assert code == 0
    assert _hermes(capsys, hermes, "subscriptions", "list", topic)[1] == "printer\n"
    wait_until(lambda: "ACTIVE" in _hermes(capsys, hermes, "subscriptions", "show", topic, "printer")[1], timeout=20)
    body = tmp_path / "order.json"
    body.write_text('{"orderId": 42}')
    code, out, _ = _hermes(capsys, hermes, "publish", topic, str(body), "--partition-key", "c7", "--output", "json")
    published = json.loads(out)
    assert code == 0 and published["status"] in (201, 202)
    (received,) = subscriber.wait_for(1)
    assert (received.message_id, received.body) == (published["messageId"], b'{"orderId": 42}')
    once = ("publish", topic, str(body), "--idempotency-key", "order-42", "--output", "json")
    first, again = (json.loads(_hermes(capsys, hermes, *once)[1]) for _ in range(2))
    assert again == {**first, "replayed": True} and "replayed" not in first
    assert _hermes(capsys, hermes, "subscriptions", "suspend", topic, "printer")[1].split() == ["state", "SUSPENDED"]
    assert _hermes(capsys, hermes, "subscriptions", "activate", topic, "printer")[1].split() == ["state", "ACTIVE"]


def test_retransmission_shows_its_progress_until_it_ends(
    capsys: pytest.CaptureFixture[str],
    hermes: InProcessHermes,
    subscriber: SubscriberServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = _topic(capsys, hermes)
    assert _hermes(capsys, hermes, "subscriptions", "create", topic, "again", subscriber.url)[0] == 0
    wait_until(lambda: "ACTIVE" in _hermes(capsys, hermes, "subscriptions", "show", topic, "again")[1], timeout=20)
    for n in range(3):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(f'{{"n": {n}}}'.encode())))
        assert _hermes(capsys, hermes, "publish", topic, "-")[0] == 0
    subscriber.wait_for(3)
    code, out, err = _hermes(
        capsys, hermes, "subscriptions", "retransmit", topic, "again", "--since=-1h", "--interval", "0.1"
    )
    assert code == 0 and "partitionOffsetListPerBrokerName" in out
    assert err.splitlines()[-1] == f"hermes: retransmission of {topic}$again: done, 3 messages handled again"
    assert len(subscriber.wait_for(6)) >= 6


def test_tail_follows_new_messages_and_removes_its_subscription(hermes: InProcessHermes) -> None:
    with HermesClient(Connection(hermes.management_url, hermes.frontend_url)) as client:
        group = unique("g")
        client.create_group(group)
        topic = f"{group}.{unique('topic')}"
        client.create_topic(topic)
        env = {**os.environ, "HERMES_MANAGEMENT_URL": hermes.management_url}
        tail = subprocess.Popen(
            [sys.executable, "-m", "hermes", "tail", topic, "--count", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert tail.stderr is not None
            assert "following" in tail.stderr.readline()
            result = client.publish(topic, b'{"hello": "tail"}')
            out, _ = tail.communicate(timeout=30)
        finally:
            tail.kill()
        assert tail.returncode == 0 and out == f'{result.message_id}  {{"hello": "tail"}}\n'
        assert client.subscriptions(topic) == []


def test_hermes_help_lists_the_operators_commands_without_importing_the_broker() -> None:
    code = "import sys; from hermes.cli import top_help; top_help(); "
    code += "print(sorted(m for m in sys.modules if m.startswith(('hermes.', 'pydantic', 'httpx'))))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "['hermes.admin_cli', 'hermes.cli', 'hermes.errors']"
    top = subprocess.run([sys.executable, "-m", "hermes", "--help"], capture_output=True, text=True, check=True)
    assert all(f"    {name}" in top.stdout for name in ("topics", "subscriptions", "publish", "tail"))


def test_offline_retransmission_is_created_and_its_task_answered(
    capsys: pytest.CaptureFixture[str], hermes: InProcessHermes
) -> None:
    source = f"{unique('g')}.{unique('topic')}"
    stored = 'offlineStorage={"enabled": true, "retentionTime": {"duration": 7}}'
    assert _hermes(capsys, hermes, "topics", "create", source, "--set", stored)[0] == 0
    target = _topic(capsys, hermes)
    window = ["--start", "2026-11-23T06:00:00Z", "--end", "2026-11-23T07:00:00Z"]
    code, out, err = _hermes(
        capsys, hermes, "topics", "retransmit", source, target, *window, "--no-wait", "--output", "json"
    )
    task = json.loads(out)
    assert code == 0 and (task["sourceTopic"], task["targetTopic"], task["status"]) == (source, target, "PENDING"), err
    code, _, err = _hermes(capsys, hermes, "topics", "retransmit", target, source, *window, "--no-wait")
    assert code == 1 and "offlineStorage" in err  # the API's own validation message, one line
