"""Merge run stores of one input judged in shards (`rmjudge score --shard I/N`) into one store.

`merge(shards, output)` checks before writing anything that
- every shard holds results made with the same verdict-deciding settings and model
  (`meta` key `settings`, which includes the model's sha256),
- no pair id and no input row number sits in more than one shard,
- with `input=`, every input pair is in exactly one shard's `pairs` (matched by id, in any
  row order) holding the content it was judged with (the content hash stored with each
  verdict; the input is read with the `--map`, `--label-values` and `--label` the shards
  recorded), and every other input row in a shard's `errors` (rows in no shard are reported
  with the shard that owns them; edited rows are reported, never merged silently),
- the shards were judged from one commit of their input when it is a Hub dataset (the merged
  store records that input, commit included),
- every `--shard I/N` of the runs is present and each shard's last run finished,
- no two shards label one pair differently for one reviewer (`human_labels`).
Disagreements (settings, doubled pairs or rows) always refuse; incompleteness (missing shards
or rows, an unfinished run) refuses unless `allow_incomplete`. It then copies `pairs`,
`samples`, `errors` and `runs` with DuckDB (`ATTACH ... (READ_ONLY)` + `INSERT ... SELECT`),
renumbering run ids (old ids are mapped per shard; `runs.merged_from` names the shard file,
`runs.shard` keeps the `I/N` spec), and the human labels of `rmjudge review import`
(`human_labels`: a label follows its pair id; shards that label one pair differently for one
reviewer are refused), writes `meta` and moves the finished file into place.
"""

from __future__ import annotations

from rmjudge.core.errors import UserError

import os
from dataclasses import dataclass, field

import orjson

from rmjudge.core.settings import setting
from rmjudge.core.sql import quote_ident, sql_literal
from rmjudge.files import check_not_busy
from rmjudge.store import (NewStore, describe_differences, import_stores, is_rmjudge_store,
                           missing_core_tables, not_a_store_message)

SHOW = 5  # ids or row numbers named in a message before "and N more"
SHARD_FIX = "pass the .duckdb files written by rmjudge score"


class MergeError(UserError):
    """The shards cannot be merged as asked; the message says why and how to fix it."""


@dataclass(frozen=True)
class MergeSettings:
    """What `rmjudge merge` merges into what, and how strictly: its options (with `--map`,
    `MAP_HELP`, and `--config` / `--split` for the `--input` dataset)."""

    shards: tuple[str, ...] = setting(argument=True, nargs=-1, required=True,
                                      metavar="SHARD.duckdb...")
    output: str = setting(help="The merged run store (.duckdb).", option=("-o", "--output"))
    source: str | None = setting(None, "Check against the input that every row is in exactly "
                                 "one shard.", option="--input", metavar="FILE")
    allow_incomplete: bool = setting(False, "Write the merge even when shards or rows are "
                                     "missing or a run did not finish.",
                                     flag="--allow-incomplete")
    overwrite: bool = setting(False, "Replace an existing output.", flag="--overwrite")


# `merge`'s wording of --map (rmjudge.io.mapping.ReadingChoice)
MAP_HELP = ("The --map the shards were scored with, for shards that did not record it (the "
            "--input check).")


@dataclass
class ShardInfo:
    path: str
    pairs: int
    errors: int
    runs: int
    specs: list[str]  # distinct `--shard I/N` values of its runs ('' for an unsharded run)
    last_status: str | None


@dataclass
class MergeReport:
    output: str | None  # None when nothing was written
    shards: list[ShardInfo]
    pairs: int = 0
    errors: int = 0
    samples: int = 0
    runs: int = 0
    input_rows: int | None = None
    problems: list[str] = field(default_factory=list)


def _listing(items: list) -> str:
    shown = ", ".join(str(x) for x in items[:SHOW])
    return shown + (f" and {len(items) - SHOW} more" if len(items) > SHOW else "")


