"""What every peer arm shares: its store as one deterministic archive, and its end."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile

import pytest

from pmem.arms import ModelSet
from pmem.models import make_chat_model, make_embedder
from pmem.peers._base import REPLY_TOKENS, PeerArm


def _arm() -> PeerArm:
    return PeerArm("peer", ModelSet(make_chat_model("heuristic"), make_embedder("hashing")))


def test_the_same_store_gives_the_same_archive_whatever_order_and_time_its_files_were_written() -> None:
    a, b = _arm(), _arm()
    (a.folder / "sub").mkdir()
    (a.folder / "sub" / "z.bin").write_bytes(b"z" * 10)
    (a.folder / "a.db").write_bytes(b"a" * 3)
    (b.folder / "a.db").write_bytes(b"a" * 3)
    (b.folder / "sub").mkdir()
    (b.folder / "sub" / "z.bin").write_bytes(b"z" * 10)
    os.utime(b.folder / "a.db", (1, 1))
    assert a.store_archive() == b.store_archive()
    with tarfile.open(fileobj=io.BytesIO(a.store_archive())) as tar:
        assert tar.getnames() == ["a.db", "sub/z.bin"]
        assert tar.extractfile("sub/z.bin").read() == b"z" * 10  # type: ignore[union-attr]
    assert a.store_bytes() == 13 and a.retained() == b"a" * 3 + b"z" * 10
    for arm in (a, b):
        asyncio.run(arm.aclose())
        assert not arm.folder.exists()


def test_reply_tokens_sets_the_proxys_ceiling_and_a_bad_value_is_refused_naming_the_arm() -> None:
    models = ModelSet(make_chat_model("heuristic"), make_embedder("hashing"))
    default, raised = PeerArm("peer", models), PeerArm("peer", models, {"reply_tokens": 4096})
    assert default.proxy.reply_tokens == REPLY_TOKENS and raised.proxy.reply_tokens == 4096
    for bad in (0, -1, "4096", 4096.0, True):
        with pytest.raises(ValueError, match=r"arm 'peer': reply_tokens must be a positive"):
            PeerArm("peer", models, {"reply_tokens": bad})
    for arm in (default, raised):
        asyncio.run(arm.aclose())
