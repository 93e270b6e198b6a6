"""The main job: GRPO of an LLM agent on AutoResearch with WMRL rewards (``wmrl train``).

One flat loop, readable top to bottom (in the spirit of CleanRL):

1. evaluate the untrained policy on the held-out tasks (avg@k, real execution through the
   wrapper's evaluation mode; :func:`agents.train.evaluation.evaluate`);
2. per step: sample ``groups_per_step`` training tasks, take each task's context from the
   wrapper (:meth:`~wmrl_envs.AnchoredWorldModelWrapper.begin_group`) and build its prompt,
   sample G solutions per task (:class:`agents.llm.policy.LLMPolicy`), score every group
   (:meth:`~wmrl_envs.AnchoredWorldModelWrapper.score_group`: the group step of
   ``wmrl_envs/core``), take the one GRPO step (:func:`agents.grpo.grpo_update`: advantages,
   ρ on anchor rows, ungraded rows dropped); log metrics and write a checkpoint;
3. evaluate again, plot the calibration, write and print the summary.

The configuration: :mod:`agents.train.config`; what a run is built of: :mod:`agents.train.build`;
the rollouts: :mod:`agents.train.rollout`; checkpoints: :mod:`agents.train.checkpoint`.

A run folder holds ``config.json``, ``metrics.jsonl``, ``checkpoint/`` (LoRA weights,
optimiser, RNG states, the wrapper's routing/correction state including every anchor pair),
``calibration.png``, ``summary.json`` and ``summary.md``. ``wmrl train --resume RUN_DIR``
continues from the last checkpoint. The method: ``docs/method.md`` (Yang et al., arXiv
2608.12564).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import shutil
import threading
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agents.grpo import group_batch, group_step, grpo_update
from agents.train import checkpoint
from agents.train.arms import (PROGRESS_FILE, CpuBudget, arms_rows, compare_arms, plot_arms, publish_progress,
                               real_arm_config, spent_cpu_s)
from agents.train.checkpoint import json_default
from agents.train.build import Components, build_components
from agents.train.config import TrainConfig, auto_fraction_notes, load_config, next_entropy_coef, update_config, validate
from agents.train.evaluation import evaluate, finite_mean
from agents.train.rollout import async_groups, multi_turn_groups
from agents.train.summary import plot_calibration, print_summary, secret_record, summarise, summary_markdown
from agents.train.tracking import Tracker
from wmrl_envs.core import GENERATION, UPDATE, ExecutionBudgetSpent, TooManyUngradedError, world_model_idle
from wmrl_envs.utils import finite_or_none, write_json_atomic

__all__ = ["train", "distinct_lines"]


def train(cfg: TrainConfig, run_dir: str | Path, *, resume: bool = False, quiet: bool = False) -> dict[str, Any]:
    """Run (or resume) the main job; returns the summary dict (also written to the run folder).

    With ``cfg.arms`` holding ``"real"`` (the default), real-execution GRPO is also trained in
    ``run_dir/real``, from the same initial policy and seed, until it has spent the WMRL arm's
    training CPU-seconds (:func:`agents.train.arms.real_arm_config`); the summary then leads with
    both arms' held-out quality at equal compute (``"arms"``:
    :func:`agents.train.arms.compare_arms`) and ``arms.png`` plots it. With
    ``cfg.concurrent_arms`` on the CPU (the default; :func:`concurrent_arms`) the real arm trains
    beside the WMRL arm in a second process (log: ``run_dir/real-arm.log``), stopping at the step
    it would have stopped at after it (:class:`agents.train.arms.CpuBudget`); otherwise after it.
    A resume continues whichever arm was interrupted.

    Args:
        cfg: the configuration (ignored on resume: the run folder's config.json is used).
        run_dir: the run folder (created; must not hold another run unless ``resume``).
        resume: continue the run in ``run_dir`` from its last checkpoint.
        quiet: no progress bar or table.

    Raises:
        FileExistsError: ``run_dir`` already holds a run and ``resume`` is False.
        FileNotFoundError: ``resume`` without a checkpoint in ``run_dir``.
        NotADirectoryError: ``run_dir``, or a folder above it, is a file (:func:`check_run_dir`).
        ValueError: invalid configuration.
        TooManyUngradedError: the stop rule fired (the reason is in metrics.jsonl; the last
            checkpoint stays for a resume).
    """
    run_dir = Path(run_dir)
    check_run_dir(run_dir)
    if resume and (run_dir / "summary.json").exists():  # the WMRL arm is done: the real arm is left
        cfg = load_config(run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        if "real" not in cfg.arms or summary.get("arms"):
            raise ValueError(f"the run in {run_dir} is complete (see {run_dir / 'summary.md'}); start a new run "
                             "with --run-dir, nothing to resume")
        beside = None
    else:
        # the checks that need no model, before the real arm's process is announced and started
        if resume and not (run_dir / "config.json").exists():
            load_config(run_dir)  # raises: not a run folder
        if not resume:
            validate(cfg)
            if (run_dir / "config.json").exists():
                raise _holds_a_run(run_dir)
        arm_cfg = load_config(run_dir) if resume else cfg
        if not resume and not (run_dir / "config.json").exists():
            (run_dir / PROGRESS_FILE).unlink(missing_ok=True)  # not a run: a stale file must not start the real arm
        beside = _RealArmBeside(arm_cfg, run_dir, quiet) if concurrent_arms(arm_cfg) else None
        try:
            summary = _train_arm(cfg, run_dir, resume=resume, quiet=quiet)
        except BaseException:
            if beside is not None:
                beside.stop()
            raise
        cfg = load_config(run_dir)
    if "real" not in cfg.arms:
        return summary
    return _real_arm(cfg, run_dir, summary, quiet, beside)


def _holds_a_run(run_dir: Path) -> FileExistsError:
    return FileExistsError(f"{run_dir} already holds a run; pass --resume {run_dir} to continue it, or choose "
                           "another --run-dir")


def check_run_dir(run_dir: Path) -> None:
    """Raise before anything is built when ``run_dir`` cannot be a folder.

    Raises:
        NotADirectoryError: ``run_dir`` or the nearest existing path above it is not a folder
            (e.g. ``--run-dir results.json/run``); the message names that path.
    """
    path = Path(run_dir).absolute()
    for candidate in (path, *path.parents):
        if candidate.exists():
            if not candidate.is_dir():
                what = "is" if candidate == path else f"(above {run_dir}) is"
                raise NotADirectoryError(f"--run-dir {run_dir}: {candidate} {what} a file, not a folder; "
                                         "choose another --run-dir")
            return


def concurrent_arms(cfg: TrainConfig) -> bool:
    """Whether :func:`train` trains the two arms side by side: ``cfg.concurrent_arms``, both arms
    asked for, on the CPU (one torch thread each, ``cfg.threads == 1``), the policy sampled in
    process (no vLLM) and anchors executed in the step (``executor="local"``), on a machine with at
    least 2 cores. Elsewhere the real arm trains after the WMRL arm (a GPU or a vLLM server would be
    shared by both; a Ray pool already takes the other cores)."""
    from agents.llm.backbone import resolve_device

    return bool(getattr(cfg, "concurrent_arms", False) and "real" in cfg.arms and cfg.threads == 1
                and cfg.vllm_url is None and not cfg.vllm_colocate and cfg.executor == "local"
                and len(os.sched_getaffinity(0)) >= 2 and resolve_device(cfg.device).type == "cpu")


def arms_schedule(followed: bool, trained_here: bool) -> str:
    """How the real arm trained, for the arms' table: ``followed`` (its config.json has no fixed
    budget: it started beside the WMRL arm, following its CPU-s) and ``trained_here`` (this process
    trained some of it after the WMRL arm ended: a resume, or a failed second process)."""
    if not followed:
        return "after the WMRL arm"
    return "beside the WMRL arm, then after it (a resume finished it here)" if trained_here else \
        "beside the WMRL arm (one process each)"


class _RealArmBeside:
    """The real arm in a second process (spawned), beside the WMRL arm in this one.

    The process waits for the WMRL arm's first :data:`~agents.train.arms.PROGRESS_FILE` (its
    initial evaluation, shared), then trains the real arm in ``run_dir/real`` (or resumes it) under
    a :class:`~agents.train.arms.CpuBudget` that follows the WMRL arm; its output goes to
    ``run_dir/real-arm.log``."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, quiet: bool) -> None:
        import multiprocessing

        self.log = run_dir / "real-arm.log"
        self.process = multiprocessing.get_context("spawn").Process(
            target=_real_arm_process, args=(cfg, str(run_dir), os.getpid()), name="wmrl-real-arm")
        self.process.start()
        Console(quiet=quiet).print(f"[bold]real-execution GRPO arm[/bold]: training beside this one in a second process "
                                   f"until it has spent this arm's training CPU-s (log: {self.log})")

    def wait(self) -> int:
        """Wait for the process to end; returns its exit code (0: the real arm finished)."""
        self.process.join()
        return int(self.process.exitcode)

    def stop(self) -> None:
        """End the process (its last checkpoint stays for a resume)."""
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(30)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()


