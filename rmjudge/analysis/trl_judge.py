"""ReflectRM as a TRL pairwise judge: `ReflectRMJudge().judge(prompts, completions)`.

TRL's pairwise judge interface: `judge(prompts, completions, shuffle_order=True) -> list[int]`,
where `completions[i]` holds two candidate completions of `prompts[i]` and the result is the index
(0 or 1) of the preferred one, or -1 when the judge could not decide (TRL's convention for a
failed judgment). Here every pair is judged by ReflectRM in both orders through
`rmjudge.judging.judge.Judge`, all pairs in one `Judge.run` call so the engine batches them; a tie (the
orders disagree), a dropped pair or an engine failure gives -1.

`ReflectRMJudge` subclasses TRL's `BasePairwiseJudge` when the installed TRL has one
(`trl.experimental.judges` from TRL 1.0, `trl.judges` before); TRL is imported only when the
class is first looked up, and is not a dependency of rmjudge.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from rmjudge.core.settings import EngineSettings, JudgeSettings
from rmjudge.core.types import Pair


class ReflectRMJudgeCore:
    """The judge without TRL's base class (what `ReflectRMJudge` adds TRL's base to)."""

    def __init__(self, engine=None, settings: JudgeSettings | None = None,
                 engine_settings: EngineSettings | None = None, seed: int = 0):
        from rmjudge.prompts.choice import run_style

        self.settings = settings or JudgeSettings()
        # resolved here, once: the judge model (its file found, the demo judge made) and the
        # prompt style (--criteria @FILE, a prompt template, a judge format file read), so a
        # bad value fails at construction and no judgment works them out again
        self._style = run_style(self.settings.criteria, self.settings.prompt_template,
                                self.settings.judge_format)
        if engine is None:
            from rmjudge.models.resolve import resolve_judge

            self.engine_settings = resolve_judge(engine_settings or EngineSettings())
        else:
            self.engine_settings = engine_settings or EngineSettings()
        self._engine = engine  # loaded at the first judgment when not given
        self._spec = None  # the run spec on the engine's model, built at the first judgment
        self._rng = random.Random(seed)
        self.last_results: list[Any] = []

    @property
    def engine(self):
        if self._engine is None:
            from rmjudge.engine import load_engine

            self._engine = load_engine(self.engine_settings)
        return self._engine

    @property
    def spec(self):
        """The run spec of these settings on this engine's model, built once (with the prompt
        style read at construction), then used by every `judge` call."""
        if self._spec is None:
            from rmjudge.judging.runspec import resolve

            self._spec = resolve(self.settings, self.engine.info, None, self._style)
        return self._spec

    @staticmethod
    def _messages(prompt: Any) -> tuple[dict, ...]:
        if isinstance(prompt, str):
            return ({"role": "user", "content": prompt},)
        if isinstance(prompt, (list, tuple)) and prompt and all(
                isinstance(m, dict) and "role" in m and "content" in m for m in prompt):
            return tuple({"role": m["role"], "content": m["content"]} for m in prompt)
        raise ValueError("each prompt must be a string or a list of {role, content} messages "
                         "ending in a user turn")

    @staticmethod
    def _text(completion: Any) -> str:
        if isinstance(completion, str):
            return completion
        if isinstance(completion, (list, tuple)) and completion and isinstance(completion[-1], dict):
            return str(completion[-1].get("content", ""))  # conversational: [{assistant turn}]
        raise ValueError("each completion must be a string or a list with one assistant message")

    def judge(self, prompts: Sequence[Any], completions: Sequence[Sequence[Any]],
              shuffle_order: bool = True) -> list[int]:
        """Index (0|1) of the preferred completion for every prompt; -1 when undecided."""
        from rmjudge.judging.judge import Failure, Judge

        if len(prompts) != len(completions):
            raise ValueError(f"got {len(prompts)} prompts but {len(completions)} completion pairs")
        pairs, flipped = [], []
        for i, (prompt, pair) in enumerate(zip(prompts, completions)):
            if len(pair) != 2:
                raise ValueError(f"completions[{i}] has {len(pair)} completions; a pairwise "
                                 "judge compares exactly two")
            a, b = self._text(pair[0]), self._text(pair[1])
            flip = shuffle_order and self._rng.random() < 0.5
            if flip:
                a, b = b, a
            flipped.append(flip)
            pairs.append(Pair(f"trl-{i}", i, self._messages(prompt), a, b))
        verdicts: dict[str, str] = {}
        self.last_results = []
        for res in Judge(self.engine, self.spec).run(pairs):
            self.last_results.append(res)
            if not isinstance(res, Failure):
                verdicts[res.pair.id] = res.verdict
        out = []
        for p, flip in zip(pairs, flipped):
            v = verdicts.get(p.id)
            if v not in ("A", "B"):
                out.append(-1)
            else:
                idx = 0 if v == "A" else 1
                out.append(1 - idx if flip else idx)
        return out


def trl_base() -> type | None:
    """TRL's BasePairwiseJudge when the installed TRL has one, else None."""
    import importlib
    import importlib.util
    import warnings

    if importlib.util.find_spec("trl") is None:
        return None
    for mod in ("trl.experimental.judges", "trl.judges", "trl"):
        try:
            with warnings.catch_warnings():  # trl.experimental warns on import
                warnings.simplefilter("ignore")
                base = getattr(importlib.import_module(mod), "BasePairwiseJudge", None)
        except Exception:  # a TRL without that module, or one whose optional imports fail
            base = None
        if base is not None:
            return base
    return None


_CLASS: type | None = None


def _judge_class() -> type:
    global _CLASS
    if _CLASS is None:
        base = trl_base()
        bases = (ReflectRMJudgeCore,) if base is None else (ReflectRMJudgeCore, base)
        _CLASS = type("ReflectRMJudge", bases, {
            "__doc__": "ReflectRM as a TRL pairwise judge (see the module docstring).",
            "__module__": __name__})
    return _CLASS


def __getattr__(name: str):
    if name == "ReflectRMJudge":
        return _judge_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
