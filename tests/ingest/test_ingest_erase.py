"""Erasure reaches every copy an ingest keeps, and stays erased (issue 29): after `pmem erase` (and the
erased state put in place of the old one), no byte under the state's folders holds the erased sentence or
the value only it stated, and an incremental ingest of the grown stream does not bring them back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pmem.cli import main
from pmem.graph import ProvenanceGraph
from pmem.ingest import ingest

CONFIG = '[models.agent]\nbackend = "heuristic"\n[models.embedder]\nbackend = "hashing"\n[ingest]\nbatch_events = 3\n'
SECRET = "Earlier observation: cup 7 was in countertop 99."
VALUE = "countertop 99"  # stated by the secret row alone


def _occurrences(folder: Path, needles: list[str], skip: Path) -> dict[str, list[str]]:
    """Every file under ``folder`` (but ``skip``, the user's stream) holding one of ``needles``."""
    found: dict[str, list[str]] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path != skip:
            data = path.read_bytes()
            hits = [n for n in needles if n.encode() in data]
            if hits:
                found[str(path.relative_to(folder))] = hits
    return found


def test_erase_scrubs_the_ingest_folder_and_stays_erased(ray_cluster, tmp_path: Path, capsys) -> None:
    rows = [
        "Earlier observation: cup 1 was in countertop 2.",
        "Earlier observation: cup 3 was in countertop 4.",
        SECRET,
        "Update: cup 1 has been moved from countertop 2 to drawer 5.",
        "Earlier observation: cup 8 was in countertop 6.",
    ]
    stream = tmp_path / "s.jsonl"
    stream.write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    config = tmp_path / "ingest.toml"
    config.write_text(CONFIG)
    state = tmp_path / "s.arrow"
    ingest(stream, state, config=config, progress=False)
    assert _occurrences(tmp_path, [SECRET, VALUE], skip=stream)  # the copies the erasure must reach
    eid = "e2"  # evidence ids follow the stream's rows
    assert ProvenanceGraph.load(state).evidence(eid).text == SECRET

    erased = tmp_path / "erased.arrow"
    assert main(["erase", str(state), eid, "--out", str(erased)]) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["changed"] == {"cup_7.location": [VALUE, None]}
    cleaned = "\n".join(receipt["cleaned"])
    assert "checkpoint-" in cleaned and "cache.sqlite" in cleaned and str(erased) in cleaned
    shutil.move(erased, state)  # the user puts the erased state in place
    assert _occurrences(tmp_path, [SECRET, VALUE], skip=stream) == {}
    erased_bytes = state.read_bytes()
    # the manifest names the erased state as the finished ingest's output: the same command is done
    again = ingest(stream, state, config=config, progress=False)
    assert "already complete" in capsys.readouterr().err and again.attempts == 1
    assert state.read_bytes() == erased_bytes

    with stream.open("a") as f:  # the stream grows; the same ingest goes on from its checkpoint
        f.write(json.dumps({"text": "Earlier observation: cup 9 was in countertop 3."}) + "\n")
    report = ingest(stream, state, config=config, progress=False)
    assert report.resumed_from == 5 and report.events == 6
    graph = ProvenanceGraph.load(state)
    assert graph.cell("cup_7.location") is None or graph.cell("cup_7.location").value is None
    assert graph.evidence(eid).text == "" and graph.cell("cup_9.location").value == "countertop 3"
    assert _occurrences(tmp_path, [SECRET, VALUE], skip=stream) == {}


def test_erase_waits_for_no_ingest_and_names_the_holder(ray_cluster, tmp_path: Path, capsys) -> None:
    from pmem._lock import hold_exclusive
    from pmem.ingest._workdir import workdir_of

    stream = tmp_path / "s.jsonl"
    stream.write_text(json.dumps({"text": SECRET}) + "\n")
    config = tmp_path / "ingest.toml"
    config.write_text(CONFIG)
    state = tmp_path / "s.arrow"
    ingest(stream, state, config=config, progress=False)
    held = hold_exclusive(workdir_of(state) / ".lock", "test")  # an ingest writing the folder now
    try:
        assert main(["erase", str(state), "e0", "--out", str(tmp_path / "e.arrow")]) == 2
    finally:
        held.release()
    err = capsys.readouterr().err
    assert "is in use by pid" in err and len(err.strip().splitlines()) == 1


def test_erase_from_a_sharded_state_refuses_before_writing_and_names_every_copy(
    ray_cluster, tmp_path: Path, capsys
) -> None:
    """Issue 41, item 6: a sharded state's parts keep the statement in write-log segments (hard-linked
    into the ingest folder), which cannot record an erasure. Before, the erased union was written, then
    the command exited 2 naming one file, and the statement stayed in the parts' logs and evidence."""
    rows = [
        "Earlier observation: cup 1 was in countertop 2.",
        SECRET,
        "Earlier observation: cup 8 was in countertop 6.",
    ]
    stream = tmp_path / "s.jsonl"
    stream.write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    config = tmp_path / "ingest.toml"
    config.write_text(CONFIG)
    state = tmp_path / "state"
    ingest(stream, state, config=config, partitions=2, progress=False, shards=True)
    holding = _occurrences(tmp_path, [SECRET, VALUE], skip=stream)
    assert any("/log/" in name for name in holding) and any("evidence.arrow" in name for name in holding)
    before = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}

    out = tmp_path / "erased.arrow"
    assert main(["erase", str(state), "e1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "cannot record an erasure: nothing was written" in err
    for name in holding:  # every copy named
        assert str(tmp_path / name) in err, name
    assert not out.exists()
    assert {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()} == before
