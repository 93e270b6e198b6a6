"""Experiment harnesses built on the library (not agent plugins).

    * :mod:`~agents.experiments.bench` — ``wmrl bench``: the method benchmark on AutoResearch
      (six methods side by side, equal steps and equal compute).
    * :mod:`~agents.experiments.speedup` — the headline figure: compute-to-target speedup over
      real-execution GRPO with a paired bootstrap interval (pure numpy).
    * :mod:`~agents.experiments.sweep` — ``wmrl bench sweep``: the known-truth map of the
      speedup over world-model quality × anchor fraction (``wmrl/KnownTruth-v0``).
    * :mod:`~agents.experiments.embodied` — the embodied experiment (Reacher, reward mode, a
      learned progress world model), on the Reacher task kit of :mod:`~agents.experiments.reacher`.
"""
