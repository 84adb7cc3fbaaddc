"""``npusim run --check``: how far npusim's outputs are from PyTorch's, and the verdict.

The relative error of a node is ``max |npusim - torch| / max |torch|`` over its output.

- float32: every node of the network against torch (``torch_ref``) on the same input,
  end to end; the verdict is the worst node's error against ``FLOAT32_TOLERANCE``. A
  quantised graph (one with ``FakeQuant`` nodes, a QDQ model's) is compared node by node,
  each node against torch on the inputs npusim gave it: a value at a rounding boundary
  goes one way or the other by float32's last bit, and a step of the grid moved that way
  would fail an end-to-end comparison of two correct runs.
- int8: int8 outputs cannot equal float ones; what can be judged is that each conv's
  int8 result equals its float result up to the rounding the int8 scheme allows. Each
  conv is compared with torch's float32 conv of the same input npusim gave it (so error
  of earlier layers does not count twice), element by element, against ``int8_bound``;
  the verdict is the worst ratio error / bound against 1.

Both report each network output's error against float32 torch end to end (not judged;
``output_error`` is the largest, ``output_errors`` each by its label). Those compare the
graph npusim imported with torch's run of that same graph (``torch_ref``): they judge the
machines' arithmetic, not the import. The model's own framework judges the import: a model
read from an ONNX file is also run by onnxruntime on the same input, and a PyTorch
factory's module (the one imported) by torch: its outputs, in order, against npusim's end
to end (``onnxruntime_error``, ``module_error``: the largest); in float32 that is judged
against the same tolerance, but for a quantised graph (end to end, as above). Where
onnxruntime's outputs are off that tolerance, onnx's reference evaluator (the spec's
arithmetic) runs the file too, and the nearer of the two is judged (``onnx_reference_error``:
onnxruntime rounds some nearest Resizes otherwise than the spec and PyTorch). Not when
npusim's weights are no longer the model's (pruned): ``onnxruntime_skipped`` or
``module_skipped`` then says why. Needs the ``torch`` extra.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .. import quant
from ..errors import ModelError, one_line
from ..ir import Graph, Node

FLOAT32_TOLERANCE = 1e-4  # relative error; also the slack for torch's own float32 rounding
INT8_LIMIT = 1.0  # error / rounding bound
COMPARED = {"float32": "every node against torch, end to end; score = relative error",
            "float32 node by node": "every node against torch on npusim's inputs to it (a "
                                    "quantised graph); score = relative error",
            "int8": "each conv against torch float32 on the same input; score = worst error "
                    "over its int8 rounding bound"}


@dataclass(frozen=True)
class CheckOutcome:
    """Worst relative error and its node; the verdict's ``score`` (the worst relative error
    in float32, the worst error / rounding bound in int8) at ``score_node``, against
    ``limit``; the network outputs' errors against float32 torch end to end (the
    largest, and each by its label: several for a model returning a tuple or dict); and
    their error against onnxruntime's run of the model's ONNX file, or why it was not run
    (``onnxruntime_skipped``)."""

    dtype: str
    worst: float
    node: str
    nodes: int
    score: float
    score_node: str
    limit: float
    output_error: float
    output_errors: dict = dataclasses.field(default_factory=dict)
    onnxruntime_error: float | None = None
    onnxruntime_skipped: str | None = None
    node_by_node: bool = False  # float32 nodes each on npusim's inputs (a quantised graph)
    module_error: float | None = None
    module_skipped: str | None = None
    onnx_reference_error: float | None = None  # run where onnxruntime's error is over limit

    @property
    def passed(self) -> bool:
        judged = self.dtype == "float32" and not self.node_by_node
        ort, spec = self.onnxruntime_error, self.onnx_reference_error
        if spec is not None:  # the spec's arithmetic may decide, or alone where onnxruntime
            ort = spec if ort is None else min(ort, spec)  # cannot run the file
        own = [e for e in (ort, self.module_error) if e is not None]
        return self.score <= self.limit and not (judged and any(e > self.limit for e in own))

    @property
    def comparison(self) -> str:
        """Which comparison was made (``COMPARED``'s key)."""
        return "float32 node by node" if self.node_by_node else self.dtype

    def as_dict(self) -> dict:
        """The JSON report's ``check`` object (docs/json-schema.md)."""
        return {"compared": COMPARED[self.comparison], "worst_relative_error": self.worst,
                "node": self.node, "nodes_compared": self.nodes, "score": self.score,
                "score_node": self.score_node, "limit": self.limit,
                "output_relative_error": self.output_error,
                "output_relative_errors": self.output_errors,
                "onnxruntime_relative_error": self.onnxruntime_error,
                "onnxruntime_not_compared": self.onnxruntime_skipped,
                "onnx_reference_relative_error": self.onnx_reference_error,
                "module_relative_error": self.module_error,
                "module_not_compared": self.module_skipped, "passed": self.passed}

    def line(self) -> str:
        """The outcome as one line of text, ending in 'ok' or 'FAILED' (then the drift)."""
        verdict = "ok" if self.passed else "FAILED"
        ort = (_against("onnxruntime", self.onnxruntime_error, self.onnxruntime_skipped)
               + _against("the PyTorch module", self.module_error, self.module_skipped))
        if self.onnx_reference_error is not None:
            ort += (f" (against onnx's reference evaluator, the ONNX spec's arithmetic: "
                    f"{self.onnx_reference_error:.3g})")
        if self.node_by_node:
            return (f"check against torch, {self.nodes} nodes each on npusim's inputs to it "
                    f"(a quantised graph): worst relative error {self.worst:.3g} at "
                    f"{self.node} (tolerance {self.limit:g}): {verdict}; not judged, as "
                    "a last float32 bit can move a value a rounding step: network output "
                    f"vs torch end to end: {self.output_error:.3g}{ort}")
        if self.dtype == "float32":
            return (f"check against torch, {self.nodes} nodes: worst relative error "
                    f"{self.worst:.3g} at {self.node}{ort} (tolerance {self.limit:g}): "
                    f"{verdict}")
        return (f"check against torch float32, {self.nodes} convs on their own int8-run "
                f"inputs: worst relative error {self.worst:.3g} at {self.node}; worst error "
                f"/ int8 rounding bound {self.score:.3g} at {self.score_node} (limit "
                f"{self.limit:g}): {verdict}; network output vs float32: {self.output_error:.3g}"
                f"{ort}")


def _against(what: str, error: float | None, skipped: str | None) -> str:
    """The line's part on the model's own framework (empty when not run)."""
    if skipped:
        return f"; outputs against {what}: not compared ({skipped})"
    return "" if error is None else f"; outputs against {what}: {error:.3g}"


def relative_error(a: np.ndarray, ref: np.ndarray) -> float:
    """max |a - ref| / max |ref| in float64, over ref's finite values (the absolute error
    when they are all zero). Where both hold the same value, an infinity or a NaN
    included (an attention's masked scores, -inf in both), the error is 0; where only one
    is not finite, it is infinite: a NaN is never passed over."""
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    if not ref.size:
        return 0.0
    same = (a == ref) | (np.isnan(a) & np.isnan(ref))
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(a - ref))
    if np.isnan(diff).any():
        return float("inf")
    finite = np.abs(ref[np.isfinite(ref)])
    scale = float(finite.max()) if finite.size else 0.0
    worst = float(diff.max())
    return worst / scale if scale else worst


