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


def test_an_output_under_a_file_names_the_file_in_the_way(tmp_path):
    """Before: "cannot create the directory .../pairs.jsonl: File exists", no fix given."""
    import pytest

    from rmjudge.files import prepare_dir
    from rmjudge.files.errors import StoreError

    (tmp_path / "pairs.jsonl").write_text("{}\n")
    with pytest.raises(StoreError) as info:
        prepare_dir(str(tmp_path / "pairs.jsonl" / "deeper" / "out.duckdb"))
    assert str(info.value) == (f"cannot create the directory {tmp_path / 'pairs.jsonl' / 'deeper'}"
                               f": {tmp_path / 'pairs.jsonl'} is a file, not a folder; choose "
                               "another -o")
    assert (tmp_path / "pairs.jsonl").read_text() == "{}\n"


def test_commit_every_below_1_is_refused_as_the_python_api_refuses_it(tmp_path):
    """Before, `--commit-every 0` and `-1` were accepted (rmjudge.score refused them)."""
    for command in ("score", "rank", "eval"):
        r = CliRunner().invoke(main, [command, str(tmp_path / "in.jsonl"), "--commit-every", "0"])
        assert r.exit_code != 0, r.output
        assert "Error: Invalid value for '--commit-every': 0 is not in the range x>=1." in r.output


def test_bench_check_with_score_only_is_one_error(tmp_path):
    """Before, --check won silently and --score-only was ignored."""
    r = run("bench", "--check", "--score-only", "-o", tmp_path)
    assert r.exit_code != 0
    assert r.output.startswith("Error: --check and --score-only cannot be combined"), r.output
    assert len(r.output.strip().splitlines()) == 1


def test_a_huge_resamples_is_one_error_not_a_memory_error_or_a_hang(tmp_path):
    """Before, `eval --resamples 99999999999999999` died in numpy (711 PiB) and `compare` ran
    on for minutes."""
    r = run("eval", tmp_path / "x.duckdb", "--resamples", "99999999999999999")
    assert r.exit_code != 0 and r.output == "Error: --resamples must be at most 1,000,000\n"
    r = run("compare", tmp_path / "a.duckdb", tmp_path / "b.duckdb", "--resamples",
            "99999999999999999")
    assert r.exit_code != 0 and r.output == "Error: --resamples must be at most 1,000,000\n"


def test_engine_settings_out_of_range_are_one_error_line_before_a_model_loads(tmp_path):
    """Before, `--ctx-size -1`, `--n-gpu-layers -5` and `--lora-scale nan` were accepted and
    reached llama.cpp (`--ctx-size 0` is the model's training context, as in llama.cpp)."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n')
    cases = {("--ctx-size", "-1"): "Error: --ctx-size must be 0 (the model's training context) "
                                   "or more",
             ("--n-gpu-layers", "-5"): "Error: --n-gpu-layers must be 0 or more",
             ("--lora-scale", "nan"): "Error: --lora-scale must be a finite number",
             ("--lora-scale", "inf"): "Error: --lora-scale must be a finite number"}
    for command in ("score", "rank"):
        for (opt, value), want in cases.items():
            r = CliRunner().invoke(main, [command, str(src), "-o", str(tmp_path / "o.duckdb"),
                                          opt, value])
            assert r.exit_code != 0, (command, opt, r.output)
            assert r.output.startswith(want) and r.output.count("\n") == 1, (command, opt,
                                                                             r.output)
    assert not (tmp_path / "o.duckdb").exists()


def test_server_options_without_a_server_name_only_those_given(tmp_path):
    """Before, `--server-model m` alone was told that four options need --server URL."""
    from click.testing import CliRunner

    from rmjudge.cli import main

    src = tmp_path / "in.jsonl"
    src.write_text('{"prompt": "q", "chosen": "a", "rejected": "b"}\n')
    r = CliRunner().invoke(main, ["score", str(src), "--server-model", "m"])
    assert r.exit_code != 0 and r.output == "Error: --server-model needs --server URL\n"
    r = CliRunner().invoke(main, ["score", str(src), "--server-model", "m", "--chat-template",
                                  "x", "--server-share-prompt"])
    assert r.output == ("Error: --server-model, --server-share-prompt and --chat-template need "
                        "--server URL\n"), r.output
    assert [p.name for p in tmp_path.iterdir()] == ["in.jsonl"]
