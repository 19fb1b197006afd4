"""The benchmark registry: the one list of benchmarks, subsets and parameter types; plugins too."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from pmem.bench import (
    BenchmarkInfo,
    Event,
    History,
    Question,
    benchmark_info,
    benchmark_names,
    iter_histories,
    list_benchmarks,
    register_benchmark,
)
from pmem.bench import _registry as R


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> R.Registry[BenchmarkInfo]:
    reg = R._REGISTRY
    monkeypatch.setattr(reg, "plugins", {})
    monkeypatch.setattr(reg, "_refs", {})
    return reg


def toy(subset: str = "default", n: int = 2) -> Iterator[History]:
    for i in range(n):
        q = Question(f"q{i}", "Where is the mug now?", ("shelf",), "current", 0)
        yield History(
            id=f"toy/{subset}/{i}",
            benchmark="toy",
            subset=subset,
            events=(Event(0, "Update: the mug has been moved from the desk to the shelf."),),
            questions=(q,),
        )


#: set by a test: what ``test_bench_registry:ENTRY`` resolves to
ENTRY = None
NOTHING = None


def test_builtin_benchmarks_subsets_and_parameter_types(registry: R.Registry[BenchmarkInfo]) -> None:
    assert benchmark_names() == (
        "alfworld-revision",
        "factconsolidation",
        "locomo",
        "longmemeval",
        "provenance-probes",
    )
    assert [i.name for i in list_benchmarks()] == list(benchmark_names())
    alf = benchmark_info("alfworld-revision")
    assert alf.subsets == ("chains", "retraction", "conflict", "two-step")
    assert dict(alf.params or {}) == {"L": int, "d": int, "cases": int, "seed": int}
    fc = benchmark_info("factconsolidation")
    assert fc.subsets == tuple(f"{h}_{n}" for h in ("sh", "mh") for n in ("6k", "32k", "64k", "262k"))
    assert dict(fc.params or {}) == {"events": int, "questions": int}
    lme = benchmark_info("longmemeval")
    assert lme.subsets == ("oracle", "s") and lme.accepted_subsets == ("oracle", "s", "oracle-ku", "s-ku")
    assert lme.accepts("s-ku") and not lme.accepts("m")
    assert (lme.params or {})["verify"] is bool and (lme.params or {})["path"] is str
    probes = benchmark_info("provenance-probes")
    assert probes.subsets == ("erasure", "authority", "late-arrival", "stale-premise", "merge")
    assert dict(probes.params or {}) == {"cases": int, "seed": int}
    locomo = benchmark_info("locomo")
    assert locomo.subsets == ("locomo10",) and locomo.default_subset == "locomo10"  # its one file
    assert dict(locomo.params or {}) == {"sessions": int, "questions": int, "conversations": str, "gold": str}
    # a config must name the subsets of the others
    assert all(i.default_subset is None for i in list_benchmarks() if i.name != "locomo")
    with pytest.raises(ValueError, match=r"unknown benchmark 'nope' \(known: alfworld-revision, "):
        benchmark_info("nope")


def test_registered_plugin_benchmark(registry: R.Registry[BenchmarkInfo]) -> None:
    info = register_benchmark("toy", toy, subsets=("a", "b"), params={"n": int}, description="two mugs")
    assert benchmark_names()[-1] == "toy" and benchmark_info("toy") is info
    assert [h.id for h in iter_histories("toy", "b", n=1)] == ["toy/b/0"]
    assert [h.id for h in iter_histories("toy", n=1)] == ["toy/a/0", "toy/b/0"]  # every subset
    with pytest.raises(ValueError, match="built in"):
        register_benchmark("longmemeval", toy)
    with pytest.raises(ValueError, match="without ':'"):
        register_benchmark("a:b", toy)


def test_module_attr_benchmarks(registry: R.Registry[BenchmarkInfo], monkeypatch: pytest.MonkeyPatch) -> None:
    mod = __name__
    plain = benchmark_info(f"{mod}:toy")  # a function: any subset, any parameters, "default" when none
    assert plain.params is None and plain.default_subset == "default" and plain.accepts("anything")
    assert [h.id for h in iter_histories(f"{mod}:toy", n=1)] == ["toy/default/0"]
    monkeypatch.setattr(sys.modules[mod], "ENTRY", register_benchmark("toy-x", toy, subsets=("a",)))
    assert benchmark_info(f"{mod}:ENTRY") is benchmark_info(f"{mod}:toy-x") is benchmark_info("toy-x")
    with pytest.raises(ValueError, match="registers no benchmark of that name"):
        benchmark_info(f"{mod}:nope")
    with pytest.raises(ValueError, match="is a NoneType: give a BenchmarkInfo"):
        benchmark_info(f"{mod}:NOTHING")
