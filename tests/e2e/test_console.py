"""The web console in a real browser (Debian's Chromium through its chromedriver, nothing downloaded): a topic and
a subscription made through the forms, a test message published and watched arriving, retransmission, a trace,
suspension; then, with authentication on, the login page and a forbidden action refused. The screenshots of
docs/console.md are taken here, so that they show the console as it is: into docs/console when
HERMES_CONSOLE_SCREENSHOTS=docs/console asks for them, else into a temporary directory (a run leaves the tree as it
was)."""

from __future__ import annotations

import base64
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import httpx
import orjson
import pyarrow as pa
import pytest
from deltalake import write_deltalake
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.wait import WebDriverWait

from hermes.broker.embedded import EmbeddedBroker
from hermes.domain.trace import TraceEvent
from hermes.metadata.factory import sqlite_path
from hermes.pipeline.traces import TRACES, tracking_root
from hermes.runtime import Role
from hermes.security.passwords import hash_password
from hermes.security.users import ADMIN, User, UserStore
from tests.support.hermes import InProcessHermes, hermes_settings, unique
from tests.support.subscriber import Reply, SubscriberServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"  # Debian's chromium, chromium-driver
ROOT = Path(__file__).parents[2]
PASSWORDS = {"root": "root-password-0001", "alice": "alice-password-0001", "bob": "bob-password-00001"}


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(argument)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SE_OFFLINE", "true")  # Selenium Manager must not fetch a browser or a driver
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def secured(kafka: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessHermes]:
    """A management process with authentication on: root (admin), alice (team-a) and bob (team-b)."""
    data_dir = tmp_path_factory.mktemp("secured-console")
    store = UserStore.in_data_dir(data_dir)
    store.save(User("root", hash_password(PASSWORDS["root"]), frozenset({ADMIN})))
    store.save(User("alice", hash_password(PASSWORDS["alice"]), owners=frozenset({"team-a"})))
    store.save(User("bob", hash_password(PASSWORDS["bob"]), owners=frozenset({"team-b"})))
    running = InProcessHermes(hermes_settings(data_dir, kafka.bootstrap_servers), frozenset({Role.MANAGEMENT}))
    yield running.start()
    running.stop()


def submit(browser: WebDriver, form: str, **fields: str) -> None:
    """Fills the form's fields (text, selects), presses its first button and waits for the next page."""
    for name, value in fields.items():
        field = browser.find_element(By.CSS_SELECTOR, f"#{form} [name={name}]")
        if field.tag_name == "select":
            Select(field).select_by_visible_text(value)
        else:
            field.clear()
            field.send_keys(value)
    press(browser, browser.find_element(By.CSS_SELECTOR, f"#{form} button"))


def press(browser: WebDriver, button: WebElement) -> None:
    """Clicks and waits until the next page has loaded (a mark on the old page's window is gone)."""
    browser.execute_script("window.oldPage = true")
    button.click()
    loaded = "return !window.oldPage && document.readyState === 'complete'"
    WebDriverWait(browser, 20, ignored_exceptions=[WebDriverException]).until(lambda b: b.execute_script(loaded))


def text(browser: WebDriver, selector: str) -> str:
    """The element's text, read at once (htmx may swap the element between a look-up and a read)."""
    found = browser.execute_script("const e = document.querySelector(arguments[0]); return e && e.innerText", selector)
    assert found is not None, f"no {selector} in {browser.current_url}"
    return str(found).strip()


def record_trace(hermes: InProcessHermes, topic: str, subscription: str, message_id: str) -> None:
    """The rows the pipeline's tracking job (Spark: too slow to start here; tests/spark runs it) writes for a
    message published and delivered, in the table management reads traces from."""
    now = int(time.time() * 1000)
    events = [
        TraceEvent(message_id, now, topic, "INFLIGHT", "primary"),
        TraceEvent(message_id, now + 5, topic, "SUCCESS", "primary", subscription, 0, 0, publishTimestamp=now),
    ]
    day = datetime.fromtimestamp(now / 1000, UTC).strftime("%Y-%m-%d")
    rows = [
        {**asdict(event), "trackingPartition": 0, "trackingOffset": i, "topic": topic, "date": day}
        for i, event in enumerate(events)
    ]
    numbers = {"timestamp", "partition", "offset", "publishTimestamp", "trackingPartition", "trackingOffset"}
    schema = pa.schema([(name, pa.int64() if name in numbers else pa.string()) for name in rows[0]])
    table = tracking_root(hermes.hermes.settings) / TRACES
    write_deltalake(str(table), pa.Table.from_pylist(rows, schema), partition_by=["topic", "date"], mode="append")


