"""A model's configuration: a small frozen spec, hashable, built from a config table.

>>> spec = ModelSpec.from_mapping({"backend": "openai", "model": "qwen", "url": "http://127.0.0.1:8000/v1",
...                                "concurrency": 32})
>>> spec.option("concurrency")
32
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: option names whose values are credentials: shown as ``***`` in reprs and error messages
SECRET_OPTIONS = frozenset({"api_key"})


def redacted(table: Mapping[str, Any]) -> dict[str, Any]:
    """``table`` with credential values masked, for reprs and error messages."""
    return {k: "***" if k in SECRET_OPTIONS and v else v for k, v in table.items()}


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


@dataclass(frozen=True, repr=False)
class ModelSpec:
    """``[models.<role>]``: a backend name, a model id (or weights path), an endpoint URL and options.

    Every other key of the config table becomes an option; options are stored as a sorted tuple of
    pairs so that the spec stays hashable (lists become tuples).
    """

    backend: str
    model: str | None = None
    url: str | None = None
    options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any]) -> ModelSpec:
        if "backend" not in table:
            msg = f"model config {redacted(table)!r} has no 'backend' (one of heuristic, hashing, openai, vllm ...)"
            raise ValueError(msg)
        rest = {k: v for k, v in table.items() if k not in ("backend", "model", "url", "options")}
        rest.update(dict(table.get("options") or {}))
        return cls(
            backend=str(table["backend"]),
            model=None if table.get("model") is None else str(table["model"]),
            url=None if table.get("url") is None else str(table["url"]),
            options=_freeze(rest),
        )

    def __repr__(self) -> str:
        # a configured api_key must not reach logs or tracebacks through the spec's repr
        options = tuple(redacted(dict(self.options)).items())
        return f"ModelSpec(backend={self.backend!r}, model={self.model!r}, url={self.url!r}, options={options!r})"

    def option(self, name: str, default: Any = None) -> Any:
        for key, value in self.options:
            if key == name:
                return value
        return default

    def with_options(self, **options: Any) -> ModelSpec:
        merged = dict(self.options)
        merged.update(options)
        return ModelSpec(self.backend, self.model, self.url, _freeze(merged))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"backend": self.backend}
        if self.model is not None:
            out["model"] = self.model
        if self.url is not None:
            out["url"] = self.url
        out.update(dict(self.options))
        return out


def as_spec(spec: ModelSpec | Mapping[str, Any] | str) -> ModelSpec:
    """Accept a spec, a config table, or a bare backend name."""
    if isinstance(spec, ModelSpec):
        return spec
    if isinstance(spec, str):
        return ModelSpec(backend=spec)
    return ModelSpec.from_mapping(spec)
