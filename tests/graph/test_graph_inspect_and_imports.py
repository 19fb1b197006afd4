"""`pmem inspect`, and the core's import hygiene."""

from __future__ import annotations

import json
import subprocess
import sys

from pmem.cli import main
from pmem.graph import ProvenanceGraph


def test_inspect_prints_cells_and_key_history(tmp_path, capsys):
    g = ProvenanceGraph()
    g.apply("accept", "budget", "$30k", evidence=g.observe("Budget is $30k", time="2024-01-01"))
    g.apply("accept", "budget", "$50k", evidence=g.observe("Raised to $50k"))
    g.apply("reject", "budget", evidence=g.observe("$50k was an error"))
    g.save(tmp_path / "s.arrow")
    assert main(["inspect", str(tmp_path / "s.arrow")]) == 0
    out = capsys.readouterr().out
    assert "1 cells" in out and "budget = $30k" in out
    assert main(["inspect", str(tmp_path / "s.arrow"), "--key", "budget", "--ops"]) == 0
    out = capsys.readouterr().out
    assert "contradicted" in out and "Raised to $50k" in out and "2024-01-01" in out
    assert "reject" in out


def test_inspect_as_of_a_seq_or_a_time(tmp_path, capsys):
    g = ProvenanceGraph()
    g.apply("accept", "budget", "$30k", evidence=g.observe("Budget is $30k", time="2024-01-01"))
    g.apply("accept", "budget", "$50k", evidence=g.observe("Raised to $50k", time="2024-03-01"))
    g.save(tmp_path / "s.arrow")
    assert main(["inspect", str(tmp_path / "s.arrow"), "--as-of", "2"]) == 0
    out = capsys.readouterr().out
    assert "as of seq 2: 1 cells" in out and "budget = $30k" in out and "$50k" not in out
    assert main(["inspect", str(tmp_path / "s.arrow"), "--as-of", "2024-02-01", "--key", "budget"]) == 0
    out = capsys.readouterr().out
    assert "budget = $30k" in out and "Raised" not in out
    assert main(["inspect", str(tmp_path / "s.arrow"), "--as-of", "0", "--key", "budget"]) == 2
    assert "no such key 'budget'" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "s.arrow"), "--as-of", "soon"]) == 2
    assert "--as-of 'soon'" in capsys.readouterr().err


def test_inspect_refuses_damaged_state(tmp_path, capsys):
    bad = tmp_path / "bad.arrow"
    bad.write_bytes(b"junk")
    assert main(["inspect", str(bad)]) == 2
    assert "bad.arrow" in capsys.readouterr().err


def test_core_imports_no_other_pmem_package_ray_or_http():
    code = (
        "import sys, pmem, pmem.graph; g = pmem.ProvenanceGraph(); g.apply('accept','k','v');"
        "g.registry.resolve('a.b');"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'ray','aiohttp','httpx','requests','urllib3','vllm','polars'}"
        " or (m.startswith('pmem.') and not m.startswith('pmem.graph')));"
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


