"""What the PyTorch and ONNX importers share: the IR nodes being built, the shapes the source
framework gave them, what could not be mapped, and the step that makes the checked Graph."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import ops
from ..errors import LayerError, ModelError
from ..ir import Graph, Node, fold_batchnorm


@dataclass
class Lowering:
    """The IR nodes made so far, the shapes the source gave them, and what was refused."""

    nodes: list = field(default_factory=list)
    expected: dict = field(default_factory=dict)
    unsupported: list = field(default_factory=list)
    problems: list = field(default_factory=list)

    def refusal(self, where: str, supported: list[str]) -> ModelError:
        """One error naming every unsupported op and parameter, and the supported list."""
        parts = []
        if self.unsupported:
            parts.append("unsupported ops: " + ", ".join(self.unsupported))
        if self.problems:
            parts.append("unsupported parameters: " + "; ".join(self.problems))
        return ModelError(f"{where}: cannot import: {'; '.join(parts)}. Supported: "
                          f"{', '.join(supported)}")

    def graph(self, input_shape, out: str, where: str, source: str,
              name: str | None = None) -> Graph:
        """The Graph whose output is node ``out``, its shapes checked against the source's
        (``source`` says who gave them, e.g. 'PyTorch gives'), batch norms folded."""
        nodes = self.nodes
        if out == "input":  # a network that returns its input
            nodes, out = nodes + [Node("output", ops.Identity(), ("input",))], "output"
        try:
            graph = Graph(nodes, input_shape, name or where, output_name=out)
        except LayerError as e:
            raise ModelError(f"{where}: {e}") from e
        for node, shape in self.expected.items():
            if graph.shapes[node] != shape:
                raise ModelError(f"{where}: node {node!r}: the IR computes shape "
                                 f"{graph.shapes[node]} where {source} {shape}")
        return fold_batchnorm(graph)
