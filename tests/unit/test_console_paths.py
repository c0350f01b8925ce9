"""The console's paths: names from a page's URL go into the API's paths as names only, and signing in sends the
user back to a console page, never to another site."""

from __future__ import annotations

import pytest

from hermes.ui.app import segment
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
