"""Bounded rendering of untrusted Jinja2 templates (chat templates, `--prompt-template`).

Jinja2's sandbox blocks unsafe attributes and caps `range()`, but not size: a template such as
`{{ context * 100000000 }}` builds gigabytes before anything fails. Here every rendering gets a
limit, `RENDER_FACTOR` times the text it is given (the messages, responses, critiques, ...)
plus `RENDER_ALLOWANCE` characters, and the environment refuses, *before* computing it, an
operation whose result would pass it:

- `*` repeating a string or list, `+` joining two, `**` with a result of more digits, and
  `%` formatting with a width or precision over it;
- a string method that pads, repeats or replaces (`ljust`, `center`, `zfill`, `format`,
  `replace`, `join`, ...) asking for more, and a filter given a number over it (`center`,
  `indent`, ...) or the `format`/`join`/`replace` filters building more;
- a `namespace()` attribute set to a longer string or list, and `range()` handing out more
  than `RANGE_BUDGET` numbers in one rendering (nested loops included);

and `render_bounded` streams the output and stops once it passes the limit. Each failure is
`RenderTooLarge`, which the template's one-line error reports (rmjudge.engine.chat). A prompt
that legitimately needs more than the limit cannot occur: the limit grows with the data.

The checks are about size only; safety (attributes, callables) stays Jinja2's sandbox. Jinja2
itself offers no output bound (its `ImmutableSandboxedEnvironment` is extended here, not
replaced).
"""

from __future__ import annotations

import contextvars
import functools
import math
import re
from typing import Any

from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

RENDER_ALLOWANCE = 1 << 20  # characters a rendering may add to the text it is given
RENDER_FACTOR = 4  # times the text it is given (a template may show a slot more than once)
RANGE_BUDGET = 1_000_000  # numbers range() may hand out in one rendering

_LIMIT: contextvars.ContextVar[int] = contextvars.ContextVar("render_limit",
                                                             default=RENDER_ALLOWANCE)
_RANGE_LEFT: contextvars.ContextVar[list[int]] = contextvars.ContextVar("range_left")
_NUMBERS = re.compile(r"\d+")
_GROWING_METHODS = {"ljust", "rjust", "center", "zfill", "expandtabs"}


class RenderTooLarge(SecurityError):
    """A rendering would pass its size limit; the message says what and the limit."""


