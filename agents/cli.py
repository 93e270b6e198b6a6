"""``wmrl`` command line.

Usage:
    wmrl train [--preset default|tiny] [--run-dir DIR] [--quiet] [--FIELD VALUE ...]
    wmrl train --resume RUN_DIR [--quiet]
    wmrl bench [--quick] [--FIELD VALUE ...]
    wmrl bench sweep [--quick] [--FIELD VALUE ...]
    wmrl bench advisor [--quick] [--FIELD VALUE ...]
    wmrl bench report RESULTS_JSON [--out-dir DIR]
    wmrl advise [--run-dir RUN_DIR | --from-advice ADVICE_JSON] [--FIELD VALUE ...]
    wmrl libero [--quick] [--FIELD VALUE ...]
    wmrl presets

Every field of agents.train.config.TrainConfig is a flag (`--steps 4 --anchor-fraction 0.2`),
parsed by tyro on top of the chosen preset; the correction settings (its nested
wmrl_envs.core.config.CorrectionConfig) keep their names without a prefix
(`--min-pairs`, `--rho-mode`, `--disagreement-floor`); `wmrl train --help` lists them.
`wmrl bench sweep` runs the known-truth sweep (agents.experiments.sweep_config.SweepConfig; `--quick`
starts from the CI preset). `wmrl advise` measures, before training (a pilot of N groups
executed for real and scored by the world model) or from a run folder, whether the world model
pays and at which anchor fraction (agents.advise.AdviseConfig). `wmrl libero` runs the paper's
VLA protocol on LIBERO-Long (agents.experiments.libero_protocol.LiberoProtocolConfig; `--quick`:
the CI smoke run with tiny random models on the real simulator).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

_TRAIN_HELP = (
    "GRPO with WMRL rewards on AutoResearch: a world model (--world-model; default: one that learns from "
    "the anchor groups on the policy's frozen backbone) scores most groups, anchor groups are also executed for real in a sandbox (see README and docs/method.md).\n\n"
    "Run options (besides the settings below): --preset NAME (default | tiny) picks the base "
    "settings; --run-dir DIR (default runs/<preset>-<time>); --resume RUN_DIR continues a killed "
    "run from its last checkpoint (no other settings allowed); --quiet hides progress and the table."
)


class _UsageError(ValueError):
    """The settings were refused while parsing (tyro has printed why)."""


def _parse(cls: type, args: list[str], *, prog: str, description: str, default: object = None) -> object:
    """``tyro.cli`` of ``cls`` on ``args``; a refused setting (tyro prints its message and exits
    with status 2, e.g. a nested :class:`~wmrl_envs.core.config.CorrectionConfig` out of range)
    becomes :class:`_UsageError`, so that ``main`` returns 2 instead of exiting.

    Raises:
        _UsageError: the arguments were refused.
    """
    import tyro

    try:
        return tyro.cli(cls, default=default, args=args, prog=prog, description=description)
    except SystemExit as exc:
        if exc.code in (0, None):  # --help
            raise
        raise _UsageError(f"invalid settings for {prog} (see the message above; {prog} --help lists them)") from None


def _terminate_as_interrupt() -> Any:
    """SIGTERM (``kill PID``) stops a long run (``wmrl train``, ``wmrl bench`` and its ``sweep`` and
    ``advisor``, ``wmrl libero``) as Ctrl-C does: ``KeyboardInterrupt`` in the main thread. The
    sandbox running in the main thread is killed with its process group, executions already running
    in worker threads finish first (each within its sandbox's time limit), worker processes are terminated, the real arm's process
    is stopped and the resume hint is printed. A run started in the background (``nohup ... &``)
    ignores SIGINT by the shell's convention, so ``kill PID`` is how such a run is stopped; Python's
    default for SIGTERM ends the process without running any of that. Returns the handler it
    replaced (``None`` outside the main thread, where it installs nothing)."""
    import signal
    import threading

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, interrupt)


def _train(argv: list[str]) -> int:
    pre = argparse.ArgumentParser(prog="wmrl train", add_help=False)
    pre.add_argument("--preset", default=None)
    pre.add_argument("--run-dir", default=None)
    pre.add_argument("--resume", default=None, metavar="RUN_DIR")
    pre.add_argument("--quiet", action="store_true")
    known, rest = pre.parse_known_args(argv)
    from agents.train.config import PRESETS
    from agents.train.loop import train

    if known.resume is not None:
        given = [flag for flag, v in (("--preset", known.preset), ("--run-dir", known.run_dir)) if v is not None]
        if given:
            print(f"error: wmrl train --resume {known.resume} takes no {' or '.join(given)}: the run's folder and its "
                  "config.json say where and how it continues", file=sys.stderr)
            return 2
        if not Path(known.resume).is_dir():
            print(f"error: --resume {known.resume}: no such run folder (give the folder a wmrl train run wrote, "
                  "e.g. runs/default-<time>)", file=sys.stderr)
            return 2
    known.preset = known.preset or "default"
    if known.preset not in PRESETS:
        print(f"error: unknown preset {known.preset!r}; choose one of {sorted(PRESETS)}", file=sys.stderr)
        return 2
    if known.resume and rest and not any(a in ("-h", "--help") for a in rest):
        print(f"error: wmrl train --resume takes no other settings (the run's config.json is used); got {rest}",
              file=sys.stderr)
        return 2
    base = dataclasses.replace(PRESETS[known.preset], preset=known.preset)
    cfg = _parse(type(base), rest, prog="wmrl train", description=_TRAIN_HELP, default=base)
    run_dir = Path(known.resume or known.run_dir or f"runs/{cfg.preset}-{time.strftime('%Y%m%d-%H%M%S')}")
    previous = _terminate_as_interrupt()
    try:
        train(cfg, run_dir, resume=bool(known.resume), quiet=known.quiet)
    except KeyboardInterrupt:  # Ctrl-C or kill (SIGTERM): the last checkpoint stays
        if (run_dir / "config.json").exists():
            print(f"\ninterrupted: `wmrl train --resume {run_dir}` continues the run from its last checkpoint",
                  file=sys.stderr)
        else:
            print("\ninterrupted before the run started: nothing to resume", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            import signal

            signal.signal(signal.SIGTERM, previous)
    return 0


def _parse_preset(presets: dict, argv: list[str], *, prog: str, description: str) -> object:
    """Parse ``argv`` on top of ``presets["default"]``, or of ``presets["quick"]`` (the CI preset)
    when ``--quick`` is among them."""
    quick = "--quick" in argv
    rest = [a for a in argv if a != "--quick"]
    base = presets["quick" if quick else "default"]
    return _parse(type(base), rest, prog=prog, description=description + " --quick starts from the CI preset.",
                  default=base)


# The commands that parse a preset (the CI one with --quick) and run one entry point on it: the
# program name -> ("module:entry point", "module:presets", description), imported only when run.
_PRESET_COMMANDS = {
    "wmrl bench": ("agents.experiments.bench:main_bench", "agents.experiments.bench_config:BENCH_PRESETS",
                   "The method benchmark: compute-to-target speedup of WMRL and the other methods over "
                   "real-execution GRPO, on AutoResearch (see benchmarks/README.md)."),
    "wmrl bench sweep": ("agents.experiments.sweep:main_sweep", "agents.experiments.sweep_config:SWEEP_PRESETS",
                         "The known-truth sweep: speedup over world-model quality x anchor fraction "
                         "(see benchmarks/README.md)."),
    "wmrl bench advisor": ("agents.experiments.advisor_check:main_advisor_check",
                           "agents.experiments.advisor_check_config:ADVISOR_CHECK_PRESETS",
                           "The anchor-fraction advisor checked on the known-truth env: predicted against measured "
                           "speedups, the adaptive fraction against fixed ones, a breaking world model "
                           "(see benchmarks/README.md)."),
    "wmrl libero": ("agents.experiments.libero_protocol:main_libero",
                    "agents.experiments.libero_protocol:LIBERO_PRESETS",
                    "The paper's VLA protocol on LIBERO-Long: GRPO on sparse success, on the raw Robometer reward "
                    "and WMRL from the SFT policy, held-out success per task (docs/method.md, 'Reward mode')."),
}


def _run_preset(prog: str, argv: list[str]) -> int:
    """Run the command ``prog`` of :data:`_PRESET_COMMANDS`: parse ``argv`` on its preset
    (:func:`_parse_preset`) and call its entry point on the config. Ctrl-C or ``kill PID``
    (:func:`_terminate_as_interrupt`) stops it with a line that says how to continue; returns 0,
    or 130 when stopped."""
    import importlib

    def load(ref: str):
        module, name = ref.split(":")
        return getattr(importlib.import_module(module), name)

    entry, presets, description = _PRESET_COMMANDS[prog]
    cfg = _parse_preset(load(presets), argv, prog=prog, description=description)
    previous = _terminate_as_interrupt()  # `kill PID` of a background run stops it as Ctrl-C does
    try:
        load(entry)(cfg)
    except KeyboardInterrupt:  # what was saved stays: a bench run's finished seeds, methods and curves
        hint = {"wmrl bench": "the same command with --resume continues the run from its finished seeds, methods "
                              "and refined curves (the one in progress starts again)",
                "wmrl libero": "the same command continues the run (--resume is on by default) from its finished "
                               "cells and the last checkpoint of the cell in progress"}.get(prog, "nothing to resume")
        print(f"\ninterrupted: {hint}", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            import signal

            signal.signal(signal.SIGTERM, previous)
    return 0


def _bench_report(argv: list[str]) -> int:
    import json

    from agents.experiments.bench_report import report_finished_seeds

    ap = argparse.ArgumentParser(prog="wmrl bench report",
                                 description="The report (table.md, plots) of the seeds a wmrl bench run finished, "
                                             "e.g. of a run that was stopped (continue it with wmrl bench --resume).")
    ap.add_argument("results", help="the run's results.json")
    ap.add_argument("--out-dir", default=None, help="where to write (default: beside results.json, in report/)")
    args = ap.parse_args(argv)
    path = Path(args.results)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (give a wmrl bench results.json)")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON ({exc}); give the results.json a wmrl bench run wrote") from exc
    if not isinstance(data, dict) or "config" not in data or "methods" not in data:
        raise ValueError(f"{path} is not a wmrl bench results.json (no 'config' and 'methods'); a sweep's results "
                         "have their report in its own folder (wmrl bench sweep writes table.md there)")
    out = Path(args.out_dir) if args.out_dir else path.parent / "report"
    res = report_finished_seeds(data, out)
    print((out / "table.md").read_text())
    print(f"[bench] report of {res['config']['seeds']} finished seeds written to {out}")
    return 0


def _advise(argv: list[str]) -> int:
    from agents.advise import AdviseConfig, main_advise

    cfg = _parse(AdviseConfig, argv, prog="wmrl advise",
                 description="Whether a world model pays, and the anchor fraction to use: a pilot of N groups executed "
                             "for real and scored by the world model (or a wmrl train run folder's anchor groups), the "
                             "within-group correlation, costs per rollout, recommended anchor fraction and predicted "
                             "speedup (a model that ignores bias; docs/method.md, 'Choosing the anchor fraction'). "
                             "Your own setup: --env/--world-model/--policy take 'module:function' factories called with "
                             "no arguments, importable from the working folder or PYTHONPATH. The env: a Gymnasium env "
                             "whose step(action) executes the action for real and returns its score as the reward. The "
                             "world model: predict(contexts, actions) -> list[WorldModelPrediction] (one per action; "
                             "contexts are the env's observations). The policy: sample(observation, info, group_size) -> "
                             "list of group_size actions for the task the env's reset returned. Example: cd my_project && "
                             "wmrl advise --env my_pkg.advise:make_env --world-model my_pkg.advise:make_wm --policy "
                             "my_pkg.advise:make_policy --groups 16 --groups-per-step 10. Advise again without a pilot from the "
                             "anchor groups an advice.json stored: --from-advice DIR/advice.json.",
                 default=AdviseConfig())
    fields = {f.name for f in dataclasses.fields(AdviseConfig)}
    given = {t[2:].split("=", 1)[0].replace("-", "_") for t in argv if t.startswith("--")} & fields
    main_advise(cfg, given=given)  # --from-advice reuses the stored settings the command line does not give
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``wmrl`` script; returns the exit status (2 for usage errors)."""
    from agents.llm.vllm_server import ServerError
    from wmrl_envs.core import TooManyUngradedError
    from wmrl_envs.sandbox import SandboxUnavailableError

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    try:
        if cmd == "train":
            return _train(rest)
        if cmd == "bench" and rest[:1] == ["report"]:
            return _bench_report(rest[1:])
        if cmd == "bench" and rest[:1] in (["sweep"], ["advisor"]):
            return _run_preset(f"wmrl bench {rest[0]}", rest[1:])
        if cmd in ("bench", "libero"):
            return _run_preset(f"wmrl {cmd}", rest)
        if cmd == "advise":
            return _advise(rest)
        if cmd == "presets":
            from agents.train.config import PRESETS

            for name, cfg in PRESETS.items():
                print(name, dataclasses.asdict(cfg))
            return 0
    except (ValueError, FileExistsError, FileNotFoundError, NotADirectoryError, SandboxUnavailableError,
            ServerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TooManyUngradedError as exc:  # the stop rule (docs/method.md, "Ungraded rollouts")
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"error: unknown command {cmd!r}; try `wmrl train` or `wmrl --help`", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
