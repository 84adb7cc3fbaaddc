"""Attention and transformers through ``from_torch``: ``nn.MultiheadAttention`` (batch first),
as self-attention over a CNN's feature map (a bottleneck-transformer block: tokens from the
map, attention, back to a map) and cross-attention of other widths, without biases, with the
four projections run as the machine's layers; ``F.scaled_dot_product_attention`` of heads
cut from a conv's channels, plain, causal, under a constant bool or float mask and at its
own scale; timm's block, whose q, k, v come from a permute that moves the batch axis and are
read back by ``unbind(0)``, indexing or ``select``; a DETR-like encoder-decoder
(``nn.TransformerEncoder`` / ``Decoder`` and their layers, post- and pre-norm, ReLU and
GELU); MobileViT's and Swin's blocks, whose reshapes merge the batch with patches and
windows (held tensors, ``torch_held``); a ViT's class token joined to its patches as a
constant; PVT's, SegFormer's and Swin V2's attentions (``F.normalize`` of a held tensor);
reductions of windows that keep their axes; a permute that moves the batch read where it is.
Each against the module in float64 on several machines; what the IR does not compute (the
attention weights, computed masks, dropout, sequence-first modules, an output whose first
axis joins the batch with others, a reshape that cuts the batch, a reduction of a held
tensor that drops its axes) refused by name."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from strategies import assert_runs_as_module, photo  # noqa: E402

from npusim import ops  # noqa: E402
from npusim.errors import ModelError  # noqa: E402
from npusim.frontends.torch_import import from_torch  # noqa: E402

nn, F = torch.nn, torch.nn.functional
X = photo((2, 3, 12, 16))


class AttentionBlock(nn.Module):
    """Conv features as tokens (N x HW x C), multi-head self-attention with a residual,
    back to a map for a conv: a bottleneck-transformer block."""

    def __init__(self, heads=4, need_weights=True):
        super().__init__()
        torch.manual_seed(7)
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.attn = nn.MultiheadAttention(16, heads, batch_first=True)
        self.head = nn.Conv2d(16, 6, 3, padding=1)
        self.need_weights = need_weights

    def forward(self, x):
        f = torch.relu(self.stem(x))
        n, c, h, w = f.shape
        tokens = f.flatten(2).transpose(1, 2)
        mixed, _ = self.attn(tokens, tokens, tokens, need_weights=self.need_weights)
        return self.head((tokens + mixed).transpose(1, 2).reshape(n, c, h, w))


class CrossAttention(nn.Module):
    """Queries from one branch attend to keys and values of another width (kdim, vdim),
    the projections without biases."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(8)
        self.queries = nn.Conv2d(3, 12, 3, stride=2, padding=1)
        self.memory = nn.Conv2d(3, 8, 5, stride=4, padding=2)
        self.attn = nn.MultiheadAttention(12, 3, bias=False, kdim=8, vdim=8, batch_first=True)
        self.out = nn.Linear(12, 5)

    def forward(self, x):
        q = self.queries(x).flatten(2).transpose(1, 2)
        kv = self.memory(x).flatten(2).transpose(1, 2)
        return self.out(self.attn(q, kv, kv)[0])


class Heads(nn.Module):
    """Queries, keys and values of 4 heads of 4 features cut from a conv's 48 channels,
    attended by ``F.scaled_dot_product_attention``, the heads joined by a linear layer."""

    def __init__(self, **attend):
        super().__init__()
        torch.manual_seed(9)
        self.qkv, self.out = nn.Conv2d(3, 48, 3, stride=2, padding=1), nn.Linear(16, 6)
        self.attend = attend
        rng = np.random.default_rng(10)
        self.register_buffer("allowed", torch.from_numpy((rng.random((48, 48)) < 0.6)
                                                         | np.eye(48, dtype=bool)))
        self.register_buffer("bias", torch.from_numpy(rng.standard_normal((48, 48)).astype(
            np.float32)))

    def forward(self, x):
        f = self.qkv(x)
        n = f.shape[0]
        t = f.flatten(2).transpose(1, 2).reshape(n, 48, 3, 4, 4).permute(0, 2, 3, 1, 4)
        mask = {"bool": self.allowed, "float": self.bias}.get(self.attend.get("attn_mask"))
        kwargs = {**self.attend, "attn_mask": mask}
        y = F.scaled_dot_product_attention(t[:, 0], t[:, 1], t[:, 2], **kwargs)
        return self.out(y.transpose(1, 2).reshape(n, 48, 16))


