"""Ranking inputs: rows of a file -> prompts with K candidate responses (`Prompt`) or the reason
one cannot be ranked (`PromptProblem`).

Layouts, recognized from the first readable row (or named with `layout=`):

- `responses`: a prompt column (prompt, question, instruction, ...) and a list column
  `responses` (strings, message objects or conversations ending in the answer). Optional gold,
  at most one of: `best` (the index of the best candidate), `ratings` (one number per
  candidate, higher is better), `order` (every candidate index, best first).
- `ultrafeedback`: UltraFeedback as openbmb publishes it: `instruction` and `completions`, a
  list of objects with `response`; the gold is each completion's `fine-grained_score` (the mean
  of its four aspect ratings, which ultrafeedback_binarized ranks by) or, with
  `gold_field="overall_score"`, its `overall_score`.
- `rewardbench2`: RewardBench 2: `prompt`, `chosen` (a list: one answer, several in its Ties
  subset) and `rejected` (a list); every chosen answer is better than every rejected one.
- `rmb-bon`: RMB's Best-of-N set: `conversation_input` (messages), `bon_best` and `loser_list`
  (objects with `answer`); `bon_best` is better than every loser.
- `rows`: one row per response grouped by a prompt id column (`group_by`): a prompt column and
  a `response` column (`--map`-free names: response, completion, output, answer); optional gold
  `rating` (a number per row, higher is better).

The gold is read as published and never guessed: it becomes a gold rank per candidate (1 is
best; candidates the gold does not tell apart share a rank), or None when the input has none.
Candidates keep their published order: candidate i is the i-th response of the row (of the
group, in input order). Candidates with the same text (surrounding whitespace aside) are one
candidate for the comparisons: only the first of them is compared, and the others share its
ranking (`Prompt.same_as`), as a reward model scores identical texts identically; a prompt
whose candidates are all the same text cannot be ranked.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import orjson

from rmjudge.io.messages import RowError, prompt_messages, response_text, type_name
from rmjudge.io.rows import RawRow
from rmjudge.io.schemas import PROMPT_KEYS
from rmjudge.core.types import Message

LAYOUTS = ("responses", "ultrafeedback", "rewardbench2", "rmb-bon", "rows")
GOLD_FIELDS = ("fine-grained_score", "overall_score")
HARD_MAX_CANDIDATES = 128  # comparisons of a prompt are numbered below ROW_STRIDE
DEFAULT_MAX_CANDIDATES = 64
ROW_STRIDE = 10_000  # a comparison's row number: input row * ROW_STRIDE + comparison number
RESPONSE_KEYS = ("response", "completion", "output", "answer")
GOLD_KEYS = ("best", "ratings", "order")
# Columns a comparison row of rmjudge's own writes; a prompt's other columns pass through
# under their names unless they clash with these.
RESERVED = frozenset({"id", "prompt", "response_a", "response_b", "label", "prompt_id",
                      "cand_a", "cand_b", "n_candidates", "gold_a", "gold_b", "gold_kind",
                      "round", "input_row", "same_as", "gold_ranks"})


class LayoutError(Exception):
    """The input's first row fits no ranking layout (raised to the caller as a UserError)."""


@dataclass(frozen=True)
class Prompt:
    """One prompt to rank: its conversation and K candidate responses."""

    id: str
    row_number: int  # the input row (the first row of a group)
    messages: tuple[Message, ...]
    candidates: tuple[str, ...]
    gold: tuple[int, ...] | None = None  # gold rank per candidate, 1 = best; None: no gold
    gold_kind: str | None = None  # best | ratings | order
    fields: dict[str, Any] = field(default_factory=dict)  # columns that pass through
    gold_elsewhere: str | None = None  # no gold, but this other gold field would give one

    @property
    def k(self) -> int:
        return len(self.candidates)

    @property
    def same_as(self) -> tuple[int, ...]:
        """Per candidate, the first candidate with the same text (itself when its text is its
        own): identical candidates are one candidate for the comparisons and share its
        ranking."""
        first: dict[str, int] = {}
        return tuple(first.setdefault(c.strip(), i) for i, c in enumerate(self.candidates))

    @property
    def distinct(self) -> tuple[int, ...]:
        """The candidates compared: each text once, at its first position."""
        return tuple(i for i, s in enumerate(self.same_as) if s == i)


