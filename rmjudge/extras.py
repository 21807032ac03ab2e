"""Optional dependencies (pip extras): one `Error:` line naming the install command when a
command needs one that is missing, instead of a `ModuleNotFoundError` traceback.

`require` is called by a command before it loads anything; `missing_extra` turns an import
failure met later (an extra's own dependency, say) into the same error, and `ExtrasGroup` does
that for every command of a click group (rmjudge-train, rmjudge-export).
"""

from __future__ import annotations

import importlib

from rmjudge.cli.common import UserErrorGroup, report_user_error
from rmjudge.errors import UserError

# top-level module -> the extra that installs it
EXTRA_OF = {
    "torch": "train", "transformers": "train", "peft": "train", "trl": "train",
    "bitsandbytes": "train", "datasets": "train", "accelerate": "train",
    "gguf": "export", "safetensors": "export", "sentencepiece": "export",
}
TRAIN = ("torch", "transformers", "peft")
EXPORT = ("torch", "transformers", "gguf")


class MissingExtraError(UserError):
    """A module of an optional extra is not installed; the message gives the pip command."""


def _message(module: str, extra: str, what: str) -> str:
    return (f"{what} needs {module}, which is not installed: pip install 'rmjudge[{extra}]' "
            f"(from a source checkout: pip install '.[{extra}]')")


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


class ExtrasGroup(UserErrorGroup):
    """`UserErrorGroup` that also reports a missing extra as one `Error:` line (exit 1)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except ImportError as exc:
            sub = ctx.invoked_subcommand
            err = missing_extra(exc, f"{ctx.info_name} {sub}" if sub else str(ctx.info_name))
            if err is None:
                raise
            report_user_error(err)
