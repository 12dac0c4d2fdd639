"""The project's set-up: an honest lock, and one repository URL wherever it is copied."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from booktools import ROOT
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

LOCK = ROOT / "constraints.txt"
# The documents outside the book: the README for readers, the others for maintainers.
DOCUMENTS = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    ROOT / "scripts" / "README.md",
    ROOT / "benchmarks" / "README.md",
]
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
    files = [*DOCUMENTS, ROOT / "pyproject.toml", *sorted((ROOT / "book").rglob("*.*"))]
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


# --- the Python floor ------------------------------------------------------------------------

FLOOR_SAID = re.compile(r"Python (\d+\.\d+(?:\.\d+)?) or newer")


def stated_floor(path: Path) -> Version:
    found = set(FLOOR_SAID.findall(path.read_text(encoding="utf-8")))
    assert len(found) == 1, f"{path.name} names one Python floor ('Python X.Y.Z or newer'): {found}"
    return Version(found.pop())


def guarded_floor() -> Version:
    """The version below which tasks.py refuses to run, and the floor its docstring names."""
    text = (ROOT / "tasks.py").read_text(encoding="utf-8")
    guard = re.search(r"if sys\.version_info < \((\d+), (\d+)(?:, (\d+))?\):", text)
    assert guard, "tasks.py checks sys.version_info before it creates .venv"
    floor = Version(".".join(part for part in guard.groups() if part is not None))
    assert f"Python {floor}+" in text.split('"""', 2)[1], "tasks.py's docstring names its floor"
    assert f"Python {floor} or newer" in text, "tasks.py's refusal names the floor"
    return floor


def one_below(version: Version) -> Version:
    """The last release before ``version``: 3.11.4 before 3.11.5, 3.10.99 before 3.11.0."""
    major, minor, micro = (*version.release, 0, 0)[:3]
    return Version(f"{major}.{minor}.{micro - 1}" if micro else f"{major}.{minor - 1}.99")


def test_the_python_floor_is_said_alike_and_the_pins_install_on_it():
    """The README, CONTRIBUTING.md and tasks.py's guard name one floor; pyproject.toml's
    requires-python admits it; and it is the oldest Python on which every pin of
    constraints.txt installs, by each pinned distribution's own Requires-Python (read from the
    installed copies: pip cannot resolve for another Python offline)."""
    floor = stated_floor(ROOT / "README.md")
    assert stated_floor(ROOT / "CONTRIBUTING.md") == floor
    assert guarded_floor() == floor
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    package = SpecifierSet(pyproject["project"]["requires-python"])
    assert package.contains(floor), f"requires-python {package} refuses the stated {floor}"
    assert not package.contains(Version(f"{floor.major}.{floor.minor - 1}")), (
        f"requires-python {package} admits a minor release below the stated floor {floor}"
    )
    target = pyproject["tool"]["ruff"]["target-version"]
    assert target == f"py{floor.major}{floor.minor}", "ruff checks for the floor's minor release"
    needs, checked = {}, 0
    for name, pin in lock_pins().items():
        version = installed_version(name)
        if version is None or public(version) != Version(pin):
            continue  # not installed here at its pinned version: its metadata is another's
        checked += 1
        requires = metadata.metadata(name).get("Requires-Python")
        if requires:
            needs[name] = SpecifierSet(requires)
    assert checked >= 20, "the lock's packages are installed here"
    refused = {name: str(spec) for name, spec in needs.items() if not spec.contains(floor)}
    assert not refused, f"pinned packages that do not install on Python {floor}: {refused}"
    if checked == len(lock_pins()):  # every pin seen: the floor is also the tightest one
        below = one_below(floor)
        binding = {name: str(spec) for name, spec in needs.items() if not spec.contains(below)}
        assert binding, f"every pin installs on Python {below}: lower the stated floor"


# --- the README, for readers -----------------------------------------------------------------


