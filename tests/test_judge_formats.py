"""Judge formats (`--judge-format`, docs/judges.md): the open judges' prompts and verdict rules
against fixtures made from their authors' code, the protocol on top (both orders, N samples,
ties, the vote, self-reflection only where a format has a critique comparison), format files
checked before a model loads, and a store that refuses a resume with another format."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from helpers import judge_with, rows

from rmjudge.cli import main
from rmjudge.core.settings import JudgeSettings
from rmjudge.core.types import Generation, GenRequest, RawPrompt
from rmjudge.engine.chat import ChatTemplate
from rmjudge.engine.fake import ScriptedEngine
from rmjudge.prompts import PromptStyle, completion_text
from rmjudge.prompts.builtin_formats import BUILTIN
from rmjudge.prompts.choice import judge_format, run_style
from rmjudge.prompts.formats import TIE, JudgeFormatError
from rmjudge.runs.pipeline import score

FIXTURES = Path(__file__).parent / "data" / "judge_formats"
LETTER = {1: "A", 2: "B", TIE: "tie"}
NATIVE = [n for n in BUILTIN if n != "reflectrm"]


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.mark.parametrize("name", NATIVE)
def test_prompts_equal_the_authors_rendering(name):
    """Each built-in renders the fixture's pairs (made by the official prompt functions at the
    commit the fixture names) character for character, system prompt and rubric included."""
    fx = fixture(name)
    fmt = BUILTIN[name]
    assert fx["source"]["commit"] and len(fx["render_cases"]) >= 3
    for case in fx["render_cases"]:
        style = PromptStyle(case.get("rubric"), None, fmt)
        got = fmt.pref_messages(({"role": "user", "content": case["question"]},),
                                case["response_a"], case["response_b"], "", style)
        assert [dict(m) for m in got] == case["messages"]
    assert fmt.ties == fx["ties"] and fmt.rubric == fx["rubric"]


@pytest.mark.parametrize("name", NATIVE)
def test_answers_parse_as_the_authors_rule_parses_them(name):
    """Official example answers and hostile ones (both verdicts, none, a verdict quoted inside
    the text or in the wrong place, a tie where none is allowed) read as the official rule
    reads them; what it does not read is None (a parse failure), never a tie."""
    fmt = BUILTIN[name]
    cases = fixture(name)["parse_cases"]
    assert len(cases) >= 10
    for case in cases:
        verdict = fmt.parse(case["text"])
        got = None if verdict is None else LETTER[verdict.prediction]
        assert got == case["expected"], (case["why"], case["text"])
        if verdict is not None:
            assert 0 <= verdict.start < verdict.end <= len(case["text"])


def test_ties_only_where_the_format_has_them():
    for name in NATIVE:
        fmt = BUILTIN[name]
        ties = [c for c in fixture(name)["parse_cases"] if c["expected"] == "tie"]
        assert bool(ties) == fmt.ties, name


# -- a scripted judge that answers in each format ------------------------------------------

def answer(name: str, winner: int | None) -> str:
    """A well-formed answer of format `name` for `winner` (1 | 2 in the prompt's numbering;
    None: a tie)."""
    ab = {1: "A", 2: "B"}.get(winner)
    return {
        "reflectrm": lambda: completion_text("pref", "Looked at both.", winner),
        "mt-bench": lambda: f"Assistant {ab} answers correctly. [[{ab}]]",
        "skywork-critic": lambda: f"[[{ab}]]",
        "prometheus2": lambda: f"Feedback: one of them is right. [RESULT] {ab}",
        "pandalm": lambda: f"{winner or 'Tie'}\n\nReason: it is correct.",
        "judgelm": lambda: {1: "8 3", 2: "3 8", None: "5 5"}[winner] + "\nOne is correct.",
        "selene": lambda: f"**Reasoning:** one is correct.\n\n**Result:** {ab}",
        "auto-j": lambda: ("Both were read. So, the final decision is "
                           + (f"Response {winner}" if winner else "Tie")),
    }[name]()


def shown_first(req: GenRequest, good: str, bad: str) -> int:
    """1 when `good` stands before `bad` in the prompt, else 2."""
    text = "\n".join(m["content"] for m in req.messages)
    return 1 if text.index(good) < text.index(bad) else 2


def gold_judge(name: str, tie: bool = False):
    def respond(req: GenRequest, i: int):
        return answer(name, None if tie else shown_first(req, "GOOD", "BAD"))
    return respond


def write_pairs(path: Path, n: int = 3) -> str:
    rows = [{"id": f"p{i}", "prompt": f"Question {i}?", "chosen": f"GOOD answer {i}",
             "rejected": f"BAD answer {i}"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


stored = rows  # all rows of a query on a run store (tests/helpers.py)


@pytest.mark.parametrize("name", list(BUILTIN))
def test_a_judge_in_each_format_gives_the_gold_verdict_in_both_orders(tmp_path, name):
    src = write_pairs(tmp_path / "pairs.jsonl")
    out = str(tmp_path / "o.duckdb")
    engine = ScriptedEngine(gold_judge(name))
    settings = JudgeSettings(samples=2, judge_format=name)
    score(src, engine, settings, output=out)
    rows = stored(out, "SELECT verdict, verdict_ab, verdict_ba, label, consistent, correct "
                       "FROM pairs")
    assert len(rows) == 3 and {r[0] for r in rows} <= {"A", "B"}
    assert all(r[0] == r[1] == r[2] == r[3] and r[4] and r[5] for r in rows), rows
    samples = stored(out, "SELECT prediction, verdict_source FROM samples "
                          "WHERE stage = 'rollout'")
    assert len(samples) == 12 and all(s == "generated" for _, s in samples)
    requests = [r for call in engine.calls for r in call]
    assert requests and all(r.assistant_prefix == BUILTIN[name].assistant_prefix
                            for r in requests if r.share_key[2] == "rollout")
    settings_row = orjson.loads(stored(out, "SELECT value FROM meta WHERE key = 'settings'")[0][0])
    if name == "reflectrm":  # a store of the default format records what 0.13 recorded
        assert "judge_format" not in settings_row and "judge_format_sha256" not in settings_row
    else:
        assert settings_row["judge_format"] == name
        assert settings_row["judge_format_sha256"] == BUILTIN[name].sha256
        assert settings_row["reflect"] is False  # no critique comparison of its own
        assert not any(r.share_key[2] == "reflection" for r in requests)


@pytest.mark.parametrize("name", ["pandalm", "judgelm", "auto-j"])
def test_a_tie_answer_is_a_tie_not_a_failure(tmp_path, name):
    src = write_pairs(tmp_path / "pairs.jsonl", 1)
    out = str(tmp_path / "o.duckdb")
    score(src, ScriptedEngine(gold_judge(name, tie=True)),
          JudgeSettings(samples=3, judge_format=name), output=out)
    assert stored(out, "SELECT verdict, verdict_ab, verdict_ba, consistent, p_a FROM pairs") == [
        ("tie", "tie", "tie", True, 0.5)]
    assert set(stored(out, "SELECT prediction, verdict_source FROM samples")) == {
        (TIE, "generated")}


def test_an_unparsed_answer_is_a_parse_failure_not_a_tie(tmp_path):
    src = write_pairs(tmp_path / "pairs.jsonl", 1)
    out = str(tmp_path / "o.duckdb")
    score(src, ScriptedEngine(lambda req, i: "Both answers have merit; I cannot choose."),
          JudgeSettings(samples=2, judge_format="mt-bench"), output=out)
    assert stored(out, "SELECT verdict, verdict_ab, verdict_ba FROM pairs") == [
        ("error", "error", "error")]
    assert set(stored(out, "SELECT prediction, verdict_source FROM samples")) == {(None, None)}


def test_the_vote_over_three_predictions_and_the_anchor_on_its_verdict_tokens(tmp_path):
    """Two rollouts say 1, one says tie: the order's verdict is 1. The anchor is the rollout
    whose verdict tokens were most probable, whatever its other tokens."""
    texts = ["4 2\nFirst is better, clearly.", "5 5\nEven.", "7 3\nThe first one."]
    lps = [[-0.1, -3.0, -0.2, -0.2, -0.2, -0.2], [-2.0, -0.1, -0.1], [-0.05, -0.5, -0.6, -0.7]]

    def respond(req, i):
        from rmjudge.engine.fake import word_ends

        return Generation(texts[i], lps[i], "stop", token_ends=word_ends(texts[i]))

    src = write_pairs(tmp_path / "pairs.jsonl", 1)
    out = str(tmp_path / "o.duckdb")
    score(src, ScriptedEngine(respond), JudgeSettings(samples=3, judge_format="judgelm",
                                                      orders="ab"), output=out)
    assert stored(out, "SELECT verdict_ab FROM pairs") == [("A",)]
    anchors = stored(out, "SELECT idx, confidence FROM samples WHERE is_anchor")
    # judgelm's verdict is its first line: "7 3" is tokens 0-1 (-0.05, -0.5)
    assert anchors == [(2, pytest.approx(-0.275))]


def test_reflect_opts_into_reflectrms_critique_comparison_as_an_ablation(tmp_path):
    """A format without a critique comparison votes by default; --reflect gives it ReflectRM's
    comparison of the format's whole answers, which decides the winner group as for ReflectRM."""
    answers = ["[[A]] first", "[[B]] second", "[[A]] again"]

    def respond(req, i):
        if req.share_key[2] == "reflection":
            return completion_text("refl", "meta", 1)
        return answers[i]

    src = write_pairs(tmp_path / "pairs.jsonl", 1)
    out = str(tmp_path / "o.duckdb")
    engine = ScriptedEngine(respond)
    score(src, engine, JudgeSettings(samples=3, judge_format="skywork-critic", reflect=True,
                                     orders="ab"), output=out)
    reflections = [r for call in engine.calls for r in call if r.share_key[2] == "reflection"]
    assert len(reflections) == 2
    body = reflections[0].messages[-1]["content"]
    assert "## The two critiques" in body and "[[" in body  # the whole answer is the critique
    settings_row = orjson.loads(stored(out, "SELECT value FROM meta WHERE key = 'settings'")[0][0])
    assert settings_row["reflect"] is True


