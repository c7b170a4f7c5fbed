"""`baco.yardsticks`: plain, instruction-aware and simulated figures of a design, and its area."""

import dataclasses
import json
import math

import numpy as np
import pytest

from accel.arch import HardwareConfig, level_arrays
from accel.buildable import unbuildable_reason
from accel.design import design_of
from accel.lower import lower, split_epilogue
from accel.lower.check import expected_output, random_inputs
from accel.mapping import Mapping
from accel.sim import run
from baco import yardsticks as ys
from baco.errors import ConfigError, InfeasibleError, ProgramTooLongError
from baco.rounding import common_score
from perfmodels.analytic import exact
from workloads.layer import Layer

HW = HardwareConfig(pe_rows=8, pe_cols=8, sp_kb=16, acc_kb=8, name="small")
LAYERS = (
    Layer.conv2d(R=3, S=3, P=6, Q=5, C=5, K=9, Hstride=2, Wstride=1, pads=(1, 1, 1, 1),
                 epilogue=("bias", "relu"), name="conv"),
    Layer.gemm(M=13, K_red=20, N_out=11, epilogue=("add", "add"), name="gemm"),
)
COUNTS = (3, 2)
DRAM = 3


def _design(layers=LAYERS, hw=HW, seed=0):
    rng = np.random.default_rng(seed)
    return design_of(hw, [Mapping.random(layer, hw, rng) for layer in layers])


@pytest.fixture(scope="module")
def scored():
    design = _design()
    return design, ys.yardsticks(LAYERS, COUNTS, design, cache=ys.SimCache())


def test_three_yardsticks_present_finite_and_json(scored):
    design, y = scored
    doc = json.loads(json.dumps(y.to_dict()))
    for name in ys.YARDSTICKS:
        entry = doc[name]
        for key in ("edp", "latency_cycles", "energy_pj", "area_mm2"):
            assert math.isfinite(entry[key]) and entry[key] > 0, (name, key)
        assert entry["edp"] == pytest.approx(entry["latency_cycles"] * entry["energy_pj"],
                                             rel=1e-12)
    assert doc["unavailable"] == {} and len(doc["layers"]) == len(LAYERS)
    plain = common_score(LAYERS, COUNTS, design, False)
    aware = common_score(LAYERS, COUNTS, design, True)
    assert y.plain.edp == plain.edp and y.instruction_aware.edp == aware.edp
    assert y.instruction_aware.hardware == aware.design.hw
    assert y["simulated"] is y.simulated


def test_simulated_latency_is_the_count_weighted_functional_cycles(scored):
    """The timing-only run gives the cycles of a full functional run (which also produces the
    right output), and the network's latency weights them by the counts."""
    design, y = scored
    hw = y.simulated.hardware
    total = 0
    for i, (layer, mapping) in enumerate(zip(LAYERS, design.mappings())):
        low = lower(layer, mapping, hw, epilogue=split_epilogue(layer.epilogue)[0])
        arrays, image, initialized = random_inputs(low, np.random.default_rng(i))
        res = run(low.trace, hw, image, initialized=initialized)
        assert np.array_equal(low.layout.read(res.dram, "output"), expected_output(low, arrays))
        assert y.layers[i].cycles == res.cycles
        assert y.layers[i].instructions == len(low.trace)
        total += COUNTS[i] * res.cycles
    assert y.simulated.latency_cycles == total
    assert y.simulated.energy_pj == pytest.approx(
        sum(c * x.energy_pj for c, x in zip(COUNTS, y.layers)), rel=1e-12)
    assert y.layers[1].host_ops == ("add",)


