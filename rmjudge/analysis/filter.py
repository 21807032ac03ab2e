"""`rmjudge filter`: a cleaned preference dataset from a judged table.

Every pair gets one outcome, decided in this order (the first that applies):
1. dropped, `no verdict`: the judge failed (`verdict = error`) or the run dropped the pair;
2. dropped, `orders disagree`: the two orders gave different winners (with `consistent_only`;
   without it, a tie still has no winner and is dropped as such);
3. dropped, `one order failed`: one order has no verdict (with `consistent_only`);
4. dropped, `judge unsure`: the winner's share of the final votes (p_a for A, 1 - p_a for B,
   averaged over the orders) is below `min_confidence`;
5. labelled pairs: `kept` when the judge agrees with the label; `swapped` (chosen and
   rejected exchanged) when it disagrees, `relabel` is on and the share is at least
   `relabel_min`; else dropped, `judge disagrees with label`;
6. unlabelled pairs: `labelled` (chosen = the judge's winner) when `label_unlabelled`, else
   dropped, `unlabelled`.
So the chosen response of every written row is the judge's winner.

Formats: `dpo` (TRL: `prompt`, `chosen`, `rejected`; the prompt as a string, or with `chat` as
the conversation with `chosen`/`rejected` as one assistant message each), `rm` (`chosen` and
`rejected` as whole conversations, TRL's implicit-prompt form) and `kto` (TRL's unpaired form:
`prompt`, `completion`, `label`; two rows per pair, the chosen response with `label = true`
then the rejected one with `label = false`; with `chat` the prompt is the conversation and the
completion one assistant message). Conversations are lists of `{role, content}` structs in
both file formats. Written as Parquet or JSONL by the output's extension, loadable with
`datasets.load_dataset("parquet"|"json", data_files=...)`; when no pair is kept the file is
still a valid one of its format (Parquet: no rows, the dataset's columns; JSONL: 0 lines).

With `evidence`, every row also carries the judge's evidence about its pair (the same values
on both KTO rows of a pair), relative to the pair's chosen response: `judge_vote_share` (share
of the final votes, averaged over the orders, that went to the chosen response), `judge_consistent`
(the two orders gave the same winner; null when judged in one order; this is order agreement,
not the positional consistency metric, which also needs the gold label) and `judge_verdict_ab` /
`judge_verdict_ba` (each order's verdict: `chosen`, `rejected`, `error`, or null when that
order was not judged). The summary then also prints the judged table's named metrics and
rollout counts (core/counts.py), the figures the dataset card carries.

With `prefer = "human"`, a pair with a human label (`rmjudge review import`; several reviewers:
their majority, else tie) is decided by it before any rule above: a human A or B is the chosen
response (outcome `human`), a human tie drops the pair (`human tie`). Pairs without one go
through the rules as usual.

Kept passthrough columns get their input types back (`rmjudge.analysis.typed`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rmjudge.analysis.tables import JudgedTable, TableError
from rmjudge.analysis.typed import typed_columns
from rmjudge.core.settings import SettingsError, setting
from rmjudge.core.sql import quote_ident
from rmjudge.files import output_format

MSG_TYPE = '[{"role":"VARCHAR","content":"VARCHAR"}]'
FORMATS = ("dpo", "rm", "kto")
EVIDENCE_COLUMNS = ("judge_vote_share", "judge_consistent", "judge_verdict_ab",
                    "judge_verdict_ba")
# the columns each format writes itself (a kept column may not take one of these names)
FORMAT_COLUMNS = {"dpo": ("prompt", "chosen", "rejected"), "rm": ("chosen", "rejected"),
                  "kto": ("prompt", "completion", "label")}


@dataclass(frozen=True)
class FilterSettings:
    """Which pairs of a judged table `rmjudge filter` keeps and how it writes them; every field
    is one of its options."""

    min_confidence: float = setting(
        0.5, "Minimum share of the final votes for the judge's winner (averaged over the "
        "orders; 0.5 keeps every winner, 1.0 only unanimous ones).")
    consistent_only: bool = setting(
        True, "Keep pairs whose orders disagree when the run's --on-inconsistent policy still "
        "gave a winner (confident), and pairs with one failed order.",
        flag="--allow-inconsistent", dest="allow_inconsistent")
    relabel: bool = setting(False, "Swap chosen and rejected where the judge disagrees with the "
                            "label with at least --relabel-min of the votes (default: drop such "
                            "pairs).", flag="--relabel")
    relabel_min: float = setting(0.75)  # the winner's vote share a swap needs
    label_unlabelled: bool = setting(
        True, "Pairs without a gold label: label them with the judge's winner, or drop them.",
        option="--unlabelled", dest="unlabelled", choices={"label": True, "drop": False})
    format: str = setting("dpo", "dpo: TRL prompt/chosen/rejected; rm: chosen/rejected as whole "
                          "conversations; kto: TRL prompt/completion/label, two rows per pair "
                          "(chosen true, rejected false).", dest="fmt", choices=FORMATS)
    chat: bool = setting(False, "dpo/kto: prompt as chat messages and the responses as "
                         "assistant messages.", flag="--chat")
    evidence: bool = setting(False, "Add the judge's evidence per pair: judge_vote_share, "
                             "judge_consistent, judge_verdict_ab, judge_verdict_ba (relative to "
                             "the chosen response).", flag="--evidence")
    keep_columns: tuple[str, ...] = setting(
        (), "Columns of the judged table to carry along (passthrough columns, id, p_a, ...); "
        "passthrough columns get their input types back (numbers, lists, structs).",
        metavar="COL,...", split=",", cli_default="", show_default=False)
    prefer: str = setting("judge", "human: where a human label was imported (rmjudge review "
                          "import), it decides the pair (chosen = the human's pick; a human tie "
                          "drops the pair).", choices=("judge", "human"))

    # the order of the options in `rmjudge filter --help`
    OPTIONS = ("format", "chat", "evidence", "min_confidence", "consistent_only", "relabel",
               "relabel_min", "label_unlabelled", "prefer", "keep_columns")

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_confidence <= 1.0:
            raise SettingsError("--min-confidence must be between 0 and 1 (0.5 keeps every "
                                "winner)")
        if not 0.5 <= self.relabel_min <= 1.0:
            raise SettingsError("--relabel-min must be between 0.5 and 1")
        if self.prefer not in ("judge", "human"):
            raise SettingsError("--prefer must be judge or human")
        if self.format not in FORMATS:
            raise SettingsError("--format must be dpo, rm or kto")
        if self.chat and self.format == "rm":
            raise SettingsError("--chat applies to --format dpo and kto (rm rows are always "
                                "conversations)")


@dataclass
class FilterSummary:
    output: str
    total: int
    kept: int
    swapped: int
    labelled: int
    dropped: dict[str, int]
    flattened: int  # multi-turn prompts written as their last user message (dpo without chat)
    format: str = "dpo"
    file_format: str = "jsonl"
    columns: list[tuple[str, str]] = field(default_factory=list)  # (name, DuckDB type)
    human: int = 0  # pairs whose chosen response a human label decided (--prefer human)
    metrics: dict | None = None  # with evidence: core/counts.py's metrics of the table
    rollout_counts: dict | None = None  # with evidence and samples: its rollout counts

    @property
    def written(self) -> int:
        """Pairs written."""
        return self.kept + self.swapped + self.labelled + self.human

    @property
    def rows(self) -> int:
        """Rows of the file (two per pair in KTO)."""
        return 2 * self.written if self.format == "kto" else self.written


HUMAN = "rmjudge_human_label"  # the human label's column in the --prefer human source


def human_source(table: JudgedTable) -> str:
    """`pairs` with each pair's human label (column HUMAN), which replaces `verdict` where it
    names A or B, so the chosen response below is the human's."""
    from rmjudge.analysis.agreement import human_sql

    q = human_sql(table)
    if q is None:
        raise TableError(f"{table.path} has no human labels for --prefer human: import them "
                         "first with `rmjudge review import TABLE LABELS`")
    return (f"(SELECT p.* REPLACE (CASE WHEN h.label IN ('A', 'B') THEN h.label ELSE p.verdict "
            f"END AS verdict), h.label AS {HUMAN} FROM pairs p LEFT JOIN ({q}) h "
            "ON h.pair_id = p.id)")


