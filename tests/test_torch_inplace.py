"""In-place ops and hooks in imported PyTorch modules, judged by the module itself.

An in-place op changes the tensor every other name of it reads; the imported graph must
give what the module gives (on a real photograph, float64 of the module's own output),
or be refused by name when npusim cannot follow the change. A module whose hooks the
trace would lose is refused. ``--check`` of a factory runs the module it imported.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from cli_helpers import run_cli  # noqa: E402
from strategies import export_onnx, photo, rel_err  # noqa: E402
from torch import nn  # noqa: E402

from npusim import simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402


class Conv(nn.Module):
    """A conv and a forward given as a function of (self, conv's output, input)."""

    def __init__(self, forward, **layers):
        super().__init__()
        torch.manual_seed(0)
        self.c = nn.Conv2d(3, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 4, 3, padding=1)
        self.act = nn.ReLU(inplace=True)
        for key, layer in layers.items():
            setattr(self, key, layer)
        self.body = forward

    def forward(self, x):
        return self.body(self, x)


def _skip_then_iadd(m, x):
    y = m.c(x)
    skip = y
    y += 1.0
    return y * skip


def _relu_under(m, x):
    y = m.c(x)
    F.relu_(y)
    return y


def _normalised_in_place(m, x):
    x = x.clone()
    x.sub_(0.45).div_(0.225)
    return m.c(x)


def _taps(m, x):
    feats = []
    x = m.c(x)
    feats.append(x)
    x = m.act(x)
    x = m.c2(x)
    feats.append(x)
    x = m.act(x)
    return feats[0], feats[1], x


def _one_chunk_changed(m, x):
    a, b = m.c(x).chunk(2, dim=1)  # views of one tensor: one version counter, apart in memory
    a.relu_()
    return torch.cat([a, b], 1)


FOLLOWED = {
    "ReLU(inplace=True) then its input": lambda m, x: (lambda y: y + m.act(y))(m.c(x)),
    "F.relu_ as a statement": _relu_under,
    "skip = y; y += 1": _skip_then_iadd,
    "y -= ...; y *= ...; y /= ...": lambda m, x: (lambda y, s: (
        y.__isub__(0.5).__imul__(3.0).__itruediv__(2.0), s)[0] * s)(*[m.c(x)] * 2),
    "x.sub_(m).div_(s) on the input": _normalised_in_place,
    "features tapped before an in-place ReLU": _taps,
    "sigmoid_ and mul_ chained": lambda m, x: (lambda y: (y, y.sigmoid_().mul_(2.0))[0])(m.c(x)),
    "one chunk changed, the other read": _one_chunk_changed,
    "torch.tanh_, torch.sigmoid_, y.clamp_min_, y.neg_ on an alias": lambda m, x: (
        lambda y, s: (torch.tanh_(y), torch.sigmoid_(y), y.clamp_min_(0.6).neg_(), s)[3] * 2)(
        *[m.c(x)] * 2),
}


def _module_outputs(module, x) -> list[np.ndarray]:
    with torch.no_grad():
        out = module.eval()(torch.from_numpy(x.copy()))
    return [t.double().numpy() for t in (out if isinstance(out, tuple) else (out,))]


@pytest.mark.parametrize("case", FOLLOWED)
def test_an_in_place_op_is_followed_as_torch_runs_it(case):
    module, x = Conv(FOLLOWED[case]), photo((1, 3, 12, 14))
    want = _module_outputs(module, x)
    got = list(simulate(from_torch(module, x), x).named_outputs.values())
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and rel_err(a, b) < 1e-5


def test_import_leaves_the_callers_input_as_it_was():
    module, x = Conv(_normalised_in_place), photo((1, 3, 8, 8))
    kept = x.copy()
    from_torch(module, torch.from_numpy(x))
    assert np.array_equal(x, kept)


REFUSED = {
    "a slice changed in place, its tensor read after": (
        lambda m, x: (lambda y: (y[:, :2].relu_(), y)[1] + 1.0)(m.c(x)),
        r"node 'relu_' \(\.relu_\(\)\) changes in place the data of 'c'"),
    "a view read after its base changed": (
        lambda m, x: (lambda y, v: (F.relu_(y), v)[1] + 1.0)(*(lambda y: (y, y.view(1, -1)))(
            m.c(x))),
        r"node 'relu_' \(relu_\(\)\) changes in place the data of 'view'"),
    "a chunk changed, read again from its tuple": (
        lambda m, x: (lambda parts: (parts[0].relu_(), torch.cat([parts[0], parts[1]], 1))[1])(
            m.c(x).chunk(2, dim=1)),
        r"node 'relu_' \(\.relu_\(\)\) changes in place the data of 'chunk'"),
    "a parameter changed in forward": (
        lambda m, x: m.c(x) + m.c.bias.add_(1.0).view(1, -1, 1, 1),
        r"changes in place the module's parameter or buffer 'c.bias'"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_an_in_place_change_npusim_cannot_follow_is_refused_by_node(case):
    forward, message = REFUSED[case]
    with pytest.raises(ModelError, match=message + ".* write this one out of place"):
        from_torch(Conv(forward), photo((1, 3, 8, 8)))


def test_forward_hooks_and_pre_hooks_are_refused_naming_the_module():
    x = photo((1, 3, 8, 8))
    module = Conv(lambda m, x: m.c2(m.c(x)))
    handle = module.c2.register_forward_hook(lambda mod, inputs, out: out * 2 + 1)
    with pytest.raises(ModelError, match=r"module 'c2' \(Conv2d\) has a forward hook \(<lambda>\)"
                                         r".* remove it \(handle.remove\(\)\)"):
        from_torch(module, x)
    handle.remove()
    handle = module.c.register_forward_pre_hook(lambda mod, inputs: (inputs[0] * 3,))
    with pytest.raises(ModelError, match=r"module 'c' \(Conv2d\) has a forward pre-hook"):
        from_torch(module, x)
    handle.remove()
    handle = nn.modules.module.register_module_forward_hook(lambda mod, i, out: out)
    try:
        with pytest.raises(ModelError, match="a global forward hook is registered"):
            from_torch(module, x)
    finally:
        handle.remove()
    assert rel_err(simulate(from_torch(module, x), x).output, _module_outputs(module, x)[0]) < 1e-5


FACTORY = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = nn.Conv2d(3, 4, 3, padding=1)
        self.r = nn.ReLU(inplace=True)

    def forward(self, x):
        y = self.c(x)
        return y + self.r(y)

def build():
    return Net()

def unseeded():  # another call, other weights: --check must run the module it imported
    torch.manual_seed(len(NETS))
    NETS.append(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())

NETS = []
"""


def test_check_of_a_factory_runs_the_module_it_imported(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(FACTORY)
    for factory in ("build", "unseeded"):
        report = tmp_path / f"{factory}.json"
        code, out, _ = run_cli("run", f"{path}:{factory}", "--input-shape", "1,3,10,12",
                            "--check", "--json", report)
        check = json.loads(report.read_text())["check"]
        assert code == 0 and check["passed"], out
        assert check["module_relative_error"] < 1e-5 and check["module_not_compared"] is None
        assert "outputs against the PyTorch module: " in out
    code, out, _ = run_cli("run", f"{path}:build", "--input-shape", "1,3,10,12",
                        "--density", "0.5", "--check")
    assert "outputs against the PyTorch module: not compared (--density 0.5 pruned the " \
           "weights, the module holds them unpruned)" in out


def test_check_fails_where_the_module_and_the_graph_part():
    from npusim.report.check import check

    module, x = Conv(lambda m, x: m.act(m.c(x))), photo((1, 3, 8, 8))
    graph = from_torch(module, x)
    result = simulate(graph, x, keep_outputs=True)
    assert check(graph, x, result, module).passed
    with torch.no_grad():
        module.c.weight[0] *= 1.5  # the module no longer the graph: what a wrong import gives
    outcome = check(graph, x, result, module)
    assert not outcome.passed and outcome.module_error > 0.01 and outcome.score < 1e-5


class FirstOnly(nn.Module):
    """Traced at batch 1, ``x[:1]`` is the whole batch and ``view(1, -1)`` keeps it first."""

    def __init__(self, flat: bool):
        super().__init__()
        torch.manual_seed(0)
        self.c, self.flat = nn.Conv2d(3, 4, 3, padding=1), flat

    def forward(self, x):
        y = self.c(x)
        return y.view(1, -1) if self.flat else y[:1]


@pytest.mark.parametrize("flat", [False, True])
def test_an_imported_graph_is_not_run_at_another_batch(flat):
    """Its ops were read at the batch it was imported at: run at another, x[:1] and
    view(1, -1) would compute another function. Imported at that batch, it equals the module."""
    module = FirstOnly(flat).eval()
    x1, x2 = photo((1, 3, 6, 7)), photo((2, 3, 6, 7))
    with pytest.raises(ModelError, match=r"FirstOnly: imported at batch 1, .* import it at "
                                         r"batch 2 \(from_torch on an input of batch 2"):
        simulate(from_torch(module, x1), x2)
    got = simulate(from_torch(module, x2), x2).output  # flat: the batch merged into axis 1
    want = _module_outputs(module, x2)[0]
    assert got.shape == want.shape == ((1, 336) if flat else (1, 4, 6, 7))
    assert rel_err(got, want) < 1e-5


class PadOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 6, 3)

    def forward(self, x):
        p = F.pad(x, (1, 1, 1, 1))
        return self.c(p), p


class Mean(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 6, 3)

    def forward(self, x):
        return self.c(x).mean()


def test_a_pad_returned_is_a_pad_node_and_a_0d_output_is_refused(tmp_path):
    """A constant pad's output is folded into the conv reading it; returned as well, it is
    a Pad node of its own (it was refused), from torch and from either exporter's file."""
    import onnxruntime as ort

    from npusim.frontends.onnx_import import from_onnx

    x = photo((1, 3, 6, 7))
    net = PadOut().eval()
    graph = from_torch(net, x)
    assert [type(n.op).__name__ for n in graph.nodes] == ["Conv", "Pad"]
    conv, padded = (t.detach().numpy() for t in net(torch.from_numpy(x)))
    got = simulate(graph, x).named_outputs
    assert np.array_equal(got["output1"], padded) and rel_err(got["output0"], conv) < 1e-6
    with pytest.raises(ModelError, match=r"forward returns a 0-d tensor .* keep a dimension"):
        from_torch(Mean(), torch.from_numpy(x))
    for exporter in ("torchscript", "dynamo"):
        path = export_onnx(net, x, tmp_path / f"{exporter}.onnx", exporter)
        graph = from_onnx(path)
        assert sorted(type(n.op).__name__ for n in graph.nodes) == ["Conv", "Pad"]
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        want = session.run(None, {session.get_inputs()[0].name: x})
        got = simulate(graph, x).named_outputs
        for out, ref in zip(session.get_outputs(), want, strict=True):
            assert rel_err(got[out.name], ref) < 1e-6, out.name


def test_an_imported_model_at_a_batch_gets_one_photo_a_sample():
    """Not one photo repeated: --check of a batch must see a model that mixes its samples
    up (one that swaps them passed, its samples being equal)."""
    from npusim.frontends import input_tensor

    graph = from_torch(FirstOnly(False), photo((3, 3, 8, 8)))
    x, shown = input_tensor("net.py:build", graph)
    assert x.shape == (3, 3, 8, 8) and shown == "chelsea, astronaut, china"
    assert all(np.abs(x[i] - x[j]).max() > 0.1 for i, j in ((0, 1), (0, 2), (1, 2)))
    one, shown = input_tensor("net.py:build", from_torch(FirstOnly(False), photo((1, 3, 8, 8))))
    assert shown == "chelsea" and np.array_equal(one[0], x[0])
    repeated, shown = input_tensor("net.py:build", graph, image="coffee")
    assert shown == "coffee" and np.array_equal(repeated[0], repeated[2])
