"""A process's memory as an ingest measures and releases it: its peak (the report's), and what it has
freed handed back to the system (a worker between the parts it builds)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys

import pyarrow as pa


def reset_peak_rss() -> bool:
    """Count this process's peak resident memory afresh from now, where the system allows (Linux), so
    that an ingest in a long-lived process reports its own peak, not the process's; False elsewhere."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets the high-water mark (VmHWM) of this process, nothing else
    except OSError:
        return False
    return True


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB: since :func:`reset_peak_rss` on Linux (``VmHWM``),
    since the process started elsewhere (``ru_maxrss``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)  # reported in kB
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / 2**20 if sys.platform == "darwin" else peak / 1024, 1)  # bytes there, KiB on Linux


def release_freed_memory() -> None:
    """Hand what this process has freed back to the system: a cycle collection, Arrow's pool's unused
    memory, and the C heap's free pages (glibc's ``malloc_trim``, where the C library has it). A graph
    dropped leaves its memory held by the C heap otherwise, and the next one is built on top of what the
    system still counts as this process's."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    libc = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(libc), "malloc_trim", None) if libc else None
    if trim is not None:
        trim(0)
