from __future__ import annotations

import importlib
import importlib.metadata
import re
import tomllib
from collections.abc import Callable
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
    assert [t.label for t in spec.targets()] == [
        "alfworld-revision/chains L=1",
        "alfworld-revision/chains L=2",
    ]
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
        (
            "\n[models.judge]\nbackend = 'openai'\nurl = 'http://x'\nmodel = 'm'\n",
            "url: the openai backend needs a base URL ending in /v1",
        ),
        ("\n[arm_options.crud]\nk = 1\n", "[arm_options.crud]: arm 'crud' is not run"),
        ("^read_tokens = 0\n", "read_tokens: must be a positive number of tokens, got 0"),
        ("^read_tokens = '500'\n", "read_tokens: must be a positive number of tokens, got '500'"),
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
    text = run_toml(
        spec,
        run_id="t-1",
        digest="ab" * 32,
        prompts={"extract": "123"},
        model_ids={"agents": ["heuristic"], "embedder": "hashing"},
        source="c.toml",
    )
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
        _assert_builds_or_names_its_extra(lambda m=m: make_chat_model(m.spec).model_id, m.model_id)
    _assert_builds_or_names_its_extra(
        lambda: make_embedder(spec.embedder.spec).model_id, spec.embedder.model_id
    )


def _assert_builds_or_names_its_extra(build: Callable[[], str], model_id: str) -> None:
    # CI installs only `.[dev]`: a config for an optional engine (jobs/cpu_llm.toml) must then fail
    # with the install hint, and only because the engine's package really is absent
    from pmem.models import MissingDependencyError

    try:
        assert build() == model_id
    except MissingDependencyError as exc:
        missing = re.search(r"needs the package '([\w.]+)'", str(exc))
        if missing:
            with pytest.raises(ImportError):
                importlib.import_module(missing.group(1))
        else:  # a model split across part wheels (the qwen extras) names the first part not installed
            part = re.search(r"; ([\w.-]+) is not installed", str(exc))
            assert part, str(exc)
            with pytest.raises(importlib.metadata.PackageNotFoundError):
                importlib.metadata.distribution(part.group(1))
        assert "pip install 'pmem[" in str(exc)


def test_configured_api_key_never_written_and_not_in_the_run_identity() -> None:
    def spec_with(key: str | None) -> SweepSpec:
        agent = {"backend": "openai", "url": "http://127.0.0.1:9/v1", "model": "m"}
        if key is not None:
            agent["api_key"] = key
        return parse_config(
            {
                "arms": ["pmem"],
                "models": {"agent": agent, "embedder": {"backend": "hashing"}},
                "benchmarks": [{"name": "factconsolidation", "subset": "sh_6k"}],
            }
        )

    secret = "USER-SECRET-KEY-123"
    spec = spec_with(secret)
    text = run_toml(spec, run_id="r", digest="d", prompts={}, model_ids={}, source="x.toml")
    assert secret not in text and "***" in text
    assert secret not in repr(spec)
    assert spec.agents[0].as_dict()["api_key"] == secret  # the model layer still gets it
    # a rotated key is the same run: resume must not start over
    assert config_hash(spec, {}) == config_hash(spec_with("another"), {}) == config_hash(spec_with(None), {})


def test_one_read_budget_for_every_memory_arm_of_ours_and_none_for_the_references(tmp_path: Path) -> None:
    """``read_tokens`` at the top level is every budgeted arm's option (their own table wins); the
    whole-history reference, no-memory and the peers keep their own reads; the budget is in the run's
    identity (it changes answers)."""
    arms = '["pmem", "raw-ordered", "add-only", "long-context", "no-memory", "mem0"]'
    text = "read_tokens = 500\n" + BASE.replace('arms = ["pmem", "raw"]', f"arms = {arms}")
    spec = load_config(_write(tmp_path, text + "\n[arm_options.add-only]\nread_tokens = 200\n"))
    budgets = {arm: spec.options_for(arm).get("read_tokens") for arm in spec.arms}
    assert budgets == {
        "pmem": 500,
        "raw-ordered": 500,
        "add-only": 200,
        "long-context": None,
        "no-memory": None,
        "mem0": None,
    }
    unbudgeted = load_config(_write(tmp_path, text.replace("read_tokens = 500\n", "")))
    assert config_hash(spec, {}) != config_hash(unbudgeted, {})


def test_quickstart_identity_is_pinned() -> None:
    # the run id names the run directory and resume finds work by it: a refactor must not move it
    # (prompt hashes are left out here, so that a deliberate prompt change does not trip this pin)
    spec = load_config(REPO / "jobs" / "quickstart.toml")
    assert config_hash(spec, {}) == "06b5fe69fad6220bb67e714a578c24a247fe619aded605164c6183d791a659aa"


