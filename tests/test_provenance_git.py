"""vitbook.studies.provenance.cpu_run's record of the code: a commit and its uncommitted changes
where git can tell, and "unknown" (None, with the reason) where it cannot, never "clean"."""

from __future__ import annotations

from pathlib import Path

from vitbook.studies import provenance

ROOT = Path(__file__).resolve().parents[1]


def test_outside_a_checkout_the_changes_are_unknown_not_false(tmp_path):
    assert provenance.git("rev-parse", "HEAD", where=tmp_path) == "unknown"  # not a checkout
    entry = provenance.cpu_run(tmp_path, seeds=[0])
    assert entry["git_commit"] == "unknown" and entry["uncommitted_changes"] is None
    assert entry["uncommitted_changes_unknown"] == (
        f"{tmp_path.resolve()} is not in a git checkout, or git is not installed: the commit "
        "and its changes are not known"
    )


def test_without_git_the_changes_are_unknown(monkeypatch):
    monkeypatch.setenv("PATH", "")  # no git to run
    entry = provenance.cpu_run(ROOT)
    assert entry["git_commit"] == "unknown" and entry["uncommitted_changes"] is None
    assert "is not in a git checkout, or git is not installed" in (
        entry["uncommitted_changes_unknown"]
    )


def test_in_a_checkout_the_changes_are_a_bool_and_no_reason_is_given():
    if provenance.git("rev-parse", "HEAD", where=ROOT) == "unknown":  # a copy without .git
        return
    entry = provenance.cpu_run(ROOT)
    status = provenance.git("status", "--porcelain", "--untracked-files=no", where=ROOT)
    assert entry["uncommitted_changes"] is (status != "")
    assert "uncommitted_changes_unknown" not in entry and len(entry["git_commit"]) == 40