@dataclass(frozen=True)
class PromptProblem:
    """An input row (or group) that cannot be ranked, with the reason a person can act on."""

    row_number: int
    reason: str
    raw: str | None = None
    id: str | None = None


def ranks_from_scores(scores: list[float]) -> tuple[int, ...]:
    """Competition ranks, higher score better: 1 + the number of strictly better candidates."""
    return tuple(1 + sum(o > s for o in scores) for s in scores)


def content_prompt_id(messages, candidates) -> str:
    blob = orjson.dumps([list(messages), list(candidates)])
    return hashlib.blake2b(blob, digest_size=12).hexdigest()


def detect_layout(obj: dict, group_by: str | None) -> str:
    if group_by is not None:
        return "rows"
    comps = obj.get("completions")
    if isinstance(comps, list) and comps and isinstance(comps[0], dict) and "response" in comps[0]:
        return "ultrafeedback"
    if "bon_best" in obj and "loser_list" in obj:
        return "rmb-bon"
    if isinstance(obj.get("chosen"), list) and isinstance(obj.get("rejected"), list):
        return "rewardbench2"
    if "responses" in obj:
        return "responses"
    cols = ", ".join(map(str, obj)) or "none"
    raise LayoutError(
        f"its first row fits no ranking layout (columns: {cols}): give a list column "
        "'responses', UltraFeedback's 'completions', RewardBench 2's 'chosen'/'rejected' lists, "
        "RMB's 'bon_best'/'loser_list', or one row per response with --group-by COLUMN")


def _prompt(obj: dict, cols: tuple[str, ...] = PROMPT_KEYS) -> tuple[Message, ...]:
    col = next((c for c in cols if c in obj), None)
    if col is None:
        raise RowError(f"no prompt column ({', '.join(cols)}); columns: "
                       f"{', '.join(map(str, obj)) or 'none'}")
    return prompt_messages(obj[col], col)


def _candidate_list(value: Any, col: str) -> list[str]:
    if not isinstance(value, list):
        raise RowError(f"column {col!r} must be a list of responses, got {type_name(value)}")
    return [response_text(v, f"{col}[{i}]") for i, v in enumerate(value)]


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return None
    return float(v)


def _gold_of_responses(obj: dict, k: int) -> tuple[tuple[int, ...] | None, str | None]:
    given = [c for c in GOLD_KEYS if obj.get(c) is not None]
    if len(given) > 1:
        raise RowError(f"gold given twice ({' and '.join(given)}); keep one of them")
    if not given:
        return None, None
    col = given[0]
    v = obj[col]
    if col == "best":
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < k:
            raise GoldError(f"gold 'best' is {v!r}, which names no candidate (0..{k - 1})")
        return tuple(1 if i == v else 2 for i in range(k)), "best"
    if col == "ratings":
        nums = [_number(x) for x in v] if isinstance(v, list) else None
        if nums is None or len(nums) != k or any(x is None for x in nums):
            raise GoldError(f"gold 'ratings' must be {k} numbers, one per candidate; got "
                            f"{orjson.dumps(v).decode()[:200]}")
        return ranks_from_scores(nums), "ratings"
    if (not isinstance(v, list) or len(v) != k
            or any(isinstance(x, bool) or not isinstance(x, int) for x in v)
            or sorted(v) != list(range(k))):
        raise GoldError(f"gold 'order' must list every candidate index 0..{k - 1} once, best "
                        f"first; got {orjson.dumps(v).decode()[:200]}")
    rank = [0] * k
    for pos, i in enumerate(v):
        rank[i] = pos + 1
    return tuple(rank), "order"


class GoldError(RowError):
    """Gold that names no candidate."""


def _answers(value: Any, col: str) -> list[str]:
    if not isinstance(value, list):
        raise RowError(f"column {col!r} must be a list, got {type_name(value)}")
    out = []
    for i, v in enumerate(value):
        if not isinstance(v, dict):
            raise RowError(f"{col}[{i}] must be an object with 'answer', got {type_name(v)}")
        out.append(response_text(v.get("answer"), f"{col}[{i}].answer"))
    return out


