"""Byte streams the ingest reader reads through: a byte range of a file, and zstd that stops at a truncation."""

from __future__ import annotations

import io
from typing import Any, BinaryIO

import zstandard

# Compressed bytes decompressed per step: zstd expands a byte at most ~32,000 times (a "zip bomb"),
# so one step's output stays under ~32 MB.
ZSTD_READ_BYTES = 1024


class RangeReader(io.RawIOBase):
    """The bytes ``start`` to ``end`` of an open file, then end of file."""

    def __init__(self, raw: BinaryIO, start: int, end: int):
        self.raw, self.end = raw, end
        raw.seek(start)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        size = min(len(buffer), self.end - self.raw.tell())
        if size <= 0:
            return 0
        data = self.raw.read(size)
        buffer[:len(data)] = data
        return len(data)

    def tell(self) -> int:
        return self.raw.tell()

    def close(self) -> None:
        self.raw.close()
        super().close()


class ZstdReader(io.RawIOBase):
    """Every zstd frame of ``raw`` decompressed; EOFError when the data stops inside a frame.

    zstandard's own stream_reader stops silently at a truncation, so that a cut file came through
    as a shorter one (186 of 454 documents, the last sentence cut mid-word); gzip raises EOFError.
    """

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.context = zstandard.ZstdDecompressor()
        self.frame = self.context.decompressobj()
        self.in_frame = False
        self.pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.pending:
            data = self.raw.read(ZSTD_READ_BYTES)
            if not data:
                if self.in_frame:
                    raise EOFError("the data ends inside a zstd frame: the file is truncated")
                return 0
            self.pending = memoryview(self._decompress(data))
        size = min(len(buffer), len(self.pending))
        buffer[:size] = self.pending[:size]
        self.pending = self.pending[size:]
        return size

    def _decompress(self, data: bytes) -> bytes:
        out = []
        while data:
            self.in_frame = True
            out.append(self.frame.decompress(data))
            if not self.frame.eof:
                break
            data, self.frame, self.in_frame = self.frame.unused_data, self.context.decompressobj(), False
        return b"".join(out)
