"""How text output is laid out: the width to fit, prose wrapped at spaces, and tables whose
headers wrap, or that are stacked one record per block when even that is too wide, so that no
line is wider than the width and no word, figure, path or name is cut (the commands print
through it: rmjudge/cli/layout.py).

The width (docs/scoring.md#what-the-commands-print): `COLUMNS` when it is set to a whole number,
else the width of the terminal that stdout or stderr writes to, else 80; never less than 40
(MIN_WIDTH), the narrowest that a table of figures with its row names fits.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap

DEFAULT_WIDTH = 80
MIN_WIDTH = 40
GAP = "  "  # between two columns of a table


def output_width(stream=None) -> int:
    """The width to fit: `COLUMNS` when set to a whole number of 1 or more, else the width of
    the terminal `stream` writes to (without `stream`: stdout's, else stderr's), else 80; at
    least MIN_WIDTH."""
    env = os.environ.get("COLUMNS", "").strip()
    if env.isdigit() and int(env) > 0:
        return max(int(env), MIN_WIDTH)
    for s in (stream,) if stream is not None else (sys.stdout, sys.stderr):
        try:
            if s.isatty():
                return max(os.get_terminal_size(s.fileno()).columns or DEFAULT_WIDTH, MIN_WIDTH)
        except (AttributeError, OSError, ValueError):
            continue
    return DEFAULT_WIDTH


# an interval, "[87.5, 100.0]": kept on one line, like a word
_INTERVAL = re.compile(r"\[[-+]?[\d.]+%?, [-+]?[\d.]+%?\]")
_KEEP = "\x00"  # stands for a space that is not a place to break while wrapping


def wrap_line(line: str, width: int, hang: int = 2) -> list[str]:
    """`line` wrapped at spaces to `width`; continuation lines are indented `hang` more than
    the line's own indent. A word longer than the width (a long path) stays whole on a line
    of its own, so a path or a name can always be copied from the output (one under the home
    folder that would not fit is written from `~/`, as a shell reads it); an interval
    ("[87.5, 100.0]") is never split either."""
    if len(line) <= width:
        return [line]
    indent = " " * (len(line) - len(line.lstrip(" ")))
    room = max(width, MIN_WIDTH) - len(indent) - hang
    kept = " ".join(_home(w) if len(w) > room else w for w in line.split(" "))
    kept = _INTERVAL.sub(lambda m: m.group(0).replace(" ", _KEEP), kept)
    out = textwrap.wrap(kept, width=max(width, MIN_WIDTH), subsequent_indent=indent + " " * hang,
                        break_long_words=False, break_on_hyphens=False) or [kept]
    return [part.replace(_KEEP, " ") for part in out]


def _home(word: str) -> str:
    """`word` from `~/` when it is a path under the home folder."""
    home = os.path.expanduser("~")
    if home not in ("~", "/") and word.startswith(home + os.sep):
        return "~" + word[len(home):]
    return word


def wrap(text: str, width: int | None = None, hang: int = 2) -> str:
    """Each line of `text` wrapped (`wrap_line`) to `width` (default: `output_width()`)."""
    width = output_width() if width is None else width
    return "\n".join(out for line in text.split("\n") for out in wrap_line(line, width, hang))


def table(head: list[str], rows: list[list[str]], width: int, *, indent: str = "",
          right: tuple[int, ...] = ()) -> list[str] | None:
    """A table as text lines at most `width` wide, or None when it cannot fit: each column as
    wide as its widest cell (cells are never wrapped), headers wrapped at spaces within their
    column's width (a header wider than every cell of its column widens the column to its
    longest word; the headers take as few lines as the width allows). `right`: the columns
    aligned right (figures)."""
    width = max(width, MIN_WIDTH) - len(indent) - len(GAP) * (len(head) - 1)
    cells = [max((len(r[i]) for r in rows), default=0) for i in range(len(head))]
    widths = None
    for depth in range(1, max([1] + [len(h.split()) for h in head]) + 1):
        widths = [_header_width(h, c, depth) for h, c in zip(head, cells)]
        if sum(widths) <= width:
            break
    if widths is None or sum(widths) > width:
        return None
    wrapped = [textwrap.wrap(h, widths[i], break_long_words=False) or [""]
               for i, h in enumerate(head)]
    depth = max(len(w) for w in wrapped)
    lines = []
    for k in range(depth):
        row = [w[k] if k < len(w) else "" for w in wrapped]
        lines.append(_row(row, widths, indent, right))
    return lines + [_row(r, widths, indent, right) for r in rows]


def _header_width(head: str, cells: int, depth: int) -> int:
    """The narrowest width, at least `cells`, in which `head` wraps to `depth` lines or fewer
    (its longest word when no width does)."""
    w = max([cells] + [len(x) for x in head.split()])
    while len(textwrap.wrap(head, w, break_long_words=False)) > depth and w < len(head):
        w += 1
    return w


def _row(cells: list[str], widths: list[int], indent: str, right: tuple[int, ...]) -> str:
    return (indent + GAP.join(c.rjust(w) if i in right else c.ljust(w)
                              for i, (c, w) in enumerate(zip(cells, widths)))).rstrip()


def stacked(head: list[str], rows: list[list[str]], width: int, indent: str = "") -> list[str]:
    """The records of a table too wide for `width`, one block each: its first cell, then one
    `header: value` line per other cell, wrapped at spaces."""
    out = []
    for r in rows:
        out += wrap_line(f"{indent}{head[0]} {r[0]}".rstrip() if head[0] else f"{indent}{r[0]}",
                         width)
        for h, c in zip(head[1:], r[1:]):
            out += wrap_line(f"{indent}  {h}: {c}", width, hang=4)
    return out


def fit_table(head: list[str], rows: list[list[str]], width: int, *, indent: str = "",
              right: tuple[int, ...] = ()) -> list[str]:
    """`table` when it fits `width`, else `stacked`."""
    return table(head, rows, width, indent=indent, right=right) or stacked(
        head, rows, width, indent)


def fit_markdown(text: str, width: int) -> str:
    """`text` with its prose wrapped to `width` and each Markdown table (a run of lines that
    start with `|`) kept as it is when it fits, else turned on its side: one row per column of
    the original (a wide table has few rows and many columns)."""
    out: list[str] = []
    block: list[str] = []
    for line in text.split("\n") + [""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            out += block if max(map(len, block)) <= width else _transposed(block)
            block = []
        out += wrap_line(line, width)
    return "\n".join(out[:-1])


def _transposed(block: list[str]) -> list[str]:
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in block if not set(line) <= set("|-: ")]
    cols = list(zip(*rows))
    body = ["| " + " | ".join(c) + " |" for c in cols]
    return body[:1] + ["|---|" + "---:|" * (len(rows) - 1)] + body[1:]