def test_inspect_missing_key_fails_naming_key_and_file(tmp_path, capsys):
    g = ProvenanceGraph()
    g.apply("accept", "budget", "$30k")
    g.apply("accept", "gone", "x")
    g.apply("revoke", "gone")  # an emptied cell is still a key: inspect shows its history
    path = tmp_path / "s.arrow"
    g.save(path)
    assert main(["inspect", str(path), "--key", "gone"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(path), "--key", "budget", "--key", "no.such.key"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert "no.such.key" in lines[0] and str(path) in lines[0]
    assert "budget" not in captured.out  # refused before printing anything


def test_inspect_missing_key_exit_status_from_a_real_process(tmp_path):
    path = tmp_path / "s.arrow"
    ProvenanceGraph().save(path)
    proc = subprocess.run(
        [sys.executable, "-m", "pmem.cli", "inspect", str(path), "--key", "nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "nope" in proc.stderr and "s.arrow" in proc.stderr


def test_inspect_escapes_values_like_render(tmp_path, capsys):
    g = ProvenanceGraph()
    g.apply("accept", "k", "x\nforged = 1", evidence=g.observe("said\nforged = 2"))
    g.apply("accept", "k", "y")
    path = tmp_path / "s.arrow"
    g.save(path)
    for args in ([], ["--all"], ["--key", "k", "--ops"]):
        assert main(["inspect", str(path), *args]) == 0
        out = capsys.readouterr().out
        assert not any(line.startswith("forged") for line in out.splitlines()), args


def test_erase_writes_a_new_state_and_prints_the_receipt(tmp_path, capsys):

    g = ProvenanceGraph()
    g.apply("accept", "user.city", "Lisbon", evidence=g.observe("I live in Lisbon"))
    g.apply("accept", "user.city", "Oslo", evidence=g.observe("Moved to Oslo, said Xylophon"))
    g.save(tmp_path / "s.arrow")
    assert main(["index", str(tmp_path / "s.arrow")]) == 0  # a search index: keys and hashed values
    capsys.readouterr()
    out = tmp_path / "erased.arrow"
    assert main(["erase", str(tmp_path / "s.arrow"), "e1", "--out", str(out)]) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert not (tmp_path / "s.arrow.search").exists()
    assert any(
        c.startswith(f"{tmp_path / 's.arrow.search'} (the search index: removed") for c in receipt["cleaned"]
    )
    assert receipt["evidence"] == "e1" and receipt["changed"] == {"user.city": ["Oslo", "Lisbon"]}
    assert receipt["erased_versions"] == ["v1"] and receipt["out"] == str(out)
    assert b"Xylophon" not in out.read_bytes() and b"Xylophon" in (tmp_path / "s.arrow").read_bytes()
    assert ProvenanceGraph.load(out).head_value("user.city") == "Lisbon"
    assert main(["erase", str(tmp_path / "s.arrow"), "e9", "--out", str(out)]) == 2
    assert "unknown evidence id 'e9'" in capsys.readouterr().err
    assert main(["erase", str(tmp_path / "s.arrow"), "e1", "--out", str(tmp_path / "s.arrow")]) == 2
    assert "is the input state" in capsys.readouterr().err


def test_erase_folds_a_journal_beside_the_state_so_no_copy_of_the_text_stays(tmp_path, capsys):

    from pmem.graph import JournaledGraph, journal_path

    state = tmp_path / "s.arrow"
    g = JournaledGraph.open(state)
    g.apply("accept", "user.city", "Lisbon", evidence=g.observe("I live in Lisbon"))
    g.commit()
    g.apply("accept", "user.city", "Oslo", evidence=g.observe("Moved to Oslo, said Xylophon"))
    g.commit()  # the second statement is in the journal only
    assert b"Xylophon" in journal_path(state).read_bytes()
    out = tmp_path / "erased.arrow"
    assert main(["erase", str(state), "e1", "--out", str(out)]) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert any("folded into" in c for c in receipt["cleaned"]) and not journal_path(state).exists()
    assert ProvenanceGraph.load(state).to_bytes() == g.to_bytes()  # STATE as it was, journal and all
    assert (
        b"Xylophon" not in out.read_bytes() and ProvenanceGraph.load(out).head_value("user.city") == "Lisbon"
    )
    out.replace(state)  # the user's last step: the erased state in STATE's place loads
    assert ProvenanceGraph.load(state).head_value("user.city") == "Lisbon"


def test_inspect_ops_names_each_operations_evidence(tmp_path, capsys):
    g = ProvenanceGraph()
    g.apply("accept", "cup_1.location", "shelf 2", evidence=g.observe("The cup is on shelf 2.", source="cam"))
    g.apply("reject", "cup_1.location", evidence=g.observe("That report was an error.", source="alice"))
    g.save(tmp_path / "s.arrow")
    assert main(["inspect", str(tmp_path / "s.arrow"), "--key", "cup_1.location", "--ops"]) == 0
    out = capsys.readouterr().out
    ops = out[out.index("operations:") :]
    assert "(cam): The cup is on shelf 2." in ops and "(alice): That report was an error." in ops


def test_inspect_as_of_a_time_on_a_state_without_times_is_an_error(tmp_path, capsys):
    g = ProvenanceGraph()
    g.apply("accept", "a.b", "x", evidence=g.observe("a b is x"))
    g.save(tmp_path / "s.arrow")
    assert main(["inspect", str(tmp_path / "s.arrow"), "--as-of", "2026-01-05"]) == 2
    err = capsys.readouterr().err
    assert "records no observation times" in err and "--as-of N" in err


def test_inspect_json_gives_every_view_as_one_document(tmp_path, capsys):

    g = ProvenanceGraph()
    g.apply("accept", "budget", "$30k", evidence=g.observe("Budget is $30k", time="2024-01-01"))
    g.apply("accept", "budget", "$50k", evidence=g.observe("Raised to $50k", time="2024-03-01"))
    g.apply("revoke", "budget", evidence=g.observe("$50k was never approved", source="cfo"))
    g.apply("accept", "gone", "x", evidence=g.observe("x"))
    g.apply("revoke", "gone", evidence=g.observe("not x"))
    state = str(tmp_path / "s.arrow")
    g.save(state)

    def view(*args: str) -> dict:
        assert main(["inspect", state, "--json", *args]) == 0
        return json.loads(capsys.readouterr().out)

    cells = view()
    assert cells["stats"]["operations"] == 5 and cells["as_of"] is None
    assert [(c["key"], c["value"], c["status"]) for c in cells["cells"]] == [("budget", "$30k", "active")]
    assert [c["key"] for c in view("--all")["cells"]] == ["budget", "gone"]
    past = view("--as-of", "4")
    assert past["as_of"] == {"seq": 4} and past["cells"][0]["value"] == "$50k"
    dated = view("--as-of", "2024-02-01")
    assert dated["as_of"] == {"time": "2024-02-01"} and dated["cells"][0]["value"] == "$30k"
    (key,) = view("--key", "budget", "--ops")["keys"]
    assert [v["value"] for v in key["versions"]] == ["$50k", "$30k"]
    assert (
        key["versions"][0]["status"] == "revoked" and key["versions"][0]["evidence"]["time"] == "2024-03-01"
    )
    revoke = key["operations"][-1]
    assert revoke["op"] == "revoke" and revoke["applied"] is True
    assert revoke["evidence"] == {
        "id": "e2",
        "text": "$50k was never approved",
        "source": "cfo",
        "time": None,
        "seq": 5,
        "valid_time": None,
    }
    assert "operations" not in view("--key", "budget")["keys"][0]
    assert main(["inspect", state, "--ops"]) == 2  # --ops needs a key: never silently ignored
    assert "--ops shows a key's operation log" in capsys.readouterr().err


def test_inspect_of_a_key_reads_the_state_without_loading_it_and_verified(tmp_path, capsys, monkeypatch):
    """``--key`` views of a sharded state (which ``load`` replays whole: seconds and gigabytes at ten
    million facts) come from the parts, with the union's ids, and a damaged file is still refused."""
    from shardlogs import random_log, sharded_state

    from pmem.graph._read._inspect import describe_key
    from pmem.graph.shards import owning_part

    state = sharded_state(tmp_path, random_log(9, 400), 3)
    union = ProvenanceGraph.load(state)
    keys = union.keys()[:3]
    expected = "\n".join(line for key in keys for line in describe_key(union, key, with_ops=True)) + "\n"

    def no_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("the --key view loaded the graph")

    # and as of a seq, each key replayed alone from its part's log
    at = union.seq // 2
    then = union.as_of(at)
    past = [key for key in keys if then.cell(key) is not None]
    assert past
    expected_then = "\n".join(line for key in past for line in describe_key(then, key, with_ops=True)) + "\n"
    monkeypatch.setattr(ProvenanceGraph, "load", no_load)
    assert main(["inspect", str(state), "--ops", *(a for key in keys for a in ("--key", key))]) == 0
    assert capsys.readouterr().out == expected
    as_of = ["--as-of", str(at), "--ops", *(a for key in past for a in ("--key", key))]
    assert main(["inspect", str(state), *as_of]) == 0
    assert capsys.readouterr().out == expected_then
    assert main(["inspect", str(state), *as_of, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["as_of"] == {"seq": at}
    monkeypatch.undo()
    versions = owning_part(state, keys[0]) / "versions.arrow"  # the part a read of keys[0] checks
    data = bytearray(versions.read_bytes())
    data[len(data) // 2] ^= 0x10
    versions.write_bytes(bytes(data))
    assert main(["inspect", str(state), "--key", keys[0]]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "versions.arrow" in err