def test_dram_energy_follows_the_lowering_bytes(scored):
    design, y = scored
    lv = level_arrays(HW.template_spec, y.simulated.hardware.to_params(), np)
    epa, idle = lv.energy_pj, lv.static_pj_per_cycle
    for layer, mapping, sim in zip(LAYERS, design.mappings(), y.layers):
        low = lower(layer, mapping, y.simulated.hardware,
                    epilogue=split_epilogue(layer.epilogue)[0])
        assert sim.dram_read_bytes == low.stats.dram_read_bytes > 0
        assert sim.dram_write_bytes == low.stats.dram_write_bytes > 0
        assert sim.energy_pj == pytest.approx(sum(sim.level_pj) + sim.mac_pj + sim.pe_idle_pj,
                                              rel=1e-6)
    # An int8-only program (no bias, no partial sums): one DRAM word per byte moved, padded
    # channels not moved (4 of the 8 columns and rows used).
    layer = Layer.gemm(M=16, K_red=12, N_out=12, epilogue=("relu",))
    mapping = Mapping.from_timeloop("L3[WIO] K3 - L2[WI] C3 K4X - L1[O] C4X - L0[W] P16",
                                    stages=1)
    stick, (sim,) = ys.simulate_design([layer], [1], design_of(HW, [mapping]),
                                       cache=ys.SimCache())
    low = lower(layer, mapping, HW, epilogue=("relu",))
    assert low.stats.partial_spills == 0
    words = low.stats.dram_read_bytes + low.stats.dram_write_bytes
    # the words moved, and the interface's idle energy over the simulated cycles
    assert sim.level_pj[DRAM] == pytest.approx(
        words * float(epa[DRAM]) + sim.cycles * float(idle[DRAM]), rel=1e-6)
    assert sim.macs == layer.macs and sim.array_macs == low.stats.array_macs


def test_cache_returns_identical_results_without_simulating(monkeypatch):
    cache = ys.SimCache()
    design = _design(seed=1)
    first = ys.yardsticks(LAYERS, COUNTS, design, cache=cache)
    assert (cache.misses, cache.hits, len(cache)) == (2, 0, 2)

    def no_simulation(*args, **kwargs):
        raise AssertionError("simulated again")

    monkeypatch.setattr(ys, "run_batch", no_simulation)
    monkeypatch.setattr(ys, "lower", no_simulation)
    second = ys.yardsticks(LAYERS, COUNTS, design, cache=cache)
    assert second.to_dict() == first.to_dict()
    assert (cache.misses, cache.hits) == (2, 2)
    # The epilogue is not part of Layer equality, but it changes the program: another key.
    bare = dataclasses.replace(LAYERS[0], epilogue=())
    assert bare == LAYERS[0]
    mapping = design.mappings()[0]
    assert ys.cache_key(bare, mapping, HW) != ys.cache_key(LAYERS[0], mapping, HW)
    with pytest.raises(AssertionError, match="simulated again"):
        ys.yardsticks((bare, LAYERS[1]), COUNTS, design, cache=cache)


@pytest.fixture
def store(tmp_path):
    from baco import sim_cache
    where = sim_cache.enable_store({"BACO_SIM_CACHE": str(tmp_path / "sim")})
    yield where
    sim_cache.disable_store()


def test_the_store_serves_a_later_process_without_simulating(store, monkeypatch):
    """What one process simulated, another (a fresh `SimCache`) reads from the store: the same
    figures, no lowering, no simulation; a key that differs only where equality does not
    look (a layer's name, a hardware's name) is the same entry."""
    design = _design(seed=3)
    first = ys.yardsticks(LAYERS, COUNTS, design, cache=ys.SimCache())
    assert len(list(store.rglob("*.pkl"))) == 2

    def no_simulation(*args, **kwargs):
        raise AssertionError("simulated again")

    monkeypatch.setattr(ys, "run_batch", no_simulation)
    monkeypatch.setattr(ys, "lower", no_simulation)
    later = ys.SimCache()
    renamed = tuple(dataclasses.replace(x, name=f"other{i}") for i, x in enumerate(LAYERS))
    hw = dataclasses.replace(design.hw, name="someone else's")
    second = ys.yardsticks(renamed, COUNTS, design_of(hw, design.mappings()), cache=later)
    assert (later.misses, later.hits) == (0, 2)
    figures = [{k: v for k, v in y.simulated.to_dict().items() if k != "hardware"}
               for y in (first, second)]
    assert figures[0] == figures[1] and [x.cycles for x in second.layers] == [
        x.cycles for x in first.layers]
    # another epilogue is another program: not in the store
    bare = dataclasses.replace(LAYERS[0], epilogue=())
    with pytest.raises(AssertionError, match="simulated again"):
        ys.yardsticks((bare, LAYERS[1]), COUNTS, design, cache=ys.SimCache())


