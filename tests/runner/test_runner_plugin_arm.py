"""A plugin arm goes through the one arm registry: validated by the config, run by the runners (other
processes, which import the plugin's module), and placed by the report in every table that lists arms.

The plugin is ``runner_plugins:tiny-registered``: ``tests/runner/runner_plugins.py`` registers the tiny
arm with ``pmem.arms.register_arm`` (label, display place right after ``pmem``) when imported; nothing
in the runner or the report names it.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from runner_helpers import config, read

from pmem.arms import arm_label, arm_names, resolve_arm, sort_arms
from pmem.report import Table, build_report, compute, open_run
from pmem.runner import ConfigError, load_config, parse_config, run_sweep

PLUGIN = "runner_plugins:tiny-registered"
ARMS = ("raw", PLUGIN, "pmem")  # listed out of display order on purpose

BODY = f"""
arms = {list(ARMS)!r}
[run]
runners = 2
in_flight = 4
batch = 8
flush_s = 0.2
[[benchmarks]]
name = "alfworld-revision"
subset = "chains"
L = 1
cases = 3
[[benchmarks]]
name = "alfworld-revision"
subset = "retraction"
d = 0
cases = 3
[[benchmarks]]
name = "alfworld-revision"
subsets = ["conflict", "two-step"]
cases = 2
[[benchmarks]]
name = "factconsolidation"
subset = "sh_6k"
[models.judge]
backend = "heuristic"
""".replace("'", '"')

MODELS = {"agent": {"backend": "heuristic"}, "embedder": {"backend": "hashing"}}


def _config(arms: list[str]) -> dict[str, object]:
    return {"arms": arms, "models": MODELS, "benchmarks": [{"name": "factconsolidation", "subset": "sh_6k"}]}


def test_config_validates_the_plugin_through_the_registry() -> None:
    spec = parse_config(_config(["pmem", PLUGIN]), source="p.toml")
    assert spec.arms == ("pmem", PLUGIN)
    entry = resolve_arm(PLUGIN)  # the config imported runner_plugins, which registered the arm
    assert entry.name == "tiny-registered" and entry.label == "tiny (registered test plugin)"
    assert "tiny-registered" in arm_names() and arm_label(PLUGIN) == entry.label
    assert sort_arms(["raw", PLUGIN, "pmem"]) == ["pmem", PLUGIN, "raw"]
    # what does not resolve is refused with the file and the key, before anything runs
    with pytest.raises(
        ConfigError, match=r"p\.toml: arms: plugin arm 'runner_plugins:nope': runner_plugins has no attribute"
    ):
        parse_config(_config(["runner_plugins:nope"]), source="p.toml")
    with pytest.raises(ConfigError, match=r"p\.toml: arms: cannot import 'no_such_module'"):
        parse_config(_config(["no_such_module:arm"]), source="p.toml")
    with pytest.raises(ConfigError, match=r"p\.toml: arms: plugin arm 'runner_plugins:POISON' is a str"):
        parse_config(_config(["runner_plugins:POISON"]), source="p.toml")
    # a plain registered name is known to this process only: runners could not build it
    with pytest.raises(ConfigError, match=r"unknown arm 'tiny-registered'.*name it module:attr"):
        parse_config(_config(["tiny-registered"]), source="p.toml")


#: tables that lay arms out in display order (as columns, or as the rows of one benchmark view)
ORDERED = ("table6_chains", "table8_retraction", "conflict_probe", "two_step", "table7_factconsolidation")


def _shown_arms(t: Table) -> list[str]:
    shown = t.shown
    if "arm" in shown.columns:
        return [a for a in dict.fromkeys(shown["arm"].to_list()) if a in ARMS]
    return [c for c in shown.columns if c in ARMS]


def test_plugin_arm_runs_in_a_sweep_and_is_placed_in_every_report_table(ray_cluster, tmp_path: Path) -> None:
    spec = load_config(config(tmp_path, BODY, name="plug"))
    res = run_sweep(spec, out=tmp_path / "runs", progress_enabled=False)
    results = pl.from_arrow(read(res.run_dir, "results"))
    assert res.failed == 0 and res.completed == res.total == len(ARMS) * results["history_id"].n_unique()
    assert set(results["arm"]) == set(ARMS)
    # the runners built the plugin (it commits every move: it answers the chains), with its own calls
    chains = results.filter((pl.col("arm") == PLUGIN) & (pl.col("subset") == "chains"))
    assert chains.height == 3 and chains["correct"].all()
    purposes = pl.from_arrow(read(res.run_dir, "requests")).filter(pl.col("arm") == PLUGIN)["purpose"]
    assert set(purposes) == {"extract", "answer"}

    m = compute(open_run(res.run_dir))
    arm_wise = {name: t for name, t in m.tables.items() if "arm" in t.data.columns and not t.empty}
    assert set(ORDERED) | {"accuracy", "stale_rate", "read_cost", "write_cost", "coverage"} <= set(arm_wise)
    for name, t in arm_wise.items():
        if name == "write_audit":
            continue  # rows for arms whose results carry the write-path audit columns; the tiny arm has none
        if name == "summary":
            continue  # the headline comparisons name the arms the paper compares, not every arm
        assert PLUGIN in set(t.data["arm"]), f"{name}: the plugin arm has no rows"
        assert PLUGIN in _shown_arms(t), f"{name}: the plugin arm is not shown"
    for name in ORDERED:  # the registry's display order: pmem (0), the plugin (0.5), raw (8)
        assert _shown_arms(m.tables[name]) == ["pmem", PLUGIN, "raw"], name
    paired = m.tables["paired"].data
    assert PLUGIN in set(paired["arm_b"]) and set(paired["arm_a"]) == {"pmem"}

    paths = build_report(res.run_dir)
    assert PLUGIN in paths.markdown.read_text(encoding="utf-8")
