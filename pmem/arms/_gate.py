"""The question-only prune gate as a scikit-learn classifier (``gate = "classifier"``).

It decides prune-or-keep from the question text alone: word 1-2-gram TF-IDF and a logistic regression.
Train it on labelled questions with ``gate_examples`` (a JSON file: a list of ``{"question": ...,
"label": "prune" | "keep"}``, or a mapping question -> label), for instance questions whose stored
answer class is ``superseded`` (prune) versus ``aggregation``/``single`` (keep). Without it, a small
built-in seed set of hand-written phrasings is used: questions asking for a value that may have
changed (prune) versus counts, lists, firsts and recollections (keep). The seed set is a starting
point, not a measured gate; reports should say which one ran.

>>> gate = QuestionGate.default()
>>> gate.decide("What is my current personal best for the 5K?"), gate.decide("How many museums did I visit?")
('prune', 'keep')
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

SEED_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("What is my current job title?", "prune"),
    ("Where do I live now?", "prune"),
    ("What is my latest personal best in the marathon?", "prune"),
    ("Which phone do I use these days?", "prune"),
    ("What is the most recent price I was quoted for the car?", "prune"),
    ("How much do I currently pay for rent?", "prune"),
    ("Who is my manager now?", "prune"),
    ("What is my current weight?", "prune"),
    ("Which gym am I a member of at the moment?", "prune"),
    ("What time do I wake up now on weekdays?", "prune"),
    ("What is the name of my dog now?", "prune"),
    ("Do I still play the guitar?", "prune"),
    ("What is my updated budget for the trip?", "prune"),
    ("What is the current status of my visa application?", "prune"),
    ("Where is the apple now?", "prune"),
    ("What is my present address?", "prune"),
    ("How many books have I read this year?", "keep"),
    ("How many different museums did I visit in total?", "keep"),
    ("List all the restaurants I mentioned.", "keep"),
    ("What was the first car I owned?", "keep"),
    ("When did I start learning Spanish?", "keep"),
    ("How many days did my trip to Japan last?", "keep"),
    ("What did I buy for my sister's birthday?", "keep"),
    ("Which hobbies have I talked about?", "keep"),
    ("How much did I spend on groceries across all my trips?", "keep"),
    ("What was the name of the hotel I stayed at in Paris?", "keep"),
    ("How many times did I go hiking last month?", "keep"),
    ("What advice did you give me about sleep?", "keep"),
    ("In what order did I visit the three cities?", "keep"),
    ("What was my previous job before this one?", "keep"),
    ("What is the total number of plants I own across rooms?", "keep"),
    ("Which movies did I watch in March?", "keep"),
)


class QuestionGate:
    """A fitted prune/keep classifier over question text."""

    def __init__(self, examples: list[tuple[str, str]], source: str) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline

        labels = {label for _, label in examples}
        if labels != {"prune", "keep"}:
            msg = f"gate examples ({source}) need both labels 'prune' and 'keep', found {sorted(labels)}"
            raise ValueError(msg)
        self.source = source
        self._model = make_pipeline(
            TfidfVectorizer(ngram_range=(1, 2), lowercase=True, sublinear_tf=True),
            LogisticRegression(C=10.0, max_iter=1000),
        )
        self._model.fit([q for q, _ in examples], [label for _, label in examples])

    def decide(self, question: str) -> str:
        return str(self._model.predict([question])[0])

    @classmethod
    def default(cls) -> QuestionGate:
        return _cached(None)

    @classmethod
    def from_file(cls, path: str | Path) -> QuestionGate:
        try:
            st = Path(path).stat()
        except OSError as exc:
            msg = f"gate_examples {path}: cannot read the file ({exc})"
            raise ValueError(msg) from exc
        return _cached(str(path), st.st_mtime_ns, st.st_size)


def _load_examples(path: str) -> list[tuple[str, str]]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        msg = f"gate_examples {path}: cannot read a JSON file ({exc})"
        raise ValueError(msg) from exc
    if isinstance(data, dict):
        pairs = list(data.items())
    elif isinstance(data, list):
        try:
            pairs = [(str(d["question"]), str(d["label"])) for d in data]
        except (KeyError, TypeError) as exc:
            msg = f"gate_examples {path}: each item needs 'question' and 'label'"
            raise ValueError(msg) from exc
    else:
        msg = f"gate_examples {path}: expected a list or a mapping"
        raise ValueError(msg)
    bad = sorted({str(label) for _, label in pairs} - {"prune", "keep"})
    if bad:
        msg = f"gate_examples {path}: labels must be 'prune' or 'keep', found {bad}"
        raise ValueError(msg)
    return [(str(q), str(label)) for q, label in pairs]


@lru_cache(maxsize=8)
def _cached(path: str | None, mtime_ns: int = 0, size: int = 0) -> QuestionGate:
    del mtime_ns, size  # part of the cache key only: an edited file is read again
    if path is None:
        return QuestionGate(list(SEED_EXAMPLES), "built-in seed phrasings")
    return QuestionGate(_load_examples(path), path)
