"""Turn raw input rows into validated `Pair`s: schema recognition, `--map`, ids, gold labels.

The schema (`rmjudge.io.schemas`) is recognized from the first row's columns: TRL
prompt/chosen/rejected (also UltraFeedback-binarized, Skywork, TRL's implicit prompt),
HH-RLHF transcripts, HelpSteer3, PKU-SafeRLHF, SHP, Chatbot Arena / MT-Bench, and rmjudge's own
prompt/response_a/response_b/label. `--map prompt=question,a=resp1,b=resp2,label=pref,id=uid`
(or `chosen=`/`rejected=`) names columns explicitly; rmjudge's own layout takes its label column
from the first row that has one. A gold label is never guessed: a label
column whose values are not A/B letters needs `--label-values` (`rmjudge.io.labels`), and
`check_labels` refuses such an input before anything is judged, showing the values found.

With chosen/rejected data, which of the two sits in slot A is drawn from the seed and the pair
id, so neither the judge nor a reader of the output can rely on "chosen comes first". Columns
not used pass through to the output.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from itertools import chain
from typing import Any, Iterable, Iterator

import orjson

from rmjudge.io.labels import (UNCOVERED, LabelValues, LabelValuesError, LabelValuesSyntaxError,
                               distinct_values,
                               letter_label, listing, parse_label_values, show_value)
from rmjudge.io.messages import RowError
from rmjudge.io.schemas import A_KEYS, B_KEYS, LABEL_KEYS, PROMPT_KEYS, Schema, detect
from rmjudge.core.settings import SettingsError, setting
from rmjudge.core.types import Message, Pair

__all__ = ["Mapper", "LabelOptions", "RowError", "parse_map", "joined_map", "parse_label",
           "content_id",
           "check_labels", "id_text", "PROMPT_KEYS", "A_KEYS", "B_KEYS", "LABEL_KEYS", "MAP_KEYS",
           "LABEL_CHECK_ROWS"]

MAP_KEYS = ("prompt", "a", "b", "chosen", "rejected", "label", "id")
LABEL_CHECK_ROWS = 10_000  # rows whose label values are checked before judging


def parse_map(spec: str | Iterable[str] | None) -> dict[str, str]:
    """'prompt=question,a=x,b=y' -> {'prompt': 'question', 'a': 'x', 'b': 'y'}; several specs
    (`--map` given more than once) combine as one; a malformed spec (an unknown or repeated
    key, an entry without `=column`) raises SettingsError."""
    out: dict[str, str] = {}
    if not spec:
        return out
    parts = spec.split(",") if isinstance(spec, str) else \
        [part for one in spec for part in (one or "").split(",")]
    for part in parts:
        if not part.strip():
            continue
        key, sep, col = part.partition("=")
        key, col = key.strip(), col.strip()
        if not sep or not col:
            raise SettingsError(f"--map entry {part!r} must look like key=column")
        if key not in MAP_KEYS:
            raise SettingsError(f"--map key {key!r} is not one of {', '.join(MAP_KEYS)}")
        if key in out:  # the later one would silently win: say which column was meant
            raise SettingsError(f"--map names {key}= twice ({key}={out[key]}, {key}={col}); "
                                f"give each key once")
        out[key] = col
    if ("a" in out or "b" in out) and ("chosen" in out or "rejected" in out):
        raise SettingsError("--map takes either a=/b= (with label=) or chosen=/rejected=, not both")
    return out


def joined_map(flags: str | Iterable[str] | None) -> str | None:
    """Each `--map` given, as one comma-joined spec (`parse_map` reads it alike); None for none."""
    if flags is None or isinstance(flags, str):
        return flags
    return ",".join(f for f in flags if f) or None


def parse_label(value: Any) -> str | None:
    """rmjudge's A/B letter labels ('A', 'B>A', 'model_b', ...): "A", "B", or None for a tie,
    a missing label or a value that is not a letter (numbers are never read as letters)."""
    out = letter_label(value)
    return None if out == UNCOVERED else out


def content_id(messages: tuple[Message, ...], a: str, b: str, extra: Any = None) -> str:
    blob = orjson.dumps([list(messages), a, b] + ([] if extra is None else [extra]))
    return hashlib.blake2b(blob, digest_size=12).hexdigest()


class Mapper:
    """Maps raw rows to Pairs.

    `mapping`: `--map` columns. `seed`: decides the slot of `chosen` in chosen/rejected data.
    `label_values`: a parsed `--label-values` (or its text). `label_choice`: `--label`, which
    label column to read (PKU-SafeRLHF: better|safer; otherwise a column name).
    `read_labels=False`: for callers that read stores' inputs back (merge's input check of shards
    that recorded no label options); a label value
    without a meaning is then left unlabelled instead of stopping the run.
    `blank_responses=True`: an empty or whitespace-only response is judged like any other
    (`rmjudge bench`, whose benchmarks decide which rows they keep), not refused as empty.
    """

    def __init__(self, mapping: dict[str, str] | None = None, seed: int = 0, *,
                 label_values: LabelValues | str | None = None,
                 label_choice: str | None = None, read_labels: bool = True,
                 blank_responses: bool = False) -> None:
        self.mapping = dict(mapping or {})
        self.seed = seed
        if isinstance(label_values, str):
            label_values = parse_label_values(label_values)
        self.label_values = label_values
        self.label_choice = label_choice
        self.read_labels = read_labels
        self.blank_responses = blank_responses
        self.checked = False  # check_labels vetted the label values of the first rows
        self._schema: Schema | None = None

    @property
    def schema(self) -> str | None:
        """The recognized schema's short name ("helpsteer3", ...); None before the first row."""
        return None if self._schema is None else self._schema.name

    def describe(self) -> str:
        """One line: the schema, how each field is read and what the label means."""
        if self._schema is None:
            return "no row mapped yet"
        return self._schema.describe()

    def detect(self, obj: dict[str, Any]) -> Schema:
        """The input's schema, recognized from the first row that fits one, then kept."""
        if self._schema is None:
            self._schema = detect(obj, self.mapping, self.label_values, self.label_choice)
            self._schema.blank_responses = self.blank_responses
        return self._schema

    def to_pair(self, row_number: int, obj: dict[str, Any]) -> Pair:
        schema = self.detect(obj)
        schema.adopt_label(obj, row_number)
        r = schema.read(obj)
        label = r.label
        if label == UNCOVERED and not self.read_labels:
            label = None
        if label == UNCOVERED:
            col = schema.label_column
            value = obj.get(col)
            if not self.checked:
                raise labels_error(schema, distinct_values([value]), f"row {row_number}",
                                   self.label_values)
            how = (f"--label-values {self.label_values.spec} does not cover it" if self.label_values
                   else "it is not an A/B letter or a tie")
            raise RowError(f"column {col!r} holds {show_value(value)}: {how}; add it to "
                           "--label-values")
        used = set(r.used)
        pid = self._id(obj, r.messages, r.a, r.b, used, r.id_extra)
        a, b = r.a, r.b
        if r.chosen_rejected:
            from rmjudge.core.seeds import derive_seed

            if derive_seed(self.seed, pid, "slot") & 1:
                a, b, label = r.b, r.a, "B"
            else:
                label = "A"
        extra = {k: v for k, v in obj.items() if k not in used}
        return Pair(pid, row_number, r.messages, a, b, label, extra)  # type: ignore[arg-type]

    def _id(self, obj: dict, messages, a: str, b: str, used: set[str], extra: Any) -> str:
        found = self.id_column(obj)
        if found is not None:
            used.add(found[0])
            return found[1]
        return content_id(messages, a, b, extra)

    def id_column(self, obj: dict) -> tuple[str, str] | None:
        """(column, id) when the row carries its id (`--map id=`, or an `id` column); None when
        the pair's id is derived from its content."""
        if "id" in self.mapping:
            col = self.mapping["id"]
            if col not in obj:
                raise RowError(f"column {col!r} (from --map id={col}) is missing; columns: "
                               f"{', '.join(map(str, obj)) or 'none'}")
            text = None if obj[col] is None else id_text(obj[col], col)
            if text is None or not text.strip():
                raise RowError(f"column {col!r} (from --map id={col}) is empty in this row")
            return col, text
        if obj.get("id") is not None:
            text = id_text(obj["id"], "id")
            if text.strip():
                return "id", text
        return None


