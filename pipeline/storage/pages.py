"""How large a Parquet file's data is once read, from its page headers rather than its footer.

A reader decompresses each page into a buffer of the size the page's own header names, and decodes
as many values as that header counts (a run-length encoded page of a few bytes can count billions).
The footer's sizes are never used for that, so a footer can understate them freely; the page
headers cannot. `expanded_size` walks every page header of every column chunk, as a reader would
meet them, and adds up what reading the file takes: per page, its uncompressed size or eight bytes
a value, whichever is more. A header that cannot be parsed ends the walk of its column chunk: a
reader fails there too.

Page headers are Thrift compact-protocol structs (parquet.thrift's `PageHeader`): the fields used
are 2 (uncompressed page size) and 3 (compressed page size), and the value counts of the data page
headers (field 5 and 8, each field 1); everything else is skipped by its type.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO, Iterator

if TYPE_CHECKING:
    import pyarrow.parquet as pq

VALUE_BYTES = 8  # what a decoded value takes at least, as counted here (an int64, a double, an offset)
WINDOW = 1 << 16  # bytes read at a time around page headers ...
MAX_HEADER = 1 << 24  # ... and at most for one header (a header with large statistics)
MAX_DEPTH = 32  # nesting a page header never needs; deeper is not a header
DATA_PAGE, DATA_PAGE_V2 = 5, 8  # PageHeader fields holding a data page header (its field 1: the values)


class Malformed(ValueError):
    pass


class Short(Malformed):
    """The bytes read end inside the header: more may make it whole."""


class _Reader:
    def __init__(self, data: bytes, position: int = 0):
        self.data, self.position = data, position

    def byte(self) -> int:
        try:
            value = self.data[self.position]
        except IndexError:
            raise Short("page header ends early") from None
        self.position += 1
        return value

    def varint(self) -> int:
        data, position = self.data, self.position
        result = shift = 0
        try:
            while True:
                byte = data[position]
                position += 1
                result |= (byte & 0x7F) << shift
                if byte < 0x80:
                    self.position = position
                    return result
                shift += 7
                if shift > 70:
                    raise Malformed("varint too long")
        except IndexError:
            raise Short("page header ends early") from None

    def integer(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def skip(self, kind: int, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise Malformed("nested too deep")
        if kind in (1, 2):  # booleans: in the field header itself
            return
        if kind == 3:
            self.byte()
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.position += 8
        elif kind == 8:
            length = self.varint()  # read before the position is: reading it moves the position
            self.position += length
        elif kind in (9, 10):
            header = self.byte()
            count = header >> 4 if header >> 4 != 15 else self.varint()
            for _ in range(count):
                self.byte() if (header & 0x0F) in (1, 2) else self.skip(header & 0x0F, depth + 1)
                self._within()
        elif kind == 11:
            count = self.varint()
            types = self.byte() if count else 0
            for _ in range(count):
                self.skip(types >> 4, depth + 1)
                self.skip(types & 0x0F, depth + 1)
                self._within()
        elif kind == 12:
            self.struct(depth + 1, {})
        else:
            raise Malformed(f"unknown type {kind}")
        self._within()

    def _within(self) -> None:
        """A count of elements or bytes may name more than there is: the parse ends where the data does."""
        if self.position > len(self.data):
            raise Short("page header ends early")

    def struct(self, depth: int, wanted: dict[int, object]) -> dict[int, int]:
        """Read a struct; the integer fields named in `wanted` (a nested dict: that struct's wanted
        fields) are returned, the rest skipped."""
        found: dict[int, int] = {}
        field = 0
        while True:
            header = self.byte()
            kind = header & 0x0F
            if kind == 0:
                return found
            field = field + (header >> 4) if header >> 4 else self.integer()
            if 4 <= kind <= 6:  # the integers, wanted or not: the most common fields
                value = self.varint()
                if wanted.get(field) is True:
                    found[field] = (value >> 1) ^ -(value & 1)
                continue
            inner = wanted.get(field)
            if isinstance(inner, dict) and kind == 12:
                found.update({(field, key): value for key, value in self.struct(depth + 1, inner).items()})
            else:
                self.skip(kind, depth)


WANTED = {2: True, 3: True, DATA_PAGE: {1: True}, DATA_PAGE_V2: {1: True}}


class _Window:
    """The file's bytes around the page headers being read: one read serves the headers of many
    small pages, and a page's data is never read."""

    def __init__(self, handle: BinaryIO, size: int):
        self.handle, self.size = handle, size
        self.start, self.data = 0, b""

    def page(self, offset: int) -> tuple[int, int, int, int]:
        """The page at `offset`: (header length, uncompressed size, compressed size, values)."""
        wanted = WINDOW
        while True:
            if not (self.start <= offset and offset + wanted <= self.start + len(self.data)) \
                    and not (self.start <= offset < self.start + len(self.data) == self.size):
                self.handle.seek(offset)
                self.start, self.data = offset, self.handle.read(wanted)
            reader = _Reader(self.data, offset - self.start)
            try:
                fields = reader.struct(0, WANTED)
                break
            except Short:
                if self.start + len(self.data) >= self.size or wanted >= MAX_HEADER:
                    raise
                wanted *= 16  # a header with large statistics
        values = fields.get((DATA_PAGE, 1), fields.get((DATA_PAGE_V2, 1), 0))
        return reader.position - (offset - self.start), fields.get(2, 0), fields.get(3, 0), values


def walk(handle: BinaryIO, metadata: "pq.FileMetaData", size: int) -> Iterator[tuple[int, int, int]]:
    """Every page of every column chunk, as a reader meets them: (header length, uncompressed
    size, values). A column chunk's walk goes on past its footer's end while its pages hold fewer
    values than its footer counts (or the other way round), to the end of the file at most."""
    window = _Window(handle, size)
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            column = row_group.column(index)
            offset = column.data_page_offset
            if column.has_dictionary_page and column.dictionary_page_offset:
                offset = min(offset, column.dictionary_page_offset)
            end = offset + column.total_compressed_size
            seen = 0
            while 0 <= offset < size and (offset < end or seen < column.num_values):
                try:
                    length, uncompressed, compressed, values = window.page(offset)
                except Malformed:
                    break
                if uncompressed < 0 or compressed < 0 or values < 0:
                    break
                yield length, uncompressed, values
                seen += values
                offset += length + compressed


def expanded_size(handle: BinaryIO, metadata: "pq.FileMetaData", size: int) -> int:
    """What reading every column chunk of the file takes, by its page headers (see the module)."""
    return sum(max(uncompressed, VALUE_BYTES * values) for _, uncompressed, values in walk(handle, metadata, size))
