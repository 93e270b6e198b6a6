"""Saving and loading a :class:`~wmrl_envs.core.CorrectionLoop`'s state (router, route queue,
corrections, ledger, monitor, counters, advisor, adaptive fraction, the world model's own state),
and pickling it (a worker process of an ``AsyncVectorEnv`` sends it back; ``copy.deepcopy``).

The world model's state is saved whenever it has ``state_dict()`` and ``load_state_dict(state)``
(JSON-serialisable), frozen or learning: the random stream of a sampled judge or of a noisy
simulated world model (:class:`~wmrl_envs.envs.known_truth.KnownTruthWorldModel`) is part of what
a resumed run must repeat. A world model without them (or a ``torch.nn.Module``, whose weights
belong in the model checkpoint) is not saved, and saving the state warns once per loop: a resumed
run then repeats the uninterrupted one only if the world model's predictions depend on nothing
but their inputs."""

from __future__ import annotations

import dataclasses
import secrets
import threading
import warnings
from collections import deque
from pathlib import Path
from typing import Any, Mapping

from wmrl_envs.utils import write_json_atomic

from .adaptive import AdaptiveAnchorFraction
from .advisor import AnchorAdvisor
from .routing import warn_saved_settings

__all__ = ["LoopState"]


def _saves_state(world_model: Any) -> bool:
    """Whether the loop saves ``world_model``'s state: it has ``state_dict`` and ``load_state_dict``
    and is not a ``torch.nn.Module`` (tensors, and weights that belong in the model checkpoint)."""
    if world_model is None or not (callable(getattr(world_model, "state_dict", None))
                                   and callable(getattr(world_model, "load_state_dict", None))):
        return False
    return not any(c.__module__ == "torch.nn.modules.module" and c.__name__ == "Module"
                   for c in type(world_model).__mro__)

_STATE_KEYS = ("router", "route_queue", "corrector", "ledger", "n_groups_started", "n_groups_closed",
               "n_episodes", "groups_per_step", "ungraded")


