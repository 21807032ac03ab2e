"""The naive path: llama-cpp-python's `Llama.create_completion`, one sample at a time.

This is how most tools drive llama.cpp. It exists as the benchmark baseline and as a
cross-check of the batched engine's prompts, not for production use. With `logprobs=False`
it does not ask for token log-probabilities (then every confidence is unknown and the anchor
is the first parsed rollout, equivalent to a random anchor since rollouts are i.i.d.).
"""

from __future__ import annotations

import math
import os

from rmjudge.engine.llama import Tokenizer, _info_from_model, _llama
from rmjudge.models import resolve_model
from rmjudge.settings import EngineSettings, JudgeSettings
from rmjudge.types import Generation, GenRequest


class NaiveEngine:
    def __init__(self, settings: EngineSettings, logprobs: bool = True):
        import llama_cpp

        path = resolve_model(settings.model)
        _llama()
        self.logprobs = logprobs
        self.llm = llama_cpp.Llama(
            model_path=path, n_ctx=settings.n_ctx or 4096, n_threads=settings.threads or os.cpu_count(),
            n_batch=settings.batch_size, logits_all=logprobs, verbose=False, seed=0,
            lora_path=settings.lora, lora_scale=settings.lora_scale,
        )
        self.info = _info_from_model(llama_cpp, self.llm.model, path, settings.lora)
        self.tok = Tokenizer(llama_cpp, self.llm.model, self.info)
        self._generated = 0

    @property
    def generated_tokens(self) -> int:
        return self._generated

    def preferred_pairs_in_flight(self, settings: JudgeSettings) -> int:
        return 1

    def count_tokens(self, requests: list[GenRequest]) -> list[int]:
        return [len(self.tok.prompt_tokens(r)) for r in requests]

    def generate(self, requests: list[GenRequest]) -> list[list[Generation]]:
        out = []
        for req in requests:
            prompt = self.tok.render(req.messages, req.assistant_prefix)
            gens = []
            for i in range(req.n):
                r = self.llm.create_completion(
                    prompt, max_tokens=req.max_tokens, temperature=req.temperature,
                    top_p=req.top_p, top_k=0, min_p=0.0, repeat_penalty=1.0,
                    seed=(req.seed + i) % (2**31), stop=list(req.stop),
                    logprobs=1 if self.logprobs else None,
                )
                ch = r["choices"][0]
                text = ch["text"]
                finish = "stop" if ch["finish_reason"] == "stop" else "length"
                if finish == "stop" and req.stop and not any(text.endswith(s) for s in req.stop):
                    # create_completion strips the stop string; put it back if it was hit
                    if "<Result>" in text:
                        text += req.stop[0]
                lps = []
                if self.logprobs and ch.get("logprobs"):
                    lps = [x for x in ch["logprobs"]["token_logprobs"] if x is not None]
                n_tok = r["usage"]["completion_tokens"]
                g = Generation(text, lps if self.logprobs else [0.0] * n_tok, finish)
                if not self.logprobs:
                    g.token_logprobs = [math.nan] * n_tok
                self._force(req, prompt, g)
                self._generated += n_tok
                gens.append(g)
            out.append(gens)
        return out

    def _force(self, req: GenRequest, prompt: str, g: Generation) -> None:
        """Forced verdict: evaluate prompt + text + continuation, read the two choices' logits."""
        if req.force is None:
            return
        cont = req.force.continuation(g.text)
        if cont is None:
            return
        import llama_cpp
        import numpy as np

        from rmjudge.engine.llama import common_prefix as _common_prefix

        t1 = self.tok.encode(cont + req.force.choices[0], special=False)
        t2 = self.tok.encode(cont + req.force.choices[1], special=False)
        k = _common_prefix([t1, t2])
        if not 0 < k < min(len(t1), len(t2)):
            return
        tokens = self.tok.encode(prompt + g.text) + t1[:k]
        self.llm.reset()
        self.llm.eval(tokens)
        n_vocab = self.tok.n_vocab
        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.llm.ctx, -1), shape=(n_vocab,))
        lse = float(np.log(np.exp(row - row.max()).sum()) + row.max())
        a, b = float(row[t1[k]]) - lse, float(row[t2[k]]) - lse
        m = max(a, b)
        e1, e2 = math.exp(a - m), math.exp(b - m)
        g.forced_probs = (e1 / (e1 + e2), e2 / (e1 + e2))
        g.forced_logprob = m
