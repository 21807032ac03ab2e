"""Reusable Click option bundles (model/engine options, judging options)."""

from __future__ import annotations

from typing import Callable

import click


def combine_options(options: list[Callable]) -> Callable:
    def deco(f: Callable) -> Callable:
        for opt in reversed(options):
            f = opt(f)
        return f

    return deco


def settings_options(cls) -> Callable:
    """One click option per field of a settings dataclass, from the field's metadata (its
    help, and `flag`, `switch` ("--x/--no-x" for a field whose default None means "resolved
    later"), `short`, `metavar`, `choices`, `cli`): the dataclass is the one place a
    setting, its default and its help are declared."""
    from dataclasses import MISSING, fields

    opts = []
    for f in fields(cls):
        meta = f.metadata
        if meta.get("cli", True) is False:
            continue
        if "switch" in meta:  # --x/--no-x; unset (None) leaves the choice to the run spec
            opts.append(click.option(meta["switch"], f.name, default=None, help=meta["help"]))
            continue
        if "flag" in meta:  # a switch that turns a default-True field off
            opts.append(click.option(meta["flag"], f"no_{f.name}", is_flag=True,
                                     help=meta["help"]))
            continue
        names = [meta.get("option", f"--{f.name.replace('_', '-')}")] + (
            [meta["short"]] if "short" in meta else [])
        kw: dict = {"default": None if f.default is MISSING else f.default, "help": meta["help"],
                    "show_default": f.default is not None}
        if "choices" in meta:
            kw["type"] = click.Choice(list(meta["choices"]))
        elif "type" in meta:
            kw["type"] = meta["type"]
        elif f.default is not None and f.default is not MISSING:
            kw["type"] = type(f.default)
        for key in ("metavar", "envvar"):
            if key in meta:
                kw[key] = meta[key]
        opts.append(click.option(*names, f.name, **kw))
    return combine_options(opts)


def settings_from(cls, kw: dict):
    """The settings dataclass from the options `settings_options(cls)` added (popped from kw)."""
    from dataclasses import fields

    values = {}
    for f in fields(cls):
        if f.metadata.get("cli", True) is False:
            continue
        if "flag" in f.metadata:
            values[f.name] = not kw.pop(f"no_{f.name}")
        else:
            values[f.name] = kw.pop(f.name)
    return cls(**values)


def _judge_options():
    from rmjudge.settings import JudgeSettings

    return settings_options(JudgeSettings)


judge_options = _judge_options()


def judge_settings(kw: dict):
    from rmjudge.settings import JudgeSettings

    return settings_from(JudgeSettings, kw)


def _engine_options():
    from rmjudge.settings import EngineSettings

    return settings_options(EngineSettings)


engine_options = _engine_options()


def engine_settings(kw: dict):
    from rmjudge.settings import EngineSettings

    return settings_from(EngineSettings, kw)
