"""Damage a saved state the ways a disk, a copy or a hand does, and read each damaged copy through the
default :class:`pmem.graph.StateReader`, in child processes.

The damage (:func:`cases`), each a trial named ``<kind>:<file or part>:<argument>``: a bit flipped
(``flip``), a file truncated (``truncate``) or deleted (``delete``), a file copied in from another state
of the same kind (``foreign``), and a sharded state's part replaced by another sharded state's: its
metadata, tables and union numbering (``foreign-tables``), or its whole folder, log included
(``foreign-part``).

Each trial reads everything the reader offers (the seq; every key's cell, versions and operations, and a
key's cell as of half the log on a sharded state; evidence nodes; the frontier) and compares each reply
with the undamaged state's. Each reply is ``same``, ``refused`` (StateFileError), ``different`` (a wrong
answer: another reply, no StateFileError) or ``error`` (any other exception). A trial's outcome is
``<verdict> same=N refused=N different=N error=N``, its verdict the worst of its replies (``different``,
then ``error``, then ``refused``, then ``same``), or ``crash:<signal>`` when the child died in it (a
SIGBUS or SIGSEGV in native code): :mod:`child_trials` counts it and a new child goes on.

Run as a script it is the child: ``python readerfuzz.py SUBJECT LIST_FILE``, where SUBJECT is a folder
holding ``state`` (the undamaged state: a file or a directory) and ``other`` (a state of the same kind).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from child_trials import run_trials

HERE = Path(__file__).resolve().parent
#: The worst verdict first.
VERDICTS = ("different", "error", "refused", "same")


def state_files(root: Path) -> list[str]:
    """Every file of a state, as paths relative to it ("" for a state that is one file), sorted."""
    if root.is_file():
        return [""]
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _bits(size: int, rng: random.Random, flips: int) -> list[int]:
    """``flips`` bits of a file of ``size`` bytes: half anywhere, half in its first 256 and last 2,048
    bytes, where the Arrow framing, schema and footer are (and the digest that seals them)."""
    ends = [*range(min(size, 256) * 8), *range(max(0, size - 2048) * 8, size * 8)]
    return sorted(
        {rng.randrange(size * 8) for _ in range(flips - flips // 2)} | set(rng.sample(ends, flips // 2))
    )


def cases(root: Path, other: Path, flips: int, seed: int = 0) -> list[str]:
    """The trials of the state at ``root`` (``other``: a state of the same kind): ``flips`` bit flips of
    each file, three truncations and a deletion of each, each file another state has at the same path
    copied in from it, and each part of a sharded state replaced by the other's (tables, or whole)."""
    rng = random.Random(seed)
    out: list[str] = []
    for rel in state_files(root):
        size = (root / rel).stat().st_size
        out += [f"flip:{rel}:{bit}" for bit in _bits(size, rng, flips)]
        out += [f"truncate:{rel}:{keep}" for keep in (0.0, 0.5, 0.99)]
        if rel:  # a state that is one file is no file of another state: nothing lists it
            out.append(f"delete:{rel}:")
            if (other / rel).is_file() and (other / rel).read_bytes() != (root / rel).read_bytes():
                out.append(f"foreign:{rel}:")
    for part in sorted(p.name for p in root.glob("part-*") if p.is_dir()):
        out += [f"foreign-tables:{part}:", f"foreign-part:{part}:"]
    return out


# --- the child -----------------------------------------------------------------------------------------


def _replace(path: Path, data: bytes | None) -> None:
    """Write ``data`` to ``path`` as a new file (None: delete it): a file a reader of an earlier trial
    still maps keeps its bytes."""
    if data is None:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _damage(copy: Path, other: Path, trial: str) -> str:
    """Damage ``copy`` as ``trial`` says; what to restore afterwards (a path relative to ``copy``)."""
    kind, rel, arg = trial.split(":", 2)
    target = copy / rel if rel else copy
    if kind == "flip":
        data = bytearray(target.read_bytes())
        data[int(arg) // 8] ^= 1 << (int(arg) % 8)
        _replace(target, bytes(data))
    elif kind == "truncate":
        data = target.read_bytes()
        _replace(target, data[: int(len(data) * float(arg))])
    elif kind == "delete":
        _replace(target, None)
    elif kind == "foreign":
        _replace(target, (other / rel).read_bytes())
    elif kind == "foreign-tables":  # the part's metadata, tables and numbering: not its log
        for file in (other / rel).glob("*.arrow"):
            _replace(target / file.name, file.read_bytes())
    elif kind == "foreign-part":
        shutil.rmtree(target)
        shutil.copytree(other / rel, target)
    else:
        msg = f"unknown damage {kind!r}"
        raise ValueError(msg)
    return rel


def _restore(copy: Path, original: Path, rel: str) -> None:
    target, source = (copy / rel, original / rel) if rel else (copy, original)
    if source.is_dir():
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)
    else:
        _replace(target, source.read_bytes())


