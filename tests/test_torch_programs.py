"""Networks saved as programs (``torch_programs``): a ``torch.jit.save`` archive of a
scripted network (its loop over blocks, its branch on the map's size kept as TorchScript)
and of a traced one, given to ``npusim run`` as a ``.pt`` file and to ``load_model``, a
factory returning a scripted module, a Python network calling ``@torch.jit.script``
functions, and ``torch.export`` programs (``.pt2``) of a fixed and of a dynamic batch; each
against the Python module it was made from, run in float64. A weights-only ``.pt``, a
TorchScript submodule inside a Python module, an archive that fails at the shape it is given,
and a program given a shape it fixes otherwise are refused saying why."""

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
from cli_helpers import run_cli  # noqa: E402
from strategies import float64_output, photo, rel_err  # noqa: E402

from npusim import simulate  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends import load_model_and_module  # noqa: E402
from npusim.frontends.torch_import import ForwardFailed, from_torch  # noqa: E402

nn, F = torch.nn, torch.nn.functional
NETS = Path(__file__).parent / "data" / "import" / "nets.py"


class Block(nn.Module):
    """A residual block with squeeze-and-excitation."""

    def __init__(self, c: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, groups=4, bias=False), \
            nn.BatchNorm2d(c)
        self.squeeze, self.excite = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        y = y * torch.sigmoid(self.excite(F.relu(self.squeeze(F.adaptive_avg_pool2d(y, 1)))))
        return F.relu(y + x)