def _real_arm_process(cfg: TrainConfig, run_dir: str, parent_pid: int) -> None:
    """The body of :class:`_RealArmBeside`'s process (a module-level function: spawned processes
    import it)."""
    import sys

    from agents.train.arms import read_progress

    python_interrupts()
    run, alive = Path(run_dir), (lambda: os.getppid() == parent_pid)
    while (progress := read_progress(run)) is None:  # the WMRL arm's initial evaluation is not done yet
        if not alive():
            return
        time.sleep(1.0)
    log = open(run / "real-arm.log", "a", buffering=1)  # noqa: SIM115 - the process's stdout until it exits
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    threading.Thread(target=_exit_with_parent, args=(alive,), name="wmrl-real-arm-parent", daemon=True).start()
    real_dir = run / "real"
    if (real_dir / "summary.json").exists():  # it finished before the WMRL arm was killed in its evaluation
        return
    resume = checkpoint.checkpoint_folder(real_dir) is not None
    if not resume and real_dir.exists():  # a start killed before its first checkpoint: begin again
        shutil.rmtree(real_dir)
    try:
        _train_arm(real_arm_config(cfg, None), real_dir, resume=resume, quiet=False, eval_before=progress["eval_before"],
                   show_table=False, adapter_prefix="wmrl-real-policy",
                   budget=CpuBudget(follow=run, alive=alive, log=print))
    except KeyboardInterrupt:  # the WMRL arm's process stopped this one (Ctrl-C, kill, or it is gone)
        print("the real arm was stopped (its last checkpoint stays): wmrl train --resume continues both arms",
              flush=True)
        raise SystemExit(130) from None


