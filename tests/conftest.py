"""Session-wide test settings.

The AutoResearch tasks draw their data from the installation's task secret
(:mod:`wmrl_envs.envs.autoresearch.secret`). The suite runs under the documented reference
secret, so that the shipped ``leaderboards.json`` applies and pinned values are reproducible,
and with ``WMRL_HOME`` in a private temporary folder, so that no test reads or creates the
user's own secret file or leaderboard cache. Both are set when this file is imported, before
any test module (or subprocess it starts) can generate task data; tests that need another
secret override them with ``monkeypatch``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

from wmrl_envs.envs.autoresearch.secret import HOME_ENV_VAR, REFERENCE_SECRET, SECRET_ENV_VAR

os.environ[SECRET_ENV_VAR] = REFERENCE_SECRET
_HOME = tempfile.mkdtemp(prefix="wmrl-test-home-")
os.environ[HOME_ENV_VAR] = _HOME
atexit.register(shutil.rmtree, _HOME, True)


@pytest.fixture(scope="session")
def tiny_llama_folder(tmp_path_factory):
    """A tiny random LLaMA (2 layers, hidden 32) with SmolLM2's real tokenizer and chat template,
    written as ``save_pretrained`` writes any hub model: "another backbone" given as a folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from wmrl_envs.world_models.smollm2 import load_smollm2_tokenizer

    tok = load_smollm2_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(cfg).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


@pytest.fixture
def make_summary():
    """``make_summary(**fields)``: a :func:`agents.train.summary.summarise`-shaped dict of a
    4-group run (16 rollouts, one anchor group) with ``fields`` set, for the summary's renderers."""
    def build(**fields):
        s = {
            "rollouts": 16, "sandbox_backend": "bubblewrap", "real_executions": 4, "world_model_predictions": 16,
            "world_model_calls": {}, "anchor_groups": 1, "groups": 4, "realised_anchor_fraction": 0.25,
            "configured_anchor_fraction": 0.25,
            "seconds": dict.fromkeys(("execution", "world_model", "generation", "update"), 1.0),
            "seconds_per_execution": 1.0, "seconds_per_world_model_prediction": 0.1, "rho": 1.0, "anchor_pairs": 3,
            "debiaser_fitted": True, "calibration_mae_raw": 0.1, "calibration_mae_calibrated": 0.1,
            "wall_clock_s": 5.0,
        }
        s.update(fields)
        return s

    return build
