"""`baco.fusion.plan_chain_tiles`: the fused chain's tiles with the least modelled traffic."""

import pytest

from accel.arch import HardwareConfig
from accel.lower import lower_gemm_chain
from baco.fusion import plan_chain_tiles
from workloads.errors import InfeasibleError
from workloads.layer import Layer

HW = HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=2, acc_kb=2, name="d4")


def _chain(m, k, l_, n, batch=1):
    return (Layer.gemm(M=m, K_red=k, N_out=l_, batch=batch),
            Layer.gemm(M=m, K_red=l_, N_out=n, batch=batch))


def _moved(low) -> int:
    return sum(low.dram_read_bytes.values()) + sum(low.dram_write_bytes.values())


@pytest.mark.parametrize("dims", [(40, 12, 36, 8), (24, 30, 20, 6), (9, 7, 50, 5)])
def test_planned_tiles_fit_and_move_no_more_than_the_greedy_ones(dims):
    first, second = _chain(*dims)
    tiles = plan_chain_tiles(first, second, HW)
    planned = lower_gemm_chain(first, second, HW, tiles)
    greedy = lower_gemm_chain(first, second, HW)
    assert _moved(planned) <= _moved(greedy)
    # No fitting tiling moves less: try every DIM-multiple one the lowering accepts.
    span = [-(-x // 4) * 4 for x in dims]
    best = _moved(planned)
    for tm in range(4, span[0] + 1, 4):
        for tk in range(4, span[1] + 1, 4):
            for tl in range(4, span[2] + 1, 4):
                try:
                    low = lower_gemm_chain(first, second, HW,
                                           {"m": tm, "k": tk, "l": tl, "n": span[3]})
                except InfeasibleError:
                    continue
                assert _moved(low) >= best, (tm, tk, tl)


def test_a_chain_whose_n_tile_cannot_span_n_falls_back_to_the_lowering_choice():
    first, second = _chain(8, 8, 8, 400)      # E for all of N overflows the accumulator
    with pytest.raises(InfeasibleError, match="mnlk"):
        plan_chain_tiles(first, second, HW)
    assert plan_chain_tiles(*_chain(8, 8, 8, 14), HW)["n"] == 16     # E spans N when it fits
