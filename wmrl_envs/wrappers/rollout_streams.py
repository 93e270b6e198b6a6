"""Each rollout of a group its own random stream: the group shares its task, not its noise.

GRPO samples G rollouts of one task. The wrappers reset the env of every rollout with the
group's reset arguments, so that they start from the same task; but Gymnasium's
``reset(seed=s)`` seeds two things at once — what ``reset`` draws (the task, the initial state)
*and* ``np_random``, from which ``step`` draws any outcome noise. Reset G times with one seed,
G rollouts of identical actions would get the identical noise draw, which the group's
standardisation then cancels: the within-group outcome noise would silently disappear.

The rule (``docs/method.md``, "Randomness"): **whatever ``reset`` draws is the group's task;
whatever is drawn after it is the rollout's own**. After a seeded reset of rollout ``i``
(``seed`` not ``None``) the env's ``np_random`` is replaced by

    ``numpy.random.Generator(numpy.random.PCG64(numpy.random.SeedSequence(seed, spawn_key=(i,))))``

— the ``i``-th child of ``SeedSequence(seed).spawn(G)`` (:func:`rollout_rng`). So the same group
seed gives the same G streams on any machine and whichever env instance (or worker) executes
rollout ``i``; the streams of a group are independent of each other and of the task draw. An
unseeded reset (``seed=None``) is left alone: the env's generator simply continues, so the
rollouts' draws already differ (reproducible when the env was seeded once before).

What this covers: any Gymnasium env that draws its randomness from ``self.np_random`` (the
Gymnasium convention; the library's KnownTruth, Guess, AutoResearch and LIBERO envs do: their
tasks and initial states are drawn in ``reset``, KnownTruth's outcome noise in ``step``). An env
that keeps its own generator, re-seeded in ``reset`` from ``seed``, gets the same stream for
every rollout; give it its task through ``options`` and leave ``seed`` unset, or make it draw
from ``np_random``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["rollout_rng", "seed_rollout"]


def rollout_rng(seed: int, rollout: int) -> np.random.Generator:
    """The random stream of rollout ``rollout`` of a group reset with ``seed``.

    Args:
        seed: the group's reset seed (int >= 0, as Gymnasium requires).
        rollout: the rollout's index in its group (int >= 0; a vector env's member index).

    Returns:
        A fresh ``numpy.random.Generator`` (PCG64) seeded by
        ``SeedSequence(seed, spawn_key=(rollout,))`` (= ``SeedSequence(seed).spawn(rollout + 1)[-1]``).

    Raises:
        ValueError: ``seed`` or ``rollout`` negative (numpy's error).
    """
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(int(seed), spawn_key=(int(rollout),))))


def seed_rollout(env: Any, seed: int | None, rollout: int) -> None:
    """Give the env, just reset with the group's ``seed``, rollout ``rollout``'s own stream.

    Call it after ``env.reset(seed=seed, ...)`` and before the rollout's first ``step``: the
    task that ``reset`` drew stays; ``env.unwrapped.np_random`` becomes :func:`rollout_rng`
    ``(seed, rollout)``. With ``seed=None`` nothing changes (the env's generator continues).

    Args:
        env: a Gymnasium env (any wrappers; the innermost env's ``np_random`` is replaced).
        seed: the seed the env was just reset with, or ``None``.
        rollout: the rollout's index in its group.
    """
    if seed is None:
        return
    getattr(env, "unwrapped", env).np_random = rollout_rng(seed, rollout)
