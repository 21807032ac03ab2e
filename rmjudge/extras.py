"""The one way every message and page tells how to add an optional extra: rmjudge is installed
from its clone (`pip install '.[hub]'` in the clone's root), not from a package index."""

from __future__ import annotations


def install_hint(extra: str) -> str:
    """The command that installs `extra` (`hub`, `model`, `server`, ...), as messages print it."""
    return f"pip install '.[{extra}]' in the rmjudge clone"
