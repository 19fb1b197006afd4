"""Soft key identity: deciding which existing cell a language-inferred key refers to.

A candidate key that is not registered verbatim is embedded; the most similar registered key is
shortlisted when cosine similarity reaches the threshold (0.72 by default), and merged only when a
confirm check, shown the two *key names only* (never values: equal values recur across distinct keys),
says they are the same. Every non-trivial decision is recorded with its score and verdict and saved
with the graph.

The embedding and the check are pluggable. The defaults need no model: character n-gram hashing for
the embedding, and a rule over key tokens for the check. Write paths with an LLM pass the model's
same/different call instead; async callers use :meth:`KeyRegistry.shortlist` and
:meth:`KeyRegistry.decide` around their own awaits.

>>> reg = KeyRegistry()
>>> reg.resolve("user.personal_best_5k")
'user.personal_best_5k'
>>> reg.resolve("user.personal_best_5k_time")
'user.personal_best_5k'
>>> reg.resolve("mug.location")
'mug.location'
>>> reg.resolve("apple.location")
'apple.location'
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pmem.graph._identity._hashing import hash_char_ngrams
from pmem.graph._ops._validate import check_key, preview

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

DEFAULT_THRESHOLD = 0.72
_TOKEN = re.compile(r"[a-z0-9]+")
_STOP = frozenset({"the", "of", "a", "an", "in", "at", "on", "for", "to", "is", "by", "user"})


@dataclass(frozen=True, slots=True)
class IdentityDecision:
    """``verdict``: ``new`` (nothing shortlisted), ``same`` (merged), ``different`` (kept apart) or
    ``split`` (a merge undone by ``ProvenanceGraph.unmerge``: never merged again)."""

    candidate: str
    shortlisted: str | None
    score: float
    verdict: str
    canonical: str


def normalize_key_text(key: str) -> str:
    return " ".join(_TOKEN.findall(key.lower()))


class HashingKeyEmbedding:
    """Character n-gram hashing of key names (no model, deterministic), rows L2-normalized."""

    name = "hashing-char-2-4-1024"

    def __init__(self, n_features: int = 1024) -> None:
        self.dim = n_features

    def __call__(self, keys: Sequence[str]) -> np.ndarray:
        # counted and normalized in double, then cast: the vectors identity decisions were made with
        texts = [normalize_key_text(k).lower() for k in keys]
        return hash_char_ngrams(texts, self.dim, (2, 4), np.float64).astype(np.float32)


def _tokens(text: str) -> set[str]:
    out = set()
    for tok in _TOKEN.findall(text.lower()):
        if tok in _STOP:
            continue
        if len(tok) > 3 and tok.endswith("s") and not tok.endswith("ss"):
            tok = tok[:-1]
        out.add(tok)
    return out


#: Qualifier words that do not change which attribute a key names (``pb_5k`` vs ``pb_5k_time``).
GENERIC_KEY_WORDS = frozenset(
    {
        "time",
        "value",
        "name",
        "date",
        "number",
        "count",
        "current",
        "latest",
        "new",
        "status",
        "id",
        "type",
        "amount",
        "level",
        "info",
        "detail",
    }
)


def rule_confirm(candidate: str, registered: str) -> bool:
    """Key-name-only same/different rule: subjects equal, attributes equal up to generic qualifiers.

    For ``subject.attribute`` keys the subjects' tokens must be equal; the attributes' token sets
    (stop words dropped, plurals folded) may differ only by words such as ``time`` or ``value``, and
    must carry the same numbers. ``head_of_state`` and ``head_of_government`` stay apart; so do
    ``city`` and ``birth_city``.
    """
    if "." in candidate and "." in registered:
        subj_a, attr_a = candidate.split(".", 1)
        subj_b, attr_b = registered.split(".", 1)
        if _tokens(subj_a) != _tokens(subj_b):
            return False
        ta, tb = _tokens(attr_a), _tokens(attr_b)
    else:
        ta, tb = _tokens(candidate), _tokens(registered)
    if not ta or not tb:
        return False
    if {t for t in ta if t.isdigit()} != {t for t in tb if t.isdigit()}:
        return False
    return (ta ^ tb) <= GENERIC_KEY_WORDS


@dataclass(frozen=True, slots=True)
class _Prescored:
    """A candidate's best match among the first ``rows`` registered keys of ``store``, scored ahead."""

    store: _VectorStore
    vector: np.ndarray
    rows: int
    index: int
    score: np.float32


