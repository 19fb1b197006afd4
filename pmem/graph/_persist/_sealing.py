"""How a state file is sealed and checked: its whole-file digest (xxh3-128 since version 6, sha256 before),
written in place of a placeholder as the bytes stream out and verified on read; the aside file, fsyncs
and writeback that make a save durable; and :class:`StateFileError`, what a state that cannot be read
back whole raises."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import io
import mmap
import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import pyarrow as pa
import xxhash

if TYPE_CHECKING:
    from collections.abc import Callable


_ARROW_MAGIC = b"ARROW1"
#: The most bytes the schema message or the footer may take (ours take a few KiB): a larger length
#: field is damage, refused before anything is allocated for it.
_MAX_FRAME = 1 << 20


class StateFileError(ValueError):
    """A state file that cannot be read back whole: missing, truncated, altered or of another format."""


# --- the whole-file digest ---------------------------------------------------------------------------


class _Hash(Protocol):
    def update(self, data: Any, /) -> None: ...

    def hexdigest(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class _Algorithm:
    """A whole-file digest: the metadata key it is stored under (its value: the mark, then the digest's
    hex digits) and the hash."""

    key: str
    mark: bytes
    hex_digits: int
    new: Callable[[], _Hash]

    @property
    def placeholder(self) -> bytes:
        """What the digest's slots hold while the digest is taken."""
        return b"0" * self.hex_digits


#: Schema 5 on: XXH3-128 (``xxhash``).
XXH3_128 = _Algorithm("file_xxh3_128", b"pmem-file-xxh3-128:", 32, xxhash.xxh3_128)
#: Schemas 3 and 4: SHA-256.
SHA256 = _Algorithm("file_sha256", b"pmem-file-sha256:", 64, hashlib.sha256)
_ALGORITHMS = (XXH3_128, SHA256)
#: The metadata key of the digest this code writes; its value is the mark, then the digest's hex digits.
FILE_DIGEST_KEY = XXH3_128.key
#: In a directory state's metadata: ``<prefix><table>`` -> that table file's digest.
TABLE_DIGEST_PREFIX = f"{FILE_DIGEST_KEY}."
_FILE_MARK = XXH3_128.mark
_DIGEST_HEX = XXH3_128.hex_digits
_PLACEHOLDER = XXH3_128.placeholder


def _algorithm_of(version: int) -> _Algorithm:
    """The digest a file of schema ``version`` is sealed with (schemas 1 and 2 have none)."""
    return XXH3_128 if version >= 5 else SHA256


def _digest(payloads: list[pa.Buffer]) -> str:
    """The payload checksum of schemas 1 and 2 (their metadata's ``sha256``)."""
    digest = hashlib.sha256()
    for p in payloads:
        view = memoryview(p)
        digest.update(view.nbytes.to_bytes(8, "little"))
        digest.update(view)
    return digest.hexdigest()


def sealed(data: bytes) -> bytes:
    """``data``, an Arrow file whose metadata holds the zeroed file digest, with the digest written in."""
    out = bytearray(data)
    _write_digest(out)
    return bytes(out)


def _placeholder_slots(data: _Bytes) -> tuple[int, int]:
    """The two digest slots of an Arrow file this code just wrote (its placeholder still in them)."""
    found = _find_digest(data)
    if found is None or found[0] is not XXH3_128:
        msg = f"no {FILE_DIGEST_KEY} placeholder in the file's metadata"
        raise ValueError(msg)
    return found[1]


def _write_digest(buffer: bytearray | mmap.mmap) -> str:
    """Write the digest of an Arrow file (its two slots still zeros) into both slots, in place; the digest."""
    slots = _placeholder_slots(buffer)
    digest = _file_digest(buffer, slots).encode()
    for at in slots:
        buffer[at : at + _DIGEST_HEX] = digest
    return digest.decode()


#: What the digest reads: a file's bytes in memory, a view of a mapped buffer, or the mapped file.
_Bytes = bytes | bytearray | memoryview | mmap.mmap