def python_interrupts() -> None:
    """In a process's main thread: SIGINT raises ``KeyboardInterrupt`` (Python's own handler), even
    where the process was started with SIGINT ignored (a job started in the background by a shell,
    ``nohup``), so that :func:`_exit_with_parent` and Ctrl-C can interrupt a step; and so does
    SIGTERM (:meth:`_RealArmBeside.stop`'s ``terminate``), so a stopped arm removes its sandboxes
    and says in its log that it was stopped."""
    import signal

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupt)


def _exit_with_parent(alive: Any, poll_s: float = 1.0, grace_s: float = 60.0) -> None:
    """In the real arm's process: stop it within ``poll_s`` of the WMRL arm's process going (e.g.
    ``kill -9``, which lets that process stop nothing), instead of training on to the end of its
    step. It interrupts the main thread (``KeyboardInterrupt``, which needs :func:`python_interrupts`
    in that thread: the step's ``finally`` blocks remove their sandboxes) and ends the process after
    ``grace_s`` if that has not. The last
    checkpoint stays (written atomically: :mod:`agents.train.checkpoint`); ``wmrl train --resume``
    continues both arms."""
    import _thread

    while alive():
        time.sleep(poll_s)
    print("the WMRL arm's process is gone: the real arm stops here; wmrl train --resume continues both arms "
          "from their last checkpoints", flush=True)
    _thread.interrupt_main()
    time.sleep(grace_s)
    os._exit(3)


def _real_arm(cfg: TrainConfig, run_dir: Path, summary: dict[str, Any], quiet: bool,
              beside: _RealArmBeside | None = None) -> dict[str, Any]:
    """Train the real arm in ``run_dir/real`` (or resume it) at the WMRL arm's training CPU-seconds,
    or wait for it to finish beside (``beside``; trained here from its last checkpoint if that
    process failed), then add the comparison of the arms to the WMRL arm's summary
    (``summary.json``, ``summary.md``, ``arms.png``) and print it; returns that summary."""
    console = Console(quiet=quiet)
    real_dir = run_dir / "real"
    if beside is not None:
        console.print(f"waiting for the real-execution arm to finish beside this one (log: {beside.log})")
        try:
            code = beside.wait()
        except BaseException:  # interrupted while waiting: the real arm stops too (a resume continues it)
            beside.stop()
            raise
        if code != 0 or not (real_dir / "summary.json").exists():
            console.print(f"[yellow]the real arm's process failed[/yellow] (exit code {code}; see {beside.log}): "
                          "training it here from its last checkpoint")
    if not summary.get("training_cpu_s"):  # e.g. --execution-budget spent before the first step
        summary["arms"] = {"skipped": "the WMRL arm trained no step, so there is no compute to match"}
        write_json_atomic(run_dir / "summary.json", finite_or_none(json.loads(json.dumps(summary, default=json_default))),
                          indent=2)
        (run_dir / "summary.md").write_text(summary_markdown(summary))
        console.print("[yellow]no real-execution arm[/yellow]: the WMRL arm trained no step")
        return summary
    from agents.llm.backbone import resolve_device

    if resolve_device(cfg.device).type != "cpu":
        warnings.warn("the arms are compared at equal CPU-seconds of this machine; on a GPU the accelerator's time is "
                      "not in them (generation, update and world model run there): read the comparison as equal CPU, "
                      "or train --arms wmrl", UserWarning, stacklevel=2)
    trained_here = False  # whether this process trained (part of) the real arm after the WMRL arm
    if (real_dir / "summary.json").exists():
        real = json.loads((real_dir / "summary.json").read_text())
    else:
        trained_here = True
        resume = checkpoint.checkpoint_folder(real_dir) is not None
        if not resume and real_dir.exists():  # a start killed before its first checkpoint: begin again
            shutil.rmtree(real_dir)
        real_cfg = real_arm_config(cfg, summary["training_cpu_s"])
        console.print(f"[bold]real-execution GRPO arm[/bold]: {real_cfg.groups_per_step} group(s) per step until "
                      f"{real_cfg.cpu_budget_s:.0f} training CPU-s are spent (the WMRL arm's), in {real_dir}")
        real = _train_arm(real_cfg, real_dir, resume=resume, quiet=quiet, eval_before=summary["heldout_before"],
                          show_table=False, adapter_prefix="wmrl-real-policy",
                          budget=CpuBudget(summary["training_cpu_s"]))
    summary["arms"] = compare_arms(summary, real)
    # the real arm's own record says how it trained (a resume may find it finished beside): its
    # budget was followed (None in its config.json) or known when it started
    followed = json.loads((real_dir / "config.json").read_text()).get("cpu_budget_s") is None
    summary["arms"]["schedule"] = arms_schedule(followed, trained_here)
    write_json_atomic(run_dir / "summary.json", finite_or_none(json.loads(json.dumps(summary, default=json_default))),
                      indent=2)
    (run_dir / "summary.md").write_text(summary_markdown(summary))
    plot_arms(summary, real, run_dir / "arms.png")
    print_summary(console, summary, title="wmrl train — both arms at equal compute", rows=arms_rows(summary["arms"]))
    return summary


