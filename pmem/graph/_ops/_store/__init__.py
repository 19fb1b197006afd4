"""The graph's storage: :class:`GraphStore` and its column groups, one small class per node kind.

- :class:`EvidenceColumns` (``_evidence``): texts, sources, arrival seqs, times, erasures;
- :class:`KeyColumns` (``_keys``): names and ids, each key's head, newest version, open alternatives;
- :class:`VersionColumns` (``_versions``): the versions and the edges stored on them;
- :class:`EdgeColumns` (``_edges``): supported-by edges added later, and tombstones;
- :class:`OperationLog` (``_log``): the log, reading created entries from the versions;
- :class:`Authority` (``_authority``): source levels;
- :class:`GraphStore` (``_graphstore``): the groups composed, the seq, the writes that span groups.
"""

from pmem.graph._ops._store._arrays import (
    EdgeArrays,
    EvidenceArrays,
    KeyArrays,
    OperationArrays,
    VersionArrays,
)
from pmem.graph._ops._store._authority import Authority
from pmem.graph._ops._store._edges import EdgeColumns
from pmem.graph._ops._store._evidence import ERASED_SOURCE, EvidenceColumns
from pmem.graph._ops._store._graphstore import COLUMNS, GROUP_COLUMNS, RESTORED, GraphStore, ValidTime
from pmem.graph._ops._store._keys import KeyColumns
from pmem.graph._ops._store._log import OperationLog
from pmem.graph._ops._store._versions import VersionColumns

__all__ = [
    "COLUMNS",
    "ERASED_SOURCE",
    "GROUP_COLUMNS",
    "RESTORED",
    "Authority",
    "EdgeArrays",
    "EdgeColumns",
    "EvidenceArrays",
    "EvidenceColumns",
    "GraphStore",
    "KeyArrays",
    "KeyColumns",
    "OperationArrays",
    "OperationLog",
    "ValidTime",
    "VersionArrays",
    "VersionColumns",
]
