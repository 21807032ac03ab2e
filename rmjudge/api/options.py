"""The Python API's keyword arguments as a run's `RunOptions` (through `rmjudge.runs.setup`'s one
set-up, as the CLI's options are): the same settings, defaults and checks as `rmjudge score`.

A judging or engine setting is a keyword named as its settings field (`samples=4`,
`max_tokens=256`, `reflect=False`, `n_ctx=4096`, `kind="naive"`: the field behind each CLI
option, `settings_keywords()` lists them); a value of the wrong type, or a keyword that is not a
setting, is a `SettingsError` naming it. Messages about values name the CLI option
(`--samples must be at least 1`): the keyword is the option's name with `_` for `-`.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import MISSING, fields
from typing import Any

from rmjudge.core.settings import EngineSettings, JudgeSettings, SettingsError

# The keys of a `server=` dict: the `--server-*` options (and --chat-template) without the prefix.
SERVER_KEYS = ("url", "model", "concurrency", "retries", "timeout", "api", "share_prompt",
               "chat_template")


def settings_keywords() -> dict[str, tuple[type, Any]]:
    """{keyword: (settings class, default)} for every judging and engine setting (not
    `EngineSettings.resolved`, which a run sets)."""
    out: dict[str, tuple[type, Any]] = {}
    for cls in (JudgeSettings, EngineSettings):
        for f in fields(cls):
            if f.name != "resolved":
                out[f.name] = (cls, None if f.default is MISSING else f.default)
    return out


def _kind(cls: type, name: str) -> type | None:
    """int, float, bool or str: what a setting's value must be (None: any)."""
    f = next(f for f in fields(cls) if f.name == name)
    text = str(f.type)
    for t, names in ((bool, ("bool",)), (int, ("int",)), (float, ("float",))):
        if any(text == n or text.startswith(n + " ") for n in names):
            return t
    return str


def _checked(name: str, value: Any, cls: type) -> Any:
    if value is None:
        return None
    want = _kind(cls, name)
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    ok = (isinstance(value, bool) if want is bool
          else isinstance(value, int) and not isinstance(value, bool) if want is int
          else isinstance(value, (int, float)) and not isinstance(value, bool) if want is float
          else isinstance(value, str))
    if not ok:
        raise SettingsError(f"{name} must be {want.__name__}, got {value!r}")
    return float(value) if want is float else value


def split_settings(settings: dict[str, Any]) -> tuple[JudgeSettings, dict[str, Any]]:
    """The JudgeSettings of the judging keywords, and the engine keywords checked (for
    `EngineSettings`); an unknown keyword raises SettingsError naming the closest setting."""
    known = settings_keywords()
    judge: dict[str, Any] = {}
    engine: dict[str, Any] = {}
    for name, value in settings.items():
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise SettingsError(f"{name!r} is not a setting of rmjudge.score{hint}; the settings "
                                "are the fields of JudgeSettings and EngineSettings (see "
                                "docs/python.md)")
        cls = known[name][0]
        (judge if cls is JudgeSettings else engine)[name] = _checked(name, value, cls)
    return JudgeSettings(**judge), engine


def mapping_of(spec: str | dict | None) -> dict[str, str]:
    """`map=`: a dict {"prompt": "question", ...} or the `--map` text "prompt=question,..."."""
    from rmjudge.io.mapping import parse_map

    if spec is None:
        return {}
    if isinstance(spec, dict):
        bad = [f"{k}={v!r}" for k, v in spec.items() if not isinstance(v, str)
               or not isinstance(k, str) or "," in v or "=" in v]
        if bad:
            raise SettingsError(f"map= takes column names as text: {', '.join(bad)}")
        spec = ",".join(f"{k}={v}" for k, v in spec.items())
    if not isinstance(spec, str):
        raise SettingsError(f"map= must be a dict or text like 'prompt=question,a=x,b=y', "
                            f"got {spec!r}")
    return parse_map(spec)


def server_of(server: str | dict | None):
    """`server=`: the URL of an OpenAI-compatible server, or a dict with `url` and the
    `--server-*` options (SERVER_KEYS). None without one."""
    if server is None:
        return None
    if isinstance(server, str):
        server = {"url": server}
    if not isinstance(server, dict) or "url" not in server:
        raise SettingsError("server= takes a URL, or a dict with 'url' and any of "
                            f"{', '.join(SERVER_KEYS[1:])}")
    unknown = sorted(set(server) - set(SERVER_KEYS))
    if unknown:
        raise SettingsError(f"server= has no key {', '.join(map(repr, unknown))}; its keys are "
                            f"{', '.join(SERVER_KEYS)}")
    from rmjudge.engine.server import ServerSettings

    if server.get("chat_template") is not None:
        from rmjudge.engine.served_template import check_template_file

        check_template_file(os.fspath(server["chat_template"]))
    return ServerSettings(**{k: v for k, v in server.items() if v is not None})


def run_options(settings: dict[str, Any], *, model=None, server=None, map=None,
                label_values: str | None = None, label: str | None = None,
                limit: int | None = None, shard: str | None = None, commit_every: int = 8,
                overwrite: bool = False, rejudge_changed: bool = False):
    """The `RunOptions` of `rmjudge.score`'s keywords (see the module docstring)."""
    from rmjudge.runs.setup import make_run_options, parse_shard

    js, engine = split_settings(settings)
    if model is not None:
        engine["model"] = _checked("model", model, EngineSettings)
    es = EngineSettings(**engine)
    for name, value in (("limit", limit), ("commit_every", commit_every)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise SettingsError(f"{name} must be a whole number of at least 1, got {value!r}")
    for name, value in (("label_values", label_values), ("label", label), ("shard", shard)):
        if value is not None and not isinstance(value, str):
            raise SettingsError(f"{name} must be text, got {value!r}")
    return make_run_options(js, es, mapping_of(map), label_values, label,
                            server=server_of(server), limit=limit, shard=parse_shard(shard),
                            commit_every=commit_every, overwrite=bool(overwrite),
                            rejudge_changed=bool(rejudge_changed))
