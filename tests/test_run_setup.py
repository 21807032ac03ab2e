"""One run set-up (rmjudge.runs.setup), one run spec (rmjudge.judging.runspec) and typed errors end to end."""

from __future__ import annotations

import dataclasses
import json
import os

import duckdb
import pytest
from click.testing import CliRunner
from helpers import pref, refl

from rmjudge.engine.fake import FAKE_INFO, ScriptedEngine, stage_of
from rmjudge.io.intake import Intake, RowFailure
from rmjudge.io.mapping import Mapper, parse_map
from rmjudge.io.readers import RawRow
from rmjudge.judging.judge import Judge
from rmjudge.runs.pipeline import Summary
from rmjudge.runs.setup import RunOptions, judge_input, parse_shard
from rmjudge.core.settings import EngineSettings, JudgeSettings, SettingsError
from rmjudge.judging import runspec


def _respond(req, i):
    return refl(1) if stage_of(req) == "reflection" else pref(1, -0.2, "fine")


def _pairs(tmp_path, n: int = 3) -> str:
    src = tmp_path / "pairs.jsonl"
    src.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"question {i}",
                                       "chosen": f"good {i}", "rejected": f"bad {i}"}) + "\n"
                           for i in range(n)))
    return str(src)


def _opts(**kw) -> RunOptions:
    js = JudgeSettings(samples=1, seed=0, forced=False, max_tokens=16)
    return RunOptions(js, EngineSettings(), Mapper({}, seed=0), **kw)


# -- one run set-up ---------------------------------------------------------------------------

