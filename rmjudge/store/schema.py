"""The run store's schema: the core tables and their columns, run statuses, and the typing of
passthrough input columns.

Passthrough input columns keep their types: numbers, booleans and strings as such, lists and
objects as DuckDB JSON (a later value that does not fit widens the column: BIGINT -> DOUBLE ->
VARCHAR, with non-strings JSON-encoded in a VARCHAR column). DuckDB names are case-insensitive:
an input column whose name matches a core column in any case is stored as `input_<name>` (see
`rmjudge.store.run_store.Store.column_for`).
"""

from __future__ import annotations

from typing import Any

from rmjudge.core import jsontext
from rmjudge.core.sql import quote_ident

SCHEMA_VERSION = 2  # 2: pairs.content_hash (added to older stores when they are opened)

PAIR_COLUMNS = [
    ("id", "VARCHAR PRIMARY KEY"), ("row_number", "BIGINT"), ("verdict", "VARCHAR"),
    ("verdict_ab", "VARCHAR"), ("verdict_ba", "VARCHAR"), ("consistent", "BOOLEAN"),
    ("p_a", "DOUBLE"), ("p_a_ab", "DOUBLE"), ("p_a_ba", "DOUBLE"), ("label", "VARCHAR"), ("correct", "BOOLEAN"),
    ("shortcut_ab", "BOOLEAN"), ("shortcut_ba", "BOOLEAN"), ("policy", "VARCHAR"),
    ("confidence_ab", "DOUBLE"), ("confidence_ba", "DOUBLE"),
    ("rollouts_ab", "INTEGER"), ("rollouts_ba", "INTEGER"),
    ("prompt", "VARCHAR"), ("messages", "JSON"), ("response_a", "VARCHAR"),
    ("response_b", "VARCHAR"), ("run_id", "INTEGER"), ("content_hash", "VARCHAR"),
]
SAMPLE_COLUMNS = [
    ("pair_id", "VARCHAR"), ("order", "VARCHAR"), ("stage", "VARCHAR"), ("idx", "INTEGER"),
    ("text", "VARCHAR"), ("prediction", "INTEGER"), ("confidence", "DOUBLE"),
    ("is_anchor", "BOOLEAN"), ("reflection_of", "INTEGER"), ("reflection_slot", "INTEGER"),
    ("won_reflection", "BOOLEAN"), ("verdict_source", "VARCHAR"), ("tokens", "INTEGER"),
    ("finish_reason", "VARCHAR"), ("p_first", "DOUBLE"),
]
ERROR_COLUMNS = [
    ("row_number", "BIGINT PRIMARY KEY"), ("id", "VARCHAR"), ("reason", "VARCHAR"),
    ("raw", "VARCHAR"), ("run_id", "INTEGER"),
]
RUN_COLUMNS = [
    ("run_id", "INTEGER PRIMARY KEY"), ("version", "VARCHAR"), ("model_path", "VARCHAR"),
    ("model_sha256", "VARCHAR"), ("lora_path", "VARCHAR"), ("lora_sha256", "VARCHAR"),
    ("settings", "VARCHAR"), ("input", "VARCHAR"), ("started", "TIMESTAMPTZ"),
    ("finished", "TIMESTAMPTZ"), ("pairs_judged", "BIGINT"), ("errors", "BIGINT"),
    ("generated_tokens", "BIGINT"), ("wall_seconds", "DOUBLE"), ("status", "VARCHAR"),
    ("shard", "VARCHAR"), ("schema", "VARCHAR"),
    # cost through --server: prompt tokens sent and tokens received (NULL in-process)
    ("tokens_sent", "BIGINT"), ("tokens_received", "BIGINT"),
]
GREEDY_COLUMNS = [
    ("pair_id", "VARCHAR"), ("order", "VARCHAR"), ("text", "VARCHAR"), ("prediction", "INTEGER"),
    ("letter", "VARCHAR"), ("verdict_source", "VARCHAR"), ("confidence", "DOUBLE"),
    ("tokens", "INTEGER"), ("finish_reason", "VARCHAR"), ("model_sha256", "VARCHAR"),
    ("max_tokens", "INTEGER"),
]
# Human labels imported by `rmjudge review import` (rmjudge/review/): one row per pair and
# reviewer ('' when the file names none); a later import of the same pair and reviewer replaces it.
HUMAN_LABEL_COLUMNS = [
    ("pair_id", "VARCHAR NOT NULL"), ("reviewer", "VARCHAR NOT NULL"), ("label", "VARCHAR"),
    ("source", "VARCHAR"), ("imported", "TIMESTAMPTZ"),
]
# `rmjudge rank`: each prompt's candidates as ranked from its comparisons (rmjudge/rank/), one
# row per candidate; rewritten whole at the end of every rank run (a copy of what
# `rmjudge.rank.table.read_rankings` computes from the pairs table).
RANKING_COLUMNS = [
    ("prompt_id", "VARCHAR NOT NULL"), ("input_row", "BIGINT"), ("candidate", "INTEGER NOT NULL"),
    ("rank", "INTEGER"), ("score", "DOUBLE"), ("wins", "INTEGER"), ("losses", "INTEGER"),
    ("ties", "INTEGER"), ("unjudged", "INTEGER"), ("confidence", "DOUBLE"),
    ("gold_rank", "INTEGER"), ("n_candidates", "INTEGER"), ("response", "VARCHAR"),
]
CORE_TABLES = ("pairs", "samples", "errors", "runs", "meta")
CORE_LOWER = {c.lower() for c, _ in PAIR_COLUMNS}

