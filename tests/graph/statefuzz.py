"""Damage a directory or sharded state's files the ways a user, a tool or a bad copy does, and load each
damaged copy through the library in child processes.

The damage (:func:`cases`): delete a file, truncate it, swap two files, copy one in from another state of
the same kind (a file, or a whole part's tables), and edit the entries of a metadata file or of a sharded
state's index and seal it again (a digest sits beside the data: anyone can reseal), alone or with a copy
from another state whose digest the edit writes in. Each case is a function of the copy's root.

Outcomes, as :mod:`bitflips` counts them: ``refused`` (StateFileError), ``same`` (loaded the original
graph: ``to_bytes()`` equal, and for a sharded state the parts' versions tables too: a scan of them must
read what the original's does), ``different`` (loaded another graph), ``error:<Type>`` (any other
exception), ``crash:<signal>``. A child loads one copy after another and reports each as it goes; when it
dies, the copy it was loading is recorded as a crash and a new child goes on from the next one.

Run as a script it is the child: ``python statefuzz.py ORIGINAL LIST_FILE`` (damaged copies, one a line).
"""

from __future__ import annotations

import itertools
import json
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pyarrow as pa
from child_trials import run_trials

HERE = Path(__file__).resolve().parent

#: A damage: what it does, and the function doing it to a copy's root.
Case = tuple[str, Callable[[Path], None]]


def state_files(root: Path) -> list[str]:
    """Every file of a state, as paths relative to its root, sorted."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def entries(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """A sealed (name, value) file's entries and its schema metadata without the digest (to reseal it)."""
    table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    names, values = table.column("name").to_pylist(), table.column("value").to_pylist()
    return dict(zip(names, values, strict=True)), {k: v for k, v in meta.items() if not k.startswith("file_")}


def reseal(path: Path, changed: Mapping[str, str | None]) -> None:
    """Rewrite the sealed (name, value) file at ``path`` with ``changed`` entries (None: dropped), sealed
    with a digest that checks out, as P-Mem writes one."""
    from pmem.graph._persist._state import _write_sealed

    found, meta = entries(path)
    table = edited_entries(found, changed)
    path.unlink()
    _write_sealed(path, table, meta)


def edited_entries(found: Mapping[str, str], changed: Mapping[str, str | None]) -> pa.Table:
    """The (name, value) metadata table of ``found`` with ``changed`` entries (None: dropped)."""
    from pmem.graph._persist._state import _META_SCHEMA

    entries_ = dict(found)
    for name, value in changed.items():
        if value is None:
            entries_.pop(name, None)
        else:
            entries_[name] = value
    return pa.table([pa.array(list(entries_)), pa.array(list(entries_.values()))], schema=_META_SCHEMA)


def digest_of(path: Path) -> str:
    from pmem.graph._persist._sealing import _sealed_digest

    return _sealed_digest(path.read_bytes())


# --- the damage ----------------------------------------------------------------------------------------


def _delete(rel: str) -> Callable[[Path], None]:
    return lambda root: (root / rel).unlink()


def _truncate(rel: str, keep: float) -> Callable[[Path], None]:
    def run(root: Path) -> None:
        data = (root / rel).read_bytes()
        (root / rel).write_bytes(data[: int(len(data) * keep)])

    return run


def _swap(a: str, b: str) -> Callable[[Path], None]:
    def run(root: Path) -> None:
        first, second = (root / a).read_bytes(), (root / b).read_bytes()
        (root / a).write_bytes(second)
        (root / b).write_bytes(first)

    return run


def _copy_in(other: Path, rel: str) -> Callable[[Path], None]:
    return lambda root: shutil.copyfile(other / rel, root / rel)


def _edit(rel: str, changed: dict[str, str | None]) -> Callable[[Path], None]:
    return lambda root: reseal(root / rel, changed)


