"""The naive path: llama-cpp-python's `Llama.create_completion`, one sample at a time.

This is how most tools drive llama.cpp. It exists as the benchmark baseline and as a
cross-check of the batched engine's prompts, not for production use. With `logprobs=False`
it does not ask for token log-probabilities (then every confidence is unknown and the anchor
is the first parsed rollout, equivalent to a random anchor since rollouts are i.i.d.).

Prompts are sent as token ids from `Tokenizer.encode_prompt` (template text parses special
tokens, the data's text does not), never as text for llama.cpp to re-tokenize.
"""

from __future__ import annotations

import math

import numpy as np

from rmjudge.engine.base import Engine
from rmjudge.engine.cpu_load import default_threads
from rmjudge.engine.forcing import force_plan, forced_probs
from rmjudge.engine.vocab import Tokenizer, model_info
from rmjudge.models.llamacpp import llama_backend, plain_weight_buffers
from rmjudge.models.resolve import local_model
from rmjudge.prompts import RESULT_OPEN
from rmjudge.core.settings import EngineSettings, JudgeSettings
from rmjudge.core.types import Generation, GenRequest


class NaiveEngine(Engine):
    def __init__(self, settings: EngineSettings, logprobs: bool = True):
        path = local_model(settings)
        llama_cpp = llama_backend()
        self.l = llama_cpp
        self.logprobs = logprobs
        threads = settings.threads or default_threads()
        with plain_weight_buffers():
            self.llm = llama_cpp.Llama(
                model_path=path, n_ctx=settings.n_ctx or 4096, n_threads=threads,
                n_threads_batch=threads, n_batch=settings.batch_size, logits_all=logprobs,
                verbose=False, seed=0, lora_path=settings.lora, lora_scale=settings.lora_scale,
            )
        self.info = model_info(self.llm.model, path, settings.lora, settings.lora_scale)
        self.tok = Tokenizer(llama_cpp, self.llm.model, self.info)
        self._generated = 0
        self.prompt_tokens_evaluated = 0

    @property
    def generated_tokens(self) -> int:
        return self._generated

    def preferred_pairs_in_flight(self, settings: JudgeSettings) -> int:
        return 1

    def count_tokens(self, requests: list[GenRequest]) -> list[int]:
        return [len(self.tok.prompt_tokens(r)) for r in requests]

    def _reused(self, tokens: list[int]) -> int:
        """Tokens `Llama` keeps from its previous evaluation (its prefix cache)."""
        old = self.llm.input_ids[: self.llm.n_tokens]
        n = 0
        for a, b in zip(old, tokens):
            if a != b:
                break
            n += 1
        return min(n, len(tokens) - 1)

    def generate(self, requests: list[GenRequest]) -> list[list[Generation]]:
        out = []
        for req in requests:
            prompt = self.tok.prompt_tokens(req)
            gens = []
            for i in range(req.n):
                self.prompt_tokens_evaluated += len(prompt) - self._reused(prompt)
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
                    if RESULT_OPEN in text:
                        text += req.stop[0]
                n_tok = r["usage"]["completion_tokens"]
                if self.logprobs and ch.get("logprobs"):
                    lps = [float(x) for x in ch["logprobs"]["token_logprobs"] if x is not None]
                else:
                    lps = [math.nan] * n_tok
                g = Generation(text, lps, finish)
                self._force(req, prompt, g)
                self._generated += n_tok
                gens.append(g)
            out.append(gens)
        return out

    def _force(self, req: GenRequest, prompt: list[int], g: Generation) -> None:
        """Forced verdict: evaluate prompt + text + continuation, read the two choices' logits."""
        if req.force is None:
            return
        plan = force_plan(self.tok, req.force, g.text)
        if plan is None:
            return
        feed, (c1, c2) = plan
        tokens = prompt + self.tok.encode(g.text, special=False) + feed
        self.prompt_tokens_evaluated += len(tokens)
        self.llm.reset()
        self.llm.eval(tokens)
        row = np.ctypeslib.as_array(self.l.llama_get_logits_ith(self.llm.ctx, -1),
                                    shape=(self.tok.n_vocab,))
        shifted = row - row.max()
        lse = float(np.log(np.exp(shifted).sum()))
        g.forced_probs, g.forced_logprob = forced_probs(float(shifted[c1]) - lse,
                                                        float(shifted[c2]) - lse)
