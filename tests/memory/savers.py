"""One of several processes that load one memory file, add facts and save it (issue 41, item 3).

Run as ``python savers.py STATE BARRIER NAME FACTS``: loads STATE, says so (``BARRIER/NAME.loaded``),
waits for ``BARRIER/go`` (so that every process of a round has loaded the same version before any
writes), adds FACTS sentences each stating one new fact (each add is committed to the state's journal as
it returns), saves, and prints one JSON line: ``saved``, ``keys`` (the keys of the adds that returned),
and the error a refused add or save raised.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(state: Path, barrier: Path, name: str, facts: int) -> int:
    import pmem

    memory = pmem.Memory.load(state)
    memory.get("anything")  # the state is read now (a memory reads it on first use)
    (barrier / f"{name}.loaded").touch()
    deadline = time.monotonic() + 300
    while not (barrier / "go").exists():
        if time.monotonic() > deadline:
            return 3
        time.sleep(0.01)
    keys = []  # the facts of the adds that returned: each is on disk (a write that returned is durable)
    try:
        for i in range(facts):
            result = memory.add(f"The city of {name}x{i} is Paris.")
            keys += [op.key for op in result.operations if op.applied]
        memory.save()
    except pmem.StateChangedError as exc:
        print(json.dumps({"saved": False, "keys": keys, "error": str(exc)}))
    else:
        print(json.dumps({"saved": True, "keys": keys, "error": None}))
    memory.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
