"""RM-Bench (THU-KEG/RM-Bench, `data/total_dataset.json`): id, prompt, chosen[3], rejected[3],
domain (chat, code, math, safety-refuse, safety-response). The three responses of each side are,
in order, concise; detailed plain text; detailed markdown.

Official scoring (THU-KEG/RM-Bench `scripts/utils.py` `compute_accuracy`): every chosen variant
i is compared with every rejected variant j, a 3 x 3 matrix per domain whose cell (i, j) is the
share of the domain's prompts where chosen i beats rejected j (strictly: a tie is not a win).
Hard = mean of the cells above the diagonal (chosen plainer than rejected), normal = the
diagonal, easy = below it. Domains are chat, math, code and safety (both safety subdomains);
a domain's score is the mean of its hard, normal and easy; the totals are the means over
domains of hard, normal, easy and of the domain scores.

rmjudge judges each cell as one pair (id `ID/ij`) in both orders; a cell scores the mean of its
order scores, each 1 correct, 0 wrong or without a verdict (the official strict comparison).
"""

from __future__ import annotations

from typing import Any, Iterator

from rmjudge.bench.base import BenchResult, Benchmark, Cell, Item, RowProblem, mean, text

DOMAINS = ("chat", "math", "code", "safety")
STYLES = ("concise", "detailed", "markdown")
MISSING = 0.0


def domain_of(domain: str) -> str | None:
    return next((d for d in DOMAINS if domain.startswith(d)), None)


def matrix_scores(items: list[Item]) -> dict[str, float | None]:
    """hard / normal / easy / avg of one domain's items (cells of the 3 x 3 matrix)."""
    cells: dict[tuple[int, int], list[float]] = {}
    for it in items:
        cells.setdefault((it.fields["chosen_style"], it.fields["rejected_style"]), []).append(
            it.pooled(MISSING))
    acc = {ij: mean(v) for ij, v in cells.items()}
    part = {
        "hard": mean(v for (i, j), v in acc.items() if i < j),
        "normal": mean(v for (i, j), v in acc.items() if i == j),
        "easy": mean(v for (i, j), v in acc.items() if i > j),
    }
    part["avg"] = mean(v for v in part.values() if v is not None)
    return part


class RMBench(Benchmark):
    name = "rmbench"
    title = "RM-Bench"
    layout = ("a JSON array or JSON Lines of {id, prompt, chosen: [3], rejected: [3], domain} "
              "(data/total_dataset.json)")
    rule = ("3 x 3 chosen/rejected style matrix per domain, cell = share of prompts won (mean "
            "of both orders, no verdict = 0); hard above the diagonal, normal on it, easy below; "
            "totals = means over chat, math, code, safety")

    def convert(self, n: int, obj: dict[str, Any], fields: dict[str, Any]) -> Iterator[dict]:
        prompt = text(obj, "prompt")
        domain = text(obj, "domain")
        if domain_of(domain) is None:
            raise RowProblem(f"domain {domain!r} is not one of {', '.join(DOMAINS)} (or a "
                             "subdomain of them)")
        chosen, rejected = obj.get("chosen"), obj.get("rejected")
        for col, v in (("chosen", chosen), ("rejected", rejected)):
            if not (isinstance(v, list) and len(v) == 3
                    and all(isinstance(x, str) and x.strip() for x in v)):
                raise RowProblem(f"column {col!r} must be a list of 3 non-empty responses "
                                 "(concise, detailed, markdown)")
        item = str(obj["id"]) if obj.get("id") is not None else str(n)
        for i in range(3):
            for j in range(3):
                yield {"id": f"{item}/{i}{j}", "prompt": prompt, "chosen": chosen[i],
                       "rejected": rejected[j], "item": item, "domain": domain,
                       "chosen_style": i, "rejected_style": j}

    def score(self, items: list[Item]) -> BenchResult:
        by_domain: dict[str, list[Item]] = {}
        for it in items:
            by_domain.setdefault(domain_of(it.fields["domain"]) or "", []).append(it)
        per = {d: matrix_scores(by_domain[d]) for d in DOMAINS if d in by_domain}
        total = {k: mean(p[k] for p in per.values() if p[k] is not None)
                 for k in ("hard", "normal", "easy", "avg")}
        n = {d: len({it.fields["item"] for it in by_domain[d]}) for d in per}
        prompts = sum(n.values())
        cells = [Cell(d, per[d]["avg"], n[d]) for d in per]
        cells += [Cell(k, total[k], prompts) for k in ("easy", "normal", "hard")]
        score = Cell("RM-Bench", total["avg"], prompts)
        return self.result(items, [score], cells + [score])
