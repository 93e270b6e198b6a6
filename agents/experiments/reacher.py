"""The Reacher-v5 task kit of the embodied experiment (:mod:`agents.experiments.embodied`).

What the experiment's protocol is built from, apart from the protocol itself: the success
criterion and lock-step rollouts, the policy GRPO trains, the scripted demonstrator, and the
supervised warm start. Reacher-v5 is gymnasium's 2-link planar arm (50 steps of 0.02 s per
episode); the initial state is determined by the reset seed.

* **task / success**: the episode succeeds when, after its last step, the fingertip is within
  ``success_threshold`` (default 0.02 m) of the target (the plane distance
  ``‖obs[8:10]‖``; targets lie within 0.2 m of the base, the arm reaches 0.21 m). The
  threshold is chosen so that the scripted controller with action noise 0.3 succeeds about
  half the time: precision, not reaching, is what is hard.
* **policy** (:class:`GaussianMLPPolicy`): an MLP on the 10-dim state giving the mean torque,
  with a state-independent learned log standard deviation; actions are clipped to [-1, 1] by
  the environment, log-probabilities are of the unclipped sample.
* **scripted controller** (:class:`ScriptedReacher`): inverse kinematics of the 2-link arm
  (links 0.1 m and 0.11 m; the elbow solution nearest the current configuration) and a joint
  PD law; it succeeds from essentially every state without noise.
* **warm start** (SFT stand-in): Gaussian maximum-likelihood behaviour cloning on a limited
  number of demonstrations of the scripted controller executed with Gaussian action noise
  (the recorded labels are the noisy executed actions).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from wmrl_envs.world_models.base import Trajectory

__all__ = [
    "REACHER_LINKS",
    "GaussianMLPPolicy",
    "ScriptedReacher",
    "RolloutBatch",
    "Demonstrations",
    "make_envs",
    "final_distance",
    "rollout",
    "rollout_chunked",
    "policy_actor",
    "controller_actor",
    "collect_demonstrations",
    "behaviour_cloning",
    "evaluate",
]

REACHER_LINKS = (0.1, 0.11)
"""Link lengths of Reacher-v5 in metres: base → elbow, elbow → fingertip (from its MJCF)."""


# ---------------------------------------------------------------------------- policy
class GaussianMLPPolicy(nn.Module):
    """Diagonal Gaussian policy: MLP mean, state-independent learned log standard deviation.

    Args:
        obs_dim: state size (Reacher-v5: 10).
        act_dim: action size (Reacher-v5: 2 joint torques, in [-1, 1] after the env's clip).
        hidden: hidden layer widths (tanh).
        log_std_init: initial log standard deviation.
        log_std_bounds: clamp of the log standard deviation.

    Observations are standardised with the buffers ``obs_mean``/``obs_std`` (set by
    :func:`behaviour_cloning` from the demonstrations). It is an :class:`agents.grpo.GRPOPolicy`
    on :class:`RolloutBatch` samples (a row is an episode, its steps are the tokens).
    """

    def __init__(
        self,
        obs_dim: int = 10,
        act_dim: int = 2,
        hidden: Sequence[int] = (64, 64),
        log_std_init: float = -1.0,
        log_std_bounds: tuple[float, float] = (-4.0, 1.0),
    ) -> None:
        super().__init__()
        self.obs_dim, self.act_dim = int(obs_dim), int(act_dim)
        self.log_std_bounds = (float(log_std_bounds[0]), float(log_std_bounds[1]))
        self.register_buffer("obs_mean", torch.zeros(obs_dim))
        self.register_buffer("obs_std", torch.ones(obs_dim))
        layers: list[nn.Module] = []
        d = obs_dim
        for h in hidden:
            layers += [nn.Linear(d, int(h)), nn.Tanh()]
            d = int(h)
        self.body = nn.Sequential(*layers)
        self.mean_head = nn.Linear(d, act_dim)
        self.log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))

    def set_normalizer(self, mean: np.ndarray, std: np.ndarray) -> None:
        """Set the observation standardisation (arrays of shape (obs_dim,))."""
        self.obs_mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        self.obs_std.copy_(torch.as_tensor(std, dtype=torch.float32).clamp_min(1e-6))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log-std, shapes (..., act_dim), for observations of shape (..., obs_dim)."""
        h = self.body((obs - self.obs_mean) / self.obs_std)
        mean = self.mean_head(h)
        log_std = self.log_std.clamp(*self.log_std_bounds).expand_as(mean)
        return mean, log_std

    def distribution(self, obs: torch.Tensor) -> torch.distributions.Normal:
        """The action distribution (batch shape (..., act_dim))."""
        mean, log_std = self(obs)
        return torch.distributions.Normal(mean, log_std.exp())

    def log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Log-density of unclipped actions (..., act_dim), summed over action dims → (...)."""
        return self.distribution(obs).log_prob(actions).sum(-1)

    def entropy(self, obs: torch.Tensor) -> torch.Tensor:
        """Entropy in nats, summed over action dims → shape (...)."""
        return self.distribution(obs).entropy().sum(-1)

    # ------------------------------------------------------------------ GRPO
    def freeze_reference(self) -> GaussianMLPPolicy:
        """Snapshot the current policy as GRPO's frozen KL reference and return it.

        :meth:`grpo_logprobs` with ``reference=True`` scores under this copy (no grad); it is
        held outside the module's parameters and ``state_dict()``.
        """
        ref = copy.deepcopy(self)
        ref.__dict__.pop("_reference", None)
        ref.eval().requires_grad_(False)
        self.__dict__["_reference"] = ref  # not a submodule: its parameters stay out of ours
        return ref

    def trainable_parameters(self) -> list[nn.Parameter]:
        """Every parameter (MLP and log standard deviation)."""
        return list(self.parameters())

    def grpo_logprobs(
        self,
        samples: RolloutBatch,
        rows: Sequence[int] | np.ndarray,
        *,
        reference: bool = False,
        with_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Per-step log-densities of episodes ``rows`` of ``samples`` (:class:`agents.grpo.GRPOPolicy`).

        Args:
            samples: the step's rollouts.
            rows: B episode indices.
            reference: score under the copy frozen by :meth:`freeze_reference` (no grad).
            with_entropy: also return the per-step entropies.

        Returns:
            ``(logprobs, mask, entropy)``: float32 (B, T) log-densities of the unclipped
            actions, a (B, T) mask of ones, and (B, T) entropies or ``None``.

        Raises:
            RuntimeError: ``reference=True`` before :meth:`freeze_reference`.
        """
        rows_t = torch.as_tensor(np.asarray(rows, dtype=np.int64).reshape(-1))
        obs = torch.as_tensor(samples.observations[:, :-1])[rows_t]
        act = torch.as_tensor(samples.actions)[rows_t]
        net = self
        if reference:
            net = self.__dict__.get("_reference")
            if net is None:
                raise RuntimeError("no KL reference: call freeze_reference() before a GRPO step with kl_coef > 0")
        with torch.no_grad() if reference else contextlib.nullcontext():
            lp = net.log_prob(obs, act)
            ent = net.entropy(obs) if with_entropy else None
        return lp, torch.ones_like(lp), ent

    @torch.no_grad()
    def act(
        self, obs: np.ndarray, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Actions for a batch of states.

        Args:
            obs: float array (B, obs_dim).
            deterministic: return the mean action.
            generator: torch generator for the sampling noise.

        Returns:
            ``(actions, logp)``: float32 (B, act_dim) unclipped actions and float32 (B,)
            log-densities (of the mean when deterministic).
        """
        o = torch.as_tensor(np.asarray(obs), dtype=torch.float32)
        mean, log_std = self(o)
        std = log_std.exp()
        if deterministic:
            a = mean
        else:
            a = mean + std * torch.randn(mean.shape, generator=generator)
        logp = torch.distributions.Normal(mean, std).log_prob(a).sum(-1)
        return a.numpy().astype(np.float32), logp.numpy().astype(np.float32)


# ---------------------------------------------------------------------------- scripted controller
class ScriptedReacher:
    """Inverse kinematics of Reacher's 2-link arm + joint PD control (the demonstrator).

    From the state (``cos q``, ``sin q``, target ``(x, y)``, ``q̇``) it computes the joint
    angles that put the fingertip on the target (of the two elbow solutions, the one nearest
    the current configuration, shoulder error wrapped to [-π, π]) and returns the torque
    command ``clip(kp·(q* − q) − kd·q̇, -1, 1)``. With the defaults (critically damped for
    Reacher's armature 1 and gear 200, about 0.4 s to settle) it ends within 1 mm of the
    target from essentially every initial state.

    Args:
        kp: proportional gain (action units per rad).
        kd: derivative gain (action units per rad/s).
        links: link lengths in metres.
    """

    def __init__(self, kp: float = 0.5, kd: float = 0.095, links: tuple[float, float] = REACHER_LINKS) -> None:
        self.kp, self.kd = float(kp), float(kd)
        self.l1, self.l2 = float(links[0]), float(links[1])

    def target_angles(self, obs: np.ndarray) -> np.ndarray:
        """Joint targets (B, 2) in rad for states (B, 10) (or (2,) for one state (10,))."""
        o = np.atleast_2d(np.asarray(obs, dtype=np.float64))
        q = np.arctan2(o[:, 2:4], o[:, 0:2])
        tx, ty = o[:, 4], o[:, 5]
        c2 = np.clip((tx**2 + ty**2 - self.l1**2 - self.l2**2) / (2 * self.l1 * self.l2), -1.0, 1.0)
        best = None
        for sign in (1.0, -1.0):
            q2 = sign * np.arccos(c2)
            q1 = np.arctan2(ty, tx) - np.arctan2(self.l2 * np.sin(q2), self.l1 + self.l2 * np.cos(q2))
            e1 = (q1 - q[:, 0] + np.pi) % (2 * np.pi) - np.pi
            cost = np.abs(e1) + np.abs(q2 - q[:, 1])
            cand = np.stack([q[:, 0] + e1, q2], axis=1)
            if best is None:
                best, best_cost = cand, cost
            else:
                pick = cost < best_cost
                best = np.where(pick[:, None], cand, best)
                best_cost = np.minimum(cost, best_cost)
        return best if np.ndim(obs) > 1 else best[0]

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Torque commands in [-1, 1]: float32 (B, 2) for (B, 10) states, (2,) for one (10,)."""
        o = np.atleast_2d(np.asarray(obs, dtype=np.float64))
        q = np.arctan2(o[:, 2:4], o[:, 0:2])
        qd = o[:, 6:8]
        tgt = np.atleast_2d(self.target_angles(o))
        a = np.clip(self.kp * (tgt - q) - self.kd * qd, -1.0, 1.0).astype(np.float32)
        return a if np.ndim(obs) > 1 else a[0]


# ---------------------------------------------------------------------------- rollouts
def make_envs(n: int, env_id: str = "Reacher-v5", horizon: int = 50) -> list:
    """``n`` independent gymnasium environments with a time limit of ``horizon`` steps."""
    import gymnasium as gym

    return [gym.make(env_id, max_episode_steps=horizon) for _ in range(n)]


def final_distance(obs: np.ndarray) -> np.ndarray:
    """Fingertip–target plane distance in metres of Reacher states (..., 10) → (...)."""
    return np.linalg.norm(np.asarray(obs)[..., 8:10], axis=-1)


@dataclass
class RolloutBatch:
    """B episodes of ``horizon`` steps rolled out in lock-step.

    Attributes:
        seeds: reset seed of each episode, (B,) int64.
        observations: (B, T + 1, obs_dim) float32, o_0 … o_T.
        actions: (B, T, act_dim) float32 unclipped actions (the env clips to [-1, 1]).
        logp: (B, T) float32 log-densities under the acting policy (zeros for a controller).
        final_distance: (B,) float64 fingertip–target distance after the last step, metres.
        success: (B,) float64, 1.0 when ``final_distance < threshold``.
    """

    seeds: np.ndarray
    observations: np.ndarray
    actions: np.ndarray
    logp: np.ndarray
    final_distance: np.ndarray
    success: np.ndarray

    def trajectory(self, i: int) -> Trajectory:
        """Episode ``i`` as a finished :class:`~wmrl_envs.world_models.Trajectory`."""
        return Trajectory(list(self.observations[i]), list(self.actions[i]), done=True)


def rollout(
    envs: Sequence[Any],
    actor: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    seeds: Sequence[int],
    *,
    horizon: int = 50,
    threshold: float = 0.02,
) -> RolloutBatch:
    """Roll out ``len(seeds)`` episodes in lock-step, one per environment.

    Args:
        envs: at least ``len(seeds)`` environments (see :func:`make_envs`).
        actor: maps states (B, obs_dim) to ``(actions (B, act_dim), logp (B,))``.
        seeds: reset seed of each episode (the initial state).
        horizon: steps per episode.
        threshold: success radius in metres.

    Returns:
        A :class:`RolloutBatch`.

    Raises:
        ValueError: more seeds than environments.
    """
    b = len(seeds)
    if b > len(envs):
        raise ValueError(f"{b} episodes need {b} environments, got {len(envs)}; make more with make_envs()")
    first = [envs[i].reset(seed=int(s))[0] for i, s in enumerate(seeds)]
    obs_dim = len(first[0])
    obs = np.zeros((b, horizon + 1, obs_dim), dtype=np.float32)
    obs[:, 0] = np.stack(first)
    acts: np.ndarray | None = None
    logps = np.zeros((b, horizon), dtype=np.float32)
    for t in range(horizon):
        a, lp = actor(obs[:, t])
        if acts is None:
            acts = np.zeros((b, horizon, a.shape[1]), dtype=np.float32)
        acts[:, t] = a
        logps[:, t] = lp
        clipped = np.clip(a, -1.0, 1.0)
        for i in range(b):
            o, _, _, _, _ = envs[i].step(clipped[i])
            obs[i, t + 1] = o
    assert acts is not None
    dist = final_distance(obs[:, -1]).astype(np.float64)
    return RolloutBatch(np.asarray(seeds, dtype=np.int64), obs, acts, logps, dist, (dist < threshold).astype(np.float64))


def rollout_chunked(envs: Sequence[Any], actor: Callable, seeds: Sequence[int], **kw: Any) -> RolloutBatch:
    """:func:`rollout` for any number of seeds, in chunks of ``len(envs)`` (``kw``: its keywords)."""
    parts = [rollout(envs, actor, list(seeds[s : s + len(envs)]), **kw) for s in range(0, len(seeds), len(envs))]
    return RolloutBatch(*(np.concatenate([getattr(b, f.name) for b in parts]) for f in dataclasses.fields(RolloutBatch)))


def policy_actor(policy: GaussianMLPPolicy, deterministic: bool, generator: torch.Generator | None):
    """The :func:`rollout` actor of ``policy`` (:meth:`GaussianMLPPolicy.act` with these settings)."""
    return lambda o: policy.act(o, deterministic=deterministic, generator=generator)


def controller_actor(ctrl: ScriptedReacher, noise: float | np.ndarray, rng: np.random.Generator):
    """The :func:`rollout` actor of ``ctrl`` with Gaussian action noise of standard deviation
    ``noise`` (a float, or one per episode of shape (B,)), clipped to [-1, 1]; log-probs are 0."""

    def actor(o: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = ctrl.act(o)
        sd = np.broadcast_to(np.asarray(noise, dtype=np.float64).reshape(-1, 1), a.shape)
        a = np.clip(a + sd * rng.standard_normal(a.shape), -1.0, 1.0).astype(np.float32)
        return a, np.zeros(len(a), dtype=np.float32)

    return actor


# ---------------------------------------------------------------------------- demonstrations + BC
@dataclass
class Demonstrations:
    """State–action pairs of the noisy scripted controller.

    Attributes:
        observations: (N, obs_dim) float32 states (N = episodes × horizon).
        actions: (N, act_dim) float32 executed (noisy, clipped) actions — the BC labels.
        n_episodes: episodes recorded.
        success_rate: share of the recorded episodes that succeeded.
    """

    observations: np.ndarray
    actions: np.ndarray
    n_episodes: int
    success_rate: float


def collect_demonstrations(
    envs: Sequence[Any],
    controller: ScriptedReacher,
    seeds: Sequence[int],
    *,
    noise_std: float = 0.3,
    rng: np.random.Generator | None = None,
    horizon: int = 50,
    threshold: float = 0.02,
) -> Demonstrations:
    """Record the scripted controller, executed with Gaussian action noise, from ``seeds``.

    Args:
        envs: environments (episodes run in lock-step in chunks of ``len(envs)``).
        controller: the demonstrator.
        seeds: reset seeds, one episode each.
        noise_std: standard deviation of the action noise (action units).
        rng: noise generator (default: seeded with 0).
        horizon, threshold: as in :func:`rollout`.

    Returns:
        :class:`Demonstrations` (labels = the executed noisy actions).
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    obs_l, act_l, succ = [], [], []
    for s in range(0, len(seeds), len(envs)):
        chunk = list(seeds[s : s + len(envs)])
        batch = rollout(envs, controller_actor(controller, noise_std, rng), chunk, horizon=horizon, threshold=threshold)
        obs_l.append(batch.observations[:, :-1].reshape(-1, batch.observations.shape[-1]))
        act_l.append(batch.actions.reshape(-1, batch.actions.shape[-1]))
        succ.append(batch.success)
    return Demonstrations(
        np.concatenate(obs_l), np.concatenate(act_l), len(seeds), float(np.concatenate(succ).mean()) if seeds else 0.0
    )


def behaviour_cloning(
    policy: GaussianMLPPolicy,
    demos: Demonstrations,
    *,
    epochs: int = 200,
    lr: float = 1e-3,
    batch_size: int = 256,
    seed: int = 0,
) -> list[float]:
    """Supervised warm start: Gaussian maximum likelihood on the demonstrations (in place).

    Sets the policy's observation standardisation from the demonstration states, then
    minimises the negative log-likelihood of the labels under the policy's Gaussian (mean and
    log standard deviation are both fitted, so the warm start's exploration noise matches the
    demonstrations' residual).

    Returns:
        Per-epoch mean negative log-likelihood (nats per step), list of float.
    """
    policy.set_normalizer(demos.observations.mean(0), demos.observations.std(0))
    x = torch.as_tensor(demos.observations, dtype=torch.float32)
    y = torch.as_tensor(demos.actions, dtype=torch.float32)
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    n = len(x)
    for _ in range(int(epochs)):
        perm = torch.randperm(n, generator=gen)
        total = 0.0
        for s in range(0, n, batch_size):
            idx = perm[s : s + batch_size]
            loss = -policy.log_prob(x[idx], y[idx]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        losses.append(total / n)
    return losses


def evaluate(
    policy: GaussianMLPPolicy,
    envs: Sequence[Any],
    seeds: Sequence[int],
    *,
    deterministic: bool = True,
    generator: torch.Generator | None = None,
    horizon: int = 50,
    threshold: float = 0.02,
) -> dict[str, Any]:
    """Success rate of ``policy`` from the initial states ``seeds`` (one rollout each).

    Returns:
        ``{"success": float in [0, 1], "mean_final_distance": metres, "successes": list of 0/1}``.
    """
    out_s, out_d = [], []
    for s in range(0, len(seeds), len(envs)):
        chunk = list(seeds[s : s + len(envs)])
        b = rollout(envs, policy_actor(policy, deterministic, generator), chunk, horizon=horizon, threshold=threshold)
        out_s.append(b.success)
        out_d.append(b.final_distance)
    succ, dist = np.concatenate(out_s), np.concatenate(out_d)
    return {"success": float(succ.mean()), "mean_final_distance": float(dist.mean()), "successes": succ.astype(int).tolist()}
