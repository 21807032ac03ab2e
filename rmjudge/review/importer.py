"""`rmjudge review import`: human labels from a review file into the run store's
`human_labels` table (written by `Store.add_human_labels`, under the store's lock).

Per label: the pair id must be in the store (else it is reported as unknown and not written);
when the file carries the pair's `slot_key`, the store's responses must be the exported ones,
in the same slots (the label is kept) or exchanged (A and B of the label are exchanged, so it
names the same response); other responses are a row error. The reviewer is `--reviewer` when
given, else the file's annotator (Label Studio's `completed_by`, Argilla's `user_id`, a CSV/JSONL
`reviewer` column), else ''. One label per pair and reviewer: a later one in the same file wins,
and an import replaces what an earlier import stored for the same pair and reviewer.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from rmjudge.analysis.tables import open_judged
from rmjudge.core.settings import setting
from rmjudge.core.words import count
from rmjudge.review.export import ReviewError
from rmjudge.review.formats import LabelFileError, read_labels
from rmjudge.review.select import slot_key
from rmjudge.files import output_format, store_path
from rmjudge.store import Store

SWAP = {"A": "B", "B": "A", "tie": "tie"}
EXAMPLES = 5


@dataclass(frozen=True)
class ImportSettings:
    """What `rmjudge review import` reads into which table: its arguments and options."""

    table: str = setting(argument=True, metavar="X.duckdb")
    labels: str = setting(argument=True, metavar="LABELS")
    reviewer: str | None = setting(None, "Name the reviewer of every label in the file (default: "
                                   "the annotator the file names, else none).", metavar="NAME")


@dataclass
class ImportSummary:
    labels_path: str
    store: str
    format: str
    imported: int = 0
    pairs: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    replaced: int = 0
    duplicates: int = 0
    swapped: int = 0
    unlabelled: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def target_store(path: str) -> str:
    """The DuckDB file that takes the labels: the run store, or an export's working store."""
    db = path if output_format(path) == "duckdb" else store_path(path)
    if not os.path.exists(db):
        raise ReviewError(f"no run store at {db}: give the .duckdb the pairs were judged into "
                          "(human labels are kept in its human_labels table)")
    return db


def import_labels(table_path: str, labels_path: str, reviewer: str | None = None) -> ImportSummary:
    if not os.path.exists(labels_path):
        raise ReviewError(f"no labels file at {labels_path}: give the edited review.csv / "
                          "review.jsonl, Label Studio's JSON export, or Argilla's export")
    db = target_store(table_path)
    try:
        parsed = read_labels(labels_path)
    except LabelFileError as exc:
        raise ReviewError(str(exc)) from None
    except OSError as exc:
        raise ReviewError(f"cannot read {labels_path}: {exc.strerror or exc}") from None
    with open_judged(table_path) as t:
        slots = {r[0]: (r[1], r[2]) for r in t.sql("SELECT id, response_a, response_b FROM pairs")}
    s = ImportSummary(labels_path, db, parsed.format, errors=list(parsed.errors),
                      unlabelled=parsed.unlabelled)
    rows: dict[tuple[str, str], tuple[str, str, str, str]] = {}
    source = os.path.abspath(labels_path)
    for lab in parsed.labels:
        if lab.pair_id not in slots:
            s.unknown.append(lab.pair_id)
            continue
        label = lab.label
        if lab.slot_key:
            a, b = slots[lab.pair_id]
            if lab.slot_key == slot_key(b, a) and lab.slot_key != slot_key(a, b):
                label = SWAP[label]
                s.swapped += 1
            elif lab.slot_key != slot_key(a, b):
                s.errors.append((lab.where, (f"pair {lab.pair_id!r}: its responses in {db} "
                                             "are not the ones exported (slot_key differs); "
                                             "export again from this store")))
                continue
        who = reviewer if reviewer is not None else lab.reviewer
        key = (lab.pair_id, who)
        if key in rows:
            s.duplicates += 1
        rows[key] = (lab.pair_id, who, label, source)
    if not rows:
        why = []
        if s.errors:
            why.append(f"{count(len(s.errors), 'row')} could not be read, e.g. "
                       f"{s.errors[0][0]}: {s.errors[0][1]}")
        if s.unknown:
            n = len(s.unknown)
            why.append(f"{count(n, 'label')} {'names a pair id' if n == 1 else 'name pair ids'} "
                       f"not in {db}, e.g. "
                       f"{s.unknown[0]!r}")
        if not why:
            verb = "has" if s.unlabelled == 1 else "have"
            why.append(f"{count(s.unlabelled, 'row')} {verb} no label yet: fill human_label (A, B "
                       "or tie) or finish the annotations first")
        raise ReviewError(f"no label imported from {labels_path}: " + "; ".join(why))
    with Store(db) as store:
        s.replaced = store.add_human_labels(list(rows.values()))
    s.imported = len(rows)
    s.pairs = len({k[0] for k in rows})
    s.counts = dict(Counter(r[2] for r in rows.values()))
    return s


def render(s: ImportSummary) -> str:
    counts = ", ".join(f"{k} {s.counts.get(k, 0)}" for k in ("A", "B", "tie"))
    lines = [(f"imported {count(s.imported, 'label')} ({counts}) on {count(s.pairs, 'pair')} from "
              f"{s.labels_path} ({s.format}) -> {s.store}, table human_labels")]
    if s.replaced:
        lines.append(f"  {s.replaced} replaced a label stored earlier for the same pair and "
                     "reviewer")
    if s.duplicates:
        lines.append(f"  {s.duplicates} were given again later in the file for the same pair "
                     "and reviewer (the later one kept)")
    if s.swapped:
        lines.append(f"  {s.swapped} were exported from a table with A and B exchanged; mapped "
                     "to this store's slots")
    if s.unlabelled:
        lines.append(f"  {count(s.unlabelled, 'row/task', 'rows/tasks')} "
                     f"{'has' if s.unlabelled == 1 else 'have'} no label yet (skipped)")
    if s.unknown:
        ex = ", ".join(repr(x) for x in s.unknown[:EXAMPLES])
        n = len(s.unknown)
        what = "names a pair id that is" if n == 1 else "name pair ids that are"
        lines.append(f"warning: {count(n, 'label')} {what} not in {s.store} (not imported), "
                     f"e.g. {ex}")
    if s.errors:
        lines.append(f"warning: {count(len(s.errors), 'row')} could not be read (not imported):")
        for where, why in s.errors[:EXAMPLES]:
            lines.append(f"  {where}: {why}")
        if len(s.errors) > EXAMPLES:
            lines.append(f"  ... {len(s.errors) - EXAMPLES} more")
    return "\n".join(lines)
