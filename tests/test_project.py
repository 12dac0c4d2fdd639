"""The project's set-up: an honest lock, and one repository URL wherever it is copied."""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from booktools import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with tomli, a dependency of pytest there
    import tomli as tomllib

LOCK = ROOT / "constraints.txt"
STAMP_NAME = "vitbook-requirements.sha256"  # tasks.py writes it into the .venv it manages
NOT_LOCKED = {"vitbook", "pip", "setuptools", "wheel"}


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


def requirement_lines() -> list[Requirement]:
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return [Requirement(line) for line in lines if line.strip() and line[0] not in "#-"]


def package_dependencies() -> list[Requirement]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return [Requirement(dependency) for dependency in pyproject["project"]["dependencies"]]


def locked_python() -> tuple[int, int]:
    found = re.search(r"Locked on Python (\d+)\.(\d+)", LOCK.read_text(encoding="utf-8"))
    assert found, "constraints.txt must say which Python it was locked on"
    return int(found[1]), int(found[2])


def public(version: str) -> Version:
    """The version without its local label: 2.13.0+cpu satisfies the pin torch==2.13.0."""
    return Version(Version(version).public)


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def dependency_tree(roots: list[Requirement]) -> set[str]:
    """Canonical names of the roots and of everything they need here, extras included."""
    seen: set[str] = set()
    todo = [(requirement, "") for requirement in roots]
    while todo:
        requirement, from_extra = todo.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": from_extra}):
            continue
        name = canonicalize_name(requirement.name)
        extras = set(requirement.extras)
        key = name + "[" + ",".join(sorted(extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        for line in metadata.requires(requirement.name) or []:
            dependency = Requirement(line)
            for extra in {"", *extras}:
                todo.append((dependency, extra))
    return {key.split("[")[0] for key in seen}


def test_lock_pins_every_package_to_one_exact_version():
    lines = [line for line in LOCK.read_text(encoding="utf-8").splitlines() if line.strip()]
    entries = [line for line in lines if not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+==[A-Za-z0-9.]+", line) for line in entries), (
        "every line of constraints.txt is name==version (no local labels such as +cpu)"
    )
    assert len(lock_pins()) == len(entries), "a package is pinned twice"


def test_every_requirement_is_pinned_and_meets_the_package_bounds():
    pins = lock_pins()
    unpinned = [r.name for r in requirement_lines() if canonicalize_name(r.name) not in pins]
    assert not unpinned, (
        f"requirements.txt names packages that constraints.txt does not pin: {unpinned}"
    )
    for requirement in [*requirement_lines(), *package_dependencies()]:
        pinned = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(pinned), f"{requirement} excludes the pin {pinned}"


@pytest.mark.skipif(
    not (Path(sys.prefix) / STAMP_NAME).exists(),
    reason="checks only the .venv that tasks.py manages",
)
def test_the_managed_environment_is_exactly_the_lock():
    if sys.version_info[:2] != locked_python():
        pytest.skip(f"constraints.txt was locked on Python {locked_python()}, not this one")
    pins = lock_pins()
    needed = dependency_tree([*requirement_lines(), *package_dependencies()]) - NOT_LOCKED
    unpinned = sorted(needed - set(pins))
    assert not unpinned, f"installed as dependencies but not pinned in constraints.txt: {unpinned}"
    installed = {name: installed_version(name) for name in pins}
    absent = sorted(name for name, version in installed.items() if version is None)
    assert not absent, f"pinned in constraints.txt but not installed: {absent}"
    wrong = {
        name: (installed[name], pin)
        for name, pin in pins.items()
        if public(installed[name]) != Version(pin)
    }
    assert not wrong, f"installed versions differ from constraints.txt (installed, pinned): {wrong}"


def test_repository_url_is_the_same_everywhere():
    full = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config = full["repository"]
    colab_branch = full["sphinx"]["config"]["colab_branch"]  # Colab opens the generated copies
    owner_repo = config["url"].removeprefix("https://github.com/")
    files = [ROOT / "README.md", ROOT / "pyproject.toml", *sorted((ROOT / "book").rglob("*.*"))]
    github = re.compile(
        r"github\.com/([\w.-]*vitbook[\w.-]*/[\w.-]+|[\w.-]+/[\w.-]*vitbook[\w.-]*)"
    )
    colab = re.compile(r"colab\.research\.google\.com/github/([\w.-]+/[\w.-]+)/blob/([\w.-]+)/")
    wrong = []
    for path in files:
        if path.suffix not in {".md", ".ipynb", ".toml", ".bib"}:
            continue
        text = path.read_text(encoding="utf-8")
        wrong += [
            (path.name, f) for f in github.findall(text) if f.removesuffix(".git") != owner_repo
        ]
        wrong += [
            (path.name, f"{found}@{branch}")
            for found, branch in colab.findall(text)
            if (found, branch) != (owner_repo, colab_branch)
        ]
    assert not wrong, f"copies of the repository URL that differ from _config.yml: {wrong}"


def test_the_publish_workflow_builds_with_the_readme_command_and_deploys_the_html():
    workflow = yaml.safe_load((ROOT / ".github/workflows/publish.yml").read_text(encoding="utf-8"))
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert triggers["push"]["branches"] == ["main"] and "workflow_dispatch" in triggers
    assert workflow["permissions"]["pages"] == "write"
    assert workflow["permissions"]["id-token"] == "write"
    build = workflow["jobs"]["build"]["steps"]
    assert any(step.get("run") == "python3 tasks.py book" for step in build)
    assert "python3 tasks.py book" in (ROOT / "README.md").read_text(encoding="utf-8")
    upload = [step for step in build if step.get("uses", "").startswith("actions/upload-pages")]
    assert upload and upload[0]["with"]["path"] == "_build/html"
    deploy = workflow["jobs"]["deploy"]
    assert deploy["needs"] == "build"
    assert deploy["steps"][0]["uses"].startswith("actions/deploy-pages@")


def test_the_publish_workflow_builds_online_caches_the_hub_and_pushes_the_colab_notebooks():
    workflow = yaml.safe_load((ROOT / ".github/workflows/publish.yml").read_text(encoding="utf-8"))
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert workflow["permissions"]["contents"] == "write", "pushing the colab branch needs it"
    steps = workflow["jobs"]["build"]["steps"]
    (build,) = [i for i, step in enumerate(steps) if step.get("run") == "python3 tasks.py book"]
    assert steps[build]["env"]["HF_HUB_OFFLINE"] == "0", "the published book downloads ViT-B/16"
    caches = [i for i, step in enumerate(steps) if step.get("uses", "").startswith("actions/cache")]
    assert caches and caches[0] < build, "the Hugging Face cache is restored before the build"
    assert "huggingface/hub" in steps[caches[0]]["with"]["path"]
    assert steps[caches[0]]["with"]["key"]
    (colab,) = [i for i, step in enumerate(steps) if step.get("run") == "python3 tasks.py colab"]
    branch = config["sphinx"]["config"]["colab_branch"]
    pushes = [i for i, step in enumerate(steps) if "git push" in step.get("run", "")]
    assert pushes and build < colab < pushes[0], "the notebooks are written, then pushed"
    push = steps[pushes[0]]["run"]
    assert f"git init -q -b {branch}" in push and push.rstrip().endswith(f'.git" {branch}')
    assert "_build/colab" in push and "git add README.md book" in push
    # The README's test command stays offline: tasks.py defaults to HF_HUB_OFFLINE=1.
    assert 'env.setdefault("HF_HUB_OFFLINE", "1")' in (ROOT / "tasks.py").read_text()