class Scripted(nn.Module):
    """A stem, a loop over a ModuleList of blocks, a map of odd size padded to even at its
    top and left before a stride-2 conv (a branch on its shape, which TorchScript keeps as
    an If: taken at 22 x 18, an 11 x 9 map, not at 16 x 16), a head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(31)
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.Hardswish())
        self.blocks = nn.ModuleList([Block(16) for _ in range(3)])
        self.down = nn.Conv2d(16, 24, 3, 2)
        self.head = nn.Linear(24, 10)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.data.uniform_(0.5, 1.5)

    def forward(self, x):
        y = self.stem(x)
        for block in self.blocks:
            y = block(y)
        if y.shape[-1] % 2 == 1 or y.shape[-2] % 2 == 1:
            y = F.pad(y, [y.shape[-1] % 2, 0, y.shape[-2] % 2, 0])
        y = F.relu(self.down(y))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


def awkward():
    """tests/data/import/nets.py's Awkward: many kinds of op, traceable, not scriptable."""
    spec = importlib.util.spec_from_file_location("nets", NETS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.awkward().eval()


def archive(tmp_path, how: str, shape) -> tuple[Path, nn.Module]:
    """A ``torch.jit.save`` archive of a network scripted (whatever ``shape``) or traced
    (at ``shape``), and the Python module it was made from."""
    net = Scripted().eval() if how == "scripted" else awkward()
    script = torch.jit.script(net) if how == "scripted" else \
        torch.jit.trace(net, torch.from_numpy(photo(shape)))
    path = tmp_path / f"{how}.pt"
    torch.jit.save(script, str(path))
    return path, net


@pytest.mark.parametrize("how, shape", [("scripted", (1, 3, 22, 18)),
                                        ("scripted", (2, 3, 16, 16)),
                                        ("scripted", (2, 3, 22, 18)),
                                        ("traced", (2, 3, 29, 35))])
def test_a_torchscript_archive_equals_the_module_it_was_made_from(tmp_path, how, shape):
    path, net = archive(tmp_path, how, shape)
    graph, module = load_model_and_module(str(path), input_shape=shape)
    assert isinstance(module, torch.jit.ScriptModule) and graph.name == how
    x = photo(shape)
    reference = float64_output(net, x)
    for arch in ("systolic-32x32-ws", "sparse-pairs-32x32"):
        result = simulate(graph, x, arch, keep_outputs=True)
        assert rel_err(result.output, reference) < 1e-5


def test_run_reads_a_torchscript_archive_and_checks_it_against_the_module(tmp_path):
    path, _ = archive(tmp_path, "scripted", (1, 3, 22, 18))
    code, out, err = run_cli("run", path, "--input-shape", "1,3,22,18",
                             "--arch", "input-reuse-1024", "--check")
    assert code == 0, err
    assert "outputs against the PyTorch module" in out and ": ok" in out


def scripted_factory():
    return torch.jit.script(Scripted().eval())


def test_a_factory_returning_a_scripted_module_is_imported_through_it():
    net = scripted_factory()
    x = photo((1, 3, 14, 20))
    graph = from_torch(net, x)
    assert graph.name == "Scripted"
    result = simulate(graph, x, "group-tile-64mac", keep_outputs=True)
    assert rel_err(result.output, float64_output(Scripted().eval(), x)) < 1e-5


@torch.jit.script
def hard_mish(x):
    return 0.5 * x * (x + 2).clamp(min=0.0, max=2.0)


@torch.jit.script
def gated(x, gate):
    return hard_mish(x) * torch.sigmoid(gate)


class CallsScriptFunctions(nn.Module):
    """A Python network calling TorchScript functions, one calling the other."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(32)
        self.conv, self.gate = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(3, 8, 1)

    def forward(self, x):
        return gated(self.conv(x), self.gate(x)) + hard_mish(x).mean(1, keepdim=True)


@pytest.mark.parametrize("batch", [1, 2])
def test_script_functions_are_traced_as_their_python(batch):
    net = CallsScriptFunctions().eval()
    compiled = torch.jit.ScriptFunction.__call__
    with pytest.raises(RuntimeError, match="found type 'Proxy'"):
        torch.fx.symbolic_trace(net)  # what fx alone makes of it
    x = photo((batch, 3, 9, 11))
    graph = from_torch(net, x)
    result = simulate(graph, x, "dilated-grid-2x2", keep_outputs=True)
    assert rel_err(result.output, float64_output(net, x)) < 1e-5
    assert torch.jit.ScriptFunction.__call__ is compiled  # TorchScript again after


class HoldsAScript(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3)
        self.body = torch.jit.script(nn.Sequential(nn.Conv2d(4, 4, 1), nn.ReLU()))

    def forward(self, x):
        return self.body(self.stem(x))


def test_refusals_say_why(tmp_path):
    weights = tmp_path / "weights.pt"
    torch.save(Scripted().state_dict(), weights)
    with pytest.raises(ModelError, match=r"weights\.pt: a PyTorch file, which holds weights "
                                         r".*npusim reads TorchScript archives"):
        load_model_and_module(str(weights))
    with pytest.raises(ModelError, match=r"HoldsAScript: submodule 'body' is a TorchScript "
                                         r"module .* give the Python module it was made from"):
        from_torch(HoldsAScript(), photo((1, 3, 8, 8)))
    path, _ = archive(tmp_path, "scripted", (1, 3, 8, 8))
    with pytest.raises(ForwardFailed, match=r"scripted\.pt: running it on an input of shape "
                                            r"\(1, 3, 2, 2\) failed \(RuntimeError: .*Kernel "
                                            r"size can't be greater than actual input size\)$"):
        load_model_and_module(str(path), input_shape=(1, 3, 2, 2))
    broken = tmp_path / "broken.pt"  # its code names a module TorchScript does not know
    broken.write_bytes(path.read_bytes().replace(b"modules.conv", b"modules.cxnv"))
    code, _, err = run_cli("run", broken)
    assert code == 2 and err.count("\n") == 1
    assert "broken.pt: cannot load it as TorchScript (Unknown type name" in err


def program(tmp_path, shape, dynamic_batch: bool) -> tuple[Path, nn.Module]:
    """A ``torch.export.save`` program of Scripted exported at ``shape`` (its batch left
    dynamic or not), and the module."""
    net = Scripted().eval()
    dynamic = ({0: torch.export.Dim("batch", min=1, max=16)},) if dynamic_batch else None
    exported = torch.export.export(net, (torch.from_numpy(photo(shape)),),
                                   dynamic_shapes=dynamic)
    path = tmp_path / f"{'dynamic' if dynamic_batch else 'fixed'}.pt2"
    torch.export.save(exported, str(path))
    return path, net


@pytest.mark.parametrize("dynamic_batch, batch", [(False, None), (True, 3)])
def test_a_torch_export_program_equals_the_module_it_was_made_from(tmp_path, dynamic_batch,
                                                                    batch):
    path, net = program(tmp_path, (2, 3, 22, 18), dynamic_batch)
    graph, module = load_model_and_module(str(path), batch=batch)
    shape = (batch or 2, 3, 22, 18)
    assert graph.input_shape == shape
    x = photo(shape)
    reference = float64_output(net, x)
    result = simulate(graph, x, "hybrid-3x1024", keep_outputs=True)
    assert rel_err(result.output, reference) < 1e-5
    assert rel_err(module(torch.from_numpy(x)).detach().numpy(), reference) < 1e-5


def test_run_reads_a_torch_export_program_and_checks_it_against_it(tmp_path):
    path, _ = program(tmp_path, (1, 3, 16, 20), dynamic_batch=False)
    code, out, err = run_cli("run", path, "--arch", "systolic-32x32-ws", "--check")
    assert code == 0, err
    assert "fixed.pt2 on systolic-32x32-ws" in out and "3x16x20->16x8x10 3x3 s2" in out
    assert "outputs against the PyTorch module" in out and ": ok" in out
    assert err == ""


def test_a_program_given_a_shape_it_fixes_otherwise_or_no_program_is_refused(tmp_path):
    path, _ = program(tmp_path, (1, 3, 16, 20), dynamic_batch=False)
    with pytest.raises(ModelError, match=r"fixed\.pt2: the program fixes its batch to 1, so "
                                         r"batch \(--batch\) 2 cannot be run; export it with a "
                                         r"dynamic batch"):
        load_model_and_module(str(path), batch=2)
    broken = tmp_path / "broken.pt2"
    broken.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ModelError, match=r"broken\.pt2: cannot load it as a torch\.export "
                                         r"program \("):
        load_model_and_module(str(broken))