def test_library_run_setup_judges_with_a_given_engine_and_returns_it(tmp_path):
    engine = ScriptedEngine(_respond)
    out = str(tmp_path / "out.duckdb")
    lines: list[str] = []
    made: list = []

    class Display:
        def __init__(self, total):
            self.total, self.calls, self.notes, self.closed = total, 0, [], False

        def __call__(self, prog):
            self.calls += 1

        def note(self, line):
            self.notes.append(line)

        def close(self):
            self.closed = True

    def progress(total, eng):
        assert eng is engine
        made.append(Display(total))
        return made[-1]

    summary = judge_input(_pairs(tmp_path), out, _opts(limit=2), engine=engine,
                          status=lines.append, progress=progress)
    assert summary.engine is engine
    assert (summary.judged, summary.rows_read) == (2, 2)
    assert made and made[0].total == 2 and made[0].closed and made[0].calls >= 1
    assert lines == []  # no engine was loaded, so nothing was said about one
    with duckdb.connect(out, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM pairs").fetchone()[0] == 2


def test_a_failed_run_closes_the_engine_it_loaded_and_never_one_it_was_given(tmp_path,
                                                                             monkeypatch):
    """A server engine left open after a failed run kept its requests in flight until exit."""
    import rmjudge.runs.setup
    from rmjudge.core.errors import ModelError

    class Failing(ScriptedEngine):
        closed = 0

        def generate(self, requests):
            raise ModelError("the judge stopped")

        def close(self):
            Failing.closed += 1

    monkeypatch.setattr(rmjudge.runs.setup, "load_judge_engine", lambda *a, **k: Failing(_respond))
    with pytest.raises(ModelError, match="the judge stopped"):
        judge_input(_pairs(tmp_path), str(tmp_path / "a.duckdb"), _opts())
    assert Failing.closed == 1
    with pytest.raises(ModelError, match="the judge stopped"):
        judge_input(_pairs(tmp_path), str(tmp_path / "b.duckdb"), _opts(),
                    engine=Failing(_respond))
    assert Failing.closed == 1  # the caller's engine is the caller's to close
    summary = judge_input(_pairs(tmp_path), str(tmp_path / "c.duckdb"), _opts(),
                          engine=ScriptedEngine(_respond))
    assert summary.judged == 3


def test_the_summary_declares_the_engine_that_judged():
    assert "engine" in {f.name for f in dataclasses.fields(Summary)}


def test_run_setup_checks_the_output_before_any_engine_loads(tmp_path, monkeypatch):
    import rmjudge.engine

    def boom(*a, **k):
        raise AssertionError("the engine must not load")

    monkeypatch.setattr(rmjudge.engine, "load_engine", boom)
    with pytest.raises(SettingsError, match="-o is empty"):
        judge_input(_pairs(tmp_path), " ", _opts())


def test_shard_and_map_errors_are_typed_settings_errors():
    with pytest.raises(SettingsError, match="--shard must look like I/N"):
        parse_shard("3/2")
    with pytest.raises(SettingsError, match="--map key 'x'"):
        parse_map("x=y")


# -- one run spec ------------------------------------------------------------------------------

def test_judge_resolves_the_spec_with_the_context_size():
    js = JudgeSettings(samples=1, max_tokens=16)
    assert Judge(ScriptedEngine(_respond), js, n_ctx=512).spec.context == 512
    assert Judge(ScriptedEngine(_respond), js).spec.context == FAKE_INFO.n_ctx_train


TEMPLATE = """{% if task == "pref" %}Which answer is better? Rubric: {{ criteria }}
Q: {{ context }}
A1: {{ response1 }}
A2: {{ response2 }}
{{ answer_format }}{% else %}Which critique is better? Rubric: {{ criteria }}
Q: {{ context }}
A1: {{ response1 }}
A2: {{ response2 }}
Critique 1: {{ critique1 }}
Critique 2: {{ critique2 }}
{{ answer_format }}{% endif %}"""


def _count_the_run(monkeypatch, tmp_path) -> tuple[dict, str, str]:
    """Counters of what a run does once: reads of each option file, run specs built, output
    checks, the input's format found. Returns them with a criteria file and a template file to
    name."""
    import rmjudge.io.readers
    import rmjudge.io.textfile
    import rmjudge.runs.pipeline

    counts: dict = {"spec": 0, "check_output": 0, "format": 0}
    read, check, spec_class = (rmjudge.io.textfile.read_text_file, rmjudge.runs.pipeline.check_output,
                               runspec.RunSpec)
    detect = rmjudge.io.readers.detect_format

    def detecting(*a, **k):
        counts["format"] += 1
        return detect(*a, **k)

    def reading(path, *a, **k):
        counts[path] = counts.get(path, 0) + 1
        return read(path, *a, **k)

    def checking(*a, **k):
        counts["check_output"] += 1
        return check(*a, **k)

    class CountedSpec(spec_class):
        def __init__(self, *a, **k):
            counts["spec"] += 1
            super().__init__(*a, **k)

    monkeypatch.setattr(rmjudge.io.textfile, "read_text_file", reading)
    monkeypatch.setattr(rmjudge.runs.pipeline, "check_output", checking)
    monkeypatch.setattr(runspec, "RunSpec", CountedSpec)
    monkeypatch.setattr(rmjudge.io.readers, "detect_format", detecting)
    crit, tmpl = tmp_path / "rubric.txt", tmp_path / "prompt.jinja"
    crit.write_text("Prefer the shorter answer.")
    tmpl.write_text(TEMPLATE)
    return counts, str(crit), str(tmpl)


def test_a_cli_run_builds_its_spec_once_and_reads_each_option_file_once(tmp_path, monkeypatch):
    """`rmjudge score --criteria @FILE --prompt-template FILE`: each file is read once, the
    run spec is built once (the pipeline hands it to the Judge), the output checked once."""
    import rmjudge.engine
    import rmjudge.engine.llama  # noqa: F401 - binds resolve_model before it is patched
    import rmjudge.models.resolve
    from rmjudge.cli import main

    counts, crit, tmpl = _count_the_run(monkeypatch, tmp_path)
    engine = ScriptedEngine(_respond)
    monkeypatch.setattr(rmjudge.engine, "load_engine", lambda es, **kw: engine)
    monkeypatch.setattr(rmjudge.models.resolve, "resolve_model", lambda model: "judge.gguf")
    out = tmp_path / "out.duckdb"
    r = CliRunner().invoke(main, ["score", _pairs(tmp_path), "-o", str(out), "--samples", "1",
                                  "--max-tokens", "16", "--criteria", f"@{crit}",
                                  "--prompt-template", tmpl, "-q"])
    assert r.exit_code == 0, r.output
    assert counts == {crit: 1, tmpl: 1, "spec": 1, "check_output": 1, "format": 1}
    assert engine.calls and all("Prefer the shorter answer." in req.messages[0]["content"]
                                for call in engine.calls for req in call)
    with duckdb.connect(str(out), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM pairs").fetchone()[0] == 3


def test_a_library_run_builds_its_spec_once_and_reads_each_option_file_once(
        tmp_path, monkeypatch):
    from rmjudge.runs.pipeline import score

    counts, crit, tmpl = _count_the_run(monkeypatch, tmp_path)
    js = JudgeSettings(samples=1, max_tokens=16, criteria=f"@{crit}", prompt_template=tmpl)
    summary = score(_pairs(tmp_path), ScriptedEngine(_respond), js,
                    output=str(tmp_path / "out.duckdb"))
    assert summary.judged == 3
    assert counts == {crit: 1, tmpl: 1, "spec": 1, "check_output": 1, "format": 1}


@pytest.mark.parametrize("streamed", [False, True])
def test_a_python_api_run_builds_its_spec_once_and_reads_each_option_file_once(
        tmp_path, monkeypatch, streamed):
    """`rmjudge.score` and `rmjudge.score_batches` (which checks the options and the output
    before its first chunk and hands them on) read each option file once, build one spec and
    check the output once."""
    import rmjudge

    counts, crit, tmpl = _count_the_run(monkeypatch, tmp_path)
    kw = dict(engine=ScriptedEngine(_respond), output=str(tmp_path / "out.duckdb"), samples=1,
              max_tokens=16, criteria=f"@{crit}", prompt_template=tmpl)
    if streamed:
        n = sum(len(t) for t in rmjudge.score_batches(_pairs(tmp_path), commit_every=1, **kw))
    else:
        n = len(rmjudge.score(_pairs(tmp_path), **kw))
    assert n == 3
    assert counts == {crit: 1, tmpl: 1, "spec": 1, "check_output": 1, "format": 1}


def test_a_dry_run_reads_each_option_file_once(tmp_path, monkeypatch):
    import rmjudge.engine
    from rmjudge.runs import setup as run

    counts, crit, tmpl = _count_the_run(monkeypatch, tmp_path)
    tokenizer = ScriptedEngine(_respond)
    tokenizer.on_gpu, tokenizer.threads = False, 1
    monkeypatch.setattr(rmjudge.engine, "load_engine", lambda es, **kw: tokenizer)
    js = JudgeSettings(samples=1, max_tokens=16, criteria=f"@{crit}", prompt_template=tmpl)
    report = run.dry_run(_pairs(tmp_path), RunOptions(js, EngineSettings(), Mapper({}, seed=0)))
    assert report.pairs == 3
    assert counts == {crit: 1, tmpl: 1, "spec": 1, "check_output": 0, "format": 1}


def test_a_given_spec_is_used_as_it_is():
    engine = ScriptedEngine(_respond)
    spec = runspec.resolve(JudgeSettings(samples=1, max_tokens=16), engine.info, 512)
    judge = Judge(engine, spec)
    assert judge.spec is spec and judge.settings is spec.settings


def test_the_context_budget_has_one_rule():
    spec = runspec.resolve(JudgeSettings(max_tokens=100), FAKE_INFO, 1000)
    room = runspec.prompt_room(spec.context, 100)
    assert spec.fits(room) and not spec.fits(room + 1)
    assert runspec.tokens_needed(room, 100) == spec.tokens_needed(room) == 1000


def test_a_generation_request_has_no_token_limit_of_its_own():
    from rmjudge.core.types import GenRequest

    with pytest.raises(TypeError, match="max_tokens"):
        GenRequest(({"role": "user", "content": "hi"},))
    assert GenRequest(({"role": "user", "content": "hi"},), max_tokens=7).max_tokens == 7


def test_one_context_rule_and_one_too_long_message():
    from rmjudge.engine import budget, llama, vocab

    assert llama.FORCE_MARGIN is runspec.FORCE_MARGIN is budget.FORCE_MARGIN
    assert not hasattr(vocab, "FORCE_MARGIN")
    info = dataclasses.replace(FAKE_INFO, n_ctx_train=2048)
    for n_ctx, want in ((None, 2048), (0, 2048), (512, 512), (9999, 2048)):
        assert vocab.context_limit(EngineSettings(n_ctx=n_ctx), info) == want
        assert runspec.resolve(JudgeSettings(), info, n_ctx).context == want
    spec = runspec.resolve(JudgeSettings(max_tokens=256), info, 1024)
    assert spec.too_long_reason(900) == budget.too_long_reason(900, 256, 1024) == (
        "the pair needs 900 prompt tokens + 256 to generate, more than the model's context of "
        "1024; shorten the responses or lower --max-tokens")


def test_training_rollouts_take_the_run_specs_suffix(monkeypatch):
    from rmjudge.training import rollouts

    engine = ScriptedEngine(_respond)
    engine.info = dataclasses.replace(FAKE_INFO, prompt_suffix=" /think")
    sampling = rollouts.SamplingSettings(samples=2)
    assert rollouts.EngineRollouts(engine, sampling).suffix == " /think"
    assert rollouts.EngineRollouts(engine, sampling, "").suffix == ""
    calls = []
    monkeypatch.setattr(rollouts, "prompt_suffix",
                        lambda model, given=None: calls.append(given) or "S")
    assert rollouts.EngineRollouts(engine, sampling).suffix == "S" and calls == [None]


# -- typed errors, no message matching ---------------------------------------------------------

def test_a_duplicate_id_is_marked_by_type_not_by_its_message():
    rows = [RawRow(1, {"id": "x", "prompt": "p", "chosen": "a", "rejected": "b"}, None, None),
            RawRow(2, {"id": "x", "prompt": "q", "chosen": "c", "rejected": "d"}, None, None)]
    items = list(Intake(iter(rows), Mapper({}, seed=0)))
    dup = items[1]
    assert isinstance(dup, RowFailure) and dup.duplicate_of == 1 and dup.id == "x"
    assert not isinstance(items[0], RowFailure)


def test_an_engine_error_that_mentions_interruption_is_a_failure_not_an_interrupt(tmp_path):
    from rmjudge.runs.pipeline import score

    def respond(req, i):
        raise RuntimeError("connection interrupted by the peer")

    out = str(tmp_path / "out.duckdb")
    with pytest.raises(RuntimeError, match="connection interrupted"):
        score(_pairs(tmp_path), ScriptedEngine(respond), JudgeSettings(samples=1, max_tokens=16),
              output=out)
    with duckdb.connect(out, read_only=True) as con:
        assert con.execute("SELECT status FROM runs").fetchall() == [("failed",)]


def test_train_cli_reports_user_errors_and_leaves_bugs_alone(tmp_path, monkeypatch):
    import rmjudge.training.cli as tcli

    src = _pairs(tmp_path)
    out = str(tmp_path / "train.jsonl")
    r = CliRunner().invoke(tcli.main, ["build-data", src, "-o", out, "--map", "x=y"])
    assert r.exit_code == 1 and "Error: --map key 'x'" in r.output, r.output

    def bug(*a, **k):
        raise ValueError("an internal bug")

    import rmjudge.training.build

    monkeypatch.setattr(rmjudge.training.build, "build_data", bug)
    monkeypatch.setattr(rmjudge.training.build, "rollout_source",
                        lambda *a, **k: (None, "scripted"))
    r = CliRunner().invoke(tcli.main, ["build-data", src, "-o", out])
    assert isinstance(r.exception, ValueError) and "Error: an internal bug" not in r.output


# -- one option generator ------------------------------------------------------------------------

def _params(cmd) -> dict:
    return {p.name: p for p in cmd.params}


def test_ray_training_and_judge_options_come_from_their_dataclasses():
    from rmjudge.cli.ray_score import command as ray_score
    from rmjudge.runs.ray_runner import RaySettings
    from rmjudge.training.cli import main as train
    from rmjudge.training.grpo import GRPOSettings
    from rmjudge.training.sft import SFTSettings

    for cls, cmd in ((RaySettings, ray_score), (GRPOSettings, train.commands["grpo"]),
                     (SFTSettings, train.commands["sft"])):
        params = _params(cmd)
        for f in dataclasses.fields(cls):
            p = params[f.name]
            if f.metadata.get("argument"):
                assert p.param_type_name == "argument"
                continue
            assert p.help == f.metadata["help"], (cls.__name__, f.name)
            if f.default is dataclasses.MISSING:
                assert p.required, (cls.__name__, f.name)
            else:
                assert p.default == f.default and not p.required, (cls.__name__, f.name)
            if isinstance(f.default, bool):
                assert p.secondary_opts == [f"--no-{f.name.replace('_', '-')}"]
    assert _params(train.commands["grpo"])["output_dir"].opts == ["--output-dir", "-o"]
    assert _params(ray_score)["cpus_per_worker"].type.name == "float"


@pytest.mark.hf
def test_both_training_stages_build_lora_from_one_owner():
    """GRPO and SFT share the default --target-modules and turn their LoRA options into one
    PEFT config the same way (training.hf.lora_config)."""
    pytest.importorskip("peft")
    from rmjudge.training.grpo import GRPOSettings
    from rmjudge.training.hf import DEFAULT_TARGETS, lora_config
    from rmjudge.training.sft import SFTSettings

    grpo = GRPOSettings(model="m", data="d", output_dir="o", target_modules=" q_proj, v_proj ")
    sft = SFTSettings(source="s", output_dir="o", target_modules="all-linear", lora_r=4)
    assert {f.name: f.default for f in dataclasses.fields(SFTSettings)}["target_modules"] \
        == {f.name: f.default for f in dataclasses.fields(GRPOSettings)}["target_modules"] \
        == DEFAULT_TARGETS
    g, s = lora_config(grpo), lora_config(sft)
    assert (set(g.target_modules), g.r, g.lora_alpha, g.lora_dropout) == (
        {"q_proj", "v_proj"}, 16, 32, 0.05)
    assert (s.target_modules, s.r, s.lora_dropout, s.task_type) == ("all-linear", 4, 0.0,
                                                                   "CAUSAL_LM")


def test_map_is_declared_once():
    from rmjudge.cli.ray_score import command as ray_score
    from rmjudge.cli.score import command as score
    from rmjudge.training.cli import main as train

    maps = [_params(c)["mapping"] for c in (score, ray_score, train.commands["build-data"])]
    assert len({(tuple(p.opts), p.help, p.metavar) for p in maps}) == 1


def test_ray_score_parses_the_run_options_as_score_does(tmp_path, monkeypatch):
    """ray-score's judge, engine, --map, --label-values and --overwrite options become one
    RunOptions through score's parse_run_options, and its Mapper is the one Ray gets."""
    import rmjudge.cli.run_options
    import rmjudge.runs.ray_runner
    from rmjudge.cli import main

    parsed, calls = [], []
    real = rmjudge.cli.run_options.parse_run_options
    monkeypatch.setattr(rmjudge.cli.run_options, "parse_run_options",
                        lambda kw: parsed.append(real(kw)) or parsed[-1])

    def fake_ray_score(source, js, es, output, **kw):
        calls.append((js, es, kw))
        raise SettingsError("stop here")

    monkeypatch.setattr(rmjudge.runs.ray_runner, "ray_score", fake_ray_score)
    r = CliRunner().invoke(main, ["ray-score", _pairs(tmp_path), "-o", str(tmp_path / "o.duckdb"),
                                  "--map", "prompt=question", "--label-values", "yes=A,no=B",
                                  "--criteria", "helpful", "--samples", "3", "--overwrite",
                                  "--workers", "1"])
    assert r.exit_code == 1 and "Error: stop here" in r.output, r.output
    (opts,), ((js, es, kw),) = parsed, calls
    assert js is opts.judge and es is opts.engine and kw["mapper"] is opts.mapper
    assert (js.samples, js.criteria, kw["mapper"].mapping, kw["overwrite"]) == (
        3, "helpful", {"prompt": "question"}, True)
    assert opts.mapper.label_values.spec == "yes=A,no=B"
    assert kw["rs"].workers == 1


def test_ray_settings_errors_reach_the_user_as_one_line(tmp_path):
    from rmjudge.cli import main

    r = CliRunner().invoke(main, ["ray-score", _pairs(tmp_path), "-o", str(tmp_path / "o.duckdb"),
                                  "--workers", "0"])
    assert r.exit_code == 1 and "Error: --workers must be at least 1" in r.output, r.output


def test_bad_option_values_are_settings_errors_at_their_source():
    from rmjudge.analysis.compare import CompareSettings
    from rmjudge.analysis.filter import FilterSettings
    from rmjudge.review.select import parse_selection

    with pytest.raises(SettingsError, match="--resamples"):
        CompareSettings(resamples=0)
    with pytest.raises(SettingsError, match="--min-confidence"):
        FilterSettings(min_confidence=2.0)
    with pytest.raises(SettingsError, match="--select bogus"):
        parse_selection("bogus")


def test_commands_report_typed_errors_without_rewrapping(tmp_path):
    from rmjudge.cli import main

    runner = CliRunner()
    r = runner.invoke(main, ["filter", str(tmp_path / "t.duckdb"), "--min-confidence", "2"])
    assert r.exit_code == 1 and "Error: --min-confidence must be between 0 and 1" in r.output
    r = runner.invoke(main, ["merge", "a.duckdb", "-o", str(tmp_path / "m.duckdb"), "--map",
                             "x=y"])
    assert r.exit_code == 1 and "Error: --map key 'x'" in r.output, r.output


def test_a_map_key_given_twice_is_one_error_line_in_every_command(tmp_path, monkeypatch):
    """`--map prompt=prompt,prompt=chosen` once judged the chosen text as the prompt (the later
    entry won): every command that takes --map refuses it before reading anything."""
    import rmjudge.engine
    import rmjudge.training.cli as tcli

    from rmjudge.cli import main

    def boom(*a, **k):
        raise AssertionError("the engine must not load")

    monkeypatch.setattr(rmjudge.engine, "load_engine", boom)
    src, out = _pairs(tmp_path), str(tmp_path / "o.duckdb")
    spec = "prompt=prompt,prompt=chosen"
    want = ("Error: --map names prompt= twice (prompt=prompt, prompt=chosen); give each key "
            "once\n")
    for cli, args in ((main, ["score", src, "-o", out]), (main, ["eval", src]),
                      (main, ["ray-score", src, "-o", out]), (main, ["merge", "a.duckdb", "-o", out]),
                      (tcli.main, ["build-data", src, "-o", str(tmp_path / "t.jsonl")])):
        r = CliRunner().invoke(cli, [*args, "--map", spec])
        assert (r.exit_code, r.output) == (1, want), args
    assert not os.path.exists(out)
    with pytest.raises(SettingsError, match="names id= twice"):
        parse_map("id=a, prompt=q,id=b")


def test_map_flags_given_more_than_once_combine(tmp_path, monkeypatch):
    """`--map prompt=question --map chosen=answer_1 --map rejected=answer_2` once judged a decoy
    `prompt` column (only the last flag counted): the flags combine, as the comma form does."""
    from helpers import judge_with, rows

    from rmjudge.cli import main

    src = tmp_path / "decoy.jsonl"
    src.write_text("".join(json.dumps({
        "id": f"p{i}", "question": f"real question {i}", "prompt": f"decoy {i}",
        "answer_1": f"good {i}", "answer_2": f"bad {i}"}) + "\n" for i in range(2)))
    engine = ScriptedEngine(_respond)
    judge_with(monkeypatch, lambda: engine)
    out = str(tmp_path / "o.duckdb")
    r = CliRunner().invoke(main, ["score", str(src), "-o", out, "--samples", "1",
                                  "--max-tokens", "16", "-q", "--map", "prompt=question",
                                  "--map", "chosen=answer_1", "--map", "rejected=answer_2"])
    assert r.exit_code == 0, r.output
    got = rows(out, "SELECT id, prompt, label, response_a, response_b, input_prompt FROM pairs "
                    "ORDER BY id")
    for i, (pid, prompt, label, a, b, decoy) in enumerate(got):
        assert (pid, prompt, decoy) == (f"p{i}", f"real question {i}", f"decoy {i}")
        assert {a, b} == {f"good {i}", f"bad {i}"} and (a if label == "A" else b) == f"good {i}"
    assert all("real question" in req.messages[-1]["content"] and "decoy" not in
               req.messages[-1]["content"] for call in engine.calls for req in call)
    assert parse_map(("prompt=q", "a=x,b=y", "")) == {"prompt": "q", "a": "x", "b": "y"}


def test_a_map_key_repeated_across_flags_is_one_error_line_in_every_command(tmp_path,
                                                                           monkeypatch):
    """`--map prompt=prompt --map prompt=chosen` judged the chosen text as the prompt: refused
    like the comma-joined form, before anything is read or written."""
    import rmjudge.engine
    import rmjudge.training.cli as tcli

    from rmjudge.cli import main

    def boom(*a, **k):
        raise AssertionError("the engine must not load")

    monkeypatch.setattr(rmjudge.engine, "load_engine", boom)
    src, out = _pairs(tmp_path), str(tmp_path / "o.duckdb")
    want = ("Error: --map names prompt= twice (prompt=prompt, prompt=chosen); give each key "
            "once\n")
    flags = ["--map", "prompt=prompt", "--map", "prompt=chosen"]
    for cli, args in ((main, ["score", src, "-o", out]), (main, ["eval", src]),
                      (main, ["ray-score", src, "-o", out]), (main, ["merge", "a.duckdb", "-o", out]),
                      (tcli.main, ["build-data", src, "-o", str(tmp_path / "t.jsonl")]),
                      (tcli.main, ["sft", src, "-o", str(tmp_path / "sft")])):
        r = CliRunner().invoke(cli, [*args, *flags])
        assert (r.exit_code, r.output) == (1, want), args
    assert sorted(os.listdir(tmp_path)) == ["pairs.jsonl"]


def test_the_upload_options_are_declared_once():
    """push and filter --push-to-hub share --private, --license and --dry-run; filter's help
    names the option they go with."""
    from rmjudge.cli.filter import command as filter_cmd
    from rmjudge.cli.push import command as push

    for name in ("private", "license_", "dry_run"):
        a, b = _params(push)[name], _params(filter_cmd)[name]
        assert (a.opts, a.metavar, a.default, a.is_flag) == (b.opts, b.metavar, b.default,
                                                             b.is_flag)
        assert b.help == f"--push-to-hub: {a.help[0].lower()}{a.help[1:]}", name


def test_the_judge_model_option_is_declared_once():
    from rmjudge.cli.models import command as models
    from rmjudge.cli.score import command as score

    a, b = _params(models)["model"], _params(score)["model"]
    assert (a.opts, a.help, a.envvar, a.metavar) == (b.opts, b.help, b.envvar, b.metavar)


def test_server_option_defaults_are_the_dataclass_defaults(monkeypatch):
    import importlib

    import rmjudge.cli.server_options as so
    import rmjudge.servers.settings as server  # where the dataclass is defined

    @dataclasses.dataclass(frozen=True)
    class Other(server.ServerSettings):
        concurrency: int = 5
        retries: int = 2
        timeout: float = 9.0

    monkeypatch.setattr(server, "ServerSettings", Other)
    try:
        fresh = importlib.reload(so)

        @fresh.server_options
        def cmd(**kw):
            pass

        import click

        params = _params(click.command()(cmd))
        assert (params["server_concurrency"].default, params["server_retries"].default,
                params["server_timeout"].default) == (5, 2, 9.0)
    finally:
        monkeypatch.undo()
        importlib.reload(so)


# -- every front door goes through the run set-up -----------------------------------------------

def _spy(monkeypatch, name: str) -> list:
    """Record the calls of `rmjudge.runs.setup.<name>` (which still does its work)."""
    from rmjudge.runs import setup as run

    real, calls = getattr(run, name), []

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(run, name, spy)
    return calls


def test_merge_checks_its_input_through_the_run_setup(tmp_path, monkeypatch):
    from rmjudge.runs.merge import merge
    from rmjudge.runs.pipeline import score

    src = _pairs(tmp_path)
    shard = str(tmp_path / "s.duckdb")
    score(src, ScriptedEngine(_respond), _opts().judge, output=shard)
    opened = _spy(monkeypatch, "open_input")
    report = merge([shard], str(tmp_path / "all.duckdb"), input=src)
    assert [c[0] for c in opened] == [src]
    assert report.input_rows == 3 and report.problems == [] and report.output is not None


def test_merge_input_check_reads_ids_only_so_free_form_labels_are_not_refused(tmp_path):
    """merge --input checks ids: a label column that `score` needs --label-values for is no
    reason to refuse there (the shards were scored with it)."""
    from rmjudge.runs.merge import merge
    from rmjudge.runs.pipeline import score

    src = tmp_path / "pairs.jsonl"
    src.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"q {i}", "response_a": f"a {i}",
                                       "response_b": f"b {i}", "label": ("yes", "no")[i]}) + "\n"
                           for i in range(2)))
    shard = str(tmp_path / "s.duckdb")
    score(str(src), ScriptedEngine(_respond), _opts().judge, output=shard,
          mapper=Mapper({}, seed=0, label_values="yes=A,no=B"))
    report = merge([shard], str(tmp_path / "all.duckdb"), input=str(src))
    assert report.input_rows == 2 and report.problems == []


