"""Click options that say how to read the input: `--map` (columns), `--label-values` and
`--label` (gold labels), `--config` and `--split` (which part of a Hugging Face dataset).

`map_option` adds `--map` (parsed by rmjudge.io.mapping.parse_map); `label_options` adds the
label options to a command (both generated from `rmjudge.io.mapping.ReadingChoice`), which
`rmjudge.runs.setup.make_run_options` parses (a malformed value raises a UserError) into the
run's Mapper. `dataset_options` adds `--config` / `--split`
(generated from `DatasetChoice`'s fields) to every command that reads an input dataset,
and `input_source(source, kw)` applies them.
"""

from __future__ import annotations

from rmjudge.cli.options import settings_options
from rmjudge.io.mapping import ReadingChoice

map_option = settings_options(ReadingChoice, only=("mapping",))
label_options = settings_options(ReadingChoice, only=("label_values", "label_choice"))


def _dataset_options():
    from rmjudge.io.huggingface import DatasetChoice

    return settings_options(DatasetChoice)


dataset_options = _dataset_options()


def input_source(source: str, kw: dict) -> str:
    """INPUT with `--config` / `--split` applied (popped from kw; see
    rmjudge.io.huggingface.with_config_split)."""
    from rmjudge.cli.options import settings_from
    from rmjudge.io.huggingface import DatasetChoice

    return settings_from(DatasetChoice, kw).apply(source)
