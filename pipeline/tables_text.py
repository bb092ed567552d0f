"""Tables for people, in rich, that never cut a cell.

rich shrinks a table too wide for the terminal by cutting cells with "…", numbers included. These
tables never cut: on a terminal, text columns wrap at spaces first (a word that still does not fit
folds onto the next line), numbers keep their line as long as anything else can give way, and
when nothing can, they fold too, every digit shown. Off a terminal (a pipe, a file) every cell is
printed whole, as wide as the table is. Used by the reports and by `loopmeter sql`.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from rich.console import Console
from rich.table import Table
from rich.text import Text

_NUMBER = re.compile(r"[+\-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+\-]?\d+)?%?|[+\-]?inf(?:inity)?|nan", re.IGNORECASE)


def new_table(headers: Iterable[str], title: str | None = None, right: Iterable[str] = ()) -> Table:
    """A table of plain-text cells (no markup) that wrap rather than being cut; `right`: headers of
    columns aligned right. Fill it with `add_row`, print it with `print_table`."""
    right = set(right)
    table = Table(title=Text(title) if title else None, title_justify="left")
    for header in headers:
        table.add_column(Text(header), justify="right" if header in right else "left", overflow="fold")
    return table


def add_row(table: Table, cells: Iterable[str]) -> None:
    table.add_row(*(Text(cell) for cell in cells))


def _plain(cell: Any) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def _cell_len(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def _natural_width(column: list[str]) -> int:
    """The width a column (its header, then its cells) takes with every cell on its longest line."""
    return max([_cell_len(line) for cell in column for line in cell.split("\n")] + [1])


def _number_width(word: str) -> int:
    """The width of `word` if it is a number (1234, -0.5, +116.1807%, 1e-7, NaN; a comma or brackets
    around it count with it), else 0."""
    return _cell_len(word) if _NUMBER.fullmatch(word.strip(",;:()[]")) else 0


def _capped(floors: list[int], ceilings: list[int], available: int) -> list[int] | None:
    """Widths between each floor and ceiling summing to at most `available`, the widest columns
    narrowed first (every column at min(ceiling, T) for the largest cap T); None when the floors
    alone exceed it."""
    if sum(floors) > available:
        return None
    low, high = 0, max(ceilings, default=0)
    while low < high:
        middle = (low + high + 1) // 2
        if sum(max(floor, min(ceiling, middle)) for floor, ceiling in zip(floors, ceilings)) <= available:
            low = middle
        else:
            high = middle - 1
    widths = [max(floor, min(ceiling, low)) for floor, ceiling in zip(floors, ceilings)]
    spare = available - sum(widths)
    for index, (width, ceiling) in enumerate(zip(widths, ceilings)):  # what the cap leaves, a column each
        if spare > 0 and width < ceiling:
            widths[index] += 1
            spare -= 1
    return widths


def column_widths(cells: list[list[str]], available: int, padding: int = 0) -> tuple[list[int] | None, bool]:
    """The widths of the columns (each its header, then its cells, as text) within `available`
    characters, and whether the cells keep their padding (`padding` characters a column, counted in
    `available`): (None, True) when every column fits on its longest line. Else, in this order, what
    fits first: text wraps at spaces, the widest columns first; words longer than their column fold,
    numbers kept whole; the same without the padding; then numbers fold too, the widest columns
    first (at least 1 a column, even past `available`)."""
    natural, words, numbers = [], [], []
    for column in cells:
        natural.append(_natural_width(column))
        words.append(max([_cell_len(word) for cell in column for word in cell.split()] + [1]))
        numbers.append(max([_number_width(word) for cell in column[1:] for word in cell.split()] + [1]))
    if sum(natural) <= available:
        return None, True
    unpadded = available + padding * len(cells)
    ones = [1] * len(cells)
    for floors, ceilings, room, padded in ((words, natural, available, True), (numbers, words, available, True),
                                           (numbers, words, unpadded, False), (ones, words, unpadded, False)):
        widths = _capped(floors, ceilings, room)
        if widths is not None:
            return widths, padded
    return ones, False


def print_table(console: Console, table: Table) -> None:
    """Print `table` (made by `new_table`) with every character of every cell: on a terminal, the
    columns are narrowed to its width as `column_widths` says; elsewhere (a pipe, a file), at the
    table's full width, each cell on one line."""
    from rich.measure import Measurement

    cells = [[_plain(column.header)] + [_plain(cell) for cell in column.cells] for column in table.columns]
    natural = [_natural_width(column) for column in cells]
    full = Measurement.get(console, console.options.update_width(sum(natural) * 2 + 1000), table).maximum
    overhead = full - sum(natural)  # borders and padding
    width = full
    if console.is_terminal:
        _, right, _, left = table.padding
        widths, padded = column_widths(cells, console.width - overhead, left + right)
        if widths is not None:
            if not padded:
                table.padding = (0, 0)
                overhead -= (left + right) * len(widths)
            for column, column_width in zip(table.columns, widths):
                column.width = column_width
            width = sum(widths) + overhead
    shown = console.width
    if width <= shown:
        console.print(table)
        return
    console.width = width  # wider than the console: the whole table, its lines as long as it takes
    try:
        console.print(table)
    finally:
        console.width = shown
