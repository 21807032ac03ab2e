"""RM-Bench (THU-KEG/RM-Bench, folder `data/`): `total_dataset.json` (every domain, each row
with a `domain` field) and the domain files it joins, `chat_filtered.json`,
`math_filtered.json`, `code_filtered.json`, `safety-refuse_filtered.json` and
`safety-response_filtered.json` (no `domain` field: the file name gives it). A row is
{id, prompt, chosen[3], rejected[3]}; the three responses of each side are, in order, concise;
detailed plain text; detailed markdown. Ids are numbered per domain file, so they repeat across
domains: an item is keyed by its domain and id (`DOMAIN/ID`), a cell by `DOMAIN/ID/ij`.

Official scoring (THU-KEG/RM-Bench `scripts/utils.py` `compute_accuracy`): every chosen variant
i is compared with every rejected variant j, a 3 x 3 matrix per domain whose cell (i, j) is the
share of the domain's prompts where chosen i beats rejected j (strictly: a tie is not a win).
Hard = mean of the cells above the diagonal (chosen plainer than rejected), normal = the
diagonal, easy = below it. Domains are chat, math, code and safety (both safety subdomains);
a domain's score is the mean of its hard, normal and easy; the totals are the means over
domains of hard, normal, easy and of the domain scores. The totals need all four domains (the
official code splits `total_dataset.json` into the four and fails on an empty one; on one
domain file it reports that file's hard, normal and easy only), so with a domain missing bench
shows them as n/a and says which domain is missing.

rmjudge judges each cell as one pair in both orders; a cell scores the mean of its order
scores, each 1 correct, 0 wrong or without a verdict (the official strict comparison).
"""

from __future__ import annotations

import os
from typing import Any, Iterator

from rmjudge.bench.base import (BenchError, BenchResult, Benchmark, Cell, Item, RowProblem, mean,
                                missing_parts, text)

DOMAINS = ("chat", "math", "code", "safety")
STYLES = ("concise", "detailed", "markdown")
MISSING = 0.0
TOTAL = "total_dataset.json"
# The published domain files, in total_dataset.json's order.
DOMAIN_FILES = tuple(f"{d}_filtered.json" for d in
                     ("chat", "code", "math", "safety-refuse", "safety-response"))


def domain_of(domain: str) -> str | None:
    return next((d for d in DOMAINS if domain.startswith(d)), None)


def file_domain(path: str) -> str | None:
    """The domain a published domain file holds, from its name (`safety-refuse_filtered.json`
    -> safety-refuse); None for another name (total_dataset.json carries a domain per row)."""
    stem = os.path.basename(path).rsplit(".", 1)[0].removesuffix("_filtered")
    return stem if domain_of(stem) is not None else None


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
    layout = ("data/total_dataset.json, a domain file such as data/chat_filtered.json, or the "
              "folder data/ (JSON arrays of {id, prompt, chosen: [3], rejected: [3]}, with "
              "`domain` in total_dataset.json)")
    rule = ("3 x 3 chosen/rejected style matrix per domain, cell = share of prompts won (mean "
            "of both orders, no verdict = 0); hard above the diagonal, normal on it, easy below; "
            "totals = means over chat, math, code, safety")

    def files(self, source: str) -> list[tuple[str, dict[str, Any]]]:
        """A file: itself (its name gives the domain of rows without one). The folder `data/`:
        total_dataset.json when it is there (the join of the domain files: reading both would
        read every item twice), else every published domain file it holds."""
        if not os.path.isdir(source):
            return [(source, {"domain": file_domain(source)} if file_domain(source) else {})]
        if os.path.isfile(os.path.join(source, TOTAL)):
            return [(os.path.join(source, TOTAL), {})]
        out = [(os.path.join(source, n), {"domain": file_domain(n)}) for n in DOMAIN_FILES
               if os.path.isfile(os.path.join(source, n))]
        if not out:
            raise BenchError(f"{source} holds neither {TOTAL} nor any of RM-Bench's domain files "
                             f"({', '.join(DOMAIN_FILES)}): give --data rmbench=PATH/data")
        return out

    def absent(self, source: str) -> list[str]:
        if not os.path.isdir(source) or os.path.isfile(os.path.join(source, TOTAL)):
            return []
        return [os.path.join(source, n) for n in (TOTAL,) + DOMAIN_FILES
                if not os.path.isfile(os.path.join(source, n))]

    def convert(self, n: int, obj: dict[str, Any], fields: dict[str, Any]) -> Iterator[dict]:
        prompt = text(obj, "prompt")
        named = fields.get("domain")
        if obj.get("domain") is None and named is None:
            raise RowProblem("no 'domain' column, and the file's name names no domain (give "
                             f"{TOTAL} or a domain file such as chat_filtered.json)")
        domain = text(obj, "domain") if obj.get("domain") is not None else named
        if domain_of(domain) is None:
            raise RowProblem(f"domain {domain!r} is not one of {', '.join(DOMAINS)} (or a "
                             "subdomain of them)")
        if named is not None and domain != named:
            raise RowProblem(f"domain {domain!r} in a file of domain {named!r}")
        chosen, rejected = obj.get("chosen"), obj.get("rejected")
        for col, v in (("chosen", chosen), ("rejected", rejected)):
            if not (isinstance(v, list) and len(v) == 3
                    and all(isinstance(x, str) and x.strip() for x in v)):
                raise RowProblem(f"column {col!r} must be a list of 3 non-empty responses "
                                 "(concise, detailed, markdown)")
        item = f"{domain}/{obj['id'] if obj.get('id') is not None else n}"
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
        note = missing_parts("RM-Bench total", DOMAINS, per, "items")
        total = {k: None if note else mean(p[k] for p in per.values() if p[k] is not None)
                 for k in ("hard", "normal", "easy", "avg")}
        n = {d: len({it.fields["item"] for it in by_domain[d]}) for d in per}
        prompts = sum(n.values())
        cells = [Cell(label, per[d][k], n[d]) for d in per
                 for label, k in ((d, "avg"), (f"{d} easy", "easy"), (f"{d} normal", "normal"),
                                  (f"{d} hard", "hard"))]
        cells += [Cell(k, total[k], prompts) for k in ("easy", "normal", "hard")]
        score = Cell("RM-Bench", total["avg"], prompts)
        notes = [note + " (so do easy, normal and hard; RM-Bench's compute_accuracy gives no "
                 "total without all four domains: the domain figures are shown)"] if note else []
        return self.result(items, [score], cells + [score], notes=notes)
