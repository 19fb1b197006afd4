"""ALFWorld-Revision: revision-pressure cases generated from ALFWorld's vocabulary.

The official valid_seen games are not obtainable offline, so cases are *generated* (say so in reports):
a case is a scene, a target object type present in it, the receptacle instances it may legally sit in
(``VAL_RECEPTACLE_OBJECTS``), and four distractor object types of the same scene. Everything is
deterministic from the seed (default 42): the case list from ``Random(seed)``, each history from a
``Random`` seeded with the string ``"{seed}/{case}/{subset}/{param}"``.

Subsets (sentences in :mod:`pmem.bench.alfworld_templates`):

- ``chains`` (``L``): a stale record then ``L`` moves over ``L + 1`` distinct locations for the target
  and for each of four distractors; the five queues merge by uniform draws over the non-empty queues
  (each chain keeps its order). One ``current`` question at the end; gold the target's last location,
  stale its earlier ones.
- ``two-step`` (``L``): as ``chains`` with every move phrased as a two-step move via an intermediate
  receptacle (the value must be inferred); stale values are the earlier chain locations only.
- ``retraction`` (``d``): ``v1`` stated once (stale record), an erroneous move to ``v2`` (phrased without
  its origin), ``d`` distractor events (never naming ``v1`` or ``v2``), a retraction naming only ``v2``.
  ``before_retraction`` (gold ``v2``) is asked just before the retraction, ``after_retraction`` (gold
  ``v1``, stale ``v2``) after it.
- ``conflict``: two cue-free reports of different locations, eight distractor events, a confirmation
  of the first report (even cases) or the second (odd cases). ``before_settle`` wants both locations
  (``match="all"``), ``after_settle`` the confirmed one (stale: the other).
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pmem.bench import alfworld_templates as T
from pmem.bench._data import verified_path
from pmem.bench._types import Event, History, Question

NAME = "alfworld-revision"
SUBSETS: tuple[str, ...] = ("chains", "retraction", "conflict", "two-step")
SEED = 42
N_CASES = 140
CHAIN_LENGTHS: tuple[int, ...] = (1, 2, 4, 8)
RETRACTION_DISTANCES: tuple[int, ...] = (0, 32)
N_DISTRACTORS = 4
CONFLICT_DISTRACTORS = 8
VOCAB_FILE = "alfworld/alfworld_vocab.json"
SOURCE = (
    "GENERATED from ALFWorld's object/receptacle vocabulary (datasets/alfworld, MIT), seed 42; "
    "not the official valid_seen games"
)
#: Every object needs this many legal locations: a chain of 8 moves visits 9 distinct ones.
MIN_LOCATIONS = max(CHAIN_LENGTHS) + 1
_SOURCE_TAG = "environment"


@dataclass(frozen=True)
class Case:
    index: int
    scene: str
    target: str
    #: the target's legal locations, then each distractor's: object name -> receptacle names
    locations: dict[str, tuple[str, ...]]
    distractors: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"case{self.index:03d}"


def _name(type_name: str, n: int = 1) -> str:
    return f"{type_name.lower()} {n}"


@lru_cache(maxsize=4)
def _vocab(path: str, mtime_ns: int) -> dict[str, Any]:
    vocab: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    return vocab


def load_vocab() -> dict[str, Any]:
    path = verified_path(VOCAB_FILE)
    return _vocab(str(path), path.stat().st_mtime_ns)


def _legal_locations(vocab: dict[str, Any], scene: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """object type -> receptacle instance names in the scene that may hold it."""
    allowed: dict[str, list[str]] = vocab["VAL_RECEPTACLE_OBJECTS"]
    movable = set(vocab["MOVABLE_RECEPTACLES"])
    static = set(vocab["STATIC_RECEPTACLES"])
    out: dict[str, tuple[str, ...]] = {}
    for obj in sorted(scene["object_types"]):
        if obj in static:
            continue
        locs = [
            _name(rec, i)
            for rec, count in sorted(scene["receptacle_instances"].items())
            if rec not in movable and obj in allowed.get(rec, ())
            for i in range(1, int(count) + 1)
        ]
        if len(locs) >= MIN_LOCATIONS:
            out[obj] = tuple(locs)
    return out


def generate_cases(seed: int = SEED, n_cases: int = N_CASES) -> list[Case]:
    vocab = load_vocab()
    pool: list[tuple[str, str, dict[str, tuple[str, ...]]]] = []
    for scene_name in sorted(vocab["scenes"], key=lambda s: int(s.removeprefix("FloorPlan"))):
        legal = _legal_locations(vocab, vocab["scenes"][scene_name])
        if len(legal) < N_DISTRACTORS + 1:
            continue
        pool.extend((scene_name, target, legal) for target in legal)
    if len(pool) < n_cases:
        msg = f"{VOCAB_FILE}: only {len(pool)} usable (scene, object) pairs for {n_cases} cases"
        raise ValueError(msg)
    rng = random.Random(seed)
    picked = rng.sample(range(len(pool)), n_cases)
    cases = []
    for index, p in enumerate(picked):
        scene, target, legal = pool[p]
        others = [o for o in legal if o != target]
        distractors = tuple(
            random.Random(f"{seed}/case{index:03d}/distractors").sample(others, N_DISTRACTORS)
        )
        locations = {_name(o): legal[o] for o in (target, *distractors)}
        cases.append(Case(index, scene, _name(target), locations, tuple(_name(d) for d in distractors)))
    return cases


def _merge(rng: random.Random, queues: list[list[str]]) -> list[str]:
    """Interleave queues by uniform draws over the non-empty ones, keeping each queue's order."""
    queues = [list(q) for q in queues]
    heads = [0] * len(queues)
    out: list[str] = []
    live = [i for i, q in enumerate(queues) if q]
    while live:
        i = rng.choice(live)
        out.append(queues[i][heads[i]])
        heads[i] += 1
        if heads[i] == len(queues[i]):
            live.remove(i)
    return out