def test_model_tables_hold_the_model_layers_spec() -> None:
    import pmem.models
    import pmem.runner

    agent = {
        "backend": "openai",
        "url": "http://127.0.0.1:9/v1",
        "model": "m",
        "concurrency": 4,
        "stop": ["x"],
    }
    spec = parse_config(
        {
            "arms": ["pmem"],
            "models": {"agent": agent, "embedder": {"backend": "hashing"}},
            "benchmarks": [{"name": "factconsolidation", "subset": "sh_6k"}],
        }
    )
    a = spec.agents[0]
    # one meaning per name: the model's spec is pmem.models.ModelSpec; the runner's table of a role is RoleSpec
    assert isinstance(a.spec, pmem.models.ModelSpec) and not hasattr(pmem.runner, "ModelSpec")
    assert (a.role, a.backend, a.spec.model, a.spec.url) == ("agent", "openai", "m", "http://127.0.0.1:9/v1")
    assert a.as_dict() == {
        "backend": "openai",
        "concurrency": 4,
        "model": "m",
        "stop": ("x",),
        "url": "http://127.0.0.1:9/v1",
    }
    assert a.model_id == "m" and spec.embedder.model_id == pmem.models.make_embedder("hashing").model_id


def test_a_roles_client_is_built_from_its_model_spec_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Config -> RoleSpec -> the model layer's factory: the pmem.models.ModelSpec object travels, no dict."""
    from pmem.runner import _config, model_client

    seen: list[object] = []
    for name in ("make_chat_model", "make_embedder"):  # the model layer's factories, as the runner binds them
        real = getattr(_config, name)
        monkeypatch.setattr(
            _config, name, lambda spec, real=real, **kw: seen.append(spec) or real(spec, **kw)
        )
    spec = parse_config(
        {
            "arms": ["pmem"],
            "models": {"agent": {"backend": "heuristic"}, "embedder": {"backend": "hashing"}},
            "benchmarks": [{"name": "factconsolidation", "subset": "sh_6k"}],
        }
    )
    model_client(spec.agents[0], "agent:heuristic", {}, None)
    model_client(spec.embedder, "embedder", {}, None)
    assert seen[0] is spec.agents[0].spec and seen[1] is spec.embedder.spec


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ("backend = 'nope'", "[models.judge] backend: unknown chat backend 'nope' (known: "),
        (
            "backend = 'openai'\nurl = 'http://x/v1'",
            "[models.judge] model: the openai backend needs a model name",
        ),
        (
            "backend = 'openai'\nurl = 'http://x/v1'\nmodel = 7",
            "[models.judge] model: must be a string, got 7",
        ),
        ("backend = 'heuristic'\noptions = 'x'", "[models.judge] options: give model options as keys"),
        (
            "backend = 'heuristic'\n[models.judge.sub]\nk = 1",
            "[models.judge] sub: nested tables are not supported",
        ),
    ],
)
def test_model_errors_name_file_and_key(tmp_path: Path, table: str, needle: str) -> None:
    p = _write(tmp_path, BASE + "\n[models.judge]\n" + table + "\n")
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert str(ei.value).startswith(f"{p}: ") and needle in str(ei.value)


def test_embedder_backends_come_from_the_model_layer(tmp_path: Path) -> None:
    bad = BASE.replace('[models.embedder]\nbackend = "hashing"', '[models.embedder]\nbackend = "heuristic"')
    with pytest.raises(
        ConfigError, match=r"\[models.embedder\] backend: unknown embedder backend 'heuristic'"
    ):
        load_config(_write(tmp_path, bad))


def test_benchmarks_come_from_the_benchmark_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pmem.bench import _registry as R
    from pmem.bench import iter_histories, register_benchmark

    monkeypatch.setattr(R._REGISTRY, "plugins", {})
    register_benchmark(
        "chains-again",
        lambda subset, **p: iter_histories("alfworld-revision", subset, **p),
        subsets=("chains",),
        params={"L": int, "cases": int},
    )
    text = BASE + "\n[[benchmarks]]\nname = 'chains-again'\nsubset = 'chains'\nL = 3\ncases = 2\n"
    spec = load_config(_write(tmp_path, text))
    assert spec.targets()[-1].label == "chains-again/chains L=3 cases=2"
    for extra, needle in (
        ("subset = 'other'", "unknown subset 'other' (known: chains)"),
        ("subset = 'chains'\nL = 'x'", "L: must be int"),
        ("subset = 'chains'\nd = 1", "unknown key 'd'"),
        ("", "subsets: is required (one of chains)"),
    ):
        with pytest.raises(ConfigError, match=re.escape(needle)):
            load_config(_write(tmp_path, BASE + f"\n[[benchmarks]]\nname = 'chains-again'\n{extra}\n"))
    with pytest.raises(
        ConfigError,
        match=r"name: unknown benchmark \(known: alfworld-revision, factconsolidation, locomo, "
        r"longmemeval, provenance-probes, chains-again; or module:function\)",
    ):
        load_config(_write(tmp_path, BASE + "\n[[benchmarks]]\nname = 'chains-agian'\nsubset = 'chains'\n"))
    with pytest.raises(ConfigError, match=r"name: cannot import 'no_such_module' for plugin benchmark"):
        load_config(_write(tmp_path, BASE + "\n[[benchmarks]]\nname = 'no_such_module:f'\n"))


