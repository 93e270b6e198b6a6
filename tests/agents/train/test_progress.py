"""The progress over GRPO steps of ``wmrl train`` (agents.train.loop.StepProgress): a bar in a
terminal, readable lines in a log file."""

import io
import re

from rich.console import Console

from agents.train.loop import StepProgress


def _run(console: Console, total: int, start: int, step_s: list[float]) -> None:
    clock = iter([0.0] + [sum(step_s[: i + 1]) for i in range(len(step_s))])
    with StepProgress(console, total, start, clock=lambda: next(clock)) as progress:
        for i, s in enumerate(step_s):
            progress.advance(s, f"reward 0.{i}00 rho 1.00 pairs {i + 1}")


def test_a_log_file_gets_one_plain_line_per_step_with_the_time_left():
    out = io.StringIO()
    _run(Console(file=out, force_terminal=False, width=60), 4, 0, [100.0, 300.0, 200.0, 10.0])
    lines = out.getvalue().splitlines()
    assert lines == [
        "step 1/4 (100 s, elapsed 0:01:40, ~0:05:00 left): reward 0.000 rho 1.00 pairs 1",
        "step 2/4 (300 s, elapsed 0:06:40, ~0:06:40 left): reward 0.100 rho 1.00 pairs 2",
        "step 3/4 (200 s, elapsed 0:10:00, ~0:03:20 left): reward 0.200 rho 1.00 pairs 3",
        "step 4/4 (10 s, elapsed 0:10:10, ~0:00:00 left): reward 0.300 rho 1.00 pairs 4",
    ]
    # no bar, no carriage returns or escape codes, no line wrapped at the console's width
    assert not re.search(r"[\r\x1b━]", out.getvalue())


def test_a_resumed_run_counts_from_its_checkpoint_and_estimates_from_its_own_steps():
    out = io.StringIO()
    _run(Console(file=out, force_terminal=False), 7, 5, [120.0, 60.0])
    assert out.getvalue().splitlines() == [
        "step 6/7 (120 s, elapsed 0:02:00, ~0:02:00 left): reward 0.000 rho 1.00 pairs 1",
        "step 7/7 (60 s, elapsed 0:03:00, ~0:00:00 left): reward 0.100 rho 1.00 pairs 2",
    ]


def test_a_terminal_gets_the_bar_and_no_step_lines():
    out = io.StringIO()
    _run(Console(file=out, force_terminal=True, width=120), 3, 0, [60.0, 60.0, 60.0])
    text = out.getvalue()
    assert "GRPO" in text and "3/3" in text and "━" in text and "pairs 3" in text
    assert "step 1/3" not in text


def test_a_quiet_console_shows_nothing():
    out = io.StringIO()
    _run(Console(file=out, quiet=True), 2, 0, [1.0, 1.0])
    assert out.getvalue() == ""


def test_unknown_steps_show_no_total_and_no_time_left_until_they_are_known():
    # the real arm's first step, before the WMRL arm it follows has published any: issue 36's
    # reviewer saw "step 1/128 (..., ~0:48:22 left)" from the safeguard cap of 128 steps
    out = io.StringIO()
    clock = iter([0.0, 23.0, 61.0])
    with StepProgress(Console(file=out, force_terminal=False), None, 0, clock=lambda: next(clock)) as progress:
        progress.advance(23.0, "reward 0.106")
        progress.total = 5
        progress.advance(38.0, "reward 0.250")
    assert out.getvalue().splitlines() == [
        "step 1 (23 s, elapsed 0:00:23): reward 0.106",
        "step 2/5 (38 s, elapsed 0:01:01, ~0:01:32 left): reward 0.250",
    ]