def _metadata_edits(seq: int) -> Iterator[tuple[str, dict[str, str | None]]]:
    """Edits of a state's metadata entries that its tables contradict, or that no graph saves."""
    seqs = ("-1", str(seq - 1), str(seq + 1), str(seq + 5000), "x", f"0{seq}", f" {seq}", "")
    for value in dict.fromkeys(seqs):  # (seq - 1 is -1 for a registry, which holds no arrival)
        yield f"seq={value!r}", {"seq": value}
    registries = ("{}", "[]", '"x"', "7", '{"threshold": 0.72}', "not json")
    registries += ('{"threshold": "high", "embedding": "hashing-char-2-4-1024", "confirm": "rule_confirm"}',)
    registries += ('{"threshold": 0.72, "embedding": 3, "confirm": "rule_confirm", "extra": 1}',)
    for value in registries:
        yield f"registry={value}", {"registry": value}
    authorities = (
        "{}",
        "null",
        "[]",
        '{"configured": "yes", "default": 1, "from_start": false, "settings": []}',
    )
    authorities += ('{"configured": false, "default": 1.5, "from_start": false, "settings": []}',)
    authorities += ('{"configured": false, "default": 1, "from_start": true, "settings": []}',)
    authorities += ('{"configured": false, "default": 1, "from_start": false, "settings": [[0, "a", 1]]}',)
    authorities += (
        f'{{"configured": true, "default": 1, "from_start": false, "settings": [[{seq + 1}, "a", 1]]}}',
    )
    authorities += ('{"configured": true, "default": 1, "from_start": false, "settings": [[0, "", 1]]}',)
    for value in authorities:
        yield f"authority={value}", {"authority": value}
    yield "statuses reversed", {"statuses": json.dumps(["erased", "undone", "revoked", "contradicted"])}
    yield "ops cut", {"ops": json.dumps(["accept", "contest"])}
    yield "edge_kinds garbage", {"edge_kinds": "[1, 2]"}
    yield "format", {"format": "pmem-other"}
    yield "schema_version 4", {"schema_version": "4"}
    yield "schema_version 9", {"schema_version": "9"}
    for name in ("seq", "registry", "authority", "statuses", "format", "file_xxh3_128.versions"):
        yield f"no {name}", {name: None}
    yield "versions digest of edges", {"file_xxh3_128.versions": "edges"}  # filled in by the caller


def _metadata_cases(root: Path, rel: str) -> Iterator[Case]:
    found, _ = entries(root / rel)
    seq = int(found["seq"])
    folder = (root / rel).parent
    for name, changed in _metadata_edits(seq):
        if changed.get("file_xxh3_128.versions") == "edges":
            changed = {"file_xxh3_128.versions": digest_of(folder / "edges.arrow")}
        yield f"edit {rel}: {name}", _edit(rel, changed)


def _index_cases(root: Path, other: Path) -> Iterator[Case]:
    from pmem.graph.shards import INDEX

    found, _ = entries(root / INDEX)
    partitions, rows = int(found["partitions"]), int(found["rows"])
    edits: list[tuple[str, dict[str, str | None]]] = [
        *(
            (f"partitions={v!r}", {"partitions": v})
            for v in (str(partitions + 1), str(partitions - 1), "two", "-1", "")
        ),
        *((f"rows={v!r}", {"rows": v}) for v in (str(rows - 1), str(rows + 1), "x")),
        ("format", {"format": "pmem-state"}),
        ("version 2", {"version": "2"}),
        ("an unknown entry", {"owner": "me"}),
        ("a stray file entry", {"file:part-0/log/extra.arrow": "0" * 32}),
        ("a digest not hex", {"file:registry/metadata.arrow": "z" * 32}),
    ]
    stats = sorted(name for name in found if name.startswith("stat."))
    edits += [(f"{name}+1", {name: str(int(found[name]) + 1)}) for name in stats]
    edits += [(f"no {name}", {name: None}) for name in [stats[0], "rows", "file:part-0/metadata.arrow"]]
    files = sorted(name for name in found if name.startswith("file:"))
    for a, b in itertools.pairwise(files):  # each digest replaced by the next file's
        edits.append((f"{a} names {b}'s digest", {a: found[b]}))
    for name, changed in edits:
        yield f"edit {INDEX}: {name}", _edit(INDEX, changed)
    # a part's tables (not its log) from another state, the index resealed to name them: the union is
    # still this state's, but a scan of the parts would read the other's
    for part in sorted(p.name for p in root.iterdir() if p.name.startswith("part-")):
        meta = f"{part}/metadata.arrow"

        def foreign_tables(copy: Path, part: str = part, meta: str = meta) -> None:
            for table in (other / part).glob("*.arrow"):
                shutil.copyfile(table, copy / part / table.name)
            reseal(copy / INDEX, {f"file:{meta}": digest_of(copy / meta)})

        yield f"{part}'s tables from another state, the index resealed", foreign_tables

        def foreign_part(copy: Path, part: str = part) -> None:
            shutil.rmtree(copy / part)
            shutil.copytree(other / part, copy / part)
            theirs, _ = entries(other / INDEX)
            reseal(copy / INDEX, {k: v for k, v in theirs.items() if k.startswith(f"file:{part}/")})

        yield f"{part} whole from another state, the index resealed", foreign_part

        def part_edited(copy: Path, part: str = part, meta: str = meta) -> None:
            seq = int(entries(copy / meta)[0]["seq"])
            reseal(copy / meta, {"seq": str(seq + 1)})
            reseal(copy / INDEX, {f"file:{meta}": digest_of(copy / meta)})

        yield f"{meta}: seq+1, the index resealed", part_edited