def _frames(data: _Bytes) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The byte ranges of an Arrow file's schema message and footer, read from their length fields
    (None when the bytes are not framed as an Arrow file: too short, a wrong magic, a length out of
    range). Plain integer reads: nothing is parsed."""
    size = len(data)
    head = 8 + 8  # "ARROW1" + 2 padding bytes, then the continuation marker and the message length
    if size < head + 10 or bytes(data[:6]) != _ARROW_MAGIC or bytes(data[size - 6 :]) != _ARROW_MAGIC:
        return None
    message = int.from_bytes(data[12:16], "little", signed=True)
    footer = int.from_bytes(data[size - 10 : size - 6], "little", signed=True)
    if not (0 < message <= _MAX_FRAME and head + message <= size - 10):
        return None
    if not (0 < footer <= _MAX_FRAME and size - 10 - footer >= head + message):
        return None
    return (head, head + message), (size - 10 - footer, size - 10)


def _find_digest(data: _Bytes) -> tuple[_Algorithm, tuple[int, int]] | None:
    """The file's digest algorithm (by its mark) and where the two copies of its hex digits are: one in
    the schema message, one in the footer, each after the mark and found exactly once there; None when
    neither frame holds a mark (a file written before schema 3).

    Raises:
        ValueError: a frame without the mark, or with it twice (damage).
    """
    frames = _frames(data)
    if frames is None:
        return None
    regions = [bytes(data[start:end]) for start, end in frames]
    for algorithm in _ALGORITHMS:
        found = []
        for (start, _), region in zip(frames, regions, strict=True):
            at = region.find(algorithm.mark)
            if at >= 0 and region.find(algorithm.mark, at + 1) >= 0:
                msg = "the file digest appears twice in one frame"
                raise ValueError(msg)
            found.append(-1 if at < 0 else start + at + len(algorithm.mark))
        if found == [-1, -1]:
            continue
        if -1 in found or any(
            at + algorithm.hex_digits > end for at, (_, end) in zip(found, frames, strict=True)
        ):
            msg = "the file digest is missing from one of its two places"
            raise ValueError(msg)
        return algorithm, (found[0], found[1])
    return None


def _sealed_digest(data: _Bytes | pa.Buffer) -> str:
    """The digest a sealed file carries, as its schema message holds it (whatever its algorithm's
    length); :func:`_open_sealed` checks it against the bytes and against the footer's copy.

    Raises:
        ValueError: the file carries no digest.
    """
    view = memoryview(data)
    found = _find_digest(view)
    if found is None:
        msg = "the file carries no digest"
        raise ValueError(msg)
    algorithm, (at, _) = found
    return bytes(view[at : at + algorithm.hex_digits]).decode("ascii", "replace")


#: Bytes hashed between two calls of a digest's ``hashed`` hook (see :func:`_file_digest`).
_DIGEST_STEP = 64 << 20


def _file_digest(
    data: _Bytes,
    slots: tuple[int, int],
    algorithm: _Algorithm = XXH3_128,
    hashed: Callable[[int], None] | None = None,
) -> str:
    """The digest of ``data`` with both digest slots read as zeros (no copy of the data). ``hashed(end)``,
    when given, is called each time the bytes before ``end`` are hashed, every :data:`_DIGEST_STEP`
    bytes: a reader of a mapped file releases their pages, so that checking a file of gigabytes never
    holds it resident."""
    view = memoryview(data)
    digest = algorithm.new()
    step = _DIGEST_STEP if hashed is not None else max(len(view), 1)

    def update(start: int, end: int) -> None:
        for piece in range(start, end, step):
            digest.update(view[piece : min(piece + step, end)])
            if hashed is not None:
                hashed(min(piece + step, end))

    at = 0
    for slot in sorted(slots):
        update(at, slot)
        digest.update(algorithm.placeholder)
        at = slot + algorithm.hex_digits
    update(at, len(view))
    return digest.hexdigest()


def _check_file_digest(
    data: _Bytes, path: Path, hashed: Callable[[int], None] | None = None
) -> _Algorithm | None:
    """Verify a sealed file's digest over every byte: its algorithm; None for a file written before
    schema 3 (no digest). ``hashed``: see :func:`_file_digest`.

    Raises:
        StateFileError: the digest is damaged, missing from one place, or does not match the bytes.
    """
    try:
        found = _find_digest(data)
    except ValueError as exc:
        raise _refuse(path, f"{exc} (the file was altered or damaged)") from None
    if found is None:
        return None
    algorithm, slots = found
    first, second = (bytes(data[at : at + algorithm.hex_digits]) for at in slots)
    if first != second or not all(c in b"0123456789abcdef" for c in first):
        raise _refuse(path, "its two copies of the file digest differ (the file was altered or damaged)")
    if _file_digest(data, slots, algorithm, hashed) != first.decode():
        raise _refuse(path, "checksum mismatch over the whole file (the file was altered or damaged)")
    return algorithm


#: Bytes written between two writeback hints (see :func:`_start_writeback`).
_WRITEBACK_STEP = 16 << 20


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Linux's ``sync_file_range(2)`` (which ``os`` does not offer), or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # pragma: no cover - a libc without it
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    return cast("Callable[[int, int, int, int], int]", call)


def _start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing ``nbytes`` at ``offset`` of ``fd`` to disk, without waiting
    (``SYNC_FILE_RANGE_WRITE``): a large file's pages go to disk while the next table is made, so the
    fsync that seals it waits for the last few only. A hint: durability is still the fsync's, and where
    the call does not exist or fails nothing happens."""
    call = _sync_file_range()
    if call is not None:
        call(fd, offset, nbytes, 2)  # SYNC_FILE_RANGE_WRITE; an error leaves it to the fsync


