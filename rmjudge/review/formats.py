"""The review file formats, both ways: what `review export` writes and what `review import`
reads back.

| format | export (in DIR) | import (LABELS) |
|---|---|---|
| csv | `review.csv`: one row per pair, `human_label` left empty | the edited CSV |
| jsonl | `review.jsonl`: the same rows, `human_label: null` | the edited JSONL |
| labelstudio | `labelstudio/tasks.json` (Label Studio's import JSON: `[{"data": {...}}]`) and `labelstudio/config.xml` (the labelling config) | Label Studio's JSON export (`annotations[].result[]`: `value.choices` of the `preference` control, or a `Pairwise` control's `value.selected` left/right), or its JSON-MIN export |
| argilla | `argilla/`, laid out as Argilla 2.x `Dataset.to_disk` writes it: `.argilla/settings.json`, `.argilla/dataset.json`, `records.json` | `records.json` of `to_disk` / `records.to_json` (nested `responses`), the folder itself, or flattened records (`preference.responses`, `.users`, `.status`) as JSON or JSONL |

Labels: A, B or tie, read case-insensitively from `A`/`B`/`tie`, `Response 1`/`Response 2`/`Tie`,
`response_1`/`response_2`, `1`/`2`; Label Studio's pairwise `left`/`right` are Response 1/2.
Response 1 is always the store's slot A.

The CSV is RFC 4180 (records end with CRLF; a cell holding a comma, a quote, a CR or a LF is
quoted), so every text, control characters included, reads back as written. A text cell that a
spreadsheet would run as a formula (its first character one of `FORMULA_START`: `=` `+` `-` `@`,
tab, CR, LF, NUL and the full-width `＝` `＋` `－` `＠`; OWASP's CSV-injection advice) is written with
one `'` before it, and so is a text that starts with `'` itself; import takes exactly one leading
`'` off every cell, so the texts come back unchanged (`neutralize_cell`, `restore_cell`).
Numbers are written as numbers (a negative number is no formula).
"""

from __future__ import annotations

import csv
import io
import os
import sys
from dataclasses import dataclass
from xml.sax.saxutils import quoteattr

import orjson

FORMATS = ("csv", "jsonl", "labelstudio", "argilla")
QUESTION = "preference"  # the Label Studio control and the Argilla question
ARGILLA_LABELS = {"response_1": "Response 1", "response_2": "Response 2", "tie": "Tie"}
LS_CHOICES = ("Response 1", "Response 2", "Tie")

_LABELS = {"a": "A", "b": "B", "tie": "tie", "response 1": "A", "response 2": "B",
           "response_1": "A", "response_2": "B", "1": "A", "2": "B", "left": "A",
           "right": "B"}


def normalize_label(value) -> str | None:
    """A label as A | B | tie; None when `value` is not one."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    return _LABELS.get(str(value).strip().lower())


# -- export -----------------------------------------------------------------------------------

FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\x00", "\uff1d", "\uff0b", "\uff0d",
                 "\uff20")
ESCAPE = "'"


def neutralize_cell(text: str) -> str:
    """A text as a review.csv cell: one `'` before a text a spreadsheet would run as a formula,
    and before one starting with `'` (so that `restore_cell` takes exactly one off)."""
    return ESCAPE + text if text.startswith((*FORMULA_START, ESCAPE)) else text


def restore_cell(text: str) -> str:
    """A review.csv cell as the text it was exported from (`neutralize_cell` undone)."""
    return text[1:] if text.startswith(ESCAPE) else text


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.4f}"
    if isinstance(v, int):
        return str(v)
    return neutralize_cell(str(v))


def csv_bytes(rows: list[dict]) -> bytes:
    buf = io.StringIO(newline="")
    if rows:
        # CRLF records: the csv module quotes a cell holding any character of the line
        # terminator, so a lone CR in a text is quoted too (with "\n" it was not, and a reader
        # split the record there)
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\r\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: _cell(v) for k, v in r.items()})
    return buf.getvalue().encode()


def jsonl_bytes(rows: list[dict]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


JUDGE_KEYS = ("selected_by", "gold_label", "judge_verdict", "judge_verdict_ab",
              "judge_verdict_ba", "judge_consistent", "judge_vote_share_a",
              "judge_vote_share_a_ab", "judge_vote_share_a_ba", "anchor_ab",
              "anchor_confidence_ab", "rollout_votes_ab", "beat_anchor_ab", "anchor_ba",
              "anchor_confidence_ba", "rollout_votes_ba", "beat_anchor_ba")


def labelstudio_tasks(rows: list[dict]) -> bytes:
    """Label Studio's import JSON: a list of tasks, each `{"data": {...}}`."""
    tasks = []
    for r in rows:
        data = {"pair_id": r["id"], "conversation": r["conversation"],
                "response_1": r["response_a"], "response_2": r["response_b"],
                "slot_key": r["slot_key"]}
        data.update({k: r[k] for k in JUDGE_KEYS})
        tasks.append({"data": data})
    return orjson.dumps(tasks, option=orjson.OPT_INDENT_2)


