"""Execution costs of ``wmrl bench`` that do not move with the machine's load (issue 35, item 3).

The CPU-seconds of a sandboxed execution rise when other work shares the cores (caches, memory
bandwidth, the host's scheduling), so a ratio of two methods' compute measured tens of minutes apart
on a shared machine can move with whatever else ran. This module holds what charges executions
from a model measured once on the idle machine instead, with the live CPU-seconds kept beside it:

- :func:`program_family` — the estimator family of an AutoResearch solution (the scikit-learn
  model class its source fits);
- :class:`ExecutionCostModel` — CPU-seconds per execution as an additive model in log space,
  ``log(cpu + offset) = intercept + task + family + size + outcome effects``, fitted by
  ridge regression on executions measured on an idle machine (``benchmarks/execution_load.py``
  measures them and writes the model); saved and read as JSON;
- :class:`ModelledCostEnv` — a Gymnasium wrapper that charges each execution the model's
  CPU-seconds (``info["execution_cpu_s"]``, the key the wrappers charge) and keeps the measured
  figure in ``info["execution_cpu_s_live"]`` and in its running totals.

An execution that did not run (a source the host pre-check rejects: 0 CPU-seconds) or that the
machinery could not grade (``None``) is left as measured: the model prices only real executions.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import gymnasium as gym
import numpy as np

__all__ = ["program_family", "program_size", "ExecutionCostModel", "ModelledCostEnv", "LIVE_CPU_KEY"]

LIVE_CPU_KEY = "execution_cpu_s_live"
"""Step-info key of the measured CPU-seconds of an execution charged from a cost model."""

_PREPROCESSORS = frozenset({"StandardScaler", "MinMaxScaler", "QuantileTransformer", "PCA"})


def program_family(source: str) -> str:
    """The estimator family of an AutoResearch solution: the last scikit-learn model class (not a
    preprocessing step) its source calls, e.g. ``"RandomForestClassifier"``; ``"other"`` when it
    calls none of :data:`agents.grammar.programs.ESTIMATOR_MODULES`' models (an LLM's free-form line).

    Example:
        >>> program_family("model = make_pipeline(StandardScaler(), Ridge(alpha=1.0))")
        'Ridge'
        >>> program_family("print('hello')")
        'other'
    """
    from agents.grammar.programs import ESTIMATOR_MODULES

    names = [n for n in ESTIMATOR_MODULES if n not in _PREPROCESSORS]
    found = [(m.start(), n) for n in names for m in re.finditer(rf"\b{n}\s*\(", source)]
    return max(found)[1] if found else "other"


def program_size(source: str) -> str:
    """The size argument of an ensemble or iterative model in a solution, the hyper-parameter that moves its
    CPU most: ``"n_estimators=50"``, ``"max_iter=200"``, or ``"default"`` when the source sets neither.

    Example:
        >>> program_size("RandomForestRegressor(n_estimators=50, random_state=1)"), program_size("Ridge()")
        ('n_estimators=50', 'default')
    """
    m = re.findall(r"\b(n_estimators|max_iter)\s*=\s*(\d+)", source)
    return f"{m[-1][0]}={m[-1][1]}" if m else "default"


@dataclass
class ExecutionCostModel:
    """CPU-seconds of one execution from its task, program family and outcome, measured on an idle machine.

    ``cost = exp(intercept + task[t] + family[f] + size[z] + outcome[s]) - offset`` (at least 0), with
    ``z`` the :func:`program_size`; an effect not in the model (a task, family, size or outcome never
    measured) is 0, the mean level, and is warned about once. Fitted by :meth:`fit`.

    Attributes:
        intercept: float, log CPU-seconds of the mean execution.
        task, family, outcome, size: name -> additive effect in log space.
        offset: CPU-seconds added before the log (so that near-zero costs stay finite), default 0.05.
        meta: how and where it was measured (free-form; saved with it).
    """

    intercept: float
    task: dict[str, float]
    family: dict[str, float]
    outcome: dict[str, float]
    size: dict[str, float] = field(default_factory=dict)
    offset: float = 0.05
    meta: dict[str, Any] = field(default_factory=dict)
    _warned: set = field(default_factory=set, repr=False, compare=False)

    @classmethod
    def fit(cls, records: Iterable[Mapping[str, Any]], *, alpha: float = 1.0, offset: float = 0.05,
            meta: Mapping[str, Any] | None = None) -> "ExecutionCostModel":
        """Fit the additive log model by ridge regression on one-hot task, family, size and outcome columns.

        Args:
            records: measured executions, each with ``task_id``, ``family``, ``status``, ``size``
                (optional, default ``"default"``) and ``cpu_s`` (CPU-seconds > 0; records of 0 or ``None`` are not real executions and
                are left out).
            alpha: ridge penalty (shrinks the effect of a rarely seen level toward the mean).
            offset: see the class.

        Raises:
            ValueError: fewer than 3 usable records, or a record missing a key.
        """
        from sklearn.linear_model import Ridge

        recs = []
        for r in records:
            try:
                cpu = r["cpu_s"]
                key = (str(r["task_id"]), str(r["family"]), str(r["status"]), str(r.get("size", "default")))
            except KeyError as exc:
                raise ValueError(f"a cost record needs task_id, family, status and cpu_s; missing {exc}") from None
            if cpu is not None and float(cpu) > 0:
                recs.append((*key, float(cpu)))
        if len(recs) < 3:
            raise ValueError(f"a cost model needs at least 3 measured executions (cpu_s > 0), got {len(recs)}")
        levels = [sorted({r[i] for r in recs}) for i in range(4)]
        cols = [(i, v) for i in range(4) for v in levels[i]]
        x = np.array([[1.0 if r[i] == v else 0.0 for i, v in cols] for r in recs])
        y = np.log(np.array([r[4] for r in recs]) + offset)
        reg = Ridge(alpha=alpha).fit(x, y)
        eff: list[dict[str, float]] = [{}, {}, {}, {}]
        for (i, v), c in zip(cols, reg.coef_):
            eff[i][v] = float(c)
        return cls(float(reg.intercept_), eff[0], eff[1], eff[2], size=eff[3], offset=offset, meta=dict(meta or {}))

    def cost(self, task_id: str, family: str, status: str, size: str = "default") -> float:
        """CPU-seconds charged for one execution (>= 0)."""
        parts = [self.intercept]
        for name, table, key in (("task", self.task, task_id), ("family", self.family, family),
                                 ("outcome", self.outcome, status), ("size", self.size, size)):
            if name == "size" and not self.size:
                continue  # a model fitted without sizes
            if key not in table and (name, key) not in self._warned:
                self._warned.add((name, key))
                warnings.warn(f"execution cost model: {name} {key!r} was not measured; it is charged at the mean "
                              f"of the measured {name} levels (re-measure with benchmarks/execution_load.py to include it)",
                              stacklevel=2)
            parts.append(table.get(key, 0.0))
        return max(0.0, math.exp(sum(parts)) - self.offset)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "wmrl execution cost model", "version": 1, "intercept": self.intercept, "task": self.task,
                "family": self.family, "outcome": self.outcome, "size": self.size, "offset": self.offset,
                "meta": self.meta}

    def save(self, path: str | Path) -> None:
        """Write the model as JSON."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True))

    @classmethod
    def load(cls, path: str | Path) -> "ExecutionCostModel":
        """Read a model :meth:`save` wrote.

        Raises:
            FileNotFoundError: no such file.
            ValueError: the file is not a cost model of this version.
        """
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"execution cost model {p}: no such file (measure one with "
                                    "benchmarks/execution_load.py on an idle machine)")
        d = json.loads(p.read_text())
        if not isinstance(d, dict) or d.get("kind") != "wmrl execution cost model" or d.get("version") != 1:
            raise ValueError(f"{p} is not a wmrl execution cost model (version 1)")
        return cls(float(d["intercept"]), dict(d["task"]), dict(d["family"]), dict(d["outcome"]),
                   size=dict(d.get("size", {})), offset=float(d["offset"]), meta=dict(d.get("meta", {})))


