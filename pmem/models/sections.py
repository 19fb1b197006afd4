"""The prompt-section convention shared by every prompt the project sends.

A prompt's last user message is a sequence of sections, each opened by a line ``### NAME``. LLMs read it
as ordinary structured text; the heuristic (no-LLM) backend reads the same sections with rules, so it
sees exactly what a model would see and nothing more (never gold answers, except the judge's reference,
which a judge model sees too).

Section names in use (a prompt family picks the ones it needs):

=============  ==========================================================================
TEXT           source text to extract facts from (extract)
KEYS           known keys, one per line (extract, optional)
FACT           ``key: value`` of an incoming fact (annotate, crud, dedupe)
HEAD           ``value (status)`` of the key's current head, or ``none`` (annotate)
MEMORIES       numbered existing memories ``[i] key: value`` (crud, dedupe)
KEY_A, KEY_B   two key names, never values (identity)
TURN_A, TURN_B two dated turns (prune)
ATTRIBUTE      the queried attribute (prune)
CONTEXT        what the memory shows the reader, one item per line (answer, lookup)
QUESTION       the question (answer, lookup, gate, judge)
REFERENCE      the reference answer or rubric (judge only)
RESPONSE       the response to be judged (judge only)
=============  ==========================================================================

>>> text = format_sections({"CONTEXT": "apple.location = fridge", "QUESTION": "Where is the apple now?"})
>>> parse_sections(text)["QUESTION"]
'Where is the apple now?'
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"^### ([A-Z][A-Z_]*)\s*$", re.MULTILINE)


def format_sections(sections: dict[str, str], preamble: str = "") -> str:
    """Render sections in the given order, after an optional instruction preamble."""
    parts = [preamble.rstrip()] if preamble else []
    parts.extend(f"### {name}\n{body.rstrip()}" for name, body in sections.items())
    return "\n\n".join(parts) + "\n"


def parse_sections(text: str) -> dict[str, str]:
    """Inverse of :func:`format_sections` (the preamble is returned under ``""``)."""
    out: dict[str, str] = {}
    matches = list(_HEADER.finditer(text))
    out[""] = text[: matches[0].start()].strip() if matches else text.strip()
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        out[m.group(1)] = text[m.end() : end].strip("\n").rstrip()
    return out
