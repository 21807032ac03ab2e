"""`reflectrm`, the default judge format: ReflectRM's response-preference prompt (analysis,
then `<Result>Response X is better than Response Y</Result>`) and its critique-comparison
prompt, both in rmjudge.prompts, unchanged; a rollout's confidence is the paper's (the mean of
its lowest 10% token log-probabilities)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from rmjudge import prompts
from rmjudge.core.types import ForceSpec, Message
from rmjudge.prompts.formats import JudgeFormat, Verdict, lowest_share_mean
from rmjudge.prompts.native_format import reflectrm_reflection

if TYPE_CHECKING:
    from rmjudge.prompts import PromptStyle


class ReflectRMFormat(JudgeFormat):
    """ReflectRM's prompts and parser (rmjudge.prompts), with the paper's confidence."""

    def pref_messages(self, conversation: Sequence[Message], r1: str, r2: str, suffix: str,
                      style: "PromptStyle") -> tuple[Message, ...]:
        return prompts.pref_messages(conversation, r1, r2, suffix, style)

    def parse(self, text: str) -> Verdict | None:
        pred = prompts.parse_verdict(text, "pref")
        if pred is None:
            return None
        start = text.rfind(prompts.RESULT_OPEN)
        return Verdict(pred, start, len(text))

    def force_spec(self) -> ForceSpec | None:
        return prompts.force_spec("pref")

    def critique(self, text: str) -> str:
        return prompts.extract_analysis(text)

    def identity(self) -> str:
        return f"reflectrm/{prompts.PROMPT_FORMAT}"

    def confidence(self, logprobs, token_ends, text, fraction):
        return lowest_share_mean(logprobs, fraction)


REFLECTRM = ReflectRMFormat(
    name="reflectrm", title="ReflectRM (rmjudge's default)",
    source="arXiv 2604.07506; the prompts are rmjudge's own (rmjudge/prompts/__init__.py)",
    labels=("Response 1", "Response 2"), ties=False, rubric=True,
    reflection=reflectrm_reflection(),
    families=("any instruct model", "ReflectRM judges trained with rmjudge-train"),
    assistant_prefix=prompts.ASSISTANT_PREFIX, stop=prompts.STOP)