def _scalars(obj: dict, skip: Iterable[str]) -> dict[str, Any]:
    """The row's columns that pass through to every comparison: scalars, not clashing."""
    skip = set(skip)
    return {k: v for k, v in obj.items() if k not in skip and k not in RESERVED
            and (v is None or isinstance(v, (str, int, float, bool)))}


def read_row(layout: str, row_number: int, obj: dict, gold_field: str = GOLD_FIELDS[0]
             ) -> Prompt:
    """One row of a one-row-per-prompt layout as a Prompt; RowError (GoldError) when it cannot
    be one. Candidates are checked later (`check_prompt`)."""
    fields: dict[str, Any]
    elsewhere = None
    if layout == "responses":
        msgs = _prompt(obj)
        cands = _candidate_list(obj.get("responses"), "responses")
        gold, kind = _gold_of_responses(obj, len(cands))
        fields = _scalars(obj, ("responses", *GOLD_KEYS, *PROMPT_KEYS))
    elif layout == "ultrafeedback":
        msgs = _prompt(obj, ("instruction",) + PROMPT_KEYS)
        comps = obj.get("completions")
        if not isinstance(comps, list):
            raise RowError(f"column 'completions' must be a list, got {type_name(comps)}")
        cands = [response_text(c.get("response") if isinstance(c, dict) else None,
                               f"completions[{i}].response") for i, c in enumerate(comps)]
        nums = [_number(c.get(gold_field)) for c in comps]
        gold, kind = ((ranks_from_scores(nums), "ratings")  # type: ignore[arg-type]
                      if nums and all(x is not None for x in nums) else (None, None))
        fields = _scalars(obj, ("completions", "instruction", *PROMPT_KEYS))
        if gold is None and comps:  # say which --gold-field would give this prompt its gold
            elsewhere = next((f for f in GOLD_FIELDS if f != gold_field and all(
                _number(c.get(f)) is not None for c in comps)), None)
    elif layout == "rewardbench2":
        msgs = _prompt(obj)
        chosen = _candidate_list(obj.get("chosen"), "chosen")
        rejected = _candidate_list(obj.get("rejected"), "rejected")
        if not chosen:
            raise GoldError("column 'chosen' is an empty list: the gold names no candidate")
        cands = chosen + rejected
        gold = tuple([1] * len(chosen) + [len(chosen) + 1] * len(rejected))
        kind = "best"
        fields = {**_scalars(obj, ("chosen", "rejected", *PROMPT_KEYS)),
                  "num_chosen": len(chosen)}
    elif layout == "rmb-bon":
        conv = obj.get("conversation_input")
        msgs = prompt_messages([{"role": m.get("role"), "content": m.get("content")}
                                if isinstance(m, dict) else m for m in conv]
                               if isinstance(conv, list) else conv, "conversation_input")
        best = obj.get("bon_best")
        if not isinstance(best, dict):
            raise GoldError("column 'bon_best' is not an object with an answer: the gold names "
                            "no candidate")
        cands = [response_text(best.get("answer"), "bon_best.answer")]
        cands += _answers(obj.get("loser_list"), "loser_list")
        gold, kind = tuple([1] + [2] * (len(cands) - 1)), "best"
        fields = _scalars(obj, ("conversation_input", "bon_best", "loser_list"))
    else:
        raise ValueError(layout)
    return Prompt(_row_id(obj, layout) or content_prompt_id(msgs, cands), row_number, msgs,
                  tuple(cands), gold, kind, fields, elsewhere)


def _row_id(obj: dict, layout: str) -> str | None:
    from rmjudge.io.mapping import id_text

    col = "bon_uid" if layout == "rmb-bon" and obj.get("bon_uid") is not None else "id"
    v = obj.get(col)
    if v is None:
        return None
    text = id_text(v, col)
    return text if text.strip() else None


def raw_input(obj: Any) -> str:
    """What an errors-table row keeps of a prompt that cannot be ranked: its input row as JSON,
    or (one row per response, `--group-by`) every row of the group as JSON Lines in input
    order, whole: unlike a pair's row (clipped to `io.files.RAW_LIMIT`), a prompt's row holds
    all its candidates, and nothing of them is lost."""
    from rmjudge.core import jsontext

    if isinstance(obj, GroupRows):
        return "\n".join(jsontext.dumps(o) for o in obj.rows)
    if isinstance(obj, (str, bytes)):
        return obj if isinstance(obj, str) else obj.decode("utf-8", errors="replace")
    return jsontext.dumps(obj)


