"""The Python API (docs/python.md): `score` and `score_batches` judge rows held in Python or
any input path and return pandas DataFrames; `open_store` reads a judged store's tables. The
package `rmjudge` re-exports them (lazily, so `import rmjudge` stays light).

- `options.py`: keyword arguments -> the run's `RunOptions` (`rmjudge.runs.setup.make_run_options`);
- `judging.py`: `score`, `score_batches` (a worker thread, chunks handed over as committed);
- `tables.py`: the result table's query, `JudgedStore` (`open_store`).
"""

from __future__ import annotations

from rmjudge.api.judging import score, score_batches
from rmjudge.api.tables import JudgedStore, open_store

__all__ = ["JudgedStore", "open_store", "score", "score_batches"]