def decisions_sql(fs: FilterSettings, source: str = "pairs") -> str:
    """A query over `pairs` (or `source`) adding `strength` (winner vote share), `action` and
    `reason`."""
    unsure = f"judge unsure (winner vote share < {fs.min_confidence:g})"
    checks = []
    if fs.prefer == "human":
        checks += [f"WHEN {HUMAN} = 'tie' THEN 'human tie'",
                   f"WHEN {HUMAN} IN ('A', 'B') THEN NULL"]
    checks += [
        "WHEN verdict IS NULL OR verdict IN ('error', 'dropped') THEN 'no verdict'",
    ]
    if fs.consistent_only:
        checks += [
            "WHEN consistent = false THEN 'orders disagree'",
            "WHEN verdict_ab = 'error' OR verdict_ba = 'error' THEN 'one order failed'",
        ]
    checks += [
        "WHEN verdict = 'tie' THEN 'tie (orders disagree)'",
        f"WHEN strength IS NULL OR strength < {fs.min_confidence!r} - 1e-9 THEN '{unsure}'",
    ]
    disagree = ("WHEN label IN ('A', 'B') AND label <> verdict AND NOT (strength >= "
                f"{fs.relabel_min!r} - 1e-9) THEN 'judge disagrees with label'") if fs.relabel \
        else "WHEN label IN ('A', 'B') AND label <> verdict THEN 'judge disagrees with label'"
    checks.append(disagree)
    if not fs.label_unlabelled:
        checks.append("WHEN label IS NULL OR label NOT IN ('A', 'B') THEN 'unlabelled'")
    human = f"WHEN {HUMAN} IN ('A', 'B') THEN 'human' " if fs.prefer == "human" else ""
    return f"""
    WITH s AS (
      SELECT *, CASE verdict WHEN 'A' THEN p_a WHEN 'B' THEN 1 - p_a END AS strength FROM {source}),
    d AS (SELECT *, CASE {' '.join(checks)} END AS reason FROM s)
    SELECT *, CASE WHEN reason IS NOT NULL THEN 'dropped' {human}
                   WHEN label IS NULL OR label NOT IN ('A', 'B') THEN 'labelled'
                   WHEN label = verdict THEN 'kept' ELSE 'swapped' END AS action
    FROM d"""


