"""Signals become `Interrupted`, even when they land where Python drops exceptions."""

from __future__ import annotations

import gc
import os
import signal
import time

import pytest

from baco.interrupts import Interrupted, raising_on_signals


def _wait_for_interrupt(seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.001)
    pytest.fail("no Interrupted within the block")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_raises_interrupted_and_handlers_are_restored(sig):
    before = signal.getsignal(sig)
    with pytest.raises(Interrupted) as caught:
        with raising_on_signals():
            os.kill(os.getpid(), sig)
            _wait_for_interrupt()
    assert caught.value.signum == sig and isinstance(caught.value, KeyboardInterrupt)
    assert signal.getsignal(sig) is before


def test_a_signal_inside_a_collector_callback_is_not_lost():
    """Python prints and drops an exception raised in a gc callback (JAX has one): the
    signal is raised again once the callback has returned."""
    armed, fired = [], []

    def callback(phase, info):
        # Armed inside the block only: an automatic collection before it would otherwise
        # send the signal while Python's own handler is in place.
        if phase == "start" and armed and not fired:
            fired.append(True)
            os.kill(os.getpid(), signal.SIGINT)      # the handler runs inside the callback
            time.sleep(0.01)

    gc.callbacks.append(callback)
    try:
        with pytest.raises(Interrupted):
            with raising_on_signals():
                armed.append(True)
                gc.collect()
                _wait_for_interrupt()
    finally:
        gc.callbacks.remove(callback)
    assert fired


def test_a_signal_inside_del_is_not_lost():
    class Slow:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)

    with pytest.raises(Interrupted) as caught:
        with raising_on_signals():
            Slow()
            _wait_for_interrupt()
    assert caught.value.signum == signal.SIGTERM
