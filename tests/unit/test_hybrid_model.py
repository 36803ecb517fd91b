"""The hybrid (Qwen3-Next) model against transformers' ``Qwen3NextForCausalLM``, and its
two forms of the gated delta rule against each other."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from moeperf.targets.model.gated_deltanet import (
    LinearState,
    delta_rule_chunked,
    delta_rule_recurrent,
)
from moeperf.targets.model.hybrid import HybridMoETransformer
from moeperf.targets.model.hybrid_config import HybridConfig


def _model(seed: int = 0) -> HybridMoETransformer:
    torch.manual_seed(seed)
    model = HybridMoETransformer(HybridConfig()).eval()
    with torch.no_grad():  # norms start at zero (1 + w) or one: move them, so they count
        for name, param in model.named_parameters():
            if "norm" in name:
                param.normal_(0.0, 0.1)
    return model


def test_logits_equal_transformers_qwen3_next(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = _model()
    (tmp_path / "config.json").write_text(json.dumps(model.config.to_hf()))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    reference = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert type(reference).__name__ == "Qwen3NextForCausalLM"
    idx = torch.randint(
        0, model.config.vocab_size, (2, 150), generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        ours, theirs = model(idx).logits, reference.eval()(idx).logits
    # 150 tokens: three chunks of the chunked delta rule, one of them partial.
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-4), (ours - theirs).abs().max()


def test_chunked_and_recurrent_delta_rules_agree_from_any_state():
    gen = torch.Generator().manual_seed(2)
    b, t, h, dk, dv = 2, 100, 4, 32, 16
    q = torch.randn(b, t, h, dk, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(b, t, h, dk, generator=gen), dim=-1)
    v = torch.randn(b, t, h, dv, generator=gen)
    g = -torch.rand(b, t, h, generator=gen)
    beta = torch.rand(b, t, h, generator=gen)
    state = torch.randn(b, h, dk, dv, generator=gen)
    out_r, final_r = delta_rule_recurrent(q, k, v, g, beta, state, every_step=False)
    out_c, final_c = delta_rule_chunked(q, k, v, g, beta, state)
    assert torch.allclose(out_r, out_c, atol=1e-4) and torch.allclose(final_r, final_c, atol=1e-4)
    _, every = delta_rule_recurrent(q, k, v, g, beta, state, every_step=True)
    assert every.shape == (b, t, h, dk, dv) and torch.equal(every[:, -1], final_r)


def test_a_prompt_split_in_two_carries_the_state():
    model = _model(3)
    layer = model.linear_layers[0]
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(1, 40, layer.conv_dim, generator=gen)
    g = -torch.rand(1, 40, layer.num_v_heads, generator=gen)
    beta = torch.rand(1, 40, layer.num_v_heads, generator=gen)
    with torch.no_grad():
        whole, end = layer.core(x, g, beta, layer.zero_state(1, x.dtype))
        first, middle = layer.core(x[:, :25], g[:, :25], beta[:, :25], layer.zero_state(1, x.dtype))
        second, end2 = layer.core(x[:, 25:], g[:, 25:], beta[:, 25:], middle)
        _, every = layer.core(
            x[:, :25], g[:, :25], beta[:, :25], layer.zero_state(1, x.dtype), every_step=True
        )
    assert torch.allclose(torch.cat([first, second], dim=1), whole, atol=1e-5)
    assert torch.allclose(end2.recurrent, end.recurrent, atol=1e-5)
    assert torch.equal(end2.conv, end.conv)
    # every_step: the state after token 25 is the split's middle state
    assert isinstance(every, LinearState)
    assert torch.equal(every.conv[:, -1], middle.conv)
    assert torch.allclose(every.recurrent[:, -1], middle.recurrent, atol=1e-6)
