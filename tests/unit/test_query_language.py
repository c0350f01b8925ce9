"""Hermes' query language on JSON documents, as Hermes evaluates it."""

from __future__ import annotations

from typing import Any

import pytest

from hermes.errors import InvalidQuery
from hermes.management import query

pytestmark = pytest.mark.unit

TOPICS = [
    {"name": "pl.allegro.orders", "owner": {"id": "Team A"}, "maxMessageSize": 1024, "trackingEnabled": True},
    {"name": "pl.allegro.payments", "owner": {"id": "team b"}, "maxMessageSize": 4096, "trackingEnabled": False},
    {"name": "com.example.clicks", "owner": {"id": "Team A"}, "maxMessageSize": "n/a"},
]


def names(document: Any) -> list[str]:
    return [t["name"] for t in query.select(document, TOPICS)]


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ({}, ["pl.allegro.orders", "pl.allegro.payments", "com.example.clicks"]),
        ({"name": "pl.allegro.orders"}, ["pl.allegro.orders"]),
        ({"owner.id": {"eq": "Team A"}}, ["pl.allegro.orders", "com.example.clicks"]),
        ({"owner.id": {"ne": "Team A"}}, ["pl.allegro.payments"]),
        ({"name": {"like": "(?i).*ALLEGRO.*"}}, ["pl.allegro.orders", "pl.allegro.payments"]),
        ({"name": {"like": "allegro"}}, []),  # the whole value must match
        ({"name": {"in": ["pl.allegro.orders", "x"]}}, ["pl.allegro.orders"]),
        ({"maxMessageSize": "1024"}, ["pl.allegro.orders"]),  # equal as text
        ({"trackingEnabled": "true"}, ["pl.allegro.orders"]),  # booleans print as Java prints them
        ({"maxMessageSize": {"gt": 2000}}, ["pl.allegro.payments", "com.example.clicks"]),  # not a number passes
        ({"maxMessageSize": {"lt": 2000}}, ["pl.allegro.orders", "com.example.clicks"]),
        ({"not": {"owner.id": "Team A"}}, ["pl.allegro.payments"]),
        ({"or": [{"name": "pl.allegro.orders"}, {"owner.id": "team b"}]}, ["pl.allegro.orders", "pl.allegro.payments"]),
        ({"and": [{"owner.id": "Team A"}, {"name": {"like": "pl\\..*"}}]}, ["pl.allegro.orders"]),
        ({"OR": [{"name": "com.example.clicks"}]}, ["com.example.clicks"]),  # operators ignore case
        ({"owner.nothing": "x"}, []),
        ({"owner.id": None}, []),
    ],
)
def test_conditions(conditions: dict[str, Any], expected: list[str]) -> None:
    assert names({"query": conditions}) == expected


@pytest.mark.parametrize(
    "document",
    [
        None,
        [],
        {"q": {}},
        {"query": []},
        {"query": {"name": {"like": "("}}},
        {"query": {"name": {"eq": "a", "ne": "b"}}},
        {"query": {"name": {"between": 1}}},
        {"query": {"and": {"name": "x"}}},
        {"query": {"name": {"in": "x"}}},
        {"query": {"name": {"gt": "x"}}},
        {"query": {"name": {"eq": {"nested": 1}}}},
        {"query": {"not": [1]}},
        {"query": {"eq": 1}},
    ],
)
def test_invalid_queries_say_why(document: Any) -> None:
    with pytest.raises(InvalidQuery) as error:
        query.parse(document)
    assert error.value.status == 400 and error.value.code == "INVALID_QUERY"
