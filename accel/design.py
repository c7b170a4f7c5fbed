"""What a design is: a hardware configuration plus one `Mapping` per unique layer.

Every search ends in one (BACO's rounding, DOSA-style, the Gemmini tiler, random search), and
every yardstick judges one (`baco.yardsticks`); the models take it as stacked arrays
(`perfmodels.score.design_arrays`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from accel.arch import HardwareConfig
from accel.mapping import Mapping


@dataclasses.dataclass(frozen=True, eq=False)
class Design:
    """A whole-network point: hardware plus per-layer integer arrays.

    ``temporal``/``spatial``: ``[layer, level, dim]``; ``order``: ``[layer, level, 7]`` dims
    outermost first (as `Mapping.order`); ``stages``: ``[layer, level]``.
    """

    hw: HardwareConfig
    temporal: np.ndarray
    spatial: np.ndarray
    order: np.ndarray
    stages: np.ndarray

    def mappings(self) -> list[Mapping]:
        tags = self.hw.template_spec.tags
        return [Mapping(temporal=self.temporal[b], spatial=self.spatial[b], order=self.order[b],
                        stages=self.stages[b], tags=tags) for b in range(len(self.temporal))]


def design_of(hw: HardwareConfig, mappings: Sequence[Mapping]) -> Design:
    """A `Design` from a hardware config and one mapping per layer (any search's result)."""
    return Design(hw=hw, temporal=np.stack([m.temporal for m in mappings]),
                  spatial=np.stack([m.spatial for m in mappings]),
                  order=np.stack([m.order for m in mappings]),
                  stages=np.stack([m.stages for m in mappings]))


__all__ = ["Design", "design_of"]