def test_a_stored_layer_longer_than_the_cap_is_not_taken(store):
    """The judge simulates longer programs than the search loop's cap allows; what it stored
    is no way around the cap: the layer is lowered again and refused as it would have been."""
    design = _design(seed=5)
    ys.simulate_design(LAYERS, COUNTS, design, cache=ys.SimCache())
    _, (first, _) = ys.simulate_design(LAYERS, COUNTS, design, cache=ys.SimCache())
    with pytest.raises(ProgramTooLongError, match="layer 0"):
        ys.simulate_design(LAYERS, COUNTS, design, cache=ys.SimCache(),
                           max_instructions=first.instructions // 2)


def test_the_store_is_keyed_by_the_code_and_skips_what_it_cannot_read(store):
    from baco import sim_cache
    design = _design(seed=4)
    key = ys.cache_key(LAYERS[0], design.mappings()[0], design.hw)
    other = ys.cache_key(LAYERS[0], design.mappings()[0],
                         dataclasses.replace(design.hw, sp_kb=design.hw.sp_kb * 2))
    entries = sim_cache.SimStore(store)
    assert entries.folder.name == sim_cache.code_fingerprint()
    entries.put(key, "counts")
    assert entries.get(key) == "counts" and entries.get(other) is None
    (path,) = entries.folder.rglob("*.pkl")
    path.write_bytes(b"not a pickle")                 # torn or foreign: a miss, no error
    assert entries.get(key) is None
    assert sim_cache.store_folder({"BACO_SIM_CACHE": "0"}) is None


def test_an_unwritable_store_folder_leaves_the_store_off(tmp_path, capsys):
    from baco import sim_cache
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert sim_cache.enable_store({"BACO_SIM_CACHE": str(blocked / "sim")}) is None
    assert "simulation cache off" in capsys.readouterr().err
    assert sim_cache._STORE is None


def test_epilogue_changes_the_simulated_figures():
    design = _design(layers=LAYERS[:1])
    bare = dataclasses.replace(LAYERS[0], epilogue=())
    with_bias, _ = ys.simulate_design(LAYERS[:1], [1], design, cache=ys.SimCache())
    without, _ = ys.simulate_design([bare], [1], design, cache=ys.SimCache())
    assert with_bias.energy_pj > without.energy_pj


def test_area_is_the_analytic_models(scored):
    design, y = scored
    for layer, mapping in zip(LAYERS, design.mappings()):
        assert y.area_mm2 == pytest.approx(float(exact(layer, HW, mapping).area_mm2), rel=1e-6)
    assert y.plain.area_mm2 == y.area_mm2
    bigger = dataclasses.replace(HW, sp_kb=64)
    assert ys.hardware_area_mm2(bigger) > y.area_mm2


def test_buffers_grow_to_hold_the_lowered_program():
    """A mapping the model fits in 1 KiB whose DIM-wide rows need more: the simulated
    hardware is the design's with the scratchpad grown to the next size Gemmini's generator
    builds that holds it (not in sram_step_kb steps: the template has the generator's rules)."""
    whole_layer_at_scratchpad = Mapping.from_timeloop(
        "L3[WIO] N1 - L2[WI] R3 S3 P6 Q5 C5 K9 - L1[O] N1 - L0[W] N1", stages=1)
    tiny = HardwareConfig(pe_rows=8, pe_cols=8, sp_kb=1, acc_kb=1)
    layer = LAYERS[0]
    with pytest.raises(InfeasibleError, match="the scratchpad has 128 rows"):
        lower(layer, whole_layer_at_scratchpad, tiny, epilogue=("bias", "relu"))
    stick, (sim,) = ys.simulate_design([layer], [1], design_of(tiny, [whole_layer_at_scratchpad]),
                                       sram_step_kb=0.5, cache=ys.SimCache())
    assert stick.grown and stick.hardware.acc_kb == tiny.acc_kb
    assert stick.hardware.sp_kb > tiny.sp_kb and unbuildable_reason(stick.hardware) is None
    low = lower(layer, whole_layer_at_scratchpad, stick.hardware, epilogue=("bias", "relu"))
    smaller = dataclasses.replace(stick.hardware, sp_kb=stick.hardware.sp_kb / 2)
    with pytest.raises(InfeasibleError):
        lower(layer, whole_layer_at_scratchpad, smaller, epilogue=("bias", "relu"))
    assert sim.cycles == run(low.trace, stick.hardware, functional=False).cycles


def test_a_layer_that_cannot_be_lowered_is_named():
    too_wide = Mapping.from_timeloop(
        "L3[WIO] C20 - L2[WI] K11X - L1[O] N1 - L0[W] P13", stages=1)   # 11 > 8 PE columns
    design = design_of(HW, [_design().mappings()[0], too_wide])
    with pytest.raises(InfeasibleError, match=r"layer 1 \(gemm\)"):
        ys.simulate_design(LAYERS, COUNTS, design, cache=ys.SimCache())


def test_templates_without_a_simulator_say_why():
    eyeriss = HardwareConfig.preset("eyeriss")
    why = ys.simulation_unsupported(eyeriss)
    assert why is not None and "Gemmini" in why
    with pytest.raises(ConfigError, match="simulated yardstick"):
        ys.simulate_design(LAYERS[:1], [1], dataclasses.replace(_design(LAYERS[:1]),
                                                                hw=eyeriss))
    assert ys.simulation_unsupported(HW) is None
    # The yardsticks it has are still given; the others are None, with the reason.
    layer = LAYERS[1]
    mapping = Mapping.random(layer, eyeriss, np.random.default_rng(0))
    y = ys.yardsticks([layer], [2], design_of(eyeriss, [mapping]), cache=ys.SimCache())
    doc = json.loads(json.dumps(y.to_dict()))
    assert doc["plain"]["edp"] > 0 and doc["simulated"] is None
    assert doc["instruction_aware"] is None
    assert "Gemmini" in doc["unavailable"]["simulated"] and doc["layers"] == []


def test_nvdla_is_another_accelerator_not_simulated_as_gemmini():
    assert "nvdla" in ys.simulation_unsupported(HardwareConfig.preset("nvdla_small"))


def test_a_program_past_the_instruction_cap_is_not_built_and_named():
    layer = Layer.conv2d(R=3, S=3, P=32, Q=32, C=8, K=8, name="big")
    tiny_tiles = Mapping.from_timeloop(
        "L3[WIO] P32 Q32 S3 R3 - L2[WI] K8X - L1[O] C8X - L0[W] N1", stages=1)
    design = design_of(HW, [tiny_tiles])
    with pytest.raises(ProgramTooLongError, match=r"layer 0 \(big\).*more than 1000"):
        ys.simulate_design([layer], [1], design, cache=ys.SimCache(), max_instructions=1000)
    with pytest.raises(ProgramTooLongError, match="passes 20000 instructions"):
        lower(layer, tiny_tiles, HW, max_instructions=20_000)     # 9216 steps, more ops
    full = lower(layer, tiny_tiles, HW, max_instructions=None)
    assert len(full.trace) > 20_000
    y = ys.yardsticks([layer], [1], design, cache=ys.SimCache(), max_instructions=1000)
    assert y.simulated is None and "layer 0 (big)" in y.unavailable["simulated"]
    assert y.plain is not None and y.instruction_aware is not None


def test_batched_runs_agree_with_one_by_one(monkeypatch):
    """Eight traces of similar length go through one vmapped run; figures are unchanged."""
    layers = [Layer.gemm(M=m, K_red=16, N_out=16, epilogue=("relu",)) for m in range(9, 17)]
    mappings = [Mapping.from_timeloop(f"L3[WIO] K2 - L2[WI] C2 K8X - L1[O] C8X - L0[W] P{m}",
                                      stages=2) for m in range(9, 17)]
    design = design_of(HW, mappings)
    counts = list(range(1, 9))
    single, single_layers = ys.simulate_design(layers, counts, design, cache=ys.SimCache(),
                                               batch=1)
    calls = []
    real = ys.run_batch

    def spy(traces, *args, **kwargs):
        calls.append(len(traces))
        return real(traces, *args, **kwargs)

    monkeypatch.setattr(ys, "run_batch", spy)
    batched, batched_layers = ys.simulate_design(layers, counts, design, cache=ys.SimCache(),
                                                 batch=8)
    assert calls == [8]
    assert batched == single and batched_layers == single_layers


def test_a_fused_chain_is_judged_from_its_one_trace():
    """`simulate_chain`: a GEMM chain's DRAM energy is its trace's bytes (int8: a word each) at
    the DRAM's energy per word, and the interface's idle energy, with C never moved; the same
    two layers unfused (each lowered alone, C through DRAM) move more and spend more there."""
    from accel.lower import lower_gemm_chain
    from baco.search.gemmini_tiler import gemmini_mapping

    first = Layer.gemm(M=24, K_red=20, N_out=40, name="qk")
    second = Layer.gemm(M=24, K_red=40, N_out=16, name="av")
    low = lower_gemm_chain(first, second, HW)
    fused = ys.simulate_chain(low)
    moved = sum(low.dram_read_bytes.values()) + low.dram_write_bytes["E"]
    assert (fused.dram_read_bytes, fused.dram_write_bytes) == (
        sum(low.dram_read_bytes.values()), low.dram_write_bytes["E"])
    lv = level_arrays(HW.template_spec, HW.to_params(), np)
    dram_pj, idle = float(lv.energy_pj[DRAM]), float(lv.static_pj_per_cycle[DRAM])
    assert fused.level_pj[DRAM] == pytest.approx(dram_pj * moved + idle * fused.cycles)
    assert fused.macs == first.macs + second.macs and fused.cycles > 0
    design = design_of(HW, [gemmini_mapping(x, HW)[0] for x in (first, second)])
    _, apart = ys.simulate_design([first, second], [1, 1], design, cache=ys.SimCache())
    assert sum(x.dram_read_bytes + x.dram_write_bytes for x in apart) > moved
    assert sum(x.level_pj[DRAM] for x in apart) > fused.level_pj[DRAM]


def test_a_layer_with_gelu_runs_it_on_chip_and_its_design_pays_for_the_unit():
    """GELU is Gemmini's I-GELU on the mvout path: the simulated layer applies it (bit-exact,
    as `baco simulate --check` checks), pipelined with the scaling, and every yardstick's area,
    like the search's area budget (`Rounder.area_mm2`), includes the template's I-GELU unit."""
    from accel.arch import unit_area_mm2
    from baco.rounding import Rounder

    gelu = Layer.gemm(M=16, K_red=16, N_out=16, epilogue=("bias", "gelu"))
    plain = dataclasses.replace(gelu, epilogue=("bias",))
    mapping = Mapping.from_timeloop("L3[WIO] C2 K2 - L2[WI] K8X - L1[O] C8X - L0[W] P16")
    judged = {x.epilogue: ys.yardsticks([x], [1], design_of(HW, [mapping])) for x in (gelu, plain)}
    unit = unit_area_mm2(HW, "igelu_unit")
    assert unit == pytest.approx(0.006 * HW.pe_cols)
    with_gelu, without = judged[gelu.epilogue], judged[plain.epilogue]
    assert with_gelu.area_mm2 == pytest.approx(without.area_mm2 + unit)
    assert with_gelu.simulated.area_mm2 == pytest.approx(without.simulated.area_mm2 + unit)
    extra = with_gelu.simulated.latency_cycles - without.simulated.latency_cycles
    assert 0 <= extra <= 2       # the config_norm that sets its constants
    assert Rounder(HW, [gelu]).area_mm2(HW) == pytest.approx(Rounder(HW, [plain]).area_mm2(HW)
                                                             + unit)
    low = lower(gelu, mapping, HW, acc_scale=1e-4)
    assert low.stats.instructions["config_norm"] == 1
    arrays, image, initialized = random_inputs(low, np.random.default_rng(0))
    out = run(low.trace, HW, image, initialized=initialized)
    got = low.layout.read(out.dram, "output")
    assert np.array_equal(got, expected_output(low, arrays))


def _assert_events_sum(stick, template, rel=1e-6):
    """`energy_pj_by_event` names the template's event classes and sums to `energy_pj` (to
    the float32 models' rounding)."""
    from perfmodels.energy import event_names

    assert tuple(stick.energy_pj_by_event) == event_names(template)
    assert math.fsum(stick.energy_pj_by_event.values()) == pytest.approx(stick.energy_pj,
                                                                         rel=rel)


def test_every_yardstick_splits_its_energy_by_event(scored):
    design, y = scored
    lv = level_arrays(HW.template_spec, HW.to_params(), np)
    useful = sum(c * x.macs for x, c in zip(LAYERS, COUNTS)) * float(lv.mac_energy_pj)
    for name in ys.YARDSTICKS:
        stick = y[name]
        _assert_events_sum(stick, HW.template_spec)
        events = stick.energy_pj_by_event
        assert set(events) == {"mac_useful", "mac_padded", "pe_idle", "registers",
                               "accumulator", "accumulator_idle", "scratchpad",
                               "scratchpad_idle", "dram", "dram_idle"}
        assert events["mac_useful"] == pytest.approx(useful, rel=1e-12)
        assert all(v >= 0 for v in events.values()), (name, events)
        assert y.to_dict()[name]["energy_pj_by_event"] == events
    for idle in ("dram_idle", "scratchpad_idle", "accumulator_idle", "pe_idle"):
        assert y.plain.energy_pj_by_event[idle] == 0.0       # the plain model has none
        assert y.simulated.energy_pj_by_event[idle] > 0
        assert y.instruction_aware.energy_pj_by_event[idle] > 0
    for row in y.layers:
        assert math.fsum(row.energy_pj_by_event.values()) == pytest.approx(row.energy_pj,
                                                                           rel=1e-6)
        assert row.to_dict()["energy_pj_by_event"] == row.energy_pj_by_event
    # The C=5 conv on an 8x8 array pads its rows.
    assert y.simulated.energy_pj_by_event["mac_padded"] > 0
    assert y.instruction_aware.energy_pj_by_event["mac_padded"] > 0


def test_mac_padded_is_what_the_array_spends_beyond_the_layer():
    """On a 16x16 array, a C=3 conv leaves rows idle (``mac_padded`` > 0, each at the
    template's padded-MAC energy); a 16x16x16 GEMM fills it exactly (``mac_padded`` 0)."""
    hw = HardwareConfig(pe_rows=16, pe_cols=16, sp_kb=64, acc_kb=32, name="sixteen")
    lv = level_arrays(hw.template_spec, hw.to_params(), np)
    conv = Layer.conv2d(R=3, S=3, P=8, Q=8, C=3, K=16, pads=(1, 1, 1, 1), name="rgb")
    gemm = Layer.gemm(M=16, K_red=16, N_out=16, name="full")
    maps = [Mapping.from_timeloop("L3[WIO] R3 S3 - L2[WI] K16X - L1[O] C3X - L0[W] P8 Q8",
                                  stages=1),
            Mapping.from_timeloop("L3[WIO] - L2[WI] K16X - L1[O] C16X - L0[W] P16",
                                  stages=1)]
    stick, (rgb, full) = ys.simulate_design([conv, gemm], [2, 1], design_of(hw, maps),
                                            cache=ys.SimCache())
    assert rgb.array_macs > rgb.macs and full.array_macs == full.macs
    e = float(lv.mac_padded_energy_pj)
    assert 0.0 < e < float(lv.mac_energy_pj)
    assert rgb.energy_pj_by_event["mac_padded"] == pytest.approx(
        (rgb.array_macs - rgb.macs) * e, rel=1e-6)
    assert rgb.energy_pj_by_event["mac_useful"] == pytest.approx(
        rgb.macs * float(lv.mac_energy_pj), rel=1e-6)
    assert full.energy_pj_by_event["mac_padded"] == 0.0
    assert stick.energy_pj_by_event["mac_padded"] == pytest.approx(
        2 * rgb.energy_pj_by_event["mac_padded"], rel=1e-12)
    _assert_events_sum(stick, hw.template_spec)


def test_fused_chains_and_other_templates_split_their_energy_by_event():
    from baco.fusion import fusion_groups
    from baco.search.gemmini_tiler import gemmini_mapping
    from workloads import suite

    hw = HardwareConfig.preset("gemmini_default")
    net = [x for x in suite("bmm_chain") if x.name == "G10"][0]
    groups, _ = fusion_groups(net)
    layers, counts = list(net.layers), list(net.counts)
    design = design_of(hw, [gemmini_mapping(x, hw)[0] for x in layers])
    y = ys.yardsticks(layers, counts, design, fused=groups, cache=ys.SimCache())
    assert y.layers[-1].count == 1.0 and y.layers[-1].energy_pj_by_event
    for name in ys.YARDSTICKS:
        _assert_events_sum(y[name], hw.template_spec)
    for preset in ("eyeriss", "nvdla_small"):
        other = HardwareConfig.preset(preset)
        mapping = Mapping.random(LAYERS[1], other, np.random.default_rng(0))
        y = ys.yardsticks([LAYERS[1]], [2], design_of(other, [mapping]), cache=ys.SimCache())
        for name in ys.YARDSTICKS:
            if y[name] is not None:
                _assert_events_sum(y[name], other.template_spec)
