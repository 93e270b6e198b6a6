"""The embedding world model: a fast learned alternative to the LLM judge for AutoResearch.

:class:`EmbeddingWorldModel` embeds two short texts with a frozen sentence encoder
(:mod:`.sentence_encoder`) — the solution's estimator line (:func:`action_text`) and a compact
task description (:func:`describe_task`) — and maps ``[e(action), task_weight * e(task)]`` to a
score with a regression head fitted on logged real executions of *other* tasks
(:meth:`~EmbeddingWorldModel.fit_leave_one_task_out`), frozen while an agent trains. Execution
results are never cached or looked up: predictions come from the head alone.
:class:`DegradedWorldModel` mixes any world model's predictions with action-independent noise
(the degradation experiment), drawn by default from the real scores of the log's training split
only (held-out tasks' outcomes never enter a world model). :func:`load_execution_log` reads the shipped log of real
executions (:data:`EXECUTION_LOG_PATH`, written by ``benchmarks/log_executions.py``).
Why two texts, what a prediction costs, and the log: ``docs/autoresearch.md``, "World models".
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from wmrl_envs.envs.autoresearch.sentence_encoder import SentenceEncoder, default_encoder_path
from wmrl_envs.world_models.base import WorldModelPrediction

__all__ = [
    "EXECUTION_LOG_PATH",
    "load_execution_log",
    "describe_task",
    "action_text",
    "task_id_of",
    "EmbeddingWorldModel",
    "DegradedWorldModel",
]

EXECUTION_LOG_PATH = Path(__file__).with_name("data") / "autoresearch_executions.jsonl"
"""The shipped log of real AutoResearch executions (JSON lines, see :func:`load_execution_log`)."""

_TEXT_VERSION = 2  # 2: separate action / task embeddings
_STATUS_THRESHOLD = 0.3  # predicted score below: coarse status guess "runtime_err", else "valid"


# ----------------------------------------------------------------------------------------------
# Execution log
# ----------------------------------------------------------------------------------------------


def load_execution_log(path: str | Path | None = None, *, split: str | None = None) -> list[dict[str, Any]]:
    """Read a log of real executions (one JSON object per line).

    Each record has at least ``task_id`` (str), ``code`` (str, the executed source) and
    ``score`` (float in [0, 1], the real score); the shipped log also has ``split``,
    ``policy``, ``family``, ``choices``, ``random_state``, ``fails``, ``model_line``,
    ``status``, ``position``, ``metric_value``, ``runtime_s`` (seconds), ``step_s``,
    ``error`` (see ``benchmarks/log_executions.py``).

    Args:
        path: the log; ``None`` reads :data:`EXECUTION_LOG_PATH`.
        split: keep only records of this split (``"train"`` / ``"heldout"``); ``None`` keeps all.

    Returns:
        The records (list of dicts), in file order.

    Raises:
        FileNotFoundError: the log does not exist.
    """
    p = Path(path) if path is not None else EXECUTION_LOG_PATH
    recs = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    if split is not None:
        recs = [r for r in recs if r.get("split") == split]
    return recs


# ----------------------------------------------------------------------------------------------
# Input text
# ----------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def describe_task(task_id: str) -> str:
    """Compact description of an AutoResearch task (problem type, metric, data size).

    Args:
        task_id: a registered task id.

    Returns:
        One line, e.g. ``"classification task, metric roc_auc (higher is better), 24000
        training rows, 37 features, 2 classes, categorical columns, missing values."``

    Raises:
        ValueError: unknown task id.
    """
    from wmrl_envs.envs.autoresearch.taskdata import task_data
    from wmrl_envs.envs.autoresearch.tasks import get_task

    spec = get_task(task_id)
    data = task_data(task_id)
    n, d = data.X_train.shape
    parts = [
        f"{spec.problem_type} task",
        f"metric {spec.metric} ({'higher' if spec.higher_is_better else 'lower'} is better)",
        f"{n} training rows",
        f"{d} features",
    ]
    if spec.problem_type == "classification":
        parts.append(f"{int(data.y_train.nunique())} classes")
    if spec.categorical_columns:
        parts.append("categorical columns")
    if spec.has_missing:
        parts.append("missing values")
    return ", ".join(parts) + "."


_MODEL_LINE = re.compile(r"^model\s*=.*$", re.M)
_RELEVANT = re.compile(r"\bmodel\b|\bfit\(|Regress|Classif|Pipeline|pipeline")


def action_text(code: Any, max_chars: int = 600) -> str:
    """The part of a solution that the world model reads.

    The starter-based actions of AutoResearch differ only in their ``model = ...`` line, so
    that line is the text; for a script without one (a whole script written by an agent), the
    lines that mention the model, ``fit(``, estimators or pipelines are kept, whitespace
    collapsed, cut to ``max_chars``.

    Args:
        code: the action (Python source; non-str values give ``""``).
        max_chars: the most characters returned.

    Returns:
        A single-line str.
    """
    if not isinstance(code, str):
        return ""
    m = _MODEL_LINE.search(code)
    if m:
        text = m.group(0)
    else:
        lines = [ln.strip() for ln in code.splitlines() if _RELEVANT.search(ln)]
        text = " ; ".join(lines) if lines else code
    return " ".join(text.split())[:max_chars]


def task_id_of(context: Any) -> str:
    """The task id of a context: an observation dict with ``"task_id"``, an object with a
    ``task_id`` attribute (a ``TaskSpec``) or a task id itself.

    Raises:
        TypeError: ``context`` is none of these.
    """
    if isinstance(context, str):
        return context
    if isinstance(context, Mapping) and "task_id" in context:
        return str(context["task_id"])
    if hasattr(context, "task_id"):
        return str(context.task_id)
    raise TypeError(f"a context must be an observation dict with 'task_id', a TaskSpec or a task id, got "
                    f"{type(context).__name__}")


# ----------------------------------------------------------------------------------------------
# Heads
# ----------------------------------------------------------------------------------------------


@dataclass
class _Head:
    """A fitted regression head: ridge (``layers`` = [(W, b)]) or a ReLU MLP (several layers)."""

    kind: str
    layers: list[tuple[np.ndarray, np.ndarray]]
    tasks: tuple[str, ...]  # tasks whose records it was fitted on
    n_records: int
    alpha: float

    def __call__(self, x: np.ndarray) -> np.ndarray:
        h = x.astype(np.float64)
        for i, (w, b) in enumerate(self.layers):
            h = h @ w + b
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
        return h.reshape(-1)


def _fit_head(x: np.ndarray, y: np.ndarray, kind: str, alphas: Sequence[float], hidden: int, seed: int,
              tasks: tuple[str, ...]) -> _Head:
    if kind == "ridge":
        from sklearn.linear_model import RidgeCV

        m = RidgeCV(alphas=list(alphas)).fit(x, y)
        layers = [(np.asarray(m.coef_, np.float64).reshape(-1, 1), np.asarray([m.intercept_], np.float64))]
        return _Head("ridge", layers, tasks, len(y), float(m.alpha_))
    if kind == "mlp":
        from sklearn.neural_network import MLPRegressor

        alpha = float(alphas[len(alphas) // 2])
        m = MLPRegressor(hidden_layer_sizes=(hidden,), alpha=alpha, max_iter=2000, random_state=seed,
                         learning_rate_init=1e-3).fit(x, y)
        layers = [(np.asarray(w, np.float64), np.asarray(b, np.float64)) for w, b in zip(m.coefs_, m.intercepts_)]
        return _Head("mlp", layers, tasks, len(y), alpha)
    raise ValueError(f"head must be 'ridge' or 'mlp', got {kind!r}")


# ----------------------------------------------------------------------------------------------
# The world model
# ----------------------------------------------------------------------------------------------


class EmbeddingWorldModel:
    """Frozen sentence encoder + regression head fitted on logged executions of other tasks.

    Implements the :class:`~wmrl_envs.world_models.base.WorldModel` protocol. The head maps the
    features ``[e(action_text(code)), task_weight * e(describe_task(task))]`` (2 x 384 floats,
    see :meth:`features`) to the real score; predictions are clipped to ``clip``. Actions that fail the host pre-check (empty, not compiling) are scored
    by the real grader's rule (0.0, status ``malformed`` / ``syntax_err``) without the model.

    Args:
        encoder: a :class:`SentenceEncoder`, a model folder path, or ``None`` for the shared
            default encoder (:meth:`SentenceEncoder.shared`).
        head: ``"ridge"`` (``RidgeCV`` over ``alphas``, efficient leave-one-out choice of the
            penalty) or ``"mlp"`` (one hidden ReLU layer of ``hidden`` units, L2 penalty the
            middle of ``alphas``).
        alphas: ridge penalties to choose from (or the MLP's, see ``head``).
        task_weight: scale of the task-description embedding in the features (>= 0; 0 makes
            the model ignore the task).
        hidden: MLP hidden units.
        seed: MLP initialisation seed.
        clip: ``(lo, hi)`` bounds of predicted scores.

    Raises:
        ValueError: unknown ``head``.

    Attributes:
        heads: ``{head key: fitted head}``; keys ``"all"`` (:meth:`fit`) or ``"without:<task>"``
            (:meth:`fit_leave_one_task_out`) plus ``"all"`` for tasks without their own head.
        routes: ``{task_id: head key}`` for tasks with a dedicated head.
        n_predictions: actions predicted so far; ``n_model_calls`` those that used the head.
    """

    def __init__(
        self,
        encoder: SentenceEncoder | str | Path | None = None,
        *,
        head: str = "ridge",
        alphas: Sequence[float] = (1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0),
        task_weight: float = 0.3,
        hidden: int = 64,
        seed: int = 0,
        clip: tuple[float, float] = (0.0, 1.0),
    ) -> None:
        if head not in ("ridge", "mlp"):
            raise ValueError(f"head must be 'ridge' or 'mlp', got {head!r}")
        if not task_weight >= 0:
            raise ValueError(f"task_weight must be >= 0, got {task_weight}")
        self.task_weight = float(task_weight)
        self._encoder_arg = None if encoder is None or isinstance(encoder, SentenceEncoder) else str(encoder)
        self._encoder: SentenceEncoder | None = encoder if isinstance(encoder, SentenceEncoder) else None
        self.head_kind = head
        self.alphas = tuple(float(a) for a in alphas)
        self.hidden = int(hidden)
        self.seed = int(seed)
        self.clip = (float(clip[0]), float(clip[1]))
        self.heads: dict[str, _Head] = {}
        self.routes: dict[str, str] = {}
        self.n_predictions = 0
        self.n_model_calls = 0

    # ------------------------------------------------------------------ encoder
    @property
    def encoder(self) -> SentenceEncoder:
        """The encoder (loaded on first use)."""
        if self._encoder is None:
            self._encoder = SentenceEncoder.shared(self._encoder_arg)
        return self._encoder

    def features(self, task_ids: Sequence[str], codes: Sequence[Any]) -> np.ndarray:
        """Head inputs for N (task, code) pairs.

        Returns:
            float32 array (N, 2 * dim): ``[e(action_text(code)), task_weight * e(describe_task(task))]``.
        """
        enc = self.encoder
        n = len(codes)
        if n == 0:
            return np.zeros((0, 2 * enc.dim), np.float32)
        emb = enc.encode([action_text(c) for c in codes] + [describe_task(t) for t in task_ids])
        return np.hstack([emb[:n], self.task_weight * emb[n:]]).astype(np.float32)

    # ------------------------------------------------------------------ fitting
    @property
    def is_fitted(self) -> bool:
        """Whether some head exists."""
        return bool(self.heads)

    @staticmethod
    def _usable(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        out = []
        for r in records:
            if "task_id" not in r or "code" not in r or "score" not in r:
                raise ValueError(f"a record needs 'task_id', 'code' and 'score'; got keys {sorted(r)}")
            if r["score"] is not None and np.isfinite(float(r["score"])):
                out.append(r)
        return out

    def _fit_one(self, recs: Sequence[Mapping[str, Any]]) -> _Head:
        if len(recs) < 2:
            raise ValueError(f"need at least 2 records to fit a head, got {len(recs)}")
        x = self.features([r["task_id"] for r in recs], [r["code"] for r in recs])
        y = np.array([float(r["score"]) for r in recs])
        tasks = tuple(sorted({str(r["task_id"]) for r in recs}))
        return _fit_head(x, y, self.head_kind, self.alphas, self.hidden, self.seed, tasks)

    def fit(self, records: Iterable[Mapping[str, Any]], *, exclude_tasks: Iterable[str] = ()) -> EmbeddingWorldModel:
        """Fit one head (key ``"all"``) on the records, except those of ``exclude_tasks``.

        Replaces any previous heads and routes: every task is then predicted by this head.

        Args:
            records: logged executions (dicts with ``task_id``, ``code``, ``score``; see
                :func:`load_execution_log`); records with a ``None``/NaN score are skipped.
            exclude_tasks: task ids whose records are left out.

        Returns:
            ``self``.

        Raises:
            ValueError: a record lacks a key, or fewer than 2 records remain.
        """
        excl = set(exclude_tasks)
        recs = [r for r in self._usable(records) if r["task_id"] not in excl]
        self.heads = {"all": self._fit_one(recs)}
        self.routes = {}
        return self

    def fit_leave_one_task_out(
        self, records: Iterable[Mapping[str, Any]], *, tasks: Iterable[str] | None = None
    ) -> EmbeddingWorldModel:
        """Fit one head per task on the records of all *other* tasks, and route each task to it.

        Afterwards :meth:`predict` for a context of task T uses the head ``"without:T"``,
        which never saw T's executions; tasks without a dedicated head (e.g. held-out tasks
        absent from ``records``) use the head ``"all"`` fitted on every record.

        Args:
            records: logged executions (see :meth:`fit`).
            tasks: tasks that get a dedicated head (default: every task in ``records``).

        Returns:
            ``self``.

        Raises:
            ValueError: a record lacks a key, or a head would have fewer than 2 records.
        """
        recs = self._usable(records)
        self.features([r["task_id"] for r in recs], [r["code"] for r in recs])  # one batched pass fills the cache
        task_list = list(dict.fromkeys(tasks if tasks is not None else (str(r["task_id"]) for r in recs)))
        heads = {"all": self._fit_one(recs)}
        routes = {}
        for t in task_list:
            heads[f"without:{t}"] = self._fit_one([r for r in recs if r["task_id"] != t])
            routes[t] = f"without:{t}"
        self.heads, self.routes = heads, routes
        return self

    def head_for(self, task_id: str) -> str:
        """The head key that predicts ``task_id``.

        Raises:
            RuntimeError: the model is not fitted.
        """
        if not self.heads:
            raise RuntimeError("the world model is not fitted; call fit() or fit_leave_one_task_out() (or load())")
        return self.routes.get(task_id, "all")

    # ------------------------------------------------------------------ prediction
    def predict_scores(self, task_ids: Sequence[str], codes: Sequence[Any]) -> np.ndarray:
        """Clipped head scores for N (task, code) pairs, without the pre-check.

        Returns:
            float64 array (N,) in ``clip``.

        Raises:
            RuntimeError: the model is not fitted.
            ValueError: the sequences differ in length.
        """
        if len(task_ids) != len(codes):
            raise ValueError(f"{len(task_ids)} task ids but {len(codes)} codes")
        keys = [self.head_for(t) for t in task_ids]
        out = np.zeros(len(codes), dtype=np.float64)
        if not len(codes):
            return out
        x = self.features(task_ids, codes)
        for k in dict.fromkeys(keys):
            rows = [i for i, kk in enumerate(keys) if kk == k]
            out[rows] = self.heads[k](x[rows])
        return np.clip(out, *self.clip)

    def predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
        """Predict the real score of B actions (the :class:`WorldModel` protocol).

        Args:
            contexts: B observations (dicts with ``"task_id"``), ``TaskSpec`` objects or task ids.
            actions: B actions (Python source).

        Returns:
            B :class:`WorldModelPrediction` objects: ``score`` in ``clip``; ``status`` the
            pre-check's status, else a coarse guess (``"runtime_err"`` below 0.3, else
            ``"valid"``); ``extras["head"]`` the head used; ``model_called`` ``False`` for
            pre-check decisions.

        Raises:
            ValueError: the sequences differ in length.
            RuntimeError: the model is not fitted.
        """
        from wmrl_envs.envs.autoresearch.grading import check_source, score_from_status

        if len(contexts) != len(actions):
            raise ValueError(f"{len(contexts)} contexts but {len(actions)} actions")
        task_ids = [task_id_of(c) for c in contexts]
        preds: list[WorldModelPrediction | None] = [None] * len(actions)
        todo = []
        for i, a in enumerate(actions):
            pre = check_source(a)
            if pre is not None:
                status, message, _ = pre
                preds[i] = WorldModelPrediction(score=score_from_status(status), status=status, feedback=message,
                                                model_called=False)
            else:
                todo.append(i)
        if todo:
            scores = self.predict_scores([task_ids[i] for i in todo], [actions[i] for i in todo])
            for i, s in zip(todo, scores):
                preds[i] = WorldModelPrediction(
                    score=float(s), status="valid" if s >= _STATUS_THRESHOLD else "runtime_err",
                    extras={"head": self.head_for(task_ids[i])},
                )
        self.n_predictions += len(actions)
        self.n_model_calls += len(todo)
        return preds  # type: ignore[return-value]

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | Path) -> Path:
        """Write ``world_model.json`` (settings, routes, head metadata) and ``heads.npz`` (weights).

        The encoder is stored by reference: ``null`` for the default encoder, else its path.

        Returns:
            The folder (``Path``).

        Raises:
            RuntimeError: the model is not fitted.
        """
        if not self.heads:
            raise RuntimeError("nothing to save: the world model is not fitted")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {}
        heads_meta = {}
        for i, (key, h) in enumerate(self.heads.items()):
            for j, (w, b) in enumerate(h.layers):
                arrays[f"h{i}_w{j}"] = w
                arrays[f"h{i}_b{j}"] = b
            heads_meta[key] = {"index": i, "kind": h.kind, "n_layers": len(h.layers), "tasks": list(h.tasks),
                               "n_records": h.n_records, "alpha": h.alpha}
        np.savez(folder / "heads.npz", **arrays)
        meta = {
            "format": "wmrl.EmbeddingWorldModel", "version": 1, "text_version": _TEXT_VERSION,
            "encoder": self._encoder_arg if self._encoder is None else (
                None if self._encoder.path == _safe_default_path() else self._encoder.path),
            "head": self.head_kind, "alphas": list(self.alphas), "task_weight": self.task_weight,
            "hidden": self.hidden, "seed": self.seed,
            "clip": list(self.clip), "routes": self.routes, "heads": heads_meta,
        }
        (folder / "world_model.json").write_text(json.dumps(meta, indent=2))
        return folder

    @classmethod
    def load(cls, folder: str | Path, *, encoder: SentenceEncoder | str | Path | None = None) -> EmbeddingWorldModel:
        """Load a model written by :meth:`save`.

        Args:
            folder: the folder.
            encoder: overrides the stored encoder reference.

        Returns:
            The :class:`EmbeddingWorldModel`.

        Raises:
            FileNotFoundError: a file is missing.
            ValueError: not a saved ``EmbeddingWorldModel`` or an unsupported version.
        """
        folder = Path(folder)
        meta = json.loads((folder / "world_model.json").read_text())
        if meta.get("format") != "wmrl.EmbeddingWorldModel" or meta.get("version") != 1:
            raise ValueError(f"{folder} does not hold a version-1 EmbeddingWorldModel")
        if meta.get("text_version") != _TEXT_VERSION:
            raise ValueError(f"{folder} was fitted on text version {meta.get('text_version')}, this code writes {_TEXT_VERSION}")
        wm = cls(encoder if encoder is not None else meta["encoder"], head=meta["head"], alphas=meta["alphas"],
                 task_weight=meta["task_weight"], hidden=meta["hidden"], seed=meta["seed"], clip=tuple(meta["clip"]))
        with np.load(folder / "heads.npz") as z:
            for key, hm in meta["heads"].items():
                i = hm["index"]
                layers = [(z[f"h{i}_w{j}"], z[f"h{i}_b{j}"]) for j in range(hm["n_layers"])]
                wm.heads[key] = _Head(hm["kind"], layers, tuple(hm["tasks"]), int(hm["n_records"]), float(hm["alpha"]))
        wm.routes = dict(meta["routes"])
        return wm


def _safe_default_path() -> str | None:
    try:
        return default_encoder_path()
    except ImportError:  # pragma: no cover
        return None


# ----------------------------------------------------------------------------------------------
# Degraded world model
# ----------------------------------------------------------------------------------------------


class DegradedWorldModel:
    """A world model with a controlled amount of information about the outcome.

    Two ways to remove information (``mode``), both with noise ``z`` drawn independently of the
    actions from ``noise_pool`` (default: the real scores of the execution log's **training
    split**, i.e. the marginal distribution of real outcomes on the training tasks; held-out
    tasks' scores are never used, so that evaluating on them stays unbiased) or uniformly in
    [0, 1]:

    * ``"replace"`` (default): each prediction is kept with probability ``information`` and
      otherwise replaced by ``z`` — the rank correlation with the base model falls about
      linearly with ``information``, whatever the spread of the base scores;
    * ``"mix"``: ``score = information * base_score + (1 - information) * z``.

    ``information=1`` returns the base model's predictions unchanged; ``information=0``
    returns pure noise and does not call the base model at all. The noise stream is a
    ``numpy`` generator seeded by ``seed`` that advances with every prediction (so it depends on
    the call order only, never on the actions).

    Args:
        base: any world model (``predict(contexts, actions)``).
        information: in [0, 1].
        seed: noise seed.
        mode: ``"replace"`` or ``"mix"``.
        noise_pool: 1-D scores to draw ``z`` from; ``None`` uses the real scores of the
            records of ``log`` whose ``split`` is ``"train"``; an empty sequence draws
            ``z ~ U(0, 1)``.
        log: the execution log of the default pool (``None``: :data:`EXECUTION_LOG_PATH`);
            ignored when ``noise_pool`` is given.

    Raises:
        ValueError: ``information`` outside [0, 1], unknown ``mode``, or (default pool) a log
            without scored training-split records.
        FileNotFoundError: (default pool) ``log`` does not exist.

    Attributes:
        information: may be changed between calls (e.g. a mid-run degradation).
    """

    def __init__(
        self,
        base: Any,
        information: float,
        seed: int = 0,
        *,
        mode: str = "replace",
        noise_pool: Sequence[float] | None = None,
        log: str | Path | None = None,
    ) -> None:
        if not 0.0 <= float(information) <= 1.0:
            raise ValueError(f"information must be in [0, 1], got {information}")
        if mode not in ("replace", "mix"):
            raise ValueError(f"mode must be 'replace' or 'mix', got {mode!r}")
        self.base = base
        self.information = float(information)
        self.seed = int(seed)
        self.mode = mode
        self.rng = np.random.default_rng(self.seed)
        if noise_pool is None:
            # the training split only: held-out tasks' real scores must not reach the agent
            noise_pool = [float(r["score"]) for r in load_execution_log(log, split="train") if r.get("score") is not None]
            if not noise_pool:
                raise ValueError(
                    f"the execution log {log or EXECUTION_LOG_PATH} has no scored records with split 'train' "
                    "for the default noise pool; pass noise_pool= (scores to draw from, or [] for U(0, 1))"
                )
        self.noise_pool = np.asarray(noise_pool, dtype=np.float64)

    def _noise(self, n: int) -> np.ndarray:
        if self.noise_pool.size:
            return self.rng.choice(self.noise_pool, size=n)
        return self.rng.random(n)

    def predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[WorldModelPrediction]:
        """Predictions of the base model with information removed (see the class docstring).

        Returns:
            B :class:`WorldModelPrediction` objects; ``status`` is ``None`` except for
            predictions kept unchanged; ``extras["information"]`` holds ``information``.

        Raises:
            ValueError: the sequences differ in length.
        """
        if len(contexts) != len(actions):
            raise ValueError(f"{len(contexts)} contexts but {len(actions)} actions")
        a = self.information
        if a >= 1.0:
            return list(self.base.predict(contexts, actions))
        z = self._noise(len(actions))
        keep = self.rng.random(len(actions)) < a  # drawn even in "mix" mode: one stream for both modes
        if a <= 0.0:
            return [WorldModelPrediction(score=float(v), status=None, extras={"information": 0.0}) for v in z]
        base = list(self.base.predict(contexts, actions))
        out = []
        for p, v, k in zip(base, z, keep):
            if p.score is None:
                s = None
            elif self.mode == "mix":
                s = float(a * p.score + (1.0 - a) * v)
            else:
                s = float(p.score) if k else float(v)
            kept = self.mode == "replace" and bool(k)
            out.append(WorldModelPrediction(score=s, status=p.status if kept else None, model_called=p.model_called,
                                            extras={**p.extras, "information": a}))
        return out

    def state_dict(self) -> dict[str, Any]:
        """The noise generator's state, ``information`` (it may change mid-run) and the base
        model's own state where it has ``state_dict`` (``None`` otherwise); JSON-serialisable, saved
        with a run's correction state so that a resume repeats the run."""
        base = self.base.state_dict() if callable(getattr(self.base, "state_dict", None)) else None
        return {"rng": self.rng.bit_generator.state, "information": self.information, "base": base}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output.

        Raises:
            KeyError: a key is missing. ValueError: ``information`` outside [0, 1] (nothing changed
            then).
        """
        information = float(state["information"])
        if not 0.0 <= information <= 1.0:
            raise ValueError(f"a saved information must be in [0, 1], got {state['information']!r}")
        if state["base"] is not None and callable(getattr(self.base, "load_state_dict", None)):
            self.base.load_state_dict(state["base"])
        self.rng.bit_generator.state = state["rng"]
        self.information = information
