"""`Mapping`: one layer's program on a template — tiling, spatial fan-out, loop order, stages.

Arrays are indexed ``[level, dim]`` with **level 0 the innermost** (Gemmini: 0 registers,
1 accumulator, 2 scratchpad, 3 DRAM; Timeloop's ``L0``..``L3``) and dims in `workloads.DIMS`
order ``R, S, P, Q, C, K, N``:

* ``temporal[l, d]``: the trip count of level l's loop over d;
* ``spatial[l, d]``: the fan-out of d *below* level l (Gemmini: C across PE rows at the
  accumulator, K across PE columns at the scratchpad), Timeloop's ``C16X`` at ``L1``;
* ``order[l]``: level l's loops as dim indices, **outermost first** as Timeloop prints them
  (loops whose factor is 1 may sit anywhere: they do not exist);
* ``stages[l]``: multi-buffering of level l's tile (1 = no overlap of its loads with the work
  inside it, 2 = double buffering, up to `accel.arch.MAX_STAGES`); the outermost level has 1.

A level's tile (what it must hold per instance) is the product of every factor at and below it
(`tile_words`); the product over all levels of ``temporal * spatial`` is the layer's dims.

>>> m = Mapping.from_timeloop("L3[WIO] K4 - L2[WI] N1 K16X - L1[O] C4 C16X - L0[W] P7")
>>> m.to_timeloop()
'L3[WIO] K4 - L2[WI] N1 K16X - L1[O] C4 C16X - L0[W] P7'
>>> int(m.temporal[1, 4]), int(m.spatial[1, 4])    # C at the accumulator
(4, 16)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from accel.arch import (
    MAX_STAGES,
    TENSORS,
    HardwareConfig,
    Template,
    level_arrays,
    tensor_bits,
)
from accel.timeloop import format_timeloop, parse_timeloop
from workloads.errors import ConfigError, InfeasibleError
from workloads.layer import DIMS, Layer

NUM_DIMS = len(DIMS)
DIM_INDEX = {d: i for i, d in enumerate(DIMS)}
_R, _S, _P, _Q, _C, _K, _N = range(NUM_DIMS)


# --------------------------------------------------------------------------- shared formulas
def span(extent: Any, window: Any, stride: Any, dilation: Any) -> Any:
    """Input rows a sliding window touches: ``(extent-1)*stride + (window-1)*dilation + 1``."""
    return (extent - 1.0) * stride + (window - 1.0) * dilation + 1.0


def tile_words(log_extent: Any, stride: Any, dilation: Any, xp: Any = np) -> Any:
    """Words of W, I, O in one level's tile, from log tile extents.

    The single formula for tile sizes, used by `Mapping.validate` (numpy) and by the
    perfmodels (jax, exact and relaxed); `footprint_kb` turns them into KiB.
    ``log_extent[..., level, dim]`` is the log of the product of every temporal and spatial
    factor at and below the level; ``stride`` and ``dilation`` are ``[..., 2]`` (the P/R axis
    first, then Q/S). Inputs include the sliding-window halo. Returns ``[..., level, tensor]``.
    """
    ext = xp.exp(log_extent)
    st = stride[..., None, :]
    dl = dilation[..., None, :]
    weights = ext[..., _R] * ext[..., _S] * ext[..., _C] * ext[..., _K]
    inputs = (ext[..., _C] * ext[..., _N]
              * span(ext[..., _P], ext[..., _R], st[..., 0], dl[..., 0])
              * span(ext[..., _Q], ext[..., _S], st[..., 1], dl[..., 1]))
    outputs = ext[..., _P] * ext[..., _Q] * ext[..., _K] * ext[..., _N]
    return xp.stack([weights, inputs, outputs], axis=-1)


def tile_kb(words: Any, keeps: Any, bits: Any, xp: Any = np) -> Any:
    """KiB of tiles: the words of each tensor kept (``keeps[..., tensor]``, bool) times its
    width in ``bits[tensor]``, summed over W, I, O (``words[..., tensor]`` -> ``[...]``)."""
    return (xp.where(keeps, words, 0.0) * bits).sum(-1) / 8192.0


def footprint_kb(words: Any, keeps: Any, bits: Any, stages: Any, xp: Any = np) -> Any:
    """Per-instance KiB each level must hold: its tile (`tile_kb` of `tile_words`) times its
    pipeline ``stages``; 0 at the outermost level (it holds the whole tensors, unbounded).

    The single formula for buffer footprints, in numpy (`Mapping.footprint_kb`, the mapping
    samplers, `baco.rounding`) and in jax (`perfmodels.analytic.evaluate`, exact and
    relaxed, and `perfmodels.relax.infer_hw`). ``words[..., level, tensor]``,
    ``keeps[level, tensor]``, ``bits[tensor]``, ``stages[..., level]``; returns
    ``[..., level]``.
    """
    kb = tile_kb(words, keeps, bits, xp) * stages
    if isinstance(kb, np.ndarray):
        kb[..., -1] = 0.0
        return kb
    return kb.at[..., -1].set(0.0)


def layer_geometry(layer: Layer) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dims[7], stride[2], dilation[2])`` of a layer, P/R axis first.

    `Layer` pairs P and R with ``Hstride``/``Hdilation`` (its ``input_height``), and Q and S
    with the W ones.
    """
    dims = np.array([getattr(layer, d) for d in DIMS], dtype=np.float32)
    stride = np.array([layer.Hstride, layer.Wstride], dtype=np.float32)
    dilation = np.array([layer.Hdilation, layer.Wdilation], dtype=np.float32)
    return dims, stride, dilation


