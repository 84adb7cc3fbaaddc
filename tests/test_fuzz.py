"""A CI-sized sample of tools/fuzz.py: random layers on every preset against torch float64
(float32 and exact int8), the stats invariants, and the emulator on the small ones.

The full run (>= 10,000 layers) is ``python tools/fuzz.py``; docs/testing.md gives its figures.
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import npusim

SPEC = importlib.util.spec_from_file_location(
    "fuzz", Path(__file__).resolve().parents[1] / "tools" / "fuzz.py")
fuzz = sys.modules["fuzz"] = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(fuzz)


@pytest.mark.parametrize("preset", fuzz.machine_presets())
@settings(max_examples=8)
@given(seed=st.integers(0, 2**31 - 1))
def test_random_layer_passes_every_check(preset, seed):
    case = fuzz.random_case(np.random.default_rng(seed), seed)
    tally = fuzz.Tally()
    fuzz.run_case(case, preset, tally, emulate=True)
    assert not tally.failures, tally.examples


def test_fuzz_catches_a_wrong_output(monkeypatch):
    """The checks can fail: a machine whose outputs are off by one ulp-scale step is caught."""
    real = npusim.conv2d

    def off_by_one(*args, **kwargs):
        out, st_ = real(*args, **kwargs)
        return out + (1 if out.dtype.kind == "i" else 1e-2 * np.abs(out).max()), st_

    monkeypatch.setattr(npusim, "conv2d", off_by_one)
    case = fuzz.random_case(np.random.default_rng(3), 3)
    tally = fuzz.Tally()
    fuzz.run_case(case, "systolic-32x32-ws", tally, emulate=False)
    assert {"int8 exact", "float32 vs torch"} <= set(tally.failures)


def test_fuzz_catches_cycles_below_the_dram_floor():
    """The memory floor check is live: stats claiming fewer cycles than the traffic allows."""
    import dataclasses

    arch = npusim.load_arch("systolic-32x32-ws")
    case = fuzz.random_case(np.random.default_rng(5), 5)
    x, w, b = fuzz.tensors(case, "float32")
    _, st_ = npusim.conv2d(x, w, b, case.stride, case.padding, case.dilation, case.groups,
                           arch=arch)
    fast = dataclasses.replace(st_, cycles=0, compute_cycles=0, stall_dram_ifmap_cycles=0,
                               stall_dram_filter_cycles=0, stall_dram_ofmap_cycles=0,
                               stall_sram_cycles=0)
    tally = fuzz.Tally()
    fuzz.check_stats(fast, case, arch, tally)
    assert "cycles>=dram floor" in tally.failures
