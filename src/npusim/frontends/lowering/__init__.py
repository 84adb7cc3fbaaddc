"""One lowering for both importers: the framework-neutral rules by which each op becomes
npusim's IR, and ``Lowering``, which collects the IR nodes being built, the shapes the source
framework gave them and what could not be mapped, and makes the checked Graph.

Each importer reads its framework's graph and arguments and calls these rules; a rule
refuses parameters the IR cannot express with a ``Refusal`` saying which. The rules, by
concept: ``elementwise`` (clamps, constants as per-channel affines, broadcasting),
``padding`` (a constant pad absorbed by the conv or pool reading it; conv and pooling),
``shape`` (reshape, transpose, concat, split), ``norms`` (batch, layer, group norm, softmax,
reductions), ``resize`` (Upsample and the exact-sampling check), ``einsum`` (an equation as
a sum, a transpose, a MatMul or a linear layer), ``fuse`` (patterns joined after lowering:
ONNX's spelled-out GELU and hard swish, transposes that cancel).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ... import ops
from ...errors import LayerError, ModelError
from ...ir import Graph, Node, fold_batchnorm
from . import einsum as einsum_rules
from .elementwise import (
    LOGICAL,
    SELU_ALPHA,
    SELU_SCALE,
    binary,
    celu,
    channel_values,
    clip,
    logical_not,
    nonzero,
    per_channel,
    rounding,
    selu,
    with_constant,
)
from .fuse import cancel_transposes, fuse_gelu, fuse_hardswish
from .norms import batch_norm, group_norm, layer_norm, reduce, softmax
from .padding import (
    NO_PAD,
    Pending,
    avg_pool,
    conv,
    crop,
    max_pool,
    not_absorbed,
    pad,
    transposed_padding,
)
from .refusal import Refusal
from .resize import exact_upsample, sampling_weights, upsample_to
from .shape import (
    broadcast_to,
    channel_shuffle,
    concat,
    depth_to_space,
    expect_rank,
    gather,
    index,
    reshape,
    space_to_depth,
    split,
    swap_axes,
    tile,
    transpose,
)

__all__ = ["LOGICAL", "Lowering", "NO_PAD", "Pending", "Refusal", "SELU_ALPHA", "SELU_SCALE",
           "avg_pool",
           "batch_norm", "binary", "celu",
           "broadcast_to",
           "cancel_transposes", "channel_shuffle", "channel_values", "clip", "concat", "conv",
           "crop",
           "depth_to_space",
           "exact_upsample",
           "expect_rank", "fully_connected", "fuse_gelu", "gather", "group_norm", "index",
           "layer_norm",
           "logical_not", "max_pool", "nonzero",
           "not_absorbed", "pad", "per_channel", "reduce", "reshape", "rounding",
           "sampling_weights", "selu", "softmax",
           "space_to_depth", "split", "swap_axes", "tile", "transpose", "transposed_padding",
           "upsample_to", "with_constant"]

SHOWN_PER_KIND = 3  # nodes named per refused op type; the rest are counted


def fully_connected(weight, bias) -> ops.Conv:
    """A linear layer (weight out x in) as the IR's FC: a 1x1 conv on N x in."""
    w = np.asarray(weight, np.float32)
    return ops.Conv(np.ascontiguousarray(w)[:, :, None, None],
                    None if bias is None else np.asarray(bias, np.float32).reshape(-1))


