"""How a training command runs, apart from what it trains: the options `rmjudge-train sft` and
`grpo` share (`--resume`, `--overwrite`) and the `-q` of every stage. Their options are
generated from these fields (rmjudge.cli.options.settings_options); the fields are not part of
the recorded settings (settings.json), so a resumed run's folder stays its own."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FolderControls:
    """Resuming from and writing into the -o folder of `sft` and `grpo` (training.outputs)."""

    resume: str | None = field(default=None, metadata={
        "help": "Continue from a checkpoint: --resume (latest in -o) or --resume DIR.",
        "flag_value": "latest"})
    overwrite: bool = field(default=False, metadata={
        "help": "Write into an -o folder that holds files another command wrote (files of the "
                "same name are replaced).", "flag": "--overwrite"})


@dataclass(frozen=True)
class Quiet:
    quiet: bool = field(default=False, metadata={"help": "No progress on stderr.", "short": "-q",
                                                  "flag": "--quiet"})
