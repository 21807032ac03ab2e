"""rmjudge: offline ReflectRM judging of pairwise preference data with a local GGUF judge.

The Python API (docs/python.md); nothing heavy is imported until a name is used:

    import rmjudge
    table = rmjudge.score(rows)                     # rows: list of dicts, DataFrame, Dataset, path
    for chunk in rmjudge.score_batches(rows, output="judged.duckdb"): ...
    store = rmjudge.open_store("judged.duckdb")     # .pairs .samples .errors .runs .results
    rmjudge.rank_candidates("bon.jsonl", "ranked.duckdb")  # best-of-N rankings (docs/rank.md)

Errors are `rmjudge.UserError` and its subclasses (each message names the file and the fix).
"""

from __future__ import annotations

__version__ = "0.14.0"

# name -> the module that defines it, "module:attr" where its name there differs (imported on
# first use)
_PUBLIC = {
    "score": "rmjudge.api.judging",
    "score_batches": "rmjudge.api.judging",
    "open_store": "rmjudge.api.tables",
    "rank_candidates": "rmjudge.rank:rank",
    "JudgedStore": "rmjudge.api.tables",
    "load_engine": "rmjudge.engine",
    "JudgeSettings": "rmjudge.core.settings",
    "EngineSettings": "rmjudge.core.settings",
    "UserError": "rmjudge.core.errors",
    "BusyError": "rmjudge.core.errors",
    "DiskError": "rmjudge.core.errors",
    "ModelError": "rmjudge.core.errors",
    "SettingsError": "rmjudge.core.settings",
    "InputError": "rmjudge.io.rows",
    "StoreError": "rmjudge.files.errors",
    "MissingExtraError": "rmjudge.core.extras",
    "Interrupted": "rmjudge.runs.pipeline",
}

__all__ = sorted(_PUBLIC) + ["__version__"]


def __getattr__(name: str):
    where = _PUBLIC.get(name)
    if where is None:
        raise AttributeError(f"module 'rmjudge' has no attribute {name!r}")
    import importlib

    module, _, attr = where.partition(":")  # "module:attr" where the name differs
    return getattr(importlib.import_module(module), attr or name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
