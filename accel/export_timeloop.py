"""A design in Timeloop's v3 input format (the ``version: 0.3`` architecture of Timeloop-Accelergy
v3, the format DOSA's Gemmini Timeloop runs use) and back.

Three documents, each a plain dict for ``yaml.safe_dump``:

* `timeloop_arch`: the template's levels as Timeloop storage levels, outermost first, each
  with its per-instance ``entries`` (capacity), ``word-bits``, ``block-size``, ``instances``,
  ``meshX`` and ``shared_bandwidth`` (words per cycle), all from `accel.arch.level_arrays`,
  the model's own figures; a level that fans out opens a subtree of its fan-out instances, the
  first fan-out along X and the second along Y (Gemmini: ``PECols`` of accumulators under the
  scratchpad, ``PERows`` of registers and MACs under each accumulator, as DOSA's
  ``dataset/hw/gemmini/arch/arch.yaml`` in ucb-bar/dosa a7a3239 lays them out);
* `timeloop_problem`: the ``CNN-Layer`` shape. Timeloop names the output channels ``M`` (baco's
  ``K``) and pairs R and P with ``Wstride``/``Wdilation``, so a `Layer`'s ``Hstride`` (its
  P/R axis) is Timeloop's ``Wstride`` (the convention of `perfmodels.validate`);
* `timeloop_mapping`: per level a temporal directive (``factors`` and ``permutation``, which
  Timeloop reads inner to outer, the reverse of the compact string's order), a spatial
  directive at each level that fans out (a spatial sub-nest targets the parent level, so
  ``K16X`` at L2 is ``M=16`` spatial at the scratchpad; ``split`` 7 puts every dim on X, 0 on
  Y) and a bypass directive (``keep``/``bypass`` from the level's ``[WIO]`` tag).

Timeloop checks capacities single-buffered; a mapping's ``stages`` have no place in these
documents (an architecture's ``multiple-buffering`` is one number for every layer), so the
readers take them from the caller. Sources of the key names: Timeloop ``src/model/buffer.cpp``
and ``src/mapping/parser.cpp`` at NVlabs/timeloop 0e17d5c (``word-bits``, ``block-size``,
``entries``, ``instances``, ``meshX``, ``shared_bandwidth``; ``split``'s default of every dim
on X, parser.cpp line 120) and the v3 documentation's mapping page (``permutation`` is
inner-to-outer).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from accel.arch import HardwareConfig, Template, level_arrays, tensor_bits
from accel.dma import bus_bytes, dram_bytes_per_cycle
from accel.mapping import DIM_INDEX, NUM_DIMS, Mapping
from workloads.errors import ConfigError
from workloads.layer import DIMS, Layer

TENSOR_NAMES = {"W": "Weights", "I": "Inputs", "O": "Outputs"}
"""Timeloop's CNN-Layer data spaces by baco's tensor letters."""

_TO_TIMELOOP = {"K": "M"}
_FROM_TIMELOOP = {"M": "K"}
TIMELOOP_DIMS = tuple(_TO_TIMELOOP.get(d, d) for d in DIMS)
"""baco's R, S, P, Q, C, K, N as Timeloop's CNN-Layer names them (K is M)."""


def _letter(dim_index: int) -> str:
    return TIMELOOP_DIMS[dim_index]


def _index(letter: str, where: str) -> int:
    dim = _FROM_TIMELOOP.get(letter, letter)
    if dim not in DIM_INDEX or letter == "K":
        raise ConfigError(f"{where}: unknown dimension {letter!r}; expected one of "
                          f"{''.join(TIMELOOP_DIMS)}")
    return DIM_INDEX[dim]


# --------------------------------------------------------------------------- architecture
def _fanout_levels(template: Template) -> list[int]:
    """The levels that fan out below them, outermost first (at most two: Timeloop's mesh is
    two-dimensional)."""
    out = [l for l in range(template.num_levels - 1, -1, -1) if template.levels[l].spatial_dims]
    if len(out) > 2:
        raise ConfigError(f"template {template.name!r}: {len(out)} levels fan out; a Timeloop "
                          "mesh has two axes")
    return out


def _level_word_bits(template: Template, hw: HardwareConfig) -> list[int]:
    """Per level, the narrowest width of the tensors it keeps (Timeloop has one word size a
    level; DRAM's bandwidth is counted in input words, `accel.dma`)."""
    bits = tensor_bits(hw.to_params(), np)
    return [int(min(bits[i] for i in range(3) if template.keeps_mask[l, i]))
            for l in range(template.num_levels)]


def timeloop_arch(hw: HardwareConfig) -> dict[str, Any]:
    """The ``architecture:`` document of `hw` (see the module docstring)."""
    template = hw.template_spec
    arrays = level_arrays(template, hw.to_params(), np)
    word_bits = _level_word_bits(template, hw)
    fans = _fanout_levels(template)
    n = template.num_levels
    dram_words = int(bus_bytes(dram_bytes_per_cycle(hw.dram_bw_words, hw.input_bits))
                     * 8 // word_bits[n - 1])
    instances, mesh_x, fan_x = 1, 1, True
    nodes: list[tuple[str, list[dict[str, Any]]]] = []   # (subtree name, its local levels)
    local: list[dict[str, Any]] = []
    name = "System"
    for l in range(n - 1, -1, -1):
        lv = template.levels[l]
        if int(round(float(arrays.instances[l]))) != instances:
            raise ConfigError(f"template {template.name!r}: level {lv.name} has "
                              f"{float(arrays.instances[l]):g} instances, but the fan-outs "
                              f"above it give {instances}")
        attrs: dict[str, Any] = {"instances": instances, "meshX": mesh_x,
                                 "word-bits": word_bits[l]}
        if l == n - 1:
            attrs["block-size"] = dram_words
        else:
            entries = float(arrays.capacity_kb[l]) * 8192 / word_bits[l]
            if abs(entries - round(entries)) > 1e-6:
                raise ConfigError(f"{lv.name}: {float(arrays.capacity_kb[l]):g} KiB is not a "
                                  f"whole number of {word_bits[l]}-bit words")
            # a row of the level that feeds the first fan-out spans it (Gemmini: DIM words)
            block = int(round(float(arrays.fanout[l]))) if l == fans[0] else 1
            attrs.update({"entries": int(round(entries)), "block-size": block,
                          "width": block * word_bits[l]})
        attrs["shared_bandwidth"] = float(arrays.bandwidth_words[l])
        local.append({"name": lv.name, "class": "DRAM" if l == n - 1 else
                      ("regfile" if l == 0 else "SRAM"), "attributes": attrs})
        if l in fans and l > 0:
            fan = int(round(float(arrays.fanout[l])))
            nodes.append((name, local))
            name = f"{'PECols' if fan_x else 'PERows'}[0..{fan - 1}]"
            local = []
            instances *= fan
            mesh_x *= fan if fan_x else 1
            fan_x = False
    local.append({"name": "MACC", "class": "intmac",
                  "attributes": {"instances": instances, "meshX": mesh_x,
                                 "datawidth": int(hw.input_bits)}})
    nodes.append((name, local))
    tree: dict[str, Any] = {"name": nodes[-1][0], "local": nodes[-1][1]}
    for sub_name, sub_local in reversed(nodes[:-1]):
        tree = {"name": sub_name, "local": sub_local, "subtree": [tree]}
    return {"architecture": {"version": 0.3, "subtree": [tree]}}


# --------------------------------------------------------------------------- problem
def timeloop_problem(layer: Layer) -> dict[str, Any]:
    """The ``problem:`` document of `layer`'s loop nest (one group of a grouped layer)."""
    instance = {_letter(i): int(getattr(layer, d)) for i, d in enumerate(DIMS)}
    instance.update({"Wstride": layer.Hstride, "Hstride": layer.Wstride,
                     "Wdilation": layer.Hdilation, "Hdilation": layer.Wdilation})
    shape = {
        "name": "CNN-Layer",
        "dimensions": list(TIMELOOP_DIMS),
        "coefficients": [{"name": c, "default": 1}
                         for c in ("Wstride", "Hstride", "Wdilation", "Hdilation")],
        "data-spaces": [
            {"name": "Weights", "projection": [[["C"]], [["M"]], [["R"]], [["S"]]]},
            {"name": "Inputs", "projection": [
                [["N"]], [["C"]], [["R", "Wdilation"], ["P", "Wstride"]],
                [["S", "Hdilation"], ["Q", "Hstride"]]]},
            {"name": "Outputs", "projection": [[["N"]], [["M"]], [["Q"]], [["P"]]],
             "read-write": True},
        ],
    }
    return {"problem": {"shape": shape, "instance": instance}}


def layer_from_timeloop_problem(doc: Any, where: str = "problem") -> Layer:
    """The loop nest of a ``problem:`` document (a conv2d `Layer`: Timeloop's shape has no
    operator kind, padding or groups)."""
    try:
        instance = doc["problem"]["instance"]
        dims = {d: int(instance[_letter(i)]) for i, d in enumerate(DIMS)}
        return Layer(kind="conv2d", **dims, Hstride=int(instance.get("Wstride", 1)),
                     Wstride=int(instance.get("Hstride", 1)),
                     Hdilation=int(instance.get("Wdilation", 1)),
                     Wdilation=int(instance.get("Hdilation", 1)))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: not a CNN-Layer problem ({exc!r})") from None


# --------------------------------------------------------------------------- mapping
def _factors(row: np.ndarray) -> str:
    return " ".join(f"{_letter(d)}={int(row[d])}" for d in range(NUM_DIMS))


def timeloop_mapping(mapping: Mapping, hw: HardwareConfig) -> dict[str, Any]:
    """The ``mapping:`` document of `mapping` on `hw`'s template, outermost level first."""
    template = hw.template_spec
    if mapping.num_levels != template.num_levels or mapping.tags != template.tags:
        raise ConfigError(f"mapping keeps {mapping.tags}, template {template.name!r} "
                          f"{template.tags}")
    fans = _fanout_levels(template)
    out: list[dict[str, Any]] = []
    for l in range(template.num_levels - 1, -1, -1):
        target = template.levels[l].name
        out.append({"target": target, "type": "temporal",
                    "factors": _factors(mapping.temporal[l]),
                    "permutation": "".join(_letter(d) for d in mapping.order[l][::-1])})
        if l in fans:
            out.append({"target": target, "type": "spatial",
                        "factors": _factors(mapping.spatial[l]),
                        "permutation": "".join(TIMELOOP_DIMS),
                        "split": NUM_DIMS if l == fans[0] else 0})
        elif np.any(mapping.spatial[l] > 1):
            raise ConfigError(f"level {target} does not fan out, yet the mapping has spatial "
                              f"factors {mapping.spatial[l].tolist()} there")
        tag = mapping.tags[l]
        out.append({"target": target, "type": "bypass",
                    "keep": [TENSOR_NAMES[t] for t in "WIO" if t in tag],
                    "bypass": [TENSOR_NAMES[t] for t in "WIO" if t not in tag]})
    return {"mapping": out}


def _parse_factors(text: Any, where: str) -> np.ndarray:
    row = np.ones(NUM_DIMS, np.int64)
    for word in str(text).split():
        name, _, value = word.partition("=")
        try:
            row[_index(name, where)] = int(value)
        except ValueError:
            raise ConfigError(f"{where}: factor {word!r} is not NAME=INTEGER") from None
    return row


def mapping_from_timeloop_yaml(doc: Any, template: Template, stages: Any = 2,
                               where: str = "mapping") -> Mapping:
    """The `Mapping` of a ``mapping:`` document on `template` (its levels found by name).
    ``stages``: one number for every level below the outermost (Timeloop's roofline overlaps
    loads with compute, `Mapping.from_timeloop`'s 2) or one per level, innermost first."""
    names = [lv.name for lv in template.levels]
    n = len(names)
    temporal = np.ones((n, NUM_DIMS), np.int64)
    spatial = np.ones((n, NUM_DIMS), np.int64)
    order = np.tile(np.arange(NUM_DIMS), (n, 1))
    keeps = {l: "" for l in range(n)}
    directives = doc.get("mapping") if isinstance(doc, dict) else None
    if not isinstance(directives, list):
        raise ConfigError(f"{where}: expected a 'mapping:' list of directives")
    for i, item in enumerate(directives):
        here = f"{where}: directive {i}"
        if not isinstance(item, dict) or item.get("target") not in names:
            raise ConfigError(f"{here}: target must be one of {names}, got "
                              f"{item.get('target') if isinstance(item, dict) else item!r}")
        l = names.index(item["target"])
        kind = item.get("type")
        if kind == "temporal":
            temporal[l] = _parse_factors(item.get("factors", ""), here)
            perm = [_index(c, here) for c in str(item.get("permutation", ""))]
            rest = [d for d in range(NUM_DIMS) if d not in perm]
            order[l] = rest + perm[::-1]     # unlisted loops outermost, as parse_timeloop does
        elif kind == "spatial":
            spatial[l] = _parse_factors(item.get("factors", ""), here)
        elif kind == "bypass":
            inverse = {v: k for k, v in TENSOR_NAMES.items()}
            try:
                keeps[l] = "".join(t for t in "WIO"
                                   if t in {inverse[x] for x in item.get("keep", [])})
            except KeyError as exc:
                raise ConfigError(f"{here}: unknown data space {exc.args[0]!r}") from None
        else:
            raise ConfigError(f"{here}: type must be temporal, spatial or bypass, got {kind!r}")
    arr = np.broadcast_to(np.asarray(stages, np.int64), (n,)).copy()
    arr[-1] = 1
    return Mapping(temporal=temporal, spatial=spatial, order=order, stages=arr,
                   tags=tuple(keeps[l] for l in range(n)))


def covered_layer(layer: Layer, mapping: Mapping) -> Layer:
    """`layer` with each dim what `mapping`'s factors cover (more than the layer where the
    search padded an awkward dim): the problem Timeloop must run the mapping on, since its
    factors must multiply to the problem's dims."""
    cover = (mapping.temporal * mapping.spatial).prod(axis=0)
    changes = {d: int(cover[i]) for i, d in enumerate(DIMS)}
    kind = "gemm" if layer.kind == "gemv" and (changes["N"], changes["P"]) != (1, 1) \
        else layer.kind
    return dataclasses.replace(layer, kind=kind, **changes)


__all__ = ["TENSOR_NAMES", "TIMELOOP_DIMS", "covered_layer", "layer_from_timeloop_problem",
           "mapping_from_timeloop_yaml", "timeloop_arch", "timeloop_mapping",
           "timeloop_problem"]