# Run status values recorded in `runs.status`.
RUNNING, FINISHED, INTERRUPTED, FAILED = "running", "finished", "interrupted", "failed"


def names(cols: list[tuple[str, str]]) -> list[str]:
    """The column names of a column list such as PAIR_COLUMNS."""
    return [c for c, _ in cols]


def ddl(name: str, cols: list[tuple[str, str]], extra: str = "") -> str:
    body = ", ".join(f"{quote_ident(c)} {t}" for c, t in cols)
    return f"CREATE TABLE IF NOT EXISTS {name} ({body}{extra})"


def human_labels_ddl() -> str:
    """The `human_labels` table (one label per pair and reviewer), made on first use."""
    return ddl("human_labels", HUMAN_LABEL_COLUMNS, ", PRIMARY KEY (pair_id, reviewer)")


def value_kind(v: Any) -> str:
    if isinstance(v, bool):
        return "BOOLEAN"
    if isinstance(v, int):
        return "BIGINT" if -2**63 <= v < 2**63 else "VARCHAR"
    if isinstance(v, float):
        return "DOUBLE"
    if isinstance(v, str):
        return "VARCHAR"
    if isinstance(v, (list, dict)):
        return "JSON"
    return "VARCHAR"


def type_for(kinds: set[str]) -> str:
    """One column type for values of these kinds (numbers widen; any other mix is VARCHAR)."""
    if len(kinds) == 1:
        return next(iter(kinds))
    if kinds <= {"BIGINT", "DOUBLE"}:
        return "DOUBLE"
    return "VARCHAR"


def wider(have: str, want: str) -> str:
    if have == want or have == "VARCHAR":
        return have
    if {have, want} <= {"BIGINT", "DOUBLE"}:
        return "DOUBLE"
    return "VARCHAR"


def cell(v: Any, typ: str) -> Any:
    """A passthrough value for a column of type `typ` (VARCHAR: scalars as text, lists and
    objects as JSON text)."""
    if v is None:
        return None
    if typ == "JSON":
        return jsontext.dumps(v)
    if typ in ("BOOLEAN", "BIGINT", "DOUBLE"):
        return v
    return jsontext.text(v)


def describe_differences(old: dict, new: dict) -> str:
    """The settings that differ, as `key old -> new`; a rubric (`criteria`) is named briefly
    (`rmjudge.prompts.criteria.criteria_name`), not quoted whole."""
    from rmjudge.prompts.criteria import criteria_name

    def shown(k: str, v: Any) -> str:
        return criteria_name(v) if k == "criteria" else repr(v)

    def value(d: dict, k: str) -> Any:
        return d.get(k, ABSENT_MEANS.get(k))

    keys = sorted(set(old) | set(new))
    diffs = [f"{k} {shown(k, value(old, k))} -> {shown(k, value(new, k))}" for k in keys
             if value(old, k) != value(new, k)]
    return ", ".join(diffs)


# Settings recorded only when they are not their default (so that stores made before they were
# recorded still resume): what their absence means.
ABSENT_MEANS = {"lora_scale": 1.0, "judge_format": "reflectrm"}



RESUME_FIX = ("rerun with the same settings to resume, use -o to write elsewhere, or "
              "--overwrite to start again")


def other_settings_message(holder: str, old: dict, new: dict, fix: str = RESUME_FIX) -> str:
    """The refusal of results made with other verdict-deciding settings: `holder` names what
    holds them ("X holds results"), then the differences and the fix."""
    return f"{holder} made with other settings ({describe_differences(old, new)}); {fix}"


def not_a_store_message(path: str, fix: str, detail: str = "", *, exists: bool = False) -> str:
    """The refusal of a file that is not an rmjudge run store (`detail`: what it lacks;
    `exists`: it was given as an output, which is left untouched)."""
    return f"{path} {'exists and ' if exists else ''}is not an rmjudge run store{detail}; {fix}"


def missing_core_tables(tables: set[str]) -> set[str]:
    """The core tables (`CORE_TABLES`) that a database holding `tables` lacks."""
    return set(CORE_TABLES) - tables