def labelstudio_config(title: str = "Which response is better?") -> bytes:
    """The labelling config: the conversation, the two responses side by side, one choice.
    The judge's figures are in each task's data (Data Manager columns), not in the view, so
    the reviewer is not led by them."""
    choices = "\n".join(f"    <Choice value={quoteattr(c)}/>" for c in LS_CHOICES)
    return f"""<View>
  <Header value={quoteattr(title)}/>
  <Text name="conversation" value="$conversation"/>
  <View style="display: grid; grid-template-columns: 1fr 1fr; column-gap: 1em">
    <View>
      <Header value="Response 1"/>
      <Text name="response_1" value="$response_1"/>
    </View>
    <View>
      <Header value="Response 2"/>
      <Text name="response_2" value="$response_2"/>
    </View>
  </View>
  <Choices name="{QUESTION}" toName="conversation" choice="single" showInline="true" required="true">
{choices}
  </Choices>
</View>
""".encode()


def argilla_settings() -> dict:
    text = {"type": "text", "use_markdown": False}
    return {
        "guidelines": "Read the conversation and both responses, then pick the better "
                      "response (or Tie when neither is better).",
        "fields": [
            {"name": "conversation", "title": "Conversation", "required": True, "settings": text},
            {"name": "response_1", "title": "Response 1", "required": True, "settings": text},
            {"name": "response_2", "title": "Response 2", "required": True, "settings": text},
        ],
        "questions": [{
            "name": QUESTION, "title": "Which response is better?", "required": True,
            "settings": {"type": "label_selection", "visible_options": None, "options": [
                {"value": v, "text": t, "description": None} for v, t in ARGILLA_LABELS.items()]},
        }],
        "metadata": [{"name": k, "title": k, "visible_for_annotators": False,
                      "settings": {"type": "terms", "values": None}}
                     for k in ("pair_id", "slot_key", "selected_by", "gold_label",
                               "judge_verdict")],
        "vectors": [],
        "allow_extra_metadata": True,
        "distribution": {"strategy": "overlap", "min_submitted": 1},
    }


def argilla_records(rows: list[dict]) -> bytes:
    """Records as `Dataset.to_disk` writes them (`records.json`): the judge's verdict as a
    suggestion, no responses yet."""
    recs = []
    for r in rows:
        sugg = {}
        v = {"A": "response_1", "B": "response_2", "tie": "tie"}.get(r["judge_verdict"] or "")
        if v:
            share = r["judge_vote_share_a"]
            score = None if share is None else (share if v == "response_1" else
                                                 1 - share if v == "response_2" else None)
            sugg[QUESTION] = {"value": v, "score": score, "agent": "rmjudge"}
        # metadata values are text or numbers (booleans as text)
        meta = {k: (str(r[k]).lower() if isinstance(r[k], bool) else r[k])
                for k in JUDGE_KEYS if r[k] is not None}
        meta.update({"pair_id": r["id"], "slot_key": r["slot_key"]})
        recs.append({"id": r["id"], "fields": {"conversation": r["conversation"],
                                               "response_1": r["response_a"],
                                               "response_2": r["response_b"]},
                     "metadata": meta, "suggestions": sugg, "responses": {}, "vectors": {},
                     "_server_id": None})
    return orjson.dumps(recs, option=orjson.OPT_INDENT_2)


