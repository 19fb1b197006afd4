"""Soft key identity."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from pmem.graph import HashingKeyEmbedding, KeyRegistry, rule_confirm


def test_exact_match_needs_no_decision():
    reg = KeyRegistry()
    assert reg.resolve("user.city") == "user.city"
    assert reg.resolve("user.city") == "user.city"
    assert reg.exact_hits == 1
    assert [d.verdict for d in reg.decisions] == ["new"]


def test_similar_key_merged_when_confirmed():
    reg = KeyRegistry()
    reg.resolve("user.personal_best_5k")
    assert reg.resolve("user.personal_best_5k_time") == "user.personal_best_5k"
    d = reg.decisions[-1]
    assert (d.candidate, d.shortlisted, d.verdict, d.canonical) == (
        "user.personal_best_5k_time",
        "user.personal_best_5k",
        "same",
        "user.personal_best_5k",
    )
    assert d.score >= 0.72
    # a merged alias resolves without a new decision
    n = len(reg.decisions)
    assert reg.resolve("user.personal_best_5k_time") == "user.personal_best_5k"
    assert len(reg.decisions) == n


def test_similar_names_of_different_objects_stay_apart():
    reg = KeyRegistry()
    for obj in ("apple_1", "apple_2", "mug_1", "bowl_1"):
        assert reg.resolve(f"{obj}.location") == f"{obj}.location"
    shortlisted = [d for d in reg.decisions if d.shortlisted is not None]
    assert shortlisted and all(d.verdict == "different" for d in shortlisted)


def test_confirm_sees_key_names_only_and_decides():
    seen: list[tuple[str, str]] = []

    def confirm(a: str, b: str) -> bool:
        seen.append((a, b))
        return False

    reg = KeyRegistry(confirm=confirm)
    reg.resolve("user.personal_best_5k")
    assert reg.resolve("user.personal_best_5k_time") == "user.personal_best_5k_time"
    assert seen == [("user.personal_best_5k_time", "user.personal_best_5k")]
    assert reg.decisions[-1].verdict == "different"


def test_threshold_and_custom_embedding():
    def embed(keys):
        # two fixed directions: keys starting with "x" vs the rest
        return np.array([[1.0, 0.0] if k.startswith("x") else [0.6, 0.8] for k in keys], dtype=np.float32)

    reg = KeyRegistry(embed=embed, confirm=lambda a, b: True, threshold=0.72)
    reg.resolve("x1")
    assert reg.resolve("x2") == "x1"  # cosine 1.0
    assert reg.resolve("y1") == "y1"  # cosine 0.6 < 0.72: not even shortlisted
    assert reg.decisions[-1].verdict == "new"
    with pytest.raises(ValueError, match="threshold"):
        KeyRegistry(threshold=0)


@pytest.mark.parametrize("bad", [True, False, 0, -0.5, 1.5, float("nan"), "0.5", None, [0.5]])
def test_threshold_must_be_a_real_number_in_the_unit_interval(bad):
    with pytest.raises(ValueError, match="threshold must be in"):
        KeyRegistry(threshold=bad)


@pytest.mark.parametrize("good", [1, 1.0, 0.5, np.float32(0.25), Fraction(1, 3)])
def test_any_real_threshold_in_the_unit_interval_is_taken_as_a_float(good):
    threshold = KeyRegistry(threshold=good).threshold
    assert type(threshold) is float and threshold == float(good)


def test_async_style_two_phase_api():
    reg = KeyRegistry()
    reg.resolve("project.budget")
    hit = reg.shortlist("project.budget_total")
    assert hit is not None and hit[0] == "project.budget"
    assert reg.decide("project.budget_total", hit[0], hit[1], same=True) == "project.budget"
    assert reg.canonical("project.budget_total") == "project.budget"


def test_hashing_embedding_is_unit_norm_and_deterministic():
    emb = HashingKeyEmbedding()
    a = emb(["user.city", "user.home_city"])
    assert a.shape == (2, emb.dim) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(a, emb(["user.city", "user.home_city"]))


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("user.personal_best_5k_time", "user.personal_best_5k", True),
        ("apple_1.location", "apple_2.location", False),
        ("fatah.chairperson", "fatah.chair_person", False),
        ("fatah.chairperson", "fatah.chairpersons", True),
        ("home_city", "city_home", True),
        ("united_states.head_of_state", "united_states.head_of_government", False),
        ("buddhism.founded_by", "shingon_buddhism.founded_by", False),
        ("user.city", "user.birth_city", False),
        ("user.pb_5k", "user.pb_10k", False),
    ],
)
def test_rule_confirm(a, b, same):
    assert rule_confirm(a, b) is same


@pytest.mark.parametrize("kind", ["hashing", "dense"])
def test_blocked_vector_store_matches_brute_force(kind):
    rng = np.random.default_rng(0)
    if kind == "hashing":
        embed = HashingKeyEmbedding()
    else:
        table: dict[str, np.ndarray] = {}

        def embed(keys):
            return np.stack([table.setdefault(k, rng.normal(size=32).astype(np.float32)) for k in keys])

    reg = KeyRegistry(embed=embed, confirm=lambda a, b: False, threshold=0.01)
    keys = [f"entity_{i}.attr_{i % 37}" for i in range(1300)]  # crosses two frozen blocks + a tail
    for k in keys:
        reg.resolve(k)
    vecs = np.stack([v / np.linalg.norm(v) for v in np.asarray(embed(keys), dtype=np.float32)])
    probe = "entity_7.attr_7_value"
    pv = np.asarray(embed([probe]), dtype=np.float32)[0]
    pv = pv / np.linalg.norm(pv)
    expected = keys[int(np.argmax(vecs @ pv))]
    hit = reg.shortlist(probe)
    assert hit is not None and hit[0] == expected
    assert hit[1] == pytest.approx(float(np.max(vecs @ pv)), abs=1e-5)
    if kind == "hashing":  # vectors are recomputed after a reload, in blocks
        from pmem.graph import ProvenanceGraph

        g = ProvenanceGraph(registry=reg)
        h = ProvenanceGraph.from_bytes(g.to_bytes(), registry=KeyRegistry(confirm=lambda a, b: False))
        assert h.registry.shortlist(probe)[0] == expected


def test_set_vectors_restores_scores_of_another_embedder_and_refuses_bad_shapes() -> None:
    import numpy as np
    import pytest

    from pmem.graph import KeyRegistry, ProvenanceGraph

    rng = np.random.default_rng(0)
    vectors = {k: rng.normal(size=8).astype(np.float32) for k in ("a.x", "b.y", "c.z")}
    g = ProvenanceGraph(registry=KeyRegistry())
    for k, v in vectors.items():
        g.registry.decide(k, None, 0.0, False, v)
    probe = vectors["b.y"] + 0.01
    before = g.registry.shortlist("b.yy", probe)
    restored = ProvenanceGraph.from_bytes(g.to_bytes()).registry
    with pytest.raises(ValueError, match="one row per registered key"):
        restored.set_vectors(np.ones((2, 8)))
    with pytest.raises(ValueError, match="finite"):
        restored.set_vectors(np.full((3, 8), np.nan))
    restored.set_vectors(np.stack(list(vectors.values())))
    assert restored.shortlist("b.yy", probe) == before
    assert before is not None and before[0] == "b.y"


@pytest.mark.parametrize("kind", ["hashing", "dense"])
def test_prescored_batches_decide_exactly_as_one_shortlist_at_a_time(kind, monkeypatch):
    """prescore() is only a speed-up: same shortlisted keys, same scores to the bit, across freezes."""
    from pmem.graph._identity import _registry as _identity

    rng = np.random.default_rng(1)
    if kind == "hashing":
        embed = HashingKeyEmbedding()
    else:
        table: dict[str, np.ndarray] = {}

        def embed(keys):
            return np.stack([table.setdefault(k, rng.normal(size=16).astype(np.float32)) for k in keys])

    def confirm(a: str, b: str) -> bool:
        return (len(a) + len(b)) % 3 == 0

    ahead_calls = []
    scores = _identity._VectorStore.scores

    def spy(self, vec, start=0):
        ahead_calls.append(start)
        return scores(self, vec, start)

    monkeypatch.setattr(_identity._VectorStore, "scores", spy)
    plain, batched = KeyRegistry(embed=embed), KeyRegistry(embed=embed)
    words = ["budget", "city", "time", "owner", "colour"]
    for _ in range(8):  # batches of up to 700 candidates: the 512-row tail freezes inside batches
        names = [f"entity_{rng.integers(2500)}.{words[rng.integers(5)]}" for _ in range(rng.integers(1, 700))]
        new = [k for k in dict.fromkeys(names) if batched.canonical(k) is None]
        vectors = list(np.asarray(embed(new), dtype=np.float32)) if new else []
        batched.prescore(new, vectors)
        for key, vec in zip(new, vectors, strict=True):
            for reg in (plain, batched):
                if reg.canonical(key) is not None:  # merged into a key registered earlier in the batch
                    continue
                hit = reg.shortlist(key, vec)
                if hit is None:
                    reg.decide(key, None, 0.0, False, vec)
                else:
                    reg.decide(key, hit[0], hit[1], confirm(key, hit[0]), vec)
    assert plain.decisions == batched.decisions  # IdentityDecision compares scores exactly
    assert plain.keys == batched.keys
    assert sum(d.verdict != "new" for d in plain.decisions) > 100
    if kind == "hashing":  # the scores ahead were used: later shortlists scored only the newer rows
        assert sum(start > 0 for start in ahead_calls) > 1000
    else:  # dense blocks are not scored ahead
        assert not any(ahead_calls)


def test_prescore_refuses_mismatched_vectors() -> None:
    reg = KeyRegistry()
    reg.resolve("a.b")
    with pytest.raises(ValueError, match="2 candidates but 1 vectors"):
        reg.prescore(["x.y", "z.w"], [np.ones(1024, np.float32)])
    with pytest.raises(ValueError, match="dimensions"):
        reg.prescore(["x.y"], [np.ones(3, np.float32)])