def text_size(value: Any, depth: int = 0) -> int:
    """Characters of text in a template variable (strings inside lists and dicts counted)."""
    if isinstance(value, str):
        return len(value)
    if depth > 8:
        return 0
    if isinstance(value, dict):
        return sum(text_size(k, depth + 1) + text_size(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(text_size(v, depth + 1) for v in value)
    return 0


def render_limit(variables: dict) -> int:
    """The most characters a rendering of `variables` may produce or build."""
    return RENDER_FACTOR * text_size(variables) + RENDER_ALLOWANCE


def _refuse(what: str, size: int | float) -> None:
    limit = _LIMIT.get()
    if size > limit:
        amount = f"{int(size)}" if size < 1e18 else f"about {size:.0e}"
        raise RenderTooLarge(f"{what} would make {amount} characters, over the limit of "
                             f"{limit} for this prompt: "
                             f"{RENDER_FACTOR} times the text it is given plus "
                             f"{RENDER_ALLOWANCE}")


def _sized(v: Any) -> bool:
    return isinstance(v, (str, list, tuple))


def _check_numbers(what: str, text: str) -> None:
    """Widths and precisions in a format string ("%0999999999d", "{:>999999999}")."""
    for m in _NUMBERS.finditer(text):
        if len(m.group()) > 18:
            _refuse(what, 1e19)
        _refuse(what, int(m.group()))


def _check_ints(what: str, args: tuple, kwargs: dict) -> None:
    for v in (*args, *kwargs.values()):
        if isinstance(v, int) and not isinstance(v, bool):
            _refuse(what, v)


def _joined_size(items: Any, sep: Any) -> tuple[list, int]:
    items = list(items)
    size = sum(len(x) if isinstance(x, str) else len(str(x)) for x in items)
    return items, size + max(len(items) - 1, 0) * len(str(sep))


def _replaced_size(s: str, old: str, new: str, count: int = -1) -> int:
    n = s.count(old) if old else len(s) + 1
    if count is not None and count >= 0:
        n = min(n, count)
    return len(s) + n * (len(new) - len(old))


class BoundedNamespace(Namespace):
    """`namespace()` whose attributes cannot be set to a string or list over the limit."""

    def __setitem__(self, name: str, value: Any) -> None:
        if _sized(value):
            _refuse(f"setting {name}", len(value))
        super().__setitem__(name, value)


def bounded_range(*args: int) -> range:
    """`range()` as Jinja2's sandbox has it (at most 100,000 numbers), and at most
    `RANGE_BUDGET` numbers in all over one rendering."""
    rng = range(*args)
    left = _RANGE_LEFT.get(None)
    if left is not None:
        left[0] -= len(rng)
        if left[0] < 0:
            raise RenderTooLarge(f"range() would hand out more than {RANGE_BUDGET} numbers in "
                                 "one prompt (nested loops)")
    from jinja2.sandbox import safe_range

    return safe_range(*args)


def _bounded_filter(name: str, f):
    @functools.wraps(f)
    def filter_(*args, **kwargs):
        # environment/context filters get it first; the value follows, then the arguments
        skip = 1 + (getattr(f, "jinja_pass_arg", None) is not None)
        value, extra = (args[skip - 1] if len(args) >= skip else None), args[skip:]
        what = f"the {name} filter"
        _check_ints(what, extra, kwargs)
        if name == "format" and isinstance(value, str):
            _check_numbers(what, value)
        elif name == "join" and value is not None and not isinstance(value, str):
            items, size = _joined_size(value, extra[0] if extra else kwargs.get("d", ""))
            _refuse(what, size)
            args = (*args[:skip - 1], items, *extra)
        elif name == "replace" and isinstance(value, str) and len(extra) >= 2:
            _refuse(what, _replaced_size(value, str(extra[0]), str(extra[1]),
                                         extra[2] if len(extra) > 2 else -1))
        return f(*args, **kwargs)

    return filter_


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja2's immutable sandbox with the size checks of the module docstring."""

    intercepted_binops = frozenset({"*", "+", "**", "%"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.globals["range"] = bounded_range
        self.globals["namespace"] = BoundedNamespace
        self.filters = {k: _bounded_filter(k, f) for k, f in self.filters.items()}

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        what = f"the operator {operator}"
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if _sized(seq) and isinstance(n, int):
                    _refuse(what, len(seq) * n)
        elif operator == "+" and _sized(left) and _sized(right):
            _refuse(what, len(left) + len(right))
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) \
                and abs(left) > 1 and right > 0:
            _refuse(what, right * math.log10(abs(left)))  # decimal digits of the result
        elif operator == "%" and isinstance(left, str):
            _check_numbers(what, left)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        method = getattr(__obj, "__wrapped__", __obj)  # Jinja2 wraps str.format
        owner = getattr(method, "__self__", None)
        name = getattr(method, "__name__", "")
        if isinstance(owner, str):
            what = f"str.{name}()"
            if name in _GROWING_METHODS:
                _check_ints(what, args, kwargs)
            elif name in ("format", "format_map"):
                _check_numbers(what, owner)
            elif name == "join" and args:
                items, size = _joined_size(args[0], owner)
                _refuse(what, size)
                args = (items, *args[1:])
            elif name == "replace" and len(args) >= 2:
                _refuse(what, _replaced_size(owner, str(args[0]), str(args[1]),
                                             args[2] if len(args) > 2 else -1))
        return super().call(__context, __obj, *args, **kwargs)


def bounded_environment(**options: Any) -> BoundedSandbox:
    return BoundedSandbox(**options)


def render_bounded(template, **variables: Any) -> str:
    """`template.render(**variables)` within the limit of `variables` (`render_limit`): the
    output is streamed and the rendering stops with `RenderTooLarge` once it passes it."""
    limit = render_limit(variables)
    token = _LIMIT.set(limit)
    budget = _RANGE_LEFT.set([RANGE_BUDGET])
    try:
        out, n = [], 0
        for chunk in template.generate(**variables):
            n += len(chunk)
            if n > limit:
                raise RenderTooLarge(f"its output passed {limit} characters, the limit for "
                                     f"this prompt: {RENDER_FACTOR} times the text it is given "
                                     f"plus {RENDER_ALLOWANCE}")
            out.append(chunk)
        return "".join(out)
    finally:
        _RANGE_LEFT.reset(budget)
        _LIMIT.reset(token)
