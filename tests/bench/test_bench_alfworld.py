"""ALFWorld-Revision generation: determinism, chain structure, retraction and conflict probes."""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict

import pyarrow as pa
import pytest

from pmem.bench import alfworld_templates as T
from pmem.bench import iter_histories
from pmem.bench._alfworld import CHAIN_LENGTHS, N_CASES, generate_cases, iter_alfworld, load_vocab
from pmem.bench._arrow import histories_to_arrow


def _bytes(histories) -> bytes:
    sink = pa.BufferOutputStream()
    table = histories_to_arrow(histories)
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _mentions(text: str, loc: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(loc)}(?![\w])", text) is not None


@pytest.fixture(scope="module")
def chains() -> list:
    return list(iter_alfworld("chains"))


def test_same_seed_same_bytes_other_seed_differs() -> None:
    for subset in ("chains", "retraction", "conflict", "two-step"):
        a = hashlib.sha256(_bytes(iter_histories("alfworld-revision", subset))).hexdigest()
        b = hashlib.sha256(_bytes(iter_histories("alfworld-revision", subset))).hexdigest()
        c = hashlib.sha256(_bytes(iter_histories("alfworld-revision", subset, seed=7))).hexdigest()
        assert a == b, subset
        assert a != c, subset


def test_case_count_ids_and_legal_locations() -> None:
    cases = generate_cases()
    assert len(cases) == N_CASES == 140
    assert len({(c.scene, c.target) for c in cases}) == 140
    vocab = load_vocab()
    allowed = vocab["VAL_RECEPTACLE_OBJECTS"]
    types = {t.lower(): t for t in vocab["OBJECTS"]}
    recs = {r.lower(): r for r in vocab["RECEPTACLES"]}
    for c in cases:
        assert c.target not in c.distractors and len(set(c.distractors)) == 4
        scene_types = {t.lower() for t in vocab["scenes"][c.scene]["object_types"]}
        for obj, locs in c.locations.items():
            assert obj.split()[0] in scene_types
            for loc in locs:
                assert types[obj.split()[0]] in allowed[recs[loc.split()[0]]], (obj, loc)


def test_chain_structure(chains: list) -> None:
    assert len(chains) == 140 * len(CHAIN_LENGTHS)
    ids = [h.id for h in chains]
    assert len(set(ids)) == len(ids)
    assert "alfworld-revision/chains/L4/case017" in ids
    for h in chains:
        L = h.params["L"]
        per_obj: dict[str, list[tuple[str, dict]]] = defaultdict(list)
        for e in h.events:
            parsed = T.parse_event(e.text)
            assert parsed is not None, e.text
            per_obj[parsed[1]["obj"]].append(parsed)
        assert len(per_obj) == 5
        assert len(h.events) == 5 * (L + 1)
        for events in per_obj.values():
            # a stale record first, then exactly L moves, each starting where the previous ended
            assert events[0][0] == "stale_record"
            assert [k for k, _ in events[1:]] == ["update"] * L
            path = [events[0][1]["loc"]]
            for _, f in events[1:]:
                assert f["a"] == path[-1]
                path.append(f["b"])
            assert len(set(path)) == L + 1  # distinct locations
        (q,) = h.questions
        target = T.QUERY_PATTERN.match(q.text).group("obj")
        path = [per_obj[target][0][1]["loc"]] + [f["b"] for _, f in per_obj[target][1:]]
        assert q.qtype == "current" and q.gold == (path[-1],) and q.stale == tuple(path[:-1])
        assert q.after_event == len(h.events) - 1 and q.params == {"L": L}
        assert q.stale_key == T.location_key(target)


def test_merge_interleaves_chains(chains: list) -> None:
    # Uniform draws across queues: the target's events are not always contiguous or first.
    contiguous = 0
    for h in (x for x in chains if x.params["L"] == 8):
        target = T.QUERY_PATTERN.match(h.questions[0].text).group("obj")
        pos = [e.index for e in h.events if T.parse_event(e.text)[1]["obj"] == target]
        contiguous += pos == list(range(pos[0], pos[0] + len(pos)))
    assert contiguous < 5


def test_two_step_phrasing_and_gold() -> None:
    for h in iter_alfworld("two-step", L=4, cases=20):
        (q,) = h.questions
        target = T.QUERY_PATTERN.match(q.text).group("obj")
        mine = [T.parse_event(e.text) for e in h.events]
        mine = [m for m in mine if m[1]["obj"] == target]
        assert [k for k, _ in mine] == ["stale_record"] + ["two_step"] * 4
        assert all(f["c"] not in (f["a"], f["b"]) for _, f in mine[1:])
        assert q.gold == (mine[-1][1]["b"],)


