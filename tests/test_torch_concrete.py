"""Forwards whose Python reads shapes as numbers, which torch.fx's symbolic tracing cannot
follow, imported through ``torch_concrete``'s tracing at the example's shapes: Swin as its
authors' code writes it (``int()`` of a shape in ``window_reverse``, ``assert L == H * W``,
a map padded to whole windows and to an even size only where it needs it), and a network
branching and looping on ``x.shape``, ``x.size()``, ``x.dim()``, ``x.numel()`` and
``len(x)``, each at a shape that takes its branches and one that does not; against the
module in float64. A forward that branches on its data's values, or on a shape that follows
them, is still refused, one that fails at the example's shape is reported where it fails,
the example input a forward changes in place is not changed by the trace, and a forward
that changes its own buffer as fx traces it is not traced twice."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from strategies import assert_runs_as_module, photo  # noqa: E402

from npusim.errors import ModelError  # noqa: E402
from npusim.frontends.torch_import import ForwardFailed, from_torch  # noqa: E402

nn, F = torch.nn, torch.nn.functional


def window_partition(x, p):
    """B x H x W x C to (B nW) x p x p x C."""
    b, h, w, c = x.shape
    x = x.view(b, h // p, p, w // p, p, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, p, p, c)


def window_reverse(windows, p, h, w):
    """(B nW) x p x p x C back to B x H x W x C, the batch computed from the windows'
    count as Swin's code computes it."""
    b = int(windows.shape[0] / (h * w / p / p))
    x = windows.view(b, h // p, w // p, p, p, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(b, h, w, -1)


class WindowAttention(nn.Module):
    def __init__(self, dim, p, heads):
        super().__init__()
        self.p, self.heads, self.scale = p, heads, (dim // heads) ** -0.5
        self.table = nn.Parameter(torch.randn((2 * p - 1) ** 2, heads) * 0.2)
        ij = np.stack(np.meshgrid(np.arange(p), np.arange(p), indexing="ij")).reshape(2, -1)
        rel = (ij[:, :, None] - ij[:, None, :]).transpose(1, 2, 0) + p - 1
        self.register_buffer("index", torch.from_numpy(rel[..., 0] * (2 * p - 1) + rel[..., 1]))
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x, mask=None):
        b_, n, c = x.shape
        qkv = self.qkv(x).reshape(b_, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1).contiguous()
        attn = attn + bias.unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(b_ // nw, nw, self.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, n, n)
        return self.proj((attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b_, n, c))


def shift_mask(hp, wp, p, shift):
    """The shifted windows' attention mask of an hp x wp map (nW x p*p x p*p)."""
    img = np.zeros((1, hp, wp, 1), np.float32)
    for k, (hs, ws) in enumerate((hs, ws) for hs in (slice(0, -p), slice(-p, -shift),
                                                     slice(-shift, None))
                                 for ws in (slice(0, -p), slice(-p, -shift),
                                            slice(-shift, None))):
        img[:, hs, ws, :] = k
    win = window_partition(torch.from_numpy(img), p).view(-1, p * p)
    mask = win.unsqueeze(1) - win.unsqueeze(2)
    return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)


class SwinBlock(nn.Module):
    """A Swin block as its authors' code writes it: the map padded to whole windows where
    its size needs it (``if pad_r > 0 or pad_b > 0``), cropped back after."""

    def __init__(self, dim, hw, p, heads, shift):
        super().__init__()
        self.hw, self.p, self.shift = hw, p, shift
        self.norm1, self.attn = nn.LayerNorm(dim), WindowAttention(dim, p, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        hp, wp = (-(-d // p) * p for d in hw)
        self.register_buffer("mask", shift_mask(hp, wp, p, shift) if shift else None)

    def forward(self, x):
        h, w = self.hw
        b, length, c = x.shape
        assert length == h * w, "input feature has wrong size"
        s = self.norm1(x).view(b, h, w, c)
        pad_r, pad_b = (self.p - w % self.p) % self.p, (self.p - h % self.p) % self.p
        if pad_r > 0 or pad_b > 0:
            s = F.pad(s, (0, 0, 0, pad_r, 0, pad_b))
        _, hp, wp, _ = s.shape
        if self.shift:
            s = torch.roll(s, shifts=(-self.shift, -self.shift), dims=(1, 2))
        win = window_partition(s, self.p).view(-1, self.p * self.p, c)
        win = self.attn(win, self.mask).view(-1, self.p, self.p, c)
        s = window_reverse(win, self.p, hp, wp)
        if self.shift:
            s = torch.roll(s, shifts=(self.shift, self.shift), dims=(1, 2))
        if pad_r > 0 or pad_b > 0:
            s = s[:, :h, :w, :].contiguous()
        x = x + s.view(b, h * w, c)
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    """2 x 2 neighbouring patches joined, an odd map padded first."""

    def __init__(self, hw, dim):
        super().__init__()
        self.hw = hw
        self.norm, self.reduction = nn.LayerNorm(4 * dim), nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        h, w = self.hw
        b, length, c = x.shape
        assert length == h * w, "input feature has wrong size"
        x = x.view(b, h, w, c)
        if h % 2 == 1 or w % 2 == 1:
            x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
        parts = [x[:, i::2, j::2, :] for j in (0, 1) for i in (0, 1)]
        return self.reduction(self.norm(torch.cat(parts, -1).view(b, -1, 4 * c)))


class Swin(nn.Module):
    """Patch embedding (the image padded to whole patches where it needs it), a Swin
    block and its shifted twin, patch merging, a conv head: Swin's stage as written."""

    def __init__(self, hw, dim=24, patch=4, p=4, heads=3):
        super().__init__()
        torch.manual_seed(21)
        self.patch = patch
        grid = tuple(-(-d // patch) for d in hw)
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.blocks = nn.Sequential(SwinBlock(dim, grid, p, heads, 0),
                                    SwinBlock(dim, grid, p, heads, p // 2))
        self.merge = PatchMerging(grid, dim)
        self.grid = tuple(-(-d // 2) for d in grid)
        self.head = nn.Conv2d(2 * dim, 5, 1)

    def forward(self, x):
        _, _, h, w = x.size()
        if w % self.patch != 0:
            x = F.pad(x, (0, self.patch - w % self.patch))
        if h % self.patch != 0:
            x = F.pad(x, (0, 0, 0, self.patch - h % self.patch))
        f = self.embed(x)
        t = self.merge(self.blocks(f.flatten(2).transpose(1, 2)))
        b, _, c = t.shape
        return self.head(t.transpose(1, 2).reshape(b, c, *self.grid))


class ShapeBranches(nn.Module):
    """Branches and loops on shapes read as numbers: the map padded to an even size where it
    is odd, the channels cut in groups of 4 as many as ``x.size(1) // 4``, a 3-D input given
    a batch axis where ``x.dim() == 3``, a mean over ``x.numel() // len(x)`` values."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(22)
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.mix = nn.Conv2d(16, 8, 1)

    def forward(self, x):
        if x.dim() == 3:
            x = x.unsqueeze(0)
        f = torch.relu(self.stem(x))
        n, c, h, w = f.size()
        if h % 2 or w % 2:
            f = F.pad(f, (0, w % 2, 0, h % 2))
        groups = [f[:, 4 * g:4 * g + 4].amax(1, keepdim=True) for g in range(c // 4)]
        pooled = F.max_pool2d(torch.cat(groups + [f], 1)[:, :c], 2)
        scale = pooled.sum(dim=(1, 2, 3), keepdim=True) / (pooled.numel() // len(pooled))
        return self.mix(pooled * torch.sigmoid(scale))


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("hw", [(30, 27), (32, 32)])
def test_swin_as_its_authors_write_it_equals_the_module(hw, batch):
    """(30, 27): the image padded to whole patches, the 8 x 7 map to whole windows and the
    merged map made even; (32, 32): no padding anywhere."""
    net = Swin(hw).eval()
    x = photo((batch, 3, *hw))
    with pytest.raises(torch.fx.proxy.TraceError, match="cannot be used as inputs to control"):
        torch.fx.symbolic_trace(net)  # what fx alone makes of it: stopped at the first branch
    graph = from_torch(net, x)
    for arch in ("systolic-32x32-ws", "input-reuse-1024"):
        assert_runs_as_module(graph, net, x, arch, 1e-5)


@pytest.mark.parametrize("shape", [(1, 3, 9, 13), (2, 3, 10, 12)])
def test_branches_and_loops_on_shapes_equal_the_module(shape):
    net = ShapeBranches().eval()
    x = photo(shape)
    graph = from_torch(net, x)
    assert_runs_as_module(graph, net, x, "sparse-pairs-32x32", 1e-5)


class SplitAttention(nn.Module):
    """Parts of a tuple or a tensor iterated as published code iterates them: ResNeSt's
    split attention as its authors write it (``sum(splited)``, ``zip(attens, splited)``),
    EfficientDet's fused weights zipped with its maps, a loop over ``chunk``'s parts, a
    list of ``unbind``'s rows stacked back."""

    def __init__(self, radix=2):
        super().__init__()
        torch.manual_seed(23)
        self.radix = radix
        self.conv = nn.Conv2d(3, 8 * radix, 3, padding=1)
        self.fc1, self.fc2 = nn.Conv2d(8, 16, 1), nn.Conv2d(16, 8 * radix, 1)
        self.fuse = nn.Parameter(torch.tensor([0.3, 1.2, 0.7]))
        self.levels = nn.ModuleList(nn.Conv2d(8, 8, 3, padding=1) for _ in range(3))

    def forward(self, x):
        x = F.relu(self.conv(x))
        batch, rchannel = x.shape[:2]
        splited = torch.split(x, rchannel // self.radix, dim=1)
        gap = F.relu(self.fc1(F.adaptive_avg_pool2d(sum(splited), 1)))
        atten = self.fc2(gap).view(batch, self.radix, -1).softmax(1).reshape(batch, -1, 1, 1)
        attens = torch.split(atten, rchannel // self.radix, dim=1)
        out = sum([att * split for (att, split) in zip(attens, splited, strict=True)])
        weight = F.relu(self.fuse) / (F.relu(self.fuse).sum() + 1e-4)
        out = sum(w * level(out) for w, level in zip(weight, self.levels, strict=True))
        parts = [part.amax(1, keepdim=True) for part in out.chunk(4, 1)]
        rows = torch.stack([row for row in out.unbind(2)], 2)
        return torch.cat(parts + [rows], 1)


@pytest.mark.parametrize("batch", [1, 2])
def test_parts_iterated_as_published_code_iterates_them_equal_the_module(batch):
    net = SplitAttention().eval()
    x = photo((batch, 3, 9, 7))
    with pytest.raises(torch.fx.proxy.TraceError, match="Proxy object cannot be iterated"):
        torch.fx.symbolic_trace(net)  # what fx alone makes of it
    graph = from_torch(net, x)
    assert_runs_as_module(graph, net, x, "group-tile-32mac", 1e-5)


class ValueBranch(nn.Module):
    """A branch on the data's values behind a shape read as a number."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        f = self.conv(x)
        if int(f.shape[1]) == 4 and f.mean() > 0:
            return f
        return -f


class FailsAtItsShape(nn.Module):
    """A forward whose reshape fits 8 x 8 maps alone, behind a shape read as a number."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        f = self.conv(x)
        b = int(f.shape[0])
        return f.view(b, 4, 8, 8).flatten(1)


class ShapeOfTheData(nn.Module):
    """A branch on a shape that follows the data: how many outputs are positive, over a
    bound (none, on any input: both runs agree, the shape still follows the data), the
    size of a boolean mask's selection, or how many rows ``nonzero`` gives, counted by
    iterating them."""

    def __init__(self, how):
        super().__init__()
        self.conv, self.how = nn.Conv2d(3, 4, 3), how

    def forward(self, x):
        f = self.conv(x)
        count = {"positive": lambda: f.relu().nonzero().shape[0],
                 "huge": lambda: torch.nonzero(f > 1e9).size(0),
                 "selected": lambda: f[f > 0].numel(),
                 "where": lambda: len(torch.where(f > 0)[0]),
                 "iterated": lambda: sum(1 for _ in (f > 0).nonzero())}[self.how]()
        return f if count > 20 else -f


@pytest.mark.parametrize("net", [ValueBranch, *(
    lambda how=how: ShapeOfTheData(how)
    for how in ("positive", "huge", "selected", "where", "iterated"))],
    ids=["values", "positive", "none positive", "selected", "where", "iterated"])
def test_a_branch_on_the_datas_values_or_a_shape_that_follows_them_is_still_refused(net):
    name = type(net()).__name__
    with pytest.raises(ModelError, match=rf"{name}: torch.fx cannot trace it \((TraceError|"
                                         r"RuntimeError): .*even with its shapes taken as "
                                         r"numbers"):
        from_torch(net(), photo((1, 3, 8, 8)))


def test_a_forward_that_fails_at_the_examples_shape_is_reported_where_it_fails():
    with pytest.raises(ForwardFailed, match=r"FailsAtItsShape: running it on an input of shape "
                                            r"\(1, 3, 6, 6\) failed at node 'view' "
                                            r"\(RuntimeError: shape '\[1, 4, 8, 8\]'"):
        from_torch(FailsAtItsShape(), photo((1, 3, 6, 6)))


class ChangesItsInput(nn.Module):
    """A forward that changes its input in place, then reads a shape as a number."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        x.mul_(2)
        b = int(x.shape[0])
        return self.conv(x).view(b, -1)


def test_the_trace_leaves_the_example_and_the_weights_as_they_were():
    net = ChangesItsInput().eval()
    x = photo((1, 3, 6, 6))
    given, weight = x.copy(), net.conv.weight.detach().clone()
    graph = from_torch(net, x)
    assert np.array_equal(x, given)
    assert torch.equal(net.conv.weight, weight)
    assert_runs_as_module(graph, net, x, "systolic-32x32-ws", 1e-5)


class CountsItsCalls(nn.Module):
    """A forward that adds 1 to a buffer of its own, then reads a shape as a number."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1)
        return self.conv(x).view(int(x.shape[0]), -1) * self.calls


def test_a_forward_that_changes_its_buffer_as_it_is_traced_is_not_traced_twice():
    """fx runs ``self.calls.add_(1)`` on the buffer itself as it traces (no proxy reaches
    it): traced twice, the buffer would be counted twice."""
    net = CountsItsCalls().eval()
    with pytest.raises(ModelError, match=r"CountsItsCalls: torch.fx cannot trace it "
                                         r"\(TypeError: int\(\) argument .* not traced twice"):
        from_torch(net, photo((1, 3, 4, 4)))
    assert net.calls.item() == 1
