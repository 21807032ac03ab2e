"""The options of a run, shared by the commands that judge (`score`, `eval`, `rank`, `bench`,
`ray-score`): the `RunOptions` fields given as options (`RUN_FIELDS`, `run_options`) and
`parse_run_options`, which turns a command's parsed options into one `RunOptions`. It is
bound to click (decorators, click's keyword dict), so it stays in cli/, a module of no command
(tests/test_architecture.py: no command module imports another)."""

from __future__ import annotations

from rmjudge.cli.mapping_options import dataset_options, label_options, map_option
from rmjudge.cli.options import (combine_options, engine_settings, judge_settings,
                                 settings_options, settings_values)
from rmjudge.cli.server_options import server_settings
from rmjudge.runs.setup import RunOptions

RUN_FIELDS = ("limit", "shard", "commit_every", "overwrite", "rejudge_changed")

run_options = combine_options([
    map_option,
    settings_options(RunOptions, only=RUN_FIELDS),
    label_options,
    dataset_options,
])


def parse_run_options(kw: dict):
    """The `RunOptions` (rmjudge.runs.setup) of the options of `judge_options`, `engine_options`,
    `server_options` and those of `map_option`, `label_options` and the `RunOptions` fields
    the command has, popped from kw; bad values raise SettingsError. `score`, `eval`, `rank`,
    `bench` and `ray-score` share it."""
    from rmjudge.io.mapping import parse_map
    from rmjudge.runs.setup import make_run_options

    js = judge_settings(kw)
    es = engine_settings(kw)
    label_values, label_choice = kw.pop("label_values", None), kw.pop("label_choice", None)
    mapping = parse_map(kw.pop("mapping", None))
    return make_run_options(js, es, mapping, label_values, label_choice,
                            server=server_settings(kw), **settings_values(RunOptions, kw))