class TimmAttention(nn.Module):
    """timm's attention block on conv features: q, k, v cut from one linear layer by a
    permute that moves the batch axis (``(2, 0, 3, 1, 4)``) and read back one entry of its
    first axis at a time (``unbind(0)``, indexing, ``select``), then fused attention or the
    products written out."""

    def __init__(self, read="unbind", fused=True):
        super().__init__()
        torch.manual_seed(11)
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.qkv, self.proj = nn.Linear(16, 48), nn.Linear(16, 16)
        self.read, self.fused = read, fused

    def forward(self, x):
        f = self.stem(x)
        n, c, h, w = f.shape
        t = f.flatten(2).transpose(1, 2)
        qkv = self.qkv(t).reshape(n, h * w, 3, 4, 4).permute(2, 0, 3, 1, 4)
        if self.read == "unbind":
            q, k, v = qkv.unbind(0)
        elif self.read == "index":
            q, k, v = qkv[0], qkv[1], qkv[-1]
        else:
            q, k, v = qkv.select(0, 0), torch.select(qkv, 0, 1), qkv.select(0, 2)
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v)
        else:
            y = ((q * 0.5) @ k.transpose(-2, -1)).softmax(dim=-1) @ v
        y = self.proj(y.transpose(1, 2).reshape(n, h * w, c))
        return f + y.transpose(1, 2).reshape(n, c, h, w)


NETS = {"self-attention": AttentionBlock, "one head, no weights": lambda: AttentionBlock(
    1, need_weights=False), "cross-attention": CrossAttention,
    "sdpa": Heads, "sdpa causal": lambda: Heads(is_causal=True),
    "sdpa bool mask": lambda: Heads(attn_mask="bool"),
    "sdpa float mask, scale": lambda: Heads(attn_mask="float", scale=0.3),
    "timm unbind": TimmAttention, "timm index, written out": lambda: TimmAttention(
        "index", fused=False), "timm select": lambda: TimmAttention("select")}


@pytest.mark.parametrize("name", list(NETS))
@pytest.mark.parametrize("arch", ["systolic-32x32-ws", "sparse-pairs-32x32", "input-reuse-1024"])
def test_attention_through_from_torch_equals_the_module_in_float64(name, arch):
    net = NETS[name]().eval()
    graph = from_torch(net, X)
    projections = [n for n in graph.nodes if n.name.startswith("attn")
                   and isinstance(n.op, ops.Conv)]
    assert len(projections) == (0 if name.startswith(("sdpa", "timm")) else 4)  # q, k, v, out
    assert sum(isinstance(n.op, ops.MatMul) for n in graph.nodes) == 2
    assert_runs_as_module(graph, net, X, arch, 1e-5)


class Reads(nn.Module):
    def __init__(self, what):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=not what.startswith("sequence"))
        self.what = what
        self.register_buffer("mask", torch.ones(48, 48, dtype=torch.bool).triu(1))  # 6 x 8

    def forward(self, x):
        if self.what == "sequence first, as DETR":  # L x N x E, the batch moved by a permute
            t = self.conv(x).flatten(2).permute(2, 0, 1)
            return self.attn(t, t, t)[0].permute(1, 0, 2)
        t = self.conv(x).flatten(2).transpose(1, 2)
        if self.what == "weights":
            return self.attn(t, t, t)[1]
        if self.what == "mask":
            return self.attn(t, t, t, attn_mask=self.mask)[0]
        return self.attn(t, t, t)[0]


@pytest.mark.parametrize("what, why", [
    ("weights", r"node 'getitem': reads the attention weights: the IR computes the attention's "
                r"output only"),
    ("mask", r"nn.MultiheadAttention x1 \(node 'attn': a mask: the IR attends to every key"),
    ("sequence first", r"node 'attn': batch_first=False: the IR reads its L x N x E tokens "
                       r"where a permute of N x L x E ones made them \(x.permute\(1, 0, 2\)\); "
                       r"these are not: build it with batch_first=True"),
])
def test_what_attention_cannot_express_is_refused_naming_why(what, why):
    with pytest.raises(ModelError, match=why):
        from_torch(Reads(what).eval(), X)