def test_a_resume_with_another_format_is_refused(tmp_path, monkeypatch):
    src = write_pairs(tmp_path / "pairs.jsonl", 2)
    out = str(tmp_path / "o.duckdb")
    judge_with(monkeypatch, lambda: ScriptedEngine(gold_judge("mt-bench")))
    base = ["score", src, "-o", out, "--samples", "2", "--model", "judge.gguf"]
    r = CliRunner().invoke(main, base + ["--judge-format", "mt-bench"])
    assert r.exit_code == 0, r.output
    for other in ([], ["--judge-format", "skywork-critic"]):
        r = CliRunner().invoke(main, base + other)
        errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
        assert r.exit_code == 1 and len(errors) == 1, r.output
        assert "judge_format 'mt-bench' -> " in errors[0]


def test_criteria_go_into_prometheus_rubric_and_are_refused_without_a_slot(tmp_path,
                                                                          monkeypatch):
    loads = []
    judge_with(monkeypatch, lambda: loads.append(1) or ScriptedEngine(gold_judge("prometheus2")))
    src = write_pairs(tmp_path / "pairs.jsonl", 1)
    r = CliRunner().invoke(main, ["score", src, "-o", str(tmp_path / "a.duckdb"),
                                  "--judge-format", "mt-bench", "--criteria", "honest"])
    assert r.exit_code == 1 and not loads
    assert r.output.startswith("Error: --criteria: the judge format mt-bench has no rubric slot")
    style = run_style("Is it polite?", None, "prometheus2")
    user = BUILTIN["prometheus2"].pref_messages(({"role": "user", "content": "Q"},), "a", "b",
                                                "", style)[-1]["content"]
    assert "###Score Rubric:\nIs it polite?\n\n###Feedback: " in user
    r = CliRunner().invoke(main, ["score", src, "-o", str(tmp_path / "b.duckdb"),
                                  "--judge-format", "auto-j", "--prompt-template",
                                  str(tmp_path / "t.jinja")])
    assert r.exit_code == 1 and "cannot be used with --judge-format auto-j" in r.output


