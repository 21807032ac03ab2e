"""The prompts' shared opening and the engine's prefix cache (pure logic; the real-model check
that a restored prefix changes no sample is in test_reproducible.py)."""

from __future__ import annotations

from rmjudge import prompts
from rmjudge.engine.prefix_cache import PrefixCache
from rmjudge.judging.runspec import resolve
from rmjudge.core.settings import JudgeSettings
from rmjudge.engine.base import ModelInfo

CONV = [{"role": "user", "content": "Why is the sky blue?"}]


def test_reflection_prompt_opens_with_the_rollout_prompt_up_to_its_task():
    pref = prompts.pref_messages(CONV, "Rayleigh scattering.", "It reflects the sea.", " /x")
    refl = prompts.refl_messages(CONV, "Rayleigh scattering.", "It reflects the sea.",
                                 "Critique one.", "Critique two.", " /x")
    head = pref[0]["content"].split("## Your task\n")[0]
    assert "It reflects the sea." in head and "Why is the sky blue?" in head
    assert refl[0]["content"].startswith(head)
    assert refl[0]["content"][len(head):].startswith("## Your task\nBelow are two critiques")
    assert refl[0]["content"].endswith(" /x")


def test_prompt_format_is_among_the_settings_a_rerun_must_match():
    info = ModelInfo("m.gguf", "abc", "llama", "m", 2048, None, "")
    got = resolve(JudgeSettings(), info).verdict_settings()
    assert got["prompt_format"] == prompts.PROMPT_FORMAT


def _state(n: int) -> bytes:
    return bytes(n)


def test_lookup_finds_the_longest_shared_prefix_within_the_limit():
    cache = PrefixCache(1000)
    cache.add([1, 2, 3, 4, 5], _state(10))
    cache.add([1, 2, 9, 9, 9, 9], _state(10))
    entry, m = cache.lookup([1, 2, 3, 4, 7, 8], limit=6)
    assert m == 4 and list(entry.tokens) == [1, 2, 3, 4, 5]
    assert cache.lookup([1, 2, 3, 4, 7, 8], limit=3)[1] == 3
    assert cache.lookup([8, 1, 2], limit=3) == (None, 0)
    assert cache.lookup([1, 2, 3], limit=0) == (None, 0)
    assert cache.covers([1, 2, 3]) and not cache.covers([1, 2, 3, 4, 5, 6])


def test_least_recently_used_entries_leave_first_within_the_byte_budget():
    cache = PrefixCache(25)
    cache.add([1, 1], _state(10))
    cache.add([2, 2], _state(10))
    cache.lookup([1, 1, 5], limit=3)  # a hit makes [1, 1] the most recently used
    cache.add([3, 3], _state(10))  # 30 bytes > 25: [2, 2] goes
    assert cache.lookup([2, 2], limit=2) == (None, 0)
    assert cache.lookup([1, 1], limit=2)[1] == 2 and cache.lookup([3, 3], limit=2)[1] == 2
    assert cache.used == 20 and len(cache) == 2
    cache.add([4, 4], _state(26))  # larger than the whole budget: not kept, nothing evicted
    assert len(cache) == 2 and cache.used == 20


def test_a_zero_budget_keeps_nothing():
    cache = PrefixCache(0)
    cache.add([1, 2, 3], _state(1))
    assert len(cache) == 0 and cache.lookup([1, 2, 3], limit=3) == (None, 0)
