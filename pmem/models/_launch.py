"""How a model server is launched: the engines' command lines and environments, and a replica's config.

The engines (vLLM, llama-cpp-python's server, the stand-in :mod:`pmem.models.server`) differ only in their
command line, the variable that hands them the key and the path that says they are up
(:data:`LAUNCHERS`). :class:`ReplicaConfig` is one model's replicas as a config names them. Nothing here
starts a process: :mod:`pmem.models._replica` does.

Credentials: every replica requires ``Authorization: Bearer <key>``. The key is the configured one, else
a random one drawn when the pool starts (:mod:`pmem.models._replicas`); the server gets it through its
environment (``VLLM_API_KEY`` for vLLM, ``API_KEY`` for llama-cpp-python, ``PMEM_API_KEY`` for the
stand-in), never on its command line.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field

#: vLLM's OpenAI-compatible server, run as ``python -m`` (the same module on GPUs and CPUs)
VLLM_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: vLLM's structured-output settings for chat replicas (JSON without free whitespace)
STRUCTURED_OUTPUTS_CONFIG = '{"backend": "xgrammar", "disable_any_whitespace": true}'
#: the variable by which vLLM's CPU backend sizes its KV cache (GiB), and the size given unless configured
VLLM_CPU_KVCACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
DEFAULT_CPU_KV_CACHE_GIB = 1


def vllm_installed() -> bool:
    """Whether vLLM can be imported here (found without importing it: that takes seconds)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


#: what the stand-in server reads its key from (``pmem.models.server.API_KEY_ENV``; not imported here,
#: so that the driver does not load the server's aiohttp stack)
STANDIN_API_KEY_ENV = "PMEM_API_KEY"


@dataclass(frozen=True)
class LlamaCppOptions:
    """llama.cpp's own settings of a replica (read by :class:`LlamaCppLauncher` alone)."""

    n_threads: int | None = None  # CPU threads per replica (default: its actor's CPUs)
    server_args: tuple[str, ...] = ()  # extra `python -m llama_cpp.server` flags


@dataclass(frozen=True)
class VllmOptions:
    """vLLM's own settings of a replica (read by :class:`VllmLauncher` alone)."""

    gpu_memory_utilization: float = 0.9  # on GPUs (the CPU backend sizes its KV cache by kv_cache_gib)
    vllm_args: tuple[str, ...] = ()  # extra `vllm serve` flags
    kv_cache_gib: int | None = None  # on CPU: VLLM_CPU_KVCACHE_SPACE (the KV cache, whole GiB)


@dataclass(frozen=True)
class StandinOptions:
    """The stand-in server's own settings of a replica (read by :class:`StandinLauncher` alone)."""

    latency_ms: float = 0.0  # added to every reply


@dataclass(frozen=True)
class Launcher:
    """What differs between engines: the server's command line, how the server learns its key, how it
    says it is up, and how long it may take to start. One subclass per engine owns its command."""

    key_env: str
    health_path: str  # GET here answers 200 once the server is up
    health_needs_key: bool  # the path is behind the server's key
    start_timeout_s: float

    def command(self, cfg: ReplicaConfig, port: int, host: str) -> list[str]:
        """The server's argv for replica config ``cfg`` on ``host:port`` (documented flags only)."""
        raise NotImplementedError

    def env(self, cfg: ReplicaConfig) -> dict[str, str]:
        """The environment the engine needs beyond the key (none unless the engine says)."""
        return {}


@dataclass(frozen=True)
class LlamaCppLauncher(Launcher):
    """llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``)."""

    def command(self, cfg: ReplicaConfig, port: int, host: str) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            cfg.model,
            "--model_alias",
            cfg.served_name,
            "--host",
            host,
            "--port",
            str(port),
            "--n_ctx",
            str(cfg.max_model_len or 0),  # 0: the model's own trained context
            "--verbose",
            "false",
            # the server's default (true) keeps every prompt token's logits: an n_ctx x vocabulary
            # float matrix that fills as prompts grow (10 GB for Qwen's 151,936 tokens at n_ctx 16384:
            # two servers passed 6 and 8 GB in 13 minutes, 2026-12-04), and an output-layer product
            # per prompt token. Only the last token's are needed: no request asks for logprobs.
            "--logits_all",
            "false",
        ]
        own = cfg.llamacpp
        if own.n_threads:
            cmd += ["--n_threads", str(own.n_threads), "--n_threads_batch", str(own.n_threads)]
        if cfg.kind == "embed":
            cmd += ["--embedding", "true"]
        return [*cmd, *own.server_args]


