"""How large a Parquet file's data is once read, from its page headers rather than its footer.

A reader decompresses each page into a buffer of the size the page's own header names, and decodes
as many values as that header counts (a run-length encoded page of a few bytes can count billions;
a dictionary-encoded string value is as long as its dictionary entry). The footer's sizes are never
used for that, so a footer can understate them freely; the page headers cannot. `expanded_size`
walks every page header of every column chunk and adds up what reading the file takes: per page,
its uncompressed size or VALUE_BYTES a value, whichever is more, and for a chunk of strings with a
dictionary, each value as its dictionary's longest entry.

The walk fails closed (`Malformed`): what loopmeter, pyarrow and DuckDB write always passes, and
anything a reader might take otherwise than this walk does is refused rather than guessed at:
a column chunk outside the data (before byte 4, into the footer) or overlapping another, a
dictionary page not before the data pages, a header that is not a whole Thrift compact-protocol
`PageHeader` with its type and sizes (a field id or integer out of its type's range, nesting
deeper than Thrift's 64), pages that run past their chunk or hold fewer values than the footer
counts, more pages than the file could hold.

Fields used (parquet.thrift's `PageHeader`): 1 type, 2 uncompressed page size, 3 compressed page
size, and the value counts of the data page headers (5 and 8) and of the dictionary page header (7),
each its field 1; everything else is skipped by its type, as Thrift skips it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO, Iterator, NamedTuple

if TYPE_CHECKING:
    import pyarrow.parquet as pq

VALUE_BYTES = 16  # what a decoded value takes at least, as counted here (DuckDB's string, an int64 and its levels)
WINDOW = 1 << 16  # bytes read at a time around page headers ...
MAX_HEADER = 1 << 24  # ... and at most for one header
MAX_DEPTH = 64  # Thrift's own limit on nesting
DATA_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = 5, 7, 8  # PageHeader fields holding a page's header (its field 1: values)
INTEGER_BITS = {3: 8, 4: 16, 5: 32, 6: 64}  # Thrift compact types: byte, i16, i32, i64
BOOLEANS = (1, 2)
CODECS = {"SNAPPY": "snappy", "GZIP": "gzip", "BROTLI": "brotli", "ZSTD": "zstd", "LZ4": "lz4_hadoop",
          "LZ4_RAW": "lz4_raw"}


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

    def varint(self, bits: int = 64) -> int:
        data, position = self.data, self.position
        result = shift = 0
        try:
            while True:
                byte = data[position]
                position += 1
                result |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
                if shift >= bits + 7:
                    raise Malformed("an integer longer than its type")
        except IndexError:
            raise Short("page header ends early") from None
        if result >> bits:
            raise Malformed("an integer beyond its type")
        self.position = position
        return result

    def integer(self, kind: int) -> int:
        if kind == 3:
            return self.byte()
        value = self.varint(INTEGER_BITS[kind])
        return (value >> 1) ^ -(value & 1)

    def skip(self, kind: int, depth: int, element: bool = False) -> None:
        """Skip a value of compact type `kind` (a boolean is in its field header, but a byte of its own
        as a list's or map's element)."""
        if depth > MAX_DEPTH:
            raise Malformed("nested deeper than Thrift allows")
        if kind in BOOLEANS:
            if element:
                self.byte()
        elif kind in INTEGER_BITS:
            self.integer(kind)
        elif kind == 7:
            self.position += 8
        elif kind == 8:
            length = self.varint(32)  # read before the position is: reading it moves the position
            self.position += length
        elif kind in (9, 10):
            header = self.byte()
            count = header >> 4 if header >> 4 != 15 else self.varint(32)
            for _ in range(count):
                self.skip(header & 0x0F, depth + 1, element=True)
                self._within()
        elif kind == 11:
            count = self.varint(32)
            types = self.byte() if count else 0
            for _ in range(count):
                self.skip(types >> 4, depth + 1, element=True)
                self.skip(types & 0x0F, depth + 1, element=True)
                self._within()
        elif kind == 12:
            self.struct(depth + 1, {})
        else:
            raise Malformed(f"unknown Thrift type {kind}")
        self._within()

    def _within(self) -> None:
        """A count of elements or bytes may name more than there is: the parse ends where the data does."""
        if self.position > len(self.data):
            raise Short("page header ends early")

    def struct(self, depth: int, wanted: dict[int, object]) -> dict:
        """Read a struct; the integer fields named in `wanted` (a nested dict: that struct's wanted
        fields) are returned, the rest skipped."""
        if depth > MAX_DEPTH:
            raise Malformed("nested deeper than Thrift allows")
        found: dict = {}
        field = 0
        while True:
            header = self.byte()
            kind = header & 0x0F
            if kind == 0:
                return found
            field = field + (header >> 4) if header >> 4 else self.integer(4)
            if not 0 < field < 1 << 15:
                raise Malformed(f"field id {field} out of Thrift's range")
            if 3 <= kind <= 6:  # the integers, wanted or not: the most common fields
                value = self.integer(kind)
                if wanted.get(field) is True:
                    found[field] = value
                continue
            inner = wanted.get(field)
            if isinstance(inner, dict) and kind == 12:
                found.update({(field, key): value for key, value in self.struct(depth + 1, inner).items()})
            else:
                self.skip(kind, depth)


WANTED = {1: True, 2: True, 3: True, DATA_PAGE: {1: True}, DICTIONARY_PAGE: {1: True}, DATA_PAGE_V2: {1: True}}


class _Window:
    """The file's bytes around the page headers being read: one read serves the headers of many
    small pages, and a page's data is never read."""

    def __init__(self, handle: BinaryIO, size: int):
        self.handle, self.size = handle, size
        self.start, self.data = 0, b""

    def page(self, offset: int) -> tuple[int, int, int, int, bool]:
        """The page at `offset`: (header length, uncompressed size, compressed size, values, whether a
        dictionary page)."""
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
        if not {1, 2, 3} <= fields.keys() or fields[2] < 0 or fields[3] < 0:
            raise Malformed("a page header without its type and sizes")
        values = max(fields.get((DATA_PAGE, 1), 0), fields.get((DICTIONARY_PAGE, 1), 0), fields.get((DATA_PAGE_V2, 1), 0))
        if values < 0:
            raise Malformed("a page header counting fewer than no values")
        return reader.position - (offset - self.start), fields[2], fields[3], values, (DICTIONARY_PAGE, 1) in fields


