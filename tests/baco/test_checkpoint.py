"""A checkpoint holds a search's state as it is: the same tree comes back, type for type and
bit for bit; what it cannot hold, or a file it cannot read, is refused by name."""

import json
import math

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from accel.arch import HardwareConfig
from accel.design import Design
from baco.checkpoint import load_checkpoint, save_checkpoint
from baco.codesign_state import LedgerState, SlotsState
from baco.errors import ConfigError
from baco.importance import SchedulerState


def test_a_search_state_comes_back_type_for_type_and_bit_for_bit(tmp_path):
    hw = HardwareConfig.preset("gemmini_default")
    design = Design(hw=hw, temporal=np.ones((2, 4, 7), np.int64),
                    spatial=np.full((2, 4, 7), 2, np.int64),
                    order=np.tile(np.arange(7), (2, 4, 1)), stages=np.ones((2, 4), np.int64))
    params = {"w": jnp.asarray([0.1, -2.5e-8, 3.0], jnp.float32)}
    adam = optax.adam(1e-3).init(params)
    tree = {
        "ledger": LedgerState.start().replace(best=design, best_edp=np.float64(1.0 / 3.0),
                                              history=((3, 0.5, math.inf),),
                                              warnings=("one",)),
        "slots": SlotsState.start(3).replace(thetas=params, opt_states=adam),
        "scheduler": SchedulerState(rounds=np.array([1, 2]), stale=np.zeros(2, np.int64),
                                    dead=np.array([False, True]),
                                    history=(((1.0, 2.0),), ((3.0, 4.0), (3.0, 4.0)))),
        "keys": frozenset({"b", "a"}), "nothing": None, "nan": math.nan,
    }
    save_checkpoint(tmp_path / "c.npz", tree)
    back = load_checkpoint(tmp_path / "c.npz")

    assert back.keys() == tree.keys()
    assert back["keys"] == tree["keys"] and back["nothing"] is None and math.isnan(back["nan"])
    ledger = back["ledger"]
    assert isinstance(ledger, LedgerState) and isinstance(ledger.best, Design)
    assert ledger.best.hw == hw and ledger.history == ((3, 0.5, math.inf),)
    assert type(ledger.best_edp) is np.float64 and ledger.best_edp == np.float64(1.0 / 3.0)
    for name in ("temporal", "spatial", "order", "stages"):
        np.testing.assert_array_equal(getattr(ledger.best, name), getattr(design, name))
        assert getattr(ledger.best, name).dtype == getattr(design, name).dtype
    slots = back["slots"]
    assert slots.schedulers == (None, None, None) and slots.slot_start.dtype == np.int64
    assert type(slots.opt_states) is type(adam)
    assert type(slots.opt_states[0]) is type(adam[0])       # optax's ScaleByAdamState
    assert isinstance(slots.thetas["w"], jnp.ndarray)
    np.testing.assert_array_equal(np.asarray(slots.thetas["w"]), np.asarray(params["w"]))
    assert back["scheduler"].history == tree["scheduler"].history


def test_what_a_checkpoint_cannot_hold_is_refused(tmp_path):
    with pytest.raises(TypeError, match="cannot save a set"):
        save_checkpoint(tmp_path / "c.npz", {"a": {1, 2}})
    assert not (tmp_path / "c.npz").exists()


def test_a_type_outside_the_project_is_never_imported(tmp_path):
    save_checkpoint(tmp_path / "c.npz", {"x": LedgerState.start()})
    with np.load(tmp_path / "c.npz") as data:
        arrays = {k: data[k] for k in data.files}
    shape = arrays["__tree__"].tobytes().decode().replace("baco.codesign_state:LedgerState",
                                                          "subprocess:Popen")
    arrays["__tree__"] = np.frombuffer(shape.encode(), np.uint8)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ConfigError, match="bad.npz.*subprocess:Popen"):
        load_checkpoint(tmp_path / "bad.npz")


def test_an_older_or_broken_checkpoint_says_to_delete_it(tmp_path):
    np.savez(tmp_path / "old.npz", meta=np.frombuffer(json.dumps({}).encode(), np.uint8))
    with pytest.raises(ConfigError, match="old.npz.*older baco.*delete it"):
        load_checkpoint(tmp_path / "old.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="junk.npz.*cannot read.*delete it"):
        load_checkpoint(tmp_path / "junk.npz")