def _train_arm(cfg: TrainConfig, run_dir: Path, *, resume: bool, quiet: bool, eval_before: dict | None = None,
               show_table: bool = True, adapter_prefix: str = "wmrl-policy", budget: CpuBudget | None = None
               ) -> dict[str, Any]:
    """One arm of :func:`train`: a run of ``cfg`` in ``run_dir`` (see there), started or resumed.
    ``eval_before``: the initial policy's held-out evaluation when another arm already made it (the
    same initial policy: LoRA starts as the identity). ``show_table``: print the arm's summary.
    ``adapter_prefix``: the names of its LoRA adapters on a vLLM server (one per arm: a server
    refuses a name it already holds). ``budget``: the stop rule under a CPU budget (default: the
    configuration's ``cpu_budget_s``)."""
    console = Console(quiet=quiet)
    cfg = _start(cfg, run_dir, resume, console)
    for note in auto_fraction_notes(cfg):
        warnings.warn(note, UserWarning, stacklevel=2)
    t_start = time.perf_counter()
    if not console.is_terminal:  # a log file gets the step lines, not transformers' loading bars
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    c = build_components(cfg)
    if not resume:  # written only once everything is built, so a failed start leaves no folder
        run_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(run_dir / "config.json", asdict(cfg), indent=2, default=json_default)
    if cfg.vllm_url is not None:  # the policy samples on the server with its adapter pushed
        from agents.llm.vllm_server import VLLMServerSampler

        c.policy.sampler = VLLMServerSampler(cfg.vllm_url, cfg.vllm_served_model or cfg.model,
                                             adapter_dir=cfg.vllm_adapter_dir or run_dir / "vllm_adapters",
                                             name_prefix=adapter_prefix)
    elif cfg.vllm_colocate:  # experimental: an in-process engine beside the trainer
        from agents.llm.backbone import DEFAULT_MODEL
        from agents.llm.vllm_server import VLLMColocatedSampler
        from wmrl_envs.world_models.smollm2 import default_cache_dir

        base = str(default_cache_dir()) if cfg.model == DEFAULT_MODEL else cfg.model
        c.policy.sampler = VLLMColocatedSampler(base, adapter_dir=cfg.vllm_adapter_dir or run_dir / "vllm_adapters",
                                                max_lora_rank=cfg.lora_r, name_prefix=adapter_prefix,
                                                gpu_memory_utilization=cfg.vllm_gpu_memory_utilization)
    try:
        tracker = Tracker(cfg.report_to, run_dir, asdict(cfg), resume=resume)
        if not resume and getattr(c.policy, "sampler", None) is not None:
            c.policy.sampler.sync(c.policy)  # the server samples with this policy's adapter (fails fast here)
    except BaseException:
        if not resume and not (run_dir / "checkpoint").exists():  # a failed start leaves no folder
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    try:
        return _train_loop(cfg, run_dir, resume, c, console, tracker, t_start, eval_before, show_table, budget)
    finally:
        tracker.close()


