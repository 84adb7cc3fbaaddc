"""PyTorch's attention and transformer modules as the IR's ops:
``nn.MultiheadAttention`` (``Lowering.attention``: its four projections linear layers of the
machine, per head MatMul, Softmax, MatMul), ``nn.TransformerEncoderLayer`` and
``nn.TransformerDecoderLayer`` (attention and the feed-forward block, each with its
residual add and layer norm, after or, with ``norm_first``, before it), their stacks
``nn.TransformerEncoder`` / ``nn.TransformerDecoder`` and ``nn.Transformer``. Masks are
refused, as the IR attends to every key. A sequence-first module (``batch_first=False``,
DETR's) reads L x N x E tokens that a permute of batch-first ones made (a held tensor,
``torch_held``) as those (``tokens``) and gives its output as such a view (``in_order``);
sequence-first tokens from elsewhere are refused. Inner nodes are named
``<module>_<part>``."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from .. import ops
from . import lowering as rules
from .lowering import Refusal as _Refusal
from .lowering.batch_view import Held
from .torch_ops import Parts, Ref, computed, constant, optional_constant


def projections(m: nn.MultiheadAttention) -> list[tuple]:
    """The query, key, value and output projections of ``m`` as (weight (out, in), bias or
    None): the packed ``in_proj_weight`` cut in three as torch cuts it, or the separate
    ones of other key and value widths. Refuses what the IR does not attend with."""
    if m.bias_k is not None or m.add_zero_attn:
        raise _Refusal("add_bias_kv / add_zero_attn: the IR attends to the keys given")
    if m._qkv_same_embed_dim:
        weights = constant(m.in_proj_weight, "in_proj_weight").reshape(3, m.embed_dim, -1)
    else:
        weights = [constant(w, "projection weight")
                   for w in (m.q_proj_weight, m.k_proj_weight, m.v_proj_weight)]
    biases = ([None] * 3 if m.in_proj_bias is None
              else constant(m.in_proj_bias, "in_proj_bias").reshape(3, -1))
    return [*zip(weights, biases, strict=True),
            (constant(m.out_proj.weight, "out_proj.weight"),
             optional_constant(m.out_proj.bias, "out_proj.bias"))]


def _no_masks(*masks, is_causal=False) -> None:
    if any(mask is not None for mask in masks) or is_causal:
        raise _Refusal("a mask: the IR attends to every key")


def multihead_attention(c, m, query, key, value, key_padding_mask=None, need_weights=True,
                        attn_mask=None, average_attn_weights=True, is_causal=False):
    """``nn.MultiheadAttention``: ``Lowering.attention`` of its ``projections``, the output
    read as ``[0]``; the attention weights (``[1]``) are not computed."""
    weights = projections(m)
    _no_masks(key_padding_mask, attn_mask, is_causal=is_causal)
    q, k, v = (tokens(c, m.batch_first, t, tag) for t, tag in zip((query, key, value), "qkv",
                                                                   strict=True))
    out = c.build.attention(f"{c.name}_out" if not m.batch_first else c.name, q.name,
                            (k.name, v.name), [q.shape, k.shape, v.shape], weights,
                            m.num_heads)
    result = in_order(c, m.batch_first, Ref(out, q.shape[:2] + (m.embed_dim,)))
    return Parts(result, (result, None), "the attention weights: the IR computes the "
                 "attention's output only")


def tokens(c, batch_first: bool, x, tag: str) -> Ref:
    """The N x L x E tokens a module reads: ``x`` itself, or for a sequence-first module
    (``batch_first`` False), ``x`` (L x N x E) transposed, which a permute of batch-first
    tokens gives as a held tensor (``torch_held``): the view taken back (node
    ``<call>_<tag>_batch_first``, or none)."""
    if batch_first:
        return computed(x, 3)
    held = x.held if isinstance(x, Ref) else None
    if held is None or len(x.shape) != 3 or not held.view.transposed((1, 0, 2)).batch_first:
        raise _Refusal("batch_first=False: the IR reads its L x N x E tokens where a permute "
                       "of N x L x E ones made them (x.permute(1, 0, 2)); these are not: build "
                       "it with batch_first=True (the same weights) and give it N x L x E "
                       "tokens")
    node, _ = held.transposed(c.build, f"{c.name}_{tag}_batch_first", (1, 0, 2))
    return Ref(node, (x.shape[1], x.shape[0], x.shape[2]))


def in_order(c, batch_first: bool, out: Ref) -> Ref:
    """A module's output ``out`` (N x L x E) in its own order: as it is, or for a
    sequence-first module held as L x N x E (a view: no IR node)."""
    if batch_first:
        return out
    node, held = Held.of(out.name, out.shape).transposed(c.build, c.name, (1, 0, 2))
    return Ref(node, (out.shape[1], out.shape[0], out.shape[2]), held=held)


def _batch_first(m) -> bool:
    """Whether a transformer layer or stack ``m`` reads its tokens batch first."""
    layer = m.layers[0] if hasattr(m, "layers") else m
    return layer.self_attn.batch_first


class _Layer:
    """The IR nodes of one transformer layer ``m`` of ``build``, named ``<name>_<part>``, on
    tokens of ``shape`` (N x L x E)."""

    def __init__(self, build, name: str, m, shape):
        self.build, self.name, self.m, self.shape = build, name, m, tuple(shape)

    def norm(self, tag: str, ln: nn.LayerNorm, x: str) -> str:
        return self.build.add(f"{self.name}_{tag}", rules.layer_norm(
            ln.normalized_shape, optional_constant(ln.weight, "weight"),
            optional_constant(ln.bias, "bias"), ln.eps), (x,))

    def attend(self, tag: str, attn: nn.MultiheadAttention, x: str, memory: Ref | None = None):
        kv = (x, x) if memory is None else (memory.name, memory.name)
        kv_shape = self.shape if memory is None else memory.shape
        return self.build.attention(f"{self.name}_{tag}", x, kv, [self.shape, kv_shape,
                                                                  kv_shape],
                                    projections(attn), attn.num_heads)

    def feed_forward(self, x: str) -> str:
        m, build, name = self.m, self.build, self.name
        inner = (*self.shape[:2], m.linear1.out_features)
        h = build.add(f"{name}_ff1", *build.linear(f"{name}_ff1", x, self.shape, constant(
            m.linear1.weight, "linear1.weight"), optional_constant(m.linear1.bias, "bias")))
        h = build.add(f"{name}_act", activation(m.activation), (h,))
        return build.add(f"{name}_ff2", *build.linear(f"{name}_ff2", h, inner, constant(
            m.linear2.weight, "linear2.weight"), optional_constant(m.linear2.bias, "bias")))

    def residual(self, tag: str, x: str, block, norm: nn.LayerNorm) -> str:
        """x + block(x) normed after (or, with ``norm_first``, block of x normed first)."""
        if self.m.norm_first:
            return self.build.add(f"{self.name}_{tag}_add", ops.Add(),
                                  (x, block(self.norm(f"{tag}_norm", norm, x))))
        summed = self.build.add(f"{self.name}_{tag}_add", ops.Add(), (x, block(x)))
        return self.norm(f"{tag}_norm", norm, summed)


def activation(fn) -> ops.Op:
    """The IR op of a transformer layer's activation: ReLU or GELU, given as torch's
    functions or modules."""
    if fn is F.relu or isinstance(fn, nn.ReLU):
        return ops.Relu()
    if fn is F.gelu:
        return ops.Gelu("none")
    if isinstance(fn, nn.GELU):
        return ops.Gelu(fn.approximate)
    raise _Refusal(f"activation {fn!r}: the IR's transformer layers take ReLU or GELU")


def encoder_layer(build, name: str, m: nn.TransformerEncoderLayer, x: Ref) -> Ref:
    """Self-attention, then the feed-forward block, each a ``_Layer.residual``."""
    layer = _Layer(build, name, m, x.shape)
    y = layer.residual("attn", x.name, lambda t: layer.attend("attn", m.self_attn, t), m.norm1)
    return Ref(layer.residual("ff", y, layer.feed_forward, m.norm2), x.shape)


def decoder_layer(build, name: str, m: nn.TransformerDecoderLayer, x: Ref, memory: Ref) -> Ref:
    """Self-attention, attention to ``memory``, then the feed-forward block, each a
    ``_Layer.residual``."""
    layer = _Layer(build, name, m, x.shape)
    y = layer.residual("attn", x.name, lambda t: layer.attend("attn", m.self_attn, t), m.norm1)
    y = layer.residual("cross", y, lambda t: layer.attend("cross", m.multihead_attn, t,
                                                          memory), m.norm2)
    return Ref(layer.residual("ff", y, layer.feed_forward, m.norm3), x.shape)


def transformer_encoder_layer(c, m, src, src_mask=None, src_key_padding_mask=None,
                              is_causal=False):
    """``nn.TransformerEncoderLayer``: ``encoder_layer``."""
    _no_masks(src_mask, src_key_padding_mask, is_causal=is_causal)
    first = _batch_first(m)
    name = c.name if first else f"{c.name}_out"
    return in_order(c, first, encoder_layer(c.build, name, m, tokens(c, first, src, "src")))


def transformer_decoder_layer(c, m, tgt, memory, tgt_mask=None, memory_mask=None,
                              tgt_key_padding_mask=None, memory_key_padding_mask=None,
                              tgt_is_causal=False, memory_is_causal=False):
    """``nn.TransformerDecoderLayer``: ``decoder_layer`` on the memory given."""
    _no_masks(tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
              is_causal=tgt_is_causal or memory_is_causal)
    first = _batch_first(m)
    name = c.name if first else f"{c.name}_out"
    return in_order(c, first, decoder_layer(c.build, name, m, tokens(c, first, tgt, "tgt"),
                                            tokens(c, first, memory, "memory")))


def transformer_encoder(c, m, src, mask=None, src_key_padding_mask=None, is_causal=None):
    """``nn.TransformerEncoder``: its layers one after the other (``<name>_<k>``), then its
    norm, if any."""
    _no_masks(mask, src_key_padding_mask, is_causal=bool(is_causal))
    first = _batch_first(m)
    return _final_norm(c, first, m.norm, _layers(c.build, c.name, m, tokens(c, first, src,
                                                                             "src")))


def transformer_decoder(c, m, tgt, memory, tgt_mask=None, memory_mask=None,
                        tgt_key_padding_mask=None, memory_key_padding_mask=None,
                        tgt_is_causal=None, memory_is_causal=False):
    """``nn.TransformerDecoder``: its layers one after the other, each attending to
    ``memory``, then its norm, if any."""
    _no_masks(tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
              is_causal=bool(tgt_is_causal) or memory_is_causal)
    first = _batch_first(m)
    x, memory = tokens(c, first, tgt, "tgt"), tokens(c, first, memory, "memory")
    return _final_norm(c, first, m.norm, _layers(c.build, c.name, m, x, memory))


def transformer(c, m, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
    """``nn.Transformer``: its encoder's layers and norm on ``src`` (``<name>_encoder_<k>``,
    ``<name>_encoder_norm``), then its decoder's on ``tgt``, attending to the encoder's
    output, the decoder's norm the node ``c.name``."""
    _no_masks(src_mask, tgt_mask, memory_mask, src_key_padding_mask, tgt_key_padding_mask,
              memory_key_padding_mask, is_causal=bool(src_is_causal) or bool(tgt_is_causal)
              or memory_is_causal)
    first = m.batch_first
    memory = _layers(c.build, f"{c.name}_encoder", m.encoder, tokens(c, first, src, "src"))
    if m.encoder.norm is not None:
        memory = Ref(c.build.add(f"{c.name}_encoder_norm", _norm(m.encoder.norm),
                                 (memory.name,)), memory.shape)
    x = _layers(c.build, f"{c.name}_decoder", m.decoder, tokens(c, first, tgt, "tgt"), memory)
    return _final_norm(c, first, m.decoder.norm, x)


def _layers(build, name: str, m, x: Ref, memory: Ref | None = None) -> Ref:
    """A stack's layers one after the other (``<name>_<k>``): encoder layers, or decoder
    layers attending to ``memory``."""
    for k, layer in enumerate(m.layers):
        x = encoder_layer(build, f"{name}_{k}", layer, x) if memory is None else \
            decoder_layer(build, f"{name}_{k}", layer, x, memory)
    return x


def _norm(norm: nn.LayerNorm) -> ops.Op:
    return rules.layer_norm(norm.normalized_shape, optional_constant(norm.weight, "weight"),
                            optional_constant(norm.bias, "bias"), norm.eps)


def _final_norm(c, batch_first: bool, norm: nn.LayerNorm | None, x: Ref):
    """A stack's last layer norm as node ``c.name`` (``<call>_out`` for a sequence-first
    stack), or its last layer's tokens, in the stack's order (``in_order``)."""
    if norm is not None:
        op = _norm(norm)
        if batch_first:
            return op, (x.name,)
        x = Ref(c.build.add(f"{c.name}_out", op, (x.name,)), x.shape)
    return in_order(c, batch_first, x)
