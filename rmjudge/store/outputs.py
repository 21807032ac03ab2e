"""A run's output, checked before any work (`rmjudge score`/`eval`, before a model loads): not
the input itself nor a file a folder or glob input would read back
(`rmjudge.files.outputs.check_output_is_not_input`), not a file rmjudge did not create, not a
store or export another run is writing."""

from __future__ import annotations

import os

from rmjudge.files.errors import StoreError
from rmjudge.files.locks import check_exports_not_busy, check_not_busy
from rmjudge.files.outputs import check_output_is_not_input
from rmjudge.files.paths import output_format, sidecar, store_path
from rmjudge.store.ownership import refuse_foreign


def check_output(source: str, out: str) -> None:
    """Everything about the output that can be refused before a model loads: the input itself,
    a file rmjudge did not create, a store another run is writing."""
    check_output_is_not_input(source, out)
    db = store_path(out)
    check_exports_not_busy(out)  # named as given (a Parquet/JSONL output's store is hidden)
    check_not_busy(db)
    refuse_foreign(db)  # refused again when the store opens
    if output_format(out) != "duckdb" and not os.path.exists(db):
        for f in (out, sidecar(out, "samples"), sidecar(out, "errors")):
            if os.path.exists(f):
                raise StoreError(f"{f} exists and no rmjudge run wrote it (its run store {db} "
                                 "is missing); it is left untouched: remove it or choose "
                                 "another -o")