def test_label_safer_adds_its_rubric_only_where_the_format_has_a_slot(tmp_path, monkeypatch):
    from rmjudge.runs.setup import with_label_criteria

    assert with_label_criteria(JudgeSettings(judge_format="selene"), "safer").criteria is None
    assert with_label_criteria(JudgeSettings(judge_format="prometheus2"),
                               "safer").criteria == "harmless"


def test_raw_formats_skip_the_chat_template():
    """PandaLM, JudgeLM and Auto-J are prompted as plain completions, as their authors do;
    the others go through the model's chat template."""
    template = ChatTemplate("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
                            "{% endfor %}<|assistant|>")
    conv = ({"role": "user", "content": "Q?"},)
    for name, fmt in BUILTIN.items():
        msgs = fmt.pref_messages(conv, "one", "two", "", PromptStyle(None, None, fmt))
        text = template.render(msgs, fmt.assistant_prefix)
        raw = name in ("pandalm", "judgelm", "auto-j")
        assert isinstance(msgs, RawPrompt) == raw
        assert (text == msgs[0]["content"]) == raw and ("<|assistant|>" in text) != raw


# -- format files ----------------------------------------------------------------------------

GOOD_FILE = """
name = "my-judge"
labels = ["X", "Y"]
prompt = '''Q: {{ context }}
X: {{ response1 }}
Y: {{ response2 }}
Say WIN-X, WIN-Y or DRAW.'''
[verdict]
first = 'WIN-X'
second = 'WIN-Y'
tie = 'DRAW'
where = "last"
"""