class ModelledCostEnv(gym.Wrapper):
    """Charges each execution of an AutoResearch env from an :class:`ExecutionCostModel`.

    ``info["execution_cpu_s"]`` becomes the model's CPU-seconds for the step's task, the action's
    :func:`program_family` and :func:`program_size` and ``info["status"]``; the measured figure moves to
    ``info["execution_cpu_s_live"]``. A step that executed nothing (``info["executed"]`` false:
    0 CPU-seconds) or could not be measured or graded (``None``) is passed on unchanged.

    Attributes:
        live_cpu_s: measured CPU-seconds of the executions it charged from the model (float).
        modelled_cpu_s: what it charged for them (float).
        n_modelled: how many it charged (int).
    """

    def __init__(self, env: gym.Env, model: ExecutionCostModel) -> None:
        super().__init__(env)
        self.model = model
        self.live_cpu_s = 0.0
        self.modelled_cpu_s = 0.0
        self.n_modelled = 0

    def step(self, action: Any):
        from wmrl_envs.core.ledger import EXECUTION_CPU_KEY

        obs, reward, terminated, truncated, info = self.env.step(action)
        live = info.get(EXECUTION_CPU_KEY)
        if info.get("executed") and live is not None and info.get("graded", True) is not False:
            src = str(action)
            cost = self.model.cost(str(info.get("task_id")), program_family(src), str(info.get("status")),
                                   program_size(src))
            info = {**info, EXECUTION_CPU_KEY: cost, LIVE_CPU_KEY: float(live)}
            self.live_cpu_s += float(live)
            self.modelled_cpu_s += cost
            self.n_modelled += 1
        return obs, reward, terminated, truncated, info
