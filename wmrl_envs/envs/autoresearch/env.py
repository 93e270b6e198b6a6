"""``AutoResearchEnv``: one ML task per episode; the agent writes Python, real execution scores it.

Each episode draws one task from the registry (:mod:`~wmrl_envs.envs.autoresearch.tasks`).
The observation describes the task (overview, metric and direction, the data files with
their columns, dtypes and shapes) and shows the task's starter script as a working example.
The action is the full Python source of a solution. :meth:`AutoResearchEnv.step` pre-checks
the source on the host (empty / syntax errors are graded without executing anything), writes
the public files into a fresh job folder, runs the program in a sandbox
(:class:`~wmrl_envs.sandbox.base.Sandbox`) and grades ``submission.csv`` against hidden labels
(:mod:`~wmrl_envs.envs.autoresearch.running`, :mod:`~wmrl_envs.envs.autoresearch.grading`). The
reward is the episode score on the WMRL reward scale (:func:`~.grading.score_from_status`).

By default an episode is a single turn. With ``max_turns=K > 1`` the feedback of each turn
(the grader's report and the tail of the program's output, see :func:`~.observation.format_feedback`) is part of the next
observation, the episode's score is the maximum over turns, and each step's reward is the
increase of that running maximum, so the return equals the episode score.

The observation's text — the task prompt, the feedback layout, :func:`next_observation`, the
text space — is :mod:`~wmrl_envs.envs.autoresearch.observation`, shared with the world models
that predict observations. The environment is registered as ``wmrl/AutoResearch-v0`` by
:func:`wmrl_envs.envs.autoresearch.register_envs`.

Outside an episode, :func:`evaluate` runs and grades one solution on the task's leaderboard
(what a step does) and :func:`grade` grades one execution there.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import warnings
import weakref
from pathlib import Path
from typing import Any, Mapping, Sequence

import gymnasium as gym
from gymnasium import spaces

from wmrl_envs.envs.autoresearch.grading import Grade, Leaderboard, check_source, grade_execution
from wmrl_envs.envs.autoresearch.leaderboards import get_leaderboard
from wmrl_envs.envs.autoresearch.observation import (
    ACTION_MAX_CHARS,
    CHARSET,
    FEEDBACK_MAX_CHARS,
    GRADER_PREFIX,
    PROMPT_MAX_CHARS,
    TASK_ID_MAX_CHARS,
    build_prompt,
    format_feedback,
    next_observation,
    sanitize_text,
)
from wmrl_envs.envs.autoresearch.running import EXEC_ENV, run_solution
from wmrl_envs.envs.autoresearch.tasks import TaskSpec, get_task, list_tasks
from wmrl_envs.sandbox.base import ExecutionResult, Sandbox, SandboxLimits

__all__ = ["AutoResearchEnv", "evaluate", "grade"]

# ----------------------------------------------------------------------------------------------
# The environment
# ----------------------------------------------------------------------------------------------


def _hidden_paths() -> list[str]:
    from wmrl_envs.envs.autoresearch.secret import sandbox_hidden_paths

    return sandbox_hidden_paths()


def _warn_unhidden(sandbox: Any) -> None:
    """Warn when a given isolating sandbox leaves the task secret, ``wmrl_envs`` or the bundled data readable."""
    if not getattr(sandbox, "isolates", False):
        return  # a non-isolating backend already warned that it hides nothing
    hidden = [str(p) for p in (getattr(sandbox, "hidden_paths", None) or [])]
    need = _hidden_paths()
    missing = [p for p in need if not any(p == h or p.startswith(h.rstrip("/") + "/") for h in hidden)]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        warnings.warn(
            f"the sandbox given to AutoResearchEnv does not hide {shown}"
            f"{'' if hasattr(sandbox, 'hidden_paths') else ' (it has no hidden_paths attribute)'}: a solution "
            "could read the task secret, the task generators or the data sets the tasks are built from. Build it "
            "with hidden_paths=wmrl_envs.envs.autoresearch.secret.sandbox_hidden_paths(), or pass a backend name",
            stacklevel=3,
        )


class AutoResearchEnv(gym.Env):
    """One ML task per episode; the action is Python source, graded by real sandboxed execution.

    Observation (``spaces.Dict``):
        * ``task_id`` — ``Text``: the task id.
        * ``prompt`` — ``Text``: overview, metric and direction, data inventory, starter code.
        * ``feedback`` — ``Text``: the last turn's feedback (:func:`~.observation.format_feedback`), ``""``
          after reset.
        * ``turn`` — ``Discrete(max_turns + 1)``: turns taken so far (int).

    Action: ``Text`` — the complete Python source of a solution (charset :data:`CHARSET`,
    at most :data:`ACTION_MAX_CHARS` characters; longer or non-ASCII sources are still
    executed as given).

    Reward: the increase of the episode's running maximum score (the first step: its score),
    so the return equals the best score over the episode's turns. Scores follow the reward scale
    (:func:`~wmrl_envs.envs.autoresearch.grading.score_from_status`): malformed / syntax error
    0.0, runtime error 0.1, ran without a valid submission 0.2, valid ``0.5 + 0.5 * position``.

    Step info: ``status``, ``score`` and ``step_score`` (the turn's own score; ``step_score``,
    :data:`wmrl_envs.wrappers.common.STEP_SCORE_KEY`, tells the wrappers that the reward is not
    the turn's score, so a multi-turn anchor episode scores ``max`` over its turns' scores as a
    world-model episode does over its predictions), ``best_score``, ``metric``, ``metric_value``,
    ``position``, ``runtime_s``, ``stdout_tail``, ``stderr_tail``, ``message``, ``task_id``,
    ``turn``, ``executed``, ``execution_cpu_s`` and ``job_dir`` (str, only with
    ``keep_job_dirs``). ``execution_cpu_s`` (the cost-accounting key
    :data:`~wmrl_envs.core.ledger.EXECUTION_CPU_KEY`, charged by the wrappers) is the step's
    CPU-seconds: the sandboxed process tree's user + system time
    (``ExecutionResult.cpu_time_s``) plus the host CPU of this thread during the step
    (``time.thread_time``: writing the public files, grading); 0.0 when nothing was
    executed (a source that fails the host pre-check); ``None`` when the sandbox could not
    measure its part (Docker, bubblewrap without a cgroup) or failed.

    Args:
        tasks: ``"train"``, ``"heldout"``, ``"all"``, or a list of task ids.
        sandbox: a :class:`~wmrl_envs.sandbox.base.Sandbox` (or any object with a compatible
            ``run_python``), or a backend name for
            :func:`wmrl_envs.sandbox.make_sandbox` (resolved at the first execution; the
            environment then owns and closes it). The default ``"auto"`` picks bubblewrap or
            Docker and never falls back to running code unisolated: where neither works the
            first execution raises :class:`~wmrl_envs.sandbox.base.SandboxUnavailableError`;
            pass ``"subprocess"`` to opt in to no isolation.
        limits: per-run :class:`~wmrl_envs.sandbox.base.SandboxLimits` (``None``: the
            sandbox's defaults).
        max_turns: turns per episode (>= 1).
        workdir_root: folder for job folders (a private temporary folder if ``None``).
        keep_job_dirs: keep job folders after grading (for debugging).
        render_mode: ``None``, ``"ansi"`` (``render()`` returns text) or ``"human"`` (prints).

    Raises:
        ValueError: unknown task id / split, empty task list, ``max_turns < 1``, unknown
            render mode.
        TypeError: ``sandbox`` is neither a str nor an object with ``run_python``.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}

    def __init__(
        self,
        tasks: str | Sequence[str] = "train",
        sandbox: Sandbox | str = "auto",
        limits: SandboxLimits | None = None,
        max_turns: int = 1,
        workdir_root: str | None = None,
        keep_job_dirs: bool = False,
        render_mode: str | None = None,
    ) -> None:
        super().__init__()
        if isinstance(tasks, str):
            if tasks not in ("train", "heldout", "all"):
                raise ValueError(
                    f"tasks must be 'train', 'heldout', 'all' or a list of task ids, got {tasks!r}"
                )
            task_ids = list_tasks(None if tasks == "all" else tasks)
        else:
            task_ids = [get_task(t).task_id for t in tasks]  # validates
            if not task_ids:
                raise ValueError("tasks is an empty list")
            task_ids = list(dict.fromkeys(task_ids))
        if int(max_turns) < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")
        if not isinstance(sandbox, str) and not callable(getattr(sandbox, "run_python", None)):
            raise TypeError(f"sandbox must be a Sandbox instance or a backend name, got {type(sandbox).__name__}")

        self.task_ids: list[str] = task_ids
        self.max_turns = int(max_turns)
        self.limits = limits
        self.keep_job_dirs = bool(keep_job_dirs)
        self.render_mode = render_mode
        self._sandbox_spec = sandbox
        self._sandbox: Any = None if isinstance(sandbox, str) else sandbox
        if not isinstance(sandbox, str):
            _warn_unhidden(sandbox)
        self._owns_sandbox = isinstance(sandbox, str)
        self._workdir_root_arg = workdir_root
        self._root: Path | None = None
        self._owns_root = False
        self._root_finalizer: weakref.finalize | None = None

        text = dict(charset=CHARSET)
        self.observation_space = spaces.Dict(
            {
                "task_id": spaces.Text(max_length=TASK_ID_MAX_CHARS, min_length=1, **text),
                "prompt": spaces.Text(max_length=PROMPT_MAX_CHARS, min_length=0, **text),
                "feedback": spaces.Text(max_length=FEEDBACK_MAX_CHARS, min_length=0, **text),
                "turn": spaces.Discrete(self.max_turns + 1),
            }
        )
        self.action_space = spaces.Text(max_length=ACTION_MAX_CHARS, min_length=0, **text)

        self._task: TaskSpec | None = None
        self._obs: dict | None = None
        self._turn = 0
        self._best = 0.0
        self._done = False
        self._last_grade: Grade | None = None
        self._prompts: dict[str, str] = {}

    # -------------------------------------------------------------------------- helpers
    @property
    def task(self) -> TaskSpec | None:
        """The current episode's task (``None`` before the first reset)."""
        return self._task

    @property
    def last_grade(self) -> Grade | None:
        """The :class:`~wmrl_envs.envs.autoresearch.grading.Grade` of the last step (``None`` after reset)."""
        return self._last_grade

    @property
    def sandbox(self) -> Any:
        """The sandbox, created on first access when the environment was given a backend name.

        An isolating backend made here hides
        :func:`~wmrl_envs.envs.autoresearch.secret.sandbox_hidden_paths` (the task secret's
        folder, this project's installed files, scikit-learn's bundled data sets).
        """
        if self._sandbox is None:
            from wmrl_envs.sandbox import make_sandbox

            self._sandbox = make_sandbox(backend=self._sandbox_spec, limits=self.limits, hidden_paths=_hidden_paths())
        return self._sandbox

    def _workdir_root(self) -> Path:
        """The folder holding this environment's job folders and public-file cache.

        Without ``workdir_root``: a private folder in the system temporary folder, owned by
        this process (:class:`~wmrl_envs.sandbox.jobdirs.OwnedFolder`); making it first
        removes such folders -- and unmounts their tmpfs job folders -- left by environments of
        processes that were killed (so a resumed run cleans up after the killed one).
        """
        if self._root is None:
            if self._workdir_root_arg is None:
                if self.keep_job_dirs:  # kept for the user: never swept
                    self._root = Path(tempfile.mkdtemp(prefix="wmrl-autoresearch-"))
                else:
                    from wmrl_envs.sandbox.jobdirs import OwnedFolder

                    owned = OwnedFolder(None, prefix="wmrl-autoresearch-")
                    self._root = owned.path
                    # also clean up if the env is dropped without close()
                    self._root_finalizer = weakref.finalize(self, owned.remove)
                self._owns_root = True
            else:
                self._root = Path(self._workdir_root_arg)
                self._root.mkdir(parents=True, exist_ok=True)
        return self._root

    def prepare_leaderboards(self, task_ids: Sequence[str] | None = None) -> dict[str, list[float]]:
        """Make sure the leaderboards of the environment's tasks exist under the active secret.

        Under the reference secret this only reads the shipped file; under any other secret a
        task's board is built once per installation (its reference solutions run on the host,
        tens of CPU-seconds per task, progress on stderr) and cached. :meth:`reset` calls this
        for its task, so a build never falls inside :meth:`step`, whose time a caller charges as
        execution cost; call it up front to pay for all boards before training starts.

        Args:
            task_ids: tasks to prepare (default: all of the environment's tasks).

        Returns:
            ``{task_id: reference metric values}``.

        Raises:
            ValueError: a task id that is not one of the environment's tasks.
            RuntimeError: a reference solution failed while building a board.
        """
        ids = list(self.task_ids if task_ids is None else task_ids)
        unknown = [t for t in ids if t not in self.task_ids]
        if unknown:
            raise ValueError(f"task(s) {unknown} are not this environment's tasks: {', '.join(self.task_ids)}")
        return {t: get_leaderboard(t) for t in ids}

    def _prompt(self, task_id: str) -> str:
        if task_id not in self._prompts:
            self._prompts[task_id] = build_prompt(task_id)
        return self._prompts[task_id]

    def _observation(self) -> dict:
        assert self._obs is not None
        return dict(self._obs)

    # -------------------------------------------------------------------------- gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Start an episode on one task.

        Args:
            seed: seeds the environment's ``np_random`` (task sampling).
            options: ``{"task_id": id}`` picks that task (must be one of the environment's
                tasks); otherwise a task is drawn uniformly with ``np_random``.

        Returns:
            ``(observation, info)``; info holds ``task_id``, ``category``, ``split``,
            ``metric``, ``higher_is_better``, ``starter_code``, ``max_turns``.

        Raises:
            ValueError: ``options["task_id"]`` is not one of the environment's tasks, or an
                option other than ``task_id`` was given (e.g. a typo).
        """
        super().reset(seed=seed)
        unknown = set(options or {}) - {"task_id"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; the only option is 'task_id'")
        task_id = (options or {}).get("task_id")
        if task_id is None:
            task_id = self.task_ids[int(self.np_random.integers(len(self.task_ids)))]
        elif task_id not in self.task_ids:
            get_task(task_id)  # unknown ids: the registry's error lists all ids
            raise ValueError(f"task {task_id!r} is not one of this environment's tasks: {', '.join(self.task_ids)}")
        self.prepare_leaderboards([task_id])  # a one-off build belongs to no step's cost
        self._task = get_task(task_id)
        self._turn = 0
        self._best = 0.0
        self._done = False
        self._last_grade = None
        self._obs = {
            "task_id": sanitize_text(task_id, TASK_ID_MAX_CHARS),
            "prompt": self._prompt(task_id),
            "feedback": "",
            "turn": 0,
        }
        info = {
            "task_id": task_id,
            "category": self._task.category,
            "split": self._task.split,
            "metric": self._task.metric,
            "higher_is_better": self._task.higher_is_better,
            "starter_code": self._task.starter_code,
            "max_turns": self.max_turns,
        }
        if self.render_mode == "human":
            self.render()
        return self._observation(), info

    def step(self, action: str) -> tuple[dict, float, bool, bool, dict]:
        """Execute and grade one solution.

        Args:
            action: the complete Python source (str).

        Returns:
            ``(observation, reward, terminated, truncated, info)``; ``terminated`` is ``True``
            once ``max_turns`` turns were taken; ``truncated`` is always ``False``.

            When the sandbox machinery fails during the execution (``run_python`` raises
            ``SandboxUnavailableError`` or a subclass: the sandbox could not start, the Docker
            daemon died...), the turn is **ungraded**, not the agent's fault: ``reward`` 0.0,
            ``info["graded"] = False``, ``info["status"] = "ungraded"``,
            ``info["ungraded_cause"] = "sandbox_unavailable"``, ``info["message"]`` the error;
            the episode terminates (an ungraded turn leaves the whole episode ungraded) and a
            warning is logged. The wrappers drop such rollouts (see ``docs/method.md``,
            "Ungraded rollouts"). What the program causes itself (time-out, memory, crash)
            stays graded. Graded steps carry ``info["graded"] = True``.

        Raises:
            RuntimeError: ``step`` before ``reset`` or after the episode ended.
            TypeError: ``action`` is not a str.
            SandboxUnavailableError: the sandbox backend named at construction cannot be
                created here (a configuration error, raised at the first execution).
        """
        if self._task is None or self._obs is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode is over; call reset() to start a new one")
        if not isinstance(action, str):
            raise TypeError(f"the action must be Python source (str), got {type(action).__name__}")
        import logging

        from wmrl_envs.core.ledger import EXECUTION_CPU_KEY
        from wmrl_envs.core.ungraded import CAUSE_KEY, SANDBOX_UNAVAILABLE
        from wmrl_envs.sandbox.base import SandboxUnavailableError

        task = self._task
        host_cpu0 = time.thread_time()  # this thread's CPU: the host's share of the execution
        if check_source(action) is not None:  # decided on the host: no sandbox, no job folder
            grade, job_dir = grade_execution(task, None, None, source=action, leaderboard=get_leaderboard), None
        else:
            root = self._workdir_root()
            sandbox = self.sandbox  # a backend that cannot be built here raises: configuration error
            try:
                grade, job_dir = run_solution(
                    task, action, sandbox, workdir_root=root / "jobs", limits=self.limits,
                    cache_dir=root / "public-cache", keep_job_dir=self.keep_job_dirs,
                    leaderboard=get_leaderboard(task.task_id), env=EXEC_ENV,
                )
            except SandboxUnavailableError as exc:  # the machinery failed, not the agent's code
                message = sanitize_text(f"{type(exc).__name__}: {exc}", 1000)
                logging.getLogger(__name__).warning(
                    "AutoResearch step on %s ungraded (%s): %s", task.task_id, SANDBOX_UNAVAILABLE, message
                )
                self._turn += 1
                self._last_grade = None
                self._done = True  # an ungraded turn leaves the episode ungraded: no more turns
                self._obs = next_observation(  # the grader's layout; nothing of the program is quoted
                    self._obs, f"{GRADER_PREFIX}status: ungraded | the sandbox failed, not the program: {' '.join(message.split())}"
                )
                info = {
                    "task_id": task.task_id, "turn": self._turn, "status": "ungraded", "score": None,
                    "best_score": float(self._best), "metric": task.metric, "metric_value": None,
                    "position": None, "runtime_s": 0.0, "executed": False, "message": message,
                    "stdout_tail": "", "stderr_tail": "", "graded": False, CAUSE_KEY: SANDBOX_UNAVAILABLE,
                    EXECUTION_CPU_KEY: None,  # the sandbox's share is unknown
                }
                if self.render_mode == "human":
                    self.render()
                return self._observation(), 0.0, True, False, info
        self._turn += 1
        self._last_grade = grade
        feedback = format_feedback(grade)
        new_best = max(self._best, grade.score)
        reward = float(new_best - self._best)
        self._best = new_best
        terminated = self._turn >= self.max_turns
        self._done = terminated
        self._obs = next_observation(self._obs, feedback)
        info = {
            "task_id": task.task_id,
            "turn": self._turn,
            "status": grade.status,
            "score": float(grade.score),
            "step_score": float(grade.score),  # wmrl_envs.wrappers.common.STEP_SCORE_KEY: the reward is the improvement
            "best_score": float(self._best),
            "metric": task.metric,
            "metric_value": grade.metric_value,
            "position": grade.position,
            "runtime_s": float(grade.runtime_s),
            "executed": bool(grade.executed),
            "message": grade.message,
            "stdout_tail": grade.stdout_tail,
            "stderr_tail": grade.stderr_tail,
            "graded": True,
            # no execution (host pre-check): 0.0, so the info stays deterministic
            EXECUTION_CPU_KEY: (0.0 if not grade.executed else None if grade.cpu_time_s is None
                                else float(grade.cpu_time_s) + max(0.0, time.thread_time() - host_cpu0)),
        }
        if job_dir is not None:
            info["job_dir"] = str(job_dir)
        if self.render_mode == "human":
            self.render()
        return self._observation(), reward, terminated, False, info

    def render(self) -> str | None:
        """``"ansi"``: the current observation as text; ``"human"``: print it; else ``None``."""
        if self.render_mode is None or self._obs is None:
            return None
        o = self._obs
        text = f"[{o['task_id']} | turn {o['turn']}/{self.max_turns} | best score {self._best:.4g}]\n"
        text += o["feedback"] if o["feedback"] else o["prompt"]
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        """Close the sandbox if the environment created it; delete its own temporary folder."""
        if self._owns_sandbox and self._sandbox is not None:
            try:
                self._sandbox.close()
            finally:
                self._sandbox = None
        if self._root is not None:
            if self._owns_root and not self.keep_job_dirs:
                if self._root_finalizer is not None:
                    self._root_finalizer()  # rmtree(root, ignore_errors=True), once
                    self._root_finalizer = None
            elif not self._owns_root:
                shutil.rmtree(self._root / "public-cache", ignore_errors=True)
            self._root = None
        super().close()


# ----------------------------------------------------------------------------------------------
# One solution graded on the task's leaderboard, outside an episode
# ----------------------------------------------------------------------------------------------


def grade(
    task: TaskSpec | str,
    job_dir: str | Path | None,
    execution_result: ExecutionResult | None,
    *,
    source: str | None = None,
    leaderboard: Leaderboard | None = None,
) -> Grade:
    """Grade one execution of a solution: :func:`~.grading.grade_execution` (arguments,
    returns and errors there) with ``leaderboard`` defaulting to the task's
    (:func:`~.leaderboards.get_leaderboard`, looked up only for a valid submission)."""
    return grade_execution(task, job_dir, execution_result, source=source,
                           leaderboard=get_leaderboard if leaderboard is None else leaderboard)


def evaluate(task: TaskSpec | str, source: str, sandbox: Sandbox, *, workdir_root: str | Path | None = None,
             limits: SandboxLimits | None = None, cache_dir: str | Path | None = None, keep_job_dir: bool = False,
             leaderboard: Leaderboard | None = None, env: Mapping[str, str] | None = None) -> tuple[Grade, Path | None]:
    """Pre-check, materialise, execute in a sandbox and grade one solution:
    :func:`~.running.run_solution` (arguments, returns and errors there) with ``leaderboard``
    defaulting to the task's (:func:`~.leaderboards.get_leaderboard`, looked up only for a
    valid submission).

    Returns:
        ``(grade, job_dir)``; ``job_dir`` is ``None`` when no folder was created or it was deleted.
    """
    return run_solution(task, source, sandbox, workdir_root=workdir_root, limits=limits, cache_dir=cache_dir,
                        keep_job_dir=keep_job_dir, env=env,
                        leaderboard=get_leaderboard if leaderboard is None else leaderboard)
