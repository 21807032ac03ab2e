"""The built-in judge formats: ReflectRM's and seven open judges' own, each with its authors'
prompt (rmjudge.prompts.judge_texts), their parsing rule, its position labels and whether it
can say "tie". Sources (repository, file, commit, lines) are in docs/judges.md.

Each reader follows its authors' rule to the letter, quirks included (MT-Bench's parser, as
RewardBench runs it, checks "[[A]]" before "[[B]]", so an answer that writes both reads as A),
so that a judge is read as its authors read it; what the rule does not read is a parse
failure, never a tie. Prediction 1 is the response shown first (A, 1, Assistant 1, ...).

PandaLM, JudgeLM and Auto-J were prompted by their authors as plain completions, without a
chat template (Auto-J's prompt carries LLaMA 2's `[INST]` wrapper itself): rmjudge sends their
prompts the same way (`RawPrompt`). The others go through the model's own chat template.
"""

from __future__ import annotations

import re
from typing import Sequence

import regex

from rmjudge.core.types import Message, RawPrompt
from rmjudge.prompts import judge_texts as texts
from rmjudge.prompts.formats import TIE, JudgeFormat, Verdict
from rmjudge.prompts.native_format import NativeFormat, bounded_finditer
from rmjudge.prompts.reflectrm_format import REFLECTRM


def _lead(text: str) -> int:
    """Characters of white space before `text.strip()` starts."""
    return len(text) - len(text.lstrip())


def read_double_brackets(text: str) -> Verdict | None:
    """RewardBench's default rule (rewardbench/generative.py, process_judgement): "[[A]]"
    anywhere in the answer is A; else "[[B]]" anywhere is B; else no verdict."""
    for prediction, mark in ((1, "[[A]]"), (2, "[[B]]")):
        i = text.find(mark)
        if i >= 0:
            return Verdict(prediction, i, i + len(mark))
    return None


# run in the `regex` module with a time bound (native_format.bounded_finditer): on a long
# run of white space the authors' pattern backtracks for seconds
_PROMETHEUS = regex.compile(
    r"(?:\[RESULT\]|\[RESULT:\s*|\[Response\s+|\[Result\](?:\s+Response)?|\[Result:\s*|"
    r"(?:^|\n)Result:?\s*)\s*(A|B)(?:\])?(?:\s*$)", regex.IGNORECASE | regex.MULTILINE)


def read_prometheus(text: str) -> Verdict | None:
    """prometheus-eval's relative parser: the first "[RESULT] A|B" (or one of the forms it
    accepts: "[RESULT: A]", "[Response A]", "Result: B", ...) that ends its line."""
    found = bounded_finditer(_PROMETHEUS, text)
    if not found:
        return None
    m = found[0]
    return Verdict(1 if m.group(1).upper() == "A" else 2, m.start(1), m.end(1))


def read_pandalm(text: str) -> Verdict | None:
    """PandaLM's parser: the answer's first line (after stripping) is exactly "1" or "2", or
    "tie" in any case."""
    lead = _lead(text)
    first = text.strip().split("\n")[0]
    if first in ("1", "2"):
        return Verdict(int(first), lead, lead + len(first))
    if first.lower() == "tie":
        return Verdict(TIE, lead, lead + len(first))
    return None


def read_judgelm(text: str) -> Verdict | None:
    """JudgeLM's rule: the answer stripped (as its generation script does), its first line,
    commas read as spaces, is exactly two numbers split by one space (parse_score); the higher
    score wins and equal scores are a tie."""
    lead = _lead(text)
    line = text.strip().split("\n")[0]
    parts = line.replace(",", " ").split(" ")
    if len(parts) != 2:
        return None
    try:
        s1, s2 = float(parts[0]), float(parts[1])
    except ValueError:
        return None
    prediction = 1 if s1 > s2 else 2 if s2 > s1 else TIE
    return Verdict(prediction, lead, lead + len(line))


_SELENE = re.compile(r"\*\*Result:\*\*\s*(\w+)", re.DOTALL)


def read_selene(text: str) -> Verdict | None:
    """Atla's rule (RewardBench's Atla branch): the word after the first "**Result:**" is
    exactly "A" or "B"."""
    m = _SELENE.search(text)
    if m is None or m.group(1) not in ("A", "B"):
        return None
    return Verdict(1 if m.group(1) == "A" else 2, m.start(1), m.end(1))


_AUTOJ = "final decision is "


def read_auto_j(text: str) -> Verdict | None:
    """Auto-J's rule (extract_pariwise_result): after the last "final decision is " (as
    written), "Response 1", "Response 2" or "Tie" in any case."""
    stripped = text.strip()
    pos = stripped.rfind(_AUTOJ)
    if pos < 0:
        return None
    rest = stripped[pos + len(_AUTOJ):]
    start = _lead(text) + pos + len(_AUTOJ) + _lead(rest)
    rest = rest.strip().lower()
    for prediction, word in ((1, "response 1"), (2, "response 2"), (TIE, "tie")):
        if rest.startswith(word):
            return Verdict(prediction, start, start + len(word))
    return None


_PANDALM_SPECIAL = re.compile(texts.PANDALM_SPECIAL_TOKENS)


def _pandalm_prompt(slots: dict, conversation) -> str:
    """PandaLM's prompt (build_pandalm_prompt, no separate input): each response stripped and
    cleared of the special tokens PandaLM removes."""
    r1, r2 = (_PANDALM_SPECIAL.sub("", slots[k].strip()).strip()
              for k in ("response1", "response2"))
    return (f"{texts.PANDALM_HEAD}{slots['context']}\n\n### Response 1:\n{r1}\n\n"
            f"### Response 2:\n{r2}\n\n### Evaluation:\n")