def _train_loop(cfg: TrainConfig, run_dir: Path, resume: bool, c: Components, console: Console, tracker: Tracker,
                t_start: float, shared_eval_before: dict | None = None, show_table: bool = True,
                budget: CpuBudget | None = None) -> dict[str, Any]:
    """Steps 1-3 of :func:`train` on the built components (``tracker`` mirrors the metrics). The
    WMRL arm of a two-arm run publishes its progress for the real arm (:func:`publish_progress`)."""
    budget = budget if budget is not None else CpuBudget(cfg.cpu_budget_s)
    publishes = "real" in cfg.arms
    policy, wrapper, ledger = c.policy, c.wrapper, c.wrapper.loop.ledger
    update_cfg = update_config(cfg)
    ent_coef = cfg.entropy_coef  # --entropy-floor moves it step by step (next_entropy_coef)
    rng = np.random.default_rng(cfg.seed)
    metrics_path = run_dir / "metrics.jsonl"

    # 1. the initial policy on the held-out tasks (or the state of the run being resumed)
    if resume:
        start_step, eval_before, prior_wall = checkpoint.resume_state(run_dir, c, rng, metrics_path)
    if resume and getattr(policy, "sampler", None) is not None:
        policy.sampler.sync(policy)  # the server samples with the adapter of the restored policy
    if resume:
        saved = json.loads((checkpoint.checkpoint_folder(run_dir) / "state.json").read_text())
        ent_coef = float(saved.get("entropy_coef", cfg.entropy_coef))
        console.print(f"resumed at step {start_step}/{cfg.steps} with {c.wrapper.loop.stats()['anchor_pairs']} anchor pairs")
    else:
        if shared_eval_before is not None:  # the same initial policy, evaluated by the other arm
            eval_before = shared_eval_before
        else:
            console.print(f"evaluating the initial policy on {len(c.heldout_tasks)} held-out tasks x k={cfg.eval_k} "
                          "(real execution)")
            eval_before = evaluate(c, cfg)
        start_step, prior_wall = 0, 0.0
        checkpoint.save_checkpoint(run_dir, c, -1, rng, {"eval_before": eval_before, "wall_s": time.perf_counter() - t_start})
        tracker.log(eval_before, 0, prefix="eval/")
    steps_done = start_step
    if publishes:
        publish_progress(run_dir, eval_before=eval_before, spent=spent_cpu_s(ledger), steps_trained=steps_done, final=False,
                         steps_planned=cfg.steps)

    # 2. GRPO steps
    step_costs: list[float] = []  # training CPU-s of each step trained in this process: the next one's estimate
    # a real arm following the WMRL arm does not know its steps until the WMRL arm has published some
    with StepProgress(console, None if budget.follow is not None else cfg.steps, start_step) as progress:
        for step in range(start_step, cfg.steps):
            spent_before = spent_cpu_s(ledger)
            next_step = sum(step_costs[-3:]) / len(step_costs[-3:]) if step_costs else None
            if budget.stop_before(spent_before, step, next_step):  # --cpu-budget-s (or the WMRL arm's): training ends here
                limit = budget.limit()[0]
                _append_jsonl(metrics_path, {"step": step, "stopped": "cpu_budget_spent", "training_cpu_s": spent_cpu_s(ledger),
                                             "cpu_budget_s": limit, "next_step_cpu_s": next_step, "waited_s": budget.waited_s,
                                             "ledger": ledger.to_dict()})
                console.print(f"[bold]CPU budget reached before step {step + 1}[/bold]: {spent_cpu_s(ledger):.0f} of "
                              f"{limit:.0f} training CPU-s spent; training ends here")
                break
            t_step = time.perf_counter()
            # sample the step's tasks and take each one's context from the wrapper
            try:
                wrapper.plan_step(cfg.groups_per_step)
            except ExecutionBudgetSpent as exc:  # --execution-budget spent: training ends here
                _budget_stop(metrics_path, step, exc, wrapper, ledger, console)
                break
            task_ids = [str(t) for t in rng.choice(c.train_tasks, size=cfg.groups_per_step,
                                                   replace=cfg.groups_per_step > len(c.train_tasks))]
            specs = [c.get_task(t) for t in task_ids]
            groups = []
            try:
                if cfg.max_turns > 1:  # episodes one by one, each turn's feedback in the next prompt
                    samples, turn_rollout = multi_turn_groups(c, cfg, task_ids, specs, groups)
                else:
                    contexts = [wrapper.begin_group(options={"task_id": t})[0] for t in task_ids]
                    prompts = [policy.build_prompt(ctx, spec) for ctx, spec in zip(contexts, specs)]
                    # G completions per task
                    with ledger.timed(GENERATION, count=cfg.groups_per_step * cfg.group_size):
                        samples = policy.sample(prompts, cfg.group_size)
                    if c.scorer is not None:  # anchors on the Ray pool; train what has arrived
                        groups, train_samples, old_lp, async_rec = async_groups(c, cfg, step, task_ids, specs, samples)
                    else:
                        # score every group: world model, real execution on anchors, corrections; each
                        # with its begun context (an anchor group resets the inner env again to execute)
                        for t, ctx, spec, texts in zip(task_ids, contexts, specs, samples.texts):
                            groups.append(wrapper.score_group([policy.completion_to_action(x, spec) for x in texts],
                                                              options={"task_id": t}, context=ctx))
            except ExecutionBudgetSpent as exc:  # a group refused at the budget: this step is not trained
                _budget_stop(metrics_path, step, exc, wrapper, ledger, console)
                break
            except TooManyUngradedError as exc:  # the stop rule: record why, keep the last checkpoint
                _append_jsonl(metrics_path, {"step": step, "stopped": "too_many_ungraded", "error": str(exc),
                                             "ungraded_step": exc.causes,
                                             **_pick(wrapper.loop.stats(), UNGRADED_KEYS),
                                             "ledger": ledger.to_dict()})
                console.print(f"[bold red]stopped at step {step}[/bold red]: {exc}")
                raise
            # one GRPO step on the kept rows (ρ on anchor rows, ungraded rows dropped)
            _check_judge_idle(c.judge, cfg.world_model_timeout_s)
            update_cfg = dataclasses.replace(update_cfg, entropy_coef=ent_coef)
            with ledger.timed(UPDATE):  # wall-clock and CPU-seconds of the update
                if cfg.max_turns > 1:  # every turn row takes its episode's advantage
                    batch = group_batch([g.rewards for g in groups], [g.advantage_weight for g in groups], update_cfg)
                    update = group_step(policy, c.optimizer, samples, batch, config=update_cfg, turn_episode=turn_rollout)
                elif c.scorer is not None:
                    update = grpo_update(policy, c.optimizer, train_samples, [g.rewards for g in groups],
                                         [g.advantage_weight for g in groups], config=update_cfg, old_logprobs=old_lp)
                else:
                    update = grpo_update(policy, c.optimizer, samples, [g.rewards for g in groups],
                                         [g.advantage_weight for g in groups], config=update_cfg)
                if getattr(policy, "sampler", None) is not None:
                    policy.sampler.sync(policy)  # the next step samples the updated policy
            # log and checkpoint
            rec = _step_record(step, task_ids, groups, samples, update, wrapper, time.perf_counter() - t_step)
            rec["entropy_coef"] = ent_coef
            ent_coef = next_entropy_coef(ent_coef, update["entropy"] if update["n_rows"] else None, cfg)
            if c.scorer is not None:
                rec.update(async_rec)
            _append_jsonl(metrics_path, rec)
            step_costs.append(spent_cpu_s(ledger) - spent_before)
            tracker.log(rec, step)
            checkpoint.save_checkpoint(run_dir, c, step, rng, {"eval_before": eval_before,
                                                     "wall_s": prior_wall + time.perf_counter() - t_start,
                                                     "anchors_in_flight": len(c.in_flight),
                                                     "entropy_coef": ent_coef})
            reward = rec["reward_mean"] if rec["reward_mean"] is not None else float("nan")
            info = f"reward {reward:.3f} rho {rec['rho']:.2f} pairs {rec['anchor_pairs']}"
            limit, final = budget.estimate(), budget.limit()[1]
            if limit is not None and limit > 0:  # the steps the budget allows, from the mean step so far
                spent = spent_cpu_s(ledger)
                info += f" CPU-s {spent:.0f}/{'' if final else '~'}{limit:.0f}"
                progress.total = min(cfg.steps, max(step + 1, round(limit / (spent / (step + 1)))))
            elif limit is not None and not final:  # a followed budget not yet known: no total, no time left
                progress.total = None
            progress.advance(rec["step_s"], info)
            steps_done = step + 1
            if publishes:
                publish_progress(run_dir, eval_before=eval_before, spent=spent_cpu_s(ledger), steps_trained=steps_done,
                                 final=False, steps_planned=cfg.steps)

    if c.scorer is not None and c.in_flight:  # their pairs still feed the corrections; too late to train
        console.print(f"waiting for {len(c.in_flight)} anchor groups still executing on the Ray pool")
        c.scorer.collect(timeout=cfg.exec_wall_time_s + 180.0)
        _append_jsonl(metrics_path, {"step": cfg.steps - 1, "after_training": True,
                                     "anchors_arrived_after_training": len(c.in_flight),
                                     "ledger": ledger.to_dict()})
        c.in_flight.clear()
        # the last checkpoint again, now with their anchor pairs and executions
        checkpoint.save_checkpoint(run_dir, c, cfg.steps - 1, rng, {"eval_before": eval_before, "anchors_in_flight": 0,
                                                          "wall_s": prior_wall + time.perf_counter() - t_start})

    if publishes:  # its total is now final: the real arm beside it can decide its last step
        publish_progress(run_dir, eval_before=eval_before, spent=spent_cpu_s(ledger), steps_trained=steps_done, final=True,
                         steps_planned=cfg.steps)

    # 3. the trained policy on the held-out tasks, and the summary
    console.print("evaluating the trained policy on the held-out tasks (real execution)")
    eval_after = evaluate(c, cfg)
    tracker.log(eval_after, cfg.steps, prefix="eval/")
    summary = summarise(cfg, c, eval_before, eval_after, prior_wall + time.perf_counter() - t_start, metrics_path)
    # strict JSON: a figure that does not exist yet (NaN: e.g. advice from too few anchor groups) is null
    write_json_atomic(run_dir / "summary.json", finite_or_none(json.loads(json.dumps(summary, default=json_default))),
                      indent=2)
    plot_calibration(c, run_dir / "calibration.png")
    tracker.log_image("calibration", run_dir / "calibration.png", cfg.steps)
    (run_dir / "summary.md").write_text(summary_markdown(summary))
    if show_table:
        print_summary(console, summary)
    c.env.close()
    c.env.sandbox.close()
    if c.scorer is not None:
        c.scorer.pool.close()
    return summary


