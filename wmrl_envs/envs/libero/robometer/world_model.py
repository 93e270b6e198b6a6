"""The Robometer reward model as a reward-mode world model (:class:`RobometerWorldModel`).

It adapts :class:`~.model.RobometerModel` to the
:class:`~wmrl_envs.world_models.base.WorldModel` protocol: it picks the frames of each
trajectory, runs them through the model in batches and turns per-frame progress into the
episode score (``docs/method.md``, "Reward mode"; the reward itself is :mod:`.reward`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import numpy as np
import torch

from wmrl_envs.causes import UNSCORABLE, WORLD_MODEL_ERROR
from wmrl_envs.world_models.base import WorldModelPrediction

from .loading import build_tiny_robometer, load_checkpoint, save_checkpoint  # noqa: F401 (doctest)
from .model import RobometerHeadConfig
from .processor import RobometerProcessor, to_uint8_frame
from .reward import check_count, robometer_reward, uniform_frame_indices

__all__ = ["RobometerWorldModel", "FrameScores"]

logger = logging.getLogger(__name__)


@dataclass
class _Query:
    index: int
    instruction: str
    frames: list[np.ndarray]
    frame_indices: list[int]
    n_observations: int


@dataclass
class FrameScores:
    """Robometer's output for one query.

    Attributes:
        progress: per-frame progress, ``float32 (F,)`` in [0, 1].
        success_prob: per-frame success probability, ``float32 (F,)`` in [0, 1].
    """

    progress: np.ndarray
    success_prob: np.ndarray



class RobometerWorldModel:
    """Robometer as a reward-mode world model (``docs/method.md``, "Reward mode").

    Implements :class:`wmrl_envs.world_models.base.WorldModel`. In reward mode the
    :class:`~wmrl_envs.AnchoredWorldModelWrapper` passes ``contexts[i]`` = the reset
    observation (a dict with ``"instruction"``; a plain string is taken as the instruction)
    and ``actions[i]`` = a :class:`~wmrl_envs.world_models.base.Trajectory` whose
    observations carry camera frames ``obs[image_key]`` (``uint8 (H, W, 3)``; floats in
    [0, 1] and gray/RGBA images are converted). All trajectories of a call are encoded and run
    through the model in batches of ``batch_size`` trajectories.

    Rewards:
        * ``reward="reference"``: the model sees ``n_frames`` uniformly sampled frames
          (:func:`uniform_frame_indices`; every frame once when the episode has at most
          ``n_frames``, as Robometer's own sampling), and ``score`` =
          :func:`robometer_reward` of their progress (``mean(last k) - mean(first k)``,
          in [-1, 1]).
        * ``reward="dense"``: the model sees every ``dense_stride``-th frame (the last frame
          always included; at most ``max_dense_frames`` frames, uniformly subsampled beyond
          that), and ``score`` = the progress of the last frame (in [0, 1]).

    Every prediction's ``extras`` holds ``"progress"`` (list of floats, one per frame seen),
    ``"success_probs"`` (list of floats), ``"success_prob"`` (float, at the last frame seen),
    ``"frame_indices"`` (list of ints: the observation indices seen), ``"n_observations"``
    (int) and ``"reward_mode"``.
    ``score`` is ``None`` (ungraded) when the trajectory has no frames, a frame is not an
    image, the instruction is missing — an input that cannot be scored:
    ``ungraded_cause="unscorable_input"``, ``model_called=False``, counted by the wrappers but
    not warned about — or when the model raised on it: ``ungraded_cause="world_model_error"``,
    logged with ``logging.warning`` and, like any failure of the machinery, counted toward the
    wrappers' stop rule (``docs/method.md``, "Ungraded rollouts"). ``extras["error"]`` says
    why. ``predict`` never raises on one bad trajectory.

    Args:
        model: a :class:`RobometerModel` (used as is; its device is its parameters').
        processor: a :class:`RobometerProcessor` or anything with ``tokenizer`` and
            ``image_processor`` (see :meth:`RobometerProcessor.wrap`).
        image_key: observation key of the camera frame (default ``"agentview_image"``).
        instruction_key: key of the task instruction in the context / first observation.
        reward: ``"reference"`` or ``"dense"``.
        n_frames: frames sampled for the reference reward (int >= 1, default 8).
        k: frames averaged at each end by the reference reward (``1 <= k <= n_frames``).
        dense_stride: frame stride of dense mode (int >= 1).
        max_dense_frames: most frames per trajectory in dense mode (``None``: no limit).
        batch_size: trajectories per forward pass (int >= 1).

    Attributes:
        n_model_calls: trajectories scored by the model so far (int).
        n_forward_calls: forward passes so far (int).
        n_failed: trajectories returned ungraded (int).
        seconds: wall-clock seconds spent encoding + in the model (float).
        frames_seen: frames fed to the model so far (int).

    Raises:
        ValueError: invalid ``reward``, sizes or ``k``.

    Example:
        >>> import numpy as np
        >>> from wmrl_envs.world_models.base import Trajectory
        >>> wm = RobometerWorldModel(*build_tiny_robometer(seed=0))
        >>> obs = [{"agentview_image": np.zeros((64, 64, 3), np.uint8)} for _ in range(5)]
        >>> pred = wm.predict([{"instruction": "open the drawer"}], [Trajectory(obs, [0] * 4, True)])[0]
        >>> len(pred.extras["progress"]), -1.0 <= pred.score <= 1.0  # 5 frames: each seen once
        (5, True)
    """

    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        image_key: str = "agentview_image",
        instruction_key: str = "instruction",
        reward: Literal["reference", "dense"] = "reference",
        n_frames: int = 8,
        k: int = 3,
        dense_stride: int = 1,
        max_dense_frames: int | None = None,
        batch_size: int = 4,
    ) -> None:
        if reward not in ("reference", "dense"):
            raise ValueError(f"reward must be 'reference' or 'dense', got {reward!r}")
        self.n_frames = check_count("n_frames", n_frames)
        self.k = check_count("k", k)
        if self.k > self.n_frames:
            raise ValueError(f"k={k} frames per end cannot exceed n_frames={n_frames}")
        self.dense_stride = check_count("dense_stride", dense_stride)
        self.max_dense_frames = (
            None if max_dense_frames is None else check_count("max_dense_frames", max_dense_frames)
        )
        self.batch_size = check_count("batch_size", batch_size)
        self.reward = reward
        self.image_key = str(image_key)
        self.instruction_key = str(instruction_key)
        self.model = model
        self.processor = RobometerProcessor.wrap(processor)
        n_embed = model.model.get_input_embeddings().weight.shape[0]
        if len(self.processor.tokenizer) > n_embed:
            raise ValueError(
                f"tokenizer has {len(self.processor.tokenizer)} tokens but the model embeds only {n_embed}: "
                "tokenizer and checkpoint do not match"
            )
        model.eval()
        self.n_model_calls = 0
        self.n_forward_calls = 0
        self.n_failed = 0
        self.seconds = 0.0
        self.frames_seen = 0


    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(
        cls,
        path_or_hub_id: str | Path,
        *,
        device: Any = None,
        dtype: Any = None,
        local_files_only: bool | None = None,
        revision: str | None = None,
        head_config: RobometerHeadConfig | None = None,
        **kwargs: Any,
    ) -> RobometerWorldModel:
        """The world model of a Robometer checkpoint folder or hub id (:func:`~.loading.load_checkpoint`).

        Args:
            path_or_hub_id, device, dtype, local_files_only, revision, head_config: see
                :func:`~.loading.load_checkpoint`.
            **kwargs: :class:`RobometerWorldModel` constructor arguments.

        Returns:
            The world model, in eval mode, gradients off.

        Raises:
            RobometerWeightsNotFoundError: (a ``FileNotFoundError``) the checkpoint or a file
                it needs cannot be found (:func:`~.loading.load_checkpoint`).
            ValueError: the folder is not a Qwen3-VL Robometer checkpoint, or invalid
                constructor arguments.
        """
        model, processor = load_checkpoint(
            path_or_hub_id, device=device, dtype=dtype, local_files_only=local_files_only, revision=revision,
            head_config=head_config,
        )
        return cls(model, processor, **kwargs)

    def save_pretrained(self, folder: str | Path) -> Path:
        """Write the model in the checkpoint layout :meth:`from_pretrained` reads
        (:func:`~.loading.save_checkpoint`).

        Returns:
            The folder (created if needed).
        """
        return save_checkpoint(self.model, self.processor, folder)

    # ------------------------------------------------------------------ stats
    def stats(self) -> dict[str, float]:
        """Counters as a dict (for logging): calls, forward passes, failures, seconds, frames/s."""
        return {
            "n_model_calls": self.n_model_calls,
            "n_forward_calls": self.n_forward_calls,
            "n_failed": self.n_failed,
            "seconds": self.seconds,
            "frames_seen": self.frames_seen,
            "frames_per_s": self.frames_seen / self.seconds if self.seconds > 0 else 0.0,
        }

    # ------------------------------------------------------------------ scoring
    def score_frames(
        self, queries: Sequence[tuple[str, Sequence[Any]]], *, batch_size: int | None = None
    ) -> list[FrameScores]:
        """Per-frame progress and success probability of several (instruction, frames) queries.

        Args:
            queries: pairs ``(instruction, frames)``, frames ``uint8 (H, W, 3)`` arrays, at
                least one frame each.
            batch_size: queries per forward pass (default ``self.batch_size``).

        Returns:
            One :class:`FrameScores` per query, in order.

        Raises:
            ValueError: a query has no frames or a bad frame; any model error is raised too
                (``predict`` is the forgiving entry point).
        """
        size = self.batch_size if batch_size is None else check_count("batch_size", batch_size)
        results: list[FrameScores] = []
        device = next(self.model.parameters()).device
        for start in range(0, len(queries), size):
            chunk = list(queries[start : start + size])
            t0 = time.perf_counter()
            inputs = self.processor(chunk)
            inputs = {k: v.to(device) for k, v in inputs.items()}
            with torch.inference_mode():
                outputs = self.model(
                    **inputs,
                    prog_token_id=self.processor.prog_token_id,
                    vision_start_id=self.processor.vision_start_id,
                    vision_end_id=self.processor.vision_end_id,
                )
            self.seconds += time.perf_counter() - t0
            self.n_forward_calls += 1
            for (instruction, frames), (progress, success) in zip(chunk, outputs):
                n = len(list(frames))
                if progress.shape[0] != n:
                    raise ValueError(f"model returned {progress.shape[0]} progress values for {n} frames")
                results.append(
                    FrameScores(
                        progress=progress.float().cpu().numpy().astype(np.float32),
                        success_prob=success.float().cpu().numpy().astype(np.float32),
                    )
                )
                self.frames_seen += n
        return results

    def _instruction(self, context: Any, observations: Sequence[Any]) -> str:
        if isinstance(context, str):
            return context
        for source in (context, observations[0] if observations else None):
            if isinstance(source, Mapping) and source.get(self.instruction_key) is not None:
                return str(source[self.instruction_key])
        raise ValueError(f"no task instruction: the context has no {self.instruction_key!r} key")

    def _select(self, n_obs: int) -> list[int]:
        if self.reward == "reference":  # Robometer's linspace_subsample_frames: every frame once if few
            if n_obs <= self.n_frames:
                return list(range(n_obs))
            return uniform_frame_indices(n_obs, self.n_frames).tolist()
        idx = list(range(0, n_obs, self.dense_stride))
        if idx[-1] != n_obs - 1:
            idx.append(n_obs - 1)
        if self.max_dense_frames is not None and len(idx) > self.max_dense_frames:
            idx = [idx[i] for i in uniform_frame_indices(len(idx), self.max_dense_frames)]
        return idx

    def _prepare(self, i: int, context: Any, action: Any) -> _Query:
        observations = list(getattr(action, "observations", action) or [])
        if not observations:
            raise ValueError("no frames: the trajectory has no observations")
        indices = self._select(len(observations))
        frames = []
        for j in indices:
            obs = observations[j]
            if not isinstance(obs, Mapping) or obs.get(self.image_key) is None:
                raise ValueError(f"observation {j} has no {self.image_key!r} image")
            frames.append(to_uint8_frame(obs[self.image_key]))
        return _Query(i, self._instruction(context, observations), frames, indices, len(observations))

    def _prediction(self, query: _Query, scores: FrameScores) -> WorldModelPrediction:
        progress = [float(x) for x in scores.progress]
        success = [float(x) for x in scores.success_prob]
        if self.reward == "reference":
            score = robometer_reward(progress, n_frames=self.n_frames, k=self.k)
        else:
            score = progress[-1]
        extras = {
            "reward_mode": self.reward,
            "progress": progress,
            "success_probs": success,
            "success_prob": success[-1],
            "frame_indices": list(query.frame_indices),
            "n_observations": query.n_observations,
        }
        return WorldModelPrediction(score=float(score), extras=extras)

    def predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
        """Score a batch of trajectories (see the class docstring).

        Args:
            contexts: B reset observations (dicts with the instruction) or instruction strings.
            actions: B :class:`~wmrl_envs.world_models.base.Trajectory` (or plain lists of
                observation dicts).

        Returns:
            B :class:`~wmrl_envs.world_models.base.WorldModelPrediction`, in order.

        Raises:
            ValueError: ``contexts`` and ``actions`` differ in length (nothing else raises:
                a bad trajectory gets ``score=None`` with ``extras["error"]``).
        """
        if len(contexts) != len(actions):
            raise ValueError(f"got {len(contexts)} contexts for {len(actions)} trajectories")
        preds: list[WorldModelPrediction | None] = [None] * len(actions)
        queries: list[_Query] = []
        for i, (context, action) in enumerate(zip(contexts, actions)):
            try:
                queries.append(self._prepare(i, context, action))
            except (ValueError, TypeError, KeyError, IndexError) as exc:  # an input that cannot be scored
                preds[i] = self._failure(exc, model_called=False, cause=UNSCORABLE)
            except Exception as exc:  # a bad trajectory never fails the batch
                preds[i] = self._failure(exc, model_called=False, cause=WORLD_MODEL_ERROR)
        for start in range(0, len(queries), self.batch_size):
            chunk = queries[start : start + self.batch_size]
            try:
                scored = self.score_frames([(q.instruction, q.frames) for q in chunk], batch_size=len(chunk))
                for q, s in zip(chunk, scored):
                    preds[q.index] = self._prediction(q, s)
                    self.n_model_calls += 1
            except Exception as exc:
                if len(chunk) == 1:
                    preds[chunk[0].index] = self._failure(exc, model_called=True, cause=WORLD_MODEL_ERROR)
                    continue
                logger.warning("Robometer batch of %d failed (%s); scoring one by one", len(chunk), exc)
                for q in chunk:  # isolate the trajectory that fails
                    try:
                        scores = self.score_frames([(q.instruction, q.frames)], batch_size=1)[0]
                        preds[q.index] = self._prediction(q, scores)
                        self.n_model_calls += 1
                    except Exception as inner:
                        preds[q.index] = self._failure(inner, model_called=True, cause=WORLD_MODEL_ERROR)
        return [
            p if p is not None else self._failure(RuntimeError("not scored"), model_called=False, cause=WORLD_MODEL_ERROR)
            for p in preds
        ]

    def _failure(self, exc: BaseException, *, model_called: bool, cause: str) -> WorldModelPrediction:
        self.n_failed += 1
        message = f"{type(exc).__name__}: {exc}"
        if cause == UNSCORABLE:  # the input, not the model: counted by the wrappers, not warned about
            logger.debug("Robometer cannot score a trajectory: %s", message)
        else:
            logger.warning("Robometer failed on a trajectory (%s): %s", cause, message)
        return WorldModelPrediction(
            score=None, model_called=model_called, extras={"reward_mode": self.reward, "error": message},
            ungraded_cause=cause,
        )