def texts(browser: WebDriver, selector: str) -> list[str]:
    found = browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText)", selector
    )
    return [str(t).strip() for t in found]


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("HERMES_CONSOLE_SCREENSHOTS")
    return ROOT / wanted if wanted else tmp_path_factory.mktemp("console-screenshots")


def shot(browser: WebDriver, screenshots: Path, name: str) -> None:
    screenshots.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(screenshots / f"{name}.png"))


def test_a_topic_and_subscription_made_in_the_console_deliver(
    browser: WebDriver, screenshots: Path, hermes: InProcessHermes, subscriber: SubscriberServer
) -> None:
    ui = hermes.management_url + "/ui"
    group = unique("shop")
    topic = f"{group}.orders"
    browser.get(ui + "/")
    submit(browser, "create-group", groupName=group)
    assert text(browser, "#notice") == f"Group {group} created"
    submit(browser, "create-topic", name=topic, description="Orders placed", owner="team-shop")
    assert browser.current_url == f"{ui}/topics/{topic}?done=Topic%20{topic}%20created"

    # the API's own validation message, naming the field
    submit(browser, "create-subscription", name="invoices", endpoint="not-a-url", owner="team-shop")
    assert text(browser, "#error").startswith("400 VALIDATION_ERROR: endpoint:")
    submit(browser, "create-subscription", name="invoices", endpoint=subscriber.url, owner="team-shop")
    assert text(browser, "#state") in ("PENDING", "ACTIVE")
    hermes.consumer(topic, "invoices")

    browser.get(f"{ui}/topics/{topic}")
    submit(browser, "publish", body='{"order": 1}')
    message_id = text(browser, "#published-id code")
    assert subscriber.wait_for(1)[0].message_id == message_id
    assert text(browser, "#subscriptions .badge") in ("HEALTHY", "NO_DATA")
    shot(browser, screenshots, "topic")

    # the metrics panel refreshes itself (htmx) until the delivery shows
    press(browser, browser.find_element(By.LINK_TEXT, "invoices"))
    wait_until(lambda: text(browser, "#delivered") == "1", timeout=20)
    wait_until(lambda: text(browser, "#health") == "HEALTHY", timeout=20)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#metrics svg.chart")) == 3

    press(browser, browser.find_element(By.ID, "hour-ago"))
    assert "partition" in text(browser, "#retransmitted")
    assert len(subscriber.wait_for(2)) == 2  # the message again, from an hour ago
    wait_until(lambda: text(browser, "#delivered") == "2", timeout=20)
    assert httpx.post(f"{hermes.frontend_url}/topics/{topic}", json={"order": 2}).status_code in (201, 202)
    wait_until(lambda: text(browser, "#delivered") == "3", timeout=20)  # the panel refreshes itself (htmx)
    shot(browser, screenshots, "subscription")

    submit(browser, "trace", messageId=message_id)
    assert "no trace events" in text(browser, "#trace-events")  # tracking is off: the API has none
    record_trace(hermes, topic, "invoices", message_id)
    submit(browser, "trace", messageId=message_id)
    statuses = [row.split()[1] for row in texts(browser, "#trace-events tr")[1:]]
    assert statuses == ["INFLIGHT", "SUCCESS"]

    submit(browser, "edit-subscription", rate="50")
    policy = httpx.get(f"{hermes.management_url}/topics/{topic}/subscriptions/invoices").json()["subscriptionPolicy"]
    assert (policy["rate"], policy["messageTtl"]) == (50, 3600)
    press(browser, browser.find_element(By.ID, "suspend"))
    assert text(browser, "#state") == "SUSPENDED"
    assert text(browser, "#notice") == "Subscription suspended"
    assert httpx.get(f"{hermes.management_url}/topics/{topic}/subscriptions/invoices").json()["state"] == "SUSPENDED"

    other = unique("other")
    owner = {"source": "Plaintext", "id": "team-other"}
    with httpx.Client(base_url=hermes.management_url) as api:
        assert api.post("/groups", json={"groupName": other}).status_code == 201
        assert api.post("/topics", json={"name": f"{other}.t", "description": "d", "owner": owner}).status_code == 201
    browser.get(ui + "/")
    topics = "#groups a[href*='/topics/']"
    assert {topic, f"{other}.t"} <= set(texts(browser, topics))
    browser.find_element(By.ID, "search").send_keys(group)  # filters as one types (htmx)
    wait_until(lambda: texts(browser, topics) == [topic], timeout=10)
    browser.get(ui + "/consumer-nodes")
    assert "not in distributed mode" in text(browser, "main")
    browser.get(ui + "/offline-retransmission")
    start, end = "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"
    submit(browser, "create-task", sourceTopic=topic, targetTopic=topic, startTimestamp=start, endTimestamp=end)
    assert "has no offline storage" in text(browser, "#error")
    browser.get(ui + "/oauth-providers")
    submit(browser, "create-provider", name=unique("idp"), tokenEndpoint="not a url", clientId="c", clientSecret="s")
    assert text(browser, "#error").startswith("400 VALIDATION_ERROR: tokenEndpoint:")


