"""Text reports for a terminal: blocks of prose lines and fixed-width rows, fitted to a width."""
from __future__ import annotations

import re

_NUMERIC = re.compile(r"[+\-]?\d+(?:\.\d+)?[%d]?|-")


def fitted(blocks: list[tuple], width: int | None) -> str:
    """The blocks' lines joined; at a `width` they are wider than, each prose line wrapped at spaces
    and each block of rows that does not fit printed as a table (`tables_text.table_lines`, numbers
    aligned right), indented as the rows were, so that no value is split. A block is (lines, headers,
    rows, indent), or with a fifth item, the indexes of the columns that name a row (default the
    first): a table split in parts repeats them in each."""
    from ..tables_text import fit_line, fits, table_lines

    out: list[str] = []
    for lines, headers, rows, indent, *named in blocks:
        key = named[0] if named else (0,)  # the columns that say which row is which, in every part
        if headers is None or fits(lines, width):
            out += [fit_line(line, width) for line in lines]
            continue
        right = [header for index, header in enumerate(headers)
                 if rows and all(_NUMERIC.fullmatch(row[index]) for row in rows)]
        room = width - indent if width - indent >= 20 else width
        out += [(" " * (width - room) + line).rstrip() for line in table_lines(list(headers), rows, room, right, key)]
    return "\n".join(out)