def onnxruntime_error(onnx_path, graph: Graph, x: np.ndarray, result) -> float:
    """The largest relative error of npusim's network outputs against onnxruntime's run of
    the ONNX file on ``x`` (outputs matched in the file's order)."""
    import onnxruntime

    try:
        session = onnxruntime.InferenceSession(str(onnx_path),
                                               providers=["CPUExecutionProvider"])
        reference = session.run(None, {session.get_inputs()[0].name: x.astype(np.float32)})
    except Exception as e:  # noqa: BLE001  (onnxruntime's own exception types, pybind's)
        raise OnnxruntimeCannotRun(f"{type(e).__name__}: {one_line(e)}") from None
    return _outputs_error(graph, result, reference)


class OnnxruntimeCannotRun(Exception):
    """onnxruntime refuses to run an ONNX file (a dilated conv with auto_pad SAME_UPPER):
    onnx's reference evaluator judges it instead, where it can."""


def onnx_reference_error(onnx_path, graph: Graph, x: np.ndarray, result) -> float | None:
    """The same against onnx's reference evaluator (the ONNX spec's arithmetic in numpy), or
    None where it cannot run the file: where onnxruntime rounds otherwise (a nearest Resize
    of 14 pixels to 4 samples row 6 in onnxruntime, row 7 by the spec, PyTorch and npusim)."""
    from onnx.reference import ReferenceEvaluator

    try:
        session = ReferenceEvaluator(str(onnx_path))
        reference = session.run(None, {session.input_names[0]: x.astype(np.float32)})
    except Exception:  # noqa: BLE001  (the evaluator lacks ops onnxruntime has)
        return None
    return _outputs_error(graph, result, reference)


def module_error(module, graph: Graph, x: np.ndarray, result) -> float:
    """The largest relative error of npusim's network outputs against the torch module's
    own run on ``x`` (outputs in the order forward returns them)."""
    from ..frontends.torch_import import module_outputs

    return _outputs_error(graph, result, module_outputs(module, x))


def _outputs_error(graph: Graph, result, reference: list) -> float:
    ours = [result.outputs[node] for node in graph.outputs.values()]
    return max(relative_error(a, ref) for a, ref in zip(ours, reference, strict=False))