def queries(
    reader: Any, keys: list[str], evidence: list[str], as_of: int | None
) -> Iterator[tuple[str, Callable[[], Any]]]:
    """The reads of a trial, named: the seq, each of ``keys``' cell, versions and operations (and on a
    sharded state the first key's cell ``as_of`` a seq), each of ``evidence``, the frontier."""
    import pyarrow as pa

    yield "seq", lambda: reader.seq
    for key in keys:
        yield f"cell {key}", lambda key=key: reader.cell(key)
        yield f"versions {key}", lambda key=key: reader.versions(key)
        yield f"operations {key}", lambda key=key: reader.operations(key)
    if as_of is not None:
        yield f"cell {keys[0]} as of {as_of}", lambda: reader.cell_as_of(keys[0], as_of)
    for eid in evidence:
        yield f"evidence {eid}", lambda eid=eid: _or_key_error(lambda: reader.evidence(eid))

    def frontier() -> list[dict[str, Any]]:
        rows = pa.Table.from_batches(list(reader.frontier_batches(batch_rows=7))).to_pylist()
        return sorted(rows, key=lambda r: r["key"])

    yield "frontier", frontier


def _keys(graph: Any, state: Path) -> list[str]:
    """The keys a trial reads: of a sharded state, the first two each part owns (a read of one key opens
    its part alone); of a single state, four spread over its keys; and a key never written."""
    from pmem.graph.seams import partition_of
    from pmem.graph.shards import is_sharded, read_index

    keys = sorted(graph.keys())
    if not is_sharded(state):
        return [*keys[:: max(1, len(keys) // 4)][:4], "never.written"]
    parts = int(read_index(state)["partitions"])
    return [
        *(k for p in range(parts) for k in [k for k in keys if partition_of(k, parts) == p][:2]),
        "never.written",
    ]


def _or_key_error(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except KeyError:
        return "KeyError"


def _child(subject: Path, list_file: Path) -> int:
    from pmem.graph import ProvenanceGraph, StateFileError, StateReader
    from pmem.graph.shards import is_sharded

    original, other = subject / "state", subject / "other"
    graph = ProvenanceGraph.load(original)
    keys = _keys(graph, original)
    as_of = graph.seq // 2 if is_sharded(original) else None
    count = graph.stats()["evidence"]
    evidence = [f"e{n}" for n in (0, count // 2, count - 1, count)]  # the last is unknown: a KeyError
    reference = {name: read() for name, read in queries(StateReader(original), keys, evidence, as_of)}
    work = Path(
        tempfile.mkdtemp(prefix="reader-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    )
    copy = work / "state"
    if original.is_dir():
        shutil.copytree(original, copy)
    else:
        shutil.copyfile(original, copy)
    for trial in list_file.read_text().splitlines():
        print(f"{trial} start", flush=True)  # a crash from here on is this trial's
        restore = _damage(copy, other, trial)
        replies: Counter[str] = Counter()
        reader: StateReader | None = None
        try:
            reader = StateReader(copy)
        except StateFileError:
            replies["refused"] = len(reference)
        except Exception:  # what the trial measures
            replies["error"] = len(reference)
        for name, read in queries(reader, keys, evidence, as_of) if reader is not None else ():
            try:
                replies["same" if read() == reference[name] else "different"] += 1
            except StateFileError:
                replies["refused"] += 1
            except Exception:  # what the trial measures
                replies["error"] += 1
        _restore(copy, original, restore)
        verdict = next(v for v in VERDICTS if replies[v])
        print(f"{trial} {verdict} " + " ".join(f"{v}={replies[v]}" for v in VERDICTS), flush=True)
    shutil.rmtree(work)
    return 0


# --- running -------------------------------------------------------------------------------------------


def trials(subject: Path, chosen: list[str]) -> dict[str, str]:
    """Each trial's outcome (see the module docstring) on the state in ``subject``, read by children
    that are replaced when they crash."""
    work = Path(tempfile.mkdtemp(prefix="reader-fuzz-trials-"))
    try:
        return run_trials(HERE / "readerfuzz.py", subject, chosen, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def tally(results: dict[str, str]) -> dict[str, int]:
    """Trials, crashes, trials with a wrong answer, refused trials, and wrong answers (replies)."""
    verdicts = Counter(outcome.split(" ")[0].split(":")[0] for outcome in results.values())
    wrong = sum(
        int(field.split("=")[1])
        for outcome in results.values()
        for field in outcome.split(" ")[1:]
        if field.startswith("different=")
    )
    return {
        "trials": len(results),
        "crashes": verdicts["crash"],
        "wrong trials": verdicts["different"],
        "wrong answers": wrong,
        "errors": verdicts["error"],
        "refused": verdicts["refused"],
        "same": verdicts["same"],
    }


if __name__ == "__main__":
    raise SystemExit(_child(Path(sys.argv[1]), Path(sys.argv[2])))
