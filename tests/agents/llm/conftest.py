"""Fixtures of the LLM policy's tests: SmolLM2's tokenizer and a builder of tiny randomly
initialised LLaMA models on its vocabulary (fast on a CPU)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def tokenizer():
    """SmolLM2's tokenizer (``load_smollm2_tokenizer``), loaded once per test module."""
    from wmrl_envs.world_models.smollm2 import load_smollm2_tokenizer

    return load_smollm2_tokenizer()


def _tiny_model(tokenizer, seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture
def tiny_model():
    """``tiny_model(tokenizer, seed=0)``: a 2-layer LLaMA (hidden size 32, 4 heads) on the
    tokenizer's vocabulary, its weights drawn after ``torch.manual_seed(seed)``, in eval mode."""
    return _tiny_model