CHOSEN = "CASE verdict WHEN 'A' THEN response_a ELSE response_b END"
REJECTED = "CASE verdict WHEN 'A' THEN response_b ELSE response_a END"
MESSAGES = f"from_json(messages, '{MSG_TYPE}')"


def _turn(x: str) -> str:
    return f"[{{'role': 'assistant', 'content': {x}}}]"


def output_columns(fs: FilterSettings) -> list[str]:
    """The format's own columns, over the `decided` view (dpo and rm: one row per pair)."""
    if fs.format == "rm":
        return [f"list_concat({MESSAGES}, {_turn(CHOSEN)}) AS chosen",
                f"list_concat({MESSAGES}, {_turn(REJECTED)}) AS rejected"]
    if fs.chat:
        return [f"{MESSAGES} AS prompt", f"{_turn(CHOSEN)} AS chosen",
                f"{_turn(REJECTED)} AS rejected"]
    return ["prompt", f"{CHOSEN} AS chosen", f"{REJECTED} AS rejected"]


def kto_columns(fs: FilterSettings, good: bool) -> list[str]:
    """KTO's columns for the row of the chosen (`good`) or the rejected response of a pair."""
    text = CHOSEN if good else REJECTED
    prompt = MESSAGES if fs.chat else "prompt"
    completion = _turn(text) if fs.chat else text
    return [f"{prompt} AS prompt", f"{completion} AS completion", f"{str(good).lower()} AS label"]


def _relative(col: str) -> str:
    """An order's verdict (A/B letter) relative to the pair's chosen response (the winner)."""
    return (f"CASE WHEN {col} IN ('A', 'B') THEN CASE WHEN {col} = verdict THEN 'chosen' "
            f"ELSE 'rejected' END ELSE {col} END")


def evidence_columns() -> list[str]:
    return ["CAST(strength AS DOUBLE) AS judge_vote_share",
            "CAST(consistent AS BOOLEAN) AS judge_consistent",
            f"CAST({_relative('verdict_ab')} AS VARCHAR) AS judge_verdict_ab",
            f"CAST({_relative('verdict_ba')} AS VARCHAR) AS judge_verdict_ba"]


def dataset_query(table: JudgedTable, fs: FilterSettings) -> str:
    """The query over the `decided` view that yields the rows of the dataset, in input order."""
    reserved = set(FORMAT_COLUMNS[fs.format]) | {"prompt", "chosen", "rejected"}
    if fs.evidence:
        reserved |= set(EVIDENCE_COLUMNS)
    missing = [c for c in fs.keep_columns if c not in table.pair_columns]
    if missing:
        raise TableError(
            f"{table.path} has no column {', '.join(map(repr, missing))}; columns you can keep: "
            f"{', '.join(c for c in table.pair_columns if c not in reserved)}")
    clash = [c for c in fs.keep_columns if c in reserved]
    if clash:
        raise TableError(f"--keep-columns {', '.join(clash)} would overwrite the output's own "
                         "column of that name")
    typed = typed_columns(table, [c for c in fs.keep_columns if c in table.passthrough])
    keep = [f"{typed.get(c, quote_ident(c))} AS {quote_ident(c)}" for c in fs.keep_columns]
    extra = (evidence_columns() if fs.evidence else []) + keep
    kept = "FROM decided WHERE action <> 'dropped'"
    if fs.format != "kto":
        return f"SELECT {', '.join(output_columns(fs) + extra)} {kept} ORDER BY row_number, id"
    order = ["row_number AS __row", "id AS __id"]
    rows = [f"SELECT {', '.join(kto_columns(fs, good) + extra + order)}, {int(not good)} "
            f"AS __side {kept}" for good in (True, False)]
    return (f"SELECT * EXCLUDE (__row, __id, __side) FROM ({rows[0]} UNION ALL {rows[1]}) "
            "ORDER BY __row, __id, __side")