@dataclass(frozen=True)
class GroupRows:
    """The input rows of one `--group-by` prompt, in input order."""

    rows: tuple[dict, ...]
    numbers: tuple[int, ...]  # their row numbers


def check_prompt(p: Prompt, max_candidates: int) -> None:
    """RowError unless `p` has 2..max_candidates non-empty candidates, at least two of them
    different (identical candidates are compared once: `Prompt.same_as`)."""
    if p.k < 2:
        raise RowError(f"fewer than two candidates ({'none' if p.k == 0 else 'only one'}): "
                       "a ranking needs at least two")
    if p.k > max_candidates:
        raise RowError(f"too many candidates: more than the limit of {max_candidates} "
                       f"({p.k} given; --max-candidates, at most {HARD_MAX_CANDIDATES}); split "
                       "the prompt's candidates or raise the limit")
    for i, c in enumerate(p.candidates):
        if not c.strip():
            raise RowError(f"candidate {i} is empty")
    if len(p.distinct) < 2:
        raise RowError(f"all {p.k} candidates are the same response: fewer than two different "
                       "candidates, and a ranking needs at least two")


def repeated_note(p: Prompt) -> str | None:
    """Which candidates of `p` repeat an earlier one (None when every text is its own), as
    `1 repeats 0, 3 repeats 0`."""
    pairs = [f"{i} repeats {s}" for i, s in enumerate(p.same_as) if s != i]
    return ", ".join(pairs) if pairs else None


def read_prompts(rows: Iterable[RawRow], *, layout: str | None = None,
                 group_by: str | None = None, gold_field: str = GOLD_FIELDS[0],
                 max_candidates: int = DEFAULT_MAX_CANDIDATES
                 ) -> Iterator[Prompt | PromptProblem]:
    """The prompts of `rows`, in input order, each a Prompt or a PromptProblem (unreadable rows,
    rows without the layout, bad candidates or gold, a prompt id seen before). Raises
    LayoutError when the first readable row fits no layout."""
    if group_by is not None and layout not in (None, "rows"):
        raise LayoutError(f"--group-by reads one row per response; it cannot be combined with "
                          f"the {layout} layout")
    if layout == "rows" and group_by is None:
        raise LayoutError("the rows layout groups one row per response by a prompt id: give "
                          "--group-by COLUMN")
    seen: dict[str, int] = {}
    spelled: dict[str, str] = {}  # prompt id -> its value as the input wrote it (JSON)

    def spelling(raw: Any) -> str | None:
        from rmjudge.core import jsontext

        if not isinstance(raw, dict):
            return None
        col = "bon_uid" if raw.get("bon_uid") is not None and "bon_best" in raw else "id"
        return None if raw.get(col) is None else jsontext.dumps(raw.get(col))

    def checked(p: Prompt, raw: Any) -> Prompt | PromptProblem:
        where = f"row {p.row_number}"
        if isinstance(raw, GroupRows) and len(raw.numbers) > 1:
            where += f" (rows {', '.join(map(str, raw.numbers))})"
        try:
            check_prompt(p, max_candidates)
        except RowError as exc:
            return PromptProblem(p.row_number, f"{where}: {exc}", raw_input(raw), p.id)
        mine = spelling(raw)
        if p.id in seen:
            other = spelled.get(p.id)
            types = (f" (written {other} there and {mine} here: a number and a text are one "
                     "id)" if other is not None and mine is not None and other != mine else "")
            return PromptProblem(p.row_number, f"{where}: duplicate prompt id "
                                 f"{p.id!r} (first seen on row {seen[p.id]}){types}; give each "
                                 "prompt a unique id", raw_input(raw), p.id)
        seen[p.id] = p.row_number
        if mine is not None:
            spelled[p.id] = mine
        return p

    if group_by is not None:
        yield from (checked(p, raw) if isinstance(p, Prompt) else p
                    for p, raw in _groups(rows, group_by))
        return
    for raw in rows:
        if raw.obj is None:
            yield PromptProblem(raw.row_number, raw.error or f"row {raw.row_number} is "
                                "unreadable", raw.raw)
            continue
        if layout is None:
            layout = detect_layout(raw.obj, None)
        try:
            p = read_row(layout, raw.row_number, raw.obj, gold_field)
        except RowError as exc:
            v = raw.obj.get("id")
            yield PromptProblem(raw.row_number, f"row {raw.row_number}: {exc}",
                                raw_input(raw.obj), None if v is None else str(v))
            continue
        yield checked(p, raw.obj)