def test_the_example_format_file_is_a_working_format(tmp_path):
    fmt = judge_format(str(Path(__file__).parent.parent / "examples" / "judge_format.toml"))
    assert fmt.ties and fmt.rubric and fmt.reflects and fmt.force_spec() is not None
    assert fmt.parse("... Verdict: Output (b)").prediction == 2
    assert fmt.parse("verdict: TIE").prediction == TIE
    assert fmt.parse("no verdict here") is None


def test_a_format_file_judges_with_its_prompt_and_patterns(tmp_path):
    path = tmp_path / "judge.toml"
    path.write_text(GOOD_FILE)
    src = write_pairs(tmp_path / "pairs.jsonl", 2)
    out = str(tmp_path / "o.duckdb")

    def respond(req, i):
        winner = shown_first(req, "GOOD", "BAD")
        return f"I choose WIN-{'XY'[winner - 1]}"

    score(src, ScriptedEngine(respond), JudgeSettings(samples=2, judge_format=str(path)),
          output=out)
    assert stored(out, "SELECT DISTINCT correct, consistent FROM pairs") == [(True, True)]
    settings_row = orjson.loads(stored(out, "SELECT value FROM meta WHERE key = 'settings'")[0][0])
    assert settings_row["judge_format"] == "my-judge"
    # the file's text decides verdicts: an edited pattern is another format
    path.write_text(GOOD_FILE.replace("DRAW", "EVEN"))
    assert judge_format(str(path)).sha256 != settings_row["judge_format_sha256"]


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace('name = "my-judge"', 'name = "my-judge"\ncolour = "red"'), "colour"),
    (lambda t: t.replace("first = 'WIN-X'", "first = 'WIN-(X'"), "verdict.first"),
    (lambda t: t.replace("first = 'WIN-X'", ""), "verdict.first"),
    (lambda t: t.replace("X: {{ response1 }}", ""), "prompt"),
    (lambda t: t.replace('name = "my-judge"', 'name = "mt-bench"'), "name"),
    (lambda t: t.replace('where = "last"', 'where = "middle"'), "verdict.where"),
    (lambda t: t.replace("Q: {{ context }}", "Q: {{ context.nope() }}"), "prompt"),
    (lambda t: t + "\n[[", "TOML"),
])
def test_a_bad_format_file_is_one_error_line_naming_the_key(tmp_path, monkeypatch, edit, key):
    path = tmp_path / "judge.toml"
    path.write_text(edit(GOOD_FILE))
    with pytest.raises(JudgeFormatError) as exc:
        judge_format(str(path))
    message = str(exc.value)
    assert "\n" not in message and str(path) in message and key in message, message
    loads = []
    judge_with(monkeypatch, lambda: loads.append(1))
    src = write_pairs(tmp_path / "pairs.jsonl", 1)
    r = CliRunner().invoke(main, ["score", src, "-o", str(tmp_path / "o.duckdb"),
                                  "--judge-format", str(path)])
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert r.exit_code == 1 and not loads and len(errors) == 1, r.output


