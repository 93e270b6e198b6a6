"""Fixtures of the AutoResearch tests: the env's ``next_observation`` and the SmolLM2 tokenizer
(one per session)."""

from __future__ import annotations

import pytest

from llm_judge_helpers import _tokenizer


@pytest.fixture
def next_observation():
    """The env's ``next_observation`` (an in-repo module: a failing import fails the test)."""
    from wmrl_envs.envs.autoresearch.observation import next_observation as fn

    return fn


@pytest.fixture(scope="session")
def tokenizer():
    return _tokenizer()
