"""Parse rates of the rollouts and reflections in run stores (docs/training.md, "Prompt format 3").

    python benchmarks/refl_parse_rate.py STORE.duckdb [STORE.duckdb ...] [--json]

For each store: the generations of each stage (rollouts, reflections), how many of them hold a
parseable verdict (`rmjudge.prompts.parse_verdict` on the stored text, with the stage's task:
"Response X ..." for rollouts, "Critique X ..." for reflections), and how many stopped at the
token limit. The store's recorded prompt format and LoRA adapter are printed beside them. Run the
scoring with `--no-forced` so that every verdict is the model's own text.
"""

from __future__ import annotations

import argparse
import json

import duckdb

from rmjudge.prompts import parse_verdict

TASK = {"rollout": "pref", "reflection": "refl"}


def rates(path: str) -> dict:
    con = duckdb.connect(path, read_only=True)
    try:
        settings = json.loads(con.execute(
            "SELECT value FROM meta WHERE key = 'settings'").fetchone()[0])
        lora = con.execute("SELECT lora_path FROM runs ORDER BY run_id DESC LIMIT 1").fetchone()
        rows = con.execute('SELECT stage, text, finish_reason FROM samples').fetchall()
    finally:
        con.close()
    out = {"store": path, "prompt_format": settings.get("prompt_format"),
           "lora": lora[0] if lora else None}
    for stage, task in TASK.items():
        mine = [(t, f) for s, t, f in rows if s == stage]
        parsed = sum(parse_verdict(t or "", task) is not None for t, _ in mine)
        out[stage] = {"generations": len(mine), "parsed": parsed,
                      "parse_rate": round(parsed / len(mine), 4) if mine else None,
                      "at_token_limit": sum(f == "length" for _, f in mine)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+")
    ap.add_argument("--json", action="store_true", help="One JSON object per store.")
    a = ap.parse_args()
    for path in a.stores:
        r = rates(path)
        if a.json:
            print(json.dumps(r))
            continue
        print(f"{path}: prompt format {r['prompt_format']}, LoRA {r['lora']}")
        for stage in TASK:
            s = r[stage]
            rate = "-" if s["parse_rate"] is None else f"{s['parse_rate']:.1%}"
            print(f"  {stage:10} {s['parsed']}/{s['generations']} parsed ({rate}), "
                  f"{s['at_token_limit']} at the token limit")


if __name__ == "__main__":
    main()
