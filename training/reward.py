"""The GRPO reward: 1 when the parsed verdict equals the label, else 0 (parse failure: 0).

Completions are cut after the first `</Result>` before parsing, because that is where the
llama.cpp engine stops at inference: what the reward reads is exactly what `rmjudge score`
would read. Parsing is `rmjudge.prompts.parse_verdict` with the example's task, so a Pref
completion must say "Response X ..." and a Refl completion "Critique X ...".
"""

from __future__ import annotations

from typing import Any

from rmjudge.prompts import parse_verdict

from rmjudge.training.hf import cut_at_stop


def completion_text(completion: Any) -> str:
    """TRL hands completions as text, or as [{"role": "assistant", "content": ...}]."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion if isinstance(m, dict))
    return str(completion)


def score(completion: Any, task: str, label: int) -> tuple[float, bool]:
    """(reward, parsed) of one completion."""
    pred = parse_verdict(cut_at_stop(completion_text(completion)), task)  # type: ignore[arg-type]
    return (1.0 if pred == label else 0.0), pred is not None


def verdict_reward(completions, task, label, log_metric=None, **_: Any) -> list[float]:
    """TRL reward function (the dataset's `task` and `label` columns arrive as lists)."""
    results = [score(c, t, int(y)) for c, t, y in zip(completions, task, label)]
    if log_metric is not None and results:
        log_metric("parse_failure_rate", sum(not ok for _, ok in results) / len(results))
        for kind in ("pref", "refl"):
            r = [res[0] for res, t in zip(results, task) if t == kind]
            if r:
                log_metric(f"reward_{kind}", sum(r) / len(r))
    return [r for r, _ in results]