def argilla_dataset(name: str) -> bytes:
    return orjson.dumps({"name": name, "guidelines": argilla_settings()["guidelines"],
                         "allow_extra_metadata": True}, option=orjson.OPT_INDENT_2)


# -- import -----------------------------------------------------------------------------------

@dataclass
class Label:
    pair_id: str
    label: str  # A | B | tie, in the slots of the exported file (Response 1 = A)
    reviewer: str  # '' when the file names none
    slot_key: str | None
    where: str  # "line 3", "task 7", ...


@dataclass
class Parsed:
    labels: list[Label]
    errors: list[tuple[str, str]]  # (where, why)
    unlabelled: int  # rows/tasks/records without a label yet (not an error)
    format: str


class LabelFileError(ValueError):
    """The file as a whole cannot be read as any review format."""


def _text(v) -> str:
    return "" if v is None else str(v).strip()


def _reviewer(v) -> str:
    if isinstance(v, dict):
        v = v.get("email") or v.get("username") or v.get("id")
    return _text(v)


def read_labels(path: str) -> Parsed:
    """Read a label file in any of the formats (chosen by its name and content)."""
    if os.path.isdir(path):
        inner = os.path.join(path, "records.json")
        if not os.path.exists(inner):
            raise LabelFileError(f"{path} is a folder without records.json: give the labels "
                                 "file (CSV, JSONL, a Label Studio JSON export, or an Argilla "
                                 "export folder)")
        return _json_records(inner, _load_json(inner))
    lower = path.lower()
    if lower.endswith(".csv"):
        return _csv(path)
    if lower.endswith((".jsonl", ".ndjson")):
        return _jsonl(path)
    if lower.endswith(".json"):
        return _json_records(path, _load_json(path))
    raise LabelFileError(f"cannot tell the format of {path}: name it .csv, .jsonl or .json "
                         "(or give an Argilla export folder)")


def _load_json(path: str):
    try:
        with open(path, "rb") as f:
            return orjson.loads(f.read())
    except orjson.JSONDecodeError as exc:
        raise LabelFileError(f"{path} is not valid JSON ({exc}); give Label Studio's JSON "
                             "export or Argilla's records.json as written") from None


def _flat(where: str, row: dict, errors: list, fmt: str) -> Label | None | bool:
    """One CSV/JSONL row: a Label, None (an error, recorded) or False (no label yet)."""
    pid = _text(row.get("id") if row.get("id") is not None else row.get("pair_id"))
    raw = row.get("human_label")
    if not pid:
        errors.append((where, "no pair id (the `id` column is empty)"))
        return None
    if raw is None or _text(raw) == "":
        return False
    lab = normalize_label(raw)
    if lab is None:
        errors.append((where, f"pair {pid!r}: human_label {_text(raw)[:40]!r} is not A, B or tie"))
        return None
    return Label(pid, lab, _reviewer(row.get("reviewer")), _text(row.get("slot_key")) or None,
                 where)


CSV_FIELD_LIMIT = 2**31 - 1  # a response may be far longer than the csv module's 128 KiB default


def _csv(path: str) -> Parsed:
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, CSV_FIELD_LIMIT))
    try:
        return _csv_rows(path)
    finally:
        csv.field_size_limit(limit)