class Computed(Heads):
    def __init__(self, what):
        super().__init__()
        self.what = what

    def forward(self, x):
        t = self.qkv(x).flatten(2).transpose(1, 2).reshape(2, 48, 3, 4, 4).permute(0, 2, 3, 1, 4)
        q, k, v = t[:, 0], t[:, 1], t[:, 2]
        if self.what == "mask":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=q @ k.transpose(2, 3))
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)


@pytest.mark.parametrize("what, why", [
    ("mask", r"scaled_dot_product_attention x1 \(node 'scaled_dot_product_attention': "
             r"attn_mask is computed from the network input; the IR needs a constant"),
    ("dropout", r"dropout_p=0.1, enable_gqa=False: the IR attends without dropout"),
])
def test_what_scaled_dot_product_attention_cannot_take_is_refused(what, why):
    with pytest.raises(ModelError, match=why):
        from_torch(Computed(what).eval(), X)


@pytest.mark.parametrize("ours, theirs, error", [
    ([1.0, -np.inf, 2.0], [1.0, -np.inf, 2.0], 0.0),  # masked scores: -inf in both
    ([1.0, np.nan, 2.0], [1.0, np.nan, 2.0], 0.0),
    ([1.0, np.nan, 2.0], [1.0, 0.5, 2.0], np.inf),  # a NaN of ours alone: never passed over
    ([1.0, -np.inf, 2.0], [1.0, 0.5, 2.0], np.inf),
    ([1.0, 0.5, 2.5], [1.0, -np.inf, 2.0], np.inf),
    ([1.0, -np.inf, 2.5], [1.0, -np.inf, 2.0], 0.25),  # scaled by the finite values
])
def test_the_checks_error_meets_infinities_and_nans_as_equal_or_wrong(ours, theirs, error):
    from npusim.report.check import relative_error

    with np.errstate(all="raise"):
        assert relative_error(np.array(ours), np.array(theirs)) == error


def test_the_projections_are_the_modules_weights():
    """The query projection's conv holds the first third of in_proj_weight: the packed
    weights are cut as torch cuts them (q, k, v)."""
    net = AttentionBlock().eval()
    graph = from_torch(net, X)
    query = next(n.op for n in graph.nodes if n.name == "attn_q_conv")
    want = net.attn.in_proj_weight.detach().numpy()[:16]
    assert np.array_equal(query.weight.reshape(16, 16), want)
    assert np.array_equal(query.bias, net.attn.in_proj_bias.detach().numpy()[:16])




class Moved(nn.Module):
    def __init__(self, what):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.what = what

    def forward(self, x):
        t = self.conv(x).flatten(2)  # N x 8 x 48
        if self.what == "returned":
            return t.permute(2, 0, 1)
        if self.what == "reshaped":
            return t.permute(1, 0, 2).reshape(8, -1).sum(0, keepdim=True)
        if self.what == "channels next":
            return t.permute(2, 1, 0)[0]
        if self.what == "heads returned":
            return t.reshape(-1, 4, 48)  # (N 2) x 4 x 48
        return t.permute(1, 0, 2).reshape(24, 32)  # 8 x N x 48: rows of 32 cut the batch


@pytest.mark.parametrize("what", ["returned", "reshaped", "channels next"])
def test_a_permute_that_moves_the_batch_read_where_it_is_equals_the_module(what):
    """A tensor whose batch a permute moved, read by a call that takes it where it is (a sum,
    an entry of another axis, forward's return): that permute, as torch computes it."""
    net = Moved(what).eval()
    assert_runs_as_module(from_torch(net, X), net, X, "systolic-32x32-ws", 1e-5)


