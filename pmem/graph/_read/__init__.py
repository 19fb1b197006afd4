"""Reading and sharding: a saved state read key by key without loading it, its indexes and search, inspection, and the write log a sharded state is made of.

Private to :mod:`pmem.graph`: its users import from ``pmem.graph`` (or ``pmem.graph.seams``)."""