def _chunks(metadata: "pq.FileMetaData", size: int) -> list[tuple[int, int, object]]:
    """Every column chunk's (first page, end, metadata), refused unless within the data and apart."""
    data_end = size - 8 - metadata.serialized_size
    chunks = []
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            column = row_group.column(index)
            if column.total_compressed_size == 0 and column.num_values == 0:
                continue  # an empty row group's (an empty table's): no pages
            start, dictionary = column.data_page_offset, column.dictionary_page_offset
            if dictionary:
                if not 4 <= dictionary < start:
                    raise Malformed("a dictionary page not before the column chunk's data pages")
                start = dictionary
            end = start + column.total_compressed_size
            if not 4 <= start < end <= data_end:
                raise Malformed("a column chunk outside the file's data")
            chunks.append((start, end, column))
    chunks.sort(key=lambda chunk: chunk[0])
    if any(before[1] > after[0] for before, after in zip(chunks, chunks[1:])):
        raise Malformed("column chunks that overlap")
    return chunks


def walk(handle: BinaryIO, metadata: "pq.FileMetaData", size: int) -> Iterator["Page"]:
    """Every page of every column chunk, in the file's order, or Malformed (see the module)."""
    window = _Window(handle, size)
    pages = 0
    for start, end, column in _chunks(metadata, size):
        offset, seen = start, 0
        while offset < end:
            pages += 1
            if pages > size // 8 + 1024:
                raise Malformed("more pages than the file can hold")
            length, uncompressed, compressed, values, dictionary = window.page(offset)
            yield Page(offset, length, uncompressed, compressed, values, dictionary, column)
            if not dictionary:
                seen += values
            offset += length + compressed
        if offset != end:
            raise Malformed("a page that runs past its column chunk")
        if seen < column.num_values:
            raise Malformed("pages holding fewer values than the footer counts")


class Page(NamedTuple):
    offset: int
    header: int  # the header's length
    uncompressed: int
    compressed: int
    values: int
    dictionary: bool
    column: object  # the chunk's metadata


def expanded_size(handle: BinaryIO, metadata: "pq.FileMetaData", size: int, limit: int) -> int:
    """What reading every column chunk of the file takes, by its page headers (see the module); once
    it passes `limit`, the count stops there (no dictionary is read for a file refused anyway)."""
    total = 0
    chunks: dict[int, list] = {}  # id of the chunk's metadata -> [its dictionary page, its values]
    for page in walk(handle, metadata, size):
        total += max(page.uncompressed, VALUE_BYTES * page.values)
        if total > limit:
            return total
        chunk = chunks.setdefault(id(page.column), [None, 0])
        if page.dictionary:
            chunk[0] = page
        else:
            chunk[1] += page.values
    for dictionary, values in chunks.values():
        if dictionary is None or dictionary.column.physical_type != "BYTE_ARRAY" \
                or values * (dictionary.uncompressed + VALUE_BYTES) <= limit - total:
            continue  # even each value as long as the whole dictionary stays within the limit
        total += values * _longest_entry(handle, dictionary)
        if total > limit:
            return total
    return total


def _longest_entry(handle: BinaryIO, page: Page) -> int:
    """The longest entry of a dictionary page (plain-encoded byte arrays, each after its 4-byte
    length), read and decompressed: its size is known to be within the limit."""
    import pyarrow as pa

    handle.seek(page.offset + page.header)
    compressed = handle.read(page.compressed)
    compression = page.column.compression
    if compression == "UNCOMPRESSED":
        data = compressed[:page.uncompressed]
    elif compression not in CODECS or not pa.Codec.is_available(CODECS[compression]):
        raise Malformed(f"a dictionary compressed with {compression}")
    else:
        try:
            data = pa.decompress(compressed, page.uncompressed, codec=CODECS[compression]).to_pybytes()
        except (OSError, ValueError) as error:
            raise Malformed(f"a dictionary page that does not decompress ({error})") from None
    longest, position = 0, 0
    while position + 4 <= len(data):
        length = int.from_bytes(data[position:position + 4], "little")
        longest = max(longest, length)
        position += 4 + length
    return longest
