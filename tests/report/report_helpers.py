"""Shared by the report tests: a run directory made of a results/ table alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl


def results_run(root: Path, rows: list[dict[str, Any]], *, run_id: str, arms: list[str]) -> Path:
    """A run at ``root`` whose results/ holds ``rows`` and whose config lists ``arms`` (an `openai` agent)."""
    (root / "results").mkdir(parents=True)
    (root / "run.toml").write_text(
        f'run_id = "{run_id}"\n[config]\narms = {arms!r}\n'
        '[config.models.agent]\nbackend = "openai"\nmodel = "m"\n'.replace("'", '"')
    )
    pl.DataFrame(rows, infer_schema_length=None).write_parquet(root / "results" / "part-0.parquet")
    return root