def test_formats_lists_every_builtin_within_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = CliRunner().invoke(main, ["formats"])
    assert r.exit_code == 0, r.output
    for name in BUILTIN:
        assert f"\n{name}: " in "\n" + r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80
    r = CliRunner().invoke(main, ["formats", "prometheus2", "--prompt"])
    assert r.exit_code == 0 and "###Score Rubric:" in r.output and "<criteria>" in r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80


# -- the other judging commands ---------------------------------------------------------------

def quality_judge(name: str):
    """A judge in format `name` that prefers the response with the larger `q=N` (the first
    two `q=N` in the prompt are the responses, in the order shown)."""
    import re

    def respond(req, i):
        text = "\n".join(m["content"] for m in req.messages)
        q1, q2 = (int(x) for x in re.findall(r"q=(\d+)", text)[:2])
        return answer(name, 1 if q1 > q2 else 2)
    return respond


@pytest.mark.parametrize("name", list(BUILTIN))
def test_rank_orders_candidates_with_a_judge_in_its_format(tmp_path, name):
    from rmjudge.rank import rank

    src = tmp_path / "bon.jsonl"
    src.write_text(json.dumps({"id": "p1", "prompt": "Which is best?",
                               "responses": ["a q=2", "b q=9", "c q=5"]}) + "\n")
    out = str(tmp_path / "r.duckdb")
    rank(str(src), out, engine=ScriptedEngine(quality_judge(name)),
         judge=JudgeSettings(samples=2, judge_format=name))
    ranks = dict(stored(out, "SELECT candidate, rank FROM rankings"))
    assert ranks == {1: 1, 2: 2, 0: 3}
    assert stored(out, "SELECT DISTINCT consistent FROM pairs") == [(True,)]


# where each format's prompt shows the first and the second response
SHOWN = {
    "mt-bench": r"Assistant A's Answer\]\n(.*?)\n\[The End.*Assistant B's Answer\]\n(.*?)\n\[The End",
    "skywork-critic": r"Assistant A's Answer\]\n(.*?)\n\[The End.*Assistant B's Answer\]\n(.*?)\n\[The End",
    "prometheus2": r"###Response A:\n(.*?)\n\n###Response B:\n(.*?)\n\n###Score Rubric",
    "pandalm": r"### Response 1:\n(.*?)\n\n### Response 2:\n(.*?)\n\n### Evaluation",
    "judgelm": r"Assistant 1's Answer\]\n(.*?)\n\n\[The End.*Assistant 2's Answer\]\n(.*?)\n\n\[The End",
    "selene": r"Response A:\n```\n(.*?)\n```\n\nResponse B:\n```\n(.*?)\n```",
    "auto-j": r"\[Response 1\]: (.*?)\n\*\*\*\n\[Response 2\]: (.*?)\n\*\*\*",
}