def merge(shards: list[str], output: str, *, input: str | None = None,
          mapping: dict[str, str] | None = None, overwrite: bool = False,
          allow_incomplete: bool = False) -> MergeReport:
    """Check the shards and merge them into `output` (a DuckDB file). See the module doc."""
    import duckdb

    if not shards:
        raise MergeError("no shard files given; pass the run stores to merge, e.g. out-*.duckdb")
    from rmjudge.files import check_not_sidecar, output_format

    check_not_sidecar(output)
    if output_format(output) != "duckdb":
        raise MergeError(f"merge writes a DuckDB run store: name the output .duckdb, not "
                         f"{output} (export it afterwards with DuckDB COPY)")
    paths = [os.path.abspath(p) for p in shards]
    if len(set(paths)) != len(paths):
        raise MergeError("a shard file is given twice; pass each run store once")
    out_abs = os.path.abspath(output)
    if out_abs in paths:
        raise MergeError(f"the output {output} is one of the shards; use -o to write elsewhere")
    for p in shards:
        if not os.path.isfile(p):
            raise MergeError(f"shard file not found: {p}")
        if not is_rmjudge_store(p):
            raise MergeError(not_a_store_message(p, SHARD_FIX))
        check_not_busy(p)
    if os.path.exists(output) and not overwrite:
        raise MergeError(f"{output} exists; use --overwrite to replace it or -o to write elsewhere")

    con = duckdb.connect()
    aliases = [f"s{i}" for i in range(len(shards))]
    try:
        for p, a in zip(shards, aliases):
            try:
                con.execute(f"ATTACH {sql_literal(p)} AS {quote_ident(a)} (READ_ONLY)")
            except duckdb.Error as exc:
                raise MergeError(f"cannot open {p} as DuckDB: {str(exc).splitlines()[0]}") from None
        settings = _check_settings(con, shards, aliases)
        identity = _check_commits(con, shards, aliases)
        report = MergeReport(None, [_shard_info(con, p, a) for p, a in zip(shards, aliases)])
        _check_doubles(con, shards, aliases)
        _check_human_labels(con, shards, aliases)
        report.problems += _check_shard_specs(report.shards,
                                              "rank" if settings.get("rank") else "score")
        if input is not None:
            report.problems += _check_input(con, shards, aliases, input, mapping,
                                            settings, identity, report)
        if report.problems and not allow_incomplete:
            return report
    except duckdb.Error as exc:
        raise MergeError(f"cannot read the shards ({str(exc).splitlines()[0]}); are they run "
                         "stores written by rmjudge score (and not damaged)?") from None
    finally:
        con.close()
    _write(shards, output, settings, identity, report, overwrite)
    return report