def test_a_ray_worker_builds_its_judge_and_judges_its_batch_through_the_run_setup(
        tmp_path, monkeypatch):
    """No Ray needed: the worker is the callable Ray's actor pool holds."""
    import orjson

    from rmjudge.runs.pipeline import verdict_settings
    from rmjudge.runs.ray_runner import _JudgeWorker

    built, judged = _spy(monkeypatch, "build_judge"), _spy(monkeypatch, "judge_rows")
    opts = _opts()
    engine = ScriptedEngine(_respond)
    settings = orjson.loads(orjson.dumps(verdict_settings(opts.judge, engine.info)))
    worker = _JudgeWorker(lambda: engine, opts, settings, str(tmp_path), run_id=1)
    rows = [[1, {"id": "a", "prompt": "q", "chosen": "x", "rejected": "y"}, None, None],
            [2, None, "row 2: not JSON", "{oops"],
            [3, {"id": "a", "prompt": "q2", "chosen": "x", "rejected": "y"}, None, None]]
    out = worker({"key": ["k1"], "rows": [orjson.dumps(rows)]})
    assert len(built) == 1 and built[0][0] is engine and len(judged) == 1
    assert (out["judged"], out["errors"]) == ([1], [2])
    batch = tmp_path / "batches" / "k1"
    assert rows_of(batch / "pairs.parquet", "id") == [("a",)]
    assert rows_of(batch / "errors.parquet", "row_number") == [(2,), (3,)]


