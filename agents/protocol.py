"""The one agent protocol: how every policy of ``agents/`` samples a step's groups.

Every policy — the LLM policy (:class:`agents.llm.policy.LLMPolicy`: prompts), the grammar policy
(:class:`agents.grammar.policy.GrammarPolicy`: task specs), the VLA policy
(:class:`agents.vla.policy.VLAPolicy`: observations), the known-truth sweep's softmax policy
(:class:`agents.experiments.sweep_run.TabularSoftmaxPolicy`: task ids) and the benchmark's agents
(:class:`BenchAgent`: task ids) — samples with one signature, ``sample(inputs, group_size)``:
``group_size`` samples per input, one GRPO group per input, rows laid out group after group (row
g·G + j is sample j of group g). What a sample is stays the policy's own (token ids, programs,
action chunks); the policies that train with :func:`agents.grpo.group_step` also implement
:class:`agents.grpo.GRPOPolicy` (log-probabilities of sampled rows, trainable parameters).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    import torch

    from agents.grpo import GRPOPolicy, GRPOUpdateConfig

__all__ = ["Agent", "BenchAgent"]


@runtime_checkable
class Agent(Protocol):
    """A policy that samples GRPO groups."""

    def sample(self, inputs: Sequence[Any], group_size: int) -> Any:
        """``group_size`` samples for each of ``inputs`` (what an input is: the policy's prompt,
        task or observation), rows group after group. Extra arguments of a policy are keyword-only
        with defaults, so this call works on every policy."""
        ...


@runtime_checkable
class BenchAgent(Agent, Protocol):
    """An agent of ``wmrl bench``: it samples Python-source actions for AutoResearch task ids and
    trains with the one GRPO group step (:func:`agents.grpo.group_step` on ``policy`` with
    ``optimizer`` and ``update_config``, called by :func:`agents.experiments.bench_run.run_method`)."""

    policy: GRPOPolicy
    optimizer: torch.optim.Optimizer
    update_config: GRPOUpdateConfig

    def sample(self, inputs: Sequence[str], group_size: int) -> tuple[list[list[str]], Any]:
        """``(actions, samples)``: G actions (Python source) per task id, and the policy's samples
        (rows group after group) for the update."""
        ...

    def snapshot(self) -> Any:
        """A copy of the policy's parameters (cheap to keep one per step)."""
        ...

    def restore(self, snap: Any) -> None:
        """Load a snapshot."""
        ...

    def reseed(self, seed: int) -> None:
        """Reset the sampling stream (evaluation draws common random numbers across methods)."""
        ...
