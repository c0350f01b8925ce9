"""The consumers' byte budget of offloaded bodies: what fits is taken, what does not waits for room, and a body
larger than the whole budget goes alone."""

from __future__ import annotations

import asyncio

import pytest

from hermes.consumers.body_budget import BodyBudget

pytestmark = pytest.mark.unit


def test_a_body_waits_for_room_and_one_larger_than_the_budget_goes_alone() -> None:
    async def scenario() -> None:
        budget = BodyBudget(100)
        assert budget.try_take(60)
        assert not budget.try_take(50)
        waiting = asyncio.create_task(budget.take(50))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        budget.give(60)
        await asyncio.wait_for(waiting, 1)
        assert budget.held == 50
        budget.give(50)
        assert budget.try_take(500)  # nothing else held: larger than the budget, it goes
        assert not budget.try_take(1)
        budget.give(500)
        assert budget.held == 0

    asyncio.run(scenario())


def test_a_body_given_back_from_another_thread_wakes_the_waiter() -> None:
    async def scenario() -> None:
        budget = BodyBudget(10)
        assert budget.try_take(10)
        waiting = asyncio.create_task(budget.take(5))
        await asyncio.sleep(0.01)
        await asyncio.to_thread(budget.give, 10)  # as the garbage collector may, off the loop
        await asyncio.wait_for(waiting, 1)
        assert budget.held == 5

    asyncio.run(scenario())
