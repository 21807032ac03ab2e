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


def _annotated_type(f) -> type | None:
    """int or float from a field's annotation ("int | None"), else None (text)."""
    name = str(f.type).replace(" | None", "").replace("Optional[", "").rstrip("]").strip()
    return {"int": int, "float": float}.get(name)


def settings_options(cls, only: tuple[str, ...] | None = None) -> Callable:
    """One click option per field of a settings dataclass (judge, engine, Ray, training), from
    the field's metadata (its help, and `flag`, `switch` ("--x/--no-x" for a field whose
    default None means "resolved later"), `short`, `metavar`, `choices`, `type`, `option`,
    `envvar`, `argument` (a positional argument, shown as `metavar` when given), `cli`,
    `is_flag` (a plain "--x" switch of a default-False field), `flag_value` (the value of an
    option given without one, e.g. `--resume` alone), `multiple` (repeatable; a tuple),
    `case_sensitive` (of `choices`), `show_default`): the dataclass is the one place a
    setting, its default and its help are declared. A field without a default is a required
    option; a bool field with a default is "--x/--no-x"; an option's type is `type`, else its
    default's, else its annotation's (int or float; text otherwise). `only`: just these fields'
    options (e.g. `--model` for a command that needs no other engine setting)."""
    from dataclasses import MISSING, fields

    opts = []
    for f in fields(cls):
        meta = f.metadata
        if meta.get("cli", True) is False or (only is not None and f.name not in only):
            continue
        if meta.get("argument"):
            opts.append(click.argument(f.name, metavar=meta.get("metavar")))
            continue
        if "switch" in meta:  # --x/--no-x; unset (None) leaves the choice to the run spec
            opts.append(click.option(meta["switch"], f.name, default=None, help=meta["help"]))
            continue
        if "flag" in meta:  # a switch that turns a default-True field off
            opts.append(click.option(meta["flag"], f"no_{f.name}", is_flag=True,
                                     help=meta["help"]))
            continue
        name = meta.get("option", f"--{f.name.replace('_', '-')}")
        names = [name] + ([meta["short"]] if "short" in meta else [])
        if f.default is MISSING and f.default_factory is MISSING:
            opts.append(click.option(*names, f.name, required=True, help=meta.get("help", "")))
            continue
        if meta.get("is_flag"):
            opts.append(click.option(*names, f.name, is_flag=True, help=meta.get("help", "")))
            continue
        if isinstance(f.default, bool):
            opts.append(click.option(f"{name}/--no-{name[2:]}", f.name, default=f.default,
                                     show_default=True, help=meta.get("help", "")))
            continue
        kw: dict = {"default": f.default, "help": meta.get("help", ""),
                    "show_default": meta.get("show_default", f.default is not None)}
        if meta.get("multiple"):  # repeatable: click collects a tuple (empty when not given)
            kw = {"multiple": True, "help": meta.get("help", ""), "type": str}
        if "flag_value" in meta:
            kw.update(is_flag=False, flag_value=meta["flag_value"])
        if "choices" in meta:
            kw["type"] = click.Choice(list(meta["choices"]),
                                      case_sensitive=meta.get("case_sensitive", True))
        elif "type" in meta:
            kw["type"] = meta["type"]
        elif "type" in kw:
            pass
        elif f.default is not None:
            kw["type"] = type(f.default)
        elif _annotated_type(f) is not None:
            kw["type"] = _annotated_type(f)
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
    from rmjudge.core.settings import JudgeSettings

    return settings_options(JudgeSettings)


judge_options = _judge_options()


def judge_settings(kw: dict):
    from rmjudge.core.settings import JudgeSettings

    return settings_from(JudgeSettings, kw)


def _engine_options():
    from rmjudge.core.settings import EngineSettings

    return settings_options(EngineSettings)


engine_options = _engine_options()


def engine_settings(kw: dict):
    from rmjudge.core.settings import EngineSettings

    return settings_from(EngineSettings, kw)