class LearnedBias(nn.Module):
    """A learned bias (a parameter) added to tokens whose heads a reshape merged into the
    batch, as attention biases are."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(16)
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bias = nn.Parameter(torch.randn(48, 4))

    def forward(self, x):
        t = self.conv(x).flatten(2).reshape(-1, 4, 48).transpose(1, 2) + self.bias
        return t.transpose(1, 2).reshape(x.shape[0], 8, 6, 8)


def test_a_learned_constant_added_to_a_held_tensor_equals_the_module():
    net = LearnedBias().eval()
    assert_runs_as_module(from_torch(net, X), net, X, "systolic-32x32-ws", 1e-5)


class WindowStatistics(nn.Module):
    """Reductions of windows whose first axis joins the batch with the windows, each keeping
    its axes (each window's mean and largest magnitude, a sum along the channels), then the
    windows reversed."""

    def __init__(self, keep=True):
        super().__init__()
        torch.manual_seed(17)
        self.conv, self.head, self.keep = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 1), keep

    def forward(self, x):
        f = self.conv(x).permute(0, 2, 3, 1)
        b, h, w, c = f.shape
        win = f.reshape(b, h // 4, 4, w // 4, 4, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 16, c)
        mean = torch.mean(win, dim=1, keepdim=self.keep)
        centred = win - (mean if self.keep else mean[:, None])
        scaled = centred / (centred.abs().amax(dim=(1, 2), keepdim=True) + 1) * win.sum(
            -1, keepdim=True).sigmoid()
        back = scaled.reshape(b, h // 4, w // 4, 4, 4, c).permute(0, 1, 3, 2, 4, 5)
        return self.head(back.reshape(b, h, w, c).permute(0, 3, 1, 2))


@pytest.mark.parametrize("batch", [1, 2])
def test_reductions_of_a_held_tensor_that_keep_their_axes_equal_the_module(batch):
    x, net = photo((batch, 3, 8, 12)), WindowStatistics().eval()
    assert_runs_as_module(from_torch(net, x), net, x, "systolic-32x32-ws", 1e-5)


@pytest.mark.parametrize("what, why", [
    ("heads returned", r"forward returns a tensor of shape \(4, 4, 48\), the batch in axis 0 "
                       r"with other axes: an output's first axis must be the batch or one other "
                       r"axis, not several joined"),
    ("batch cut", r"Tensor.reshape x1 \(node 'reshape': reshapes \(8, 2, 48\) to \(24, 32\), "
                  r"which cuts the batch axis where the IR cannot follow it"),
])
def test_what_a_held_tensor_cannot_be_is_refused_naming_where_the_batch_is(what, why):
    with pytest.raises(ModelError, match=why):
        from_torch(Moved(what).eval(), X)


def test_a_reduction_of_a_held_tensor_that_drops_its_axes_is_refused():
    with pytest.raises(ModelError, match=r"torch.mean x1 \(node 'mean': it reads a tensor of "
                                         r"shape \(12, 16, 8\), the batch in axis 0 with other "
                                         r"axes and drops the axes it reduces; the IR follows a "
                                         r"reduction of such a tensor that keeps them "
                                         r"\(keepdim=True\)"):
        from_torch(WindowStatistics(keep=False).eval(), photo((2, 3, 8, 12)))


class SequenceFirst(nn.Module):
    """DETR as published: the transformer's tokens sequence first (L x N x E)."""

    def __init__(self, norm_first=False):
        super().__init__()
        torch.manual_seed(13)
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU())
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(
            16, 4, 32, norm_first=norm_first), 2, enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(
            16, 2, 24, norm_first=norm_first), 2)
        self.queries, self.boxes = nn.Conv2d(3, 16, 1), nn.Linear(16, 4)

    def forward(self, x):
        memory = self.encoder(self.backbone(x).flatten(2).permute(2, 0, 1))
        queries = F.adaptive_avg_pool2d(self.queries(x), (1, 5)).flatten(2).permute(2, 0, 1)
        return self.boxes(self.decoder(queries, memory)).sigmoid().transpose(0, 1)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("norm_first", [False, True])
def test_sequence_first_attention_and_transformers_read_permuted_tokens(norm_first, batch):
    """DETR as published: tokens permuted to L x N x E into sequence-first modules, which
    read them as the batch-first tokens they were (``torch_transformer.tokens``)."""
    x, net = photo((batch, 3, 12, 16)), SequenceFirst(norm_first).eval()
    assert_runs_as_module(from_torch(net, x), net, x, "systolic-32x32-ws", 1e-5)
    net = Reads("sequence first, as DETR").eval()
    assert_runs_as_module(from_torch(net, x), net, x, "sparse-pairs-32x32", 1e-5)


