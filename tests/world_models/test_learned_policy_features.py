"""The policy's own backbone as the learned world model's featurizer (issue 28): its features come
from the FROZEN backbone (LoRA adapters disabled during featurization), so they do not drift as the
adapters train, and the AutoResearch text is the compact task text + the estimator line."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


class _Tok:  # a byte-level tokenizer (no download)
    pad_token, eos_token, pad_token_id, eos_token_id = None, "\0", None, 0

    def __init__(self):
        self.texts: list[str] = []

    def __call__(self, text, add_special_tokens=True):
        self.texts.append(text)
        return {"input_ids": [v % 300 for v in text.encode()]}


def _lora_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256)
    base = LlamaForCausalLM(cfg)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    return model


def test_policy_features_come_from_the_frozen_backbone_while_the_adapters_train():
    from wmrl_envs.envs.autoresearch.learned_features import autoresearch_policy_featurizer, autoresearch_policy_world_model

    model, tok = _lora_model(), _Tok()
    ctx, code = [{"task_id": "credit-default"}], ["import x\nmodel = Ridge(alpha=1.0)\nmodel.fit(X, y)\n"]
    frozen = autoresearch_policy_featurizer(model, tok)
    live = autoresearch_policy_featurizer(model, tok, disable_adapters=False)
    before = frozen(ctx, code)
    for p in model.parameters():  # the adapters "train": LoRA B is no longer 0
        if p.requires_grad:
            p.data.add_(0.5)
    model.train()
    after = frozen(ctx, code)
    assert model.training  # its mode and the adapters' requires_grad are given back
    assert all(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)
    np.testing.assert_array_equal(before, after)  # no drift: the adapters were off
    assert not np.allclose(live(ctx, code), before, atol=1e-4)  # with them on, the features move
    # the text: the compact task text, then the solution's estimator line (not the whole prompt)
    from wmrl_envs.envs.autoresearch.embedding_world_model import describe_task

    assert tok.texts[-2:] == [f"Task: {describe_task('credit-default')}\nSolution: ", "model = Ridge(alpha=1.0)"]
    wm = autoresearch_policy_world_model(model, tok)
    assert wm.refit_every == 1 and wm.featurizer.dim == 16
