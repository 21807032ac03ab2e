"""`rmjudge compare --jury`: the majority-of-judges verdicts of judged tables of one input.

The jury is a judged table over the common pairs, shaped like a judged export
so `rmjudge filter` reads it:
- `verdict`: the winner (A or B) named by more than half of the judges' combined verdicts;
  `tie` when no winner has more than half of the judges (a split, or judges that tied or
  failed); `error` when no judge has a verdict (A, B or tie) for the pair;
- `verdict_ab`, `verdict_ba`: the same rule over the judges' verdicts in that order (null when
  no judge judged that order); `consistent`: both orders name the same winner (null unless
  both name one);
- `p_a`, `p_a_ab`, `p_a_ba`: the mean of the judges' shares of final votes for A;
- `label`, `correct`, `row_number`, `prompt`, `messages`, `response_a`, `response_b`: the
  pair's, from the first table; `policy` is `jury`;
- `jury_judges` (the tables, as a JSON list, in the order given), `jury_votes_a`,
  `jury_votes_b` (judges whose combined verdict is A, B), and per judge i (1-based)
  `verdict_j<i>` and `p_a_j<i>`, all in the first table's slots.

The tables are those `rmjudge.analysis.compare` checked to be of the same input; rows whose
slots are swapped against the first table are read in the first table's terms, as there.
"""

from __future__ import annotations

import os

from rmjudge.analysis.tables import JudgedTable
from rmjudge.core.sql import quote_ident, sql_literal
from rmjudge.store import PAIR_COLUMNS

JURY_MARK = "jury_judges"


def _source(t: JudgedTable, alias: str) -> str:
    """SQL naming the `pairs` rows of table `t` from another table's connection."""
    if t.fmt == "duckdb":
        return f"{quote_ident(alias)}.pairs"
    if t.fmt == "parquet":
        return f"read_parquet({sql_literal(t.path)})"
    return f"read_json_auto({sql_literal(t.path)}, format='newline_delimited')"


def _count(cols: list[str], value: str) -> str:
    return "(" + " + ".join(f"coalesce({c} = '{value}', false)::INT" for c in cols) + ")"


def _majority(cols: list[str], per_order: bool) -> str:
    """The jury's verdict over the judges' verdict columns `cols` (see the module docstring)."""
    n = len(cols)
    none = (f"WHEN {' AND '.join(f'{c} IS NULL' for c in cols)} THEN NULL " if per_order else "")
    decided = "('A', 'B')" if per_order else "('A', 'B', 'tie')"
    any_verdict = " OR ".join(f"{c} IN {decided}" for c in cols)
    return (f"CASE {none}WHEN {_count(cols, 'A')} * 2 > {n} THEN 'A' "
            f"WHEN {_count(cols, 'B')} * 2 > {n} THEN 'B' "
            f"WHEN coalesce({any_verdict}, false) THEN 'tie' ELSE 'error' END")


def _mean(cols: list[str]) -> str:
    have = " + ".join(f"({c} IS NOT NULL)::INT" for c in cols)
    total = " + ".join(f"coalesce({c}, 0)" for c in cols)
    return f"({total}) / nullif({have}, 0)"


# the jury's columns taken from the inner query (the others: computed, or null)
PASSED = ("id", "row_number", "verdict", "verdict_ab", "verdict_ba", "p_a", "p_a_ab", "p_a_ba",
          "label", "prompt", "messages", "response_a", "response_b")


