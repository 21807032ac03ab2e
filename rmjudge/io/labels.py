"""Gold labels: what a label value says, never guessed.

A label is `"A"` (the first response is better), `"B"` (the second) or `None` (a tie, or no
label). Datasets whose label semantics are published (PKU-SafeRLHF, HelpSteer3, SHP, Chatbot
Arena, rmjudge's own A/B letters) are read by their schema (`rmjudge.io.schemas`); any other
label column needs `--label-values`, parsed here:

    --label-values 0=A,1=B                  literal values
    --label-values "<0=A,>0=B,0=tie"        comparisons for numeric scores
    --label-values "-3..-1=A,1..3=B,0=tie"  inclusive numeric ranges
    --label-values "yes=A,no=B,*=tie"       `*`: every other value

Outcomes are `A`, `B` or `tie` (unlabelled). Literals match text case-insensitively and numbers
numerically (`1` matches 1, 1.0 and "1"); comparisons and ranges match numbers only. Rules that
overlap with different outcomes are refused.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

from rmjudge.io.readers import InputError

UNCOVERED = "uncovered"  # a value no rule (or no letter) gives a meaning to

_LETTERS = {
    "a": "A", "a>b": "A", "b<a": "A", "response_a": "A", "model_a": "A",
    "b": "B", "b>a": "B", "a<b": "B", "response_b": "B", "model_b": "B",
}
_TIES = {"", "tie", "tie(bothbad)", "draw", "a=b", "b=a"}


class LabelValuesSyntaxError(InputError, ValueError):
    """`--label-values` (or `--label`) is malformed or contradicts itself."""


class LabelValuesError(InputError):
    """The input's label values need `--label-values` (or more of it) before anything is judged."""


def letter_label(value: Any) -> str | None:
    """rmjudge's own labels: A/B letters ('A', 'A>B', 'model_a', ...) or a tie; else UNCOVERED.
    Numbers are never letters: 1/2 and 0/1 mean different things in different datasets."""
    if value is None:
        return None
    if isinstance(value, (bool, int, float)):
        return UNCOVERED
    key = str(value).strip().lower().replace(" ", "")
    if key in _TIES:
        return None
    return _LETTERS.get(key, UNCOVERED)


def as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            x = float(value.strip())
        except ValueError:
            return None
        return x if math.isfinite(x) else None
    return None


def show_value(value: Any) -> str:
    """A label value as a person would type it in `--label-values`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    s = str(value)
    if not s.strip() or any(c in s for c in ",= ") or len(s) > 40:
        return repr(s[:40] + ("..." if len(s) > 40 else ""))
    return s


@dataclass(frozen=True)
class Rule:
    text: str
    outcome: str | None  # "A" | "B" | None (tie)
    literal: str | None = None  # casefolded text, for a non-numeric literal
    lo: float = -math.inf
    lo_closed: bool = True
    hi: float = math.inf
    hi_closed: bool = True
    numeric: bool = False
    any: bool = False

    def matches(self, value: Any) -> bool:
        if self.any:
            return True
        if self.numeric:
            x = as_number(value)
            if x is None:
                return False
            above = x > self.lo or (self.lo_closed and x == self.lo)
            below = x < self.hi or (self.hi_closed and x == self.hi)
            return above and below
        return value is not None and not isinstance(value, (int, float)) \
            and str(value).strip().casefold() == self.literal


def _outcome(text: str, part: str) -> str | None:
    t = text.strip().lower()
    if t in ("a", "b"):
        return t.upper()
    if t in ("tie", "none"):
        return None
    raise LabelValuesSyntaxError(f"--label-values {part!r}: the outcome {text.strip()!r} must be "
                                 "A, B or tie")


def _number(text: str, part: str) -> float:
    x = as_number(text)
    if x is None:
        raise LabelValuesSyntaxError(f"--label-values {part!r}: {text.strip()!r} is not a number")
    return x


def _rule(part: str) -> Rule:
    value, sep, out = part.rpartition("=")
    if not sep or not value.strip():
        raise LabelValuesSyntaxError(f"--label-values {part!r} must look like VALUE=A, VALUE=B "
                                     "or VALUE=tie (e.g. 0=A,1=B or \"<0=A,>0=B,0=tie\")")
    outcome = _outcome(out, part)
    v = value.strip()
    if v == "*":
        return Rule(part, outcome, any=True)
    for op in ("<=", ">=", "<", ">"):
        if v.startswith(op):
            x = _number(v[len(op):], part)
            if op[0] == "<":
                return Rule(part, outcome, hi=x, hi_closed=op == "<=", numeric=True)
            return Rule(part, outcome, lo=x, lo_closed=op == ">=", numeric=True)
    if ".." in v:
        lo, _, hi = v.partition("..")
        a, b = _number(lo, part), _number(hi, part)
        if a > b:
            raise LabelValuesSyntaxError(f"--label-values {part!r}: the range {v} is empty "
                                         f"(write it low..high)")
        return Rule(part, outcome, lo=a, hi=b, numeric=True)
    x = as_number(v)
    if x is not None:
        return Rule(part, outcome, lo=x, hi=x, numeric=True)
    return Rule(part, outcome, literal=v.casefold())


def _overlap(r: Rule, s: Rule) -> bool:
    if r.any or s.any:
        return r.any and s.any
    if r.numeric != s.numeric:
        return False
    if not r.numeric:
        return r.literal == s.literal
    lo, lo_closed = max((r.lo, r.lo_closed), (s.lo, s.lo_closed), key=lambda t: (t[0], not t[1]))
    hi, hi_closed = min((r.hi, r.hi_closed), (s.hi, s.hi_closed), key=lambda t: (t[0], t[1]))
    return lo < hi or (lo == hi and lo_closed and hi_closed)


@dataclass(frozen=True)
class LabelValues:
    """A parsed `--label-values`: `outcome(value)` is "A", "B", None (tie) or UNCOVERED."""

    spec: str
    rules: tuple[Rule, ...]

    def outcome(self, value: Any) -> str | None:
        specific = [r for r in self.rules if not r.any and r.matches(value)]
        if specific:
            return specific[0].outcome
        fallback = [r for r in self.rules if r.any]
        if fallback and value is not None:
            return fallback[0].outcome
        return None if value is None else UNCOVERED


def parse_label_values(spec: str | None) -> LabelValues | None:
    """Parse `--label-values`; None when not given. Raises LabelValuesSyntaxError."""
    if spec is None:
        return None
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise LabelValuesSyntaxError("--label-values is empty; give e.g. 0=A,1=B")
    rules = [_rule(p) for p in parts]
    for i, r in enumerate(rules):
        for s in rules[i + 1:]:
            if _overlap(r, s):
                if r.outcome != s.outcome or r.any or (not r.numeric and not s.numeric):
                    raise LabelValuesSyntaxError(
                        f"--label-values {r.text!r} and {s.text!r} overlap; give each value "
                        "one meaning")
    if not any(r.outcome for r in rules):
        raise LabelValuesSyntaxError(f"--label-values {spec!r} maps nothing to A or B; every "
                                     "pair would be unlabelled")
    return LabelValues(",".join(parts), tuple(rules))


def distinct_values(values: Iterable[Any]) -> Counter:
    """Counts of label values, keyed by how they are shown (1 and 1.0 and "1" are one value)."""
    return Counter(show_value(v) for v in values)


def listing(counts: Counter, limit: int = 20) -> str:
    items = counts.most_common()
    shown = ", ".join(f"{k} ({n} row{'s' if n != 1 else ''})" for k, n in items[:limit])
    more = len(items) - limit
    return shown + (f", and {more} more" if more > 0 else "")