def rows_of(parquet, cols: str) -> list[tuple]:
    with duckdb.connect() as con:
        return con.execute(f"SELECT {cols} FROM read_parquet(?) ORDER BY ALL",
                           [str(parquet)]).fetchall()


def test_the_dry_run_and_build_data_open_their_input_through_the_run_setup(tmp_path, monkeypatch):
    import rmjudge.engine
    import rmjudge.training.data
    from rmjudge.runs import setup as run

    assert rmjudge.training.data.open_input is run.open_input
    tokenizer = ScriptedEngine(_respond)
    tokenizer.on_gpu, tokenizer.threads = False, 1  # what the throughput record is keyed by
    monkeypatch.setattr(rmjudge.engine, "load_engine",
                        lambda es, vocab_only=False, **kw: tokenizer)
    opened = _spy(monkeypatch, "open_input")
    src = _pairs(tmp_path)
    report = run.dry_run(src, _opts(limit=2))
    assert [c[0] for c in opened] == [src] and (report.rows, report.pairs) == (2, 2)


def _count_resolution(monkeypatch) -> tuple[dict, list]:
    """Counters of the judge model's resolution (`resolve_model`, `with_demo_adapter`) and the
    settings each engine was made with; the local engine loader is replaced by one that does
    what the real engines do with its settings (`local_model`) and judges with a script."""
    import rmjudge.engine
    import rmjudge.models.resolve as resolve

    counts = {"resolve_model": 0, "with_demo_adapter": 0}
    made: list = []

    def resolving(model):
        counts["resolve_model"] += 1
        return model or "embedded.gguf"

    def adapting(es):
        counts["with_demo_adapter"] += 1
        return dataclasses.replace(es, model="demo-judge.gguf") if resolve.wants_demo_adapter(
            es) else es

    def loader(settings, server):
        made.append((settings, resolve.local_model(settings)))
        return ScriptedEngine(_respond)

    monkeypatch.setattr(resolve, "resolve_model", resolving)
    monkeypatch.setattr(resolve, "with_demo_adapter", adapting)
    monkeypatch.setitem(rmjudge.engine.ENGINES, "batched", loader)
    monkeypatch.delenv("RMJUDGE_MODEL", raising=False)
    return counts, made


