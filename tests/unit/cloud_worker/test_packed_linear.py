"""CPU linears through oneDNN with packed weights: same results as nn.Linear, applied by the engine's build."""

import pytest
import torch
from torch import nn

from cloud_worker.engine.config import EngineConfig
from cloud_worker.layers.packed_linear import PackedLinear, onednn_linear_available, pack_linears

needs_onednn = pytest.mark.skipif(not onednn_linear_available(), reason="this torch has no oneDNN linear")


@needs_onednn
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 7, 64, 300])
def test_packed_linear_equals_nn_linear(rows, bias):
    torch.manual_seed(rows)
    linear = nn.Linear(96, 200, bias=bias)
    x = torch.randn(rows, 96)
    with torch.no_grad():
        torch.testing.assert_close(PackedLinear(linear)(x), linear(x), rtol=1e-5, atol=1e-5)
        # a 3-D, non-contiguous input, as attention's output reaches o_proj
        x3 = torch.randn(1, 96, rows).transpose(1, 2)
        torch.testing.assert_close(PackedLinear(linear)(x3), linear(x3), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_engine_build_packs_cpu_linears_unless_told_not_to(demo_checkpoint):
    from cloud_worker.build import prepare_model

    packed = prepare_model(demo_checkpoint, EngineConfig())
    plain = prepare_model(demo_checkpoint, EngineConfig(cpu_linear="aten"))
    assert isinstance(packed.model.layers[0].self_attn.q_proj, PackedLinear)
    assert isinstance(packed.lm_head, PackedLinear)
    assert not any(isinstance(m, PackedLinear) for m in plain.modules())
    ids = torch.arange(3, 60).unsqueeze(0)
    with torch.no_grad():
        a = packed(ids, torch.arange(57).unsqueeze(0), packed.empty_cache())[0]
        b = plain(ids, torch.arange(57).unsqueeze(0), plain.empty_cache())[0]
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert torch.equal(a.argmax(-1), b.argmax(-1))


@needs_onednn
def test_int8_layers_stay_as_they_are_and_the_rest_is_packed(demo_checkpoint):
    from cloud_worker.build import prepare_model
    from cloud_worker.quantization import Int8Linear

    model = prepare_model(demo_checkpoint, EngineConfig(quantize="int8"))
    assert isinstance(model.model.layers[0].mlp.down_proj, Int8Linear)
    assert isinstance(model.lm_head, PackedLinear)  # INT8 leaves the LM head in the model's dtype


def test_nothing_to_pack_is_a_no_op():
    assert pack_linears(nn.Sequential(nn.ReLU())) == 0


def test_unknown_cpu_linear_mode_is_refused():
    with pytest.raises(ValueError, match="cpu_linear"):
        EngineConfig(cpu_linear="mkl")