def check(graph: Graph, x: np.ndarray, result, own=None,
          own_skipped: str | None = None) -> CheckOutcome:
    """Compare ``result`` (a ``SimResult`` run with ``keep_outputs``) of ``graph`` on ``x``
    with PyTorch, and with the model's own framework (``own``: the ONNX file the graph came
    from, which onnxruntime runs, or the torch module it was imported from), as the module
    docstring describes; ``own_skipped``: why ``own`` is not run (its weights are not the
    graph's), reported instead."""
    from pathlib import Path

    from .. import ops
    from ..torch_ref import torch_node_outputs, torch_outputs

    from_file = isinstance(own, (str, Path))
    ort = mod = None
    facts = {"onnxruntime_skipped" if from_file else "module_skipped": own_skipped}
    if own is not None and not own_skipped:
        try:
            ort = onnxruntime_error(own, graph, x, result) if from_file else None
        except OnnxruntimeCannotRun as e:
            facts["onnx_reference_error"] = onnx_reference_error(own, graph, x, result)
            if facts["onnx_reference_error"] is None:
                raise ModelError(f"{own}: neither onnxruntime ({e}) nor onnx's reference "
                                 "evaluator can run it for --check; run without --check") \
                    from None
            facts["onnxruntime_skipped"] = (f"onnxruntime cannot run it ({e}); judged by onnx's "
                                            "reference evaluator")
        mod = None if from_file else module_error(own, graph, x, result)
    quantised = any(isinstance(n.op, ops.FakeQuant) for n in graph.nodes)  # not judged so
    if ort is not None and ort > FLOAT32_TOLERANCE and result.dtype == "float32" \
            and not quantised:
        facts["onnx_reference_error"] = onnx_reference_error(own, graph, x, result)
    reference = torch_outputs(graph, x)
    output_errors = {label: relative_error(result.outputs[out], reference[out])
                     for label, out in graph.outputs.items()}
    output_error = max(output_errors.values())
    if result.dtype == "float32":
        if quantised:
            reference = torch_node_outputs(graph, result.outputs)
        errors = [(relative_error(result.outputs[n.name], reference[n.name]), n.name)
                  for n in graph.nodes]
        worst, node = max(errors)
        return CheckOutcome("float32", worst, node, len(errors), worst, node,
                            FLOAT32_TOLERANCE, output_error, output_errors, ort,
                            node_by_node=quantised, module_error=mod, **facts)
    rows = [_int8_conv_check(n, result.outputs[n.inputs[0]], result.outputs[n.name])
            for n in graph.conv_nodes]
    (worst, node), (score, score_node) = max(r[0] for r in rows), max(r[1] for r in rows)
    return CheckOutcome("int8", worst, node, len(rows), score, score_node, INT8_LIMIT,
                        output_error, output_errors, ort, module_error=mod, **facts)


def torch_conv(node: Node, op, x: np.ndarray) -> np.ndarray:
    """Torch's float32 output of the conv ``op``, standing in ``node``'s place, on ``x``."""
    from ..torch_ref import torch_outputs

    alone = Graph([Node(node.name, op, ("input",))], x.shape, node.name)
    return torch_outputs(alone, x)[node.name]


def int8_bound(node: Node, x: np.ndarray, y_int8: np.ndarray) -> np.ndarray:
    """Per output element, the most the int8 scheme's rounding can move a conv's output.

    With the scales of ``quant`` (s_x input, s_w[k] weights, s_y output) and each value
    rounded to the nearest step: |x_q s_x - x| <= s_x/2, |w_q s_w - w| <= s_w/2, so
    |y_int8 - y| <= s_w/2 * sum(|x| + s_x/2) + s_x/2 * sum|w| + s_x s_w/2 (bias) + s_y/2,
    the sums over each output's receptive field, computed as convs of |x| and |w|.
    ``y_int8`` is the dequantised int8 output (its largest value is 127 s_y)."""
    op = node.op
    _, sx = quant.quantize_activations(x)
    _, sw = quant.quantize_weights(op.weight)
    sw = quant.bias_fitted_scales(sw, op.bias, sx).astype(np.float32).reshape(-1, 1, 1, 1)
    half_step = dataclasses.replace(op, weight=np.broadcast_to(sw / 2, op.weight.shape).copy(),
                                    bias=None)
    magnitude = dataclasses.replace(op, weight=np.abs(op.weight), bias=None)
    bound = (torch_conv(node, half_step, np.abs(x) + sx / 2)
             + torch_conv(node, magnitude, np.full_like(x, sx / 2)))
    bias = sx * sw.reshape((1, -1) + (1,) * (bound.ndim - 2)) / 2 if op.bias is not None else 0
    sy = float(np.abs(y_int8).max()) / quant.QMAX
    return bound + bias + sy / 2


def _int8_conv_check(node: Node, x: np.ndarray, y: np.ndarray):
    """((relative error, name), (worst error / rounding bound, name)) of one int8 conv."""
    ref = torch_conv(node, node.op, x)
    slack = FLOAT32_TOLERANCE * float(np.abs(ref).max())
    err = np.abs(y.astype(np.float64) - ref)
    with np.errstate(divide="ignore", invalid="ignore"):  # no error where the bound is 0: ok
        ratio = np.where(err == 0, 0.0, err / (int8_bound(node, x, y) + slack))
    return (relative_error(y, ref), node.name), (float(ratio.max()), node.name)
