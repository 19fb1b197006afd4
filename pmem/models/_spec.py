"""A model's configuration: a small frozen spec, hashable, built from a config table.

This is the one definition of a model's configuration: the model layer builds clients from it and a
sweep config holds one per role. It is a value and knows no backend registry: :meth:`ModelSpec.check`
holds the checks of its options that need no backend, and :func:`pmem.models.validate_spec` adds the
backend's, so that a config names a bad table before anything runs.

>>> spec = ModelSpec.from_mapping({"backend": "openai", "model": "qwen", "url": "http://127.0.0.1:8000/v1",
...                                "concurrency": 32})
>>> spec.option("concurrency")
32
>>> ModelSpec("openai", model="qwen", url="http://127.0.0.1:8000").check()
Traceback (most recent call last):
...
pmem.models._spec.ModelSpecError: the openai backend needs a base URL ending in /v1, got 'http://127.0.0.1:8000'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: what a spec builds: a chat model or an embedder (the backends differ)
ModelKind = Literal["chat", "embedder"]

#: option names whose values are credentials: shown as ``***`` in reprs and error messages
SECRET_OPTIONS = frozenset({"api_key"})


def redacted(table: Mapping[str, Any]) -> dict[str, Any]:
    """``table`` with credential values masked, for reprs and error messages."""
    return {k: "***" if k in SECRET_OPTIONS and v else v for k, v in table.items()}


class ModelSpecError(ValueError):
    """A model spec the backend cannot use; ``key`` names the offending config key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _check_openai(spec: ModelSpec, kind: ModelKind) -> None:
    if spec.url is None or not spec.url.rstrip("/").endswith("/v1"):
        raise ModelSpecError("url", f"the openai backend needs a base URL ending in /v1, got {spec.url!r}")
    if kind != "embedder" and spec.model is None:
        raise ModelSpecError("model", "the openai backend needs a model name")


#: backend -> checks of a spec that need no server (``validate`` runs them)
_BACKEND_CHECKS: dict[str, Callable[[ModelSpec, ModelKind], None]] = {"openai": _check_openai}


#: How a structured (JSON) reply is asked for, per server family; ``structured`` in a model table picks one.
STRUCTURED_DIALECTS = {
    "json_schema": "response_format: {type: json_schema, json_schema: {schema}} (OpenAI, vLLM)",
    "structured_outputs": "structured_outputs: {json: schema} (vLLM's own field)",
    "both": "json_schema and structured_outputs together (servers that read either)",
    "json_object": "response_format: {type: json_object, schema} (llama.cpp's server)",
    "none": "no constraint: the prompt alone asks for JSON",
}
#: older spelling of ``json_schema``
_DIALECT_ALIASES = {"response_format": "json_schema"}


def structured_dialect(name: str) -> str:
    """The canonical dialect name, or ValueError listing the known ones.

    >>> structured_dialect("response_format"), structured_dialect("json_object")
    ('json_schema', 'json_object')
    """
    name = _DIALECT_ALIASES.get(name, name)
    if name not in STRUCTURED_DIALECTS:
        msg = f"structured must be one of {', '.join(STRUCTURED_DIALECTS)}, not {name!r}"
        raise ValueError(msg)
    return name


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A table option as a plain ``dict`` again (specs store tables as sorted pairs), recursively.

    >>> thaw((("top_k", 1), ("grammar", (("a", 2),))))
    {'top_k': 1, 'grammar': {'a': 2}}
    """
    if (
        isinstance(value, tuple)
        and value
        and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in value)
    ):
        return {k: thaw(v) for k, v in value}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
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

    def check(self, kind: ModelKind = "chat") -> ModelSpec:
        """This spec, if its options satisfy its backend's needs known here (a built-in backend's URL
        and model, the structured dialect); else :class:`ModelSpecError` naming the key. Whether the
        backend is registered is the registry's question (:func:`pmem.models.validate_spec`)."""
        check = _BACKEND_CHECKS.get(self.backend)
        if check is not None:
            check(self, kind)
        if self.option("structured") is not None:
            try:
                structured_dialect(str(self.option("structured")))
            except ValueError as exc:
                raise ModelSpecError("structured", str(exc)) from None
        return self

    def named_model(self) -> str:
        """The model this spec names: its ``served_model_name`` or ``model`` (or ``model_id``, ``name``),
        else the backend name (what :func:`pmem.models.model_id_of` falls back to)."""
        table = self.to_dict()
        for key in ("served_model_name", "model", "model_id", "name"):
            if isinstance(table.get(key), str) and table[key]:
                return str(table[key])
        return self.backend

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
