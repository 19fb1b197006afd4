"""Soft key identity: the registry of keys and merge decisions, and the hashing embedding of key text.

Private to :mod:`pmem.graph`: its users import from ``pmem.graph`` (or ``pmem.graph.seams``)."""
