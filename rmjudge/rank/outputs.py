"""What a ranked store gives: preference datasets (`rmjudge filter`) and figures against the gold
(`rmjudge eval`).

Datasets (`filter_ranked`), from each prompt's ranking (rmjudge/rank/table.py):

- `best-worst` (default): one pair per prompt, the top-ranked candidate against the
  bottom-ranked one (UltraFeedback's recipe, with the judge's ranking);
- `all`: every pair of candidates whose Bradley-Terry probability that the better one wins is at
  least `margin`, better one first;

written as DPO (prompt/chosen/rejected) or RM (whole conversations). A pair is kept only when
its probability is above 0.5 (a tie has no chosen side) and at least `margin`.

KTO (`kto_rows`) labels candidates, not pairs, each candidate of a prompt at most once: from the
pairs selected above, a candidate chosen in some pair and rejected in none is desirable
(`true`), one rejected and never chosen is undesirable (`false`), and one both chosen and
rejected (a middle candidate, better than some and worse than others by the margin) is left
out, as is one in no selected pair. With `best-worst` that is the top candidate `true` and the
bottom one `false`; with `all`, the top is `true`, the bottom `false`, and a middle candidate
joins the side it is on by at least the margin (`--rank-margin`), else it is left out.

Figures (`evaluate_ranked`), over the prompts that have gold ranks: top-1 accuracy (the
top-ranked candidate is a gold best) and Kendall's tau-b between the Bradley-Terry scores and
the gold ranks (`scipy.stats.kendalltau`, which handles ties on both sides; a prompt whose gold
ranks are all equal has no tau), each with a percentile bootstrap interval over prompts
(`rmjudge.analysis.stats.bootstrap_mean`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from rmjudge.analysis.filter import FilterSummary
from rmjudge.core.settings import SettingsError, setting
from rmjudge.core.words import count

RANK_PAIRS = ("best-worst", "all")


@dataclass(frozen=True)
class RankFilterSettings:
    pairs: str = setting("best-worst", "A ranked store (rmjudge rank): the top candidate against "
                         "the bottom one per prompt, or every pair of candidates reaching "
                         "--rank-margin.", option="--rank-pairs", dest="rank_pairs",
                         choices=RANK_PAIRS)
    margin: float = setting(0.5, "A ranked store: keep a pair only when the Bradley-Terry "
                            "probability that its chosen response is better is at least this "
                            "(0.5..1; ties are never kept).", option="--rank-margin",
                            dest="rank_margin")
    format: str = setting("dpo", cli=False)  # these three: filter's own options
    chat: bool = setting(False, cli=False)
    keep_columns: tuple[str, ...] = setting((), cli=False)

    def __post_init__(self) -> None:
        if self.pairs not in RANK_PAIRS:
            raise SettingsError(f"--rank-pairs must be one of {', '.join(RANK_PAIRS)}")
        if not 0.5 <= self.margin < 1.0:
            raise SettingsError("--rank-margin is a probability that the chosen response is "
                                "better: give a value in [0.5, 1)")
        if self.format not in ("dpo", "rm", "kto"):
            raise SettingsError("--format must be dpo, rm or kto")
        if self.chat and self.format == "rm":
            raise SettingsError("--chat applies to --format dpo and kto (rm rows are always "
                                "conversations)")


@dataclass
class RankFilterSummary(FilterSummary):
    """`FilterSummary` of a ranked store: its KTO rows are candidates, not two per pair."""

    file_rows: int = 0
    desirable: int = 0  # KTO: rows labelled true

    @property
    def rows(self) -> int:
        return self.file_rows


def beats(si: float, sj: float) -> float:
    return 1.0 / (1.0 + math.exp(sj - si))


def selected_pairs(p, rs: RankFilterSettings) -> tuple[list[tuple[int, int, float]], str | None]:
    """(chosen, rejected, probability) pairs of one prompt, and the reason when it gives none.
    A text repeated among the candidates is taken once (its best-ranked copy), so no pair or
    KTO row is written twice."""
    texts = {r.candidate: (p.texts[r.candidate] or "").strip() for r in p.ranked}
    ranked = [r for n, r in enumerate(p.ranked) if p.texts[r.candidate] is not None
              and texts[r.candidate] not in {texts[q.candidate] for q in p.ranked[:n]}]
    if not any(r.wins or r.losses or r.ties for r in p.ranked):
        return [], "no comparison of the prompt has a verdict"
    if len(ranked) < 2:
        return [], "fewer than two candidates were compared"
    if rs.pairs == "best-worst":
        cands = [(ranked[0], ranked[-1])]
    else:
        cands = [(a, b) for x, a in enumerate(ranked) for b in ranked[x + 1:]]
    out = []
    for a, b in cands:
        prob = beats(a.score, b.score)
        if prob > 0.5 and prob >= rs.margin:
            out.append((a.candidate, b.candidate, round(prob, 9)))
    if not out:
        return [], ("best and worst are tied" if rs.pairs == "best-worst" and
                    rs.margin == 0.5 else f"no pair reaches --rank-margin {rs.margin}")
    return out, None


def _prompt_text(messages: list[dict]) -> str:
    return next((m["content"] for m in reversed(messages) if m.get("role") == "user"),
                messages[-1]["content"] if messages else "")


def dataset_rows(prompts, rs: RankFilterSettings) -> tuple[list[tuple[str, str]], list[list],
                                                            dict[str, int], int, int]:
    """(columns, rows, dropped reasons -> prompts, pairs written, prompts with earlier turns
    flattened)."""
    keep = list(rs.keep_columns)
    text_t = "JSON" if rs.chat else "VARCHAR"
    if rs.format == "kto":
        cols = [("prompt", text_t), ("completion", text_t), ("label", "BOOLEAN"),
                ("prompt_id", "VARCHAR"), ("rank", "INTEGER"), ("margin", "DOUBLE")]
    elif rs.format == "rm":
        cols = [("chosen", "JSON"), ("rejected", "JSON")]
    else:
        cols = [("prompt", text_t), ("chosen", text_t), ("rejected", text_t)]
    if rs.format != "kto":
        cols += [("prompt_id", "VARCHAR"), ("chosen_rank", "INTEGER"),
                 ("rejected_rank", "INTEGER"), ("margin", "DOUBLE")]
    cols += [(c, "VARCHAR") for c in keep]
    rows: list[list] = []
    dropped: dict[str, int] = {}
    written = flattened = 0
    for p in prompts:
        pairs, why = selected_pairs(p, rs)
        if why:
            dropped[why] = dropped.get(why, 0) + 1
            continue
        by = p.by_candidate()
        flattened += len(p.messages) > 1 and not rs.chat and rs.format != "rm"
        prompt: Any = _json(p.messages) if rs.chat else _prompt_text(p.messages)
        extra = [None if p.fields.get(c) is None else str(p.fields.get(c)) for c in keep]
        if rs.format == "kto":
            written += len(pairs)
            for cand, label, prob in kto_labels(pairs, [r.candidate for r in p.ranked]):
                text = p.texts[cand]
                rows.append([prompt, _json([_turn(text)]) if rs.chat else text, label,
                             p.prompt_id, by[cand].rank, prob] + extra)
            continue
        for c, r, prob in pairs:
            written += 1
            tail = [p.prompt_id, by[c].rank, by[r].rank, prob] + extra
            good, bad = p.texts[c], p.texts[r]
            if rs.format == "rm":
                rows.append([_json(p.messages + [_turn(good)]),
                             _json(p.messages + [_turn(bad)])] + tail)
            else:
                rows.append([prompt, _json([_turn(good)]) if rs.chat else good,
                             _json([_turn(bad)]) if rs.chat else bad] + tail)
    return cols, rows, dropped, written, flattened


def kto_labels(pairs: list[tuple[int, int, float]], by_rank: list[int]
               ) -> list[tuple[int, bool, float]]:
    """(candidate, desirable, margin) for KTO from a prompt's selected (chosen, rejected,
    probability) pairs, in rank order, each candidate at most once (see the module doc): the
    margin is the largest probability among the pairs that gave it its side."""
    chosen: dict[int, float] = {}
    rejected: dict[int, float] = {}
    for c, r, prob in pairs:
        chosen[c] = max(chosen.get(c, 0.0), prob)
        rejected[r] = max(rejected.get(r, 0.0), prob)
    out = []
    for cand in by_rank:
        if (cand in chosen) != (cand in rejected):
            out.append((cand, cand in chosen, chosen.get(cand, rejected.get(cand, 0.0))))
    return out


def _turn(text: str | None) -> dict:
    return {"role": "assistant", "content": text}


def _json(v: Any) -> str:
    import orjson

    return orjson.dumps(v).decode()


def filter_ranked(table, output: str, rs: RankFilterSettings):
    """Write the preference dataset of a ranked store to `output` (.jsonl or .parquet); its
    `FilterSummary` (total: prompts; kept: pairs written; dropped: prompts by reason)."""
    from rmjudge.analysis.filter import check_filter_output
    from rmjudge.analysis.tables import TableError
    from rmjudge.rank.table import read_rankings
    from rmjudge.files import output_format
    from rmjudge.store import write_rows_file

    fmt = output_format(output)
    if fmt == "duckdb":
        raise TableError(f"cannot tell the format of {output}: name the output .parquet or "
                         ".jsonl")
    missing = [c for c in rs.keep_columns if c not in table.passthrough]
    if missing:
        raise TableError(f"{table.path} has no column {', '.join(map(repr, missing))}; the "
                         f"prompts' own columns are: {', '.join(table.passthrough)}")
    check_filter_output(table.path, output)
    rs = replace(rs, keep_columns=tuple(dict.fromkeys(rs.keep_columns)))  # a column once
    prompts = read_rankings(table)
    cols, rows, dropped, written, flattened = dataset_rows(prompts, rs)
    names = [c[0] for c in cols]
    clash = [c for c in rs.keep_columns if names.count(c) > 1]
    if clash:
        raise TableError(f"--keep-columns {','.join(clash)} would overwrite the output's own "
                         f"column{'s' if len(clash) > 1 else ''} of that name; the "
                         f"{rs.format} rows of a ranked store already carry it")
    write_rows_file(cols, rows, output, fmt)
    return RankFilterSummary(output=output, total=len(prompts), kept=written, swapped=0,
                             labelled=0, dropped=dropped, flattened=flattened, format=rs.format,
                             file_format=fmt, columns=cols, file_rows=len(rows),
                             desirable=sum(1 for r in rows if rs.format == "kto" and r[2]))


def _check_no_rank_choice(path: str, rank_choice: dict | None, named: tuple = ()) -> None:
    """--rank-pairs and --rank-margin (other than their defaults, or `named`: given on the
    command line) on a store of judged pairs would be ignored: one error instead."""
    from dataclasses import fields

    from rmjudge.analysis.tables import TableError

    defaults = {f.name: f.default for f in fields(RankFilterSettings)}
    options = {"pairs": "--rank-pairs", "margin": "--rank-margin"}
    given = [o for k, o in options.items()
             if (rank_choice or {}).get(k, defaults[k]) != defaults[k] or o in named]
    if given:
        verb, it = ("apply", "them") if len(given) > 1 else ("applies", "it")
        raise TableError(f"{' and '.join(given)} {verb} only to a ranked store (rmjudge rank); "
                         f"{path} holds judged pairs: leave {it} out (--min-confidence chooses "
                         "pairs by the judge's vote share)")


def _check_no_pair_choice(path: str, fs, named: tuple = ()) -> None:
    """The options that choose among judged pairs (--min-confidence, --relabel, ...: every
    FilterSettings field but the format, --chat and --keep-columns), other than their defaults
    or `named` (given on the command line), on a ranked store would be ignored: one error
    instead."""
    from dataclasses import fields

    from rmjudge.analysis.tables import TableError

    def option(f) -> str:
        return f.metadata.get("option") or f.metadata.get("flag") or f"--{f.name.replace('_', '-')}"

    shared = {"format", "chat", "keep_columns"}
    given = [option(f) for f in fields(fs) if f.name not in shared
             and (getattr(fs, f.name) != f.default or option(f) in named)]
    if given:
        verb, it = ("apply", "them") if len(given) > 1 else ("applies", "it")
        raise TableError(f"{', '.join(given)} {verb} only to a store of judged pairs (rmjudge "
                         f"score); {path} is a ranked store: leave {it} out (--rank-pairs and "
                         "--rank-margin choose its pairs)")


def filter_judged(path: str, output: str, fs, rank_choice: dict | None = None,
                  named: tuple = ()):
    """`rmjudge filter`: the dataset of a judged table written to `output` with its record
    beside it: from each prompt's ranking on a ranked store (`rank_choice`: the
    RankFilterSettings fields `pairs` and `margin`, with `fs`'s format, chat and kept columns),
    else the pairs `fs` (rmjudge.analysis.filter.FilterSettings) keeps. (summary, the
    RankFilterSettings used, or None for a judged table.) `named`: the options given on the
    command line (as written, "--min-confidence"): one that applies only to the other kind of
    store is refused even at its default value."""
    from rmjudge.analysis.filter import filter_table
    from rmjudge.analysis.filter_record import build_record, write_record
    from rmjudge.analysis.tables import open_judged
    from rmjudge.rank.table import is_ranked

    ranked = None
    with open_judged(path) as t:
        if is_ranked(t):
            _check_no_pair_choice(path, fs, named)
            ranked = RankFilterSettings(**(rank_choice or {}), format=fs.format, chat=fs.chat,
                                        keep_columns=fs.keep_columns)
            summary = filter_ranked(t, output, ranked)
        else:
            _check_no_rank_choice(path, rank_choice, named)
            summary = filter_table(t, output, fs)
        write_record(output, build_record(t, summary, ranked or fs))
    return summary, ranked


def render_filter(s, rs: RankFilterSettings) -> str:
    what = ("best vs worst per prompt" if rs.pairs == "best-worst"
            else f"every pair with P(better wins) >= {rs.margin}")
    if rs.format == "kto":
        head = (f"wrote {s.rows} KTO rows ({s.desirable} desirable, {s.rows - s.desirable} "
                f"undesirable; each candidate once, from {count(s.written, 'pair')}: {what}) from "
                f"{count(s.total, 'ranked prompt')} -> {s.output}")
    else:
        head = (f"wrote {count(s.written, 'pair')} ({what}) from {count(s.total, 'ranked prompt')} "
                f"-> {s.output}")
    lines = [head, f"  prompts without a pair: {sum(s.dropped.values())}"]
    lines += [f"    {n} x {reason}" for reason, n in s.dropped.items()]
    if s.flattened:
        lines.append(f"note: {s.flattened} prompts have earlier turns that a string prompt "
                     "cannot hold (only the last user message was written); use --chat")
    return "\n".join(lines)


# -- figures against the gold ----------------------------------------------------------------

@dataclass
class RankEval:
    table: str
    prompts: int  # prompts in the store
    with_gold: int  # prompts with gold ranks and a judged comparison
    top1: tuple[float, float | None, float | None] | None  # (value, lo, hi); lo, hi: None at
    # --resamples 0 (no interval)
    kendall_tau: tuple[float, float | None, float | None] | None
    tau_prompts: int  # prompts with a defined tau
    level: float = 0.95
    groups: dict[str, dict] = field(default_factory=dict)
    # why the other prompts have no tau: a key of TAU_UNDEFINED -> prompts
    tau_undefined: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        def fig(x):
            return None if x is None else {"value": x[0], "lo": x[1], "hi": x[2]}

        return {"table": self.table, "ranked": True, "prompts": self.prompts,
                "with_gold": self.with_gold, "top1_accuracy": fig(self.top1),
                "kendall_tau": fig(self.kendall_tau), "tau_prompts": self.tau_prompts,
                "tau_undefined": self.tau_undefined, "level": self.level,
                "groups": self.groups}


# Why a prompt has no Kendall tau, in the order they are checked (`tau_undefined`).
TAU_UNDEFINED = {
    "one_candidate": "fewer than 2 candidates",
    "no_gold": "no gold ranks",
    "not_judged": "no judged comparison",
    "gold_tied": "gold ranks all equal",
    "scores_tied": "the judge scored every candidate alike",
}


def tau_undefined(p) -> str | None:
    """Why prompt `p` has no Kendall tau (a key of TAU_UNDEFINED), None when it has one: tau
    needs 2 candidates or more, gold ranks, a judged comparison, and a spread on both sides."""
    if p.k < 2:
        return "one_candidate"
    if not p.has_gold:
        return "no_gold"
    if not any(r.wins or r.losses or r.ties for r in p.ranked):
        return "not_judged"
    if len(set(p.gold)) < 2:
        return "gold_tied"
    if kendall_tau(p) is None:
        return "scores_tied"
    return None


def top1_correct(p) -> float:
    """1 when the top-ranked candidate is a gold best, else 0."""
    return float(p.gold[p.ranked[0].candidate] == min(p.gold))


def kendall_tau(p) -> float | None:
    """Kendall's tau-b between the candidates' scores and their gold ranks (higher is better on
    both sides); None when either side has no spread."""
    from scipy.stats import kendalltau

    by = p.by_candidate()
    scores = [by[c].score for c in range(p.k)]
    gold = [-g for g in p.gold]
    if len(set(scores)) < 2 or len(set(gold)) < 2:
        return None
    tau = kendalltau(scores, gold, variant="b").statistic
    return None if tau != tau else float(tau)


def _figure(values: list[float], resamples: int, seed: int, level: float):
    from rmjudge.analysis.stats import bootstrap_mean

    if not values:
        return None
    if resamples <= 0:  # --resamples 0: no interval (lo and hi None, shown as -)
        return (sum(values) / len(values), None, None)
    return bootstrap_mean(values, resamples, seed, level)


def evaluate_if_ranked(path: str, ev, check=None) -> "RankEval | None":
    """`rmjudge eval` of a ranked store (`rmjudge rank`): top-1 accuracy and Kendall tau with
    the intervals `ev` (rmjudge.analysis.metrics.EvalSettings) asks for; None for any other
    table (a judged one, or input not judged yet). `check()` runs once the store is known to be
    ranked, before the work (the caller's refusal of options that do not apply)."""
    from rmjudge.analysis.tables import is_judged, open_judged
    from rmjudge.rank.table import is_ranked

    if not is_judged(path):
        return None
    with open_judged(path) as t:
        if not is_ranked(t):
            return None
        if check is not None:
            check()
        return evaluate_ranked(t, ev.resamples, ev.seed, ev.level, tuple(ev.group_by or ()))


def evaluate_ranked(table, resamples: int = 1000, seed: int = 0, level: float = 0.95,
                    group_by: tuple[str, ...] = ()) -> RankEval:
    from rmjudge.analysis.tables import TableError
    from rmjudge.rank.layouts import RESERVED
    from rmjudge.rank.table import read_rankings

    own = [c for c in table.passthrough if c not in RESERVED]
    missing = [c for c in group_by if c not in own]
    if missing:
        raise TableError(f"{table.path} has no column {', '.join(map(repr, missing))} to group "
                         f"its prompts by (--by); the prompts' own columns are: "
                         f"{', '.join(own) or 'none'}")
    prompts = read_rankings(table)
    scored = [p for p in prompts if p.has_gold and any(r.wins or r.losses or r.ties
                                                       for r in p.ranked)]

    def figures(ps):
        taus = [t for t in (kendall_tau(p) for p in ps) if t is not None]
        return (_figure([top1_correct(p) for p in ps], resamples, seed, level),
                _figure(taus, resamples, seed, level), len(taus))

    top1, tau, n_tau = figures(scored)
    groups: dict[str, dict] = {}
    for col in group_by:
        for value in sorted({str(p.fields.get(col)) for p in scored}):
            sub = [p for p in scored if str(p.fields.get(col)) == value]
            g1, gt, gn = figures(sub)
            groups[f"{col}={value}"] = {"prompts": len(sub), "top1_accuracy": g1,
                                        "kendall_tau": gt, "tau_prompts": gn}
    why: dict[str, int] = {}
    for p in prompts:
        reason = tau_undefined(p)
        if reason is not None:
            why[reason] = why.get(reason, 0) + 1
    return RankEval(table.path, len(prompts), len(scored), top1, tau, n_tau, level, groups,
                    {k: why[k] for k in TAU_UNDEFINED if k in why})


def render_eval(e: RankEval) -> str:
    def fig(x):
        if x is None:
            return "n/a"
        lo, hi = ("-" if v is None else f"{v:.3f}" for v in x[1:])
        return f"{x[0]:.3f} [{lo}, {hi}]"

    pct = f"{int(e.level * 100)}%"
    lines = [f"{e.table}: ranked store, {count(e.prompts, 'prompt')}, {e.with_gold} with gold "
             "ranks",
             f"  top-1 accuracy: {fig(e.top1)}  ({pct} bootstrap interval over prompts)",
             f"  Kendall tau-b vs gold: {fig(e.kendall_tau)}  ("
             f"{count(e.tau_prompts, 'prompt')} with a defined tau)"]
    if e.tau_undefined:
        lines.append("  no tau (it needs gold ranks and the judge's scores to differ) for "
                     + ", ".join(f"{count(n, 'prompt')}: {TAU_UNDEFINED[k]}"
                                 for k, n in e.tau_undefined.items()))
    for name, g in e.groups.items():
        lines.append(f"  {name}: {count(g['prompts'], 'prompt')}, top-1 {fig(g['top1_accuracy'])}, "
                     f"tau {fig(g['kendall_tau'])}")
    return "\n".join(lines)


def top1_line(prompts) -> str | None:
    """One summary line: top-1 accuracy over the prompts with gold (None without gold)."""
    scored = [p for p in prompts if p.has_gold and any(r.wins or r.losses or r.ties
                                                       for r in p.ranked)]
    if not scored:
        return None
    n = sum(top1_correct(p) for p in scored)
    return (f"top-1 vs gold: {int(n)}/{len(scored)} prompt{'' if len(scored) == 1 else 's'} "
            f"({n / len(scored):.3f}); "
            "`rmjudge eval` adds intervals and Kendall tau")
