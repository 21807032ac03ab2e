"""The run store: the DuckDB database of a run, which only this package opens for writing (its
files are created, replaced and deleted through `rmjudge.files`).

- `schema`: the core tables and columns, run statuses, passthrough typing;
- `bulk`: rows into a table in one statement (and the row-at-a-time reference);
- `ownership`: which DuckDB files are rmjudge's stores (a foreign file is refused untouched);
- `outputs`: `check_output`, what may be given as a run's output;
- `run_store`: `Store`, an open and locked run store; its reads (`reads`: resume, the summary
  queries, exports) and writes (`writes`: pairs, columns, rankings, labels) apart;
- `assemble`: `NewStore` (a store built aside and moved into place), merge and Ray import;
- `rows_file`: rows written as a whole Parquet/JSONL file through an in-memory table.

Every public name is importable from `rmjudge.store` itself.
"""

from __future__ import annotations

from rmjudge.store.assemble import (BATCH_COLUMNS, NewStore, batch_columns, batch_judged,
                                    carry_human_labels, import_batches, import_stores,
                                    load_batch, recover_batches, write_batch)
from rmjudge.store.bulk import (
    column_types,
    delete_in,
    delete_in_each,
    insert_rows,
    insert_rows_each,
)
from rmjudge.store.outputs import check_output
from rmjudge.store.ownership import LEAVE_FIX, is_rmjudge_store
from rmjudge.store.rows_file import write_rows_file
from rmjudge.store.run_store import Store
from rmjudge.store.schema import (
    CORE_TABLES,
    ERROR_COLUMNS,
    FAILED,
    FINISHED,
    GREEDY_COLUMNS,
    HUMAN_LABEL_COLUMNS,
    RANKING_COLUMNS,
    INTERRUPTED,
    PAIR_COLUMNS,
    RESUME_FIX,
    RUNNING,
    RUN_COLUMNS,
    SAMPLE_COLUMNS,
    SCHEMA_VERSION,
    describe_differences,
    missing_core_tables,
    not_a_store_message,
    other_settings_message,
)

__all__ = [
    "BATCH_COLUMNS",
    "CORE_TABLES",
    "ERROR_COLUMNS",
    "FAILED",
    "FINISHED",
    "GREEDY_COLUMNS",
    "HUMAN_LABEL_COLUMNS",
    "RANKING_COLUMNS",
    "INTERRUPTED",
    "LEAVE_FIX",
    "NewStore",
    "PAIR_COLUMNS",
    "RESUME_FIX",
    "RUNNING",
    "RUN_COLUMNS",
    "SAMPLE_COLUMNS",
    "SCHEMA_VERSION",
    "Store",
    "batch_columns",
    "batch_judged",
    "carry_human_labels",
    "check_output",
    "column_types",
    "delete_in",
    "delete_in_each",
    "describe_differences",
    "import_batches",
    "import_stores",
    "insert_rows",
    "insert_rows_each",
    "is_rmjudge_store",
    "load_batch",
    "missing_core_tables",
    "not_a_store_message",
    "other_settings_message",
    "recover_batches",
    "write_batch",
    "write_rows_file",
]
