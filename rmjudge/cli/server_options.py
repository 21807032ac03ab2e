"""`rmjudge score --server URL`: options for judging through an OpenAI-compatible server.

Kept apart from the in-process engine's options (cli/options.py). With `--server`, `--model`
(a GGUF path or Hub spec) is only where the chat template and tokenizer come from, when the
server does not expose its template; the API key is read from $RMJUDGE_API_KEY, never from an
option, so it stays out of shell history and of the run tables.
"""

from __future__ import annotations

from rmjudge.cli.options import settings_options, settings_values
from rmjudge.servers.settings import ServerSettings


server_options = settings_options(ServerSettings, only=ServerSettings.OPTIONS)


def server_settings(kw: dict):
    """A ServerSettings from the options (None without --server); pops them from `kw`."""
    values = settings_values(ServerSettings, kw, only=ServerSettings.OPTIONS)
    if values["url"] is None:
        given = [name for name, on in (
            ("--server-model", values["model"]), ("--server-api", values["api"] != "auto"),
            ("--server-share-prompt", values["share_prompt"]),
            ("--chat-template", values["chat_template"])) if on]
        if given:
            from rmjudge.core.settings import SettingsError

            names = given[0] if len(given) == 1 else f"{', '.join(given[:-1])} and {given[-1]}"
            raise SettingsError(f"{names} {'needs' if len(given) == 1 else 'need'} --server URL")
        return None
    if values["chat_template"] is not None:
        from rmjudge.engine.served_template import check_template_file

        check_template_file(values["chat_template"])
    return ServerSettings(**values)

