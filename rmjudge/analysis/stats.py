"""The statistics of judge comparisons (`rmjudge compare`, `rmjudge review agreement`): per-pair
accuracy against a label, percentile bootstrap intervals, and Cohen's kappa per order.

Both bootstraps draw with `numpy.random.default_rng(seed)`, one resample of all pairs per row,
so a figure is reproducible from the seed and equal to drawing all resamples at once.
"""

from __future__ import annotations

import numpy as np

from rmjudge.core.counts import item_accuracy

RESAMPLES = 10000
MAX_RESAMPLES = 1_000_000  # --resamples' bound: a million intervals' draws, not a hang
MAX_DRAWS = 4_000_000  # pair indices drawn per chunk of resamples (bounds the memory)
LETTERS = ("A", "B")


def bootstrap_mean(values, resamples: int = RESAMPLES, seed: int = 0, level: float = 0.95,
                   max_draws: int = MAX_DRAWS) -> tuple[float, float, float]:
    """(mean, lo, hi): the mean of `values` and its percentile bootstrap interval. Resample r
    is row r of `rng.integers(0, n, size=(resamples, n))` with `rng = default_rng(seed)`,
    drawn `max_draws // n` rows at a time (the same numbers as drawing them all at once)."""
    d = np.asarray(values, dtype=float)
    if d.size == 0:
        raise ValueError("no values to resample")
    means = resampled_means(d, resamples, np.random.default_rng(seed), max_draws)
    a = round((1.0 - level) / 2, 12)
    return float(d.mean()), float(np.quantile(means, a)), float(np.quantile(means, 1.0 - a))


def resampled_means(d: np.ndarray, resamples: int, rng, max_draws: int = MAX_DRAWS) -> np.ndarray:
    """The means of `resamples` resamples of `d` (n items, with replacement): resample r is row r
    of `rng.integers(0, n, size=(resamples, n))`, drawn `max_draws // n` rows at a time (the same
    numbers as drawing them all at once, in bounded memory)."""
    n = d.size
    rows = max(1, max_draws // n)
    return np.concatenate([d[rng.integers(0, n, size=(min(rows, resamples - start), n))]
                           .mean(axis=1) for start in range(0, resamples, rows)])


def paired_gain(base: dict[str, float], other: dict[str, float], resamples: int = RESAMPLES,
                seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """Accuracy of `other` minus the base's on the pairs both judged, with a paired bootstrap
    interval (pairs resampled, both judges on the same draw)."""
    ids = sorted(set(base) & set(other))
    if not ids:
        raise ValueError("no pair judged by both")
    return bootstrap_mean([other[i] - base[i] for i in ids], resamples, seed, level)


def pair_correct(label: str, ab: str | None, ba: str | None) -> float:
    """Per labelled pair: the share of its judged orders whose verdict is the gold label
    (`counts.item_accuracy` when both were judged; a pair judged in one order counts that
    order; a verdict that is missing in a judged order, `error`, counts as wrong)."""
    if ab is None or ba is None:
        return float((ab if ba is None else ba) == label)
    return float(item_accuracy(float(ab == label), float(ba == label)))


def cohen_kappa(a: list, b: list) -> float | None:
    """Cohen's kappa of two raters over the same items: (p_o - p_e) / (1 - p_e), p_o the share
    of items they agree on, p_e the agreement expected from each rater's category shares.
    None when there is no item or p_e is 1 (both raters always gave the same one category)."""
    if len(a) != len(b):
        raise ValueError("the raters must rate the same items")
    n = len(a)
    if n == 0:
        return None
    po = sum(x == y for x, y in zip(a, b)) / n
    cats = set(a) | set(b)
    pe = sum((a.count(c) / n) * (b.count(c) / n) for c in cats)
    if pe >= 1.0 - 1e-12:
        return None
    return (po - pe) / (1.0 - pe)


def order_items(rows_a: list[tuple], rows_b: list[tuple]) -> tuple[list, list, int]:
    """The per-order kappa items of two raters over the same pairs: rows are (ab, ba) per
    pair; an item is kept when both gave A or B. Returns (ratings a, ratings b, left out)."""
    xa, xb, left = [], [], 0
    for ra, rb in zip(rows_a, rows_b):
        for va, vb in zip(ra, rb):
            if va is None and vb is None:
                continue  # the order was not judged
            if va in LETTERS and vb in LETTERS:
                xa.append(va)
                xb.append(vb)
            else:
                left += 1
    return xa, xb, left
