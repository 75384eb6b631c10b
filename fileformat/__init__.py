"""The multi-partition file format: writer, streaming reader, footer index, offset bitmaps.

FORMAT.md (next to this file) is the specification, byte by byte.
"""

from compactor.fileformat.bitmap import OffsetSet
from compactor.fileformat.errors import FormatError
from compactor.fileformat.framing import FORMAT_VERSION, MAGIC
from compactor.fileformat.meta import FileMeta, SectionMeta, section_key
from compactor.fileformat.ranged import read_footer, read_section, read_section_offsets
from compactor.fileformat.reader import SectionReader, Source, StreamReader, verify_stream
from compactor.fileformat.records import (
    HEADER_TYPE,
    RECORD_SCHEMA,
    Record,
    batch_to_records,
    iter_records,
    records_to_batch,
)
from compactor.fileformat.writer import FileWriter, Sink, write_file

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
