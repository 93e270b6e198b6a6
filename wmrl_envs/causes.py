"""The names of why a rollout is ungraded (``WorldModelPrediction.ungraded_cause``,
``info["ungraded_cause"]``): plain strings that world models, envs, sandboxes and the correction
core all speak, so they live here, below all of them (a world model need not import the
correction core to name a cause). :mod:`wmrl_envs.core.ungraded` re-exports them with what the
core does about each (:func:`~wmrl_envs.core.ungraded.is_infrastructure`, the stop rule);
``docs/method.md`` ("Ungraded rollouts") describes the contract.
"""

from __future__ import annotations

__all__ = [
    "SANDBOX_UNAVAILABLE",
    "EXECUTION_ERROR",
    "EXECUTION_UNGRADED",
    "EXECUTION_INVALID",
    "EXECUTION_TIMEOUT",
    "WORKER_LOST",
    "WORLD_MODEL_ERROR",
    "WORLD_MODEL_TIMEOUT",
    "WORLD_MODEL_INVALID",
    "WORLD_MODEL_UNGRADED",
    "UNSCORABLE",
    "CAUSE_KEY",
]

SANDBOX_UNAVAILABLE = "sandbox_unavailable"
"""The sandbox could not start the program or broke while running it (``SandboxUnavailableError``)."""
EXECUTION_ERROR = "execution_error"
"""The env's ``step`` raised (a bug or a broken backend; the agent's failures are graded)."""
EXECUTION_UNGRADED = "execution_ungraded"
"""The env said ``info["graded"] = False`` (or returned no reward) without naming a cause
(counted, not a named failure: no warning, no stop rule)."""
EXECUTION_INVALID = "execution_invalid"
"""The env returned a reward that is not a finite number (NaN, inf, not a number) without saying
the step is ungraded: an env bug, so a named failure (warned about, counts toward the stop rule)."""
EXECUTION_TIMEOUT = "execution_timeout"
"""A remote execution (Ray) did not return within its per-call time-out; it was cancelled."""
WORKER_LOST = "worker_lost"
"""The Ray worker that held the execution died."""
WORLD_MODEL_ERROR = "world_model_error"
"""The world model's ``predict`` raised."""
WORLD_MODEL_TIMEOUT = "world_model_timeout"
"""The world model's ``predict`` did not return within its per-call time-out."""
WORLD_MODEL_INVALID = "world_model_invalid"
"""The world model returned a score that is not a finite number (NaN, inf, not a number)."""
WORLD_MODEL_UNGRADED = "world_model_ungraded"
"""The world model returned ``score=None`` without saying why (read as an unscorable input)."""
UNSCORABLE = "unscorable_input"
"""An input the world model cannot score by its nature (no frames, no image): counted only."""

CAUSE_KEY = "ungraded_cause"
"""``info`` key in which an env (or the wrappers) name the cause of an ungraded rollout."""
