"""The console's pure parts: names from a page's URL go into the API's paths as names only, signing in sends the
user back to a console page, never to another site, and the consumer nodes page renders distributed mode's
answer (the browser test runs without ZooKeeper, so it sees no nodes)."""

from __future__ import annotations

import pytest

from hermes.ui.api import Upstream
from hermes.ui.app import Console, segment
from hermes.ui.charts import WINDOW, History, svg
from hermes.ui.login import next_page

pytestmark = pytest.mark.unit


def test_a_name_stays_one_segment_of_the_api_path() -> None:
    assert segment("shop.orders") == "shop.orders"
    assert segment("..") == "%2E%2E" and segment(".") == "%2E"
    assert segment("a/b?c#d") == "a%2Fb%3Fc%23d"


def test_signing_in_returns_to_a_console_page_only() -> None:
    assert next_page("/ui/topics/shop.orders") == "/ui/topics/shop.orders"
    for elsewhere in ("https://evil.example/", "//evil.example/ui/", "/groups", "", None):
        assert next_page(elsewhere) == "/ui/"


def test_the_consumer_nodes_page_shows_each_node_with_its_load() -> None:
    node = {"nodeId": "node-2", "address": "http://10.0.0.2:8070", "coordinator": True, "load": {"cpu": 0.42},
            "subscriptions": ["g.t$a", "g.t$b"], "standbyFor": ["g.t$c"], "running": ["g.t$a", "g.t$b"],
            "deliveriesPerSecond": {"g.t$a": 10.5, "g.t$b": 2.0}, "updatedAt": 1795737822000}  # fmt: skip
    page = Console(Upstream(str, str)).templates.get_template("nodes.html")
    html = page.render(user=None, notice=None, error=None, nodes=[node], frontends=[])
    row = html[html.index("node-2") :]
    assert "coordinator" in row and "cpu 0.42" in row and "2 (+1 standby)" in row and "12.5" in row


def test_the_charts_rates_are_the_totals_growth_per_second_over_the_window() -> None:
    history = History()
    for at, delivered, lag in ((0.0, 10, 5), (0.5, 11, 5), (2.0, 30, 7), (4.0, 4, 0), (4.0 + WINDOW, 4, 0)):
        history.add({"totals": {"delivered": delivered, "codes2xx": delivered}, "lag": str(lag)}, at)
    rates = [(at, values["delivered"], values["codes2xx"], values["lag"]) for at, values in history.samples]
    # 0.5: under a second after the previous sample, not kept; 4.0: a restart's lower total is no growth;
    # the last one pushed out what is older than the window
    assert rates == [(4.0, 0.0, 0.0, 0.0), (4.0 + WINDOW, 0.0, 0.0, 0.0)]
    history = History()
    history.add({"totals": {"delivered": 10}, "lag": "5"}, 0.0)
    history.add({"totals": {"delivered": 30}, "lag": "7"}, 2.0)
    assert [values["delivered"] for _, values in history.samples] == [0.0, 10.0]
    assert "delivered/s 10" in svg(history, "Delivery rate", ("delivered",))