@dataclass
class Lowering:
    """The IR nodes made so far, the shapes the source gave them, and what was refused:
    ``unsupported`` holds (op type, node) pairs, ``problems`` (op type, node, reason), and
    ``beyond_fallback`` (op type, node, reason) the nodes that the fallback, asked for,
    could not run either."""

    nodes: list = field(default_factory=list)
    expected: dict = field(default_factory=dict)
    unsupported: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    beyond_fallback: list = field(default_factory=list)

    @property
    def refused(self) -> bool:
        """Whether some node was not imported."""
        return bool(self.unsupported or self.problems or self.beyond_fallback)

    @property
    def refused_nodes(self) -> set[str]:
        """The names of the nodes not imported."""
        return {entry[1] for entry in (*self.unsupported, *self.problems,
                                       *self.beyond_fallback)}

    def add(self, name: str, op: ops.Op, inputs: tuple[str, ...], shape=None) -> str:
        """Append node ``name``; ``shape`` (if given) is the source's, checked later."""
        self.nodes.append(Node(name, op, tuple(inputs)))
        if shape is not None:
            self.expected[name] = tuple(shape)
        return name

    def take_back(self, count: int) -> None:
        """Drop the nodes added after the first ``count`` (a conversion that was not kept),
        with their expected shapes."""
        for node in self.nodes[count:]:
            self.expected.pop(node.name, None)
        del self.nodes[count:]

    def place(self, name: str, result, data_inputs, shape=None) -> str:
        """Add a converter's ``result``: an op reading ``data_inputs`` (the node's computed
        arguments, in order), or an (op, inputs) pair naming its inputs itself."""
        op, inputs = result if isinstance(result, tuple) else (result, tuple(data_inputs))
        return self.add(name, op, inputs, shape)

    def refuse(self, kind: str, name: str, why: str | None = None) -> None:
        """Note node ``name`` of op type ``kind`` as not imported: an op with no rule (no
        ``why``), or one whose parameters the IR cannot express (``why`` says which)."""
        if why is None:
            self.unsupported.append((kind, name))
        else:
            self.problems.append((kind, name, why))

    def refuse_fallback(self, kind: str, name: str, why: str | None, cannot: str) -> None:
        """Note node ``name`` as not imported with the fallback on: the IR could not express
        it (``why``: its parameters, None: no rule for the op) and the fallback ``cannot``
        run it (the reason)."""
        reason = f"the fallback cannot run it: {cannot}"
        self.beyond_fallback.append((kind, name, reason if why is None else f"{why}; {reason}"))

    def fallback(self, name: str, kind: str, call, inputs, in_shapes, out_shape) -> str:
        """Node ``name`` (op type ``kind``) computed by the framework it came from: ``call``
        takes the numpy arrays of ``inputs`` and returns float32; costed as vector work from
        its input and output sizes (``ops.Fallback``)."""
        op = ops.Fallback(kind, call, tuple(tuple(s) for s in in_shapes), tuple(out_shape))
        return self.add(name, op, tuple(inputs), out_shape)

    def linear(self, name: str, x: str, x_shape, weight, bias) -> tuple[ops.Op, tuple[str, ...]]:
        """A linear layer (weight (out, in)) over the last axis of ``x``: on N x F the
        1x1-conv FC; on N x H x W x F (channels last, as after a permute) the conv between
        two Transposes, the last of which is returned (op, inputs) for node ``name``; on
        any other N x ... x F (a sequence of tokens, N x T x F) the same on its rows as an
        N x L x 1 x F map, reshaped there and back."""
        fc = fully_connected(weight, bias)
        if len(x_shape) == 2:
            return fc, (x,)
        if len(x_shape) < 2:
            raise Refusal(f"input shape {tuple(x_shape)}: a linear layer takes N x ... x "
                          "features")
        rows = len(x_shape) != 4
        if rows:
            x = self.add(f"{name}_rows", ops.Reshape(
                (int(np.prod(x_shape[1:-1])), 1, int(x_shape[-1]))), (x,))
        first = self.add(f"{name}_to_nchw", ops.Transpose((0, 3, 1, 2)), (x,))
        mid = self.add(f"{name}_conv", fc, (first,))
        if not rows:
            return ops.Transpose((0, 2, 3, 1)), (mid,)
        last = self.add(f"{name}_to_nhwc", ops.Transpose((0, 2, 3, 1)), (mid,))
        return ops.Reshape((*(int(d) for d in x_shape[1:-1]), int(fc.weight.shape[0]))), (last,)

    def chain(self, names, op_list, x: str) -> tuple[ops.Op, tuple[str, ...]]:
        """Ops applied one after the other to ``x`` (the slices of several axes): each but
        the last added as node ``names[k]`` (one name fewer than ops); the last returned
        (op, inputs) for its node."""
        for name, op in zip(names, op_list[:-1], strict=True):
            x = self.add(name, op, (x,))
        return op_list[-1], (x,)

    def steps(self, name: str, op_list, x: str) -> tuple[ops.Op, tuple[str, ...]]:
        """``chain`` of ``op_list`` on ``x`` for node ``name``, the inner nodes named
        ``<name>_step<k>`` (``<name>_<k>`` may be the name a framework gives another node)."""
        return self.chain([f"{name}_step{k}" for k in range(len(op_list) - 1)], op_list, x)

    def einsum(self, name: str, equation: str, xs, shapes, weights):
        """``torch.einsum`` / ONNX ``Einsum`` (``lowering.einsum``) of operands ``xs`` (IR
        names of the computed ones; ``shapes``; ``weights[i]``: operand i's value when it is
        a constant, else None): an (op, inputs) pair for node ``name``, or the input's name
        when it passes through. Inner nodes are ``<name>_a<k>``, ``<name>_b<k>`` (each
        operand's arrangement) and ``<name>_matmul``."""
        labels, out = einsum_rules.parse(equation, shapes)
        computed = [w is None for w in weights]
        if len(labels) == 2 and not all(computed):
            as_in_out = einsum_rules.linear_plan(*labels, out) if computed[0] else None
            if as_in_out is None:
                raise Refusal(f"equation {equation!r} by a constant: the IR takes a computed "
                              "tensor by a constant matrix over its last axis "
                              "('...c,cd->...d')")
            w = np.asarray(weights[1], np.float32)
            return self.linear(name, xs[0], shapes[0], w.T if as_in_out else w, None)
        if not all(computed) or len(labels) > 2:
            raise Refusal(f"equation {equation!r}: the IR takes einsum of one or two computed "
                          "tensors, or of a computed tensor by a constant matrix")
        if len(labels) == 1:
            steps = einsum_rules.arrange(labels[0], out, out, shapes[0])[0]
            return self.steps(name, steps, xs[0]) if steps else xs[0]
        left, right, after = einsum_rules.product_plan(labels, out, shapes)
        a = self.sequence(f"{name}_a", left, xs[0])
        b = self.sequence(f"{name}_b", right, xs[1])
        if not after:
            return ops.MatMul(), (a, b)
        return self.steps(name, after, self.add(f"{name}_matmul", ops.MatMul(), (a, b)))

    def log_sum_exp(self, name: str, x: str, x_shape, axes, keepdims: bool):
        """``torch.logsumexp`` / ONNX ``ReduceLogSumExp`` over ``axes`` as PyTorch computes it:
        the maximum m over them (kept), log(sum(exp(x - m))) + m (and the axes then dropped
        unless ``keepdims``); an (op, inputs) pair for node ``name``."""
        top = reduce("max", axes, True, x_shape)
        m = self.add(f"{name}_max", top, (x,))
        shifted = self.add(f"{name}_shifted", ops.Elementwise("sub"), (x, m))
        total = reduce("sum", top.axes, True, x_shape)
        logged = self.sequence(f"{name}_log", [ops.Exp(), total, ops.Log()], shifted)
        kept = top.out_shape([tuple(x_shape)], name)
        if keepdims:
            return ops.Elementwise("add"), (logged, m)
        joined = self.add(f"{name}_kept", ops.Elementwise("add"), (logged, m))
        return reshape(kept, tuple(n for i, n in enumerate(kept) if i not in top.axes)), \
            (joined,)

    def attention(self, name: str, q: str, kv: tuple[str, str], shapes, projections,
                  heads: int) -> str:
        """Multi-head attention of token sequences, batch first: queries N x L x E, keys and
        values N x S x E; ``projections`` the query, key, value and output layers' (weight
        (out, in), bias or None), each a ``linear``. Per head of E / heads features:
        softmax(q k^T / sqrt(E / heads)) v (``MatMul``, ``Softmax``, ``MatMul``); the heads
        joined, then the output layer: the node ``name`` (N x L x E). Inner nodes
        ``<name>_q``, ``<name>_k``, ``<name>_v`` and their heads, ``<name>_scores``,
        ``<name>_weights``, ``<name>_mixed``, ``<name>_joined``."""
        (n, length, width), keys = shapes[0], shapes[1][1]
        size = width // heads

        def split(tag: str, x: str, x_shape, wb, rows: int, perm) -> str:
            projected = self.add(f"{name}_{tag}", *self.linear(f"{name}_{tag}", x, x_shape, *wb))
            return self.sequence(f"{name}_{tag}_heads", [
                ops.Reshape((rows, heads, size)), ops.Transpose(perm)], projected)

        query = split("q", q, shapes[0], projections[0], length, (0, 2, 1, 3))  # N h L d
        key = split("k", kv[0], shapes[1], projections[1], keys, (0, 2, 3, 1))  # N h d S
        value = split("v", kv[1], shapes[2], projections[2], keys, (0, 2, 1, 3))  # N h S d
        mixed = self.add(f"{name}_mixed", *self.attend(
            name, query, key, value, (n, heads, length, keys), 1 / np.sqrt(size)))  # N h L d
        joined = self.sequence(f"{name}_joined", [ops.Transpose((0, 2, 1, 3)),
                                                  ops.Reshape((length, width))], mixed)
        return self.add(name, *self.linear(name, joined, (n, length, width), *projections[3]))

    def attend(self, name: str, q: str, kt: str, v: str, scores_shape, scale: float,
               mask: np.ndarray | None = None) -> tuple[ops.Op, tuple[str, ...]]:
        """softmax(q kt scale + mask) v, over the last two axes (q ... x L x d, ``kt`` the keys
        transposed, ... x d x S, v ... x S x d; ``scores_shape`` ... x L x S): ``MatMul``, the
        scale, the mask (a constant: bool, True where a query attends to a key, or float,
        added), ``Softmax``, and the (op, inputs) of the last ``MatMul``. Inner nodes
        ``<name>_scores``, ``<name>_scaled``, ``<name>_masked``, ``<name>_weights``."""
        scores = self.add(f"{name}_scores", ops.MatMul(), (q, kt))
        scores = self.add(f"{name}_scaled", with_constant("mul", scores_shape,
                                                          np.float32(scale)), (scores,))
        if mask is not None and mask.dtype == bool:
            scores = self.add(f"{name}_masked", ops.Where(
                cond=mask.astype(np.float32), b=np.float32(-np.inf)), (scores,))
        elif mask is not None:
            scores = self.add(f"{name}_masked", with_constant(
                "add", scores_shape, np.asarray(mask, np.float32)), (scores,))
        weights = self.add(f"{name}_weights", ops.Softmax(axis=-1), (scores,))
        return ops.MatMul(), (weights, v)

    def gather(self, name: str, x: str, x_shape, axis: int, indices):
        """``x`` gathered along ``axis`` by constant ``indices`` (``shape.gather``): an
        (op, inputs) pair for node ``name``, or ``x`` when all is kept; rows of runs as
        nodes ``<name>_row<i>_<k>`` concatenated along ``axis``."""
        rows = gather(x_shape, axis, indices)
        if len(rows) == 1:
            return self.steps(name, rows[0], x) if rows[0] else x
        taken = tuple(self.sequence(f"{name}_row{i}_", steps, x) for i, steps in enumerate(rows))
        return ops.Concat(axis), taken

    def unfold(self, name: str, x: str, x_shape, kernel, dilation, padding, stride):
        """``F.unfold`` / ``nn.Unfold`` of an N x C x H x W map ((h, w) pairs): each
        kh x kw window's pixels, channel-major, as a column of N x (C kh kw) x L (L the
        windows, row-major), as torch's exporters write it: a zero ``Pad``, the windows'
        rows gathered (N x C x kh x P x W), then their columns (N x C x kh x P x kw x Q), a
        ``Transpose`` and a ``Reshape``; an (op, inputs) pair for node ``name``."""
        n, c, h, w = expect_rank(x_shape, 4)
        (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel, dilation, padding, stride
        p, q = ((size + 2 * pad - d * (k - 1) - 1) // s + 1 for size, pad, d, k, s in
                ((h, ph, dh, kh, sh), (w, pw, dw, kw, sw)))  # >= 1: the source checked
        if ph or pw:
            x = self.add(f"{name}_pad", ops.Pad((ph, ph, pw, pw)), (x,))
        rows = np.arange(kh)[:, None] * dh + np.arange(p) * sh
        cols = np.arange(kw)[:, None] * dw + np.arange(q) * sw
        x = self.add(f"{name}_rows",
                     *self.gather(f"{name}_rows", x, (n, c, h + 2 * ph, w + 2 * pw), 2, rows))
        x = self.add(f"{name}_cols",
                     *self.gather(f"{name}_cols", x, (n, c, kh, p, w + 2 * pw), 4, cols))
        x = self.add(f"{name}_taps", ops.Transpose((0, 1, 2, 4, 3, 5)), (x,))
        return ops.Reshape((c * kh * kw, p * q)), (x,)

    def sequence(self, prefix: str, op_list, x: str) -> str:
        """``op_list`` applied to ``x`` as nodes ``<prefix>0``, ``<prefix>1``...; the last
        node's name (``x`` when there is none)."""
        for k, op in enumerate(op_list):
            x = self.add(f"{prefix}{k}", op, (x,))
        return x

    def conv_transpose(self, name: str, x: str, weight, bias, stride, padding,
                       output_padding, groups: int) -> tuple[ops.Op, tuple[str, ...]]:
        """A transposed convolution (weight C_in x K/groups x R x S; stride, padding,
        output_padding as (h, w) pairs; dilation 1) as the convolution it is: the input with
        stride - 1 zeros inserted (a ``ZeroInsert`` node, none at stride 1), padded by
        R - 1 - padding (plus output_padding at the bottom and right), convolved at stride 1
        with the kernels flipped and their in/out channels swapped per group."""
        w = np.asarray(weight, np.float32)
        c_in, kg, r, s = w.shape
        (ph, pw), (oh, ow) = padding, output_padding
        if min(r - 1 - ph, s - 1 - pw) < 0:
            raise Refusal(f"padding {padding} larger than kernel - 1 ({r - 1}, {s - 1}): it "
                          "would crop the output")
        flipped = w.reshape(groups, c_in // groups, kg, r, s).transpose(0, 2, 1, 3, 4)
        flipped = np.ascontiguousarray(flipped.reshape(groups * kg, c_in // groups, r, s)
                                       [:, :, ::-1, ::-1])
        if tuple(stride) != (1, 1):
            x = self.add(f"{name}_zeros", ops.ZeroInsert(tuple(stride)), (x,))
        pads = (r - 1 - ph, r - 1 - ph + oh, s - 1 - pw, s - 1 - pw + ow)
        return ops.Conv(flipped, None if bias is None else np.asarray(bias, np.float32),
                        1, pads, 1, int(groups)), (x,)

    def refusal(self, where: str, supported: list[str]) -> ModelError:
        """One line grouping what was refused by op type, with counts and the first
        ``SHOWN_PER_KIND`` node names of each, then the supported list; the fallback is
        offered only where it was not asked for."""
        parts = []
        if self.unsupported:
            parts.append("unsupported ops: " + _grouped([(k, f"{n!r}") for k, n in
                                                          self.unsupported], ", "))
        if self.problems:
            parts.append("unsupported parameters: " + _grouped(
                [(k, f"node {n!r}: {why}") for k, n, why in self.problems], "; "))
        if self.beyond_fallback:
            parts.append("ops neither npusim nor its fallback can run: " + _grouped(
                [(k, f"node {n!r}: {why}") for k, n, why in self.beyond_fallback], "; "))
        offer = (" (fallback=True, --fallback: compute them in the source framework)"
                 if self.unsupported or self.problems else "")
        return ModelError(f"{where}: cannot import: {'; '.join(parts)}{offer}. Supported: "
                          f"{', '.join(supported)}")

    def graph(self, input_shape, outputs: str | dict[str, str], where: str, source: str,
              name: str | None = None) -> Graph:
        """The Graph whose output is node ``outputs`` (or, for several, label -> node in
        order), its shapes checked against the source's (``source`` says who gave them,
        e.g. 'PyTorch gives'), batch norms folded."""
        nodes = self.nodes
        if isinstance(outputs, str):
            outputs = {outputs: outputs}
        if "input" in outputs.values():  # a network that returns its input
            nodes = nodes + [Node("output", ops.Identity(), ("input",))]
            outputs = {("output" if k == "input" else k): ("output" if v == "input" else v)
                       for k, v in outputs.items()}
        kept = set(outputs.values())
        nodes = cancel_transposes(fuse_hardswish(fuse_gelu(nodes, kept), kept), kept)
        try:
            graph = Graph(nodes, input_shape, name or where, outputs=outputs, batch_free=False)
        except LayerError as e:
            raise ModelError(f"{where}: {e}") from e
        for node, shape in self.expected.items():
            if node in graph.shapes and graph.shapes[node] != shape:  # (not fused away)
                raise ModelError(f"{where}: node {node!r}: the IR computes shape "
                                 f"{graph.shapes[node]} where {source} {shape}")
        return fold_batchnorm(graph)


def _grouped(items: list[tuple[str, str]], sep: str) -> str:
    """"Erf x12 ('a', 'b', 'c', ...), Mul x1 ('m')": ``items`` of (op type, text) grouped
    by op type in order of first appearance, the first ``SHOWN_PER_KIND`` texts of each."""
    groups: dict[str, list[str]] = {}
    for kind, text in items:
        groups.setdefault(kind, []).append(text)
    return ", ".join(f"{kind} x{len(texts)} ({sep.join(texts[:SHOWN_PER_KIND])}"
                     f"{sep + '...' if len(texts) > SHOWN_PER_KIND else ''})"
                     for kind, texts in groups.items())
