"""`--quantize int8`: weight-only INT8 for the decoder's linears, a transform applied after the model is built.

The embedding and the LM head stay in the model's dtype (they dominate the
error for small vocabularies and are a small share of a large model's
weights). Apply after tensor parallelism, so each rank quantizes its shard.
"""

import torch
from torch import nn

from tandem_kernels.int8_linear import int8_linear, quantize_per_channel


class Int8Linear(nn.Module):
    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight_q, scale = quantize_per_channel(linear.weight.data)
        self.register_buffer("weight_q", weight_q)
        self.register_buffer("scale", scale.to(linear.weight.dtype))
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return int8_linear(x, self.weight_q, self.scale, self.bias)


@torch.no_grad()
def quantize_int8(model: nn.Module) -> nn.Module:
    for layer in model.model.layers:
        for parent in layer.modules():
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear):
                    setattr(parent, name, Int8Linear(child))
    return model