def _chain(
    rng: random.Random,
    obj: str,
    locs: tuple[str, ...],
    moves: int,
    two_step: bool,
    avoid: frozenset[str] = frozenset(),
) -> tuple[list[str], list[str], list[str]]:
    """(events, visited locations, intermediates) of a stale record plus ``moves`` moves."""
    usable = [loc for loc in locs if loc not in avoid]
    if moves + 1 <= len(usable):
        visited = rng.sample(usable, moves + 1)
    else:  # long distractor runs: no immediate repeats, distinctness where possible
        visited = [rng.choice(usable)]
        for _ in range(moves):
            visited.append(rng.choice([x for x in usable if x != visited[-1]]))
    events = [T.STALE_RECORD.format(obj=obj, loc=visited[0])]
    inter: list[str] = []
    for a, b in itertools.pairwise(visited):
        if two_step:
            fresh = [x for x in usable if x not in visited]
            c = rng.choice(fresh or [x for x in usable if x not in (a, b)])
            inter.append(c)
            events.append(T.TWO_STEP.format(obj=obj, a=a, c=c, b=b))
        else:
            events.append(T.UPDATE.format(obj=obj, a=a, b=b))
    return events, visited, inter


def _events(texts: list[str]) -> tuple[Event, ...]:
    return tuple(Event(index=i, text=t, source=_SOURCE_TAG) for i, t in enumerate(texts))


