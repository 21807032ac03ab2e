"""Counts in words, as every summary prints them: "1 pair", "2 pairs", "0 error rows"."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and `noun`, the noun plural unless n is 1: count(1, "pair") -> "1 pair",
    count(3, "error row") -> "3 error rows", count(2, "batch", "batches") -> "2 batches"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
