"""The grouped inverted-bottleneck block family of seed 003 (Fig. 4) and network builders
(Fig. 5), including a MobileNet-EdgeTPU-V2-like classifier (``build``)."""

from .ibn import GROUPED, KINDS, BlockSpec, ConvPlan, macs, params, plan, validate
from .network import (
                      EDGETPU_V2_S,
                      apply_group_sizes,
                      build,
                      build_network,
                      edgetpu_v2_blocks,
                      grouped_channels,
                      interleave,
                      replace_kinds,
                      with_group_size,
)

__all__ = ["EDGETPU_V2_S", "GROUPED", "KINDS", "BlockSpec", "ConvPlan", "apply_group_sizes",
           "build", "build_network", "edgetpu_v2_blocks", "grouped_channels", "interleave",
           "macs", "params", "plan", "replace_kinds", "validate", "with_group_size"]
