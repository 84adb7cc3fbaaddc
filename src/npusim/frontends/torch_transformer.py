"""PyTorch's attention and transformer modules, batch first, as the IR's ops:
``nn.MultiheadAttention`` (``Lowering.attention``: its four projections linear layers of the
machine, per head MatMul, Softmax, MatMul), ``nn.TransformerEncoderLayer`` and
``nn.TransformerDecoderLayer`` (attention and the feed-forward block, each with its
residual add and layer norm, after or, with ``norm_first``, before it) and their stacks
``nn.TransformerEncoder`` / ``nn.TransformerDecoder``. Masks are refused, as the IR
attends to every key; so are sequence-first modules (``batch_first=False``), whose tensors
put the batch second. Inner nodes are named ``<module>_<part>``."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from .. import ops
from . import lowering as rules
from .lowering import Refusal as _Refusal
from .torch_ops import Parts, Ref, computed, constant, optional_constant


def projections(m: nn.MultiheadAttention) -> list[tuple]:
    """The query, key, value and output projections of ``m`` as (weight (out, in), bias or
    None): the packed ``in_proj_weight`` cut in three as torch cuts it, or the separate
    ones of other key and value widths. Refuses what the IR does not attend with."""
    if not m.batch_first:
        raise _Refusal("batch_first=False: its tensors put the sequence before the batch, and "
                       "the IR keeps the batch axis first; build it with batch_first=True "
                       "(the same weights) and give it N x L x E tokens")
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
    q, k, v = (computed(t, 3) for t in (query, key, value))
    out = c.build.attention(c.name, q.name, (k.name, v.name), [q.shape, k.shape, v.shape],
                            weights, m.num_heads)
    result = Ref(out, q.shape[:2] + (m.embed_dim,))
    return Parts(result, (result, None), "the attention weights: the IR computes the "
                 "attention's output only")


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
    return encoder_layer(c.build, c.name, m, computed(src, 3))


def transformer_decoder_layer(c, m, tgt, memory, tgt_mask=None, memory_mask=None,
                              tgt_key_padding_mask=None, memory_key_padding_mask=None,
                              tgt_is_causal=False, memory_is_causal=False):
    """``nn.TransformerDecoderLayer``: ``decoder_layer`` on the memory given."""
    _no_masks(tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
              is_causal=tgt_is_causal or memory_is_causal)
    return decoder_layer(c.build, c.name, m, computed(tgt, 3), computed(memory, 3))


def transformer_encoder(c, m, src, mask=None, src_key_padding_mask=None, is_causal=None):
    """``nn.TransformerEncoder``: its layers one after the other (``<name>_<k>``), then its
    norm, if any."""
    _no_masks(mask, src_key_padding_mask, is_causal=bool(is_causal))
    x = computed(src, 3)
    for k, layer in enumerate(m.layers):
        x = encoder_layer(c.build, f"{c.name}_{k}", layer, x)
    return _final_norm(c, m.norm, x)


def transformer_decoder(c, m, tgt, memory, tgt_mask=None, memory_mask=None,
                        tgt_key_padding_mask=None, memory_key_padding_mask=None,
                        tgt_is_causal=None, memory_is_causal=False):
    """``nn.TransformerDecoder``: its layers one after the other, each attending to
    ``memory``, then its norm, if any."""
    _no_masks(tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
              is_causal=bool(tgt_is_causal) or memory_is_causal)
    x, memory = computed(tgt, 3), computed(memory, 3)
    for k, layer in enumerate(m.layers):
        x = decoder_layer(c.build, f"{c.name}_{k}", layer, x, memory)
    return _final_norm(c, m.norm, x)


def _final_norm(c, norm: nn.LayerNorm | None, x: Ref):
    """A stack's last layer norm as node ``c.name``, or its last layer's tokens."""
    if norm is None:
        return x
    return rules.layer_norm(norm.normalized_shape, optional_constant(norm.weight, "weight"),
                            optional_constant(norm.bias, "bias"), norm.eps), (x.name,)