@pytest.mark.parametrize("model", [None, "my-judge.gguf"])
def test_a_cli_run_resolves_its_judge_model_once_and_hands_it_down(tmp_path, monkeypatch, model):
    """The model (the demo judge made, a path checked, a Hub spec downloaded) is resolved once
    per run, by the run's set-up; the engine gets it resolved and does not resolve it again."""
    from rmjudge.cli import main

    counts, made = _count_resolution(monkeypatch)
    args = ["score", _pairs(tmp_path), "-o", str(tmp_path / "out.duckdb"), "--samples", "1",
            "--max-tokens", "16", "-q"] + (["--model", model] if model else [])
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert counts == {"resolve_model": 1, "with_demo_adapter": 1}
    (settings, path), = made
    assert settings.resolved and path == (model or "demo-judge.gguf")


def test_a_dry_run_resolves_its_judge_model_once(tmp_path, monkeypatch):
    import rmjudge.engine
    from rmjudge.runs import setup as run

    counts, made = _count_resolution(monkeypatch)
    vocab = []

    def tokenizer(settings):
        vocab.append(settings)
        engine = ScriptedEngine(_respond)
        engine.on_gpu, engine.threads = False, 1
        return engine

    import rmjudge.engine.vocab

    monkeypatch.setattr(rmjudge.engine.vocab, "ModelVocab", tokenizer)
    js = JudgeSettings(samples=1, max_tokens=16)
    report = run.dry_run(_pairs(tmp_path), RunOptions(js, EngineSettings(), Mapper({}, seed=0)))
    assert report.pairs == 3 and len(vocab) == 1 and vocab[0].resolved
    assert counts == {"resolve_model": 1, "with_demo_adapter": 1}