def _check_settings(con, shards: list[str], aliases: list[str]) -> dict:
    found = []
    for p, a in zip(shards, aliases):
        tables = {r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = ?", [a]).fetchall()}
        missing = missing_core_tables(tables)
        if missing:
            raise MergeError(not_a_store_message(p, SHARD_FIX,
                                                 f" (no {', '.join(sorted(missing))} table)"))
        row = con.execute(f"SELECT value FROM {quote_ident(a)}.meta WHERE key = 'settings'").fetchone()
        if row is None:
            raise MergeError(f"{p} has no recorded settings (no run started); drop it from the "
                             "merge or rerun its shard")
        try:
            value = orjson.loads(row[0])
        except orjson.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            raise MergeError(f"{p} has malformed recorded settings (meta key 'settings' is not "
                             "a JSON object); rerun its shard into a fresh output")
        found.append(value)
    first = found[0]
    kinds = [bool(s.get("rank")) for s in found]
    if len(set(kinds)) > 1:  # a ranked store's rows are comparisons of a prompt's candidates
        ranked, pairs = shards[kinds.index(True)], shards[kinds.index(False)]
        raise MergeError(f"{ranked} is a ranked store (rmjudge rank) and {pairs} holds pairs "
                         "judged by rmjudge score: stores of different kinds cannot be merged; "
                         "merge the shards of one command")
    for p, s in zip(shards[1:], found[1:]):
        if s != first:
            raise MergeError(
                f"the shards disagree on settings: {shards[0]} -> {p}: "
                f"{describe_differences(first, s)}; rerun the odd shard with the same model "
                "and options (or merge only shards made alike)")
    return first


def _check_commits(con, shards: list[str], aliases: list[str]) -> dict | None:
    """The input the shards recorded (the first shard's record that has one; the merged store
    keeps it). Shards judged from different commits of a Hub dataset are refused: their pairs
    come from different versions of the data."""
    found = []
    for p, a in zip(shards, aliases):
        row = con.execute(f"SELECT value FROM {quote_ident(a)}.meta WHERE key = 'input'").fetchone()
        try:
            value = orjson.loads(row[0]) if row else None
        except orjson.JSONDecodeError:
            value = None
        found.append((p, value if isinstance(value, dict) else None))
    commits = [(p, v["commit"]) for p, v in found if v and v.get("commit")]
    if len({c for _, c in commits}) > 1:
        (p0, c0), (p1, c1) = commits[0], next(x for x in commits if x[1] != commits[0][1])
        raise MergeError(f"the shards were judged from different commits of their input: {p0} "
                         f"from {c0}, {p1} from {c1}; rerun the odd shard with the input pinned "
                         f"to one commit (hf://datasets/ORG/NAME@COMMIT)")
    return next((v for _, v in found if v and v.get("commit")), None) or \
        next((v for _, v in found if v), None)


def _shard_info(con, path: str, alias: str) -> ShardInfo:
    a = quote_ident(alias)
    n_pairs = con.execute(f"SELECT count(*) FROM {a}.pairs").fetchone()[0]
    n_err = con.execute(f"SELECT count(*) FROM {a}.errors").fetchone()[0]
    runs = con.execute(f"SELECT coalesce(shard, ''), status FROM {a}.runs ORDER BY run_id").fetchall()
    specs = sorted({r[0] for r in runs})
    return ShardInfo(path, n_pairs, n_err, len(runs), specs, runs[-1][1] if runs else None)


def _union(aliases: list[str], select: str, table: str) -> str:
    return " UNION ALL ".join(
        f"SELECT {select}, {i} AS shard_index FROM {quote_ident(a)}.{table}"
        for i, a in enumerate(aliases))


def _check_doubles(con, shards: list[str], aliases: list[str]) -> None:
    doubled = con.execute(f"""
        SELECT id, list(DISTINCT shard_index ORDER BY shard_index) FROM ({_union(aliases, 'id', 'pairs')})
        GROUP BY id HAVING count(*) > 1 ORDER BY id""").fetchall()
    if doubled:
        names = [f"{pid!r} ({' and '.join(os.path.basename(shards[i]) for i in idx)})"
                 for pid, idx in doubled]
        raise MergeError(
            f"{len(doubled)} pair id(s) are in more than one shard: {_listing(names)}; the shards "
            "overlap (same --shard twice, or an unsharded run among shards): merge each pair's "
            "results once")
    rows = con.execute(f"""
        SELECT row_number, list(shard_index ORDER BY shard_index) FROM (
            {_union(aliases, 'row_number', 'pairs')} UNION ALL {_union(aliases, 'row_number', 'errors')})
        GROUP BY row_number HAVING count(*) > 1 ORDER BY row_number""").fetchall()
    if rows:
        names = [f"{rn} ({' and '.join(os.path.basename(shards[i]) for i in idx)})"
                 for rn, idx in rows]
        raise MergeError(
            f"{len(rows)} input row(s) are recorded more than once: {_listing(names)}; were the "
            "shards made from the same input file?")


def _check_human_labels(con, shards: list[str], aliases: list[str]) -> None:
    """Human labels (`rmjudge review import`) follow their pair id into the merge; two shards
    that give one pair, for one reviewer, different labels are refused."""
    labelled = [(i, a) for i, a in enumerate(aliases) if con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND table_name = "
        "'human_labels'", [a]).fetchone()[0]]
    if len(labelled) < 2:
        return
    every = " UNION ALL ".join(f"SELECT pair_id, reviewer, label, {i} AS shard_index "
                               f"FROM {quote_ident(a)}.human_labels" for i, a in labelled)
    split = con.execute(f"""
        SELECT pair_id, reviewer, list(DISTINCT shard_index ORDER BY shard_index)
        FROM ({every}) GROUP BY pair_id, reviewer
        HAVING count(DISTINCT coalesce(label, '')) > 1 ORDER BY pair_id, reviewer""").fetchall()
    if split:
        names = [f"{pid!r} by {who!r} ({' and '.join(os.path.basename(shards[i]) for i in idx)})"
                 for pid, who, idx in split]
        raise MergeError(
            f"{len(split)} human label(s) differ between shards: {_listing(names)}; import the "
            "right review file again into the shard that holds the wrong label (rmjudge review "
            "import SHARD.duckdb FILE) and merge again")