def test_the_console_deletes_only_after_confirmation(
    browser: WebDriver, screenshots: Path, hermes: InProcessHermes
) -> None:
    ui = hermes.management_url + "/ui"
    group = unique("scratch")
    browser.get(ui + "/")
    submit(browser, "create-group", groupName=group)
    submit(browser, "create-topic", name=f"{group}.gone", owner="team-x")
    submit(browser, "edit-topic", retention="3", retentionUnit="HOURS", description="edited")
    changed = httpx.get(f"{hermes.management_url}/topics/{group}.gone").json()
    assert changed["retentionTime"] == {"duration": 3, "retentionUnit": "HOURS"} and changed["description"] == "edited"
    assert changed["offlineStorage"]["retentionTime"] == {"duration": 60, "infinite": False}  # kept
    press(browser, browser.find_element(By.ID, "delete-topic"))
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Delete topic {group}.gone?"
    press(browser, browser.find_element(By.ID, "cancel"))
    assert browser.current_url == f"{ui}/topics/{group}.gone"
    assert httpx.get(f"{hermes.management_url}/topics/{group}.gone").status_code == 200  # not yet
    press(browser, browser.find_element(By.ID, "delete-topic"))
    press(browser, browser.find_element(By.ID, "confirm-delete"))
    assert text(browser, "#notice") == f"Topic {group}.gone deleted"
    assert httpx.get(f"{hermes.management_url}/topics/{group}.gone").status_code == 404
    shot(browser, screenshots, "topics")