@pytest.mark.parametrize("name", NATIVE)
def test_bench_scores_a_judge_in_its_format_as_the_same_decisions_in_reflectrms(tmp_path, name):
    """The bench fixture's scripted decisions (right, wrong, no verdict per order) given in a
    format's answer form score exactly as they do in ReflectRM's."""
    import re

    from bench_judge import action, fixture_engine
    from test_bench import SOURCES

    from rmjudge.bench import get
    from rmjudge.bench.runner import judge, score_stored

    def in_format(req, i):
        body = "\n".join(m["content"] for m in req.messages)
        r1, r2 = re.search(SHOWN[name], body, re.S).groups()
        gold = 1 if "correct" in r1 else 2 if "correct" in r2 else 1
        act = action(req, req.share_key[1])
        if act == "none":
            return "I cannot tell."
        return answer(name, gold if act == "right" else 3 - gold)

    bench = get("rewardbench")
    figures = []
    for engine, js, folder in (
            (fixture_engine(), JudgeSettings(samples=1, seed=3), "reflectrm"),
            (ScriptedEngine(in_format, pairs_in_flight=1),
             JudgeSettings(samples=1, seed=3, judge_format=name), name)):
        judge(bench, str(SOURCES["rewardbench"]), engine, js, str(tmp_path / folder))
        res = score_stored(bench, str(tmp_path / folder))
        figures.append([(c.label, c.value) for c in res.sections])
    assert figures[0] == figures[1] and len(figures[0]) > 3


def test_compare_and_jury_over_stores_of_two_formats(tmp_path):
    """Which judge to trust: a ReflectRM store and a Prometheus 2 store of the same input
    compare, and their jury works."""
    src = write_pairs(tmp_path / "pairs.jsonl", 4)
    a, b = str(tmp_path / "a.duckdb"), str(tmp_path / "b.duckdb")
    score(src, ScriptedEngine(gold_judge("reflectrm")), JudgeSettings(samples=2), output=a)
    score(src, ScriptedEngine(gold_judge("prometheus2")),
          JudgeSettings(samples=2, judge_format="prometheus2"), output=b)
    r = CliRunner().invoke(main, ["compare", a, b])
    assert r.exit_code == 0, r.output
    jury = str(tmp_path / "jury.duckdb")
    r = CliRunner().invoke(main, ["compare", a, b, "--jury", "-o", jury])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["eval", jury])
    assert r.exit_code == 0 and "100.0" in r.output, r.output


def test_the_greedy_baseline_prompts_in_the_tables_format(tmp_path, monkeypatch):
    src = write_pairs(tmp_path / "pairs.jsonl", 2)
    out = str(tmp_path / "o.duckdb")
    score(src, ScriptedEngine(gold_judge("selene")),
          JudgeSettings(samples=2, judge_format="selene"), output=out)
    engine = ScriptedEngine(gold_judge("selene"))
    judge_with(monkeypatch, lambda: engine)
    r = CliRunner().invoke(main, ["eval", out, "--greedy-baseline", "--model", "judge.gguf"])
    assert r.exit_code == 0, r.output
    prompts = [r.messages[-1]["content"] for call in engine.calls for r in call]
    assert prompts and all(p.startswith("You are a helpful assistant in evaluating") for p in prompts)
    assert set(stored(out, "SELECT letter FROM greedy")) <= {("A",), ("B",)}


def test_the_python_api_takes_judge_format(tmp_path):
    import rmjudge

    rows = [{"prompt": "2+2?", "chosen": "GOOD 4", "rejected": "BAD 5"}]
    table = rmjudge.score(rows, engine=ScriptedEngine(gold_judge("auto-j")),
                          judge_format="auto-j", samples=2,
                          output=str(tmp_path / "api.duckdb"))
    assert list(table["correct"]) == [True]


# -- found by trying to break it ----------------------------------------------------------------

def test_rank_counts_tie_verdicts_as_ties(tmp_path):
    from rmjudge.rank import rank

    src = tmp_path / "bon.jsonl"
    src.write_text(json.dumps({"id": "p1", "prompt": "Q?",
                               "responses": ["a q=1", "b q=2", "c q=3"]}) + "\n")
    out = str(tmp_path / "r.duckdb")
    rank(str(src), out, engine=ScriptedEngine(lambda req, i: "Tie\n\nEqual."),
         judge=JudgeSettings(samples=1, judge_format="pandalm"))
    assert stored(out, "SELECT DISTINCT wins, losses, ties, unjudged FROM rankings") == [
        (0, 0, 2, 0)]