class WholeTransformer(nn.Module):
    """``nn.Transformer`` (encoder and decoder, each with its norm) on a CNN's tokens and
    pooled queries, sequence first as DETR feeds it or batch first."""

    def __init__(self, batch_first):
        super().__init__()
        torch.manual_seed(17)
        self.backbone = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.queries = nn.Conv2d(3, 16, 1)
        self.transformer = nn.Transformer(16, 2, 1, 2, 24, dropout=0.0,
                                          batch_first=batch_first)
        self.order = (0, 2, 1) if batch_first else (2, 0, 1)

    def forward(self, x):
        src = self.backbone(x).flatten(2).permute(*self.order)
        tgt = F.adaptive_avg_pool2d(self.queries(x), (1, 5)).flatten(2).permute(*self.order)
        out = self.transformer(src, tgt)
        return out if self.order[0] == 0 else out.transpose(0, 1)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")  # torch's, building it sequence first
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("batch_first", [True, False])
def test_nn_transformer_equals_the_module(batch_first, batch):
    x, net = photo((batch, 3, 12, 16)), WholeTransformer(batch_first).eval()
    graph = from_torch(net, x)
    assert sum(isinstance(n.op, ops.LayerNorm) for n in graph.nodes) == 2 + 3 * 2 + 2
    assert_runs_as_module(graph, net, x, "systolic-32x32-ws", 1e-5)


class DetrLike(nn.Module):
    """A CNN backbone's tokens through a transformer encoder, and object queries (pooled
    from the image) through a decoder attending to them: DETR's shape, batch first."""

    def __init__(self, norm_first=False, activation="relu", stacked=True):
        super().__init__()
        torch.manual_seed(12)
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU())
        layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, norm_first=norm_first,
                                           activation=activation)
        self.encoder = (nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16),
                                              enable_nested_tensor=False)
                        if stacked else layer)
        decoder = nn.TransformerDecoderLayer(16, 2, 24, batch_first=True, norm_first=norm_first,
                                             activation=activation)
        self.decoder = nn.TransformerDecoder(decoder, 2) if stacked else decoder
        self.queries, self.boxes = nn.Conv2d(3, 16, 1), nn.Linear(16, 4)

    def forward(self, x):
        memory = self.encoder(self.backbone(x).flatten(2).transpose(1, 2))
        queries = F.adaptive_avg_pool2d(self.queries(x), (1, 5)).flatten(2).transpose(1, 2)
        return self.boxes(self.decoder(queries, memory)).sigmoid()


@pytest.mark.parametrize("variant", [dict(), dict(norm_first=True, activation="gelu"),
                                     dict(stacked=False, activation=F.gelu)])
@pytest.mark.parametrize("arch", ["systolic-32x32-ws", "sparse-pairs-32x32"])
def test_transformer_encoder_and_decoder_through_from_torch_equal_the_module(variant, arch):
    net = DetrLike(**variant).eval()
    graph = from_torch(net, X)
    layers = 4 if variant.get("stacked", True) else 2  # encoder and decoder layers
    attentions = layers + (2 if variant.get("stacked", True) else 1)  # decoders attend twice
    assert sum(isinstance(n.op, ops.MatMul) for n in graph.nodes) == 2 * attentions
    assert_runs_as_module(graph, net, X, arch, 1e-5)


class Layer(nn.Module):
    def __init__(self, what):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.layer = nn.TransformerEncoderLayer(
            8, 2, 16, batch_first=what != "sequence first",
            activation=(lambda t: t.tanh()) if what == "activation" else "relu")
        self.what = what
        self.register_buffer("mask", torch.ones(48, 48, dtype=torch.bool).triu(1))

    def forward(self, x):
        t = self.conv(x).flatten(2).transpose(1, 2)
        return self.layer(t, src_mask=self.mask if self.what == "mask" else None)


@pytest.mark.parametrize("what, why", [
    ("mask", r"nn.TransformerEncoderLayer x1 \(node 'layer': a mask: the IR attends to every "
             r"key"),
    ("sequence first", r"node 'layer': batch_first=False: the IR reads its L x N x E tokens "
                       r"where a permute of N x L x E ones made them"),
    ("activation", r"node 'layer': activation <function .*>: the IR's transformer layers "
                   r"take ReLU or GELU"),
])
def test_what_a_transformer_layer_cannot_express_is_refused_naming_why(what, why):
    with pytest.raises(ModelError, match=why):
        from_torch(Layer(what).eval(), X)