def test_the_console_sets_what_happens_when_the_subscriber_fails_and_redrives_its_dead_letters(
    browser: WebDriver, screenshots: Path, hermes: InProcessHermes, servers: list[SubscriberServer]
) -> None:
    fixed = threading.Event()
    subscriber = SubscriberServer(lambda _i, _r: Reply(200 if fixed.is_set() else 400)).start()
    servers.append(subscriber)
    api = httpx.Client(base_url=hermes.management_url)
    group = unique("failing")
    topic = f"{group}.payments"
    owner = {"source": "Plaintext", "id": "team-pay"}
    assert api.post("/groups", json={"groupName": group}).status_code == 201
    assert api.post("/topics", json={"name": topic, "description": "d", "owner": owner}).status_code == 201
    ui = hermes.management_url + "/ui"
    browser.get(f"{ui}/topics/{topic}")

    def field(form: str, name: str, index: int = 0) -> WebElement:
        return browser.find_elements(By.CSS_SELECTOR, f"#{form} [name='{name}']")[index]

    for name, value in {"name": "ledger", "endpoint": subscriber.url, "owner": "team-pay", "ruleStatus": "409"}.items():
        field("create-subscription", name).send_keys(value)
    Select(field("create-subscription", "ruleAction")).select_by_visible_text("RETRY_AFTER")
    field("create-subscription", "ruleDelay").send_keys("100")
    Select(field("create-subscription", "backoffJitter")).select_by_visible_text("FULL")
    for box in ("stopRetryHeaderAllowed", "deadLetters", "circuitBreaker"):
        field("create-subscription", box).click()
    field("create-subscription", "breaker.consecutiveFailures").send_keys("50")
    press(browser, browser.find_element(By.CSS_SELECTOR, "#create-subscription button"))
    path = f"/topics/{topic}/subscriptions/ledger"
    created = api.get(path).json()
    policy = created["subscriptionPolicy"]
    assert policy["statusRules"] == [{"status": "409", "action": "RETRY_AFTER", "delay": 100}]
    assert (policy["backoffJitter"], policy["stopRetryHeaderAllowed"], "retryParking" in policy) == (
        "FULL",
        True,
        False,
    )
    assert created["deadLetters"] == {"enabled": True} and created["circuitBreaker"]["consecutiveFailures"] == 50

    field("edit-subscription", "ruleStatus").clear()  # the rule goes
    press(browser, browser.find_element(By.CSS_SELECTOR, "#edit-subscription button"))
    assert "statusRules" not in api.get(path).json()["subscriptionPolicy"]
    wait_until(lambda: text(browser, "#circuit-breaker") == "CLOSED", timeout=20)  # the panel refreshes itself

    hermes.consumer(topic, "ledger")
    assert httpx.post(f"{hermes.frontend_url}/topics/{topic}", json={"payment": 7}).status_code in (201, 202)
    subscriber.wait_for(1)  # refused with a 400: a dead letter
    press(browser, browser.find_element(By.ID, "dead-letters-link"))
    wait_until(lambda: browser.refresh() or texts(browser, "#dead-letters a"), timeout=20)
    press(browser, browser.find_element(By.CSS_SELECTOR, "#dead-letters a"))
    assert text(browser, "#dead-letter-body") == '{"payment":7}'
    fixed.set()
    press(browser, browser.find_element(By.CSS_SELECTOR, "#redrive-one button"))
    assert text(browser, "#notice").startswith("Redrive ") and text(browser, "#notice").endswith(" started")
    assert subscriber.wait_for(2)[1].body == b'{"payment":7}'
    wait_until(lambda: text(browser, "#redrive-jobs .redrive-status") == "DONE", timeout=20)  # refreshed (htmx)
    assert text(browser, "#redrive-jobs .redriven") == "1"
    shot(browser, screenshots, "dead-letters")
    press(browser, browser.find_element(By.ID, "purge-dead-letters"))
    press(browser, browser.find_element(By.ID, "confirm-delete"))
    assert text(browser, "#notice") == "1 dead letters purged"
    assert texts(browser, "#dead-letters td") == ["none"]

    browser.get(ui + path)  # parking, set while suspended: its reader of the retry topic never starts here
    press(browser, browser.find_element(By.ID, "suspend"))
    field("edit-subscription", "parkingThresholdMs").send_keys("2000")
    press(browser, browser.find_element(By.CSS_SELECTOR, "#edit-subscription button"))
    assert api.get(path).json()["subscriptionPolicy"]["retryParking"] == {"thresholdMs": 2000}
    api.close()