def _spec(s: str) -> tuple[int, int] | None:
    """'I/N' -> (I, N); None for an unsharded run or another label (such as a Ray run's)."""
    i, sep, n = s.partition("/")
    return (int(i), int(n)) if sep and i.isdigit() and n.isdigit() else None


def _check_shard_specs(infos: list[ShardInfo], command: str = "score") -> list[str]:
    """What is wrong with the shards' `--shard I/N` values and last runs; `command`: the one
    that made them (`score`, or `rank` for ranked shards), named in the fixes."""
    problems = []
    specs = {s for i in infos for s in i.specs if _spec(s)}
    unsharded = [i.path for i in infos if any(_spec(s) is None for s in i.specs)]
    if specs:
        ns = {_spec(s)[1] for s in specs}  # type: ignore[index]
        if len(ns) > 1:
            problems.append(f"the shards were cut with different counts ({', '.join(sorted(specs))})")
        else:
            n = ns.pop()
            have = {_spec(s)[0] for s in specs}  # type: ignore[index]
            gone = [f"{i}/{n}" for i in range(n) if i not in have]
            if gone:
                problems.append(f"missing shard(s) {', '.join(gone)}: run rmjudge {command} "
                                "--shard for each and merge again")
        if unsharded:
            problems.append(f"unsharded run(s) in {_listing(unsharded)} among sharded ones")
    for i in infos:
        if i.last_status != "finished":
            problems.append(f"the last run in {i.path} did not finish (status {i.last_status}); "
                            f"rerun its rmjudge {command} command to complete it")
    return problems


def input_mapper(settings: dict, mapping: dict[str, str] | None):
    """The Mapper the shards read their input with: the `--map`, `--label-values` and
    `--label` they recorded (`input_reading` in their settings), with their seed; `mapping`
    (merge's `--map`) stands in for a store that recorded no map."""
    from rmjudge.io.mapping import Mapper

    reading = settings.get("input_reading") or {}
    # without a recorded reading the shards read letter labels alone (any other label value
    # would have needed --label-values, which is recorded): such a value is left unlabelled
    # here instead of stopping the check
    return Mapper(reading.get("map") or mapping or {}, seed=settings.get("seed", 0),
                  label_values=reading.get("label_values"), label_choice=reading.get("label"),
                  read_labels=bool(reading))


def _check_input(con, shards, aliases, source: str, mapping: dict | None, settings: dict,
                 identity: dict | None, report: MergeReport) -> list[str]:
    """Every input pair in exactly one shard, by id, holding the content it was judged with
    (the content hash stored with each verdict); every other input row in a shard's errors."""
    from rmjudge.io.readers import InputError
    from rmjudge.runs.setup import open_input

    counts = {_spec(s)[1] for i in report.shards for s in i.specs if _spec(s)}  # type: ignore[index]
    check = _InputCheck(con, aliases, counts.pop() if len(counts) == 1 else None)
    mapper = input_mapper(settings, mapping)
    try:
        for item in open_input(source, mapper):
            check.row(item)
    except InputError as exc:
        raise MergeError(f"cannot read --input: {exc}") from None
    report.input_rows = len(check.seen_rows)
    return _revision_problems(source, identity) + check.problems(source)