def test_ray_workers_get_the_judge_model_the_driver_resolved(tmp_path, monkeypatch):
    """`EngineFactory` resolves the model at the driver's first call, once; its copies
    (pickled to the workers) load that file without resolving again. A node without the file
    at that path resolves the settings as given itself."""
    import pickle

    import rmjudge.engine
    from rmjudge.runs.ray_runner import EngineFactory

    counts, made = _count_resolution(monkeypatch)
    judge = tmp_path / "judge.gguf"
    judge.write_bytes(b"GGUF")
    factory = EngineFactory(EngineSettings(model=str(judge)))
    assert counts == {"resolve_model": 0, "with_demo_adapter": 0}  # nothing before the checks
    factory()  # the driver's
    for worker in (pickle.loads(pickle.dumps(factory)), pickle.loads(pickle.dumps(factory))):
        worker()
    assert counts == {"resolve_model": 1, "with_demo_adapter": 1}
    assert [path for _, path in made] == [str(judge)] * 3

    judge.unlink()  # another node: not at that path
    pickle.loads(pickle.dumps(factory))()
    assert counts == {"resolve_model": 2, "with_demo_adapter": 2}


def test_a_ray_worker_without_the_drivers_demo_adapter_resolves_the_judge_itself(
        tmp_path, monkeypatch, model_path):
    """With --lora-scale other than 1 the driver resolves the embedded judge to the Q8_0 copy
    plus the demo adapter applied at run time, the adapter a file of the driver's
    installation. A node whose rmjudge is installed elsewhere has the model at that path (the
    user's cache) but not the adapter: it resolves the settings as given itself and loads,
    rather than failing on the driver's adapter path."""
    import pickle
    import shutil

    import rmjudge.models.resolve as resolve
    from rmjudge.runs.ray_runner import EngineFactory

    monkeypatch.delenv("RMJUDGE_MODEL", raising=False)
    drivers = tmp_path / "driver-site-packages" / "demo.lora.gguf"
    drivers.parent.mkdir()
    shutil.copyfile(resolve.demo_adapter_path(), drivers)
    with monkeypatch.context() as m:  # the driver's installation
        m.setattr(resolve, "demo_adapter_path", lambda: str(drivers))
        factory = EngineFactory(EngineSettings(lora_scale=0.5, threads=1))
        factory(vocab_only=True)
    assert factory.settings.lora == str(drivers) and os.path.isfile(factory.settings.model)
    drivers.unlink()  # another node: the same cache, rmjudge installed elsewhere
    worker = pickle.loads(pickle.dumps(factory))
    engine = worker(vocab_only=True)
    assert engine.info.path == factory.settings.model


