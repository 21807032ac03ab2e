"""Optional dependencies (pip extras). rmjudge is installed from its clone (`pip install
'.[hub]'` in the clone's root), not from a package index, and every message and page says so
the one way `install_hint` writes it.

A command that needs an extra calls `require` before it loads anything; `missing_extra` turns an
import failure met later (an extra's own dependency, say) into the same one `Error:` line
(`rmjudge.cli.common.ExtrasGroup` does that for every command of a click group).
"""

from __future__ import annotations

import importlib

from rmjudge.core.errors import UserError

# top-level module -> the extra that installs it
EXTRA_OF = {
    "torch": "train", "transformers": "train", "peft": "train", "trl": "train",
    "bitsandbytes": "train", "datasets": "train", "accelerate": "train",
    "gguf": "export", "safetensors": "export", "sentencepiece": "export",
}
TRAIN = ("torch", "transformers", "peft")
EXPORT = ("torch", "transformers", "gguf")


def install_hint(extra: str) -> str:
    """The command that installs `extra` (`hub`, `model`, `server`, ...), as messages print it."""
    return f"pip install '.[{extra}]' in the rmjudge clone"


class MissingExtraError(UserError):
    """A module of an optional extra is not installed; the message gives the pip command."""


def _message(module: str, extra: str, what: str) -> str:
    return f"{what} needs {module}, which is not installed: {install_hint(extra)}"


def require(what: str, extra: str, modules: tuple[str, ...]) -> None:
    """Raise MissingExtraError unless every module of `modules` imports."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            missing = (getattr(exc, "name", None) or name).split(".")[0]
            raise MissingExtraError(_message(missing, EXTRA_OF.get(missing, extra), what)) \
                from None


def missing_extra(exc: ImportError, what: str) -> MissingExtraError | None:
    """The error for an import failure of a module an extra installs (None for any other)."""
    name = (getattr(exc, "name", None) or "").split(".")[0]
    if name not in EXTRA_OF:
        return None
    return MissingExtraError(_message(name, EXTRA_OF[name], what))
