"""Whether a model file's numbers depend on how many rows a llama.cpp call carries, on this CPU.

rmjudge's samples are reproducible across `--parallel`, resumes and shards only where a
sequence's numbers depend on its own tokens alone (docs/engine.md, "Reproducible by
construction"). llama.cpp's CPU build multiplies some weight types with one kernel for few rows
and another for many, and the two round differently. This measures it for one file, with the
engine's own settings (plain weight buffers, flash attention off, one KV stream per sequence):

- decode width: one sequence's next-token logits when its decode call carries W sequences
  (copies of it), against W = 1;
- prompt cuts: the last token's logits of a prompt evaluated in two chunks, the last one of
  K tokens, against the whole prompt in one chunk.

It prints the largest absolute difference of each; 0 means the same bytes.

    python benchmarks/kernel_rows.py MODEL.gguf [--threads 2] [--prompt 48]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

WIDTHS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16)
CUTS = (2, 3, 4, 5, 6, 7, 8, 9, 12, 16)


class Probe:
    """One model, loaded as the engine loads it, and its contexts."""

    def __init__(self, path: str, threads: int, prompt: int):
        from rmjudge.engine.vocab import load_model
        from rmjudge.models.llamacpp import llama_backend

        self.L = L = llama_backend()
        self.model = load_model(path, vocab_only=False)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.threads, self.prompt = threads, prompt
        self.batch = L.llama_batch_init(512, 0, 1)

    def context(self, streams: int):
        from bench_decode_width import context

        return context(self.L, self.model, streams, self.prompt + 256, self.threads)

    def call(self, ctx, rows: list[tuple[int, int, int, bool]]) -> None:
        """One llama_decode of (token, position, sequence, logits) rows."""
        b = self.batch
        for i, (tok, pos, seq, out) in enumerate(rows):
            b.token[i], b.pos[i], b.n_seq_id[i] = tok, pos, 1
            b.seq_id[i][0] = seq
            b.logits[i] = out
        b.n_tokens = len(rows)
        if self.L.llama_decode(ctx, b) != 0:
            raise SystemExit("llama_decode failed")

    def logits(self, ctx, i: int) -> np.ndarray:
        return np.ctypeslib.as_array(self.L.llama_get_logits_ith(ctx, i),
                                     shape=(self.n_vocab,)).copy()

    def tokens(self) -> list[int]:
        return [100 + (i * 7) % 5000 for i in range(self.prompt)]

    def widths(self) -> dict[int, float]:
        """Sequence 0's next-token logits with W sequences in its decode call."""
        L, toks = self.L, self.tokens()
        ctx = self.context(max(WIDTHS))
        mem = L.llama_get_memory(ctx)
        self.call(ctx, [(t, i, 0, False) for i, t in enumerate(toks)])
        for s in range(1, max(WIDTHS)):
            L.llama_memory_seq_cp(mem, 0, s, -1, -1)
        out = {}
        for w in WIDTHS:
            self.call(ctx, [(777, len(toks), s, True) for s in range(w)])
            out[w] = self.logits(ctx, 0)
            for s in range(w):
                L.llama_memory_seq_rm(mem, s, len(toks), -1)
        L.llama_free(ctx)
        return {w: float(np.abs(v - out[1]).max()) for w, v in out.items() if w != 1}

    def cuts(self) -> dict[int, float]:
        """The prompt's last logits with its last K tokens in a chunk of their own."""
        toks, n = self.tokens(), self.prompt

        def last(split: int) -> np.ndarray:
            ctx = self.context(1)
            for a, b in ((0, split), (split, n)):
                if b > a:
                    self.call(ctx, [(toks[i], i, 0, i == n - 1) for i in range(a, b)])
            out = self.logits(ctx, -1)
            self.L.llama_free(ctx)
            return out

        whole = last(n)
        return {k: float(np.abs(last(n - k) - whole).max()) for k in CUTS if k < n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=48, help="prompt tokens (at most 500)")
    args = ap.parse_args()
    if not 17 <= args.prompt <= 500:
        raise SystemExit("--prompt must be 17 to 500")
    from rmjudge.core.errors import ModelError
    from rmjudge.engine.vocab import width_dependent_types
    from rmjudge.models.checks import check_gguf

    try:
        check_gguf(args.model)
        probe = Probe(args.model, args.threads, args.prompt)
    except ModelError as exc:
        raise SystemExit(f"Error: {exc}") from None
    print(f"{Path(args.model).name}: K-quant weights {width_dependent_types(args.model) or 'none'}")
    print("decode width W against 1:  " + "  ".join(f"{w}:{d:.2g}"
                                                    for w, d in probe.widths().items()))
    print("last chunk of K tokens:    " + "  ".join(f"{k}:{d:.2g}"
                                                    for k, d in probe.cuts().items()))


if __name__ == "__main__":
    main()