def jury_query(tables: list[JudgedTable], leave_out: list[str] = ()) -> str:
    """The jury's rows (common pairs, the first table's row order) as a query on the first
    table's connection, once `attach_judges` made the other tables visible there. `leave_out`:
    pair ids that some table holds with other content (`Comparison.edited`)."""
    import orjson

    n = len(tables)
    froms = ["pairs j1"]
    for k, t in enumerate(tables[1:], 2):
        froms.append(f"JOIN {_source(t, f'compare_j{k}')} j{k} ON "
                     f"CAST(j{k}.id AS VARCHAR) = j1.id")

    def raw(k: int, c: str, typ: str) -> str:
        # the first table's `pairs` view has every core column; a file may lack newer ones
        t = tables[k - 1]
        if k == 1 or c in t.source_types:
            return f"TRY_CAST(j{k}.{quote_ident(c)} AS {typ})"
        return f"CAST(NULL AS {typ})"

    def same(k: int) -> str:
        """Judge k's row has the first table's slots (else they are swapped: `aligned`)."""
        return " AND ".join(f"{raw(k, c, 'VARCHAR')} IS NOT DISTINCT FROM j1.{c}"
                            for c in ("response_a", "response_b", "label"))

    def col(c: str, typ: str) -> list[str]:
        """Judge k's column `c` in the first table's terms."""
        swapped = {"verdict": "verdict", "verdict_ab": "verdict_ba", "verdict_ba": "verdict_ab",
                   "p_a": "p_a", "p_a_ab": "p_a_ba", "p_a_ba": "p_a_ab"}[c]
        out = [raw(1, c, typ)]
        for k in range(2, n + 1):
            other = raw(k, swapped, typ)
            other = (f"CASE {other} WHEN 'A' THEN 'B' WHEN 'B' THEN 'A' ELSE {other} END"
                     if typ == "VARCHAR" else f"1 - {other}")
            out.append(f"CASE WHEN {same(k)} THEN {raw(k, c, typ)} ELSE {other} END")
        return out

    v, ab, ba = col("verdict", "VARCHAR"), col("verdict_ab", "VARCHAR"), col("verdict_ba", "VARCHAR")
    pa, pab, pba = col("p_a", "DOUBLE"), col("p_a_ab", "DOUBLE"), col("p_a_ba", "DOUBLE")
    names = orjson.dumps([t.path for t in tables]).decode()
    inner = [
        "j1.id AS id", "j1.row_number AS row_number", f"{_majority(v, False)} AS verdict",
        f"{_majority(ab, True)} AS verdict_ab", f"{_majority(ba, True)} AS verdict_ba",
        f"{_mean(pa)} AS p_a", f"{_mean(pab)} AS p_a_ab", f"{_mean(pba)} AS p_a_ba",
        "j1.label AS label", "j1.prompt AS prompt", "j1.messages AS messages",
        "j1.response_a AS response_a", "j1.response_b AS response_b",
        f"{_count(v, 'A')} AS jury_votes_a", f"{_count(v, 'B')} AS jury_votes_b",
    ] + [f"{x} AS verdict_j{k}" for k, x in enumerate(v, 1)] + \
        [f"{x} AS p_a_j{k}" for k, x in enumerate(pa, 1)]
    core = {
        "consistent": "CASE WHEN verdict_ab IN ('A', 'B') AND verdict_ba IN ('A', 'B') "
                      "THEN verdict_ab = verdict_ba END",
        "correct": "CASE WHEN label IN ('A', 'B') THEN verdict = label END",
        "policy": "'jury'",
    }
    outer = [f"CAST({core.get(c, quote_ident(c) if c in PASSED else 'NULL')} AS "
             f"{t.split()[0]}) AS {quote_ident(c)}" for c, t in PAIR_COLUMNS] + [
        f"CAST({sql_literal(names)} AS VARCHAR) AS {JURY_MARK}",
        "CAST(jury_votes_a AS INTEGER) AS jury_votes_a",
        "CAST(jury_votes_b AS INTEGER) AS jury_votes_b",
    ] + [f"CAST(verdict_j{k} AS VARCHAR) AS verdict_j{k}" for k in range(1, n + 1)] + \
        [f"CAST(p_a_j{k} AS DOUBLE) AS p_a_j{k}" for k in range(1, n + 1)]
    where = (f" WHERE j1.id NOT IN ({', '.join(sql_literal(i) for i in sorted(leave_out))})"
             if leave_out else "")
    return (f"SELECT {', '.join(outer)} FROM (SELECT {', '.join(inner)} "
            f"FROM {' '.join(froms)}{where}) ORDER BY row_number, id")


