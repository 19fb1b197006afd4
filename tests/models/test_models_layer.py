"""Layering, lazy imports, specs and the request-log table."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pmem.models import (
    MissingDependencyError,
    ModelSpec,
    RequestLog,
    RequestRecord,
    make_chat_model,
    make_embedder,
    records_to_table,
    register_embedder_backend,
)

PKG = Path(__file__).resolve().parents[2] / "pmem" / "models"


def test_models_imports_nothing_above_it() -> None:
    # pmem.graph is the layer below (DESIGN.md: imports point down); the heuristic takes its key words
    forbidden = ("pmem.arms", "pmem.bench", "pmem.runner", "pmem.report", "pmem.cli")
    offenders = []
    for path in PKG.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            )
            offenders += [(path.name, n) for n in names if n.startswith(forbidden)]
    assert offenders == []


def test_import_is_lazy() -> None:
    code = (
        "import sys, asyncio, pmem.models as m; "
        "asyncio.run(m.make_chat_model('heuristic').complete([{'role':'user','content':'### QUESTION\\nq'}],"
        " purpose='gate')); print(sorted(k for k in ('aiohttp', 'ray', 'sklearn') if k in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_dependency_names_the_extra() -> None:
    register_embedder_backend(
        "needs-missing",
        "pmem.models._st:SentenceTransformerEmbedder",
        extra="st",
        needs=("pmem_definitely_missing_module",),
    )
    with pytest.raises(MissingDependencyError, match=r"pip install 'pmem\[st\]'"):
        make_embedder({"backend": "needs-missing"})


def test_spec_from_config_table_is_frozen_and_hashable() -> None:
    spec = ModelSpec.from_mapping(
        {
            "backend": "openai",
            "model": "m",
            "url": "http://127.0.0.1:1/v1",
            "vllm_args": ["--a", "1"],
            "extra_body": {"top_k": 1},
        }
    )
    assert spec.option("vllm_args") == ("--a", "1") and dict(spec.option("extra_body")) == {"top_k": 1}
    assert hash(spec) == hash(ModelSpec.from_mapping(spec.to_dict()))
    with pytest.raises(ValueError, match="no 'backend'"):
        ModelSpec.from_mapping({"model": "x"})
    with pytest.raises(ValueError, match="needs a 'url'"):
        make_chat_model({"backend": "openai", "model": "m"})


def test_request_rows_to_parquet(tmp_path) -> None:
    log = RequestLog()
    log.add(RequestRecord("h1", "pmem", "extract", "heuristic", 12, 5, False, 0.01, None, True))
    log.add(RequestRecord("h2", "raw", "answer", "heuristic", 30, 2, True, 0.0, None, True))
    log.add(RequestRecord("h1", "pmem", "answer", "qwen", 0, 0, False, 1.5, "POST http://x failed", False))
    table = records_to_table(log.drain("h1"), run_id="r")
    pq.write_table(table, tmp_path / "part.parquet")
    back = pq.read_table(tmp_path / "part.parquet")
    assert back.num_rows == 2 and back.schema.field("prompt_tokens").type == pa.int64()
    assert back.column("error").to_pylist() == [None, "POST http://x failed"]
    assert [r.history_id for r in log.records()] == ["h2"]
    assert records_to_table([]).num_rows == 0