@dataclass(frozen=True)
class VllmLauncher(Launcher):
    """vLLM's OpenAI server, on GPUs or its CPU backend."""

    def command(self, cfg: ReplicaConfig, port: int, host: str) -> list[str]:
        # vLLM's OpenAI server module, run by this interpreter: the `vllm` console script of the
        # CPU build fails at start (its distribution is named vllm-cpu), and a module of the
        # actor's own environment is the one its checks found
        cmd = [
            sys.executable,
            "-m",
            VLLM_SERVER_MODULE,
            "--model",
            cfg.model,
            "--host",
            host,
            "--port",
            str(port),
            "--served-model-name",
            cfg.served_name,
            "--tensor-parallel-size",
            str(cfg.tensor_parallel),
        ]
        if cfg.device != "cpu":  # the CPU backend sizes its KV cache by VLLM_CPU_KVCACHE_SPACE
            cmd += ["--gpu-memory-utilization", str(cfg.vllm.gpu_memory_utilization)]
        if cfg.max_model_len:
            cmd += ["--max-model-len", str(cfg.max_model_len)]
        if cfg.kind == "embed":
            cmd += ["--runner", "pooling"]
        else:
            # compact JSON: vLLM's grammars otherwise admit any whitespace, and a small model
            # spends its reply limit indenting (SmolLM2-135M on vLLM's CPU build: 162 of 162
            # extraction replies pretty-printed and cut at their limit). A server setting: the
            # xgrammar and guidance backends ignore the per-request field.
            cmd += ["--enable-prefix-caching", "--structured-outputs-config", STRUCTURED_OUTPUTS_CONFIG]
        return [*cmd, *cfg.vllm.vllm_args]

    def env(self, cfg: ReplicaConfig) -> dict[str, str]:
        """vLLM's CPU backend: its KV cache size."""
        if cfg.device == "cpu":
            return {VLLM_CPU_KVCACHE_ENV: str(cfg.vllm.kv_cache_gib or DEFAULT_CPU_KV_CACHE_GIB)}
        return {}


@dataclass(frozen=True)
class StandinLauncher(Launcher):
    """The deterministic stand-in server (:mod:`pmem.models.server`)."""

    def command(self, cfg: ReplicaConfig, port: int, host: str) -> list[str]:
        name = ["--embed-model", cfg.served_name] if cfg.kind == "embed" else ["--model", cfg.served_name]
        return [
            sys.executable,
            "-m",
            "pmem.models.server",
            "--host",
            host,
            "--port",
            str(port),
            *name,
            "--latency-ms",
            str(cfg.standin.latency_ms),
        ]


#: the engines a replica can run (``ReplicaConfig.launcher``; ``auto`` picks vllm or standin)
LAUNCHERS: dict[str, Launcher] = {
    "vllm": VllmLauncher("VLLM_API_KEY", "/health", False, 900.0),
    # pydantic-settings reads API_KEY for llama_cpp.server's --api_key; it has no /health route
    "llamacpp": LlamaCppLauncher("API_KEY", "/v1/models", True, 300.0),
    "standin": StandinLauncher(STANDIN_API_KEY_ENV, "/health", False, 60.0),
}


@dataclass(frozen=True)
class ReplicaConfig:
    model: str  # weights path (vllm) or model id (stand-in)
    served_name: str
    kind: str = "chat"  # chat | embed
    launcher: str = "auto"
    tensor_parallel: int = 1  # GPUs per replica
    max_model_len: int | None = None
    device: str = "gpu"  # "gpu" (CUDA) or "cpu" (vLLM's CPU backend, llama.cpp: CPUs reserved, no GPU)
    port: int | None = None  # a fixed port for replica 0 (replica i: port + i); None: a free one
    num_cpus: float = 0.0  # CPUs each replica's actor reserves in Ray
    health_timeout_s: float | None = None
    # the server process's resident memory, in GiB, past which its actor restarts it (None: never): a
    # guard for the runner's node. A llama.cpp server's own prompt cache counts only its entries' KV
    # bytes, not the logits copy each keeps, so with the cache on a Qwen server passed 7 GB (2026-12-04)
    max_rss_gib: float | None = None
    host: str = "auto"  # "auto": loopback when the replica shares the driver's node, else all interfaces
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may carry tokens: kept out of reprs
    # the bearer token every request must carry (set by the pool); never printed, never on a command line
    api_key: str | None = field(default=None, repr=False)
    # each engine's own settings, read by its launcher alone
    llamacpp: LlamaCppOptions = LlamaCppOptions()
    vllm: VllmOptions = VllmOptions()
    standin: StandinOptions = StandinOptions()

    def resolved_launcher(self) -> str:
        """The engine this replica runs. ``auto``: vLLM where it can serve (``device = "cpu"`` asks
        for vLLM's CPU backend; on ``gpu``, vLLM installed and an NVIDIA GPU visible), else the
        stand-in server."""
        if self.launcher != "auto":
            return self.launcher
        if self.device == "cpu":
            return "vllm"
        has_gpu = shutil.which("nvidia-smi") is not None and bool(os.environ.get("CUDA_VISIBLE_DEVICES", "x"))
        return "vllm" if vllm_installed() and has_gpu else "standin"

    @property
    def gpus(self) -> int:
        """The GPUs each replica's actor reserves (none for a CPU engine)."""
        if self.device == "cpu" or self.resolved_launcher() == "llamacpp":
            return 0
        return self.tensor_parallel

    def engine_env(self) -> dict[str, str]:
        """The environment the engine needs beyond the key (its launcher's :meth:`Launcher.env`)."""
        return self.engine.env(self)

    @property
    def engine(self) -> Launcher:
        return LAUNCHERS[self.resolved_launcher()]

    def command(self, port: int, host: str = "127.0.0.1") -> list[str]:
        """The child process's argv: its engine's command (:data:`LAUNCHERS`)."""
        return self.engine.command(self, port, host)

    def key_env(self) -> dict[str, str]:
        """The environment that hands the server its key (documented: ``VLLM_API_KEY`` for ``vllm serve``;
        an environment variable, unlike ``--api-key``, is not visible in the process list)."""
        if not self.api_key:
            return {}
        return {self.engine.key_env: self.api_key}
