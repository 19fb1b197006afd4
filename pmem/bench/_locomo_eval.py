"""LoCoMo's own scoring: ``task_eval/evaluation.py`` of snap-research/LoCoMo, rule for rule, plus BLEU-1.

The official rules (``eval_question_answering``):

- normalize: drop commas, lowercase, drop ASCII punctuation, replace the words a/an/the/and with a space,
  collapse whitespace; tokens are Porter-stemmed (nltk's ``PorterStemmer``);
- F1 is the token F1 of the stemmed tokens (a multiset overlap, as SQuAD's);
- multi-hop (category 1): gold and prediction are split on commas, each gold part takes its best F1
  over the prediction's parts, and the question scores the mean over gold parts (partial credit);
- open-domain (category 3): the gold is cut at its first ``;`` (what follows explains it);
- adversarial (category 5): 1 when the answer contains "no information available" or "not mentioned"
  (case-insensitive), else 0. A reply of one option letter ("a", "(b)") is first mapped to that
  option's text, as the official ``get_cat_5_answer`` does.

The official code has no BLEU. BLEU-1 here is the one published LoCoMo figures report (the Mem0 and
A-Mem evaluations: ``sentence_bleu`` with weights (1, 0, 0, 0) and smoothing method 1 over lowercased
``word_tokenize`` tokens). nltk's ``word_tokenize`` first splits sentences with the Punkt model, a
separate data download; here the same word tokenizer runs on the whole answer (``preserve_line``), which
gives the same tokens for a one-sentence answer, while a period ending an inner sentence of a longer
one stays on its word. nltk is imported on first use (the ``eval`` extra).

>>> round(locomo_f1("Caroline went to the LGBTQ support group", "LGBTQ support group"), 3)
0.667
>>> locomo_multi_f1("hiking, yoga", "Yoga, hiking, kickboxing")
0.6666666666666666
>>> abstained("Not mentioned in the conversation")
True
"""

from __future__ import annotations

import importlib
import re
import string
from collections import Counter
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

_PUNCT = set(string.punctuation)
# the official pattern ("and" included: regex's \b matches re's for these ASCII words)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
#: the official abstention phrases (category 5)
ABSTENTION_PHRASES: tuple[str, ...] = ("no information available", "not mentioned")


def locomo_normalize(text: str) -> str:
    """The official ``normalize_answer``: its steps in its order.

    >>> locomo_normalize("The cat, and a Dog!")
    'cat dog'
    """
    text = text.replace(",", "")
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _nltk(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        msg = f"LoCoMo's scorer needs nltk ({exc}): pip install 'pmem[eval]'"
        raise ModuleNotFoundError(msg, name=exc.name) from exc


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    return _nltk("nltk.stem").PorterStemmer()


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return str(_stemmer().stem(word))


def _tokens(text: str) -> list[str]:
    return [_stem(w) for w in locomo_normalize(text).split()]


def locomo_f1(prediction: str, gold: str) -> float:
    """The official ``f1_score``: token F1 of normalized, Porter-stemmed tokens."""
    pred, ref = _tokens(prediction), _tokens(gold)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def locomo_multi_f1(prediction: str, gold: str) -> float:
    """The official ``f1`` (multi-hop): the mean over comma-separated gold parts of each part's best F1
    against the comma-separated parts of the prediction."""
    preds = [p.strip() for p in prediction.split(",")]
    golds = [g.strip() for g in gold.split(",")]
    return sum(max(locomo_f1(p, g) for p in preds) for g in golds) / len(golds)


def chosen_option(prediction: str, options: Mapping[str, str]) -> str:
    """The official ``get_cat_5_answer``: a one-letter (``a``) or three-character (``(a)``) reply is the
    text of that option; any other reply stands as it is (lowercased, stripped)."""
    p = prediction.strip().lower()
    if not options or len(p) not in (1, 3):
        return p
    pick = ("a" in p) if len(p) == 1 else ("(a)" in p)
    return options.get("a" if pick else "b", p)


def abstained(prediction: str, options: Mapping[str, str] | None = None) -> bool:
    """The official adversarial rule: the (option-resolved) answer contains an abstention phrase."""
    text = chosen_option(prediction, options or {}).lower()
    return any(phrase in text for phrase in ABSTENTION_PHRASES)


def bleu1(prediction: str, gold: str) -> float:
    """BLEU-1 as the published LoCoMo evaluations compute it (see the module docstring).

    >>> round(bleu1("Caroline went hiking", "hiking"), 3)
    0.333
    """
    tokenize = _nltk("nltk.tokenize").word_tokenize
    bleu = _nltk("nltk.translate.bleu_score")
    pred = tokenize(prediction.lower(), preserve_line=True)
    ref = tokenize(gold.lower(), preserve_line=True)
    if not pred or not ref:  # the published code scores an empty answer 0
        return 0.0
    smooth = bleu.SmoothingFunction().method1
    return float(bleu.sentence_bleu([ref], pred, weights=(1, 0, 0, 0), smoothing_function=smooth))


def official_gold(category: int, gold: str) -> str:
    """The gold the official code scores against: open-domain (3) answers are cut at the first ``;``."""
    return gold.split(";")[0].strip() if category == 3 else gold


def locomo_score(
    category: int, prediction: str, gold: str, options: Mapping[str, str] | None = None
) -> float:
    """The official per-question score: F1 by category (1: multi-hop partial credit), abstention for 5."""
    if category == 5:
        return float(abstained(prediction, options))
    if category == 1:
        return locomo_multi_f1(prediction, gold)
    if category in (2, 3, 4):
        return locomo_f1(prediction, official_gold(category, gold))
    msg = f"LoCoMo category {category!r} (known: 1-5)"
    raise ValueError(msg)
