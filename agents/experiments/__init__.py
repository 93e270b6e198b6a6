"""Experiment harnesses built on the library (not agent plugins).

    * :mod:`~agents.experiments.bench` — ``wmrl bench``: the method benchmark on AutoResearch
      (six methods side by side, equal steps and equal compute); its configuration
      (:mod:`~agents.experiments.bench_config`), one method and seed
      (:mod:`~agents.experiments.bench_run`), resume and reuse (:mod:`~agents.experiments.bench_resume`),
      agents (:mod:`~agents.experiments.bench_agents`) and report (:mod:`~agents.experiments.bench_report`).
    * :mod:`~agents.experiments.speedup` — the headline figure: compute-to-target speedup over
      real-execution GRPO with a paired bootstrap interval (pure numpy).
    * :mod:`~agents.experiments.sweep` — ``wmrl bench sweep``: the known-truth map of the
      speedup over world-model quality × anchor fraction (``wmrl/KnownTruth-v0``); its
      configuration (:mod:`~agents.experiments.sweep_config`), one run (:mod:`~agents.experiments.sweep_run`)
      and outputs (:mod:`~agents.experiments.sweep_report`).
    * :mod:`~agents.experiments.advisor_check` — ``wmrl bench advisor``: the anchor-fraction advisor
      against measured speedups (configuration :mod:`~agents.experiments.advisor_check_config`,
      out of sample :mod:`~agents.experiments.advisor_oos`).
    * :mod:`~agents.experiments.libero_protocol` — ``wmrl libero``: the paper's VLA protocol on LIBERO.
    * :mod:`~agents.experiments.embodied` — the embodied experiment (Reacher, reward mode, a
      learned progress world model), on the Reacher task kit of :mod:`~agents.experiments.reacher`.
"""
