"""The preference-data schemas rmjudge reads, recognized from the first row's columns.

A `Schema` says how each field of a row is read and what its label means; `detect` picks one.
Recognized without options (first match wins):

- pku-saferlhf: prompt, response_0, response_1, better_response_id (+ safer_response_id);
  0: A, 1: B (`--label safer` reads safer_response_id).
- helpsteer3: context, response1, response2, overall_preference; < 0: A, > 0: B, 0: tie.
- shp: history, human_ref_A, human_ref_B, labels; 1: A, 0: B.
- arena: conversation_a, conversation_b, winner (+ turn, judge); model_a: A, model_b: B, tie and
  tie (bothbad): unlabelled.
- hh-rlhf: chosen, rejected as "Human: ... Assistant: ..." transcripts, no prompt; chosen.
- trl: prompt?, chosen, rejected (strings, message lists or message objects); chosen.
- rmjudge: prompt, response_a, response_b, label?; A/B letters, ties unlabelled; other values
  need --label-values. The label column (label|winner|preference|preferred, or --label) is
  taken from the first row that has one; a later row holding its label in another of these
  columns is a row error, never a label lost to passthrough.

`--map` (any key but id/label) selects the `mapped` schema: columns named explicitly, labels read
as letters or by `--label-values`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rmjudge.io.labels import (UNCOVERED, LabelValues, LabelValuesSyntaxError, as_number,
                               letter_label, show_value)
from rmjudge.io.messages import (RowError, conversation, is_transcript, parse_transcript,
                                 prompt_messages, response_text, split_conversations,
                                 truncate_at_turn)
from rmjudge.core.types import Message

PROMPT_KEYS = ("prompt", "question", "instruction", "input", "query", "messages", "conversation")
A_KEYS = ("response_a", "response_1", "output_a", "output_1", "answer_a", "completion_a")
B_KEYS = ("response_b", "response_2", "output_b", "output_2", "answer_b", "completion_b")
LABEL_KEYS = ("label", "winner", "preference", "preferred")


@dataclass
class Reading:
    """One row as read by a schema. With `chosen_rejected`, `a` is the chosen response and the
    Mapper draws its slot."""

    messages: tuple[Message, ...]
    a: str
    b: str
    label: str | None
    used: set[str]
    chosen_rejected: bool = False
    id_extra: Any = None  # part of the content id beyond the text (the Arena judge)


def _columns(obj: dict) -> str:
    return ", ".join(map(str, obj)) or "none"


def _need(obj: dict, col: str, schema: str) -> Any:
    if col not in obj:
        raise RowError(f"column {col!r} is missing (the input is read as {schema} from its first "
                       f"row); columns: {_columns(obj)}")
    return obj[col]


class Schema:
    name = ""
    title = ""
    label_column: str | None = None
    label_meaning = ""
    blank_responses = False  # an empty or whitespace-only response is judged (Mapper's choice)

    def __init__(self, values: LabelValues | None = None) -> None:
        self.values = values  # --label-values: overrides the published meaning

    @property
    def free_labels(self) -> bool:
        """True when label values need checking against letters or --label-values."""
        return self.label_column is not None and self.values is not None

    def known_label(self, value: Any) -> str | None:
        raise NotImplementedError

    def label(self, obj: dict) -> str | None:
        """The gold label of a row: "A", "B", None (tie or none) or UNCOVERED."""
        col = self.label_column
        if col is None or col not in obj or obj[col] is None:
            return None
        if self.values is not None:
            return self.values.outcome(obj[col])
        out = self.known_label(obj[col])
        if out == UNCOVERED:
            raise RowError(f"column {col!r} holds {show_value(obj[col])}, which {self.title} "
                           f"does not define ({self.label_meaning}); fix the row or give "
                           "--label-values")
        return out

    def read(self, obj: dict) -> Reading:
        raise NotImplementedError

    def adopt_label(self, obj: dict, row: int | None = None) -> bool:
        """Schemas whose label column is found per input (rmjudge's own) take it from the first
        row that has one; True when the label column is known."""
        return self.label_column is not None

    @property
    def awaiting_label(self) -> bool:
        """True while a later row may still name the label column."""
        return False

    def fields(self) -> str:
        raise NotImplementedError

    def slot_a(self) -> str:
        """What slot A holds, for messages about label values."""
        return "the first response"

    def describe(self) -> str:
        if self.label_column is None:
            how = self.label_meaning
        elif self.values is not None:
            how = f"label from {self.label_column} by --label-values {self.values.spec}"
        else:
            how = f"label from {self.label_column}: {self.label_meaning}"
        return f"{self.name} ({self.title}): {self.fields()}; {how}"


class _ThreeColumns(Schema):
    """prompt, response for slot A, response for slot B, label: fixed column names."""

    prompt_col = a_col = b_col = ""

    @classmethod
    def fits(cls, obj: dict) -> bool:
        return {cls.prompt_col, cls.a_col, cls.b_col, cls.label_column} <= set(obj)

    def read(self, obj: dict) -> Reading:
        messages = prompt_messages(_need(obj, self.prompt_col, self.name), self.prompt_col)
        a = response_text(_need(obj, self.a_col, self.name), self.a_col,
                          blank=self.blank_responses)
        b = response_text(_need(obj, self.b_col, self.name), self.b_col,
                          blank=self.blank_responses)
        label = self.label(obj)
        return Reading(messages, a, b, label, {self.prompt_col, self.a_col, self.b_col,
                                               self.label_column})

    def fields(self) -> str:
        return f"prompt = {self.prompt_col}, A = {self.a_col}, B = {self.b_col}"

    def slot_a(self) -> str:
        return f"column {self.a_col!r}"


class PKUSafeRLHF(_ThreeColumns):
    name, title = "pku-saferlhf", "PKU-SafeRLHF"
    prompt_col, a_col, b_col = "prompt", "response_0", "response_1"
    choices = {"better": "better_response_id", "safer": "safer_response_id"}

    def __init__(self, values: LabelValues | None, choice: str | None, obj: dict) -> None:
        super().__init__(values)
        if choice is None:
            col = "better_response_id" if "better_response_id" in obj else "safer_response_id"
        else:
            col = self.choices.get(choice, choice)
            if col not in self.choices.values():
                raise LabelValuesSyntaxError(
                    f"--label {choice}: PKU-SafeRLHF input has the labels better "
                    "(better_response_id, the default) and safer (safer_response_id)")
        self.label_column = col
        self.label_meaning = "0: A (response_0), 1: B (response_1)"

    @classmethod
    def fits(cls, obj: dict) -> bool:
        return {"prompt", "response_0", "response_1"} <= set(obj) and (
            "better_response_id" in obj or "safer_response_id" in obj)

    def known_label(self, value: Any) -> str | None:
        x = as_number(value)
        return {0.0: "A", 1.0: "B"}.get(x, UNCOVERED) if x is not None else UNCOVERED


class HelpSteer3(_ThreeColumns):
    name, title = "helpsteer3", "HelpSteer3"
    prompt_col, a_col, b_col = "context", "response1", "response2"
    label_column = "overall_preference"
    label_meaning = "< 0: A (response1 better), > 0: B (response2 better), 0: tie (unlabelled)"

    def known_label(self, value: Any) -> str | None:
        x = as_number(value)
        if x is None:
            return UNCOVERED
        return "A" if x < 0 else "B" if x > 0 else None


class SHP(_ThreeColumns):
    name, title = "shp", "SHP"
    prompt_col, a_col, b_col = "history", "human_ref_A", "human_ref_B"
    label_column = "labels"
    label_meaning = "1: A (human_ref_A preferred), 0: B (human_ref_B preferred)"

    def known_label(self, value: Any) -> str | None:
        x = as_number(value)
        return {1.0: "A", 0.0: "B"}.get(x, UNCOVERED) if x is not None else UNCOVERED


class Arena(Schema):
    name, title = "arena", "Chatbot Arena / MT-Bench"
    label_column = "winner"
    label_meaning = "model_a: A, model_b: B, tie and tie (bothbad): unlabelled"

    @classmethod
    def fits(cls, obj: dict) -> bool:
        return {"conversation_a", "conversation_b", "winner"} <= set(obj)

    def known_label(self, value: Any) -> str | None:
        key = str(value).strip().lower().replace(" ", "")
        if key in ("model_a", "model_b", "tie", "tie(bothbad)"):
            return letter_label(value)
        return UNCOVERED

    def read(self, obj: dict) -> Reading:
        conv_a = conversation(_need(obj, "conversation_a", self.name), "conversation_a")
        conv_b = conversation(_need(obj, "conversation_b", self.name), "conversation_b")
        turn = obj.get("turn")
        if turn is not None:  # MT-Bench: the judgment is about this turn
            t = as_number(turn)
            if t is None or t < 1 or not t.is_integer():
                raise RowError(f"column 'turn' must be a positive whole number, got "
                               f"{show_value(turn)}")
            conv_a = truncate_at_turn(conv_a, int(t), "conversation_a")
            conv_b = truncate_at_turn(conv_b, int(t), "conversation_b")
        messages, a, b = split_conversations(conv_a, conv_b, "conversation_a", "conversation_b")
        judge = obj.get("judge")
        return Reading(messages, a, b, self.label(obj), {"conversation_a", "conversation_b",
                                                         "winner"},
                       id_extra=None if judge is None else str(judge))

    def fields(self) -> str:
        return ("prompt = the shared turns of conversation_a/conversation_b (up to `turn` when "
                "given), A = conversation_a's answer, B = conversation_b's answer")


class HHRLHF(Schema):
    name, title = "hh-rlhf", "Anthropic HH-RLHF transcripts"
    label_meaning = "gold label: chosen"

    @classmethod
    def fits(cls, obj: dict) -> bool:
        return "chosen" in obj and "rejected" in obj and is_transcript(obj["chosen"]) \
            and not any(k in obj for k in PROMPT_KEYS)

    def read(self, obj: dict) -> Reading:
        chosen = _need(obj, "chosen", self.name)
        rejected = _need(obj, "rejected", self.name)
        for v, col in ((chosen, "chosen"), (rejected, "rejected")):
            if not isinstance(v, str):
                raise RowError(f"field {col!r} must be a 'Human: ... Assistant: ...' transcript, "
                               f"got {type(v).__name__}")
        messages, good, bad = split_conversations(parse_transcript(chosen, "chosen"),
                                                  parse_transcript(rejected, "rejected"),
                                                  "chosen", "rejected")
        return Reading(messages, good, bad, None, {"chosen", "rejected"}, chosen_rejected=True)

    def fields(self) -> str:
        return ("prompt = the shared turns of the chosen/rejected transcripts, responses = their "
                "final Assistant turns")


class _Generic(Schema):
    """Columns found per row among the usual names, or named with --map."""

    def __init__(self, mapping: dict[str, str], values: LabelValues | None) -> None:
        super().__init__(values)
        self.mapping = mapping
        self.first_cols: dict[str, str | None] = {}

    def find(self, obj: dict, role: str, candidates: tuple[str, ...]) -> str | None:
        if role in self.mapping:
            col = self.mapping[role]
            if col not in obj:
                raise RowError(f"column {col!r} (from --map {role}={col}) is missing; "
                               f"columns: {_columns(obj)}")
            return col
        return next((k for k in candidates if k in obj), None)

    def missing(self, obj: dict, what: str) -> RowError:
        return RowError(f"no {what} found; columns: {_columns(obj)}; name them with --map "
                        f"(e.g. --map prompt=q,a=x,b=y)")


class ChosenRejected(_Generic):
    name, title = "trl", "prompt/chosen/rejected (TRL, UltraFeedback, Skywork)"
    label_meaning = "gold label: chosen"

    @classmethod
    def fits(cls, obj: dict, mapping: dict) -> bool:
        return mapping.get("chosen", "chosen") in obj and mapping.get("rejected", "rejected") in obj

    def read(self, obj: dict) -> Reading:
        c_col = self.find(obj, "chosen", ("chosen",))
        r_col = self.find(obj, "rejected", ("rejected",))
        if c_col is None or r_col is None:
            raise self.missing(obj, "two responses (chosen/rejected or response_a/response_b)")
        chosen, rejected = obj[c_col], obj[r_col]
        p_col = self.find(obj, "prompt", PROMPT_KEYS)
        used = {c_col, r_col}
        if p_col is None:
            if not (isinstance(chosen, list) and isinstance(rejected, list)):
                raise RowError(f"no prompt column found (prompt, question, instruction, ...) and "
                               f"{c_col!r}/{r_col!r} are not whole conversations; columns: "
                               f"{_columns(obj)}; name it with --map prompt=COLUMN")
            messages, good, bad = split_conversations(conversation(chosen, c_col),
                                                      conversation(rejected, r_col), c_col, r_col)
        else:
            messages = prompt_messages(obj[p_col], p_col)
            used.add(p_col)
            messages = self._history(messages, obj[p_col], chosen, rejected, c_col, r_col)
            good = response_text(chosen, c_col, blank=self.blank_responses)
            bad = response_text(rejected, r_col, blank=self.blank_responses)
        return Reading(messages, good, bad, None, used, chosen_rejected=True)

    @staticmethod
    def _history(messages, prompt: Any, chosen: Any, rejected: Any, c_col: str, r_col: str):
        """With a prompt column and whole conversations in chosen/rejected (UltraFeedback), the
        conversations' shared turns are the history when they hold more than the prompt
        (a system message, earlier turns); they must end with the prompt."""
        if not (isinstance(chosen, list) and isinstance(rejected, list)
                and len(chosen) > 2 and len(rejected) > 2):
            return messages
        hist, _, _ = split_conversations(conversation(chosen, c_col),
                                         conversation(rejected, r_col), c_col, r_col)
        if hist == messages:
            return messages
        last = messages[-1]["content"].strip()
        if hist[-1]["content"].strip() != last:
            raise RowError(f"the prompt column and the conversations in {c_col!r}/{r_col!r} "
                           "disagree on the last user turn; drop one of them with --map")
        return hist

    def fields(self) -> str:
        p = self.mapping.get("prompt", self.first_cols.get("prompt") or
                             "the shared turns of chosen/rejected")
        return (f"prompt = {p}, responses = {self.mapping.get('chosen', 'chosen')}/"
                f"{self.mapping.get('rejected', 'rejected')}")


class ResponseAB(_Generic):
    name, title = "rmjudge", "prompt/response_a/response_b/label"
    label_meaning = "A/B letters (A, B, A>B, model_a, ...), tie unlabelled"

    def __init__(self, mapping: dict[str, str], values: LabelValues | None,
                 choice: str | None, obj: dict) -> None:
        super().__init__(mapping, values)
        if any(k in mapping for k in ("a", "b", "prompt")):
            self.name, self.title = "mapped", "columns named by --map"
        self.choice = choice
        self.first_cols = {"prompt": self.find(obj, "prompt", PROMPT_KEYS),
                           "a": self.find(obj, "a", A_KEYS), "b": self.find(obj, "b", B_KEYS)}
        # The label column is the one --label/--map label= names, else the first of LABEL_KEYS
        # in the first row that has one: a first row without it does not turn later rows' labels
        # into passthrough columns. `check_labels` looks for it in the rows it reads ahead.
        self.auto_label = choice is None
        self.label_column = choice
        self.label_row: int | None = None  # the row the label column was found in
        self.label_seen = False
        self.adopt_label(obj)

    def adopt_label(self, obj: dict, row: int | None = None) -> bool:
        if self.label_column is None and self.auto_label:
            self.label_column = next((k for k in LABEL_KEYS if k in obj), None)
            if self.label_column is not None:
                self.label_row = row
        if self.label_column is not None and self.label_column in obj:
            self.label_seen = True
        return self.label_seen

    @property
    def awaiting_label(self) -> bool:
        return not self.label_seen

    def _stray_label(self, obj: dict) -> None:
        """A row holding a label in another label column than the input's is an error row, never
        a gold label lost to passthrough."""
        col = self.label_column
        if not self.auto_label or col is None or col in obj:
            return
        other = next((k for k in LABEL_KEYS if obj.get(k) is not None), None)
        if other is not None:
            raise RowError(f"column {other!r} holds a label but the input's label column is "
                           f"{col!r} (from {self._label_source()}); give every row the column "
                           f"{col!r}, null when unlabelled, or name one with --label")

    def _label_source(self) -> str:
        return "the first row read" if self.label_row is None else f"row {self.label_row}"

    @classmethod
    def fits(cls, obj: dict, mapping: dict) -> bool:
        a = mapping.get("a") or next((k for k in A_KEYS if k in obj), None)
        b = mapping.get("b") or next((k for k in B_KEYS if k in obj), None)
        return a is not None and b is not None

    @property
    def free_labels(self) -> bool:
        return self.label_column is not None

    def known_label(self, value: Any) -> str | None:
        return letter_label(value)

    def label(self, obj: dict) -> str | None:
        col = self.label_column
        if col is None or col not in obj or obj[col] is None:
            return None
        return self.values.outcome(obj[col]) if self.values else letter_label(obj[col])

    def read(self, obj: dict) -> Reading:
        self._stray_label(obj)
        p_col = self.find(obj, "prompt", PROMPT_KEYS)
        a_col = self.find(obj, "a", A_KEYS)
        b_col = self.find(obj, "b", B_KEYS)
        if a_col is None or b_col is None:
            raise self.missing(obj, "two responses (chosen/rejected or response_a/response_b)")
        if p_col is None:
            raise self.missing(obj, "prompt column (prompt, question, instruction, ...)")
        messages = prompt_messages(obj[p_col], p_col)
        a = response_text(obj[a_col], a_col, blank=self.blank_responses)
        b = response_text(obj[b_col], b_col, blank=self.blank_responses)
        used = {p_col, a_col, b_col}
        if self.label_column is not None and self.label_column in obj:
            used.add(self.label_column)
        return Reading(messages, a, b, self.label(obj), used)

    def fields(self) -> str:
        c = self.first_cols
        return f"prompt = {c['prompt']}, A = {c['a']}, B = {c['b']}"

    def slot_a(self) -> str:
        return f"column {self.first_cols['a']!r}"

    def describe(self) -> str:
        if self.label_column is None:
            return f"{self.name} ({self.title}): {self.fields()}; no label column (unlabelled)"
        return super().describe()


KNOWN = (PKUSafeRLHF, HelpSteer3, SHP, Arena, HHRLHF)


def detect(obj: dict, mapping: dict[str, str], values: LabelValues | None,
           choice: str | None) -> Schema:
    """The schema of an input, from its first row. RowError when no schema fits this row;
    LabelValuesSyntaxError when --label/--label-values do not apply to the schema found."""
    if "label" in mapping:
        if choice is not None and choice != mapping["label"]:
            raise LabelValuesSyntaxError(f"--map label={mapping['label']} and --label {choice} "
                                         "name different label columns; give one")
        choice = mapping["label"]
    named = {k for k in mapping if k not in ("id", "label")}
    schema: Schema | None = None
    if not named:
        for cls in KNOWN:
            if cls.fits(obj):
                if cls is PKUSafeRLHF:
                    schema = PKUSafeRLHF(values, choice, obj)
                else:
                    schema = cls(values)
                break
    if schema is None and not ({"a", "b"} & named):
        if ChosenRejected.fits(obj, mapping) or {"chosen", "rejected"} & named:
            schema = ChosenRejected(mapping, values)
            schema.first_cols = {"prompt": next((k for k in PROMPT_KEYS if k in obj), None)}
    if schema is None and ResponseAB.fits(obj, mapping):
        schema = ResponseAB(mapping, values, choice, obj)
    if schema is None:
        cols = _columns(obj)
        raise RowError(f"no two responses found (chosen/rejected, response_a/response_b, or a "
                       f"known dataset's columns: see docs/datasets.md); columns: {cols}; name "
                       "them with --map (e.g. --map prompt=q,a=x,b=y)")
    if schema.label_column is None and values is not None and not schema.awaiting_label:
        raise LabelValuesSyntaxError(f"--label-values does not apply: the input is read as "
                                     f"{schema.name}, whose gold label is the chosen response")
    if choice is not None and not isinstance(schema, (PKUSafeRLHF, ResponseAB)) \
            and choice != schema.label_column:
        what = (f"its label column is {schema.label_column}" if schema.label_column
                else "its gold label is the chosen response")
        raise LabelValuesSyntaxError(f"--label {choice} does not apply: the input is read as "
                                     f"{schema.name} and {what}")
    return schema