def test_a_runs_prompt_style_reaches_ray_workers_without_its_files(tmp_path):
    """The driver reads --criteria @FILE, --prompt-template and a judge format file once; the
    style it hands the Ray workers pickles (templates and format files as their texts) and
    comes back the same, with the files gone."""
    import pickle
    import shutil

    from rmjudge.prompts.choice import format_of, run_style

    crit, tmpl = tmp_path / "rubric.txt", tmp_path / "prompt.jinja"
    crit.write_text("Prefer the shorter answer.")
    tmpl.write_text(TEMPLATE)
    fmt = tmp_path / "judge.toml"
    shutil.copy(os.path.join(os.path.dirname(__file__), "..", "examples", "judge_format.toml"),
                fmt)
    styles = [run_style(f"@{crit}", str(tmpl), None), run_style(None, None, str(fmt)),
              run_style(f"@{crit}", None, "prometheus2")]
    sent = [pickle.dumps(s) for s in styles]
    for path in (crit, tmpl, fmt):
        path.unlink()
    pair = ([{"role": "user", "content": "question"}], "good", "bad")
    for style, blob in zip(styles, sent):
        got = pickle.loads(blob)
        assert got.criteria == style.criteria
        assert (got.template is None) == (style.template is None)
        if style.template is not None:
            assert got.template.sha256 == style.template.sha256
        assert format_of(got).sha256 == format_of(style).sha256
        assert format_of(got).pref_messages(*pair, "", got) == \
            format_of(style).pref_messages(*pair, "", style)
