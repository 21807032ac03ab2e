"""The output folder of `rmjudge-train sft` and `grpo`: checked before anything loads, under
the rules of `rmjudge.runs.overwrite`.

The folder is this command's own (so a rerun or `--resume` writes into it) when it holds the
marker `rmjudge.runs.overwrite.MARKER` naming the command, written before anything else, or, for a
folder of an earlier version, a `settings.json` holding exactly that command's settings. Any
other folder that holds files is refused unless `--overwrite`; a file given as the folder, or
an input (source, data, model, adapter) given as the folder, is always refused.
"""

from __future__ import annotations

import dataclasses
import os

import orjson

from rmjudge.engine.adapter_format import ADAPTER_INFO_FILE
from rmjudge.runs.overwrite import check_folder_target, check_not_input, marked_by, write_marker


def _legacy_settings(folder: str, settings_cls) -> bool:
    try:
        with open(os.path.join(folder, "settings.json"), "rb") as f:
            rec = orjson.loads(f.read())
    except (OSError, orjson.JSONDecodeError):
        return False
    names = {f.name for f in dataclasses.fields(settings_cls)}
    return isinstance(rec, dict) and set(rec) == names


def check_output_dir(settings, command: str, *, source: str | None = None,
                     inputs: tuple[str | None, ...] = (), overwrite: bool = False) -> None:
    """Refuse `settings.output_dir` as described in the module docstring."""
    folder = settings.output_dir
    check_not_input([folder], source, inputs)

    def own(path: str) -> bool:
        return marked_by(path, command) or _legacy_settings(path, type(settings))

    check_folder_target(folder, command, overwrite=overwrite, recognize=own)


def claim_output_dir(settings, command: str) -> None:
    """Create the output folder and mark it as `command`'s (before anything is written)."""
    write_marker(settings.output_dir, command)


def write_adapter_info(adapter_dir: str | os.PathLike, prompt_format: int | None) -> None:
    """Record the prompt format of an adapter's training data beside the PEFT adapter
    (`ADAPTER_INFO_FILE`, read back by rmjudge.engine.adapter_format.read_adapter_info)."""
    if prompt_format is None:
        return
    from rmjudge.store import write_json

    write_json(os.path.join(adapter_dir, ADAPTER_INFO_FILE), {"prompt_format": int(prompt_format)})