def attach_judges(tables: list[JudgedTable]) -> None:
    """Make the run stores among `tables[1:]` readable (read-only) from the first table's
    connection, as `compare_j<k>`."""
    con = tables[0].con
    for k, t in enumerate(tables[1:], 2):
        if t.fmt == "duckdb":
            con.execute(f"ATTACH {sql_literal(t.path)} AS {quote_ident(f'compare_j{k}')} "
                        "(READ_ONLY)")


def detach_judges(tables: list[JudgedTable]) -> None:
    con = tables[0].con
    for k in range(2, len(tables) + 1):
        con.execute(f"DETACH DATABASE IF EXISTS {quote_ident(f'compare_j{k}')}")


def is_jury_file(path: str) -> bool:
    """True when `path` is a Parquet/JSONL jury table written by `rmjudge compare --jury`."""
    import duckdb

    from rmjudge.files import output_format

    fmt = output_format(path)
    if fmt == "duckdb":
        return False
    reader = (f"read_parquet({sql_literal(path)})" if fmt == "parquet" else
              f"read_json_auto({sql_literal(path)}, format='newline_delimited')")
    con = duckdb.connect(":memory:")
    try:
        cols = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {reader}").fetchall()}
    except duckdb.Error:
        return False
    finally:
        con.close()
    return {JURY_MARK, "jury_votes_a", "verdict", "verdict_ab", "p_a"} <= cols


def check_jury_output(tables: list[JudgedTable], output: str) -> None:
    """Refuse `output` unless it is new or an earlier jury table (`guard_output`), never one
    of the compared tables."""
    from rmjudge.files import guard_output

    for t in tables:
        guard_output(output, t.path, "compare", is_jury_file,
                     "a jury table has the column jury_judges")


def is_jury_store(path: str) -> bool:
    """True when `path` is a run store written by `rmjudge compare --jury`."""
    import duckdb
    import orjson

    from rmjudge.store import is_rmjudge_store

    if not is_rmjudge_store(path):
        return False
    try:
        con = duckdb.connect(path, read_only=True)
    except duckdb.Error:
        return False
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'settings'").fetchone()
    except duckdb.Error:
        return False
    finally:
        con.close()
    try:
        settings = orjson.loads(row[0]) if row else None
    except orjson.JSONDecodeError:
        return False
    return isinstance(settings, dict) and JURY_MARK in settings


def check_jury_store_output(tables: list[JudgedTable], output: str) -> None:
    """A DuckDB jury: a new file or an earlier jury store, never a compared table or any
    other database."""
    from rmjudge.files import OutputError, check_not_busy, check_not_sidecar

    check_not_sidecar(output)
    check_not_busy(output)
    for t in tables:
        if os.path.realpath(output) == os.path.realpath(t.path):
            raise OutputError(f"{output} is the judged table {t.path} itself; `rmjudge compare` "
                              "never writes over it: choose another -o")
    if os.path.isdir(output):
        raise OutputError(f"{output} is a directory; give -o a file name")
    if os.path.exists(output) and not is_jury_store(output):
        raise OutputError(f"{output} exists and was not written by `rmjudge compare --jury` "
                          "(a jury store has a jury_judges entry in its settings); it is left "
                          "untouched: choose another -o")


def _empty(columns: list[tuple[str, str]]) -> str:
    cols = ", ".join(f"CAST(NULL AS {t.split()[0]}) AS {quote_ident(c)}" for c, t in columns)
    return f"SELECT {cols} LIMIT 0"


