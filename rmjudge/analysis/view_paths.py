"""Where an explorer goes and how one is recognized: the default folder beside a judged table
(`x.view/` for `x.duckdb`, as `rmjudge report` writes `x.report.html`) and the generator mark in
its page. A leaf module, so `rmjudge report` can link to an explorer without importing it."""

from __future__ import annotations

import os

from rmjudge.files import file_head, table_stem

GENERATOR = '<meta name="generator" content="rmjudge view">'
PAGE = "index.html"


def default_dir(table: str) -> str:
    """The explorer's folder when -o is not given: beside the table, NAME.view."""
    return f"{table_stem(table)}.view"


def is_view_dir(path: str) -> bool:
    """True when `path` is a folder whose page `rmjudge view` wrote (its head carries
    GENERATOR)."""
    head = file_head(os.path.join(path, PAGE), 4096)
    return os.path.isdir(path) and head is not None and GENERATOR.encode() in head


def relative_link(target: str, start: str) -> str:
    """A link from the folder `start` to the file `target`, relative, with `/` separators; one
    whose first part holds a colon starts with `./`, so a browser never reads it as a scheme
    (a file named `javascript:x.html`)."""
    link = os.path.relpath(os.path.abspath(target), os.path.abspath(start)).replace(os.sep, "/")
    return f"./{link}" if ":" in link.split("/")[0] else link
