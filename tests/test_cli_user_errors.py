"""Bad option values and bad files given to each command: one `Error:` line naming the option
or file and the fix, a non-zero exit, never a traceback."""

from __future__ import annotations

from click.testing import CliRunner

from rmjudge.cli import main


def run(*args, **kw):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False, **kw)


def test_eval_negative_resamples_is_one_error_line(tmp_path):
    r = run("eval", tmp_path / "x.duckdb", "--resamples", "-5")
    assert r.exit_code != 0
    assert r.output == "Error: --resamples must be 0 (no intervals) or more\n"
