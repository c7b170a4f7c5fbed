"""Timeloop's compact mapping form, ``"L3[WIO] K4 - L2[WI] N1 K16X - L1[O] C4 C16X - L0[W] P7"``,
read into and written from the ``[level, dim]`` arrays of `accel.mapping.Mapping`.

Levels run outermost first, each a keep tag then its loops outer to inner; ``K16X`` is a
spatial factor, unlisted factors are 1 and ``N1`` marks a level with no loops.
"""

from __future__ import annotations

import re

import numpy as np

from accel.template import TENSORS
from workloads.errors import ConfigError
from workloads.layer import DIMS

_TOKEN = re.compile(r"([A-Za-z]+)(\d+)([XY]?)")
_HEAD = re.compile(r"L(\d+)\[([A-Za-z]*)\]")


def parse_timeloop(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]:
    """``(temporal, spatial, order, tags)`` of a compact mapping; level 0 innermost, each
    level's order outermost first with its unlisted (factor-1) dims ahead of its loops."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"timeloop mapping: expected a non-empty string, got {text!r}")
    parts = [p.strip() for p in re.split(r"\s+-\s+", text.strip())]
    n = len(parts)
    temporal = np.ones((n, len(DIMS)), np.int64)
    spatial = np.ones((n, len(DIMS)), np.int64)
    order = np.zeros((n, len(DIMS)), np.int64)
    tags: list[str] = [""] * n
    for pos, part in enumerate(parts):
        words = part.split()
        head = _HEAD.fullmatch(words[0]) if words else None
        if head is None:
            raise ConfigError(f"timeloop mapping {text!r}: level {pos} starts with "
                              f"{words[0] if words else part!r}; expected e.g. 'L3[WIO]'")
        level = int(head.group(1))
        if level != n - 1 - pos:
            raise ConfigError(f"timeloop mapping {text!r}: found L{level} where "
                              f"L{n - 1 - pos} was expected (levels run L{n - 1} .. L0)")
        tag = head.group(2).upper()
        if any(t not in TENSORS for t in tag) or len(set(tag)) != len(tag):
            raise ConfigError(f"timeloop mapping {text!r}: L{level} keeps {tag!r}; "
                              "expected letters from W, I, O")
        tags[level] = "".join(t for t in TENSORS if t in tag)
        listed: list[int] = []
        seen_spatial: set[int] = set()
        for word in words[1:]:
            tok = _TOKEN.fullmatch(word)
            if tok is None or tok.group(1).upper() not in DIMS:
                raise ConfigError(f"timeloop mapping {text!r}: L{level} has token "
                                  f"{word!r}; expected a dim from {''.join(DIMS)} and a "
                                  "factor, e.g. 'K16' or 'K16X'")
            d = DIMS.index(tok.group(1).upper())
            factor = int(tok.group(2))
            if factor < 1:
                raise ConfigError(f"timeloop mapping {text!r}: L{level} factor {word!r} "
                                  "must be at least 1")
            if tok.group(3):
                if d in seen_spatial:
                    raise ConfigError(f"timeloop mapping {text!r}: L{level} has two "
                                      f"spatial factors for {DIMS[d]}")
                seen_spatial.add(d)
                spatial[level, d] = factor
                continue
            if factor == 1:
                continue  # a loop of one iteration (Timeloop's "N1" placeholder)
            if d in listed:
                raise ConfigError(f"timeloop mapping {text!r}: L{level} has two temporal "
                                  f"loops over {DIMS[d]}")
            listed.append(d)
            temporal[level, d] = factor
        unlisted = [d for d in range(len(DIMS)) if d not in listed]
        order[level] = unlisted + listed
    return temporal, spatial, order, tuple(tags)


def format_timeloop(temporal: np.ndarray, spatial: np.ndarray, order: np.ndarray,
                    tags: tuple[str, ...]) -> str:
    """The compact form of a mapping's arrays; `parse_timeloop` inverts it exactly."""
    parts = []
    for level in range(len(tags) - 1, -1, -1):
        words = [f"L{level}[{tags[level]}]"]
        loops = [f"{DIMS[d]}{temporal[level, d]}" for d in order[level]
                 if temporal[level, d] > 1]
        words += loops or ["N1"]
        words += [f"{DIMS[d]}{spatial[level, d]}X" for d in range(len(DIMS))
                  if spatial[level, d] > 1]
        parts.append(" ".join(words))
    return " - ".join(parts)


__all__ = ["format_timeloop", "parse_timeloop"]
