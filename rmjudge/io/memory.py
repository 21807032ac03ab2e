"""Rows held in Python as an input (the Python API's `rmjudge.score(data)`): a list of dicts, a
dict of columns, a pandas or polars DataFrame, a pyarrow Table, a `datasets.Dataset` or
`IterableDataset`, or any iterable of mappings (a generator, for data larger than memory).

`MemoryInput` reads them the way a file reader reads a file: `RawRow`s numbered from 1, each
value turned into a plain Python value (numpy scalars and arrays into numbers and lists, pandas
timestamps into datetimes, and, for DataFrames, NaN/NaT/NA into None, as Parquet nulls read),
so schema detection, `--map`, labels, ids and passthrough columns work as for any file. A row
that is not a mapping becomes an unreadable row (an error row), never a crash. Nothing is
imported here: the kind of data is told from its type's module, so pandas, pyarrow and
datasets are only used when the data is theirs.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from rmjudge.io.rows import InputError, RawRow

CHUNK_ROWS = 1024  # rows converted at once from a DataFrame or an Arrow table


def _module(obj: Any) -> str:
    return type(obj).__module__.split(".")[0]


def plain(v: Any, nan_is_null: bool = False) -> Any:
    """`v` as the plain Python value a file reader would give (see the module docstring)."""
    if v is None or isinstance(v, (str, bool, int)):
        return v
    if isinstance(v, float):
        return None if nan_is_null and v != v else v
    if isinstance(v, Mapping):
        return {k: plain(x, nan_is_null) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x, nan_is_null) for x in v]
    mod = _module(v)
    if mod == "numpy" and hasattr(v, "tolist"):  # a numpy scalar or array
        return plain(v.tolist(), nan_is_null)
    if mod == "pandas":
        name = type(v).__name__
        if name in ("NAType", "NaTType"):
            return None
        if hasattr(v, "to_pydatetime"):  # a Timestamp
            return v.to_pydatetime()
        if hasattr(v, "to_pytimedelta"):
            return v.to_pytimedelta()
    if mod == "pyarrow" and hasattr(v, "as_py"):
        return plain(v.as_py(), nan_is_null)
    return v


def _columns_dict(data: Mapping) -> int | None:
    """The row count of a dict of equal-length column lists, or None when `data` is not one."""
    lengths = set()
    for v in data.values():
        if isinstance(v, (str, bytes, Mapping)) or not hasattr(v, "__len__") \
                or not hasattr(v, "__iter__"):
            return None
        lengths.add(len(v))
    return lengths.pop() if len(lengths) == 1 else None


class MemoryInput:
    """Rows held in Python, read as an input (see the module docstring). `name` is how messages
    and the store's `runs` table name the input (default: what the data is, e.g. "a pandas
    DataFrame (3 rows)")."""

    def __init__(self, data: Any, name: str | None = None):
        self.data = data
        self.kind, self.count = self._classify(data)
        size = "" if self.count is None else \
            f" ({self.count} row{'' if self.count == 1 else 's'})"
        self.name = name or f"{self.kind}{size}"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"MemoryInput({self.name!r})"

    @staticmethod
    def _classify(data: Any) -> tuple[str, int | None]:
        mod, cls = _module(data), type(data).__name__
        if mod == "datasets" and isinstance(data, Mapping):  # DatasetDict / IterableDatasetDict
            splits = ", ".join(map(str, data)) or "none"
            first = next(iter(data), "train")
            raise InputError(f"a datasets {cls} holds several splits ({splits}); pass one of "
                             f"them, e.g. data[{first!r}]")
        if mod == "pandas" and hasattr(data, "columns"):
            cols = [str(c) for c in data.columns]
            dup = sorted({c for c in cols if cols.count(c) > 1})
            if dup:
                raise InputError(f"the DataFrame has duplicate column names ({', '.join(dup)}); "
                                 "rename them so each column has its own name")
            return "a pandas DataFrame", len(data)
        if mod == "polars" and hasattr(data, "iter_rows"):
            return "a polars DataFrame", len(data)
        if mod == "pyarrow" and hasattr(data, "to_batches"):
            return "a pyarrow Table", data.num_rows
        if mod == "datasets":
            n = len(data) if cls == "Dataset" else None
            return f"a datasets {cls}", n
        if isinstance(data, Mapping):
            n = _columns_dict(data)
            if n is None:
                raise InputError("a dict is read as columns (name -> list of values, all of the "
                                 "same length); for one row pass a list holding the dict")
            return "a dict of columns", n
        if isinstance(data, (str, bytes)) or not hasattr(data, "__iter__"):
            raise InputError(f"cannot read {cls} as rows: give a list of dicts, a DataFrame, a "
                             "datasets.Dataset, an iterable of dicts or a file path")
        n = len(data) if hasattr(data, "__len__") else None
        return ("a list of rows" if isinstance(data, (list, tuple)) else f"an iterable of rows "
                f"({cls})"), n

    def rows(self) -> Iterator[RawRow]:
        """The rows as `RawRow`s numbered from 1."""
        n = 0
        for obj in self._objects():
            n += 1
            if isinstance(obj, Mapping):
                yield RawRow(n, {str(k): v for k, v in obj.items()})
            else:
                text = repr(obj)
                yield RawRow(n, None, f"row {n} is {type(obj).__name__}, not a mapping of "
                             "column names to values", text[:1000])

    def _objects(self) -> Iterator[Any]:
        data, kind = self.data, self.kind
        if kind == "a pandas DataFrame":
            names = [str(c) for c in data.columns]
            for start in range(0, len(data), CHUNK_ROWS):
                part = data.iloc[start:start + CHUNK_ROWS]
                for values in part.itertuples(index=False, name=None):
                    yield {k: plain(v, nan_is_null=True) for k, v in zip(names, values)}
        elif kind == "a polars DataFrame":
            for row in data.iter_rows(named=True):
                yield {k: plain(v) for k, v in row.items()}
        elif kind == "a pyarrow Table":
            for batch in data.to_batches(max_chunksize=CHUNK_ROWS):
                yield from batch.to_pylist()
        elif kind == "a dict of columns":
            names = list(data)
            for values in zip(*(data[k] for k in names)):
                yield {str(k): plain(v) for k, v in zip(names, values)}
        else:
            for row in data:
                yield {k: plain(v) for k, v in row.items()} if isinstance(row, Mapping) else row