def _csv_rows(path: str) -> Parsed:
    labels, errors, unlabelled = [], [], 0
    # utf-8-sig: spreadsheets (Excel) save CSV with a byte-order mark before the header
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as f:
        # Python 3.10's csv module refuses NUL; a NUL in a text cell is no part of a label
        lines = f if sys.version_info >= (3, 11) else (x.replace("\0", "\ufffd") for x in f)
        reader = csv.DictReader(lines)
        try:
            fields = reader.fieldnames or []
            if "human_label" not in fields or not ({"id", "pair_id"} & set(fields)):
                raise LabelFileError(f"{path} has no `id` and `human_label` columns: give the "
                                     "review.csv written by `rmjudge review export`, with "
                                     "human_label filled in")
            for row in reader:
                where = f"line {reader.line_num}"
                if None in row:
                    errors.append((where, f"{len(row[None])} more cells than the header has "
                                          "columns"))
                    continue
                short = sum(v is None for v in row.values())  # the csv module's fill-in
                if short:  # its slot_key (or label, or id) may be the cell that is missing
                    errors.append((where, f"{short} fewer cells than the header has columns"))
                    continue
                row = {k: v if v is None else restore_cell(v) for k, v in row.items()}
                got = _flat(where, row, errors, "csv")
                if got is False:
                    unlabelled += 1
                elif got is not None:
                    labels.append(got)
        except csv.Error as exc:
            raise LabelFileError(f"{path} line {reader.line_num} is not CSV ({exc}); save the "
                                 "file again as CSV (comma-separated, UTF-8)") from None
    return Parsed(labels, errors, unlabelled, "csv")


def _jsonl(path: str) -> Parsed:
    labels, errors, unlabelled = [], [], 0
    fmt = "jsonl"
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"line {n}"
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                errors.append((where, "not valid JSON"))
                continue
            if not isinstance(obj, dict):
                errors.append((where, "not a JSON object"))
                continue
            if "human_label" not in obj and ("responses" in obj or "fields" in obj
                                             or f"{QUESTION}.responses" in obj):
                fmt = "argilla"
                got = _argilla_record(where, obj, errors)
                if got == []:
                    unlabelled += 1
                elif got:
                    labels.extend(got)
                continue
            got = _flat(where, obj, errors, "jsonl")
            if got is False:
                unlabelled += 1
            elif got is not None:
                labels.append(got)
    return Parsed(labels, errors, unlabelled, fmt)


def _json_records(path: str, data) -> Parsed:
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise LabelFileError(f"{path} holds no list of tasks or records")
    labels, errors, unlabelled = [], [], 0
    kinds = set()
    for n, item in enumerate(data, 1):
        if not isinstance(item, dict):
            errors.append((f"item {n}", "not a JSON object"))
            continue
        if "annotations" in item or ("data" in item and isinstance(item.get("data"), dict)):
            kinds.add("labelstudio")
            got = _labelstudio_task(f"task {item.get('id', n)}", item, errors)
        elif "responses" in item or "fields" in item or f"{QUESTION}.responses" in item:
            kinds.add("argilla")
            got = _argilla_record(f"record {n}", item, errors)
        elif QUESTION in item and ("pair_id" in item or "id" in item):
            kinds.add("labelstudio")  # Label Studio's JSON-MIN export
            got = _labelstudio_min(f"task {item.get('id', n)}", item, errors)
        elif "human_label" in item:
            kinds.add("jsonl")
            one = _flat(f"item {n}", item, errors, "json")
            got = [] if one is False else ([one] if one else None)
        else:
            errors.append((f"item {n}", "neither a Label Studio task nor an Argilla record"))
            continue
        if got == []:
            unlabelled += 1
        elif got:
            labels.extend(got)
    return Parsed(labels, errors, unlabelled, "+".join(sorted(kinds)) or "json")