class StepProgress:
    """Progress over the GRPO steps on ``console``.

    In a terminal: a bar (``GRPO ━━━━ 3/7 0:11:32 ~0:15:20 left reward ...``: steps done of all,
    elapsed time, the time left estimated from this process's mean step time, and ``info``,
    the last step's reward, ρ and anchor pairs), redrawn in place. Elsewhere (a log file, CI):
    no bar, one plain line per finished step,
    ``step 3/7 (231 s, elapsed 0:11:32, ~0:15:20 left): reward ...``. Nothing when the console
    is quiet.

    Args:
        console: where to show it (``console.is_terminal`` picks the bar or the lines).
        total: the run's steps; ``None`` while they are unknown (a real arm following a WMRL arm
            that has published no step yet): the line then shows no total and no time left.
        start: steps already done (a resumed run); the estimate uses only this process's steps.
        clock: seconds now (default ``time.perf_counter``; read on entry and at each step).

    Use as a context manager; call :meth:`advance` once per finished step.
    """

    def __init__(self, console: Console, total: int | None, start: int = 0, clock: Any = time.perf_counter) -> None:
        self.console, self.done, self._clock = console, int(start), clock
        self.total: int | None = None if total is None else int(total)
        self._steps_here, self._t0 = 0, 0.0
        self.live = console.is_terminal and not console.quiet
        self._progress = Progress(
            TextColumn("[bold]GRPO"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[left]}"), TextColumn("{task.fields[info]}"), console=console,
            disable=not self.live,
        )
        self._bar = None

    def __enter__(self) -> StepProgress:
        self._t0 = self._clock()
        self._progress.__enter__()
        self._bar = self._progress.add_task("steps", total=self.total, completed=self.done, info="", left="")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.__exit__(*exc)

    def advance(self, step_s: float, info: str) -> None:
        """One step finished in ``step_s`` seconds; ``info``: what to show beside it (one line).
        ``total`` may be changed before (a run under a compute budget re-estimates its steps)."""
        self.done += 1
        if self._bar is not None:
            self._progress.update(self._bar, total=self.total)
        self._steps_here += 1
        elapsed = self._clock() - self._t0
        if self.total is None:
            left, of, times = "", "", f"elapsed {_clock(elapsed)}"
        else:
            left = f"~{_clock(elapsed / self._steps_here * max(0, self.total - self.done))} left"
            of, times = f"/{self.total}", f"elapsed {_clock(elapsed)}, {left}"
        self._progress.update(self._bar, advance=1, info=info, left=left)
        if not self.live and not self.console.quiet:  # a log file gets one plain line per step, no bar
            self.console.print(f"step {self.done}{of} ({step_s:.0f} s, {times}): {info}",
                               markup=False, highlight=False, soft_wrap=True)


