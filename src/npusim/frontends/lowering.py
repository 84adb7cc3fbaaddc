"""What the PyTorch and ONNX importers share: the IR nodes being built, the shapes the source
framework gave them, what could not be mapped, and the step that makes the checked Graph."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import ops
from ..errors import LayerError, ModelError
from ..ir import Graph, Node, fold_batchnorm

SHOWN_PER_KIND = 3  # nodes named per refused op type; the rest are counted


@dataclass
class Lowering:
    """The IR nodes made so far, the shapes the source gave them, and what was refused:
    ``unsupported`` holds (op type, node) pairs, ``problems`` (op type, node, reason)."""

    nodes: list = field(default_factory=list)
    expected: dict = field(default_factory=dict)
    unsupported: list = field(default_factory=list)
    problems: list = field(default_factory=list)

    def refusal(self, where: str, supported: list[str]) -> ModelError:
        """One line grouping what was refused by op type, with counts and the first
        ``SHOWN_PER_KIND`` node names of each, then the supported list."""
        parts = []
        if self.unsupported:
            parts.append("unsupported ops: " + _grouped([(k, f"{n!r}") for k, n in
                                                          self.unsupported], ", "))
        if self.problems:
            parts.append("unsupported parameters: " + _grouped(
                [(k, f"node {n!r}: {why}") for k, n, why in self.problems], "; "))
        return ModelError(f"{where}: cannot import: {'; '.join(parts)}. Supported: "
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
        try:
            graph = Graph(nodes, input_shape, name or where, outputs=outputs)
        except LayerError as e:
            raise ModelError(f"{where}: {e}") from e
        for node, shape in self.expected.items():
            if graph.shapes[node] != shape:
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
