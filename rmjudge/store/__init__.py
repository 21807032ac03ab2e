"""The run store: the only code that opens, locks, creates, replaces or deletes run files.

- `schema`: the core tables and columns, run statuses, passthrough typing;
- `bulk`: rows into a table in one statement (and the row-at-a-time reference);
- `paths`: output naming (format, the store behind an export, sidecars, export locks);
- `files`: locks, busy checks, the foreign-file refusal, disk errors and every atomic write;
- `run_store`: `Store`, an open and locked run store, with its writes and the summary queries;
- `assemble`: `NewStore` (a store built aside and moved into place), merge and Ray import;
- `outputs`: the checks on what may be given as an output.

Every public name is importable from `rmjudge.store` itself.
"""

from __future__ import annotations

from rmjudge.store.assemble import NewStore, import_batches, import_stores, write_batch
from rmjudge.store.bulk import (
    column_types,
    delete_in,
    delete_in_each,
    insert_rows,
    insert_rows_each,
)
from rmjudge.store.files import (
    LEAVE_FIX,
    StoreBusyError,
    StoreError,
    check_exports_not_busy,
    check_not_busy,
    check_writable_target,
    clean_stale_temps,
    disk_error,
    file_head,
    is_duckdb_file,
    is_rmjudge_store,
    make_dir,
    place_copy,
    place_dir,
    remove_export,
    remove_file,
    remove_tree,
    replace_file,
    write_file,
    write_json,
    write_once,
    write_produced,
    write_query_file,
    write_rows_file,
)
from rmjudge.store.outputs import OutputError, check_output, check_output_is_not_input, guard_output
from rmjudge.store.paths import export_files, legacy_store_path, output_format, sidecar, store_path
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
    "OutputError",
    "PAIR_COLUMNS",
    "RESUME_FIX",
    "RUNNING",
    "RUN_COLUMNS",
    "SAMPLE_COLUMNS",
    "SCHEMA_VERSION",
    "Store",
    "StoreBusyError",
    "StoreError",
    "check_exports_not_busy",
    "check_not_busy",
    "check_output",
    "check_output_is_not_input",
    "check_writable_target",
    "clean_stale_temps",
    "column_types",
    "delete_in",
    "delete_in_each",
    "describe_differences",
    "disk_error",
    "export_files",
    "file_head",
    "guard_output",
    "import_batches",
    "import_stores",
    "insert_rows",
    "insert_rows_each",
    "is_duckdb_file",
    "is_rmjudge_store",
    "legacy_store_path",
    "make_dir",
    "missing_core_tables",
    "not_a_store_message",
    "other_settings_message",
    "output_format",
    "place_copy",
    "place_dir",
    "remove_export",
    "remove_file",
    "remove_tree",
    "replace_file",
    "sidecar",
    "store_path",
    "write_batch",
    "write_file",
    "write_json",
    "write_once",
    "write_produced",
    "write_query_file",
    "write_rows_file",
]