def _clock(seconds: float) -> str:
    """``H:MM:SS`` of a duration in seconds (rounded)."""
    s = int(round(max(0.0, seconds)))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _start(cfg: TrainConfig, run_dir: Path, resume: bool, console: Console) -> TrainConfig:
    """The run's configuration (validated, or the resumed run's), after the checks that need no
    model: a new run's folder must be free, a resumed run must be unfinished. Seeds Python's
    RNG and warns when the data come from the public reference secret.

    Raises:
        FileExistsError, FileNotFoundError, ValueError: as :func:`train`.
    """
    if resume:
        cfg = load_config(run_dir)
    else:
        validate(cfg)
        if (run_dir / "config.json").exists():
            raise _holds_a_run(run_dir)
    random.seed(cfg.seed)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    console.print(f"[bold]wmrl train[/bold] preset={cfg.preset} run_dir={run_dir}" + (" (resuming)" if resume else ""))
    if secret_record()["reference"]:
        console.print(
            "[yellow]warning[/yellow]: the AutoResearch data come from the public reference secret "
            "(WMRL_TASK_SECRET=wmrl-reference): its hidden labels can be rebuilt from this repository. "
            "Use it to reproduce published figures; unset WMRL_TASK_SECRET to train on this "
            "installation's private data (docs/autoresearch.md)."
        )
    if resume and (run_dir / "summary.json").exists():
        raise ValueError(
            f"the run in {run_dir} is complete (see {run_dir / 'summary.md'}); start a new run "
            "with --run-dir, nothing to resume"
        )
    return cfg


def _budget_stop(metrics_path: Path, step: int, exc: ExecutionBudgetSpent, wrapper: Any, ledger: Any,
                 console: Console) -> None:
    """Record that ``--execution-budget`` ended training at ``step`` (that step is not trained; the
    run goes on to the held-out evaluation and the summary, from the last checkpoint's policy)."""
    _append_jsonl(metrics_path, {"step": step, "stopped": "execution_budget_spent", "error": str(exc),
                                 "executions": wrapper.loop.stats()["executions"], "ledger": ledger.to_dict()})
    console.print(f"[bold]execution budget spent at step {step}[/bold]: {exc}; training ends here")


def _check_judge_idle(judge: Any, timeout_s: float | None) -> None:
    """The judge is the policy's own backbone: never update it while a judge call that timed out
    is still running on it (docs/method.md, "Ungraded rollouts").

    Raises:
        RuntimeError: such a call is still running after another wait of ``timeout_s``.
    """
    if judge is not None and not world_model_idle(judge, timeout_s):
        raise RuntimeError(
            f"a world-model (judge) call that exceeded world_model_timeout_s={timeout_s} s "
            "is still running on the policy's backbone after another such wait; the policy cannot be "
            "updated beside it. The judge hangs: check the model/device, then resume this run."
        )