def test_the_readme_is_for_readers_and_links_the_maintainers_documents():
    """The README's first screen says what the book is, where to read it and the two commands;
    everything for maintainers lives in the documents it links."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = readme.splitlines()
    assert len(lines) <= 250, f"the README has {len(lines)} lines: move maintainers' text out"
    first = next(i for i, line in enumerate(lines) if line.startswith("python3 tasks.py "))
    assert first < 40, f"the first command is on line {first + 1} of the README"
    assert "python3 tasks.py book" in readme and "python3 tasks.py test" in readme
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import colab

    site = colab.site_url(yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8")))
    assert site in "\n".join(lines[:20]), f"the README's first screen links the book, {site}"
    for page in colab.toc_pages(ROOT):
        if page != "book/intro" and page.startswith("book/") and page != "book/bibliography":
            assert f"{site}{page}.html" in readme, f"the README links {page}"
    for document in ("CONTRIBUTING.md", "scripts/README.md", "benchmarks/README.md"):
        assert f"]({document}" in readme, f"the README links {document}"


MARKDOWN_LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s#]+)(#[^)\s]*)?\)")


def test_the_documents_relative_links_lead_to_files_that_exist():
    broken = []
    for document in DOCUMENTS:
        for target, _ in MARKDOWN_LINK.findall(document.read_text(encoding="utf-8")):
            if not (document.parent / target).exists():
                broken.append((str(document.relative_to(ROOT)), target))
    assert not broken, f"relative links to missing files (document, link): {broken}"


def load_tasks():
    import importlib.util

    spec = importlib.util.spec_from_file_location("vitbook_tasks_setup", ROOT / "tasks.py")
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)
    return tasks


def no_browser_anywhere(monkeypatch, tasks, *, apt_get: bool) -> list:
    """A machine with no Chromium or Chrome (and with or without apt-get); returns the list that
    records every command tasks.py would run."""
    commands = []
    monkeypatch.setattr(tasks, "run", lambda *cmd, **kw: commands.append(cmd) or 0)
    monkeypatch.setattr(tasks.shutil, "which",
                        lambda name: f"/usr/bin/{name}" if apt_get and name in ("apt-get", "sudo")
                        else None)  # fmt: skip
    monkeypatch.setattr(tasks, "BROWSER_PLACES", ())
    monkeypatch.delenv(tasks.BROWSER_VARIABLE, raising=False)
    return commands


def test_the_book_command_builds_on_a_machine_without_apt_get_or_a_browser(monkeypatch,
                                                                          tmp_path):
    tasks = load_tasks()
    commands = no_browser_anywhere(monkeypatch, tasks, apt_get=False)
    monkeypatch.setattr(tasks, "ensure_venv", lambda: None)
    index = tmp_path / "index.html"
    index.write_text("<html></html>")
    monkeypatch.setattr(tasks, "BOOK_INDEX", index)  # what the build writes
    monkeypatch.setattr(sys, "argv", ["tasks.py", "book"])
    assert tasks.main() == 0
    (build,) = commands  # the book build, and nothing else: no apt-get, no sudo
    assert Path(build[0]).name == "jupyter-book" and list(build[1:3]) == ["build", "."]


def test_the_test_command_installs_no_browser_and_says_how_to_get_one(monkeypatch, tmp_path):
    tasks = load_tasks()
    commands = no_browser_anywhere(monkeypatch, tasks, apt_get=False)
    with pytest.raises(SystemExit) as stopped:
        tasks.test([], lambda: None)
    message = str(stopped.value)
    for system in ("Debian, Ubuntu", "Fedora", "macOS", "Windows", tasks.BROWSER_VARIABLE):
        assert system in message, system
    assert commands == []  # no apt-get, no sudo, no pytest
    browser = tmp_path / "chrome"
    browser.write_text("")
    monkeypatch.setenv(tasks.BROWSER_VARIABLE, str(browser))
    assert tasks.find_browser() == str(browser)  # named by the variable
    monkeypatch.setenv(tasks.BROWSER_VARIABLE, str(tmp_path / "none"))
    with pytest.raises(SystemExit, match="is not a file or a command"):
        tasks.find_browser()


def test_setup_installs_debians_chromium_where_there_is_apt_get(monkeypatch):
    tasks = load_tasks()
    commands = no_browser_anywhere(monkeypatch, tasks, apt_get=True)
    with pytest.raises(SystemExit, match="could not install chromium"):  # the fake installs none
        tasks.ensure_browser(install=True)
    assert [cmd[-1] for cmd in commands if "/usr/bin/apt-get" in map(str, cmd)] == [
        "update", "chromium"]  # fmt: skip
    without = no_browser_anywhere(monkeypatch, tasks, apt_get=False)
    with pytest.raises(SystemExit, match="Fedora"):  # no apt-get: how to get one, nothing run
        tasks.ensure_browser(install=True)
    assert without == []


def test_the_browser_on_the_path_is_found_by_any_of_its_names(monkeypatch):
    tasks = load_tasks()
    no_browser_anywhere(monkeypatch, tasks, apt_get=False)
    monkeypatch.setattr(tasks.shutil, "which",
                        lambda name: "/opt/bin/google-chrome" if name == "google-chrome" else None)
    assert tasks.find_browser() == "/opt/bin/google-chrome"


def test_ci_sets_up_then_runs_the_readmes_test_command():
    steps = [line for line in (ROOT / ".ci/run").read_text(encoding="utf-8").splitlines()
             if line.startswith("python3 ")]  # fmt: skip
    assert steps == ["python3 tasks.py setup", "python3 tasks.py test"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "python3 tasks.py test" in readme and "python3 tasks.py book" in readme


def test_a_dangling_venv_link_is_named_not_blamed_on_python3_venv(monkeypatch, tmp_path):
    tasks = load_tasks()
    commands = []
    monkeypatch.setattr(tasks, "run", lambda *cmd, **kw: commands.append(cmd) or 1)
    venv = tmp_path / ".venv"
    venv.symlink_to(tmp_path / "gone" / "venv")
    with pytest.raises(SystemExit) as stopped:
        tasks.create_venv(venv, venv / "bin" / "python")
    message = str(stopped.value)
    assert message == (
        f"[tasks] .venv is a link to {tmp_path / 'gone' / 'venv'}, which does not exist; "
        f"restore what it points to, or remove the link (rm {venv}) and run again to make a "
        "new .venv."
    )
    assert commands == []  # no venv tried, nothing removed
    assert venv.is_symlink()


def test_the_test_command_names_a_test_file_that_does_not_exist(monkeypatch):
    tasks = load_tasks()
    commands = []
    monkeypatch.setattr(tasks, "run", lambda *cmd, **kw: commands.append(cmd) or 0)
    for step in ("ensure_venv", "ensure_browser", "ensure_classic_venv"):
        monkeypatch.setattr(tasks, step, lambda *args, **kw: None)
    monkeypatch.setattr(tasks, "start_classic_venv", lambda: lambda: None)
    monkeypatch.setattr(sys, "argv", ["tasks.py", "test", "tests/test_sesion.py::test_x", "-x"])
    with pytest.raises(SystemExit) as stopped:
        tasks.main()
    message = str(stopped.value)
    assert message.startswith("[tasks] no such test file or folder: tests/test_sesion.py::test_x "
                              "(did you mean tests/test_session.py")  # fmt: skip
    assert "leave the arguments out to run every test" in message
    assert commands == []  # no ruff, no pytest
    assert tasks.missing_test_paths(["-m", "not book", "-k", "tests/none.py", "tests",
                                     "tests/test_project.py", "--ignore", "tests/none.py"]) == []
    assert tasks.missing_test_paths(["tests/missing.py", "-q"]) == ["tests/missing.py"]