TABLES = """
[models.agent.extra_body]
top_k = 1
repeat_penalty = 1.1
chat_template_kwargs = { enable_thinking = false }
[models.agent.env]
VLLM_ATTENTION_BACKEND = "FLASHINFER"
HF_TOKEN = "hf-SECRET-123"
"""


def test_model_tables_take_extra_body_and_env_tables(tmp_path: Path) -> None:
    spec = load_config(_write(tmp_path, BASE + TABLES))
    agent = spec.agents[0]
    extra = {"top_k": 1, "repeat_penalty": 1.1, "chat_template_kwargs": {"enable_thinking": False}}
    # the model layer's spec holds a table as sorted pairs (hashable); the model layer reads it back as a dict
    assert dict(agent.spec.option("extra_body"))["top_k"] == 1
    assert agent.as_dict()["extra_body"] == extra
    assert agent.as_dict()["env"] == {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "HF_TOKEN": "hf-SECRET-123"}
    hash(agent)  # still hashable: specs are cache keys
    text = run_toml(spec, run_id="r", digest="d", prompts={}, model_ids={}, source="c.toml")
    assert "hf-SECRET-123" not in text
    again = parse_config(tomllib.loads(text)["config"], source="run.toml")
    assert again.agents[0].as_dict()["extra_body"] == extra
    assert again.agents[0].public_dict()["env"] == {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "HF_TOKEN": "***"}
    assert config_hash(again, {}) == config_hash(spec, {})
    # an inline table is the same table; extra_body changes answers, so it is in the run identity
    inline = BASE.replace('backend = "heuristic"', 'backend = "heuristic"\nextra_body = { top_k = 2 }')
    assert load_config(_write(tmp_path, inline)).agents[0].as_dict()["extra_body"] == {"top_k": 2}
    assert config_hash(load_config(_write(tmp_path, inline)), {}) != config_hash(
        load_config(_write(tmp_path, BASE)), {}
    )


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        (
            "backend = 'heuristic'\nextra_body = 'top_k=1'",
            "[models.judge] extra_body: must be a table, got 'top_k=1'",
        ),
        ("backend = 'heuristic'\nenv = ['A=1']", "[models.judge] env: must be a table"),
        (
            "backend = 'heuristic'\n[models.judge.env]\nTP = 2",
            "[models.judge] env.TP: environment values must be strings",
        ),
        (
            "backend = 'heuristic'\n[models.judge.extra]\ntop_k = 1",
            "[models.judge] extra: nested tables are not supported in model options (only in env, extra_body)",
        ),
    ],
)
def test_table_options_are_checked(tmp_path: Path, table: str, needle: str) -> None:
    p = _write(tmp_path, BASE + "\n[models.judge]\n" + table + "\n")
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert str(ei.value).startswith(f"{p}: ") and needle in str(ei.value)


def test_a_limited_run_is_a_run_of_its_own(tmp_path: Path) -> None:
    """A run's report covers every history its directory holds: `--limit 2` after the full run used to
    resume the full run's directory and report thousands of histories (issue 41). A limit names the run."""
    from pmem.runner import plan_sweep

    spec = load_config(_write(tmp_path, BASE))
    full = plan_sweep(spec, out=tmp_path / "runs")
    two = plan_sweep(spec, out=tmp_path / "runs", limit=2)
    assert full.run_id == f"t-{full.digest[:12]}" and two.run_id == f"{full.run_id}-limit2"
    assert two.store.root != full.store.root and len(two.units) == 2 * 2 * 2 < len(full.units)
    assert plan_sweep(spec, out=tmp_path / "runs", limit=2).run_id == two.run_id  # and it resumes
    # [run] limit is --limit written down: the same run
    written = load_config(
        _write(tmp_path, BASE.replace('arms = ["pmem", "raw"]', 'arms = ["pmem", "raw"]\n[run]\nlimit = 2'))
    )
    assert plan_sweep(written, out=tmp_path / "runs").run_id == two.run_id
    # a benchmark's own limit chooses its histories: part of the hash (left out when unset)
    limited = load_config(_write(tmp_path, BASE + "limit = 3\n"))
    assert config_hash(limited, {}) != config_hash(spec, {})