class _Tee(io.RawIOBase):
    """Bytes written here go to ``file`` and into ``digest``; closing it leaves ``file`` open. Every
    :data:`_WRITEBACK_STEP` bytes, the kernel is asked to start writing them to disk."""

    def __init__(self, file: io.BufferedRandom, digest: _Hash) -> None:
        super().__init__()
        self._target, self._digest = file, digest
        self._written = self._hinted = file.tell()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._digest.update(data)
        written = self._target.write(data)
        self._written += written
        if self._written - self._hinted >= _WRITEBACK_STEP:
            self._target.flush()
            _start_writeback(self._target.fileno(), self._hinted, self._written - self._hinted)
            self._hinted = self._written
        return written


class _Sealing:
    """A file being written whose digest is taken from the bytes as they are written (Arrow writes
    through it with ``pa.PythonFile``): the digest of a file written with its two slots still zeros is
    the digest :func:`_file_digest` checks, so sealing never reads the file back."""

    def __init__(self, file: io.BufferedRandom) -> None:
        self._file = file  # opened for reading and writing: seal() finds the slots in what was written
        self._digest = XXH3_128.new()
        self._tee = _Tee(file, self._digest)

    def sink(self) -> pa.NativeFile:
        """Where Arrow writes: every byte goes to the file and into the digest."""
        return pa.PythonFile(self._tee, mode="w")

    def write(self, data: Any) -> int:
        """Write ``data`` (bytes-like) to the file and into the digest."""
        return self._tee.write(data)

    def seal(self) -> str:
        """Write the digest into both slots (found from the file's two frames), fsync; the digest."""
        self._file.flush()
        hexdigest = self._digest.hexdigest()
        with mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            slots = _placeholder_slots(data)  # reads the two frames only
        for slot in slots:
            self._file.seek(slot)
            self._file.write(hexdigest.encode())
        self._file.flush()
        os.fsync(self._file.fileno())
        return hexdigest


def _create_aside(path: Path) -> tuple[int, Path]:
    """Create a fresh temporary file next to ``path``, with the permissions any new file gets, open for
    reading and writing (sealing reads back the frames it wrote).

    ``tempfile.mkstemp`` would force mode 0600; a state file is an ordinary file, so it is created with
    0666 and the process umask decides, as for ``open(path, "w")``.
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # pragma: no cover - 64 random bits
            continue


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX: the new directory entry survives a crash)."""
    if not hasattr(os, "O_DIRECTORY"):  # pragma: no cover - Windows cannot open directories
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _refuse(path: Path, why: str) -> StateFileError:
    return StateFileError(f"{path}: not a readable P-Mem state file: {why}")
