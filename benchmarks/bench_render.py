"""Rendering a judge prompt in the bounded sandbox (rmjudge.prompts.render_limit) against Jinja2's
plain immutable sandbox, on the same template and messages.

    python benchmarks/bench_render.py --renders 2000

Renders the embedded judge's chat template (SmolLM2, from the GGUF rmjudge ships) around a
response-preference prompt of realistic length (a 500-word question, two 1,500-word
responses), `--renders` times each way in one process, checks that both give the same text,
and reports microseconds per render.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--renders", type=int, default=2000)
    args = ap.parse_args()

    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from rmjudge import prompts
    from rmjudge.engine.chat import sandbox_environment
    from rmjudge.prompts.render_limit import render_bounded
    from rmjudge.engine.vocab import ModelVocab
    from rmjudge.core.settings import EngineSettings

    source = ModelVocab(EngineSettings()).tok.template.source
    messages = list(prompts.pref_messages([{"role": "user", "content": "question " * 500}],
                                          "first " * 1500, "second " * 1500))
    variables = dict(messages=messages, add_generation_prompt=True, bos_token="", eos_token="")
    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(source)
    bounded = sandbox_environment().from_string(source)
    text = plain.render(**variables)
    if render_bounded(bounded, **variables) != text:
        raise SystemExit("the bounded sandbox rendered another text")
    for name, render in (("plain sandbox", lambda: plain.render(**variables)),
                         ("bounded sandbox", lambda: render_bounded(bounded, **variables))):
        start = time.perf_counter()
        for _ in range(args.renders):
            render()
        per = (time.perf_counter() - start) / args.renders
        print(f"{name}: {per * 1e6:.1f} us per render of {len(text)} characters")


if __name__ == "__main__":
    main()