class RawFormat(NativeFormat):
    """A format its authors prompt as a plain completion: the one message goes to the model
    without a chat template (`RawPrompt`); a system prompt, if any, is part of the text."""

    def pref_messages(self, conversation: Sequence[Message], r1: str, r2: str, suffix: str,
                      style) -> tuple[Message, ...]:
        return RawPrompt(super().pref_messages(conversation, r1, r2, suffix, style))


MT_BENCH = NativeFormat(
    name="mt-bench", title="MT-Bench pairwise judge prompt, as RewardBench runs it",
    source="allenai/reward-bench rewardbench/generative.py (prompt_v2, MTBENCH_V2, "
           "process_judgement)",
    labels=("Assistant A", "Assistant B"), ties=False,
    families=("any chat model as a judge (Qwen2.5/Qwen3, Llama 3.x Instruct, Mistral, Gemma)",),
    system=texts.MT_BENCH_SYSTEM, user=texts.MT_BENCH_USER, reader=read_double_brackets,
    rule="rewardbench-default: [[A]] anywhere, else [[B]] anywhere",
    force=("\n\n[[", ("A", "B")))

PROMETHEUS2 = NativeFormat(
    name="prometheus2", title="Prometheus 2, relative grading with a rubric",
    source="prometheus-eval/prometheus-eval libs/prometheus-eval/prometheus_eval "
           "(prompts.py REL_SYSTEM_PROMPT, RELATIVE_PROMPT_WO_REF; parser.py)",
    labels=("Response A", "Response B"), ties=False, rubric=True,
    families=("prometheus-7b-v2.0", "prometheus-8x7b-v2.0", "prometheus-bgb-8x7b-v2.0"),
    system=texts.PROMETHEUS2_SYSTEM, user=texts.PROMETHEUS2_USER,
    default_criteria=texts.PROMETHEUS2_RUBRIC, reader=read_prometheus,
    rule="prometheus-eval relative: first [RESULT] A|B (and its variants) ending a line",
    force=(" [RESULT]", (" A", " B")))

SKYWORK_CRITIC = NativeFormat(
    name="skywork-critic", title="Skywork-Critic pairwise preference prompt",
    source="Skywork/Skywork-Critic-Llama-3.1-8B model card (prompt_template); parsed by "
           "RewardBench's default rule",
    labels=("Assistant A", "Assistant B"), ties=False,
    families=("Skywork-Critic-Llama-3.1-8B", "Skywork-Critic-Llama-3.1-70B"),
    user=texts.SKYWORK_CRITIC_USER, reader=read_double_brackets,
    rule="rewardbench-default: [[A]] anywhere, else [[B]] anywhere", force=("[[", ("A", "B")))

PANDALM = RawFormat(
    name="pandalm", title="PandaLM pairwise evaluation",
    source="WeOpenML/PandaLM pandalm/utils/pandalm_inference.py (build_pandalm_prompt, "
           "parse_pandalm_response)",
    labels=("Response 1", "Response 2"), ties=True, families=("PandaLM-7B-v1",),
    user=texts.PANDALM_HEAD, render=_pandalm_prompt, reader=read_pandalm,
    rule=f"pandalm: first line 1 | 2 | tie; responses cleared of {texts.PANDALM_SPECIAL_TOKENS}",
    force=None)

JUDGELM = RawFormat(
    name="judgelm", title="JudgeLM pairwise scores (no reference answer)",
    source="baaivision/JudgeLM judgelm/llm_judge/common.py (conv_judge_pair, parse_score, "
           "translate_score_to_win_list)",
    labels=("Assistant 1", "Assistant 2"), ties=True,
    families=("JudgeLM-7B-v1.0", "JudgeLM-13B-v1.0", "JudgeLM-33B-v1.0"),
    user=texts.JUDGELM_USER, reader=read_judgelm,
    rule="judgelm: the stripped answer's first line two scores, higher wins, equal ties",
    force=None)

SELENE = NativeFormat(
    name="selene", title="Atla Selene-1-Mini pairwise preference",
    source="allenai/reward-bench rewardbench/generative.py (Atla_PROMPT, process_judgement's "
           "Atla branch)",
    labels=("Response A", "Response B"), ties=False,
    families=("Selene-1-Mini-Llama-3.1-8B",), user=texts.SELENE_USER, reader=read_selene,
    rule="atla: the word after the first **Result:** is A or B",
    force=("\n\n**Result:**", (" A", " B")))

AUTO_J = RawFormat(
    name="auto-j", title="Auto-J pairwise comparison with ties",
    source="GAIR-NLP/auto-j codes/usage/constants_prompt.py (pairwise_tie, llama2_wrapper); "
           "codes/usage/example.py (extract_pariwise_result)",
    labels=("Response 1", "Response 2"), ties=True,
    families=("autoj-13b", "autoj-bilingual-6b"), user=texts.AUTO_J_USER, reader=read_auto_j,
    rule="auto-j: after the last 'final decision is ', Response 1 | Response 2 | Tie",
    force=("\nSo, the final decision is Response", (" 1", " 2")))

BUILTIN: dict[str, JudgeFormat] = {f.name: f for f in (
    REFLECTRM, MT_BENCH, PROMETHEUS2, SKYWORK_CRITIC, PANDALM, JUDGELM, SELENE, AUTO_J)}
