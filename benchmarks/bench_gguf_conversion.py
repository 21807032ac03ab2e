"""A GGUF base model loaded as a transformers model and tokenizer (`quantize.hfio.
load_causal_lm`, what `rmjudge-train` and `rmjudge-export unpack` convert a GGUF with) with the
file parsed once (`gguf_parsed_once`) against transformers' own loader, which parses it three
times and builds gguf's tensor-name map once per module, in the same run, alternating.

    python benchmarks/bench_gguf_conversion.py [--model FILE.gguf] [--repeat 3]

Default model: the embedded judge's Q8_0 copy. Prints the CPU seconds of each load (best of
`--repeat`) and whether the two give the same weights and token ids. Nothing is asserted:
quantize/hfio.py and CHANGELOG.md record the figures with this command.
"""

from __future__ import annotations

import argparse
import contextlib
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import torch
    import transformers  # noqa: F401 - imported before the clock starts

    from rmjudge.quantize import hfio
    from rmjudge.models.resolve import default_model_path

    path = args.model or default_model_path()
    once = hfio.gguf_parsed_once
    best: dict[str, float] = {}
    loaded = {}
    for _ in range(args.repeat):
        for name, memo in (("parsed once", once), ("transformers' loader", contextlib.nullcontext)):
            hfio.gguf_parsed_once = memo
            try:
                t = time.process_time()
                loaded[name] = hfio.load_causal_lm(path, "float32")
                best[name] = min(best.get(name, float("inf")), time.process_time() - t)
            finally:
                hfio.gguf_parsed_once = once
    (m1, t1), (m2, t2) = loaded["parsed once"], loaded["transformers' loader"]
    theirs = m2.state_dict()
    same = all(torch.equal(v, theirs[k]) for k, v in m1.state_dict().items())
    text = "<|im_start|>user\nWhich response is better, 1 or 2?<|im_end|>"
    same_ids = t1(text)["input_ids"] == t2(text)["input_ids"]
    print(f"model: {path}")
    for name, sec in best.items():
        print(f"  {name:22s} {sec:6.1f} s of CPU (best of {args.repeat})")
    speedup = best["transformers' loader"] / best["parsed once"]
    print(f"  speed-up {speedup:.2f}x; same weights: {same}; same token ids: {same_ids}")


if __name__ == "__main__":
    main()