class MobileViT(nn.Module):
    """A MobileViT block (Mehta and Rastegari, 2022) as apple's ml-cvnets writes it: a local
    conv, the map unfolded into 2 x 2 patches (B x C x H x W to (B P) x N x C: the batch
    merged with each patch's pixels), two pre-norm transformer layers over the patches
    (attention written out: q, k, v cut from one linear layer by a transpose), folded back
    and fused with the input."""

    def __init__(self, channels=16, dim=24, heads=4):
        super().__init__()
        torch.manual_seed(14)
        self.local = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.SiLU(),
                                   nn.Conv2d(channels, dim, 1, bias=False))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(5))
        self.qkv = nn.ModuleList(nn.Linear(dim, 3 * dim) for _ in range(2))
        self.out = nn.ModuleList(nn.Linear(dim, dim) for _ in range(2))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(dim, 2 * dim), nn.SiLU(),
                                               nn.Linear(2 * dim, dim)) for _ in range(2))
        self.project = nn.Conv2d(dim, channels, 1)
        self.fusion = nn.Conv2d(2 * channels, channels, 3, padding=1)
        self.heads, self.patch = heads, 2

    def attend(self, t, i):
        b, n, c = t.shape
        qkv = self.qkv[i](t).reshape(b, n, 3, self.heads, -1).transpose(1, 3).contiguous()
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        weights = torch.matmul(q * (c // self.heads) ** -0.5, k.transpose(-1, -2)).softmax(-1)
        return self.out[i](torch.matmul(weights, v).transpose(1, 2).reshape(b, n, -1))

    def forward(self, x):
        f, p = self.local(x), self.patch
        b, c, h, w = f.shape
        t = f.reshape(b * c * (h // p), p, w // p, p).transpose(1, 2)
        t = t.reshape(b, c, h * w // p // p, p * p).transpose(1, 3).reshape(b * p * p, -1, c)
        for i in range(2):
            t = t + self.attend(self.norms[2 * i](t), i)
            t = t + self.ffn[i](self.norms[2 * i + 1](t))
        t = self.norms[4](t).reshape(b, p * p, -1, c).transpose(1, 3)
        f = t.reshape(b * c * (h // p), w // p, p, p).transpose(1, 2).reshape(b, c, h, w)
        return self.fusion(torch.cat([x, self.project(f)], dim=1))


def windows(x, p):
    """Swin's window partition: B x H x W x C to (B nW) x p x p x C, the batch merged with
    the windows."""
    b, h, w, c = x.shape
    return x.view(b, h // p, p, w // p, p, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, p, p, c)


class Swin(nn.Module):
    """Two Swin transformer blocks (Liu et al., 2021) as the paper's code writes them, on a
    conv's patches: windows partitioned, attention with the relative position bias (a table
    gathered by constant indices), the second block's windows shifted (``torch.roll``) under
    their mask, windows reversed, the MLP."""

    def __init__(self, dim=24, p=4, heads=3, hw=8):
        super().__init__()
        torch.manual_seed(15)
        self.embed, self.head = nn.Conv2d(3, dim, 4, stride=4), nn.Conv2d(dim, 5, 1)
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(4))
        self.qkv = nn.ModuleList(nn.Linear(dim, 3 * dim) for _ in range(2))
        self.proj = nn.ModuleList(nn.Linear(dim, dim) for _ in range(2))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(),
                                               nn.Linear(2 * dim, dim)) for _ in range(2))
        self.table = nn.Parameter(torch.randn((2 * p - 1) ** 2, heads) * 0.2)
        ij = np.stack(np.meshgrid(np.arange(p), np.arange(p), indexing="ij")).reshape(2, -1)
        rel = (ij[:, :, None] - ij[:, None, :]) + p - 1
        self.register_buffer("relative", torch.from_numpy(rel[0] * (2 * p - 1) + rel[1]))
        region = np.zeros((1, hw, hw, 1), np.float32)
        for k, (a, b) in enumerate((a, b) for a in range(3) for b in range(3)):
            cuts = (slice(0, -p), slice(-p, -p // 2), slice(-p // 2, None))
            region[:, cuts[a], cuts[b]] = k
        win = windows(torch.from_numpy(region), p).reshape(-1, p * p)
        self.register_buffer("mask", ((win[:, None] - win[:, :, None]) != 0).float() * -100)
        self.dim, self.p, self.heads, self.hw = dim, p, heads, hw

    def attend(self, t, i):
        b, n, c = t.shape
        qkv = self.qkv[i](t).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q * (c // self.heads) ** -0.5) @ k.transpose(-2, -1)
        scores = scores + self.table[self.relative.view(-1)].view(n, n, -1).permute(2, 0, 1)[None]
        if i == 1:
            nw = self.mask.shape[0]
            scores = (scores.view(b // nw, nw, self.heads, n, n) + self.mask[None, :, None])
            scores = scores.view(-1, self.heads, n, n)
        return self.proj[i]((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c))

    def forward(self, x):
        f = self.embed(x)
        b, c, h, w = f.shape
        t, p, shift = f.flatten(2).transpose(1, 2), self.p, self.p // 2
        for i in range(2):
            s = self.norms[2 * i](t).view(b, h, w, c)
            s = torch.roll(s, (-shift, -shift), (1, 2)) if i else s
            s = self.attend(windows(s, p).view(-1, p * p, c), i).view(b, h // p, w // p, p, p, c)
            s = s.permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
            s = torch.roll(s, (shift, shift), (1, 2)) if i else s
            t = t + s.reshape(b, h * w, c)
            t = t + self.mlp[i](self.norms[2 * i + 1](t))
        return self.head(t.transpose(1, 2).reshape(b, c, h, w))


class ViT(nn.Module):
    """A vision transformer as timm writes it: patches by a strided conv, the class token
    expanded to the batch and joined before them (``torch.cat`` of a constant), the position
    embedding added, pre-norm blocks of timm's attention (q, k, v by ``unbind(0)`` of a
    permute that moves the batch) and MLP, the head on the class token (``x[:, 0]``)."""

    def __init__(self, dim=24, heads=3, depth=2, grid=4):
        super().__init__()
        torch.manual_seed(23)
        self.embed = nn.Conv2d(3, dim, 4, stride=4)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.5)
        self.pos_embed = nn.Parameter(torch.randn(1, grid * grid + 1, dim) * 0.5)
        self.norms = nn.ModuleList(nn.LayerNorm(dim, eps=1e-6) for _ in range(2 * depth + 1))
        self.qkv = nn.ModuleList(nn.Linear(dim, 3 * dim) for _ in range(depth))
        self.proj = nn.ModuleList(nn.Linear(dim, dim) for _ in range(depth))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(),
                                               nn.Linear(2 * dim, dim)) for _ in range(depth))
        self.heads, self.head = heads, nn.Linear(dim, 7)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        b, n, c = x.shape
        for i, (qkv, proj, mlp) in enumerate(zip(self.qkv, self.proj, self.mlp, strict=True)):
            parts = qkv(self.norms[2 * i](x)).reshape(b, n, 3, self.heads, -1)
            q, k, v = parts.permute(2, 0, 3, 1, 4).unbind(0)
            attn = ((q * (c // self.heads) ** -0.5) @ k.transpose(-2, -1)).softmax(dim=-1)
            x = x + proj((attn @ v).transpose(1, 2).reshape(b, n, c))
            x = x + mlp(self.norms[2 * i + 1](x))
        return self.head(self.norms[-1](x)[:, 0])


class PyramidBlocks(nn.Module):
    """Three attentions of hierarchical vision transformers as their authors write them:
    PVT's spatial reduction (keys and values from a strided conv of the tokens put back on
    the map, cut by a permute that moves the batch and read by indexing), SegFormer's Mix-FFN
    (a depthwise conv between two linear layers on tokens), and Swin V2's cosine window
    attention (``F.normalize`` of q and k, a clamped learned logit scale, the position bias
    from an MLP over log-spaced relative coordinates: constants computed in forward)."""

    def __init__(self, dim=16, heads=2, p=4):
        super().__init__()
        torch.manual_seed(24)
        self.embed, self.head = nn.Conv2d(3, dim, 4, stride=4), nn.Conv2d(dim, 5, 1)
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(3))
        self.q, self.kv = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim)
        self.sr, self.sr_norm = nn.Conv2d(dim, dim, 2, stride=2), nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self.dw = nn.Conv2d(2 * dim, 2 * dim, 3, padding=1, groups=2 * dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.ModuleList(
            nn.Linear(dim, dim) for _ in range(2))
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones(heads, 1, 1)) + 2.0)
        self.cpb = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, heads, bias=False))
        rel = torch.arange(-(p - 1), p, dtype=torch.float32) / (p - 1) * 8
        table = torch.stack(torch.meshgrid(rel, rel, indexing="ij"), -1)[None]
        self.register_buffer("table", torch.sign(table) * torch.log2(table.abs() + 1) / 3)
        ij = torch.stack(torch.meshgrid(torch.arange(p), torch.arange(p), indexing="ij")).flatten(1)
        rc = (ij[:, :, None] - ij[:, None, :]).permute(1, 2, 0) + p - 1
        self.register_buffer("index", rc[..., 0] * (2 * p - 1) + rc[..., 1])
        self.heads, self.p = heads, p

    def reduced(self, t, h, w):
        b, n, c = t.shape
        q = self.q(t).reshape(b, n, self.heads, c // self.heads).permute(0, 2, 1, 3)
        m = self.sr(t.permute(0, 2, 1).reshape(b, c, h, w)).reshape(b, c, -1).permute(0, 2, 1)
        kv = self.kv(self.sr_norm(m)).reshape(b, -1, 2, self.heads, c // self.heads)
        kv = kv.permute(2, 0, 3, 1, 4)
        attn = ((q @ kv[0].transpose(-2, -1)) * (c // self.heads) ** -0.5).softmax(dim=-1)
        return self.proj[0]((attn @ kv[1]).transpose(1, 2).reshape(b, n, c))

    def mix_ffn(self, t, h, w):
        t = self.fc1(t)
        b, n, c = t.shape
        return self.fc2(F.gelu(self.dw(t.transpose(1, 2).view(b, c, h, w)).flatten(2)
                               .transpose(1, 2)))

    def cosine(self, t):
        b, n, c = t.shape
        q, k, v = self.qkv(t).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        attn = attn * torch.clamp(self.logit_scale, max=math.log(100.0)).exp()
        bias = self.cpb(self.table).view(-1, self.heads)[self.index.view(-1)].view(n, n, -1)
        attn = attn + 16 * torch.sigmoid(bias.permute(2, 0, 1)).unsqueeze(0)
        return self.proj[1]((attn.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c))

    def forward(self, x):
        f = self.embed(x)
        b, c, h, w = f.shape
        p = self.p
        t = f.flatten(2).transpose(1, 2)
        t = t + self.reduced(self.norms[0](t), h, w)
        t = t + self.mix_ffn(self.norms[1](t), h, w)
        win = self.norms[2](t).view(b, h // p, p, w // p, p, c).permute(0, 1, 3, 2, 4, 5)
        win = self.cosine(win.reshape(-1, p * p, c)).view(b, h // p, w // p, p, p, c)
        t = t + win.permute(0, 1, 3, 2, 4, 5).reshape(b, h * w, c)
        return self.head(t.transpose(1, 2).reshape(b, c, h, w))


@pytest.mark.parametrize("batch", [1, 2])
def test_pvt_segformer_and_swin_v2_attentions_equal_the_module(batch):
    """``F.normalize`` of a held tensor runs on its canonical form, along its ``dim``."""
    x, net = photo((batch, 3, 32, 32)), PyramidBlocks().eval()
    graph = from_torch(net, x)
    for arch in ("systolic-32x32-ws", "sparse-pairs-32x32"):
        assert_runs_as_module(graph, net, x, arch, 1e-5)


@pytest.mark.parametrize("batch", [1, 2])
def test_a_vision_transformer_with_its_class_token_equals_the_module(batch):
    """The class token joins the patches as a constant of the Concat (``ops.Concat``'s
    ``constants``), the same for every sample."""
    x, net = photo((batch, 3, 16, 16)), ViT().eval()
    graph = from_torch(net, x)
    joins = [n.op for n in graph.nodes if isinstance(n.op, ops.Concat)]
    assert len(joins) == 1 and joins[0].constants[0][1].shape == (batch, 1, 24)
    for arch in ("systolic-32x32-ws", "input-reuse-1024"):
        assert_runs_as_module(graph, net, x, arch, 1e-5)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("name", ["mobilevit", "swin"])
def test_blocks_that_merge_the_batch_with_patches_or_windows_equal_the_module(name, batch):
    """MobileViT's patches and Swin's windows: reshapes that merge the batch with other axes,
    held as views (``torch_held``), the attention and MLP run on their canonical forms."""
    net, shape = {"mobilevit": (MobileViT, (16, 16, 12)), "swin": (Swin, (3, 32, 32))}[name]
    x, net = photo((batch, *shape)), net().eval()
    graph = from_torch(net, x)
    assert sum(isinstance(n.op, ops.MatMul) for n in graph.nodes) == 4
    for arch in ("systolic-32x32-ws", "sparse-pairs-32x32"):
        assert_runs_as_module(graph, net, x, arch, 1e-5)