def _step_record(step: int, task_ids: list[str], groups: list[Any], samples: Any, update: dict[str, float],
                 wrapper: Any, step_s: float) -> dict[str, Any]:
    """One line of metrics.jsonl: routes, rewards, scores, the update, ρ and the corrections, the ledger."""
    anchors = [g for g in groups if g.route == "anchor"]
    st = wrapper.loop.stats()  # one snapshot of the loop: ρ, corrections, routing, ungraded counts
    statuses: dict[str, int] = {}
    for g in anchors:
        for info in g.infos:
            statuses[info.get("status", "?")] = statuses.get(info.get("status", "?"), 0) + 1
    return {
        "step": step,
        "tasks": task_ids,
        "routes": [g.route for g in groups],
        "reward_mean": finite_mean([r for g in groups for r in g.rewards]),
        "real_score_mean": finite_mean([r for g in anchors for r in g.correction.real_scores]),
        "raw_wm_score_mean": finite_mean([r for g in groups for r in g.correction.raw_scores]),
        "anchor_statuses": statuses,
        "rows_trained": int(update["n_rows"]),
        "groups_used": int(update["n_groups_used"]),
        "groups_skipped": int(update["n_groups_skipped"]),
        "ungraded_rows": int(update["n_ungraded"]),
        "ungraded_by_cause_step": _step_causes(groups),
        **_pick(st, UNGRADED_KEYS),
        "loss": update["loss"], "kl": update["kl"], "entropy": update["entropy"],
        "new_tokens": samples.new_tokens,
        "realised_anchor_fraction": st["realised_anchor_fraction"],
        **_fraction_in_force(st),
        **_pick(st, CORRECTION_KEYS),
        "ledger": wrapper.loop.ledger.to_dict(),
        "step_s": step_s,
        "sample_completions": samples.texts[0][:2],
        # per anchor group, its rollouts' execution CPU-seconds (None on world-model groups): the
        # summary weights the cost per execution by task with them
        "execution_cpu_s": [[i.get("execution_cpu_s") for i in g.infos] if g.route == "anchor" else None for g in groups],
        **distinct_lines(samples.texts, len(task_ids)),
    }


def distinct_lines(texts: list[list[str]], n_groups: int) -> dict[str, Any]:
    """How many different lines each group of the step sampled (issue 36, item 2: a policy that
    collapses onto one line samples 1 per group, and GRPO then has nothing to train on).

    A completion's line is its first line with runs of whitespace collapsed (line mode writes one
    line; in script mode the first line of the script).

    Args:
        texts: the step's completions, one list of G texts per group (``PolicySamples.texts``).
        n_groups: the step's groups; when ``texts`` is not one list per group (multi-turn rows)
            nothing is counted.

    Returns:
        ``{"distinct_lines": [int per group] or None, "distinct_lines_mean": float or None}``.

    Example:
        >>> distinct_lines([["a(1)", "a(1) ", "b()"], ["c()", "c()", "c()"]], 2)
        {'distinct_lines': [2, 1], 'distinct_lines_mean': 1.5}
    """
    if len(texts) != n_groups or not texts:
        return {"distinct_lines": None, "distinct_lines_mean": None}
    counts = [len({" ".join((str(x).splitlines() or [""])[0].split()) for x in group}) for group in texts]
    return {"distinct_lines": counts, "distinct_lines_mean": sum(counts) / len(counts)}


#: The keys of :meth:`CorrectionLoop.stats <wmrl_envs.core.CorrectionLoop.stats>` a metrics line
#: takes from the ungraded monitor and from the corrector.
UNGRADED_KEYS = ("ungraded_rollouts", "rollouts", "ungraded_share", "ungraded_by_cause")
CORRECTION_KEYS = ("rho", "disagreement_ema", "anchor_pairs", "debiaser_fitted", "debiaser_fits", "calibration_mae_raw",
                   "calibration_mae_calibrated", "calibration_mse_raw", "calibration_mse_calibrated", "anchor_groups",
                   "world_model_groups", "flat_map_groups", "denoiser_groups_counted", "denoiser_groups_no_spread",
                   "denoiser_warmup_stalled")


def _pick(stats: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: stats[k] for k in keys}


def _fraction_in_force(st: dict[str, Any]) -> dict[str, Any]:
    """The step's anchor fraction from the loop's ``stats()``: ``anchor_fraction`` (the configured
    one, or with ``anchor_fraction="auto"`` the one the adaptive rule set for this step) and, with
    ``auto``, the within-group correlation ``auto_r`` it was estimated from (``None`` while warming
    up) and the cost ratio ``auto_gamma`` (``None`` until fixed)."""
    a = st["adaptive"]
    if a is None:
        return {"anchor_fraction": st["anchor_fraction"]}
    _, fraction, r = a["history"][-1] if a["history"] else (None, a["fraction"], float("nan"))
    return {"anchor_fraction": fraction, "auto_r": r if math.isfinite(r) else None, "auto_gamma": a["gamma"]}


def _append_jsonl(path: Path, record: dict[str, Any]) -> None:
    # strict JSON (NaN and infinities as null): the real arm's calibration figures are NaN
    line = json.dumps(finite_or_none(json.loads(json.dumps(record, default=json_default))), allow_nan=False)
    with path.open("a") as f:
        f.write(line + "\n")


def _step_causes(groups: list[Any]) -> dict[str, int]:
    """``{cause: rollouts}`` of a step's ungraded rollouts (from ``info["wmrl"]["ungraded_cause"]``)."""
    out: dict[str, int] = {}
    for g in groups:
        for info in g.infos:
            cause = info.get("wmrl", {}).get("ungraded_cause")
            if cause:
                out[cause] = out.get(cause, 0) + 1
    return out
