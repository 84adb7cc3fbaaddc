"""The register kernels compiled for a 256-bit target (AVX2: two registers where AVX-512 has
one) on a machine that has AVX-512: exact outputs against the independent references."""

import os
import subprocess
import sys
import textwrap

import pytest

from npusim import simd

CHECK = textwrap.dedent("""
    import numpy as np
    from npusim import bitconv, engine, reference, simd
    from npusim.dataflows.group_tile import broadcast_conv
    from npusim.dataflows.sparse_pairs import pair_products
    from npusim.ir import ConvLayer

    assert simd.vector_bits() == 256, simd.vector_bits()
    rng = np.random.default_rng(0)
    for layer in (ConvLayer(1, 12, 9, 11, 70, 3, 3, 1, 1, name="three blocks"),
                  ConvLayer(2, 8, 7, 6, 18, 3, 2, (2, 1), (1, 0, 2, 1), (1, 2), groups=2,
                            name="grouped"),
                  ConvLayer(1, 130, 5, 13, 9, 3, 3, 1, 1, name="three words"),
                  ConvLayer(2, 70, 23, 29, 20, 1, 1, 2, name="pointwise s2")):
        layer = layer.with_dtype("int8")
        x = rng.integers(-127, 128, layer.input_shape).astype(np.int8)
        x[rng.random(x.shape) < 0.4] = 0
        w = rng.integers(-127, 128, layer.weight_shape).astype(np.int8)
        w[rng.random(w.shape) < 0.5] = 0
        exact = reference.conv2d(x, w, None, layer)
        assert np.array_equal(broadcast_conv(layer, x, w, None), exact), layer.name
        assert np.array_equal(pair_products(layer, x, w, None), exact), layer.name
        xm, wm = x != 0, w != 0
        pairs, _ = bitconv.pair_counts(layer, xm, bitconv.pack_weights(layer, wm))
        want = reference.conv2d(xm.astype(np.float64), wm.astype(np.float64), None, layer)
        got = pairs.reshape(layer.K, layer.N, layer.P, layer.Q).transpose(1, 0, 2, 3)
        assert np.array_equal(got, want), layer.name
    for layer in (ConvLayer(1, 5, 23, 37, 10, 3, 3, 2, 1, groups=5, name="depthwise s2"),
                  ConvLayer(2, 3, 9, 70, 3, 5, 3, 1, (2, 1, 0, 3), (1, 2), groups=3,
                            name="depthwise dilated")):
        x = rng.standard_normal(layer.input_shape).astype(np.float32)
        w = rng.standard_normal(layer.weight_shape).astype(np.float32)
        xp, ref = reference.pad_input(x, layer), np.zeros(layer.output_shape, np.float32)
        for r in range(layer.R):  # numpy's float32 product, then sum, tap by tap
            for s in range(layer.S):
                window = reference.tap_window(xp, layer, r, s)[:, np.arange(layer.K) // layer.Kg]
                ref += window * w[:, 0, r, s].reshape(1, -1, 1, 1)
        assert np.array_equal(engine.depthwise(x, w, layer, np.float32), ref), layer.name
        xi = rng.integers(-127, 128, layer.input_shape).astype(np.int8)
        wi = rng.integers(-127, 128, layer.weight_shape).astype(np.int8)
        got = engine.conv2d(xi, wi, None, layer.with_dtype("int8"))
        assert np.array_equal(got, reference.conv2d(xi, wi, None, layer)), layer.name
    print("ok")
""")


@pytest.mark.skipif(simd.vector_bits() == 256, reason="the default run is the 256-bit target")
def test_register_kernels_compiled_for_avx2_give_exact_outputs():
    import llvmlite.binding as ll

    features = ",".join(f.replace("+avx512", "-avx512").replace("+amx", "-amx")
                        for f in ll.get_host_cpu_features().flatten().split(","))
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": features}
    r = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
