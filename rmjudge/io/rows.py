"""What every input reader yields (`RawRow`) and raises (`InputError`): a leaf module, so that
the readers of each input form and the dispatch in `rmjudge.io.readers` share them without
importing each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rmjudge.core.errors import UserError


class InputError(UserError):
    """The input as a whole cannot be read; the message says how to fix it."""


@dataclass
class RawRow:
    row_number: int
    obj: dict[str, Any] | None
    error: str | None = None
    raw: str | None = None
