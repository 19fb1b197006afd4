from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from pmem.runner._config import ConfigError, SweepSpec, load_config, parse_config
from pmem.runner._identity import config_hash, run_toml

REPO = Path(__file__).resolve().parents[2]

BASE = """
name = "t"
arms = ["pmem", "raw"]
[models.agent]
backend = "heuristic"
[models.embedder]
backend = "hashing"
[[benchmarks]]
name = "alfworld-revision"
subset = "chains"
L = [1, 2]
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_valid_config_expands_targets(tmp_path: Path) -> None:
    spec = load_config(_write(tmp_path, BASE))
    assert [t.label for t in spec.targets()] == ["alfworld-revision/chains L=1", "alfworld-revision/chains L=2"]
    assert spec.targets()[0].arms == ("pmem", "raw")
    assert spec.agents[0].model_id == "heuristic"
    assert spec.run.runners == 2


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("\n[run]\nrunnerz = 2\n", "[run]: unknown key 'runnerz'"),
        ("^bogus = 1\n", "top level: unknown key 'bogus'"),
        ("\n[[benchmarks]]\nname = 'factconsolidation'\nsubset = 'sh_6k'\nL = 3\n", "unknown key 'L'"),
        ("\n[[benchmarks]]\nname = 'factconsolidation'\nsubset = 'sh_7k'\n", "unknown subset 'sh_7k'"),
        ("\n[[benchmarks]]\nname = 'nope'\n", "unknown benchmark"),
        ("\n[run]\nin_flight = 0\n", "[run] in_flight: must be >= 1"),
        ("\n[run]\nfail_on_error = 'yes'\n", "[run] fail_on_error: must be bool"),
        ("\n[models.judge]\nbackend = 'openai'\nurl = 'http://x'\nmodel = 'm'\n", "url: the openai backend needs a base URL ending in /v1"),
        ("\n[arm_options.crud]\nk = 1\n", "[arm_options.crud]: arm 'crud' is not run"),
    ],
)
def test_errors_name_file_and_key(tmp_path: Path, extra: str, needle: str) -> None:
    p = _write(tmp_path, extra[1:] + BASE if extra.startswith("^") else BASE + extra)
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert str(p) in str(ei.value)
    assert needle in str(ei.value)


def test_bad_param_type_and_unknown_arm(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"L: must be int"):
        load_config(_write(tmp_path, BASE.replace("L = [1, 2]", "L = ['x']")))
    with pytest.raises(ConfigError, match=r"arms: unknown arm 'pmemm'"):
        load_config(_write(tmp_path, BASE.replace('"raw"]', '"pmemm"]')))
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(_write(tmp_path, "name = "))


def test_missing_data_path_is_named(tmp_path: Path) -> None:
    text = BASE + "\n[[benchmarks]]\nname = 'longmemeval'\nsubset = 's'\npath = 'nowhere.json'\n"
    with pytest.raises(ConfigError, match=r"longmemeval'? path: .*nowhere.json does not exist"):
        load_config(_write(tmp_path, text))


def test_hash_covers_answers_not_execution(tmp_path: Path) -> None:
    a = load_config(_write(tmp_path, BASE))
    h = config_hash(a, {})
    assert config_hash(load_config(_write(tmp_path, BASE + "\n[run]\nrunners = 7\nin_flight = 3\n")), {}) == h
    judged = BASE + "\n[models.judge]\nbackend = 'heuristic'\n"
    assert config_hash(load_config(_write(tmp_path, judged)), {}) == h
    assert config_hash(load_config(_write(tmp_path, BASE.replace("L = [1, 2]", "L = [1, 4]"))), {}) != h
    assert config_hash(load_config(_write(tmp_path, BASE.replace('"raw"]', '"crud"]'))), {}) != h
    assert config_hash(a, {"extract": "abc"}) != h
    other_agent = BASE.replace('backend = "heuristic"', 'backend = "heuristic"\nmodel = "other"')
    assert config_hash(load_config(_write(tmp_path, other_agent)), {}) != h


def test_run_toml_round_trips(tmp_path: Path) -> None:
    spec = load_config(_write(tmp_path, BASE + "\n[arm_options.pmem]\ntop_k = 12\n"))
    text = run_toml(spec, run_id="t-1", digest="ab" * 32, prompts={"extract": "123"},
                    model_ids={"agents": ["heuristic"], "embedder": "hashing"}, source="c.toml")
    doc = tomllib.loads(text)
    assert doc["run"]["config_hash"] == "ab" * 32
    assert doc["config"]["benchmarks"][0]["L"] == [1, 2]
    assert doc["config"]["arm_options"]["pmem"]["top_k"] == 12
    assert doc["prompt_hashes"] == {"extract": "123"}
    assert "ray" in doc["versions"]
    # the resolved config is itself a valid config with the same identity
    again = parse_config(doc["config"], source="run.toml")
    assert config_hash(again, {}) == config_hash(spec, {})


@pytest.mark.parametrize("path", sorted((REPO / "jobs").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_job_configs_validate(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if "PMEM_LONGMEMEVAL" in path.read_text():
        # LongMemEval data is user-supplied: the config names it by variable and says so when unset
        monkeypatch.delenv("PMEM_LONGMEMEVAL_S", raising=False)
        with pytest.raises(ConfigError, match=r"PMEM_LONGMEMEVAL_S"):
            load_config(path)
        monkeypatch.setenv("PMEM_LONGMEMEVAL_S", str(path))  # any existing file passes validation
        monkeypatch.setenv("PMEM_LONGMEMEVAL_ORACLE", str(path))
    spec = load_config(path)
    assert spec.targets()
    assert all(t.arms for t in spec.targets())
    # the model layer accepts every model table (building a client starts nothing)
    from pmem.models import make_chat_model, make_embedder

    for m in (*spec.agents, *([spec.judge] if spec.judge else [])):
        assert make_chat_model(m.as_dict()).model_id == m.model_id
    assert make_embedder(spec.embedder.as_dict()).model_id == spec.embedder.model_id


def test_configured_api_key_never_written_and_not_in_the_run_identity() -> None:
    def spec_with(key: str | None) -> SweepSpec:
        agent = {"backend": "openai", "url": "http://127.0.0.1:9/v1", "model": "m"}
        if key is not None:
            agent["api_key"] = key
        return parse_config({"arms": ["pmem"], "models": {"agent": agent, "embedder": {"backend": "hashing"}},
                             "benchmarks": [{"name": "factconsolidation", "subset": "sh_6k"}]})

    secret = "USER-SECRET-KEY-123"
    spec = spec_with(secret)
    text = run_toml(spec, run_id="r", digest="d", prompts={}, model_ids={}, source="x.toml")
    assert secret not in text and "***" in text
    assert secret not in repr(spec)
    assert spec.agents[0].as_dict()["api_key"] == secret  # the model layer still gets it
    # a rotated key is the same run: resume must not start over
    assert config_hash(spec, {}) == config_hash(spec_with("another"), {}) == config_hash(spec_with(None), {})