def _labelstudio_task(where: str, task: dict, errors: list) -> list[Label] | None:
    data = task.get("data") if isinstance(task.get("data"), dict) else {}
    pid = _text(data.get("pair_id"))
    if not pid:
        errors.append((where, ("no data.pair_id (was the task imported from `rmjudge review "
                               "export`'s tasks.json?)")))
        return None
    key = _text(data.get("slot_key")) or None
    out = []
    anns = task.get("annotations") or []
    if not isinstance(anns, list):
        errors.append((where, f"pair {pid!r}: annotations is not a list"))
        return None
    for k, ann in enumerate(anns, 1):
        if not isinstance(ann, dict) or ann.get("was_cancelled"):
            continue
        values = []
        results = ann.get("result") or []
        if not isinstance(results, list):
            errors.append((f"{where}, annotation {k}", f"pair {pid!r}: result is not a list"))
            continue
        for res in results:
            if not isinstance(res, dict) or not isinstance(res.get("value"), dict):
                continue
            val = res["value"]
            if res.get("type") == "pairwise" or "selected" in val:
                values.append(val.get("selected"))
            elif "choices" in val and res.get("from_name", QUESTION) == QUESTION:
                values.append(val.get("choices"))
        if not values:
            continue
        lab = normalize_label(values[0])
        if lab is None:
            errors.append((f"{where}, annotation {k}",
                           f"pair {pid!r}: {str(values[0])[:40]!r} is not Response 1, Response 2 or Tie"))
            continue
        out.append(Label(pid, lab, _reviewer(ann.get("completed_by")), key, where))
    return out


def _labelstudio_min(where: str, item: dict, errors: list) -> list[Label] | None:
    pid = _text(item.get("pair_id"))
    if not pid:
        errors.append((where, "no pair_id"))
        return None
    raw = item.get(QUESTION)
    if raw in (None, "", []):
        return []
    lab = normalize_label(raw)
    if lab is None:
        errors.append((where, f"pair {pid!r}: {str(raw)[:40]!r} is not Response 1, Response 2 or Tie"))
        return None
    return [Label(pid, lab, _reviewer(item.get("annotator")), _text(item.get("slot_key")) or None,
                  where)]


def _argilla_record(where: str, rec: dict, errors: list) -> list[Label] | None:
    meta = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
    pid = _text(meta.get("pair_id") or rec.get("pair_id") or rec.get("id"))
    if not pid:
        errors.append((where, "no record id or metadata.pair_id"))
        return None
    key = _text(meta.get("slot_key") or rec.get("slot_key")) or None
    answers: list[tuple] = []
    responses = rec.get("responses")
    if isinstance(responses, dict):  # nested: {question: [{value, user_id[, status]}]}
        given = responses.get(QUESTION) or []
        if not isinstance(given, list):
            errors.append((where, f"pair {pid!r}: responses.{QUESTION} is not a list"))
            return None
        for r in given:
            if isinstance(r, dict):
                answers.append((r.get("value"), r.get("user_id"), r.get("status")))
    elif f"{QUESTION}.responses" in rec:  # flattened: parallel lists
        vals = rec.get(f"{QUESTION}.responses") or []
        users = rec.get(f"{QUESTION}.responses.users") or []
        status = rec.get(f"{QUESTION}.responses.status") or []
        if not isinstance(vals, list):
            vals = [vals]
        users = users if isinstance(users, list) else []
        status = status if isinstance(status, list) else []
        for k, v in enumerate(vals):
            answers.append((v, users[k] if k < len(users) else None,
                            status[k] if k < len(status) else None))
    out = []
    for value, user, status in answers:
        if status not in (None, "submitted"):
            continue  # drafts and discarded answers are not labels
        lab = normalize_label(value)
        if lab is None:
            errors.append((where, (f"pair {pid!r}: {str(value)[:40]!r} is not response_1, "
                                   "response_2 or tie")))
            continue
        out.append(Label(pid, lab, _reviewer(user), key, where))
    return out
