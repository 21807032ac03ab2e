"""Human review of a judged table: export the pairs a person should look at
(`rmjudge review export`), read their labels back into the run store (`rmjudge review import`)
and measure the judge against them (`agreement.py`, shown by `eval` and `compare`).

- `select.py`: the selection rules (flipped, low-confidence, disagree-with-gold, jury-split,
  random:N) and the rows a reviewer sees (verdicts, vote shares, anchor analysis, gold label).
- `formats.py`: the file formats, both ways (CSV, JSONL, Label Studio, Argilla).
- `export.py`, `importer.py`: the two commands over those.
- `agreement.py`: judge-vs-human figures.

In every format "Response 1" is the store's slot A and "Response 2" its slot B; each exported
pair carries a key of both responses (`slot_key`), so an import into a store whose slots are
exchanged (chosen/rejected input judged with another seed) maps the labels back, and one whose
responses differ is refused per row. See docs/review.md.
"""
