"""`rmjudge score --server URL`: options for judging through an OpenAI-compatible server.

Kept apart from the in-process engine's options (cli/options.py). With `--server`, `--model`
(a GGUF path or Hub spec) is only where the chat template and tokenizer come from, when the
server does not expose its template; the API key is read from $RMJUDGE_API_KEY, never from an
option, so it stays out of shell history and of the run tables.
"""

from __future__ import annotations

from rmjudge.cli.options import settings_options, settings_values
from rmjudge.engine.server_settings import ServerSettings


server_options = settings_options(ServerSettings, only=ServerSettings.OPTIONS)


def server_settings(kw: dict):
    """A ServerSettings from the options (None without --server); pops them from `kw`."""
    values = settings_values(ServerSettings, kw, only=ServerSettings.OPTIONS)
    if values["url"] is None:
        if values["model"] or values["chat_template"] or values["api"] != "auto" \
                or values["share_prompt"]:
            from rmjudge.core.settings import SettingsError

            raise SettingsError("--server-model, --server-api, --server-share-prompt and "
                                "--chat-template need --server URL")
        return None
    if values["chat_template"] is not None:
        check_template_file(values["chat_template"])
    return ServerSettings(**values)


def check_template_file(path: str) -> None:
    """Refuse a --chat-template file that cannot render a judge prompt (a syntax error, an
    operation the sandbox blocks), naming the file, before any server is contacted."""
    from rmjudge.engine.chat import ChatTemplate
    from rmjudge.engine.served_template import read_chat_template
    from rmjudge.core.settings import SettingsError

    text = read_chat_template(path, SettingsError)
    ChatTemplate(text, origin=f"--chat-template {path}",
                 fix="fix the file, or leave --chat-template out to use the server's template")
