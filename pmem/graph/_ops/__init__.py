"""Operations and replay: the store's columns, the operations' semantics, column-wise batches, replays (as of, undo, erasure, unmerge), patches, rendering and the public node types.

Private to :mod:`pmem.graph`: its users import from ``pmem.graph`` (or ``pmem.graph.seams``)."""