# --------------------------------------------------------------------------- the type
def _frozen(value: Any, shape: tuple[int, ...], name: str) -> np.ndarray:
    arr = np.array(value)
    if arr.shape != shape:
        raise ConfigError(f"mapping: {name} must have shape {shape}, got {arr.shape}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ConfigError(f"mapping: {name} must hold integers, got {arr.tolist()}")
    elif arr.dtype.kind not in "iu":
        raise ConfigError(f"mapping: {name} must hold integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    arr.setflags(write=False)
    return arr


@dataclasses.dataclass(frozen=True, eq=False)
class Mapping:
    """A discrete program for one layer (see the module docstring for the array layout).

    ``tags`` are the levels' keep tags, level 0 first (Gemmini: ``("W", "O", "WI", "WIO")``);
    they make the Timeloop string and are checked against the template by `validate`.
    """

    temporal: np.ndarray
    spatial: np.ndarray
    order: np.ndarray
    stages: np.ndarray
    tags: tuple[str, ...]

    def __post_init__(self) -> None:
        tags = tuple(str(t) for t in self.tags)
        n = len(tags)
        if n < 2:
            raise ConfigError(f"mapping: needs at least 2 levels, got {n}")
        object.__setattr__(self, "tags", tags)
        object.__setattr__(self, "temporal", _frozen(self.temporal, (n, NUM_DIMS), "temporal"))
        object.__setattr__(self, "spatial", _frozen(self.spatial, (n, NUM_DIMS), "spatial"))
        object.__setattr__(self, "order", _frozen(self.order, (n, NUM_DIMS), "order"))
        object.__setattr__(self, "stages", _frozen(self.stages, (n,), "stages"))
        for l in range(n):
            if sorted(self.order[l].tolist()) != list(range(NUM_DIMS)):
                raise ConfigError(f"mapping: order of level {l} must be a permutation of the 7 "
                                  f"dims (0..6), got {self.order[l].tolist()}")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def create(cls, temporal: Any, spatial: Any | None = None, order: Any | None = None,
               stages: Any | None = None, tags: tuple[str, ...] = ("W", "O", "WI", "WIO"),
               ) -> Mapping:
        """A mapping with defaults: no fan-out, dims in R..N order, 1 stage everywhere."""
        n = len(tags)
        spatial = np.ones((n, NUM_DIMS), np.int64) if spatial is None else spatial
        order = np.tile(np.arange(NUM_DIMS), (n, 1)) if order is None else order
        stages = np.ones(n, np.int64) if stages is None else stages
        return cls(temporal=temporal, spatial=spatial, order=order, stages=stages, tags=tags)

    @classmethod
    def from_timeloop(cls, text: str, stages: int = 2) -> Mapping:
        """Parse Timeloop's compact form, outermost level first.

        ``"L3[WIO] K48 - L2[WI] N1 K16X - L1[O] C48 P16 C16X - L0[W] P8"``: loops outer to
        inner within a level, ``K16X`` a spatial factor, unlisted factors 1 (``N1`` marks a
        level with no loops). Timeloop's latency assumes loads overlap compute (a roofline
        max), which is the 2-stage case here, hence the default ``stages=2`` below the
        outermost level; Timeloop's own capacity check is single-buffered.
        """
        temporal, spatial, order, tags = parse_timeloop(text)
        n = len(tags)
        stage_arr = np.full(n, int(stages), np.int64)
        stage_arr[-1] = 1
        return cls(temporal=temporal, spatial=spatial, order=order, stages=stage_arr,
                   tags=tags)

    # ------------------------------------------------------------------ views
    @property
    def num_levels(self) -> int:
        return len(self.tags)

    def to_timeloop(self) -> str:
        """Timeloop's compact form; `from_timeloop` inverts it exactly."""
        return format_timeloop(self.temporal, self.spatial, self.order, self.tags)

    def __repr__(self) -> str:
        return f"Mapping({self.to_timeloop()!r}, stages={self.stages.tolist()})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return (self.tags == other.tags and np.array_equal(self.temporal, other.temporal)
                and np.array_equal(self.spatial, other.spatial)
                and np.array_equal(self._effective_order(), other._effective_order())
                and np.array_equal(self.stages, other.stages))

    def __hash__(self) -> int:
        return hash((self.tags, self.temporal.tobytes(), self.spatial.tobytes(),
                     self._effective_order().tobytes(), self.stages.tobytes()))

    def _effective_order(self) -> np.ndarray:
        """Order with factor-1 loops (which do not exist) masked out."""
        out = np.full_like(self.order, -1)
        for l in range(self.num_levels):
            real = [d for d in self.order[l] if self.temporal[l, d] > 1]
            out[l, :len(real)] = real
        return out

    def replace(self, **changes: Any) -> Mapping:
        return dataclasses.replace(self, **changes)

    def with_stages(self, stages: int | Any) -> Mapping:
        """Same program with `stages` at every level but the outermost (which keeps 1)."""
        arr = np.broadcast_to(np.asarray(stages, np.int64), (self.num_levels,)).copy()
        arr[-1] = 1
        return self.replace(stages=arr)

    def to_dict(self) -> dict[str, Any]:
        return {"timeloop": self.to_timeloop(), "stages": self.stages.tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Mapping:
        if not isinstance(data, dict) or "timeloop" not in data:
            raise ConfigError("mapping record needs a 'timeloop' string (and 'stages')")
        m = cls.from_timeloop(data["timeloop"])
        if "stages" in data:
            m = m.replace(stages=np.asarray(data["stages"], np.int64))
        return m

    def innermost_first_order(self) -> np.ndarray:
        """``order`` reversed: the layout the perfmodels use."""
        return self.order[:, ::-1]

    # ------------------------------------------------------------------ checks
    def footprint_kb(self, layer: Layer, hw: HardwareConfig) -> np.ndarray:
        """Per-instance kB each level must hold, stages included (``[level]``; 0 at the top)."""
        bits = tensor_bits(hw.to_params(), np).astype(np.float64)
        return footprint_kb(self.level_words(layer), hw.template_spec.keeps_mask, bits,
                            self.stages)

    def level_words(self, layer: Layer) -> np.ndarray:
        """Words of W, I, O in each level's tile per instance (``[level, tensor]``)."""
        _, stride, dilation = layer_geometry(layer)
        log_ext = np.cumsum(np.log(self.temporal * self.spatial.astype(np.float64)), axis=0)
        return tile_words(log_ext, stride.astype(np.float64), dilation.astype(np.float64))

    def check_structure(self, layer: Layer, hw: HardwareConfig) -> Mapping:
        """Raise unless this is a program for `layer` on `hw`'s template at all: the levels
        and keep tags match the template and the factors multiply to the layer's dims."""
        template = hw.template_spec
        names = [lv.name for lv in template.levels]
        if self.num_levels != template.num_levels:
            raise InfeasibleError(f"mapping has {self.num_levels} levels; template "
                                  f"{template.name!r} has {template.num_levels} ({names})")
        for l, (tag, lv) in enumerate(zip(self.tags, template.levels)):
            if tag != lv.tag:
                raise InfeasibleError(f"level L{l} ({lv.name}) keeps [{lv.tag}] in template "
                                      f"{template.name!r}, the mapping says [{tag}]")
        if np.any(self.temporal < 1) or np.any(self.spatial < 1):
            l, d = np.argwhere((self.temporal < 1) | (self.spatial < 1))[0]
            raise InfeasibleError(f"level L{l} ({names[l]}): factor of {DIMS[d]} must be >= 1")
        dims = layer.dims
        for d, dim in enumerate(DIMS):
            product = int(np.prod(self.temporal[:, d]) * np.prod(self.spatial[:, d]))
            if product != dims[dim]:
                parts = [f"L{l} {dim}{self.temporal[l, d]}" for l in range(self.num_levels)
                         if self.temporal[l, d] > 1]
                parts += [f"L{l} {dim}{self.spatial[l, d]}X" for l in range(self.num_levels)
                          if self.spatial[l, d] > 1]
                raise InfeasibleError(
                    f"dim {dim}: factors multiply to {product} ({' * '.join(parts) or '1'}), "
                    f"but the layer has {dim}={dims[dim]}")
        return self

    def validate(self, layer: Layer, hw: HardwareConfig) -> Mapping:
        """Raise if this mapping is not a legal program for `layer` on `hw`; return self.

        Checks, in order: `check_structure` (levels, keep tags, factors multiply to the
        layer's dims); spatial factors only where the template fans out, within its fan-out;
        temporal factors only where the template allows loops; stages within range; every
        level's tile (times its stages) fits its capacity. The error names the level, dim or
        tensor at fault.
        """
        self.check_structure(layer, hw)
        template = hw.template_spec
        names = [lv.name for lv in template.levels]
        arrays = level_arrays(template, hw.to_params(), np)
        for l, lv in enumerate(template.levels):
            bad = [DIMS[d] for d in range(NUM_DIMS)
                   if self.spatial[l, d] > 1 and not template.spatial_mask[l, d]]
            if bad:
                where = ", ".join(f"{x.name}: {list(x.spatial_dims)}" for x in template.levels
                                  if x.spatial_dims)
                raise InfeasibleError(f"level L{l} ({lv.name}): spatial factor on {bad[0]}, but "
                                      f"this template fans out only at {where or 'no level'}")
            fan = int(np.prod(self.spatial[l]))
            if fan > arrays.fanout[l] + 1e-6:
                raise InfeasibleError(f"level L{l} ({lv.name}): spatial factors use {fan} PEs "
                                      f"but the fan-out is {arrays.fanout[l]:g} "
                                      f"({lv.fanout.text} on this hardware)")
            bad = [DIMS[d] for d in range(NUM_DIMS)
                   if self.temporal[l, d] > 1 and not template.temporal_mask[l, d]]
            if bad:
                raise InfeasibleError(f"level L{l} ({lv.name}): temporal loop over {bad[0]} is "
                                      f"not allowed here (allowed: {list(lv.temporal_dims)})")
        top = self.num_levels - 1
        if self.stages[top] != 1:
            raise InfeasibleError(f"level L{top} ({names[top]}): the outermost level has 1 "
                                  f"stage, got {self.stages[top]}")
        for l in range(top):
            if not 1 <= self.stages[l] <= MAX_STAGES:
                raise InfeasibleError(f"level L{l} ({names[l]}): stages must be 1..{MAX_STAGES}"
                                      f", got {self.stages[l]}")
        need = self.footprint_kb(layer, hw)
        for l in range(top):
            cap = float(arrays.capacity_kb[l])
            if need[l] > cap * (1 + 1e-6) + 1e-9:
                words = self.level_words(layer)[l]
                held = ", ".join(f"{t} {words[i]:.0f} words" for i, t in enumerate(TENSORS)
                                 if template.keeps_mask[l, i])
                raise InfeasibleError(
                    f"level L{l} ({names[l]}): tile overflows the buffer: {held} x "
                    f"{self.stages[l]} stage(s) = {need[l]:.4g} KiB per instance > capacity "
                    f"{cap:.4g} KiB")
        return self

    def fits(self, layer: Layer, hw: HardwareConfig) -> bool:
        try:
            self.validate(layer, hw)
        except InfeasibleError:
            return False
        return True

    # ------------------------------------------------------------------ sampling
    @classmethod
    def random(cls, layer: Layer, hw: HardwareConfig, rng: np.random.Generator,
               stages: int | None = None, fit: bool = True, tries: int = 200) -> Mapping:
        """A random legal-shaped mapping of `layer` on `hw`'s template.

        Each dim is split into random divisors over the slots the template allows (spatial
        within its fan-out), the outermost level taking the rest; orders are random
        permutations; stages random in 1..2 unless given. With ``fit`` it retries until the
        tiles fit the buffers (small inner tiles are favoured, so this rarely fails), and
        raises `InfeasibleError` after `tries` attempts.
        """
        template = hw.template_spec
        arrays = level_arrays(template, hw.to_params(), np)
        n = template.num_levels
        for _ in range(max(1, tries)):
            temporal, spatial = _random_factors(template, arrays.fanout, layer.dims, rng)
            order = np.stack([rng.permutation(NUM_DIMS) for _ in range(n)])
            st = (rng.integers(1, 3, size=n) if stages is None
                  else np.full(n, int(stages), np.int64))
            st[-1] = 1
            m = cls(temporal=temporal, spatial=spatial, order=order, stages=st,
                    tags=template.tags)
            if not fit or m.fits(layer, hw):
                return m
        raise InfeasibleError(f"no random mapping of {layer.config_str()} fits "
                              f"{hw.name or hw.template} after {tries} tries")


def _random_factors(template: Template, fanout: np.ndarray, dims: dict[str, int],
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(temporal, spatial)``: each dim split into random divisors over the slots the
    template allows (spatial within ``fanout``), the outermost level taking the rest."""
    n = template.num_levels
    temporal = np.ones((n, NUM_DIMS), np.int64)
    spatial = np.ones((n, NUM_DIMS), np.int64)
    for d, dim in enumerate(DIMS):
        left = dims[dim]
        slots = [(l, "s") for l in range(n) if template.spatial_mask[l, d]]
        slots += [(l, "t") for l in range(n - 1) if template.temporal_mask[l, d]]
        rng.shuffle(slots)
        for l, kind in slots:
            if left == 1:
                break
            divs = _divisors(left)
            if kind == "s":
                room = fanout[l] / np.prod(spatial[l])
                divs = [x for x in divs if x <= room]
            # the smaller of two draws: favours small inner tiles
            pick = int(divs[min(rng.integers(len(divs), size=2))])
            (spatial if kind == "s" else temporal)[l, d] = pick
            left //= pick
        temporal[n - 1, d] = left
    return temporal, spatial


def _divisors(n: int) -> list[int]:
    small = [i for i in range(1, int(math.isqrt(n)) + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))
