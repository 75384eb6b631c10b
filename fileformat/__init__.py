"""The multi-partition file format: writer, streaming reader, footer index, offset bitmaps.

FORMAT.md (next to this file) is the specification, byte by byte.
"""

from fileformat.bitmap import OffsetSet
from fileformat.errors import FormatError
from fileformat.framing import FORMAT_VERSION, MAGIC
from fileformat.meta import FileMeta, SectionMeta, section_key
from fileformat.ranged import read_footer, read_section, read_section_offsets
from fileformat.reader import SectionReader, Source, StreamReader, verify_stream
from fileformat.records import (
    HEADER_TYPE,
    RECORD_SCHEMA,
    Record,
    batch_to_records,
    iter_records,
    records_to_batch,
)
from fileformat.writer import FileWriter, Sink, write_file

__all__ = [
    "FORMAT_VERSION",
    "HEADER_TYPE",
    "MAGIC",
    "RECORD_SCHEMA",
    "FileMeta",
    "FileWriter",
    "FormatError",
    "OffsetSet",
    "Record",
    "SectionMeta",
    "SectionReader",
    "Sink",
    "Source",
    "StreamReader",
    "batch_to_records",
    "iter_records",
    "read_footer",
    "read_section",
    "read_section_offsets",
    "records_to_batch",
    "section_key",
    "verify_stream",
    "write_file",
]
