"""AutoResearch: an RL environment where the agent writes ML code and real execution grades it.

One episode is one machine-learning task (tabular classification / regression, small-image
classification) built from data that ship with scikit-learn. The agent's action is the
complete Python source of a solution; the environment runs it in a sandbox on the task's
public files, grades ``submission.csv`` against hidden labels and a reference leaderboard,
and returns a score on the WMRL reward scale. Executing a solution takes seconds, which is
the cost world-model RL (``docs/method.md``) sets out to cut.

What is secret (the per-installation task secret and everything drawn from it: the data, the
hidden labels) and what is public (the task code, the reference secret ``wmrl-reference`` and
its shipped leaderboards) is in ``docs/autoresearch.md``.

Modules:
    * :mod:`~wmrl_envs.envs.autoresearch.tasks` — task registry (:class:`TaskSpec`,
      :func:`list_tasks`, :func:`get_task`).
    * :mod:`~wmrl_envs.envs.autoresearch.secret` — the task secret (:func:`task_secret`,
      :func:`derive_seed`, :func:`sandbox_hidden_paths`, :data:`REFERENCE_SECRET`).
    * :mod:`~wmrl_envs.envs.autoresearch.taskdata` — a task's data on the host
      (:func:`task_data`) and the public files of a job folder (:func:`write_public_files`).
    * :mod:`~wmrl_envs.envs.autoresearch.grading` — from an execution's output to a score:
      the reward scale (:data:`STATUSES`, :func:`score_from_status`, :func:`position_score`),
      the host pre-check (:func:`check_source`), reading ``submission.csv`` and the task metrics,
      and the :class:`Grade` of one execution on a leaderboard the caller gives.
    * :mod:`~wmrl_envs.envs.autoresearch.running` — one run of a solution in a sandbox, graded
      against a leaderboard the caller gives; used to build the boards.
    * :mod:`~wmrl_envs.envs.autoresearch.leaderboards` — the reference leaderboards
      (:func:`get_leaderboard`, :func:`build_leaderboards`, shipped as ``leaderboards.json``
      for the reference secret; :func:`ensure_leaderboard` for any other).
    * :mod:`~wmrl_envs.envs.autoresearch.observation` — the observation's text, shared by real
      and predicted observations: :func:`build_prompt`, :func:`format_feedback` (the grader's
      report first, the program's output quoted with ``| ``, :func:`layout_feedback`),
      :func:`next_observation`, :func:`sanitize_text`.
    * :mod:`~wmrl_envs.envs.autoresearch.env` — :class:`AutoResearchEnv`, and one solution graded
      on the task's leaderboard outside an episode (:func:`evaluate`, :func:`grade`).
    * :mod:`~wmrl_envs.envs.autoresearch.llm_judge` — this env's world model of the WMRL method:
      the agent's backbone prompted as a judge (:class:`LLMJudgeWorldModel`, the strict parser
      :func:`parse_judge_output`).
    * :mod:`~wmrl_envs.envs.autoresearch.embedding_world_model` — a fast learned world model
      (:class:`EmbeddingWorldModel`, :class:`DegradedWorldModel`) fitted on the shipped log of
      real executions ``data/autoresearch_executions.jsonl`` (:func:`load_execution_log`).
    * :mod:`~wmrl_envs.envs.autoresearch.sentence_encoder` — its frozen text encoder
      (:class:`SentenceEncoder`, embeddings cached).
    * :mod:`~wmrl_envs.envs.autoresearch.learned_features` — the same two texts for a world model
      that learns from the run's anchors (:func:`autoresearch_featurizer`,
      :func:`autoresearch_learned_world_model`).

Functions here:
    * :func:`register_envs` — register ``wmrl/AutoResearch-v0`` with Gymnasium (idempotent).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wmrl_envs.utils import lazy_exports

if TYPE_CHECKING:  # the submodules are imported lazily
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv, evaluate, grade
    from wmrl_envs.envs.autoresearch.observation import (
        build_prompt,
        format_feedback,
        layout_feedback,
        next_observation,
        sanitize_text,
    )
    from wmrl_envs.envs.autoresearch.grading import STATUSES, Grade, check_source, position_score, score_from_status
    from wmrl_envs.envs.autoresearch.leaderboards import (
        build_leaderboards,
        ensure_leaderboard,
        get_leaderboard,
        load_leaderboards,
    )
    from wmrl_envs.envs.autoresearch.secret import (
        REFERENCE_SECRET,
        derive_seed,
        sandbox_hidden_paths,
        secret_path,
        task_secret,
    )
    from wmrl_envs.envs.autoresearch.taskdata import write_public_files
    from wmrl_envs.envs.autoresearch.tasks import TaskSpec, get_task, list_tasks
    from wmrl_envs.envs.autoresearch.llm_judge import LLMJudgeWorldModel, ParsedJudgement, parse_judge_output
    from wmrl_envs.envs.autoresearch.embedding_world_model import (
        DegradedWorldModel,
        EmbeddingWorldModel,
        load_execution_log,
    )
    from wmrl_envs.envs.autoresearch.sentence_encoder import SentenceEncoder
    from wmrl_envs.envs.autoresearch.learned_features import autoresearch_featurizer, autoresearch_learned_world_model

_LAZY: dict[str, str] = {
    **dict.fromkeys(["AutoResearchEnv", "evaluate", "grade"], "env"),
    **dict.fromkeys(
        ["build_prompt", "format_feedback", "layout_feedback", "next_observation", "sanitize_text"], "observation"
    ),
    **dict.fromkeys(["Grade", "check_source", "STATUSES", "position_score", "score_from_status"], "grading"),
    **dict.fromkeys(["build_leaderboards", "ensure_leaderboard", "get_leaderboard", "load_leaderboards"],
                    "leaderboards"),
    **dict.fromkeys(["write_public_files"], "taskdata"),
    **dict.fromkeys(["REFERENCE_SECRET", "derive_seed", "sandbox_hidden_paths", "secret_path", "task_secret"],
                    "secret"),
    **dict.fromkeys(["TaskSpec", "get_task", "list_tasks"], "tasks"),
    **dict.fromkeys(["LLMJudgeWorldModel", "ParsedJudgement", "parse_judge_output"], "llm_judge"),
    **dict.fromkeys(["EmbeddingWorldModel", "DegradedWorldModel", "load_execution_log"], "embedding_world_model"),
    **dict.fromkeys(["SentenceEncoder"], "sentence_encoder"),
    **dict.fromkeys(["autoresearch_featurizer", "autoresearch_learned_world_model"], "learned_features"),
}


__getattr__, __dir__ = lazy_exports(__name__, {k: f".{v}" for k, v in _LAZY.items()})


__all__ = [
    "ENV_ID",
    "register_envs",
    "AutoResearchEnv",
    "build_prompt",
    "format_feedback",
    "layout_feedback",
    "next_observation",
    "sanitize_text",
    "Grade",
    "build_leaderboards",
    "check_source",
    "ensure_leaderboard",
    "evaluate",
    "get_leaderboard",
    "grade",
    "load_leaderboards",
    "write_public_files",
    "STATUSES",
    "position_score",
    "score_from_status",
    "REFERENCE_SECRET",
    "derive_seed",
    "sandbox_hidden_paths",
    "secret_path",
    "task_secret",
    "TaskSpec",
    "get_task",
    "list_tasks",
    "LLMJudgeWorldModel",
    "ParsedJudgement",
    "parse_judge_output",
    "EmbeddingWorldModel",
    "DegradedWorldModel",
    "SentenceEncoder",
    "autoresearch_featurizer",
    "autoresearch_learned_world_model",
    "load_execution_log",
]

ENV_ID = "wmrl/AutoResearch-v0"
"""Gymnasium id of :class:`AutoResearchEnv`."""


def register_envs() -> None:
    """Register :data:`ENV_ID` with Gymnasium unless it is registered already.

    The environment is registered as ``nondeterministic``: wall-clock run times appear in the
    feedback, and agent programs need not be deterministic.
    """
    import gymnasium

    if ENV_ID in gymnasium.registry:
        return
    gymnasium.register(
        id=ENV_ID,
        entry_point="wmrl_envs.envs.autoresearch.env:AutoResearchEnv",
        nondeterministic=True,
    )
