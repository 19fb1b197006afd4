"""Arm families and the one palette every figure draws arms with.

An arm's family is its design (docs/arms.md): the P-Mem variants, the fact stores (per-fact records that
are overwritten, added or invalidated: ``crud``, ``add-only``, ``bitemporal`` and the real peers ``mem0``
and ``graphiti``), and the retrieval / long-context baselines that keep raw text and settle nothing at
write time. The family is read from the arm registry (:func:`pmem.arms.resolve_arm`: the class an arm
is built from), so a new P-Mem variant or a new baseline of a known class needs no change here.

Each family has one hue family (P-Mem blues, fact stores reds and oranges, retrieval greens), one line
style and its own markers; within a family an arm takes the next colour and marker in the registry's
display order, so an arm looks the same in every figure of every report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pmem.arms import arm_names, resolve_arm
from pmem.report._load import AGENT_SEP


@dataclass(frozen=True)
class Family:
    name: str
    label: str
    #: colours in the order the family's arms take them (registry display order)
    colours: tuple[str, ...]
    #: the hue range (degrees, may wrap past 360) every colour of the family lies in
    hues: tuple[float, float]
    markers: tuple[str, ...]
    linestyle: str


PMEM, FACT_STORE, RETRIEVAL, OTHER = "pmem", "fact-store", "retrieval", "other"

FAMILIES: dict[str, Family] = {
    PMEM: Family(
        PMEM,
        "P-Mem variants",
        ("#0b3d91", "#4a90d9", "#9ecae1", "#17a2b8", "#5b5fc7", "#0e6e8c", "#7b9cc4"),
        (180.0, 245.0),
        ("o", "s", "D", "^", "v", "P", "X"),
        "-",
    ),
    FACT_STORE: Family(
        FACT_STORE,
        "fact stores",
        ("#d7301f", "#ff7f0e", "#8c510a", "#f4a582", "#dfc27d"),
        (0.0, 50.0),
        ("s", "D", "^", "v", "o"),
        "--",
    ),
    RETRIEVAL: Family(
        RETRIEVAL,
        "retrieval / long-context baselines",
        ("#4d5d4d", "#1b7837", "#5aae61", "#a6d96a", "#66c2a5", "#4dac26"),
        (80.0, 170.0),
        ("x", "^", "o", "s", "D", "P"),
        ":",
    ),
    OTHER: Family(
        OTHER,
        "other arms",
        ("#984ea3", "#e7298a", "#6a3d9a", "#bc80bd", "#737373"),
        (0.0, 360.0),
        ("h", "*", "p", "8", "d"),
        "-.",
    ),
}

#: the family of each class an arm is built from (``ArmEntry.target``'s class name)
_CLASS_FAMILY = {
    "PMemArm": PMEM,
    "CrudArm": FACT_STORE,
    "AddOnlyArm": FACT_STORE,
    "BitemporalArm": FACT_STORE,
    "Mem0Arm": FACT_STORE,
    "GraphitiArm": FACT_STORE,
    "NoMemoryArm": RETRIEVAL,
    "LongContextArm": RETRIEVAL,
    "RawArm": RETRIEVAL,
    "ChunksArm": RETRIEVAL,
}


def base_arm(arm: str) -> str:
    """``pmem@qwen`` → ``pmem``: the arm without its agent model."""
    return arm.split(AGENT_SEP, 1)[0]


def arm_family(arm: str) -> str:
    """The family of a registered arm (``pmem@model`` counts as ``pmem``); ``other`` for an unknown name.

    Only names this process has registered are looked up: a report never imports a plugin's module."""

    base = base_arm(arm)
    if base not in arm_names():
        return OTHER
    target = resolve_arm(base).target
    return _CLASS_FAMILY.get(target.rsplit(":", 1)[-1], OTHER)


def soft_identity(arm: str) -> bool:
    """Whether an arm matches entity keys by similarity (P-Mem's soft identity, unless its fixed options
    turn it off, as ``pmem-no-identity``'s do)."""

    if arm_family(arm) != PMEM:
        return False
    return resolve_arm(base_arm(arm)).options.get("identity", True) is not False


@dataclass(frozen=True)
class ArmStyle:
    colour: str
    marker: str
    linestyle: str
    family: str
    #: hollow markers for a second (third ...) agent model of the same arm
    hollow: bool = False

    def line(self) -> dict[str, Any]:
        """Keyword arguments of ``plot``/``errorbar``."""
        out: dict[str, Any] = {
            "color": self.colour,
            "marker": self.marker,
            "linestyle": self.linestyle,
            "markersize": 6,
            "markeredgecolor": self.colour,
        }
        if self.hollow:
            out["markerfacecolor"] = "white"
        return out


def arm_styles(arms: list[str]) -> dict[str, ArmStyle]:
    """One style per arm: its family's colour, marker and line style, fixed by the registry's order."""

    registered = arm_names()
    slot: dict[str, int] = {}
    for name in registered:
        family = arm_family(name)
        slot[name] = sum(1 for n in registered[: registered.index(name)] if arm_family(n) == family)
    unknown = sorted({base_arm(a) for a in arms if base_arm(a) not in slot})
    models: dict[str, list[str]] = {}
    out: dict[str, ArmStyle] = {}
    for a in arms:
        base = base_arm(a)
        fam = FAMILIES[arm_family(a)]
        i = slot[base] if base in slot else unknown.index(base)
        seen = models.setdefault(base, [])
        seen.append(a)
        out[a] = ArmStyle(
            fam.colours[i % len(fam.colours)],
            fam.markers[i % len(fam.markers)],
            fam.linestyle,
            fam.name,
            hollow=len(seen) > 1,
        )
    return out
