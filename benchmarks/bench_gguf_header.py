"""Reading a GGUF's header: rmjudge's reader (`rmjudge.models.gguf_header`) against the `gguf`
package's `GGUFReader`, in the same run, on the same file.

    python benchmarks/bench_gguf_header.py [--model FILE] [--repeat 5]

Default file: the embedded model (SmolLM2-135M-Instruct Q4_1, 49,152 tokenizer tokens and
48,900 merges in its metadata). Each reader reads the whole header (metadata and tensor table)
`--repeat` times; the CPU seconds per read (best of the repeats) are printed, with a check that
both give the same tensor table. Nothing is asserted: the figures are printed (docs/speed.md
records them with this command).
"""

from __future__ import annotations

import argparse
import time


def best_cpu(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a GGUF file (default: the embedded model)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import gguf

    from rmjudge.models.gguf_header import read_gguf_header
    from rmjudge.models.resolve import default_model_path

    path = args.model or default_model_path()
    ours = read_gguf_header(path)
    ref = gguf.GGUFReader(path)
    same = [(t.name, t.shape, t.ggml_type) for t in ours.tensors] == [
        (t.name, tuple(int(d) for d in t.shape), int(t.tensor_type)) for t in ref.tensors]
    naive = best_cpu(lambda: gguf.GGUFReader(path), args.repeat)
    fast = best_cpu(lambda: read_gguf_header(path), args.repeat)
    print(f"{path}: {len(ours.tensors)} tensors, {len(ours.fields)} metadata keys; same tensor "
          f"table: {same}")
    print(f"gguf.GGUFReader          {naive:8.3f} s CPU per read")
    print(f"rmjudge read_gguf_header {fast:8.3f} s CPU per read  ({naive / fast:.0f}x)")


if __name__ == "__main__":
    main()
