"""Safe files: the only code that creates, writes, renames or deletes files and folders.

- `errors`: `StoreError`, `StoreBusyError`, and an I/O failure as one `DiskError` naming the file;
- `paths`: output naming (format, the store behind an export, sidecars, what a writer locks);
- `locks`: `Lock` (`X.lock` beside a file), busy checks, the platform check;
- `heads`: what a file's first bytes say (a DuckDB database or not);
- `temps`: temporaries beside a file, each with its lock, and the clean-up of stale ones;
- `folders`: creating folders, placing and swapping finished folders, removing what rmjudge made;
- `atomic`: whole files written beside their target and moved into place;
- `tempdirs`: `TempDir` and `save_folder`, a folder built beside its destination (for other
  libraries' savers) and moved in whole, and `scratch`, a work folder removed afterwards;
- `outputs`: the guards of `rmjudge report`, `filter` and `jury` outputs;
- `overwrite`: where `rmjudge-train` and `rmjudge-export` may write;
- `staging`: output folders built aside and their files moved in;
- `cache`: small JSON tables under the user's cache folder.

Every name other packages use (all but the `cache` module's and the few the modules share among
themselves: `temps.lock_temp`, `locks.export_lock`, ...) is importable from `rmjudge.files`
itself; the DuckDB run store is `rmjudge.store`.
"""

from __future__ import annotations

from rmjudge.files.atomic import (place_copy, write_file, write_json, write_lines, write_new,
                                  write_new_data, write_once, write_produced, write_query_file)
from rmjudge.files.errors import StoreBusyError, StoreError, disk_error, first_line
from rmjudge.files.folders import (make_dir, place_dir, prepare_dir, remove_export, remove_file,
                                   remove_tree, replace_dir, replace_file, swap_dir)
from rmjudge.files.heads import file_head, is_duckdb_file
from rmjudge.files.locks import (Lock, PlatformError, busy_export, check_exports_not_busy,
                                 check_not_busy, check_platform)
from rmjudge.files.outputs import (OutputError, check_not_sidecar, check_output_is_not_input,
                                   guard_output)
from rmjudge.files.overwrite import (MARKER, OverwriteError, check_distinct, check_file_target,
                                     check_folder_target, check_not_input, marked_by,
                                     write_marker)
from rmjudge.files.paths import (export_files, legacy_store_path, output_format, sidecar,
                                 sidecar_role, store_path, table_stem)
from rmjudge.files.staging import install_folder, temp_folder_beside, write_folder
from rmjudge.files.tempdirs import TempDir, save_folder, scratch
from rmjudge.files.temps import clean_folder_temps, clean_stale_temps

__all__ = [
    "Lock",
    "MARKER",
    "OutputError",
    "OverwriteError",
    "PlatformError",
    "StoreBusyError",
    "StoreError",
    "TempDir",
    "busy_export",
    "check_distinct",
    "check_exports_not_busy",
    "check_file_target",
    "check_folder_target",
    "check_not_busy",
    "check_not_input",
    "check_not_sidecar",
    "check_output_is_not_input",
    "check_platform",
    "clean_folder_temps",
    "clean_stale_temps",
    "disk_error",
    "export_files",
    "file_head",
    "first_line",
    "guard_output",
    "install_folder",
    "is_duckdb_file",
    "legacy_store_path",
    "make_dir",
    "marked_by",
    "output_format",
    "place_copy",
    "place_dir",
    "prepare_dir",
    "remove_export",
    "remove_file",
    "remove_tree",
    "replace_dir",
    "replace_file",
    "save_folder",
    "scratch",
    "sidecar",
    "sidecar_role",
    "store_path",
    "swap_dir",
    "table_stem",
    "temp_folder_beside",
    "write_file",
    "write_folder",
    "write_json",
    "write_lines",
    "write_marker",
    "write_new",
    "write_new_data",
    "write_once",
    "write_produced",
    "write_query_file",
]