def test_a_format_file_prompt_gets_the_conversation_turns(tmp_path):
    path = tmp_path / "turns.toml"
    path.write_text(GOOD_FILE.replace("Q: {{ context }}",
                                      "Q: {{ context }} turns={{ messages|length }}"))
    fmt = judge_format(str(path))
    conv = ({"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
            {"role": "user", "content": "again?"})
    body = fmt.pref_messages(conv, "r1", "r2", "", PromptStyle(None, None, fmt))[-1]["content"]
    assert "turns=3" in body


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace("Q: {{ context }}", "{% if criteria %}Q: {{ context }}{% endif %}"),
     "without --criteria"),
    (lambda t: t.replace('labels = ["X", "Y"]', 'title = "a\\nb"'), "title"),
    (lambda t: t.split("[verdict]")[0].replace('name = "my-judge"',
                                               'name = "my-judge"\nverdict = "x"'),
     "must be a table"),
    (lambda t: t.replace("where = \"last\"", 'force = ""\nforce_choices = ["X", "Y"]'),
     "verdict.force"),
    (lambda t: t.replace("where = \"last\"", 'force_choices = ["X", "Y"]'),
     "verdict.force_choices"),
    (lambda t: "x = " + "[" * 1000 + "]" * 1000 + "\n" + t, "too deeply"),
])
def test_more_bad_format_files_are_one_error(tmp_path, edit, key):
    path = tmp_path / "judge.toml"
    path.write_text(edit(GOOD_FILE))
    with pytest.raises(JudgeFormatError) as exc:
        judge_format(str(path))
    assert key in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_a_catastrophic_pattern_is_a_parse_failure_in_bounded_time(tmp_path):
    import time

    path = tmp_path / "judge.toml"
    path.write_text(GOOD_FILE.replace("first = 'WIN-X'", "first = '(a+)+$'"))
    fmt = judge_format(str(path))
    started = time.monotonic()
    assert fmt.parse("a" * 40 + "!") is None
    assert time.monotonic() - started < 10  # unbounded, this search would run for days


def test_the_default_format_spelled_none_is_the_default_and_empty_is_refused(tmp_path):
    from rmjudge.core.settings import SettingsError

    assert JudgeSettings(judge_format=None).as_dict() == JudgeSettings().as_dict()
    with pytest.raises(SettingsError, match="--judge-format"):
        JudgeSettings(judge_format="")


def test_majority_and_entropy_count_tie_votes(tmp_path):
    from rmjudge.analysis.tables import open_judged
    from rmjudge.analysis.metrics import load_frame

    answers = ["Tie", "Tie", "2"]
    src = write_pairs(tmp_path / "pairs.jsonl", 1)
    out = str(tmp_path / "o.duckdb")
    score(src, ScriptedEngine(lambda req, i: answers[i]),
          JudgeSettings(samples=3, judge_format="pandalm", orders="ab"), output=out)
    with open_judged(out) as t:
        frame = load_frame(t, [])
    assert list(frame["majority_ab"]) == ["tie"] and list(frame["first_ab"]) == ["tie"]


def test_a_prompt_that_fails_for_one_pair_fails_that_pair_only(tmp_path):
    path = tmp_path / "judge.toml"
    path.write_text(GOOD_FILE.replace("Q: {{ context }}",
                                      "Q: {{ context }}{% if 'BAD answer 1' in response1 %}"
                                      "{{ 1 / 0 }}{% endif %}"))
    src = write_pairs(tmp_path / "pairs.jsonl", 3)
    out = str(tmp_path / "o.duckdb")
    score(src, ScriptedEngine(lambda req, i: "WIN-X"),
          JudgeSettings(samples=1, judge_format=str(path)), output=out)
    assert stored(out, "SELECT count(*) FROM pairs") == [(2,)]
    reasons = stored(out, "SELECT id, reason FROM errors")
    assert [r[0] for r in reasons] == ["p1"] and "prompt could not be made" in reasons[0][1]


def test_token_ends_follow_the_decoded_text_when_the_bytes_were_not_utf8():
    from rmjudge.engine.sampler import _token_ends  # noqa: PLC2701 - the sampler's own helper

    raw = b"\xff\xff [[A]]"
    text = raw.decode("utf-8", errors="replace")
    ends = _token_ends(raw, text, [1, 2, 3, 8])
    assert ends == [3, 6, 7, 12] and len(text.encode()) == 12