def cases(root: Path, other: Path) -> list[Case]:
    """Every damage of the state at ``root`` (a directory or sharded state), ``other`` a state of the
    same kind to copy from."""
    from pmem.graph.shards import INDEX

    files = state_files(root)
    out: list[Case] = []
    for rel in files:
        out.append((f"delete {rel}", _delete(rel)))
        for keep in (0.0, 0.5, 0.99):
            out.append((f"truncate {rel} to {keep:.0%}", _truncate(rel, keep)))
        if (other / rel).is_file():
            out.append((f"{rel} from another state", _copy_in(other, rel)))
        if rel.endswith("metadata.arrow"):
            out.extend(_metadata_cases(root, rel))
    by_name: dict[str, list[str]] = {}
    for rel in files:
        by_name.setdefault(Path(rel).name if "/log/" not in rel else "segment", []).append(rel)
    for same in by_name.values():  # a table of one part for the same table of another
        out.extend((f"swap {a} and {b}", _swap(a, b)) for a, b in itertools.pairwise(same))
    for folder in sorted({str(Path(rel).parent) for rel in files if rel.endswith("metadata.arrow")}):
        prefix = "" if folder == "." else f"{folder}/"
        for a, b in (("evidence", "edges"), ("versions", "operations"), ("metadata", "keys")):
            out.append(
                (
                    f"swap {prefix}{a}.arrow and {prefix}{b}.arrow",
                    _swap(f"{prefix}{a}.arrow", f"{prefix}{b}.arrow"),
                )
            )
    if (root / INDEX).is_file():
        out.extend(_index_cases(root, other))
        parts = sorted(p.name for p in root.iterdir() if p.name.startswith("part-"))
        out.append(("a part folder removed", lambda copy: shutil.rmtree(copy / parts[-1])))
        out.append(
            ("a part folder more", lambda copy: shutil.copytree(copy / parts[0], copy / f"part-{len(parts)}"))
        )
        out.append(("part-0 named part-00", lambda copy: (copy / "part-0").rename(copy / "part-00")))
    return out


# --- running -------------------------------------------------------------------------------------------


def part_versions(root: Path) -> list[pa.Table]:
    """What a scan of a sharded state's ``part-*/versions.arrow`` reads (none for another state): a
    loaded sharded state is the same only if these are too, since its union is replayed from the logs."""
    parts = sorted(root.glob("part-*/versions.arrow"))
    return [pa.ipc.open_file(pa.memory_map(str(p))).read_all() for p in parts]


def _child(original: Path, list_file: Path) -> int:
    from pmem.graph import ProvenanceGraph, StateFileError

    reference = ProvenanceGraph.load(original).to_bytes(), part_versions(original)
    for line in list_file.read_text().splitlines():
        print(f"{line} start", flush=True)  # a crash from here on is this copy's
        try:
            graph = ProvenanceGraph.load(line)
            scanned = part_versions(Path(line))
            same = len(scanned) == len(reference[1]) and all(
                a.equals(b) for a, b in zip(scanned, reference[1], strict=True)
            )
            outcome = "same" if graph.to_bytes() == reference[0] and same else "different"
        except StateFileError:
            outcome = "refused"
        except Exception as exc:  # what the trial measures
            outcome = f"error:{type(exc).__name__}:{str(exc)[:160]}"
        print(f"{line} {outcome}", flush=True)
    return 0


def trials(original: Path, chosen: list[Case]) -> dict[str, str]:
    """Each case's outcome, by its name (see the module docstring): each applied to a fresh copy of
    ``original``, all loaded by children that are replaced when they crash."""
    work = Path(tempfile.mkdtemp(prefix="state-fuzz-"))
    names: dict[str, str] = {}
    try:
        for i, (name, damage) in enumerate(chosen):
            copy = work / f"{i:04d}"
            shutil.copytree(original, copy)
            damage(copy)
            names[str(copy)] = name
        found = run_trials(HERE / "statefuzz.py", original, list(names), work)
        return {names[path]: outcome for path, outcome in found.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(_child(Path(sys.argv[1]), Path(sys.argv[2])))
