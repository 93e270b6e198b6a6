"""The README's example runs as written and does what it says."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs():
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no python example"
    ns: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), ns)
    env = ns["env"]
    assert env.loop.router.n_groups_routed == 300
    assert env.loop.router.realised_fraction == 0.1  # one anchor group per block of 10
    assert env.loop.corrector.debiaser.n_pairs == 240


def _block(page: Path, marker: str) -> str:
    """The first python block of ``page`` that contains ``marker``."""
    blocks = [b for b in re.findall(r"```python\n(.*?)```", page.read_text(), re.S) if marker in b]
    assert blocks, f"{page.name} has no python example with {marker!r}"
    return blocks[0]


def test_readme_own_env_example_trains_with_a_learned_world_model(capsys):
    """The README's whole example for a user's own env (issue 38: wrapping one's own env from the README alone):
    it runs as written, the policy reaches the best action and r is defined."""
    import numpy as np

    ns: dict = {}
    exec(compile(_block(README, "class MyEnv"), "README.md", "exec"), ns)
    assert np.abs(ns["mu"] - [0.2, 0.5, 0.8]).max() < 0.05
    env = ns["env"]
    assert env.loop.router.n_groups_routed == 200 and env.loop.stats()["r"] is not None
    assert env.loop.world_model.fitted  # the learned world model has learned from the anchors
    assert capsys.readouterr().out.strip().startswith("[0.")


def test_advise_doc_factories_run_a_pilot(tmp_path, monkeypatch):
    """docs/advise.md's factories for one's own env, with the README's MyEnv, run ``wmrl advise``'s pilot."""
    from agents.advise import run_pilot

    pkg = tmp_path / "my_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "env.py").write_text(_block(README, "class MyEnv").split("wm = LearnedWorldModel")[0])
    (pkg / "advise.py").write_text(_block(DOCS / "advise.md", "def make_policy"))
    monkeypatch.syspath_prepend(str(tmp_path))
    from my_pkg import advise

    wrapper = run_pilot(advise.make_env(), advise.make_wm(), advise.make_policy(), groups=4, group_size=4)
    assert len(wrapper.loop.advisor.groups()[1]) == 4 and wrapper.loop.ledger.count("execution") == 16
    assert wrapper.loop.world_model.fitted


def test_readme_opens_with_the_two_commands():
    lines = [ln for ln in README.read_text().splitlines() if ln.startswith("bash scripts/setup.sh")]
    assert len(lines) == 2
    assert "wmrl train" in lines[0] and "pytest" in lines[1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "bash scripts/setup.sh" in ci and ".venv/bin/python -m pytest" in ci
    # the verl adapter's tests run in their own environment, in both (docs/verl.md)
    assert ".venv-verl/bin/python -m pytest tests/verl_adapter" in lines[1]
    assert ".venv-verl/bin/python -m pytest" in ci and "tests/verl_adapter" in ci


# ---- docs/ a reader can navigate (issue 26, item 5) ----------------------------------------

ROOT = README.parent
DOCS = ROOT / "docs"
DOCS_MAX_BYTES = 3 * 1024 * 1024
# run outputs (written by a command, quoted as they were written) and the history of changes:
# the paths they name are records of the time, not links to keep alive
_RECORDS = ("results/", "docs/advisor_check_run/", "docs/changelog.md")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# a path under docs/ or results/ named in text (not one at a commit, "git show <commit>:docs/...")
_NAMED_PATH = re.compile(r"(?<![\w./:-])(?:\.\./)?(?:docs|results)/[A-Za-z0-9_./-]*[A-Za-z0-9_/]")


def _tracked(pattern: str) -> list[Path]:
    """The repository's files matching ``pattern`` (git's tracked and not-ignored files, else a walk)."""
    import subprocess

    proc = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", pattern],
                          cwd=ROOT, capture_output=True, text=True)
    if proc.returncode == 0 and proc.stdout.strip():
        return sorted({ROOT / p for p in proc.stdout.split() if (ROOT / p).is_file()})
    return sorted(p for p in ROOT.rglob(pattern) if ".venv" not in p.parts)


def _markdown_pages() -> list[Path]:
    """README.md, benchmarks/README.md, results/README.md and every page under docs/."""
    pages = [README, ROOT / "benchmarks" / "README.md", ROOT / "results" / "README.md"]
    return [p for p in pages if p.is_file()] + sorted(DOCS.rglob("*.md"))


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code (where ``[a](b)`` is not a link)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of ``page``'s headings: lower case, punctuation dropped, spaces to '-'."""
    heads = re.findall(r"^#+\s+(.*?)\s*$", re.sub(r"```.*?```", "", page.read_text(), flags=re.S), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def test_every_relative_link_of_the_docs_resolves():
    broken = []
    for page in _markdown_pages():
        for target in _LINK.findall(_prose(page.read_text())):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            rel = page.relative_to(ROOT)
            if not dest.exists():
                broken.append(f"{rel}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{rel}: {target} (no heading with that anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_docs_or_results_path_the_tree_names_exists():
    """A path under docs/ or results/ named in code, tests or pages (a command's --reuse-from, a
    test's reference file) exists, so a moved file cannot leave a dangling mention behind."""
    missing = []
    for f in _tracked("*.md") + _tracked("*.py") + _tracked("*.toml") + _tracked("*.yaml"):
        rel = f.relative_to(ROOT).as_posix()
        if rel.startswith(_RECORDS) or ".venv" in rel:
            continue
        for name in _NAMED_PATH.findall(f.read_text(errors="replace")):
            base = f.parent if name.startswith("../") else ROOT
            if not (base / name).exists():
                missing.append(f"{rel}: {name}")
    assert not missing, "paths named but missing:\n" + "\n".join(sorted(set(missing)))


def test_docs_stay_small_and_hold_no_run_artefacts():
    files = [p for p in DOCS.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    assert total < DOCS_MAX_BYTES, f"docs/ holds {total / 2**20:.1f} MB (at most 3 MB): run outputs go to results/"
    artefacts = [p.relative_to(ROOT).as_posix() for p in files if p.suffix in (".pt", ".pth", ".ckpt", ".safetensors")]
    assert not artefacts, f"checkpoints in docs/: {artefacts} (run outputs go to results/)"


def test_the_docs_index_links_every_page():
    index = DOCS / "README.md"
    assert index.is_file(), "docs/README.md (the index of docs/) is missing"
    linked = {(index.parent / t.partition("#")[0]).resolve() for t in _LINK.findall(_prose(index.read_text()))}
    pages = {p.resolve() for p in DOCS.glob("*.md") if p.name != "README.md"}
    assert pages, "no pages in docs/"
    unlisted = sorted(p.name for p in pages - linked)
    assert not unlisted, f"docs/README.md does not link {unlisted}"
    # the four parts the index is organised by
    heads = [h.lower() for h in re.findall(r"^##\s+(.*)$", index.read_text(), re.M)]
    for part in ("concepts", "how-to", "reference runs", "history"):
        assert any(part in h for h in heads), f"docs/README.md has no section on {part}: {heads}"
