"""Table files written in another schema (by an earlier loopmeter, or by hand), rewritten in their
table's by the next writer: values kept, types widened only where no value changes (`conform`)."""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import LoopmeterError
from . import registry
from .writing import conform



def rewrite(warehouse, name: str, bad: list[tuple[Path, str]]) -> None:
    """A new version of table `name` in which the files `bad` (with their problems) are rewritten in
    its schema; the other files kept. A file that is not a readable Parquet file of a sane size, or
    that cannot be rewritten without changing a value, stops the writer with one line naming it."""
    import polars as pl

    shown = {path: warehouse.shown(path) for path, _ in bad}  # as under the table's link, before it moves
    for path, problem in bad:
        refused = warehouse.unreadable_line(name, shown[path], problem)
        if refused is not None:
            raise LoopmeterError(refused)
    column = registry.table(name).partition
    partitions = warehouse.files_by_partition(name, column)
    groups: dict[str | None, list[Path]] = {}
    for path, problem in bad:
        value = path.parent.name[len(f"{column}="):] if partitions and path.parent.name.startswith(f"{column}=") else None
        if partitions and value not in partitions:
            raise LoopmeterError(f"{shown[path]}: {problem}, and it lies outside {name}'s partition folders; "
                                 "move it out of the warehouse")
        groups[value] = partitions[value] if value is not None else warehouse.table_files(name)
    try:
        with warehouse.build_table(name, column if partitions else None) as builder:
            for value, files in groups.items():
                frame = pl.concat([pl.read_parquet(file, hive_partitioning=False, glob=False) for file in files], how="diagonal_relaxed")
                frame = _with_added(frame, name)
                if value is not None:
                    if column in frame.columns and frame.height and frame[column].n_unique() == 1 and frame[column][0] != value:
                        raise ValueError(f"column {column} holds {frame[column][0]!r} in the folder {column}={value}")
                    frame = frame.with_columns(pl.lit(value, pl.String).alias(column))
                builder.write(pl.from_arrow(conform(frame, name, False, where=str(files[0]))))
            builder.keep_others = True
    except (ValueError, OSError, pl.exceptions.PolarsError) as error:
        path, problem = bad[0]
        raise LoopmeterError(f"{shown[path]}: {problem}, and it cannot be rewritten in {name}'s schema "
                             f"({str(error).splitlines()[0]}); move it out of the warehouse and ingest again") from None
    for path, problem in bad:
        print(f"loopmeter: note: {shown[path]}: {problem}; rewritten in {name}'s schema", file=sys.stderr)


def _with_added(frame, name: str):
    """`frame` with the columns its table declared after it was written (`Table.added`) that it lacks,
    null: the values it holds kept, the ones it never had unknown."""
    import polars as pl

    declared = registry.table(name)
    kinds = declared.kinds()
    return frame.with_columns(pl.lit(None, registry.polars_type(kinds[column])).alias(column)
                              for column in sorted(declared.added) if column not in frame.columns)