def test_a_topic_and_subscription_stored_before_a_rule_refused_them_are_shown_and_their_forms_correct_them(
    browser: WebDriver, hermes: InProcessHermes
) -> None:
    group = unique("older")
    topic = f"{group}.t"
    owner = {"source": "Plaintext", "id": "team-old"}
    with httpx.Client(base_url=hermes.management_url) as api:
        assert api.post("/groups", json={"groupName": group}).status_code == 201
        assert api.post("/topics", json={"name": topic, "description": "d", "owner": owner}).status_code == 201
        body = {"name": "old", "endpoint": "http://127.0.0.1:9/", "owner": owner, "state": "SUSPENDED"}
        assert api.post(f"/topics/{topic}/subscriptions", json=body).status_code == 201
        db = sqlite3.connect(sqlite_path(hermes.hermes.settings))  # as an older version stored it
        try:
            (stored,) = db.execute("SELECT body FROM subscriptions WHERE topic = ?", (topic,)).fetchone()
            data = orjson.loads(stored)
            data["subscriptionPolicy"].update(ordering="KEY", retryParking={"thresholdMs": 1000})
            db.execute("UPDATE subscriptions SET body = ? WHERE topic = ?", (orjson.dumps(data), topic))
            (stored,) = db.execute("SELECT body FROM topics WHERE name = ?", (topic,)).fetchone()
            db.execute(
                "UPDATE topics SET body = ? WHERE name = ?",
                (orjson.dumps({**orjson.loads(stored), "maxMessageSize": 1}), topic),
            )
            db.commit()
        finally:
            db.close()
        browser.get(f"{hermes.management_url}/ui/topics/{topic}")
        assert text(browser, "#error").startswith("400 STORED_ENTITY_INVALID: maxMessageSize:")
        assert text(browser, "#subscriptions .badge") == "INVALID"
        submit(browser, "edit-topic", maxMessageSize="10240")
        assert text(browser, "#notice") == "Topic saved" and "invalid" not in api.get(f"/topics/{topic}").json()
        press(browser, browser.find_element(By.LINK_TEXT, "old"))
        assert text(browser, "#error").startswith("400 STORED_ENTITY_INVALID: subscriptionPolicy.retryParking:")
        assert not browser.find_elements(By.ID, "metrics")
        browser.find_element(By.CSS_SELECTOR, "#edit-subscription [name=parkingThresholdMs]").clear()
        press(browser, browser.find_element(By.CSS_SELECTOR, "#edit-subscription button"))
        assert text(browser, "#notice") == "Subscription saved"
        corrected = api.get(f"/topics/{topic}/subscriptions/old").json()
        assert "invalid" not in corrected and "retryParking" not in corrected["subscriptionPolicy"]


def test_the_console_asks_to_sign_in_and_the_api_refuses_what_a_user_may_not_do(
    browser: WebDriver, screenshots: Path, secured: InProcessHermes
) -> None:
    root = {"Authorization": "Basic " + base64.b64encode(f"root:{PASSWORDS['root']}".encode()).decode()}
    with httpx.Client(base_url=secured.management_url, headers=root) as api:
        group = unique("pay")
        topic = f"{group}.payments"
        assert api.post("/groups", json={"groupName": group}).status_code == 201
        owner = {"source": "Plaintext", "id": "team-a"}
        assert api.post("/topics", json={"name": topic, "description": "d", "owner": owner}).status_code == 201
        ui = secured.management_url + "/ui"

        browser.get(f"{ui}/topics/{topic}")
        assert browser.current_url.startswith(f"{ui}/login?next=")
        submit(browser, "login", name="bob", password="not-bobs-password")
        assert text(browser, "#login-error") == "wrong name or password"
        shot(browser, screenshots, "login")
        submit(browser, "login", name="bob", password=PASSWORDS["bob"])
        assert browser.current_url == f"{ui}/topics/{topic}"  # back where the user was going
        secrets = (PASSWORDS["bob"], base64.b64encode(f"bob:{PASSWORDS['bob']}".encode()).decode())
        assert not [c for c in browser.get_cookies() for secret in secrets if secret in c["value"]]
        assert not browser.find_elements(By.ID, "edit-topic")  # bob does not own it: nothing to change is offered
        assert not browser.find_elements(By.ID, "delete-topic")

        browser.get(f"{ui}/topics/{topic}/delete")  # and the API refuses it anyway
        press(browser, browser.find_element(By.ID, "confirm-delete"))
        assert text(browser, "#error").startswith("403 PERMISSION_DENIED: bob may not DELETE")
        assert api.get(f"/topics/{topic}").status_code == 200
        browser.get(ui + "/")
        assert not browser.find_elements(By.ID, "create-group")  # admins only

        press(browser, browser.find_element(By.ID, "logout"))
        browser.get(f"{ui}/topics/{topic}")
        assert browser.current_url.startswith(f"{ui}/login")
        submit(browser, "login", name="alice", password=PASSWORDS["alice"])
        assert browser.find_element(By.ID, "edit-topic").is_displayed()  # alice owns it
        press(browser, browser.find_element(By.ID, "logout"))


def test_no_ui_serves_no_console(kafka: EmbeddedBroker, tmp_path: Path) -> None:
    settings = hermes_settings(tmp_path, kafka.bootstrap_servers, ui=False)
    running = InProcessHermes(settings, frozenset({Role.MANAGEMENT})).start()
    try:
        assert httpx.get(running.management_url + "/ui/").status_code == 404
        assert httpx.get(running.management_url + "/groups").status_code == 200
    finally:
        running.stop()
