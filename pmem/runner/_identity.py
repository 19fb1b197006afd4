"""Run identity: the config hash that names ``runs/<run-id>/``, and ``run.toml``.

The hash covers everything that changes answers: benchmarks, subsets and parameters, arms and their
options, the agent and embedder (backend and model ids), and the arms' prompt-template hashes. It
leaves out how the sweep executes (runners, in-flight, output folder, limit) and the judge: a judge
can be swapped and the same run re-judged without regenerating answers.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import json
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmem._atomic import atomic_write_bytes
from pmem._source import source_commit
from pmem.runner._config import canonical_json

if TYPE_CHECKING:
    from pmem.runner._config import SweepSpec, Target


def config_hash(spec: SweepSpec, prompts: dict[str, str]) -> str:
    ident = spec.identity()
    ident["prompts"] = prompts
    ident["model_ids"] = {"agents": [a.model_id for a in spec.agents], "embedder": spec.embedder.model_id}
    return hashlib.sha256(canonical_json(ident).encode()).hexdigest()


def run_id_for(spec: SweepSpec, digest: str, limit: int | None = None) -> str:
    """The run directory's name: the config's name and hash, and the limit when there is one.

    A run is the histories it answers, and its report covers every one its directory holds: a limited
    run resumed into the unlimited run's directory (or the reverse) would report histories beyond its
    limit, so a limit is part of the run's name (``--limit 2``: ``quickstart-06b5fe69fad6-limit2``).
    """
    return f"{spec.name}-{digest[:12]}" + (f"-limit{limit}" if limit else "")


def unit_id(target: Target, history_id: str, arm: str, model: str) -> str:
    key = canonical_json([target.benchmark, target.subset, dict(target.params), history_id, arm, model])
    return hashlib.sha1(key.encode()).hexdigest()[:20]


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("pmem", "ray", "pyarrow", "polars", "numpy", "scikit-learn", "aiohttp", "vllm"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


# -- a small TOML writer (the standard library only reads TOML) ---------------------------------------
def _key(k: str) -> str:
    return k if k and all(c.isalnum() or c in "-_" for c in k) else json.dumps(k)


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(str(k))} = {_scalar(x)}" for k, x in v.items()) + "}"
    return json.dumps(str(v), ensure_ascii=False)


def dumps_toml(data: dict[str, Any]) -> str:
    lines: list[str] = []

    def table(prefix: str, d: dict[str, Any]) -> None:
        simple = {
            k: v
            for k, v in d.items()
            if v is not None
            and not isinstance(v, dict)
            and not (isinstance(v, list) and v and all(isinstance(x, dict) for x in v))
        }
        if prefix and (simple or not d):
            lines.append(f"\n[{prefix}]")
        for k, v in simple.items():
            lines.append(f"{_key(k)} = {_scalar(v)}")
        for k, v in d.items():
            name = f"{prefix}.{_key(k)}" if prefix else _key(k)
            if isinstance(v, dict):
                table(name, v)
            elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                for item in v:
                    lines.append(f"\n[[{name}]]")
                    for ik, iv in item.items():
                        if iv is not None:
                            lines.append(f"{_key(ik)} = {_scalar(iv)}")

    table("", data)
    return "\n".join(lines).lstrip("\n") + "\n"


def run_toml(
    spec: SweepSpec,
    *,
    run_id: str,
    digest: str,
    prompts: dict[str, str],
    model_ids: dict[str, Any],
    source: str,
) -> str:
    doc = {
        "run": {
            "run_id": run_id,
            "config_hash": digest,
            "config_file": source,
            "written_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "commit": source_commit(),  # None (left out): not a git checkout
        },
        "versions": versions(),
        "model_ids": model_ids,
        "prompt_hashes": prompts,
        "config": spec.resolved(),
    }
    return "# Written by `pmem sweep`: the resolved config, its hash, versions and model ids.\n" + dumps_toml(
        doc
    )


def write_run_toml(path: Path, text: str) -> None:

    atomic_write_bytes(path, text.encode("utf-8"))