def test_retraction_probe() -> None:
    hs = list(iter_alfworld("retraction"))
    assert len(hs) == 280 and {h.params["d"] for h in hs} == {0, 32}
    for h in hs:
        d, v1, v2 = h.params["d"], h.params["v1"], h.params["v2"]
        texts = [e.text for e in h.events]
        obj = T.QUERY_PATTERN.match(h.questions[0].text).group("obj")
        assert texts[0] == T.STALE_RECORD.format(obj=obj, loc=v1)
        assert texts[1] == T.UPDATE_NO_ORIGIN.format(obj=obj, loc=v2)
        assert texts[-1] == T.RETRACTION.format(obj=obj, v2=v2)
        assert len(texts) == d + 3  # v1, erroneous update, d distractors, retraction
        # v1 is stated once and never again after the erroneous update
        assert sum(_mentions(t, v1) for t in texts) == 1
        assert not any(_mentions(t, v1) for t in texts[1:])
        # distractors are other objects' records and updates
        for t in texts[2:-1]:
            kind, f = T.parse_event(t)
            assert kind in ("stale_record", "update") and f["obj"] != obj
        before, after = h.questions
        assert (before.qtype, before.gold, before.stale) == ("before_retraction", (v2,), (v1,))
        assert (after.qtype, after.gold, after.stale) == ("after_retraction", (v1,), (v2,))
        assert before.after_event == len(texts) - 2 and after.after_event == len(texts) - 1


def test_conflict_probe_counterbalanced() -> None:
    hs = list(iter_alfworld("conflict"))
    assert len(hs) == 140
    firsts = 0
    for h in hs:
        texts = [e.text for e in h.events]
        k0, f0 = T.parse_event(texts[0])
        k1, f1 = T.parse_event(texts[1])
        assert k0 == k1 == "conflict_report" and f0["obj"] == f1["obj"] and f0["loc"] != f1["loc"]
        assert len(texts) == 2 + 8 + 1
        kc, fc = T.parse_event(texts[-1])
        assert kc == "confirmation"
        confirmed_first = fc["loc"] == f0["loc"]
        assert confirmed_first or fc["loc"] == f1["loc"]
        assert h.params["confirmed"] == ("first" if confirmed_first else "second")
        firsts += confirmed_first
        before, after = h.questions
        assert before.qtype == "before_settle" and before.match == "all"
        assert set(before.gold) == {f0["loc"], f1["loc"]} and before.after_event == 9
        assert after.qtype == "after_settle" and after.gold == (fc["loc"],) and after.after_event == 10
        assert after.stale == (({f0["loc"], f1["loc"]} - {fc["loc"]}).pop(),)
    assert firsts == 70


def test_templates_are_the_issue_sentences() -> None:
    assert T.STALE_RECORD == "Earlier observation: {obj} was in {loc}."
    assert T.UPDATE == "Update: {obj} has been moved from {a} to {b}."
    assert T.QUERY == "Where is the {obj} now?"
    assert T.TWO_STEP == "{obj} was taken from {a} to {c}, then put in {b}."
    assert "{a}" not in T.RETRACTION and "{v2}" in T.RETRACTION


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="subset"):
        next(iter_alfworld("nope"))
    with pytest.raises(ValueError, match="L=9"):
        next(iter_alfworld("chains", L=9))
    with pytest.raises(ValueError, match="d=-1"):
        next(iter_alfworld("retraction", d=-1))


def test_same_bytes_across_processes_and_hash_seeds() -> None:
    import subprocess
    import sys

    code = (
        "import hashlib, pyarrow as pa\n"
        "from pmem.bench import iter_histories, histories_to_arrow\n"
        "t = histories_to_arrow(h for s in ('chains','retraction','conflict','two-step')"
        " for h in iter_histories('alfworld-revision', s, cases=30))\n"
        "sink = pa.BufferOutputStream()\n"
        "w = pa.ipc.new_stream(sink, t.schema); w.write_table(t); w.close()\n"
        "print(hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest())\n"
    )
    digests = set()
    for hash_seed in ("0", "12345"):
        env = {**__import__("os").environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1 and len(digests.pop()) == 64