def _groups(rows: Iterable[RawRow], col: str) -> Iterator[tuple[Prompt | PromptProblem, Any]]:
    """One row per response, grouped by `col` (every group in the order of its first row)."""
    from rmjudge.io.mapping import id_text

    groups: dict[str, list[tuple[int, dict]]] = {}
    for raw in rows:
        if raw.obj is None:
            yield PromptProblem(raw.row_number, raw.error or f"row {raw.row_number} is "
                                "unreadable", raw.raw), None
            continue
        v = raw.obj.get(col)
        if v is None or (isinstance(v, str) and not v.strip()):
            yield PromptProblem(raw.row_number, f"row {raw.row_number}: the --group-by column "
                                f"{col!r} is missing or empty", raw_input(raw.obj)), None
            continue
        try:
            key = id_text(v, col)
        except RowError as exc:
            yield PromptProblem(raw.row_number, f"row {raw.row_number}: {exc}",
                                raw_input(raw.obj)), None
            continue
        groups.setdefault(key, []).append((raw.row_number, raw.obj))
    for key, members in groups.items():
        first_row = members[0][0]
        raw = GroupRows(tuple(obj for _, obj in members), tuple(n for n, _ in members))
        try:
            _same_spelling(key, col, members)
            yield _group_prompt(key, col, members), raw
        except RowError as exc:
            rows_ = f" (rows {', '.join(str(n) for n, _ in members)})" if len(members) > 1 else ""
            yield PromptProblem(first_row, f"row {first_row}{rows_}: prompt {key!r}: {exc}",
                                raw_input(raw), key), None


def _same_spelling(key: str, col: str, members: list[tuple[int, dict]]) -> None:
    """RowError when the rows of a group give its id as values of different types (the number
    4 and the text "4" are one prompt id in the store, so they would merge two prompts):
    refused, never guessed to be one prompt or two."""
    from rmjudge.core import jsontext

    first_row, first = members[0]
    want = jsontext.dumps(first.get(col))
    for n, obj in members[1:]:
        got = jsontext.dumps(obj.get(col))
        if got != want:
            raise RowError(f"the {col!r} values {want} (row {first_row}) and {got} (row {n}) "
                           f"are one prompt id {key!r} but of different types (a number and "
                           "a text); write every row's id the same way, or give the two prompts "
                           "different ids")


def _group_prompt(key: str, col: str, members: list[tuple[int, dict]]) -> Prompt:
    first_row, first = members[0]
    msgs = _prompt(first)
    cands, ratings = [], []
    for n, obj in members:
        if _prompt(obj) != msgs:
            raise RowError(f"row {n} has another prompt than row {first_row} of the same "
                           f"{col!r}")
        rcol = next((c for c in RESPONSE_KEYS if c in obj), None)
        if rcol is None:
            raise RowError(f"row {n} has no response column ({', '.join(RESPONSE_KEYS)})")
        cands.append(response_text(obj[rcol], f"row {n} {rcol}"))
        ratings.append(_number(obj.get("rating")) if "rating" in obj else None)
    has = [r is not None for r in ratings]
    if any(has) and not all(has):
        raise GoldError(f"'rating' is given for {sum(has)} of the {len(has)} responses; give "
                        "one number per response or none")
    gold, kind = ((ranks_from_scores(ratings), "ratings")  # type: ignore[arg-type]
                  if all(has) else (None, None))
    fields = _scalars(first, (col, "rating", *RESPONSE_KEYS, *PROMPT_KEYS))
    return Prompt(key, first_row, msgs, tuple(cands), gold, kind, fields)
