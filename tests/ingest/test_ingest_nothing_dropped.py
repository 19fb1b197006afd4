"""`pmem ingest` says what yields nothing (issue 41, items 7 and 8): rows whose extraction gave no fact are
counted and quoted in the summary, across a resume too; a config with only an ``[ingest]`` table runs
with the default models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pmem.ingest import IngestSpec, StreamError, ingest, parse_ingest_config
from pmem.ingest._workdir import workdir_of

#: The issue's stream: 13 rows, 3 of them sentences the heuristic agent has templates for.
ORDINARY = [
    "Bob no longer works at Google.",
    "On 2024-03-01 Alice moved to Berlin.",
    "I think the meeting went well.",
    "Carol's phone number changed last week.",
    "The train was late again this morning.",
    "We should buy more coffee.",
    "Dan is allergic to peanuts, apparently.",
    "The server room is too warm.",
    "Remember to call the plumber.",
    "Eve prefers tea over coffee.",
]
TEMPLATED = [
    "The city of Alice is Paris.",
    "Earlier observation: mug 1 was in shelf 2.",
    "The budget of the project is $30k.",
]


def _rows() -> list[dict[str, str]]:
    rows = [{"text": t} for t in ORDINARY]
    for at, text in zip((0, 5, 12), TEMPLATED, strict=True):
        rows.insert(at, {"text": text})
    return rows


def _config(tmp_path: Path) -> Path:
    """Only an [ingest] table: the models are the defaults (this used to ask for [models])."""
    path = tmp_path / "ingest.toml"
    path.write_text("[ingest]\nbatch_events = 2\ncheckpoint_every = 2\n")
    return path


def test_a_config_with_only_an_ingest_table_takes_the_default_models(tmp_path: Path) -> None:
    from pmem.ingest import load_ingest_config

    spec = load_ingest_config(_config(tmp_path))
    assert (spec.agent.backend, spec.embedder.backend, spec.batch_events) == ("heuristic", "hashing", 2)
    assert spec.identity_hash() == IngestSpec.default().identity_hash()  # the same models, the same state
    from pmem.runner import ConfigError

    # half a [models] table is a mistake, not a default
    with pytest.raises(ConfigError, match=r"\[models.embedder\]: is required"):
        parse_ingest_config({"models": {"agent": {"backend": "heuristic"}}})
    with pytest.raises(ConfigError, match=r"\[models\]: must be a table"):
        parse_ingest_config({"models": "heuristic"})


def test_rows_that_give_no_fact_are_counted_and_quoted_across_a_resume(ray_cluster, tmp_path: Path) -> None:
    rows = _rows()
    stream = tmp_path / "s.jsonl"
    lines = [json.dumps(r) for r in rows]
    good = lines[10]
    lines[10] = '{"source": "x"}'  # line 11: no text; the ingest stops there, checkpointed before it
    stream.write_text("\n".join(lines) + "\n")
    out = tmp_path / "state.arrow"
    cfg = _config(tmp_path)
    with pytest.raises(StreamError, match="line 11"):
        ingest(stream, out, config=cfg, progress=False)
    done = json.loads((workdir_of(out) / "manifest.json").read_text())["report"]
    assert (done["events"], done["no_fact_rows"]) == (10, 8)  # rows 1-10: 2 templated, 8 ordinary
    lines[10] = good
    stream.write_text("\n".join(lines) + "\n")
    report = ingest(stream, out, config=cfg, progress=False)
    assert report.resumed_from == 10 and report.events == 13 and report.facts == 3
    assert report.no_fact_rows == 10  # the resumed run goes on counting: none lost, none twice
    assert [e["row"] for e in report.no_fact_examples] == [2, 3, 4]
    assert report.no_fact_examples[0]["text"] == ORDINARY[0]
    line = report.lines()[2]
    assert line.startswith(
        'text rows that gave no fact: 10 of 13 (line 2 "Bob no longer works at Google."; '
        'line 3 "On 2024-03-01 Alice moved to Berlin."; line 4 "I think the meeting went well."; ...): '
        "the default agent (heuristic, no LLM) understands only the benchmarks' sentence templates"
    ), line
    assert report.to_dict()["no_fact_rows"] == 10  # --json and report.json carry it


def test_the_cli_summary_names_the_rows_and_exits_0_when_some_gave_facts(
    ray_cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pmem.cli import main

    stream = tmp_path / "s.jsonl"
    stream.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    out = tmp_path / "state.arrow"
    capsys.readouterr()
    assert main(["ingest", str(stream), "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[1].startswith("facts 3 ")
    assert printed[2].startswith("text rows that gave no fact: 10 of 13 (line 2 ")
    # a stream that gives no fact at all still exits 1, now with the rows quoted as well
    nothing = tmp_path / "n.jsonl"
    nothing.write_text("".join(json.dumps({"text": t}) + "\n" for t in ORDINARY[:4]))
    assert main(["ingest", str(nothing), "--out", str(tmp_path / "n.arrow"), "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert "text rows that gave no fact: 4 of 4" in captured.out
    assert "extracted no fact from 4 events" in captured.err