def write_jury_store(tables: list[JudgedTable], query: str, output: str) -> None:
    """The jury as a run store: its rows go in as one Parquet batch (`rmjudge.store.import_batches`)
    of a store built beside `output` and moved into place (`NewStore`)."""
    from rmjudge.files import make_dir, scratch, write_query_file
    from rmjudge.store import ERROR_COLUMNS, SAMPLE_COLUMNS, NewStore, import_batches

    con = tables[0].con
    with scratch(prefix=f".{os.path.basename(output)}.jury-", beside=output) as folder:
        batch = os.path.join(folder, "0")
        make_dir(batch)
        for name, q in (("pairs", query), ("samples", _empty(SAMPLE_COLUMNS)),
                        ("errors", _empty(ERROR_COLUMNS))):
            write_query_file(con, q, os.path.join(batch, f"{name}.parquet"), "parquet")
        check_jury_store_output(tables, output)
        new = NewStore(output, {JURY_MARK: [t.path for t in tables]},
                       overwrite=os.path.exists(output))
        try:
            if isinstance(tables[0].meta.get("input"), dict):
                new.store.set_meta("input", tables[0].meta["input"])
            import_batches(new.store, folder, [])
        except BaseException:
            new.discard()
            raise
        check_jury_store_output(tables, output)
        new.install(carry=lambda store: _keep_human_labels(store, output))


def _keep_human_labels(store, output: str) -> None:
    """The human labels imported into the jury store `output` (`rmjudge review import`) go
    into the jury that replaces it, each on its pair (A and B exchanged where the new jury has
    that pair's responses the other way round); a label whose pair the new jury lacks, or holds
    with other responses, refuses the rewrite: labels are never dropped."""
    from rmjudge.analysis.compare import CompareError
    from rmjudge.core.words import count
    from rmjudge.store import carry_human_labels

    lost = carry_human_labels(store, output)
    if lost:
        raise CompareError(
            f"{output} holds human labels (rmjudge review import) on {count(len(lost), 'pair')} "
            f"that this jury does not have with the same responses (e.g. {lost[0]!r}), and "
            f"writing it there would drop them; {output} is left as it was: write this jury to "
            f"another -o, or move {output} away first")


def write_jury(tables: list[JudgedTable], output: str, leave_out: list[str] = ()) -> int:
    """Write the jury table of `tables` to `output` (.parquet, .jsonl, or a .duckdb run
    store), without the pairs in `leave_out`; returns its rows."""
    from rmjudge.files import make_dir, output_format, write_query_file

    fmt = output_format(output)
    check = (lambda: check_jury_store_output(tables, output)) if fmt == "duckdb" else \
        (lambda: check_jury_output(tables, output))
    check()
    make_dir(os.path.dirname(os.path.abspath(output)))
    attach_judges(tables)
    try:
        query = jury_query(tables, leave_out)
        if fmt == "duckdb":
            write_jury_store(tables, query, output)
        else:
            write_query_file(tables[0].con, query, output, fmt, check=check)
        return tables[0].one(f"SELECT count(*) FROM ({query})")[0]
    finally:
        detach_judges(tables)


def compare_files(paths: list[str] | tuple[str, ...], cs=None, jury_output: str | None = None):
    """`rmjudge compare`: the judged tables at `paths` compared (rmjudge.analysis.compare,
    with the CompareSettings `cs`) and, with `jury_output`, their jury written there.
    (CompareResult, the jury's pairs or None.) A jury output that cannot be written is a
    CompareError naming it."""
    from contextlib import ExitStack

    from rmjudge.analysis.compare import CompareError, compare
    from rmjudge.analysis.tables import open_judged

    with ExitStack() as stack:
        opened = [stack.enter_context(open_judged(t)) for t in paths]
        result = compare(opened, cs)
        if jury_output is None:
            return result, None
        try:
            return result, write_jury(opened, jury_output, result.edited)
        except OSError as exc:
            raise CompareError(f"cannot write {jury_output}: {exc.strerror or exc}; choose "
                               "another -o") from None
