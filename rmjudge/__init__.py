"""rmjudge: offline ReflectRM judging of pairwise preference data with a local GGUF judge.

Library entry points (no heavy imports happen here):
    from rmjudge import Judge, JudgeSettings, EngineSettings, load_engine, score
    from rmjudge import rank_candidates   # best-of-N rankings (rmjudge.rank.rank)
"""

from __future__ import annotations

__version__ = "0.7.0"

__all__ = ["Judge", "JudgeSettings", "EngineSettings", "load_engine", "score", "rank_candidates",
           "__version__"]


def __getattr__(name: str):
    if name == "Judge":
        from rmjudge.judge import Judge

        return Judge
    if name in ("JudgeSettings", "EngineSettings"):
        from rmjudge import settings

        return getattr(settings, name)
    if name == "load_engine":
        from rmjudge.engine import load_engine

        return load_engine
    if name == "score":
        from rmjudge.pipeline import score

        return score
    if name == "rank_candidates":
        from rmjudge.rank import rank

        return rank
    raise AttributeError(name)