class LoopState:
    """Mixed into :class:`~wmrl_envs.core.CorrectionLoop` (its state and checkpoints)."""

    def __getstate__(self) -> dict[str, Any]:
        """The loop's attributes for :mod:`pickle` and :func:`copy.deepcopy`, without its lock (a
        ``threading.RLock`` cannot be pickled): ``AsyncVectorEnv.get_attr("loop")`` on per-episode
        wrappers in worker processes, or a loop sent to another process, gets a copy with its own
        lock (:meth:`__setstate__`). The copy is independent: what either records afterwards the
        other does not see, so a loop captured by the ``env_fns`` of an ``AsyncVectorEnv`` is one
        loop per worker, not a shared one (share a loop within one process, or use
        :class:`~wmrl_envs.wrappers.AnchoredWorldModelVectorWrapper`, whose loop stays in it)."""
        state = self.__dict__.copy()
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`__getstate__`'s attributes with a new lock."""
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def state_dict(self) -> dict[str, Any]:
        """Router, route queue, corrections, ledger, monitor and counters (JSON-serialisable,
        with a ``"version"``), and the world model's state (``"world_model"``: its ``state_dict()``
        where it has ``state_dict``/``load_state_dict``, frozen or learning — e.g. a noisy world
        model's random stream, :meth:`LearnedWorldModel.state_dict
        <wmrl_envs.world_models.learned.LearnedWorldModel.state_dict>`'s anchor rollouts — else
        ``None``, with a ``UserWarning`` once per loop: see the module docstring). Save at a group
        boundary: open tickets are not part of the state (after a :meth:`load_state_dict` no ticket
        from before it can be closed)."""
        if self.world_model is not None and not _saves_state(self.world_model) and not self._wm_state_warned:
            self._wm_state_warned = True
            warnings.warn(
                f"the world model ({type(self.world_model).__name__}) has no state_dict()/load_state_dict() (or is a "
                "torch module): its state is not saved with the correction state, so a resumed run repeats the "
                "uninterrupted one only if its predictions depend on nothing but their inputs (no random stream, "
                "no counter, no learning); give it state_dict()/load_state_dict() (JSON-serialisable; {} for a "
                "world model without state) to save it", UserWarning, stacklevel=3)
        return self._state()

    def _state(self) -> dict[str, Any]:
        """:meth:`state_dict` without its warning (the snapshot a failed load goes back to)."""
        with self._lock:
            return {
                "version": self.STATE_VERSION,
                "router": self.router.state_dict(),
                "route_queue": list(self._route_queue),
                "corrector": self.corrector.state_dict(),
                "ledger": self.ledger.state_dict(),
                "n_groups_started": self.n_groups_started,
                "n_groups_closed": self.n_groups_closed,
                "n_episodes": self.n_episodes,
                "groups_per_step": self.groups_per_step,
                "ungraded": self.ungraded.state_dict(),
                "advisor": self.advisor.state_dict(),
                "adaptive": None if self.adaptive is None else self.adaptive.state_dict(),
                "advisor_group_ids": list(self._advisor_ids),
                "world_model": self.world_model.state_dict() if _saves_state(self.world_model) else None,  # type: ignore[union-attr]
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (the ``training`` flag is kept; :attr:`config`
        follows the loaded settings). The state is checked first: on an error nothing is changed.
        Tickets opened before the load can no longer be closed.

        Loading continues the saved run, so the saved settings win: every field of
        :attr:`config` (router, debiaser, denoiser, ``debias``/``denoise``) and
        ``groups_per_step`` take their saved values. When any of them differs from the value in
        use before the load, one :class:`UserWarning` lists each (configured and saved value);
        equal settings load silently.

        Raises:
            ValueError: ``state`` is not a mapping, its ``"version"`` is missing or not the int
                :attr:`STATE_VERSION`, a key of :meth:`state_dict` is missing (named), or a part
                of it is malformed.
        """
        if not isinstance(state, Mapping):
            raise ValueError(f"correction state must be a dict from state_dict(), got {type(state).__name__}")
        version = state.get("version")
        if type(version) is not int or version != self.STATE_VERSION:
            raise ValueError(
                f"correction state version {version!r} is not supported (this code reads version "
                f"{self.STATE_VERSION}); it was saved by another wmrl version"
            )
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise ValueError(f"correction state (version {version}) lacks the keys {missing}; it is incomplete")
        with self._lock:
            configured = self._settings()
            before = self._state()
            try:
                self._load(state)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                self._load(before)  # a malformed nested part: back to the state before the call
                raise ValueError(f"correction state is malformed ({type(e).__name__}: {e}); nothing was loaded") from e
            self._open_ids.clear()
            self._costs.clear_open()
            self._past_epochs.add(self._epoch)
            self._epoch = secrets.token_hex(8)  # every ticket opened before the load is refused
            saved = self._settings()
        warn_saved_settings("CorrectionLoop.load_state_dict", configured, saved)

    def _settings(self) -> dict[str, Any]:
        """The settings a load may replace: :attr:`config`'s fields and ``groups_per_step``."""
        return {**dataclasses.asdict(self.config), "groups_per_step": self.groups_per_step}

    def _load(self, state: Mapping[str, Any]) -> None:
        self.router.load_state_dict(state["router"], warn=False)
        self._route_queue = list(state["route_queue"])
        self.corrector.load_state_dict(state["corrector"])
        self.ledger.load_state_dict(state["ledger"])
        self.n_groups_started = int(state["n_groups_started"])
        self.n_groups_closed = int(state["n_groups_closed"])
        self.n_episodes = int(state["n_episodes"])
        self.groups_per_step = int(state["groups_per_step"])
        # the loaded groups_per_step is the stop rule's step too
        self.ungraded.load_state_dict({**state["ungraded"], "groups_per_step": self.groups_per_step})
        advisor = AnchorAdvisor()  # a state saved before the advisor existed loads with no groups
        if "advisor" in state:
            advisor.load_state_dict(state["advisor"])
        self.advisor = advisor
        ids = state.get("advisor_group_ids")  # absent: saved before a world model could learn
        ids = [None] * len(advisor) if ids is None or len(ids) != len(advisor) else [
            None if i is None else int(i) for i in ids]
        self._advisor_ids = deque(ids, maxlen=advisor.max_groups)
        # "learned_world_model": a state saved before issue 37 (only a learning world model's was saved)
        saved_wm = state.get("world_model", state.get("learned_world_model"))
        if saved_wm is not None and _saves_state(self.world_model):
            self.world_model.load_state_dict(saved_wm)  # type: ignore[union-attr]
        elif saved_wm is not None:
            warnings.warn(
                "the loaded state holds a world model's state, but this loop's world model "
                f"({type(self.world_model).__name__}) has no load_state_dict: the saved state is ignored and the "
                "run does not continue the saved one exactly. Build the loop with the same kind of world model "
                "(e.g. the same LearnedWorldModel and featurizer) to continue the saved run",
                UserWarning, stacklevel=4)
        adaptive = state.get("adaptive")
        if adaptive is None:
            self.adaptive = None
        else:
            self.adaptive = self.adaptive or AdaptiveAnchorFraction()
            self.adaptive.load_state_dict(adaptive)

    def save(self, path: str | Path) -> None:
        """Write :meth:`state_dict` to a JSON file atomically (at a group boundary)."""
        write_json_atomic(path, self.state_dict())

    def load(self, path: str | Path) -> None:
        """Load a file written by :meth:`save`.

        Raises:
            FileNotFoundError: no such file.
            ValueError: bad state (see :meth:`load_state_dict`).
        """
        import json

        self.load_state_dict(json.loads(Path(path).read_text()))