def _distractor_events(rng: random.Random, case: Case, n: int, avoid: frozenset[str]) -> list[str]:
    """``n`` events about the distractors (records and moves), merged in random order."""
    k = len(case.distractors)
    counts = [n // k + (1 if i < n % k else 0) for i in range(k)]
    queues = [
        _chain(rng, obj, case.locations[obj], c - 1, False, avoid)[0] if c else []
        for obj, c in zip(case.distractors, counts, strict=True)
    ]
    return _merge(rng, queues)


def _history_chains(case: Case, seed: int, L: int, two_step: bool) -> History:
    subset = "two-step" if two_step else "chains"
    rng = random.Random(f"{seed}/{case.id}/{subset}/L{L}")
    queues, target_path, inter = [], [], []
    for obj in (case.target, *case.distractors):
        chain, visited, mids = _chain(rng, obj, case.locations[obj], L, two_step)
        queues.append(chain)
        if obj == case.target:
            target_path, inter = visited, mids
    events = _events(_merge(rng, queues))
    gold = target_path[-1]
    # Stale = the key's earlier values; a two-step intermediate was never a recorded value.
    del inter
    stale = tuple(dict.fromkeys(x for x in target_path[:-1] if x != gold))
    params = {"L": L}
    q = Question(
        id=f"{case.id}-q0",
        text=T.QUERY.format(obj=case.target),
        gold=(gold,),
        qtype="current",
        after_event=len(events) - 1,
        stale=stale,
        params=dict(params),
        stale_key=T.location_key(case.target),
    )
    return History(
        id=f"{NAME}/{subset}/L{L}/{case.id}",
        benchmark=NAME,
        subset=subset,
        events=events,
        questions=(q,),
        params={**params, "case": case.index, "scene": case.scene, "seed": seed},
    )


def _before_and_after(
    case: Case, obj: str, n_events: int, params: dict[str, Any], before: dict[str, Any], after: dict[str, Any]
) -> tuple[Question, Question]:
    """Where ``obj`` is, asked before the history's last event and after it (``before`` and ``after``: the
    questions' gold, type and the rest of what tells them apart)."""
    common: dict[str, Any] = {"text": T.QUERY.format(obj=obj), "stale_key": T.location_key(obj)}
    return (
        Question(id=f"{case.id}-before", after_event=n_events - 2, params=dict(params), **common, **before),
        Question(id=f"{case.id}-after", after_event=n_events - 1, params=dict(params), **common, **after),
    )


def _history_retraction(case: Case, seed: int, d: int) -> History:
    rng = random.Random(f"{seed}/{case.id}/retraction/d{d}")
    v1, v2 = rng.sample(list(case.locations[case.target]), 2)
    obj = case.target
    texts = [T.STALE_RECORD.format(obj=obj, loc=v1), T.UPDATE_NO_ORIGIN.format(obj=obj, loc=v2)]
    texts += _distractor_events(rng, case, d, frozenset({v1, v2}))
    texts.append(T.RETRACTION.format(obj=obj, v2=v2))
    events = _events(texts)
    params = {"d": d}
    before = {"gold": (v2,), "qtype": "before_retraction", "stale": (v1,)}
    qs = _before_and_after(
        case, obj, len(events), params, before, {"gold": (v1,), "qtype": "after_retraction", "stale": (v2,)}
    )
    return History(
        id=f"{NAME}/retraction/d{d}/{case.id}",
        benchmark=NAME,
        subset="retraction",
        events=events,
        questions=qs,
        params={**params, "case": case.index, "scene": case.scene, "seed": seed, "v1": v1, "v2": v2},
    )


def _history_conflict(case: Case, seed: int) -> History:
    rng = random.Random(f"{seed}/{case.id}/conflict")
    first, second = rng.sample(list(case.locations[case.target]), 2)
    confirmed = "first" if case.index % 2 == 0 else "second"
    winner, loser = (first, second) if confirmed == "first" else (second, first)
    obj = case.target
    texts = [T.CONFLICT_REPORT.format(obj=obj, loc=first), T.CONFLICT_REPORT.format(obj=obj, loc=second)]
    texts += _distractor_events(rng, case, CONFLICT_DISTRACTORS, frozenset({first, second}))
    texts.append(T.CONFIRMATION.format(obj=obj, loc=winner))
    events = _events(texts)
    params = {"confirmed": confirmed}
    before = {"gold": (first, second), "qtype": "before_settle", "match": "all"}
    qs = _before_and_after(
        case,
        obj,
        len(events),
        params,
        before,
        {"gold": (winner,), "qtype": "after_settle", "stale": (loser,)},
    )
    return History(
        id=f"{NAME}/conflict/{case.id}",
        benchmark=NAME,
        subset="conflict",
        events=events,
        questions=qs,
        params={**params, "case": case.index, "scene": case.scene, "seed": seed},
    )


def iter_alfworld(
    subset: str, *, seed: int = SEED, cases: int = N_CASES, L: int | None = None, d: int | None = None
) -> Iterator[History]:
    """Histories of one subset, case by case (all L or d values unless one is given)."""
    if subset not in SUBSETS:
        msg = f"unknown alfworld-revision subset {subset!r} (known: {', '.join(SUBSETS)})"
        raise ValueError(msg)
    if L is not None and not 1 <= L <= MIN_LOCATIONS - 1:
        msg = f"alfworld-revision: L={L} must be in 1..{MIN_LOCATIONS - 1} (L moves need L + 1 locations)"
        raise ValueError(msg)
    if d is not None and d < 0:
        msg = f"alfworld-revision: d={d} must be >= 0"
        raise ValueError(msg)
    all_cases = generate_cases(seed, cases)
    if subset in ("chains", "two-step"):
        for length in (L,) if L is not None else CHAIN_LENGTHS:
            for case in all_cases:
                yield _history_chains(case, seed, length, subset == "two-step")
    elif subset == "retraction":
        for dist in (d,) if d is not None else RETRACTION_DISTANCES:
            for case in all_cases:
                yield _history_retraction(case, seed, dist)
    else:
        for case in all_cases:
            yield _history_conflict(case, seed)
