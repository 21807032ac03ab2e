"""The Jinja2 sandbox that untrusted templates render in: the chat templates of judges
(rmjudge.engine.chat) and `--prompt-template` files (prompts/template.py), and the one-line
error for a template that fails to compile or render (`template_failure`). Renders are
bounded (prompts/render_limit.py)."""

from __future__ import annotations

from rmjudge.core.errors import UserError


def sandbox_environment():
    """The Jinja2 environment untrusted templates render in (chat templates, `--prompt-template`):
    immutable and sandboxed, with the whitespace handling of Hugging Face chat templates, and
    bounded (rmjudge.prompts.render_limit: render with `render_bounded`)."""
    from rmjudge.prompts.render_limit import bounded_environment

    return bounded_environment(trim_blocks=True, lstrip_blocks=True)


class TemplateError(UserError):
    """A chat template cannot be used: a syntax error, an operation the sandbox blocks, or a
    failure while rendering. The message names the template's source (`origin`) and the fix."""


def template_failure(exc: Exception, origin: str, fix: str, error: type = TemplateError):
    """The one-line `error` for a template (`origin`) that failed to compile or render: a
    syntax error, an operation the sandbox blocks, or any other failure of its code; chat
    templates and `--prompt-template` files say it alike."""
    import jinja2
    from jinja2.exceptions import SecurityError

    from rmjudge.prompts.render_limit import RenderTooLarge

    if isinstance(exc, jinja2.TemplateSyntaxError):
        what = " ".join(str(exc.message).split()).rstrip(".")
        return error(f"{origin} has a syntax error (line {exc.lineno}: {what}); {fix}")
    what = (str(exc).splitlines() or [type(exc).__name__])[0].rstrip(".")
    if isinstance(exc, RenderTooLarge):
        return error(f"{origin} renders a prompt too large ({exc}); {fix}")
    if isinstance(exc, SecurityError):
        return error(f"{origin} does something rmjudge's template sandbox blocks ({what}); {fix}")
    return error(f"{origin} failed to render a prompt ({type(exc).__name__}: {what}); {fix}")