def check_filter_output(table: str, output: str) -> None:
    """Refuse `output` unless it is new or an earlier filter output that nothing changed since
    (its filter record's sha256 matches; rmjudge.files.outputs)."""
    from rmjudge.files import guard_output
    from rmjudge.analysis.filter_record import is_filter_output, record_path

    guard_output(output, table, "filter", is_filter_output,
                 f"no filter record {os.path.basename(record_path(output))} beside it with its "
                 "current sha256")


def filter_table(table: JudgedTable, output: str, fs: FilterSettings | None = None) -> FilterSummary:
    """Decide every pair, write the kept ones to `output` (.parquet or .jsonl) and count."""
    fs = fs or FilterSettings()
    fmt = output_format(output)
    if fmt == "duckdb":
        raise TableError(f"cannot tell the format of {output}: name the output .parquet or "
                         ".jsonl")
    check_filter_output(table.path, output)
    con = table.con
    source = human_source(table) if fs.prefer == "human" else "pairs"
    con.execute(f"CREATE OR REPLACE TEMP VIEW decided AS {decisions_sql(fs, source)}")
    query = dataset_query(table, fs)
    columns = [(r[0], r[1]) for r in con.execute(f"DESCRIBE {query}").fetchall()]
    from rmjudge.files import make_dir, write_query_file

    make_dir(os.path.dirname(os.path.abspath(output)))
    write_query_file(con, query, output, fmt,
                     check=lambda: check_filter_output(table.path, output))
    counts = dict(con.execute("SELECT action, count(*) FROM decided GROUP BY 1").fetchall())
    dropped = dict(con.execute("""SELECT reason, count(*) FROM decided WHERE action = 'dropped'
                                  GROUP BY 1 ORDER BY 2 DESC, 1""").fetchall())
    flattened = 0
    if fs.format in ("dpo", "kto") and not fs.chat:
        flattened = con.execute(f"""SELECT count(*) FROM decided WHERE action <> 'dropped'
                                    AND len({MESSAGES}) > 1""").fetchone()[0]
    evidence_metrics = rollouts = None
    if fs.evidence:
        from rmjudge.core.counts import metrics, pair_counts, sample_counts

        evidence_metrics = metrics(pair_counts(table.one))
        rollouts = sample_counts(table.one) if table.has_samples else None
    return FilterSummary(
        output=output, total=sum(counts.values()), kept=counts.get("kept", 0),
        swapped=counts.get("swapped", 0), labelled=counts.get("labelled", 0), dropped=dropped,
        flattened=flattened, format=fs.format, file_format=fmt, columns=columns,
        human=counts.get("human", 0),
        metrics=evidence_metrics, rollout_counts=rollouts,
    )


def empty_warning(s: FilterSummary) -> str | None:
    """The warning for a dataset with no rows (None when some pair was kept)."""
    if s.written:
        return None
    if s.file_format == "parquet":
        return (f"warning: no pair passed the filter; {s.output} is a Parquet file with the "
                "dataset's columns and no rows")
    return (f"warning: no pair passed the filter; {s.output} has 0 lines (valid JSONL, but "
            "datasets.load_dataset cannot read columns from it: write .parquet to keep the "
            "schema)")


def render(s: FilterSummary) -> str:
    rows = f" ({s.rows} rows)" if s.rows != s.written else ""
    lines = [f"wrote {s.written} of {s.total} pairs{rows} -> {s.output}",
             f"  kept (judge agrees with label): {s.kept}",
             f"  swapped (judge confidently disagrees, chosen/rejected exchanged): {s.swapped}",
             f"  labelled by the judge (no gold label): {s.labelled}",
             *([f"  decided by a human label (--prefer human): {s.human}"] if s.human else []),
             f"  dropped: {sum(s.dropped.values())}"]
    for reason, n in s.dropped.items():
        lines.append(f"    {n} x {reason}")
    if s.metrics is not None:
        from rmjudge.core.counts import metrics_lines, rollout_counts_line

        judged = metrics_lines(s.metrics) + [rollout_counts_line(s.rollout_counts or {}) or ""]
        lines.append(f"  the judge over all {s.total} judged pairs:")
        lines += [f"    {line}" for line in judged if line]
    if s.flattened:
        lines.append(f"note: {s.flattened} prompts have earlier turns that a string prompt cannot "
                     "hold (only the last user message was written); use --chat to keep them")
    return "\n".join(lines)
