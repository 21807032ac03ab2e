"""CLI behaviour and exact error texts (CliRunner), and the light-runtime guarantee."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from rmjudge.cli import main

DATA = Path(__file__).parent / "data"


def run(*args, **kw):
    return CliRunner().invoke(main, list(args), catch_exceptions=False, **kw)


def test_help_lists_commands():
    r = run("--help")
    assert r.exit_code == 0 and "score" in r.output and "models" in r.output


def test_help_needs_no_torch():
    code = ("import sys; from click.testing import CliRunner; from rmjudge.cli import main; "
            "r = CliRunner().invoke(main, ['score', '--help']); assert r.exit_code == 0, r.output; "
            "import rmjudge; heavy = [m for m in ('torch', 'transformers', 'peft', 'trl', 'llama_cpp') "
            "if m in sys.modules]; assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_input_is_one_line():
    r = run("score", "nope.jsonl")
    assert r.exit_code == 1
    assert r.output == "Error: input file not found: nope.jsonl; check the path\n"


def test_missing_and_corrupt_models(tmp_path):
    r = run("score", str(DATA / "pandalm_5.jsonl"), "--model", "/nope/judge.gguf")
    assert (r.exit_code, r.output) == (1, "Error: model file not found: /nope/judge.gguf; "
                                          "check the path (a .gguf file)\n")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"hello world")
    r = run("models", "--model", str(bad))
    assert r.exit_code == 1
    assert r.output == (f"Error: model file is not a GGUF file (bad magic b'hell'): {bad}; give a "
                        ".gguf file (rmjudge-export makes one from a Hugging Face model)\n")
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 20)
    r = run("models", "--model", str(trunc))
    assert r.exit_code == 1
    assert r.output == (f"Error: llama.cpp could not load {trunc}: the file is corrupt, "
                        "truncated or of an unsupported architecture\n")


def test_env_var_selects_the_model(tmp_path):
    r = run("models", env={"RMJUDGE_MODEL": str(tmp_path / "x.gguf")})
    assert r.output == (f"Error: model file not found: {tmp_path / 'x.gguf'}; check the path "
                        "(a .gguf file)\n")


def test_bad_options_are_named():
    r = run("score", str(DATA / "pandalm_5.jsonl"), "--map", "foo=bar")
    assert r.output == "Error: --map key 'foo' is not one of prompt, a, b, chosen, rejected, label, id\n"
    r = run("score", str(DATA / "pandalm_5.jsonl"), "--samples", "0")
    assert r.output == "Error: --samples must be at least 1\n"
    r = run("score", str(DATA / "pandalm_5.jsonl"), "--shard", "3/3")
    assert r.output == "Error: --shard must look like I/N with 0 <= I < N, got '3/3'\n"
    r = run("score", str(DATA / "pandalm_5.jsonl"), "--adaptive", "8")
    assert r.output == "Error: --adaptive K needs 1 <= K < --samples\n"


def test_progress_is_a_plain_line_per_interval_in_a_log(capsys):
    from rmjudge.cli.common import ProgressLine
    from rmjudge.runs.pipeline import Progress

    p = Progress(done=3, errors=1, generations=10, parse_failures=2, generated_tokens=500)
    log = ProgressLine(True, total=10, tty=False, log_interval=0.0)
    log(p)
    log(p)
    log.close()
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err
    lines = err.splitlines()
    assert len(lines) == 2 and all("4/10 rows" in ln and "parse fail 20%" in ln for ln in lines)

    quiet_log = ProgressLine(True, total=10, tty=False, log_interval=3600.0)
    quiet_log(p)  # the first line waits a whole interval: short runs print only their summary
    assert capsys.readouterr().err == ""

    term = ProgressLine(True, total=10, tty=True)
    term(p)
    term.close()
    err = capsys.readouterr().err
    assert err.startswith("\r4/10 rows") and err.endswith("\n")

    off = ProgressLine(False, total=10, tty=False, log_interval=0.0)
    off(p)
    assert capsys.readouterr().err == ""
