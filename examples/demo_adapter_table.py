"""What a judge's run shows of the ReflectRM protocol, per run store (examples/train_demo_adapter.sh).

    python examples/demo_adapter_table.py STORE.duckdb [STORE.duckdb ...] [--json]

For each store: the rollouts with a parseable verdict of their own (`rmjudge.prompts.
parse_verdict` on the stored text; a forced verdict does not count), those cut at the token
limit, the pair-orders with an anchor, with self-reflection (reflections recorded in the samples
table) and decided by the shortcut, the reflections that parse, the accuracy over both orders
pooled and the share of pairs right in both orders (chance is 50% and 25%), the run's judging
time and generated tokens (the `runs` table), its prompt format and its LoRA adapter with its
sha256. Score with `--no-forced` to count only verdicts the model wrote itself (a forced verdict
is never counted as parsed either way).
"""

from __future__ import annotations

import argparse
import json

import duckdb

from rmjudge.prompts import parse_verdict


def measure(path: str) -> dict:
    con = duckdb.connect(path, read_only=True)
    try:
        samples = con.execute('SELECT pair_id, "order", stage, text, finish_reason, is_anchor '
                              "FROM samples").fetchall()
        pairs = con.execute("SELECT id, verdict_ab, verdict_ba, label, correct, shortcut_ab, "
                            "shortcut_ba FROM pairs").fetchall()
        run = con.execute("SELECT sum(wall_seconds), sum(generated_tokens), max(lora_path), "
                          "max(lora_sha256) FROM runs").fetchone()
        settings = json.loads(con.execute(
            "SELECT value FROM meta WHERE key = 'settings'").fetchone()[0])
    finally:
        con.close()
    rollouts = [s for s in samples if s[2] == "rollout"]
    refl = [s for s in samples if s[2] == "reflection"]
    orders = {(s[0], s[1]) for s in rollouts}
    anchored = {(s[0], s[1]) for s in rollouts if s[5]}
    reflected = {(s[0], s[1]) for s in refl}
    labelled = [p for p in pairs if p[3] in ("A", "B")]
    per_order = [(v, p[3]) for p in labelled for v in (p[1], p[2])]
    both = [p for p in labelled if p[1] == p[3] and p[2] == p[3]]

    def share(n: int, d: int) -> float | None:
        return round(n / d, 4) if d else None

    parsed = sum(parse_verdict(s[3] or "", "pref") is not None for s in rollouts)
    refl_parsed = sum(parse_verdict(s[3] or "", "refl") is not None for s in refl)
    return {
        "store": path, "prompt_format": settings.get("prompt_format"), "pairs": len(pairs),
        "pair_orders": len(orders),
        "rollouts": len(rollouts), "rollouts_parsed": parsed,
        "rollout_parse_rate": share(parsed, len(rollouts)),
        "rollouts_at_token_limit": sum(s[4] == "length" for s in rollouts),
        "orders_with_anchor": len(anchored), "orders_with_reflection": len(reflected),
        "orders_shortcut": sum(bool(p[5]) + bool(p[6]) for p in pairs),
        "reflections": len(refl), "reflections_parsed": refl_parsed,
        "reflection_parse_rate": share(refl_parsed, len(refl)),
        "reflections_at_token_limit": sum(s[4] == "length" for s in refl),
        "accuracy_both_orders_pooled": share(sum(v == g for v, g in per_order), len(per_order)),
        "right_in_both_orders": share(len(both), len(labelled)),
        "wall_seconds": round(run[0], 1) if run[0] is not None else None,
        "generated_tokens": run[1], "lora": run[2], "lora_sha256": run[3],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+")
    ap.add_argument("--json", action="store_true", help="One JSON object per store.")
    a = ap.parse_args()
    for path in a.stores:
        m = measure(path)
        if a.json:
            print(json.dumps(m))
            continue
        print(f"{path}: {m['pairs']} pairs, prompt format {m['prompt_format']}, LoRA {m['lora']} "
              f"({(m['lora_sha256'] or '-')[:12]})")
        print(f"  rollouts parsed      {m['rollouts_parsed']}/{m['rollouts']} "
              f"({m['rollout_parse_rate']}), {m['rollouts_at_token_limit']} at the token limit")
        print(f"  pair-orders          {m['pair_orders']}: anchor {m['orders_with_anchor']}, "
              f"self-reflection {m['orders_with_reflection']}, shortcut {m['orders_shortcut']}")
        print(f"  reflections parsed   {m['reflections_parsed']}/{m['reflections']} "
              f"({m['reflection_parse_rate']}), {m['reflections_at_token_limit']} at the token "
              "limit")
        print(f"  accuracy             {m['accuracy_both_orders_pooled']} (both orders pooled), "
              f"right in both orders {m['right_in_both_orders']}")
        print(f"  judging              {m['wall_seconds']} s, {m['generated_tokens']} tokens")


if __name__ == "__main__":
    main()
