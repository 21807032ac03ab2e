"""Click options that say how to read the input: `--map` (columns), `--label-values` and
`--label` (gold labels), `--config` and `--split` (which part of a Hugging Face dataset).

`map_option` adds `--map` (parsed by rmjudge.io.mapping.parse_map); `label_options` adds the
label options to a command, which `rmjudge.runs.setup.make_run_options` parses (a malformed value
raises a UserError) into the run's Mapper. `dataset_options` adds `--config` / `--split`
(generated from `DatasetChoice`'s fields) to every command that reads an input dataset,
and `input_source(source, kw)` applies them.
"""

from __future__ import annotations

from typing import Callable

import click

LABEL_VALUES_HELP = (
    "Meaning of the label column's values when they are not A/B letters of a recognized "
    "dataset: VALUE=A|B|tie,... with literals, comparisons and ranges, e.g. 0=A,1=B or "
    "\"<0=A,>0=B,0=tie\" or \"-3..-1=A,1..3=B,*=tie\" (A: the first response is better; tie: "
    "unlabelled). See docs/datasets.md.")
LABEL_HELP = ("Which label to read when the input has several: better (default) or safer for "
              "PKU-SafeRLHF; otherwise the label column's name.")


map_option = click.option(
    "--map", "mapping", default=None, metavar="KEY=COL,...",
    help="Name input columns: prompt=,a=,b=,label= or chosen=,rejected=; id=.")


def label_options(f: Callable) -> Callable:
    f = click.option("--label", "label_choice", default=None, metavar="NAME", help=LABEL_HELP)(f)
    f = click.option("--label-values", "label_values", default=None, metavar="VALUE=A|B|tie,...",
                     help=LABEL_VALUES_HELP)(f)
    return f


def _dataset_options():
    from rmjudge.cli.options import settings_options
    from rmjudge.io.huggingface import DatasetChoice

    return settings_options(DatasetChoice)


dataset_options = _dataset_options()


def input_source(source: str, kw: dict) -> str:
    """INPUT with `--config` / `--split` applied (popped from kw; see
    rmjudge.io.huggingface.with_config_split)."""
    from rmjudge.cli.options import settings_from
    from rmjudge.io.huggingface import DatasetChoice

    return settings_from(DatasetChoice, kw).apply(source)