class KeyRegistry:
    """Maps candidate keys to canonical keys, recording every merge decision."""

    def __init__(
        self,
        embed: Callable[[Sequence[str]], np.ndarray] | None = None,
        confirm: Callable[[str, str], bool] | None = None,
        threshold: float = DEFAULT_THRESHOLD,
    ) -> None:
        threshold = _checked_threshold(threshold, "KeyRegistry")
        self._embed = embed
        self._confirm = confirm or rule_confirm
        self.threshold = float(threshold)
        self._keys: list[str] = []
        self._index: dict[str, int] = {}
        self._aliases: dict[str, str] = {}
        self._splits: set[tuple[str, str]] = set()  # (candidate, key) pairs never to be merged again
        self._store = _VectorStore()
        self._prescored: dict[str, _Prescored] = {}
        self._decisions: list[IdentityDecision] = []
        self.exact_hits = 0

    # ------------------------------------------------------------ introspection

    @property
    def keys(self) -> list[str]:
        """Canonical keys in registration order."""
        return list(self._keys)

    @property
    def key_count(self) -> int:
        """How many canonical keys are registered (``len(keys)`` without copying them)."""
        return len(self._keys)

    @property
    def decisions(self) -> list[IdentityDecision]:
        return list(self._decisions)

    def config(self) -> dict[str, Any]:
        embed_name = (
            getattr(self._embed, "name", None) if self._embed is not None else HashingKeyEmbedding.name
        )
        confirm_name = getattr(self._confirm, "__name__", type(self._confirm).__name__)
        return {"threshold": self.threshold, "embedding": embed_name, "confirm": confirm_name}

    # ------------------------------------------------------------ embedding

    def _embed_one(self, key: str) -> np.ndarray:
        if self._embed is None:
            self._embed = HashingKeyEmbedding()
        vec = np.asarray(self._embed([key]), dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else vec

    def _append_vector(self, vec: np.ndarray) -> None:
        self._store.append(vec)

    def _ensure_vectors(self) -> None:
        # After a restore the vectors are recomputed lazily, on the first lookup that needs them.
        if len(self._store) < len(self._keys):
            self._store = _VectorStore()
            for start in range(0, len(self._keys), 1024):
                block = self._keys[start : start + 1024]
                if self._embed is None:
                    self._embed = HashingKeyEmbedding()
                for vec in np.asarray(self._embed(block), dtype=np.float32):
                    self._store.append(_unit(vec))

    # ------------------------------------------------------------ decisions

    def canonical(self, candidate: str) -> str | None:
        """The canonical key for ``candidate`` if it is registered or was merged before, else None."""
        if candidate in self._index:
            return candidate
        return self._aliases.get(candidate)

    def shortlist(self, candidate: str, vector: np.ndarray | None = None) -> tuple[str, float] | None:
        """The most similar registered key and its cosine, if at or above the threshold."""
        if not self._keys:
            return None
        self._ensure_vectors()
        vec = self._embed_one(candidate) if vector is None else _unit(vector)
        pre = self._prescored.pop(candidate, None)
        if pre is not None and pre.store is self._store and np.array_equal(pre.vector, vec):
            # the rows scored ahead keep their scores; only the keys registered since are scored now
            best, top = pre.index, pre.score
            rest = self._store.scores(vec, start=pre.rows)
            if len(rest):
                j = int(np.argmax(rest))
                if rest[j] > top:  # a tie keeps the earlier key, as one argmax over all rows does
                    best, top = pre.rows + j, rest[j]
        else:
            scores = self._store.scores(vec)
            best = int(np.argmax(scores))
            top = scores[best]
        score = float(top)
        if score < self.threshold:
            return None
        return self._keys[best], score

    def prescore(self, candidates: Sequence[str], vectors: Sequence[np.ndarray] | np.ndarray) -> None:
        """Score many candidate keys against the registered keys in one sparse product.

        Only a speed-up: a later ``shortlist(candidate, vector)`` with the same vector then scores just
        the keys registered since, and returns exactly what it would have returned without this call
        (same key, same score to the bit). Write paths that resolve a batch of new keys in order call it
        once per batch. Candidates not shortlisted before the next call are forgotten.
        """
        self._prescored = {}
        if not candidates or not self._keys:
            return
        if len(vectors) != len(candidates):
            msg = f"KeyRegistry.prescore: {len(candidates)} candidates but {len(vectors)} vectors"
            raise ValueError(msg)
        self._ensure_vectors()
        units = [self._checked_vector(v, "KeyRegistry.prescore") for v in vectors]
        rows, best, index = self._store.prefix_best(np.stack(units, axis=1))
        if rows == 0:
            return
        for candidate, unit, top, at in zip(candidates, units, best, index.tolist(), strict=True):
            self._prescored[candidate] = _Prescored(self._store, unit, rows, at, top)

    def register(self, key: str, vector: np.ndarray | None = None) -> None:
        check_key(key, "KeyRegistry.register")
        self._register(key, None if vector is None else self._checked_vector(vector, "KeyRegistry.register"))

    def _register(self, key: str, vec: np.ndarray | None) -> None:
        """Register a checked key with its checked unit vector (embedded when None)."""
        if key in self._index:
            return
        self._ensure_vectors()
        if vec is None:
            vec = self._embed_one(key)
        self._append_vector(vec)
        self._index[key] = len(self._keys)
        self._keys.append(key)

    def decide(
        self,
        candidate: str,
        shortlisted: str | None,
        score: float,
        same: bool,
        vector: np.ndarray | None = None,
    ) -> str:
        """Record a verdict on ``candidate`` vs ``shortlisted`` and return the canonical key."""
        where = "KeyRegistry.decide"
        check_key(candidate, where, "candidate")
        if shortlisted is not None:
            check_key(shortlisted, where, "shortlisted")
            if shortlisted not in self._index:
                # a verdict against a key the registry never held could not be replayed on load
                msg = f"{where}: shortlisted key {shortlisted!r} is not registered (use shortlist())"
                raise ValueError(msg)
        if not isinstance(score, numbers.Real) or isinstance(score, bool) or not math.isfinite(score):
            msg = f"{where}: score must be a finite number, got {preview(score)}"
            raise ValueError(msg)
        if not isinstance(same, (bool, np.bool_)):
            msg = f"{where}: same must be True or False, got {preview(same)}"
            raise ValueError(msg)
        vec = None if vector is None else self._checked_vector(vector, where)
        return self._decide(candidate, shortlisted, float(score), bool(same), vec)

    def _decide(
        self, candidate: str, shortlisted: str | None, score: float, same: bool, vec: np.ndarray | None
    ) -> str:
        """Record a verdict whose arguments are already checked (nothing here can fail half-way)."""
        if shortlisted is not None and same and (candidate, shortlisted) not in self._splits:
            canonical, verdict = shortlisted, "same"
            self._aliases[candidate] = shortlisted
        else:
            canonical, verdict = candidate, "new" if shortlisted is None else "different"
            self._register(candidate, vec)
        self._decisions.append(IdentityDecision(candidate, shortlisted, score, verdict, canonical))
        return canonical

    def resolve(self, candidate: str, vector: np.ndarray | None = None) -> str:
        """Exact match, else shortlist by cosine and merge only if the key-only check says same."""
        check_key(candidate, "KeyRegistry.resolve", "candidate")
        vec = None if vector is None else self._checked_vector(vector, "KeyRegistry.resolve")
        known = self.canonical(candidate)
        if known is not None:
            self.exact_hits += 1
            return known
        if vec is None:
            vec = self._embed_one(candidate)
        hit = self.shortlist(candidate, vec)
        if hit is None:
            return self._decide(candidate, None, 0.0, False, vec)
        registered, score = hit
        return self._decide(candidate, registered, score, bool(self._confirm(candidate, registered)), vec)

    def restore(
        self, keys: list[str], decisions: list[dict[str, Any]], config: dict[str, Any] | None
    ) -> None:
        """Reinstate saved state (used by ``ProvenanceGraph.load``); vectors are recomputed lazily.

        Everything is checked and built first, then swapped in: a refused restore changes nothing.
        """
        where = "KeyRegistry.restore"
        if not isinstance(keys, (list, tuple)) or any(type(k) is not str for k in keys):
            msg = f"{where}: keys must be a list of strings, got {preview(keys)}"
            raise ValueError(msg)
        threshold = self.threshold
        if config is not None:
            if not isinstance(config, dict):
                msg = f"{where}: config must be a dict or None, got {preview(config)}"
                raise ValueError(msg)
            if "threshold" in config:
                threshold = _checked_threshold(config["threshold"], where)
        try:
            restored = [IdentityDecision(**d) for d in decisions]
        except TypeError as exc:
            msg = f"{where}: decisions must be a list of IdentityDecision fields ({exc})"
            raise ValueError(msg) from None
        self.threshold = threshold
        self._keys = list(keys)
        self._index = {k: i for i, k in enumerate(self._keys)}
        self._store = _VectorStore()
        self._decisions = []
        self._aliases, self._splits = {}, set()
        self._follow(restored)

    def _follow(self, decisions: list[IdentityDecision]) -> None:
        """Record ``decisions`` and the aliases and splits they make, in order (a split undoes the merge
        before it)."""
        for d in decisions:
            if d.verdict == "same":
                self._aliases[d.candidate] = d.canonical
            elif d.verdict == "split" and d.shortlisted is not None:
                self._aliases.pop(d.candidate, None)
                self._splits.add((d.candidate, d.shortlisted))
        self._decisions.extend(decisions)

    def counts(self) -> tuple[int, int]:
        """(registered keys, decisions) so far: where :meth:`since` starts."""
        return len(self._keys), len(self._decisions)

    def since(self, keys: int, decisions: int) -> tuple[list[str], list[dict[str, Any]]]:
        """The keys registered and the decisions recorded after the first ``keys`` and ``decisions``
        (what :meth:`extend` takes to repeat them: a state's journal records them so)."""
        return self._keys[keys:], [dataclasses.asdict(d) for d in self._decisions[decisions:]]

    def extend(self, keys: list[str], decisions: list[dict[str, Any]]) -> None:
        """Register ``keys`` and record ``decisions`` (as :meth:`since` gives them) after the registry's
        own, as :meth:`restore` reinstates a saved registry: vectors are recomputed lazily. Everything is
        checked first: a refused call changes nothing."""
        where = "KeyRegistry.extend"
        if not isinstance(keys, (list, tuple)) or any(type(k) is not str for k in keys):
            msg = f"{where}: keys must be a list of strings, got {preview(keys)}"
            raise ValueError(msg)
        try:
            added = [IdentityDecision(**d) for d in decisions]
        except TypeError as exc:
            msg = f"{where}: decisions must be a list of IdentityDecision fields ({exc})"
            raise ValueError(msg) from None
        fresh = [k for k in dict.fromkeys(keys) if k not in self._index]
        for key in fresh:
            check_key(key, where)
        for key in fresh:
            self._index[key] = len(self._keys)
            self._keys.append(key)
        self._follow(added)  # the new keys' vectors come with the next lookup (_ensure_vectors)

    def split(self, alias: str, key: str) -> None:
        """Record that ``alias`` names another thing than ``key``: it becomes a key of its own (registered,
        embedded), the merge is undone, and the pair is never merged again (``ProvenanceGraph.unmerge``)."""
        check_key(alias, "KeyRegistry.split", "alias")
        check_key(key, "KeyRegistry.split")
        if self._aliases.get(alias) == key:
            del self._aliases[alias]
        self._splits.add((alias, key))
        self._register(alias, None)
        self._decisions.append(IdentityDecision(alias, key, 0.0, "split", alias))

    def set_vectors(self, vectors: np.ndarray) -> None:
        """Reinstate the registered keys' vectors: one row per key, in registration order.

        After :meth:`restore` the vectors are recomputed with the registry's own embedding; a caller
        that embedded keys with another model (the write path's embedder) hands those vectors back here,
        so that later shortlists score exactly as before the save.
        """
        where = "KeyRegistry.set_vectors"
        rows = np.asarray(vectors, dtype=np.float32)
        if rows.size == 0 and not self._keys:
            self._store = _VectorStore()
            return
        if rows.ndim != 2 or rows.shape[0] != len(self._keys):
            msg = f"{where}: expected one row per registered key ({len(self._keys)}), got shape {rows.shape}"
            raise ValueError(msg)
        if not np.isfinite(rows).all():
            msg = f"{where}: vectors must be finite (no NaN or infinity)"
            raise ValueError(msg)
        store = _VectorStore()
        for row in rows:
            store.append(_unit(row))
        self._store = store

    def _checked_vector(self, vector: object, where: str) -> np.ndarray:
        """``vector`` as a unit float32 row, refused if not finite or not the stored vectors' length."""
        try:
            vec = np.asarray(vector, dtype=np.float32).reshape(-1)
        except (TypeError, ValueError):
            msg = f"{where}: vector must be a numeric array, got {preview(vector)}"
            raise ValueError(msg) from None
        if not np.isfinite(vec).all():
            msg = f"{where}: vector must be finite (no NaN or infinity)"
            raise ValueError(msg)
        dim = self._store.dim
        if dim is None and self._keys:
            self._ensure_vectors()
            dim = self._store.dim
        if dim is not None and vec.shape[0] != dim:
            msg = f"{where}: vector has {vec.shape[0]} dimensions, the registered keys' vectors have {dim}"
            raise ValueError(msg)
        return _unit(vec)


def _checked_threshold(threshold: object, where: str) -> float:
    if (
        not isinstance(threshold, numbers.Real)
        or isinstance(threshold, bool)
        or not 0.0 < float(threshold) <= 1.0
    ):
        msg = f"{where}: threshold must be in (0, 1], got {preview(threshold)}"
        raise ValueError(msg)
    return float(threshold)


class _VectorStore:
    """Registered key vectors, scored against a query by one product per block.

    Rows arrive one at a time into a dense tail; full tails are frozen into blocks. Sparse embeddings
    (character n-gram hashing fills ~6% of its dimensions) are frozen as CSR and merged into one sparse
    block, so scoring costs the non-zeros instead of keys x dimensions.
    """

    TAIL = 512
    SPARSE_BELOW = 0.25  # fraction of non-zeros under which a block is stored sparse

    def __init__(self) -> None:
        self._sparse: Any = None  # scipy.sparse.csr_matrix of every frozen sparse row (scipy is untyped)
        self._dense: list[np.ndarray] = []  # frozen dense blocks
        self._order: list[tuple[str, int]] = []  # frozen blocks in registration order: (kind, rows)
        # the tail is stored transposed (dimensions x rows): a sparse query then reads only the rows of
        # its non-zero dimensions, each one contiguous
        self._tail: np.ndarray | None = None
        self._n_tail = 0
        self._n = 0
        # sparse blocks frozen since the last prefix_best, with their first row: scoring the rows after
        # a prefix then needs no slice of the whole CSR matrix (None: not tracked; they are copies)
        self._since: list[tuple[int, Any]] | None = None

    def __len__(self) -> int:
        return self._n

    @property
    def dim(self) -> int | None:
        """Length of the stored vectors (None while empty)."""
        return None if self._tail is None else self._tail.shape[0]

    def append(self, vec: np.ndarray) -> None:
        tail = self._tail
        if tail is None:
            tail = self._tail = np.zeros((vec.shape[0], self.TAIL), dtype=np.float32)
        tail[:, self._n_tail] = vec
        self._n_tail += 1
        self._n += 1
        if self._n_tail == self.TAIL:
            self._freeze(tail)

    def _freeze(self, tail: np.ndarray) -> None:
        block = np.ascontiguousarray(tail[:, : self._n_tail].T)
        if np.count_nonzero(block) < self.SPARSE_BELOW * block.size:
            import scipy.sparse as sp

            csr = sp.csr_matrix(block)
            if self._since is not None:
                self._since.append((self._n - self._n_tail, csr))
                if len(self._since) > self.SINCE_BLOCKS:
                    self._since = None
            self._sparse = csr if self._sparse is None else sp.vstack([self._sparse, csr], format="csr")
            self._order.append(("sparse", len(block)))
        else:
            self._dense.append(block)
            self._order.append(("dense", len(block)))
        self._n_tail = 0

    #: Blocks frozen after a prefix that are kept for scoring the rows after it.
    SINCE_BLOCKS = 8
    #: Scores held at once by :meth:`prefix_best`: at most this many queries (a narrow block keeps the
    #: column-wise argmax in cache) and this many cells (rows x queries float32: 256 MiB).
    PREFIX_COLUMNS = 64
    PREFIX_CELLS = 1 << 26

    def prefix_best(self, queries: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
        """Per query (a column of unit vectors): the best score and its first row among the frozen rows.

        Covers the frozen rows when every frozen block is sparse (they are then a prefix of the
        registration order, all in one CSR matrix), and nothing otherwise: ``(rows covered, best, index)``.
        A CSR product with many vectors computes each row's dot product exactly as a product with one
        vector does (the same sum over the row's non-zeros, in order), so the scores are the very ones
        :meth:`scores` gives.
        """
        m = queries.shape[1]
        none = (0, np.zeros(m, np.float32), np.zeros(m, np.int64))
        if self._sparse is None or self._dense:
            return none
        n = self._sparse.shape[0]
        self._since = []
        best = np.empty(m, np.float32)
        index = np.empty(m, np.int64)
        step = max(1, min(self.PREFIX_COLUMNS, self.PREFIX_CELLS // n))
        for a in range(0, m, step):
            block = np.asarray(self._sparse @ np.ascontiguousarray(queries[:, a : a + step]))
            at = np.argmax(block, axis=0)
            index[a : a + step] = at
            best[a : a + step] = block[at, np.arange(block.shape[1])]
        return n, best, index

    def scores(self, vec: np.ndarray, start: int = 0) -> np.ndarray:
        """Cosine of ``vec`` (unit) with every stored row from ``start`` on, in registration order."""
        if start:
            return self._scores_from(vec, start)
        sparse = self._sparse @ vec if self._sparse is not None else None
        parts, s_at, d_at = [], 0, 0
        for kind, rows in self._order:
            if kind == "sparse":
                assert sparse is not None  # a sparse block implies the sparse matrix
                parts.append(sparse[s_at : s_at + rows])
                s_at += rows
            else:
                parts.append(self._dense[d_at] @ vec)
                d_at += 1
        if self._n_tail:
            parts.append(self._tail_scores(vec, 0))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def _tail_scores(self, vec: np.ndarray, skip: int) -> np.ndarray:
        """Scores of the tail's rows from ``skip`` on (a sparse query reads its non-zero dimensions only)."""
        assert self._tail is not None  # rows in the tail imply a tail
        rows = self._tail[:, skip : self._n_tail]
        nz = np.flatnonzero(vec)
        scores: np.ndarray = vec[nz] @ rows[nz] if len(nz) < self.SPARSE_BELOW * len(vec) else vec @ rows
        return scores

    def _scores_from(self, vec: np.ndarray, start: int) -> np.ndarray:
        """:meth:`scores` of the rows from ``start`` on; each row is scored by the same product.

        Used with ``start`` at most the frozen rows (a prefix scored ahead), so a frozen block is sliced
        only when it is sparse (a CSR row's product does not depend on the rows around it).
        """
        parts: list[np.ndarray] = []
        at = len(self) - self._n_tail  # frozen rows
        if not self._dense:  # the frozen rows are the CSR matrix's, in order
            since = self._since
            if since and since[0][0] == start:  # the blocks frozen after a prefix scored ahead
                parts.extend(csr @ vec for _, csr in since)
            elif start < at:
                parts.append(self._sparse[start:] @ vec)
        else:
            at = self._scores_from_blocks(vec, start, parts)
        if self._n_tail:
            parts.append(self._tail_scores(vec, max(0, start - at)))
        if not parts:
            return np.zeros(0, np.float32)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def _scores_from_blocks(self, vec: np.ndarray, start: int, parts: list[np.ndarray]) -> int:
        """Append the frozen blocks' scores from row ``start`` on to ``parts``; return the frozen rows."""
        at, s_at, d_at = 0, 0, 0  # first row of the block, in registration order / in the CSR matrix
        for kind, rows in self._order:
            skip = max(0, start - at)
            if kind == "sparse":
                if skip < rows:
                    parts.append(self._sparse[s_at + skip : s_at + rows] @ vec)
                s_at += rows
            else:
                if skip < rows:
                    parts.append(self._dense[d_at][skip:] @ vec)
                d_at += 1
            at += rows
        return at


def _unit(vector: np.ndarray) -> np.ndarray:
    vec = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm > 0 else vec
