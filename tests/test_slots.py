"""The slot budget shared by a llama-server run's requests (rmjudge/servers/slots.py)."""

import asyncio

import pytest

from rmjudge.servers.slots import SlotBudget


def test_a_group_gets_at_most_the_budget_and_at_least_one_slot():
    budget = SlotBudget(4)
    assert budget.width(8) == 4
    assert budget.width(0) == 1
    assert budget.width(3) == 3
    with pytest.raises(ValueError):
        SlotBudget(0)


def test_held_slots_never_exceed_the_budget_and_are_all_given_back():
    async def main():
        budget = SlotBudget(3)
        held = []  # slots in use after each take
        in_use = 0

        async def group(k):
            nonlocal in_use
            async with budget.hold(k) as ids:
                width = len(ids)
                in_use += width
                held.append(in_use)
                await asyncio.sleep(0.01)
                in_use -= width

        await asyncio.gather(*(group(k) for k in (2, 2, 1, 3, 1, 5)))
        return budget, held

    budget, held = asyncio.run(main())
    assert max(held) <= 3 and len(held) == 6
    assert budget.free == 3


def test_groups_are_served_first_come_first_served_so_a_wide_group_is_not_starved():
    async def main():
        budget = SlotBudget(4)
        order = []

        async def group(name, k, start_after):
            await asyncio.sleep(start_after)
            async with budget.hold(k):
                order.append(name)
                await asyncio.sleep(0.02)

        # "wide" asks for every slot while narrow groups hold some; the narrow groups that
        # arrive after it wait behind it instead of taking the slots as they free up
        await asyncio.gather(group("narrow-1", 1, 0), group("narrow-2", 1, 0),
                             group("wide", 4, 0.005), group("late-1", 1, 0.01),
                             group("late-2", 1, 0.012))
        return order

    assert asyncio.run(main()) == ["narrow-1", "narrow-2", "wide", "late-1", "late-2"]


def test_a_group_cancelled_while_waiting_lets_the_next_in_line_go():
    async def main():
        budget = SlotBudget(2)
        order = []
        release = asyncio.Event()

        async def holder():
            async with budget.hold(2):
                await release.wait()

        async def group(name, k):
            async with budget.hold(k):
                order.append(name)

        first = asyncio.create_task(holder())
        await asyncio.sleep(0)
        waiting = asyncio.create_task(group("cancelled", 2))
        after = asyncio.create_task(group("after", 1))
        await asyncio.sleep(0.01)
        waiting.cancel()
        release.set()
        await asyncio.gather(first, after)
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return order, budget.free

    order, free = asyncio.run(main())
    assert order == ["after"] and free == 2


def test_groups_get_the_lowest_free_slots_so_busy_slots_stay_packed():
    """llama.cpp cuts llama-server's decode batch wherever the busy slot ids skip one: a group
    fills the lowest free slots, holes left by earlier groups first, and the slot holding the
    longest start of its prompt comes first among them (where the prompt is evaluated)."""
    async def main():
        budget = SlotBudget(8)
        taken = []
        async with budget.hold(2) as a:
            taken.append(a)
            async with budget.hold(3) as b:
                taken.append(b)
                budget.keep(a[1], [1, 2, 3])
            async with budget.hold(4, [1, 2, 3, 4]) as c:  # b's slots free again, a's held
                taken.append(c)
            budget.keep(6, [1, 2, 3, 9])  # a slot outside the lowest four: never chosen
            async with budget.hold(3, [1, 2, 3, 4]) as d:
                taken.append(d)
        return taken

    a, b, c, d = asyncio.run(main())
    assert a == [0, 1] and b == [2, 3, 4]
    assert c == [2, 3, 4, 5]
    assert sorted(d) == [2, 3, 4] and d[0] == 2  # none holds the prompt: the lowest first


def test_the_slot_holding_the_prompt_goes_first_among_the_lowest():
    async def main():
        budget = SlotBudget(4)
        budget.keep(2, "the judge's opening, then pair 7")
        async with budget.hold(3, "the judge's opening, then pair 8") as ids:
            return ids

    assert asyncio.run(main()) == [2, 0, 1]


def test_a_slot_above_the_lowest_that_holds_much_more_of_the_prompt_is_taken_first():
    """A pair's reflections open with its rollout prompt: the free slot that still holds it is
    worth a gap when it saves evaluating at least HINT_GAIN tokens; a few tokens are not."""
    from rmjudge.servers.slots import HINT_GAIN

    rollout = list(range(1000, 1000 + 3 * HINT_GAIN))

    async def main(held_by_six):
        budget = SlotBudget(8)
        budget.keep(6, held_by_six)
        budget.keep(1, rollout[:HINT_GAIN // 2])
        async with budget.hold(3, rollout + [7, 7]) as ids:
            return ids

    ids = asyncio.run(main(rollout))
    assert ids[0] == 6 and sorted(ids) == [0, 1, 6]
    # slot 6 holds only a little more than slot 1: the three lowest, slot 1 first
    assert asyncio.run(main(rollout[:HINT_GAIN])) == [1, 0, 2]
