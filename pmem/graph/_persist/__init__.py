"""Persistence: the state file (tables, sealing, older schemas), its guard against concurrent writers, the journal and the journaled graph, memory-mapped reads and consistency checks.

Private to :mod:`pmem.graph`: its users import from ``pmem.graph`` (or ``pmem.graph.seams``)."""
