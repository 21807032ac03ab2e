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


def field_meta(cls, f) -> dict:
    """A field's option metadata; a subclass that only changes a default (no metadata of its
    own) keeps the option its base class declares."""
    if f.metadata:
        return dict(f.metadata)
    for base in cls.__mro__[1:]:
        inherited = getattr(base, "__dataclass_fields__", {}).get(f.name)
        if inherited is not None and inherited.metadata:
            return dict(inherited.metadata)
    return {}


def _dest(f, meta: dict) -> str:
    """The click parameter's name: `dest`, else "no_<field>" for a switch that turns a
    default-True field off, else the field's name."""
    if "dest" in meta:
        return meta["dest"]
    return f"no_{f.name}" if "flag" in meta and f.default is True else f.name


def _cli_fields(cls, only):
    """(field, metadata) of the fields with an option, in `only`'s order when given."""
    from dataclasses import fields

    by_name = {f.name: f for f in fields(cls)}
    chosen = [by_name[n] for n in only] if only is not None else list(by_name.values())
    out = []
    for f in chosen:
        meta = field_meta(cls, f)
        if meta.get("cli", True) is not False:
            out.append((f, meta))
    return out


def option_dests(cls, only=None) -> set[str]:
    """The click parameter names of a settings dataclass's options (see `settings_options`)."""
    return {_dest(f, meta) for f, meta in _cli_fields(cls, only)}


def given_options(names: set[str]) -> list[str]:
    """Of the current command's parameters named in `names`, those given on its command line
    (not defaults, not environment variables), each by its long option ("--samples" for
    -n), or the "--no-" form of a switch given off."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    out = []
    for p in ctx.command.params:
        if p.name in names and ctx.get_parameter_source(p.name) is ParameterSource.COMMANDLINE:
            off = getattr(p, "secondary_opts", None) and ctx.params.get(p.name) is False
            out.append(p.secondary_opts[0] if off else max(p.opts, key=len))
    return out


def _value_type(f, meta: dict, default):
    """The click type of a valued option: `choices`, `range`, `type`, else the default's type,
    else the annotation's (int or float; text otherwise); None leaves it to click."""
    if "choices" in meta:
        return click.Choice(list(meta["choices"]),
                            case_sensitive=meta.get("case_sensitive", True))
    if "range" in meta:
        lo, hi = meta["range"]
        return click.IntRange(min=lo, max=hi)
    if "type" in meta:
        return meta["type"]
    if default is not None and not isinstance(default, tuple):
        return type(default)
    return _annotated_type(f)


def _option(f, meta: dict, helptext) -> Callable:
    """The click option or argument of one field (see `settings_options`)."""
    from dataclasses import MISSING

    dest = _dest(f, meta)
    if meta.get("argument"):
        kw = {k: meta[k] for k in ("metavar", "nargs", "required") if k in meta}
        return click.argument(dest, **kw)
    if "switch" in meta:  # --x/--no-x; unset (None) leaves the choice to the run spec
        return click.option(meta["switch"], dest, default=None, help=helptext)
    if "flag" in meta:  # a switch: turns a default-True field off, a default-False one on
        names = [meta["flag"]] + ([meta["short"]] if "short" in meta else [])
        return click.option(*names, dest, is_flag=True, help=helptext)
    option = meta.get("option", f"--{f.name.replace('_', '-')}")
    names = list(option) if isinstance(option, tuple) else \
        [option] + ([meta["short"]] if "short" in meta else [])
    name = next(n for n in names if n.startswith("--"))
    has_default = f.default is not MISSING or f.default_factory is not MISSING
    if not has_default and "cli_default" not in meta:
        kw = {k: meta[k] for k in ("metavar", "multiple") if k in meta}
        if "choices" in meta or "range" in meta:
            kw["type"] = _value_type(f, meta, None)
        return click.option(*names, dest, required=True, help=helptext, **kw)
    if isinstance(f.default, bool) and not {"cli_default", "choices"} & set(meta):
        return click.option(f"{name}/--no-{name[2:]}", dest, default=f.default,
                            show_default=True, help=helptext)
    default = meta.get("cli_default", f.default)
    if isinstance(meta.get("choices"), dict):  # the option's value that gives the default
        default = next(k for k, v in meta["choices"].items() if v == default)
    shown = default is not None and not meta.get("multiple")
    kw: dict = {"help": helptext, "show_default": meta.get("show_default", shown)}
    if meta.get("multiple"):
        kw["multiple"] = True
        if default is None:  # the field's "none given" (the option's value is then ())
            kw["default"] = None
    else:
        kw["default"] = default
    if "flag_value" in meta:  # the value of the option given alone (`--resume` = "latest")
        kw.update(is_flag=False, flag_value=meta["flag_value"])
    value_type = _value_type(f, meta, default)
    if value_type is not None:
        kw["type"] = value_type
    for key in ("metavar", "envvar", "hidden"):
        if key in meta:
            kw[key] = meta[key]
    return click.option(*names, dest, **kw)


def settings_options(cls, only: tuple[str, ...] | None = None,
                     helps: dict | Callable[[str], str] | None = None) -> Callable:
    """One click option (or argument) per field of a settings dataclass, from the field's
    metadata (see `rmjudge.core.settings.setting` for the keys): the dataclass is the one
    place a setting, its default and its help are declared. A field without a default is a
    required option; a bool field with a default is "--x/--no-x" unless it is a `flag`; an
    option's type is `choices`, `range` or `type`, else its default's, else its annotation's
    (int or float; text otherwise). `only`: just these fields' options, in this order (e.g.
    `--model` for a command that needs no other engine setting). `helps`: a command's own
    wording of some fields' help (field -> text), or a function of every help text. Two more
    keys: `flag_value` (the value of an option given alone: `--resume` is "latest") and
    `case_sensitive` (False: `choices` match in any case, as `rmjudge-export quantize --type`)."""
    opts = []
    for f, meta in _cli_fields(cls, only):
        helptext = meta.get("help")
        if callable(helps) and helptext is not None:
            helptext = helps(helptext)
        elif isinstance(helps, dict) and f.name in helps:
            helptext = helps[f.name]
        opts.append(_option(f, meta, helptext))
    return combine_options(opts)


def settings_values(cls, kw: dict, only: tuple[str, ...] | None = None) -> dict:
    """field -> value of the options `settings_options(cls, only)` added, popped from kw and
    turned into the field's value (a `flag` inverted where it turns a field off, a `choices`
    dict looked up, `split` into a tuple, `parse` applied). A field whose option the command
    lacks is left out, so commands with part of a dataclass's options share one reader."""
    values = {}
    for f, meta in _cli_fields(cls, only):
        dest = _dest(f, meta)
        if dest not in kw:
            continue
        value = kw.pop(dest)
        if "flag" in meta and f.default is True:
            value = not value
        if isinstance(meta.get("choices"), dict):
            value = meta["choices"][value]
        if "split" in meta:
            value = tuple(c.strip() for c in (value or "").split(meta["split"]) if c.strip())
        if "parse" in meta:
            value = meta["parse"](value)
        values[f.name] = value
    return values


def settings_from(cls, kw: dict, only: tuple[str, ...] | None = None):
    """The settings dataclass from the options `settings_options(cls, only)` added (popped
    from kw); fields without an option keep their defaults."""
    return cls(**settings_values(cls, kw, only))


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
