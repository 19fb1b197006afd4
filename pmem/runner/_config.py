"""Sweep configs: TOML -> frozen, validated specs.

A config names benchmarks (with subsets and parameters), arms and models (DESIGN.md, command and
config contract). Every error names the file and the key; unknown keys are refused, because a typo
in a sweep config otherwise silently runs the wrong experiment for hours.

The names a config may use are not listed here: arms come from the arm registry (``pmem.arms``),
benchmarks with their subsets and parameter types from the benchmark registry (``pmem.bench``), and
model backends with their checks from the model layer (``pmem.models.ModelSpec.validate``).

>>> spec = parse_config({
...     "name": "tiny",
...     "arms": ["pmem"],
...     "models": {"agent": {"backend": "heuristic"}, "embedder": {"backend": "hashing"}},
...     "benchmarks": [{"name": "alfworld-revision", "subset": "chains", "L": [1, 2]}],
... }, source="tiny.toml")
>>> [t.label for t in spec.targets()]
['alfworld-revision/chains L=1', 'alfworld-revision/chains L=2']
"""

from __future__ import annotations

import itertools
import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmem.arms import ARM_NAMES, PEER_ARM_NAMES, VARIANT_ARM_NAMES, arm_names, resolve_arm
from pmem.bench import benchmark_info, benchmark_names, iter_histories
from pmem.models import (
    SECRET_OPTIONS,
    ModelKind,
    ModelSpec,
    ModelSpecError,
    make_chat_model,
    make_embedder,
    model_id_of,
    redacted,
    thaw,
    validate_spec,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from pmem.bench import History
    from pmem.models import ChatModel, Embedder, ResponseCache

MODEL_ROLES = ("agent", "embedder", "judge")

#: model options whose value is a table: ``extra_body`` (merged into every chat request body, nested
#: tables allowed) and ``env`` (string -> string, the environment of replica servers)
TABLE_OPTIONS = frozenset({"extra_body", "env"})
#: ``env`` variables whose values are credentials (by name): masked in run.toml, left out of the run identity
_SECRET_ENV_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def _secret_env(name: str) -> bool:
    return any(w in name.upper() for w in _SECRET_ENV_WORDS)


_TOP_KEYS = {"name", "description", "arms", "run", "models", "benchmarks", "arm_options", "read_tokens"}
#: the arms of ours that read within a budget: ``read_tokens`` (one value for the sweep) becomes theirs
#: unless their own table sets it. The reference reads (long-context: the whole history; no-memory:
#: nothing) and the peers (at their own defaults) keep theirs.
_UNBUDGETED = frozenset({"long-context", "no-memory", *PEER_ARM_NAMES})
_BENCH_KEYS = {"name", "subset", "subsets", "arms", "limit"}


class ConfigError(ValueError):
    """A sweep config is invalid; the message names the file and key."""


@dataclass(frozen=True)
class RunOptions:
    """How a sweep executes. None of these change what is computed, so none enter the config hash."""

    out: str = "runs"
    runners: int = 2
    in_flight: int = 32
    batch: int = 64
    flush_s: float = 1.0
    runner_cpus: float = 1.0
    placement: str = "driver-node"
    predict_only: bool = False
    fail_on_error: bool = False
    #: exit 0 even when an arm's model extraction wrote no fact at all (default: exit 1 and say why)
    allow_empty: bool = False
    limit: int | None = None
    judge_concurrency: int = 32
    cache: bool = True
    cache_path: str | None = None
    progress_s: float = 10.0
    max_unit_retries: int = 2
    #: how long to wait for a named Ray cluster (``--address``) before giving up with an error
    connect_timeout_s: float = 60.0


_RUN_TYPES: dict[str, tuple[type, ...]] = {
    "out": (str,),
    "runners": (int,),
    "in_flight": (int,),
    "batch": (int,),
    "flush_s": (int, float),
    "runner_cpus": (int, float),
    "placement": (str,),
    "predict_only": (bool,),
    "fail_on_error": (bool,),
    "allow_empty": (bool,),
    "limit": (int,),
    "judge_concurrency": (int,),
    "cache": (bool,),
    "cache_path": (str,),
    "progress_s": (int, float),
    "max_unit_retries": (int,),
    "connect_timeout_s": (int, float),
}


@dataclass(frozen=True, repr=False)
class RoleSpec:
    """One ``[models.ROLE]`` table: the role (agent, embedder, judge) and the model layer's spec."""

    role: str
    spec: ModelSpec

    @property
    def kind(self) -> ModelKind:
        return _kind(self.role)

    @property
    def backend(self) -> str:
        return self.spec.backend

    def chat_model(self, cache: ResponseCache | None = None) -> ChatModel:
        """The chat model of this role (agent, judge), built by the model layer from its spec itself
        (no dict in between), behind ``cache`` when there is one."""
        return make_chat_model(self.spec, cache=cache)

    def embedder_model(self, cache: ResponseCache | None = None) -> Embedder:
        """The embedder of the ``embedder`` role, built like :meth:`chat_model`."""
        return make_embedder(self.spec, cache=cache)

    def model(self, cache: ResponseCache | None = None) -> ChatModel | Embedder:
        """This role's model: its embedder for the ``embedder`` role, else its chat model."""
        return self.embedder_model(cache) if self.role == "embedder" else self.chat_model(cache)

    @property
    def options(self) -> tuple[tuple[str, Any], ...]:
        """Every key of the table but ``backend``, sorted (``model`` and ``url`` included)."""
        return tuple(sorted((k, v) for k, v in self.spec.to_dict().items() if k != "backend"))

    def as_dict(self) -> dict[str, Any]:
        """Every option, credentials included: what the model layer is built from (never written out).

        Table options are plain dicts again (the spec holds them as sorted pairs, to stay hashable)."""
        out = {"backend": self.backend, **dict(self.options)}
        for k in TABLE_OPTIONS & out.keys():
            out[k] = thaw(out[k]) or {}
        return out

    def public_dict(self) -> dict[str, Any]:
        """The options with credentials masked: what ``run.toml`` and messages may show."""
        out = redacted(self.as_dict())
        if isinstance(out.get("env"), dict):
            out["env"] = {k: "***" if _secret_env(k) and v else v for k, v in out["env"].items()}
        return out

    def identity(self) -> dict[str, Any]:
        """The options that change answers: credentials do not, so a rotated key keeps the run id."""
        out = {k: v for k, v in self.as_dict().items() if k not in SECRET_OPTIONS}
        if isinstance(out.get("env"), dict):
            out["env"] = {k: v for k, v in out["env"].items() if not _secret_env(k)}
        return out

    def __repr__(self) -> str:
        return f"RoleSpec(role={self.role!r}, backend={self.backend!r}, options={self.public_dict()!r})"

    @property
    def model_id(self) -> str:
        """The id the backend reports (results, request log and config hash carry it)."""
        return model_id_of(self.spec, self.kind)


def _kind(role: str) -> ModelKind:
    """What a role's model is, for the model layer: the embedder embeds, every other role chats."""
    return "embedder" if role == "embedder" else "chat"


@dataclass(frozen=True)
class Target:
    """One (benchmark, subset, scalar parameters) cell of the sweep; histories come from it."""

    benchmark: str
    subset: str
    params: tuple[tuple[str, Any], ...]
    arms: tuple[str, ...]
    limit: int | None = None

    @property
    def params_dict(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def label(self) -> str:
        ps = " ".join(f"{k}={v}" for k, v in self.params if k != "path")
        return f"{self.benchmark}/{self.subset}" + (f" {ps}" if ps else "")

    def histories(self) -> Iterator[History]:
        """This target's histories, in the benchmark's order (``limit``: the first N); built-in and plugin
        (``module:function``) benchmarks alike, from the benchmark registry."""
        found: Iterable[History] = iter_histories(self.benchmark, self.subset, **self.params_dict)
        if self.limit is not None:
            found = itertools.islice(found, self.limit)
        yield from found


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    subsets: tuple[str, ...]
    #: parameter -> the values swept (a scalar in the config is a one-value sweep)
    params: tuple[tuple[str, tuple[Any, ...]], ...]
    arms: tuple[str, ...]
    limit: int | None = None


@dataclass(frozen=True)
class SweepSpec:
    name: str
    source: str
    benchmarks: tuple[BenchmarkSpec, ...]
    arms: tuple[str, ...]
    agents: tuple[RoleSpec, ...]
    embedder: RoleSpec
    judge: RoleSpec | None
    arm_options: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    run: RunOptions = field(default_factory=RunOptions)
    description: str = ""

    def targets(self) -> list[Target]:
        out: list[Target] = []
        for b in self.benchmarks:
            names = [k for k, _ in b.params]
            grids = [vals for _, vals in b.params]
            for subset in b.subsets:
                for combo in itertools.product(*grids) if grids else [()]:
                    out.append(Target(b.name, subset, tuple(zip(names, combo, strict=True)), b.arms, b.limit))
        return out

    def options_for(self, arm: str) -> dict[str, Any]:
        return dict(dict(self.arm_options).get(arm, ()))

    def identity(self) -> dict[str, Any]:
        """What the config hash covers: every input that changes answers (not the judge, not run knobs)."""
        return {
            "benchmarks": [
                # a benchmark's limit chooses the histories answered (left out when unset: the run ids
                # of configs without one stay what they were)
                {"name": t.benchmark, "subset": t.subset, "params": dict(t.params), "arms": list(t.arms)}
                | ({"limit": t.limit} if t.limit else {})
                for t in self.targets()
            ],
            "agents": [a.identity() for a in self.agents],
            "embedder": self.embedder.identity(),
            "arm_options": {k: dict(v) for k, v in self.arm_options},
        }

    def resolved(self) -> dict[str, Any]:
        """The whole config as plain data (for run.toml)."""
        models: dict[str, Any] = {"embedder": self.embedder.public_dict()}
        agents = [a.public_dict() for a in self.agents]
        models["agent"] = agents[0] if len(agents) == 1 else agents
        if self.judge is not None:
            models["judge"] = self.judge.public_dict()
        benches = []
        for b in self.benchmarks:
            d: dict[str, Any] = {"name": b.name, "subsets": list(b.subsets), "arms": list(b.arms)}
            d.update({k: list(v) for k, v in b.params})
            if b.limit is not None:
                d["limit"] = b.limit
            benches.append(d)
        run = {k: v for k, v in self.run.__dict__.items() if v is not None}
        return {
            "name": self.name,
            "description": self.description,
            "arms": list(self.arms),
            "run": run,
            "models": models,
            "arm_options": {k: dict(v) for k, v in self.arm_options},
            "benchmarks": benches,
        }


def config_error(source: str, where: str, msg: str) -> ConfigError:
    """The error of a config file (sweep or ingest): ``SOURCE: WHERE: MSG``, naming the file and key."""
    return ConfigError(f"{source}: {where}: {msg}")


def check_keys(source: str, where: str, table: dict[str, Any], allowed: set[str]) -> None:
    """Refuse keys of ``table`` not in ``allowed`` (a typo must not silently run another experiment)."""
    unknown = sorted(set(table) - allowed)
    if unknown:
        msg = f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} (allowed: {', '.join(sorted(allowed))})"
        raise config_error(source, where, msg)


def _arm_list(source: str, where: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
        raise config_error(source, where, f"must be a non-empty list of arm names, got {value!r}")

    if value == ["all"]:
        return ARM_NAMES
    for a in value:
        if ":" in a:
            try:
                resolve_arm(a)  # a plugin that does not import fails here, not in every history
            except ValueError as exc:
                raise config_error(source, where, str(exc)) from None
        elif a not in ARM_NAMES and a not in VARIANT_ARM_NAMES and a not in PEER_ARM_NAMES:
            known = ", ".join((*ARM_NAMES, *VARIANT_ARM_NAMES, *PEER_ARM_NAMES))
            msg = f"unknown arm {a!r} (known: {known}; or module:attr)"
            if a in arm_names():
                # registered in this process only: the runners (other processes) would not know it
                msg += (
                    "; it is registered in this process only: name it module:attr so that runners import it"
                )
            raise config_error(source, where, msg)
    if len(set(value)) != len(value):
        raise config_error(source, where, f"duplicate arm names in {value!r}")
    return tuple(value)


def parse_role(source: str, role: str, table: Any) -> RoleSpec:
    """One ``[models.ROLE]`` table (of a sweep or an ingest config) -> its :class:`RoleSpec`, validated by
    the model layer (:meth:`pmem.models.ModelSpec.validate`); errors name the file and key."""
    where = f"[models.{role}]"
    if not isinstance(table, dict):
        raise config_error(source, where, f"must be a table, got {type(table).__name__}")
    backend = table.get("backend")
    if not isinstance(backend, str) or not backend:
        raise config_error(
            source, f"{where} backend", "is required (heuristic | hashing | openai | vllm ...)"
        )
    for k, v in table.items():
        if k in TABLE_OPTIONS:
            if not isinstance(v, dict):
                raise config_error(source, f"{where} {k}", f"must be a table, got {v!r}")
        elif isinstance(v, dict):
            msg = f"nested tables are not supported in model options (only in {', '.join(sorted(TABLE_OPTIONS))})"
            raise config_error(source, f"{where} {k}", msg)
    for name, value in table.get("env", {}).items():
        if not isinstance(value, str):
            msg = f'environment values must be strings, got {value!r} (quote it: {name} = "{value}")'
            raise config_error(source, f"{where} env.{name}", msg)
    if "options" in table:
        raise config_error(source, f"{where} options", "give model options as keys of the table itself")
    for k in ("model", "url"):
        if k in table and not isinstance(table[k], str):
            raise config_error(source, f"{where} {k}", f"must be a string, got {table[k]!r}")
    try:
        spec = validate_spec(ModelSpec.from_mapping(table), _kind(role))
    except ModelSpecError as exc:
        raise config_error(source, f"{where} {exc.key}", str(exc)) from None
    return RoleSpec(role, spec)


def _param_values(source: str, where: str, key: str, value: Any, typ: type | None) -> tuple[Any, ...]:
    vals = value if isinstance(value, list) else [value]
    if not vals:
        raise config_error(source, f"{where} {key}", "an empty list sweeps nothing")
    for v in vals:
        if typ is None:
            if isinstance(v, dict | list):
                raise config_error(source, f"{where} {key}", f"parameter values must be scalars, got {v!r}")
            continue
        ok = isinstance(v, typ) and not (typ is int and isinstance(v, bool))
        if not ok:
            raise config_error(
                source, f"{where} {key}", f"must be {typ.__name__} (or a list of them), got {v!r}"
            )
        if typ is int and v < 0:
            raise config_error(source, f"{where} {key}", f"must be >= 0, got {v!r}")
    if len(set(map(repr, vals))) != len(vals):
        raise config_error(source, f"{where} {key}", f"duplicate values in {vals!r}")
    return tuple(vals)


def _benchmark(
    source: str, i: int, table: Any, default_arms: tuple[str, ...] | None, base: Path
) -> BenchmarkSpec:
    where = f"[[benchmarks]] #{i + 1}"
    if not isinstance(table, dict):
        raise config_error(source, where, "must be a table")

    name = table.get("name")
    if not isinstance(name, str) or not name:
        raise config_error(
            source,
            f"{where} name",
            f"is required (one of {', '.join(benchmark_names())}, or module:function)",
        )
    where = f"[[benchmarks]] {name!r}"
    try:
        info = benchmark_info(name)
    except ValueError as exc:
        msg = (
            str(exc)
            if ":" in name
            else f"unknown benchmark (known: {', '.join(benchmark_names())}; or module:function)"
        )
        raise config_error(source, f"{where} name", msg) from None
    if "subset" in table and "subsets" in table:
        raise config_error(source, where, "give either subset or subsets, not both")
    subsets = table.get("subsets", table.get("subset"))
    if subsets is None:
        if info.default_subset is None:
            raise config_error(
                source, f"{where} subsets", f"is required (one of {', '.join(info.accepted_subsets)})"
            )
        subsets = [info.default_subset]
    if isinstance(subsets, str):
        subsets = [subsets]
    if not isinstance(subsets, list) or not subsets or not all(isinstance(s, str) for s in subsets):
        raise config_error(source, f"{where} subsets", f"must be a non-empty list of names, got {subsets!r}")
    for s in subsets:
        if not info.accepts(s):
            raise config_error(
                source,
                f"{where} subsets",
                f"unknown subset {s!r} (known: {', '.join(info.accepted_subsets)})",
            )
    param_types = info.params
    allowed = _BENCH_KEYS | (set(param_types) if param_types is not None else set(table))
    check_keys(source, where, table, allowed)
    params: list[tuple[str, tuple[Any, ...]]] = []
    for key in sorted(set(table) - _BENCH_KEYS):
        typ = param_types.get(key) if param_types is not None else None
        vals = _param_values(source, where, key, table[key], typ)
        if key == "path":
            resolved = []
            for v in vals:
                # ${VAR} lets a shared config point at data each user keeps elsewhere
                p = Path(os.path.expandvars(v)).expanduser()
                p = p if p.is_absolute() else (base / p)
                if not p.exists() or "$" in str(p):
                    msg = f"{p} does not exist (the config says {v!r}; give the data file's path)"
                    raise config_error(source, f"{where} path", msg)
                resolved.append(str(p.resolve()))
            vals = tuple(resolved)
        params.append((key, vals))
    if "arms" in table:
        arms = _arm_list(source, f"{where} arms", table["arms"])
    elif default_arms is not None:
        arms = default_arms
    else:
        raise config_error(
            source, f"{where} arms", "no arms: give arms = [...] at the top level or in this table"
        )
    limit = table.get("limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise config_error(source, f"{where} limit", f"must be a positive integer, got {limit!r}")
    return BenchmarkSpec(name=name, subsets=tuple(subsets), params=tuple(params), arms=arms, limit=limit)


def _run_options(source: str, table: Any) -> RunOptions:
    if table is None:
        return RunOptions()
    if not isinstance(table, dict):
        raise config_error(source, "[run]", "must be a table")
    check_keys(source, "[run]", table, set(_RUN_TYPES))
    for k, v in table.items():
        types = _RUN_TYPES[k]
        if not isinstance(v, types) or (bool not in types and isinstance(v, bool)):
            raise config_error(
                source, f"[run] {k}", f"must be {' or '.join(t.__name__ for t in types)}, got {v!r}"
            )
    for k in ("runners", "in_flight", "batch", "judge_concurrency", "limit"):
        if k in table and table[k] < 1:
            raise config_error(source, f"[run] {k}", f"must be >= 1, got {table[k]!r}")
    if table.get("placement", "driver-node") not in ("driver-node", "spread"):
        raise config_error(
            source, "[run] placement", f"must be 'driver-node' or 'spread', got {table['placement']!r}"
        )
    if "max_unit_retries" in table and table["max_unit_retries"] < 0:
        raise config_error(source, "[run] max_unit_retries", "must be >= 0")
    if "connect_timeout_s" in table and not table["connect_timeout_s"] > 0:
        raise config_error(
            source, "[run] connect_timeout_s", f"must be > 0, got {table['connect_timeout_s']!r}"
        )
    return RunOptions(**table)


def parse_config(data: dict[str, Any], *, source: str = "<config>", base: Path | None = None) -> SweepSpec:
    """Validate a parsed TOML document into a :class:`SweepSpec`."""
    base = base or Path.cwd()
    check_keys(source, "top level", data, _TOP_KEYS)
    name = data.get("name", Path(source).stem if source != "<config>" else "sweep")
    if not isinstance(name, str) or not name or any(c in name for c in "/\\ "):
        raise config_error(
            source, "name", f"must be a non-empty name without spaces or slashes, got {name!r}"
        )
    description = data.get("description", "")
    if not isinstance(description, str):
        raise config_error(source, "description", "must be a string")
    default_arms = _arm_list(source, "arms", data["arms"]) if "arms" in data else None

    models = data.get("models")
    if not isinstance(models, dict):
        raise config_error(source, "[models]", "is required, with [models.agent] and [models.embedder]")
    check_keys(source, "[models]", models, set(MODEL_ROLES))
    agent_t = models.get("agent")
    if agent_t is None:
        raise config_error(source, "[models.agent]", "is required")
    agents = tuple(
        parse_role(source, "agent", t) for t in (agent_t if isinstance(agent_t, list) else [agent_t])
    )
    if len({a.model_id for a in agents}) != len(agents):
        raise config_error(
            source, "[[models.agent]]", "two agents share a model id; give each a distinct `model`"
        )
    if "embedder" not in models:
        raise config_error(source, "[models.embedder]", "is required")
    embedder = parse_role(source, "embedder", models["embedder"])
    judge = parse_role(source, "judge", models["judge"]) if "judge" in models else None

    benches_t = data.get("benchmarks")
    if not isinstance(benches_t, list) or not benches_t:
        raise config_error(source, "[[benchmarks]]", "at least one benchmark table is required")
    benches = tuple(_benchmark(source, i, t, default_arms, base) for i, t in enumerate(benches_t))

    arm_opts_t = data.get("arm_options", {})
    if not isinstance(arm_opts_t, dict):
        raise config_error(source, "[arm_options]", "must be a table of [arm_options.ARM] tables")
    used = {a for b in benches for a in b.arms}
    tables: dict[str, dict[str, Any]] = {}
    for arm, opts in sorted(arm_opts_t.items()):
        if arm not in used:
            raise config_error(source, f"[arm_options.{arm}]", f"arm {arm!r} is not run by any benchmark")
        if not isinstance(opts, dict):
            raise config_error(source, f"[arm_options.{arm}]", "must be a table")
        tables[arm] = dict(opts)
    budget = data.get("read_tokens")
    if budget is not None:
        if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
            raise config_error(source, "read_tokens", f"must be a positive number of tokens, got {budget!r}")
        for arm in sorted(used - _UNBUDGETED):
            if resolve_arm(arm).builtin:
                tables.setdefault(arm, {}).setdefault("read_tokens", budget)
    arm_options = [(arm, tuple(sorted(opts.items()))) for arm, opts in sorted(tables.items())]

    spec = SweepSpec(
        name=name,
        source=source,
        benchmarks=benches,
        arms=default_arms or tuple(dict.fromkeys(a for b in benches for a in b.arms)),
        agents=agents,
        embedder=embedder,
        judge=judge,
        arm_options=tuple(arm_options),
        run=_run_options(source, data.get("run")),
        description=description,
    )
    labels = [(t.label, t.arms) for t in spec.targets()]
    seen: set[str] = set()
    for label, _ in labels:
        if label in seen:
            raise config_error(source, "[[benchmarks]]", f"{label} is listed twice")
        seen.add(label)
    return spec


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A config file's TOML document; a missing, unreadable, non-UTF-8 or invalid file is a ConfigError
    naming it (sweep and ingest configs alike)."""
    p = Path(path)
    if p.is_dir():
        msg = f"{p}: is a directory, not a config file (give a .toml file)"
        raise ConfigError(msg)
    if not p.is_file():
        msg = f"{p}: config file not found"
        raise ConfigError(msg)
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        msg = f"{p}: not UTF-8 text (byte {exc.start}: {exc.reason}); TOML files must be UTF-8"
        raise ConfigError(msg) from exc
    except OSError as exc:
        msg = f"{p}: cannot read config: {exc.strerror or exc}"
        raise ConfigError(msg) from exc
    except tomllib.TOMLDecodeError as exc:
        msg = f"{p}: not valid TOML: {exc}"
        raise ConfigError(msg) from exc


def load_config(path: str | os.PathLike[str]) -> SweepSpec:
    """Read and validate a sweep config file."""
    data = read_toml(path)
    return parse_config(data, source=str(path), base=Path(path).resolve().parent)


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
