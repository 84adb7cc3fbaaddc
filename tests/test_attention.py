"""Attention and transformers through ``from_torch``: ``nn.MultiheadAttention`` (batch first),
as self-attention over a CNN's feature map (a bottleneck-transformer block: tokens from the
map, attention, back to a map) and cross-attention of other widths, without biases, with the
four projections run as the machine's layers; ``F.scaled_dot_product_attention`` of heads
cut from a conv's channels, plain, causal, under a constant bool or float mask and at its
own scale; timm's block, whose q, k, v come from a permute that moves the batch axis and are
read back by ``unbind(0)``, indexing or ``select``; a DETR-like encoder-decoder
(``nn.TransformerEncoder`` / ``Decoder`` and their layers, post- and pre-norm, ReLU and
GELU). Each against the module in float64 on several machines; what the IR does not compute
(the attention weights, computed masks, dropout, sequence-first tensors, a batch-moving
permute read otherwise) refused by name."""

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
    ("sequence first", r"node 'attn': batch_first=False: its tensors put the sequence before "
                       r"the batch, and the IR keeps the batch axis first"),
    ("sequence first, as DETR", r"nn.MultiheadAttention x1 \(node 'attn': it reads a tensor "
                                r"permuted by \(2, 0, 1\), .*; a sequence-first module: build "
                                r"it with batch_first=True \(the same weights\) and give it "
                                r"N x L x E tokens, without the permute"),
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
        return t.permute(2, 1, 0)[0]  # the channels next, not the batch


@pytest.mark.parametrize("what, why", [
    ("returned", r"forward returns a tensor permuted by \(2, 0, 1\), which moves the batch "
                 r"axis; npusim's outputs keep the batch axis first"),
    ("reshaped", r"Tensor.reshape x1 \(node 'reshape': it reads a tensor permuted by "
                 r"\(1, 0, 2\), which moves the batch axis; the IR keeps the batch axis first: "
                 r"only unbind\(0\), x\[i\] or select\(0, i\)"),
    ("channels next", r"takes an entry of the first axis of a tensor permuted by \(2, 1, 0\): "
                      r"the batch axis is not the next one"),
])
def test_a_permute_that_moves_the_batch_axis_is_refused_unless_an_entry_puts_it_back(what, why):
    with pytest.raises(ModelError, match=why):
        from_torch(Moved(what).eval(), X)


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
    ("sequence first", r"node 'layer': batch_first=False: its tensors put the sequence before "
                       r"the batch"),
    ("activation", r"node 'layer': activation <function .*>: the IR's transformer layers "
                   r"take ReLU or GELU"),
])
def test_what_a_transformer_layer_cannot_express_is_refused_naming_why(what, why):
    with pytest.raises(ModelError, match=why):
        from_torch(Layer(what).eval(), X)
