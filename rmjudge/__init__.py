"""rmjudge: offline ReflectRM judging of pairwise preference data with a local GGUF judge.

Library entry points (no heavy imports happen here):
    from rmjudge import Judge, JudgeSettings, EngineSettings, load_engine, score
"""

from __future__ import annotations

__version__ = "0.7.0"

__all__ = ["Judge", "JudgeSettings", "EngineSettings", "load_engine", "score", "__version__"]


def __getattr__(name: str):
    if name == "Judge":
        from rmjudge.judging.judge import Judge

        return Judge
    if name in ("JudgeSettings", "EngineSettings"):
        from rmjudge.core import settings

        return getattr(settings, name)
    if name == "load_engine":
        from rmjudge.engine import load_engine

        return load_engine
    if name == "score":
        from rmjudge.runs.pipeline import score

        return score
    raise AttributeError(name)
