"""The output folder of `rmjudge-train sft` and `grpo`: checked before anything loads, under
the rules of `rmjudge.files.overwrite`.

The folder is this command's own (so a rerun or `--resume` writes into it) when it holds the
marker `rmjudge.files.overwrite.MARKER` naming the command, written before anything else, or,
for a folder of an earlier version, a `settings.json` holding exactly that command's settings. Any
other folder that holds files is refused unless `--overwrite`; a file given as the folder, or
an input (source, data, model, adapter) given as the folder, is always refused.

Nothing in the folder is ever half-written: files go through `rmjudge.files`'s writers, folders
written by transformers (checkpoints, `save_pretrained`) are built aside as `.NAME.new-XXXXXXXX`
(`rmjudge.files.TempDir`, its lock held) and moved into place whole (`StagedCheckpoints`, and
`rmjudge.files.save_folder` for the adapter and model folders); a killed run's temporaries are
removed by the next run (`claim_output_dir`), those of a live run never.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import orjson

from rmjudge.models.adapter_format import ADAPTER_INFO_FILE
from rmjudge.files import check_folder_target, check_not_input, marked_by, write_marker


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
    """Create the output folder and mark it as `command`'s (before anything is written), and
    remove what a killed run of it left half-written there (only rmjudge's temporaries that no
    live process holds)."""
    from rmjudge.files import clean_folder_temps

    write_marker(settings.output_dir, command)
    clean_folder_temps(settings.output_dir)


_CHECKPOINT = re.compile(r"checkpoint-(\d+)")


class StagedCheckpoints:
    """Trainer checkpoints written aside and moved into `out` whole. The trainer's
    `output_dir` is `path` (`OUT/.checkpoints.new-XXXXXXXX`, held by this process); after each
    save (`callback`, transformers' `on_save`, which runs once a checkpoint is complete) the new
    `checkpoint-N` moves to `OUT/checkpoint-N`, and only the newest `keep` stay (the trainer's
    `save_total_limit`, which it can no longer apply itself)."""

    def __init__(self, out: Path, keep: int | None):
        from rmjudge.files import TempDir

        self.out = Path(out)
        self.keep = keep
        self._staging = TempDir(str(self.out / "checkpoints"))

    @property
    def path(self) -> str:
        return self._staging.path

    def collect(self) -> list[str]:
        """Move the finished checkpoints in, then drop the oldest beyond `keep`; returns the
        checkpoints moved in."""
        from rmjudge.files import remove_tree, replace_dir

        moved = []
        for name in sorted(os.listdir(self.path)):
            if _CHECKPOINT.fullmatch(name):
                replace_dir(os.path.join(self.path, name), str(self.out / name))
                moved.append(str(self.out / name))
        if self.keep:
            held = sorted((p for p in self.out.iterdir() if _CHECKPOINT.fullmatch(p.name)),
                          key=lambda p: int(p.name.split("-")[1]))
            for old in held[:-self.keep]:
                remove_tree(str(old))
        return moved

    def callback(self):
        from transformers import TrainerCallback

        staged = self

        class MoveCheckpoints(TrainerCallback):
            def on_save(self, args, state, control, **kw):
                staged.collect()

        return MoveCheckpoints()

    def write_state(self, trainer) -> None:
        """The trainer's state into `out` (trainer_state.json, as `trainer.save_state()` writes
        it, but written whole)."""
        from rmjudge.files import write_produced

        write_produced(str(self.out / "trainer_state.json"), trainer.state.save_to_json)

    def close(self) -> None:
        self._staging.close()


def write_adapter_info(adapter_dir: str | os.PathLike, prompt_format: int | None) -> None:
    """Record the prompt format of an adapter's training data beside the PEFT adapter
    (`ADAPTER_INFO_FILE`, read back by rmjudge.models.adapter_format.read_adapter_info)."""
    if prompt_format is None:
        return
    from rmjudge.files import write_json

    write_json(os.path.join(adapter_dir, ADAPTER_INFO_FILE), {"prompt_format": int(prompt_format)})
