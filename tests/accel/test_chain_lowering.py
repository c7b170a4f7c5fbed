"""A fused GEMM chain (accel.lower.chain) runs on accel.sim bit-exactly, C never in DRAM.

E = requant(requant(A @ B + bias_C) @ D + bias_E + residual): the trace keeps C on chip
(mvout_spad), reads only A, B, D and the epilogues' operands and writes only E. Random chains
(edges that are not DIM or tile multiples, batches, both loop orders, shared and per-batch
weights, every epilogue) are simulated in one batch per hardware shape.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from accel.arch import HardwareConfig
from accel.isa import Funct, Instruction, LocalAddr
from accel.lower import LoweredChain, lower_gemm_chain
from accel.lower.check import expected_chain_output
from accel.sim import run, run_batch
from accel.sim.decode import Op, decode
from accel.sim.timing import CCOL, TimingTable, costs
from accel.trace import Trace
from workloads.errors import ConfigError, InfeasibleError, TraceError, UnsupportedOpError
from workloads.layer import Layer

D4 = HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=4, acc_kb=2, name="d4")
D8 = HardwareConfig(pe_rows=8, pe_cols=8, sp_kb=8, acc_kb=4, name="d8")


@dataclasses.dataclass
class Case:
    low: LoweredChain
    arrays: dict

    def expected(self) -> np.ndarray:
        return expected_chain_output(self.low, self.arrays)


def chain(batch, m, k, l_, n, hw, *, tiles=None, order="mlkn", relu=(False, False),
          epilogues=((), ()), scales=(1 / 256, 1 / 300), batched=False, seed=0) -> Case:
    ops = [(*e, *(("relu",) if r else ())) for e, r in zip(epilogues, relu)]
    first = Layer.gemm(M=m, K_red=k, N_out=l_, batch=batch, name="qk", epilogue=ops[0])
    second = Layer.gemm(M=m, K_red=l_, N_out=n, batch=batch, name="av", epilogue=ops[1])
    low = lower_gemm_chain(first, second, hw, tiles, order, acc_scales=scales,
                           batched_weights=batched)
    rng = np.random.default_rng(seed)
    lay = low.layout
    arrays = {name: rng.integers(-128, 128, lay[name].shape).astype(np.int8)
              for name in ("A", "B", "D", "residual") if name in lay}
    arrays.update({name: rng.integers(-3000, 3000, lay[name].shape).astype(np.int32)
                   for name in ("bias_C", "bias_E") if name in lay})
    return Case(low, arrays)


def random_chain(rng: np.random.Generator, hw: HardwareConfig, seed: int) -> Case:
    dim = hw.pe_rows
    dims = [int(x) for x in rng.integers(1, 3 * dim, 4)]
    tiles = {d: int(rng.integers(1, 3)) * dim for d in "mkln" if rng.random() < 0.6}
    return chain(int(rng.integers(1, 4)), *dims, hw, tiles=tiles,
                 order=str(rng.choice(["mlkn", "mnlk"])),
                 relu=(bool(rng.random() < 0.5), bool(rng.random() < 0.5)),
                 epilogues=(("bias",) if rng.random() < 0.5 else (),
                            [(), ("bias",), ("add",), ("bias", "add")][rng.integers(4)])
                 if rng.random() < 0.6 else ((), ()),
                 scales=(float(rng.uniform(1e-3, 1e-2)), float(rng.uniform(1e-3, 1e-2))),
                 batched=bool(rng.random() < 0.5), seed=seed)


def simulate(cases: list[Case], hw: HardwareConfig) -> list:
    """Run the cases in one batch; E starts uninitialized, so a read before a write fails."""
    images, masks = [], []
    for case in cases:
        lay = case.low.layout
        image = lay.pack(case.arrays)
        ok = np.ones(image.size, bool)
        e = lay["E"]
        ok[e.offset_bytes:e.offset_bytes + e.nbytes] = False
        images.append(image)
        masks.append(ok)
    results = run_batch([c.low.trace for c in cases], hw, images, initialized=masks)
    for case, res in zip(cases, results):
        got, want = case.low.layout.read(res.dram, "E"), case.expected()
        assert np.array_equal(got, want), (
            f"{case.low.first} -> {case.low.second} tiles {case.low.tiles} order "
            f"{case.low.order}: E differs at {np.argwhere(got != want)[:3].tolist()}")
        assert res.cycles > 0
    return results


def tile_loads(low: LoweredChain) -> dict[str, int]:
    """DRAM bytes each input is read, from the schedule: every tile load counted."""
    batch, m, k = low.layout["A"].shape
    l_, n = low.layout["D"].shape[-2:]
    t = low.tiles
    mt, lt, nt = -(-m // t["m"]), -(-l_ // t["l"]), -(-n // t["n"])
    groups = 1 if low.order == "mlkn" else nt  # C is recomputed per n tile with "mnlk"
    one_k, one_l, one_n = t["k"] >= k, t["l"] >= l_, t["n"] >= n
    weights = batch if low.batched_weights else 1    # a resident weight tile stays
    out = {"A": batch * (1 if one_k else groups * lt) * m * k,
           "B": (weights if one_k and one_l else batch * mt * groups) * k * l_,
           "D": (weights if one_l and one_n else batch * mt) * l_ * n}
    # Epilogues: an int32 bias row per accumulator row of each C (E) tile, the residual once.
    first, second = low.epilogues
    if first.bias:
        out["bias_C"] = 4 * batch * groups * m * l_
    if second.bias:
        out["bias_E"] = 4 * batch * m * n
    if second.residual:
        out["residual"] = batch * m * n
    return out


def check_traffic(low: LoweredChain, result) -> None:
    """Moves touch only their tensors; C has no DRAM address; bytes as the schedule says."""
    lay = low.layout
    epilogue = {"bias_C", "bias_E", "residual"} & {t.name for t in lay.tensors}
    home = {"mvin": {"A"}, "mvin2": {"B"}, "mvin3": {"D", *epilogue}, "mvout": {"E"}}
    spans = {t.name: (t.offset_bytes, t.offset_bytes + t.nbytes) for t in lay.tensors}
    for ins, access in zip(low.trace, low.trace.accesses(low.params)):
        dram = [r for r in (*access.reads, *access.writes) if r.space == "dram"]
        if ins.mnemonic not in home:
            assert not dram, f"{ins} touches DRAM"
            continue
        assert dram and any(all(spans[x][0] <= r.start and r.stop <= spans[x][1] for r in dram)
                            for x in home[ins.mnemonic]), f"{ins} leaves {home[ins.mnemonic]}"
    assert {t.name for t in lay.tensors} == {"zeros", "A", "B", "D", "E", *epilogue}
    counts = low.instructions
    assert counts["mvout_spad"] > 0
    batch, m, _ = lay["A"].shape
    n = lay["E"].shape[-1]
    assert low.dram_read_bytes == tile_loads(low)
    assert low.dram_write_bytes == {"E": batch * m * n}
    # The simulator's own decoding agrees: bytes its mvins and mvouts move.
    dec = result.decoded
    moved = dec.column("rows") * dec.column("cols") * dec.column("elem_bytes")
    op = dec.column("op")
    assert int(moved[op == Op.MVIN].sum()) == sum(low.dram_read_bytes.values())
    assert int(moved[op == Op.MVOUT].sum()) == sum(low.dram_write_bytes.values())
    assert int(moved[op == Op.MVOUT_SPAD].sum()) == 0


FIXED = [  # tiles in DIM units
    dict(batch=1, m=8, k=8, l_=8, n=8),
    dict(batch=2, m=10, k=9, l_=7, n=6, tiles={"m": 1, "k": 1, "l": 1, "n": 1},
         relu=(True, False)),
    dict(batch=3, m=6, k=13, l_=5, n=11, tiles={"l": 1, "n": 1}, order="mnlk", batched=True,
         relu=(False, True)),
    dict(batch=1, m=5, k=3, l_=2, n=9, order="mnlk", scales=(0.05, 0.02)),
    dict(batch=2, m=9, k=7, l_=10, n=5, tiles={"m": 1, "l": 1}, relu=(True, True),
         epilogues=(("bias",), ("bias", "add"))),
    dict(batch=2, m=6, k=5, l_=9, n=11, tiles={"n": 1}, order="mnlk", batched=True,
         epilogues=(("bias",), ("add",))),
    dict(batch=1, m=7, k=6, l_=10, n=5, tiles={"l": 1}, scales=(1e-4, 1 / 300),
         epilogues=(("bias", "gelu"), ("bias", "add"))),   # the FFN block's I-GELU
    # Attention: the mask as qk's bias, the normalizer's softmax over whole rows of C (L not
    # a DIM multiple, m tiles), then av with a bias and residual; and a batched one alone.
    dict(batch=2, m=9, k=7, l_=10, n=5, tiles={"m": 1}, scales=(1.0, 1 / 60),
         epilogues=(("bias", "softmax"), ("bias", "add"))),
    dict(batch=3, m=5, k=4, l_=19, n=6, order="mnlk", batched=True, scales=(1.0, 1 / 60),
         epilogues=(("softmax",), ())),
]


@pytest.mark.parametrize("hw", [D4, D8], ids=lambda hw: hw.name)
def test_chains_match_numpy_and_keep_c_on_chip(hw):
    rng = np.random.default_rng(hw.pe_rows)
    dim = hw.pe_rows
    cases = [chain(hw=hw, seed=i, **{**kw, "tiles": {d: v * dim for d, v in
                                                     kw.get("tiles", {}).items()}})
             for i, kw in enumerate(FIXED)]
    cases += [random_chain(rng, hw, seed=100 + i) for i in range(10 - len(cases))]
    results = simulate(cases, hw)
    for case, res in zip(cases, results):
        check_traffic(case.low, res)


def test_dram_reads_follow_the_tile_schedule():
    whole = chain(2, 12, 10, 9, 7, D4).low
    assert whole.tiles == {"m": 12, "k": 12, "l": 12, "n": 8}
    # Single tiles: the shared B and D are loaded once for both batches.
    assert whole.dram_read_bytes == {"A": 2 * 12 * 10, "B": 10 * 9, "D": 9 * 7}
    per_batch = chain(2, 12, 10, 9, 7, D4, tiles={"m": 4}, batched=True).low
    assert per_batch.dram_read_bytes == {"A": 2 * 12 * 10, "B": 2 * 10 * 9, "D": 2 * 9 * 7}
    tiled = chain(2, 12, 10, 9, 7, D4, tiles={"m": 4, "k": 4, "l": 4, "n": 4},
                  order="mnlk").low
    assert tiled.dram_read_bytes == tile_loads(tiled)
    assert tiled.dram_read_bytes["A"] == 2 * 2 * 3 * 12 * 10  # 2 n tiles x 3 l tiles
    kept = chain(2, 12, 10, 9, 7, D4, tiles={"m": 4, "l": 4, "n": 4}, order="mnlk").low
    assert kept.dram_read_bytes["A"] == 2 * 12 * 10  # one k tile: A loaded once per m tile


def test_tiles_are_chosen_to_fit_and_too_large_tiles_fail():
    small = HardwareConfig(pe_rows=4, pe_cols=4, sp_kb=0.5, acc_kb=0.25, name="tiny")
    case = chain(2, 22, 19, 21, 10, small)
    low = case.low
    dim = 4
    sp = sum(r.rows for r in low.alloc.regions if r.space == "sp")
    acc = sum(r.rows for r in low.alloc.regions if r.space == "acc")
    assert sp <= low.params.sp_rows and acc <= low.params.acc_rows
    assert all(v % dim == 0 for v in low.tiles.values())
    assert low.tiles["l"] < 24 and low.tiles["m"] < 24  # had to shrink to fit
    check_traffic(low, simulate([case], small)[0])
    with pytest.raises(InfeasibleError, match=r"'qk' -> 'av'.*accumulator"):
        chain(1, 40, 40, 40, 12, small, tiles={"m": 40, "l": 40})
    with pytest.raises(InfeasibleError, match="mnlk"):
        chain(1, 4, 4, 4, 4000, small)  # E for all of N cannot be resident
    with pytest.raises(ConfigError, match="multiple of DIM"):
        chain(1, 8, 8, 8, 8, D4, tiles={"m": 6})
    with pytest.raises(ConfigError, match="unknown dimension"):
        chain(1, 8, 8, 8, 8, D4, tiles={"p": 4})
    with pytest.raises(ConfigError, match="order"):
        chain(1, 8, 8, 8, 8, D4, order="klmn")


def test_layers_that_do_not_chain_are_refused():
    a = Layer.gemm(M=8, K_red=8, N_out=6, name="first")
    with pytest.raises(ConfigError, match="K_red=6"):
        lower_gemm_chain(a, Layer.gemm(M=8, K_red=5, N_out=4), D4)
    with pytest.raises(ConfigError, match="batch"):
        lower_gemm_chain(a, Layer.gemm(M=8, K_red=6, N_out=4, batch=2), D4)
    with pytest.raises(UnsupportedOpError, match="'first'.*residual"):
        lower_gemm_chain(Layer.gemm(M=8, K_red=8, N_out=6, name="first", epilogue=("add",)),
                         Layer.gemm(M=8, K_red=6, N_out=4), D4)
    with pytest.raises(UnsupportedOpError, match="softmax"):
        lower_gemm_chain(a, Layer.gemm(M=8, K_red=6, N_out=4, epilogue=("softmax",)), D4)
    # The softmax reads raw rows (nothing but a bias before it), needs them whole, and shares
    # its constant registers with I-GELU.
    gemm = Layer.gemm(M=8, K_red=6, N_out=4)
    for ops, match in ((("relu", "softmax"), "only a bias"), (("softmax", "bias"), "bias")):
        with pytest.raises(UnsupportedOpError, match=match):
            lower_gemm_chain(dataclasses.replace(a, epilogue=ops), gemm, D4)
    scores = dataclasses.replace(a, epilogue=("softmax",))
    with pytest.raises(InfeasibleError, match="whole rows"):
        lower_gemm_chain(scores, gemm, D4, tiles={"l": 4})
    with pytest.raises(UnsupportedOpError, match="I-GELU"):
        lower_gemm_chain(scores, dataclasses.replace(gemm, epilogue=("gelu",)), D4)
    with pytest.raises(ConfigError, match="conv2d"):
        lower_gemm_chain(Layer.conv2d(R=3, S=3, P=4, Q=4, C=8, K=6), a, D4)


def test_mvout_spad_encoding_text_and_binary_round_trip():
    ins = Instruction.mvout_spad(LocalAddr.accumulator(0x12), 0x345, 3, 7)
    word, rs1, rs2 = ins.encode()
    assert (ins.funct, word >> 25, word & 0x7F, word >> 12 & 7) == (64, 64, 0x7B, 3)
    assert Funct.MVOUT_SPAD == 64 and not 0 <= Funct.MVOUT_SPAD <= 25  # outside Gemmini's
    assert rs1 == 1 << 31 | 0x12
    assert rs2 == 3 << 48 | 7 << 32 | 0x345
    assert ins.to_text() == "mvout_spad src=acc:0x0012 dst=0x0345 rows=3 cols=7"
    assert Instruction.decode(word, rs1, rs2) == ins
    assert Instruction.from_text(ins.to_text()) == ins
    assert ins["src"].acc and not ins["dst"].acc
    trace = chain(2, 6, 5, 7, 3, D4, tiles={"l": 4}).low.trace
    assert Trace.from_text(trace.to_text()) == trace
    assert Trace.from_bytes(trace.to_bytes()) == trace
    with pytest.raises(TraceError) as err:
        Instruction(Funct.MVOUT_SPAD, 1 << 32, 0)  # reserved rs1 bit
    assert err.value.field == "rs1"


@pytest.mark.parametrize("src, dst, rows, field", [
    (LocalAddr.sp(0), LocalAddr.sp(0), 4, "src"),
    (LocalAddr.accumulator(0, full=True), LocalAddr.sp(0), 4, "src"),
    (LocalAddr.accumulator(0), LocalAddr.accumulator(0), 4, "dst"),
    (LocalAddr.accumulator(0, norm=2), LocalAddr.sp(0), 1, "src"),   # layernorm's mean
    (LocalAddr.accumulator(0, norm=5), LocalAddr.sp(0), 4, "rows"),  # a stats pass: one row
])
def test_bad_mvout_spad_operands_are_refused(src, dst, rows, field):
    trace = Trace([Instruction.mvout_spad(src, dst, rows, 4)])
    with pytest.raises(TraceError) as err:
        trace.validate(chain(1, 4, 4, 4, 4, D4).low.params)
    assert err.value.field == field
    with pytest.raises(TraceError) as err:
        decode(trace, chain(1, 4, 4, 4, 4, D4).low.params, None)
    assert err.value.field == field


def test_mvout_spad_timing_and_unwritten_source():
    params = chain(1, 4, 4, 4, 4, D4).low.params
    trace = Trace([Instruction.config_st(4, acc_scale=0.5),
                   Instruction.mvout_spad(LocalAddr.accumulator(8), LocalAddr.sp(4), 3, 4)])
    dec = decode(trace, params, None)
    table = TimingTable()
    cost = costs(dec, table, D4)[1]
    assert cost[CCOL["occ"]] == 3 and cost[CCOL["dma"]] == 0
    assert cost[CCOL["post"]] == table.mvout_read_cycles + table.spad_write_cycles
    with pytest.raises(TraceError) as err:
        run(trace, D4, np.zeros(64, np.uint8))
    assert err.value.index == 1 and err.value.field == "src"


def test_a_softmax_trace_validates_and_its_statistics_passes_write_nothing():
    """Trace.validate takes the normalizer's commands on moves out of the accumulator (one row
    for a statistics pass) and `Trace.accesses` has those passes write only the normalizer's
    state, which orders them; mvin and scratchpad moves take no command."""
    first = Layer.gemm(M=5, K_red=4, N_out=7, epilogue=("softmax",))
    low = lower_gemm_chain(first, Layer.gemm(M=5, K_red=7, N_out=3), D4)
    low.trace.validate(low.params)
    spad = [(ins, acc) for ins, acc in zip(low.trace, low.trace.accesses(low.params))
            if ins.mnemonic == "mvout_spad"]
    stats = [(ins, acc) for ins, acc in spad if ins["src"].norm]
    assert len(stats) == 2 * len(spad) // 3 and {ins["src"].norm for ins, _ in stats} == {5, 6, 7}
    assert all([r.space for r in acc.writes] == ["norm"] for _, acc in stats)
    params = low.params
    for ins, field in ((Instruction.mvout(0x100, LocalAddr.accumulator(0, norm=6), 2, 4), "rows"),
                       (Instruction.mvout(0x100, LocalAddr(0, norm=5), 1, 4), "sp"),
                       (Instruction.mvin(0x100, LocalAddr.accumulator(0, norm=5), 1, 4), "sp")):
        with pytest.raises(TraceError) as err:
            Trace([ins]).validate(params)
        assert err.value.field == field