_EXACT_FLOAT = 2.0 ** 63  # orjson reads an integer literal beyond 64 bits as a float this large


def id_text(value: Any, col: str = "id", *, exact: bool = True) -> str:
    """A pair id from an id column's value.

    Strings, integers and floats are spelled as they always were (`"x"`, `5`, `1.5`), so
    existing stores resume; other values as compact JSON text (`true`, `{"a":1}`, `[1,2]`),
    never Python's spelling. A whole float of 2**63 or more is refused: the JSONL reader turns an
    integer beyond 64 bits into one, and two such ids could collide (`exact=False`: spelled as
    before, for showing the id of a row that is an error anyway)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if exact and abs(value) >= _EXACT_FLOAT and value.is_integer():
            raise RowError(f"column {col!r} holds {value:.17g}, a number too large to keep "
                           "exactly as an id (an integer beyond 64 bits is read as a float); "
                           "quote it in the input (\"123...\") so it is read as text")
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + raw.hex()
    if isinstance(value, (dict, list, tuple)):
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    return str(value)


LABEL_VALUES_HELP = (
    "Meaning of the label column's values when they are not A/B letters of a recognized "
    "dataset: VALUE=A|B|tie,... with literals, comparisons and ranges, e.g. 0=A,1=B or "
    "\"<0=A,>0=B,0=tie\" or \"-3..-1=A,1..3=B,*=tie\" (A: the first response is better; tie: "
    "unlabelled). See docs/datasets.md.")
LABEL_HELP = ("Which label to read when the input has several: better (default) or safer for "
              "PKU-SafeRLHF; otherwise the label column's name.")


@dataclass(frozen=True)
class ReadingChoice:
    """How the input's columns are read, as given: `--map` (parsed by `parse_map`),
    `--label-values` and `--label` (parsed by `LabelOptions.parse`). Every command that reads
    an input has these options, generated from these fields."""

    mapping: str | None = setting(
        None, "Name input columns: prompt=,a=,b=,label= or chosen=,rejected=; id=. "
        "Repeatable (the flags combine; a key given twice is refused).", option="--map",
        metavar="KEY=COL,...", multiple=True, parse=joined_map)
    label_values: str | None = setting(None, LABEL_VALUES_HELP, metavar="VALUE=A|B|tie,...")
    label_choice: str | None = setting(None, LABEL_HELP, option="--label", metavar="NAME")


@dataclass(frozen=True)
class LabelOptions:
    """`--label-values` and `--label`, parsed; `mapper()` builds the Mapper that applies them."""

    values: LabelValues | None = None
    choice: str | None = None

    @classmethod
    def parse(cls, values: str | None = None, choice: str | None = None) -> "LabelOptions":
        """Raises LabelValuesSyntaxError (a UserError) for a malformed --label-values."""
        choice = choice.strip() if choice is not None else None
        if choice == "":
            raise LabelValuesSyntaxError("--label is empty; give better, safer or a column name")
        return cls(parse_label_values(values), choice)

    def mapper(self, mapping: dict[str, str] | None, seed: int) -> Mapper:
        return Mapper(mapping, seed, label_values=self.values, label_choice=self.choice)


def labels_error(schema: Schema, counts, rows: str, values: LabelValues | None,
                 source: str | None = None) -> LabelValuesError:
    """`rows`: where the values were found ("the first 10000 rows", "row 7")."""
    col = schema.label_column
    where = f"{source}: " if source else ""
    seen = f"values found in {rows}: {listing(counts)}"
    if values is not None:
        return LabelValuesError(
            f"{where}label column {col!r} holds values that --label-values {values.spec} does "
            f"not cover ({seen}); give each a meaning, e.g. add VALUE=tie or *=tie")
    return LabelValuesError(
        f"{where}label column {col!r} does not say which response is better in A/B letters "
        f"({seen}); give the meaning of its values with --label-values, e.g. --label-values "
        f"\"VALUE=A,VALUE=B,VALUE=tie\" where A means {schema.slot_a()} is better "
        "(see docs/datasets.md)")


def check_labels(mapper: Mapper, rows: Iterable, source: str | None = None,
                 max_rows: int = LABEL_CHECK_ROWS) -> Iterator:
    """Stop before judging when the input's labels need `--label-values` (or more of it).

    `rows` are `RawRow`s. Recognizes the schema from the first readable row (and, for rmjudge's
    own layout, the label column from the first row that has one); when its label column is
    free-form (not a published dataset's), reads up to `max_rows` rows and raises
    `LabelValuesError` listing the distinct values that have no meaning. Returns an iterator
    over all the rows, those read ahead included."""
    max_rows = min(max_rows, LABEL_CHECK_ROWS)
    it = iter(rows)
    ahead: list = []
    schema = None
    for raw in it:
        ahead.append(raw)
        if raw.obj is not None:
            try:
                schema = mapper.detect(raw.obj)
                break
            except RowError:
                continue
        if len(ahead) >= max_rows:
            break
    if schema is not None and schema.awaiting_label and len(ahead) < max_rows:
        # the first row has no label column: a later one may (rows without it are unlabelled)
        for raw in it:
            ahead.append(raw)
            if raw.obj is not None and schema.adopt_label(raw.obj, raw.row_number):
                break
            if len(ahead) >= max_rows:
                break
    if schema is not None and schema.awaiting_label:
        n = len(ahead)
        rows_read = f"the first {n} row{'s' if n != 1 else ''}"
        col = schema.label_column
        if col is not None:  # named by --label or --map label=
            option = f"--map label={col}" if "label" in mapper.mapping else f"--label {col}"
            first = next(raw.obj for raw in ahead if raw.obj is not None)
            raise LabelValuesSyntaxError(
                f"{option}: none of {rows_read} has such a column; columns: "
                f"{', '.join(map(str, first)) or 'none'}")
        if mapper.label_values is not None:
            raise LabelValuesSyntaxError(
                f"--label-values does not apply: none of {rows_read} has a label column "
                f"({', '.join(LABEL_KEYS)}); name it with --map label=COLUMN")
    if schema is None or not schema.free_labels:
        mapper.checked = True
        return chain(ahead, it)
    col = schema.label_column
    if len(ahead) < max_rows:
        for raw in it:
            ahead.append(raw)
            if len(ahead) >= max_rows:
                break
    values = [raw.obj.get(col) for raw in ahead if raw.obj is not None and col in raw.obj]
    bad = [v for v in values if v is not None and schema.label({col: v}) == UNCOVERED]
    if bad:
        n = len(ahead)
        counts = distinct_values(values) if mapper.label_values is None else distinct_values(bad)
        raise labels_error(schema, counts, f"the first {n} row{'s' if n != 1 else ''}",
                           mapper.label_values, source)
    mapper.checked = True
    return chain(ahead, it)