class _InputCheck:
    """The input's rows against what the shards recorded: rows in no shard, recorded rows not
    in the input, rows with another pair id and rows edited since they were judged."""

    def __init__(self, con, aliases, n: int | None):
        self.recorded: dict[str, tuple[int, str | None]] = {r[0]: (r[1], r[2]) for r in con.execute(
            " UNION ALL ".join(_hashed_ids(con, a) for a in aliases)).fetchall()}
        self.at_row = {rn: pid for pid, (rn, _) in self.recorded.items()}
        self.err_rows = {r[0] for r in con.execute(
            f"SELECT row_number FROM ({_union(aliases, 'row_number', 'errors')})").fetchall()}
        self.n = n  # the shard count, to name a missing shard
        self.missing: list[int] = []
        self.owners: set[str] = set()
        self.mismatched: list[int] = []
        self.changed: list[int] = []
        self.seen_rows: set[int] = set()
        self.seen_ids: set[str] = set()

    def row(self, item) -> None:
        """Check one input row (a pair or a row failure)."""
        from rmjudge.io.intake import RowFailure, in_shard

        rn = item.row_number
        self.seen_rows.add(rn)
        if not isinstance(item, RowFailure):
            self.seen_ids.add(item.id)
            if item.id in self.recorded:
                stored = self.recorded[item.id][1]
                if stored is not None and stored != item.content_hash():
                    self.changed.append(rn)
                return
            if rn in self.at_row:
                self.mismatched.append(rn)
                return
            pid = item.id
        else:
            if rn in self.err_rows or (item.duplicate_of is not None and item.id in self.recorded):
                return
            if rn in self.at_row:
                self.seen_ids.add(self.at_row[rn])  # judged then, unreadable now: an edited row
                self.changed.append(rn)
                return
            pid = None
        if rn in self.err_rows:
            return
        self.missing.append(rn)
        if self.n is not None:
            n = self.n
            key = pid if pid is not None else f"row:{rn}"
            self.owners.update(f"{i}/{n}" for i in range(n) if in_shard(key, (i, n)))

    def problems(self, source: str) -> list[str]:
        """One line per kind of mismatch, after every row was checked."""
        problems = []
        if self.missing:
            where = f" (they belong to shard {', '.join(sorted(self.owners))})" if self.owners else ""
            problems.append(f"{len(self.missing)} input row(s) are in no shard: rows "
                            f"{_listing(self.missing)}{where}; run the missing shard(s) and "
                            "merge again")
        shown = set(self.mismatched)
        extra = sorted({rn for pid, (rn, _) in self.recorded.items()
                        if pid not in self.seen_ids and rn not in shown}
                       | (self.err_rows - self.seen_rows))
        if extra:
            problems.append(f"{len(extra)} recorded row(s) are not in {source}: rows "
                            f"{_listing(extra)}; is it the input the shards were made from?")
        if self.mismatched:
            problems.append(f"{len(self.mismatched)} row(s) hold another pair id than {source} "
                            f"gives: rows {_listing(self.mismatched)}; pass the --map the shards "
                            "were scored with (a row without an id column that was edited since "
                            "gets a new id: rerun its shard with --rejudge-changed)")
        if self.changed:
            problems.append(f"{len(self.changed)} row(s) of {source} hold other content than the "
                            f"pair judged for them: rows {_listing(self.changed)}; rerun their "
                            "shard's rmjudge score command with --rejudge-changed, then merge "
                            "again")
        return problems


def _hashed_ids(con, a: str) -> str:
    """The query of one attached shard's pair ids, row numbers and content hashes (stores made
    before content hashes hold none)."""
    has = con.execute("SELECT count(*) FROM duckdb_columns() WHERE database_name = ? AND "
                      "table_name = 'pairs' AND column_name = 'content_hash'", [a]).fetchone()[0]
    return (f"SELECT id, row_number, {'content_hash' if has else 'NULL'} AS content_hash "
            f"FROM {quote_ident(a)}.pairs")


def _revision_problems(source: str, identity: dict | None) -> list[str]:
    """A Hub input at another commit than the shards were judged from."""
    if identity and identity.get("commit"):
        from rmjudge.io.huggingface import resolved_revision

        now = (resolved_revision(source) or {}).get("commit")
        if now and now != identity["commit"]:
            return [(f"the shards were judged from commit {identity['commit']} of "
                     f"{identity.get('source')}, but {source} is commit {now}; give --input "
                     f"pinned to that commit ({identity.get('pinned') or identity['commit']})")]
    return []


def _write(shards: list[str], output: str, settings: dict, identity: dict | None,
           report: MergeReport, overwrite: bool) -> None:
    new = NewStore(output, settings, overwrite=overwrite)
    try:
        new.store.set_meta("merged_from", shards)
        if identity is not None:  # what the shards were judged from, Hub commit included
            new.store.set_meta("input", identity)
        counts = import_stores(new.store, shards)
    except BaseException:
        new.discard()
        raise
    new.install()
    report.pairs, report.errors, report.samples, report.runs = counts
    report.output = output
