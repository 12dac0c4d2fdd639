"""Live figures in real notebook front ends, driven by headless Chromium.

Two front ends, each a real server on 127.0.0.1 (no token, no browser of its own) in a temporary
folder holding a small notebook that shows an interactive figure of ``vitbook.widgets``:

- JupyterLab with ipywidgets 8, from ``.venv`` (the versions of ``constraints.txt``);
- the classic Notebook with ipywidgets 7 and widgetsnbextension 3.6.10, from ``.venv-classic``
  (``requirements-classic.txt``; ``python3 tasks.py test`` creates it, and so does this module
  when it is missing or stale). Colab ships ipywidgets 7; this is the closest front end here.

Chromium opens the notebook and runs it; the kernel writes every frame of the figure as PNG bytes
(``Explorer.png``) to a file. The test then checks the picture that the page shows (the bytes of
the ``Image`` widget's ``<img>``) against those frames: the default first, then after moving the
slider with the keyboard, then after picking another entry of the menu. The notebook also shows
the HTML book's static version of the figure as an HTML output (inserted by each front end in its
own way, with jQuery in the classic Notebook): its script must start it, and its slider must take
the arrow keys without moving the notebook's cell selection. Its last cell shows the digit
playground (``vitbook.widgets.digit_playground``), another HTML output with an inline script: it
must start once, register itself in ``window.vitbook.playgrounds``, compute what PyTorch computes
for a test digit and take a mouse stroke. After it, the photo playground
(``vitbook.widgets.photo_playground``) must start once, register itself in
``window.vitbook.photoPlaygrounds``, compute what PyTorch computes for a shipped test photo and
show another photo from its menu. The kernel imports the ``vitbook`` of this repository (the
server puts it first on ``PYTHONPATH``), whatever copy the environment has installed.
Requests that leave the machine are refused.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import nbformat
import pytest
from booktools import CHROMIUM_FLAGS, ROOT, browser_path

pytestmark = pytest.mark.book

PLAYGROUND_TEST_DIGIT = 0  # index in the test split of vitbook.data.load_digits_split()
PLAYGROUND_TEST_PHOTO = 3  # index among the shipped test photos of load_cifar10_sample()
CELLS = [
    "import base64\nimport json\n\nfrom matplotlib.figure import Figure\n\n"
    "from vitbook.widgets import explore\n\n\n"
    "def plot_bar(height, colour):\n"
    "    fig = Figure(figsize=(2, 1.5))\n"
    "    ax = fig.add_subplot()\n"
    "    ax.bar([0], [height], color=colour)\n"
    "    ax.set_ylim(0, 6)\n"
    "    return fig\n\n\n"
    'explorer = explore(plot_bar, height=range(1, 6), colour=["C0", "C3"])\n'
    "frames = {\n"
    '    f"{i},{j}": base64.b64encode(explorer.png((i, j))).decode("ascii")\n'
    "    for i in range(5)\n"
    "    for j in range(2)\n"
    "}\n"
    'with open("frames.json", "w") as file:\n'
    "    json.dump(frames, file)",
    "explorer",
    "from IPython.display import HTML\n\nHTML(explorer.to_html())  # the HTML book's version",
    # PyTorch's answer for the test digit that the test gives the page's predict().
    "import json\n\nimport vitbook\nfrom vitbook.data import load_digits_split\n"
    "from vitbook.pretrained import load_digits_vit\n\n"
    "_, _, x_test, _ = load_digits_split()\n"
    f"digit = x_test[{PLAYGROUND_TEST_DIGIT}]\n"
    'with open("playground.json", "w") as file:\n'
    "    json.dump({\n"
    '        "vitbook": vitbook.__file__,\n'
    '        "ink": (digit * 16).round().int().flatten().tolist(),  # pixel = ink / 16\n'
    '        "probabilities": load_digits_vit()(digit[None]).softmax(-1)[0].tolist(),\n'
    "    }, file)",
    "from vitbook.widgets import digit_playground\n"
    "from vitbook.pretrained import load_digits_vit\n\n"
    "digit_playground(load_digits_vit())",
    # PyTorch's answer for the shipped test photo that the test gives the photo playground.
    "import json\n\nfrom vitbook.data import load_cifar10_sample\n"
    "from vitbook.pretrained import load_cifar10_vit\n\n"
    "*_, photos, _ = load_cifar10_sample()\n"
    f"photo = photos[{PLAYGROUND_TEST_PHOTO}]  # (3, 32, 32) in [0, 1]\n"
    'with open("photo_playground.json", "w") as file:\n'
    "    json.dump({\n"
    '        "pixels": (photo.permute(1, 2, 0) * 255).round().int().flatten().tolist(),\n'
    '        "probabilities": load_cifar10_vit()(photo[None]).softmax(-1)[0].tolist(),\n'
    "    }, file)",
    "from vitbook.widgets.photo_playground import photo_playground\n\nphoto_playground()",
]
PICTURE = "img.widget-image"
# null while the front end swaps pictures (it revokes the blob: URL of the old one).
PNG_BYTES = """async img => {
  let bytes;
  try {
    bytes = new Uint8Array(await (await fetch(img.src)).arrayBuffer());
  } catch (error) {
    return null;
  }
  let text = "";
  for (let i = 0; i < bytes.length; i++) text += String.fromCharCode(bytes[i]);
  return btoa(text);
}"""
TIMEOUT_S = 60
AS_ROOT = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def versions(python: Path, names: list[str]) -> dict[str, str]:
    code = (
        "import json, sys\nfrom importlib.metadata import version\n"
        "print(json.dumps({n: version(n) for n in sys.argv[1:]}))"
    )
    result = subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@contextmanager
def server(command: list[str], folder: Path, port: int):
    """A Jupyter server started from ``command``, ready on 127.0.0.1:port; stopped on exit."""
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)  # the kernel keeps Jupyter's own backend
    env.update(
        JUPYTER_CONFIG_DIR=str(folder / ".config"),
        JUPYTER_RUNTIME_DIR=str(folder / ".runtime"),
        IPYTHONDIR=str(folder / ".ipython"),
        PATH=str(Path(command[0]).parent) + os.pathsep + env.get("PATH", ""),
        HF_HUB_OFFLINE="1",
        PYDEVD_DISABLE_FILE_VALIDATION="1",
        # The package under test, before any installed copy (an editable install may point to
        # another checkout of the repository).
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
    )
    log = (folder / "server.log").open("w")
    process = subprocess.Popen(command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the server did not start:\n{(folder / 'server.log').read_text()}")
                time.sleep(0.3)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@contextmanager
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium = browser_path()
    with sync_api.sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=chromium,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 900},
        )
        refused = []

        def local_only(route) -> None:
            host = urlsplit(route.request.url).hostname
            if urlsplit(route.request.url).scheme in ("data", "blob") or host == "127.0.0.1":
                route.continue_()
            else:
                refused.append(route.request.url)
                route.abort()

        context.route("**/*", local_only)
        try:
            yield context, refused
        finally:
            context.close()


def write_notebook(folder: Path) -> Path:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = folder / "figure.ipynb"
    nbformat.write(notebook, path)
    return path


def shown(page) -> str | None:
    """The PNG bytes (base64) of the picture the figure shows now (None: none yet)."""
    if not page.locator(PICTURE).count():
        return None
    return page.locator(PICTURE).first.evaluate(PNG_BYTES)


def wait_for_frame(page, frames: dict[str, str], key: str, what: str) -> float:
    """Wait until the page shows the frame ``key``; return how long it took."""
    start = time.monotonic()
    while time.monotonic() - start < TIMEOUT_S:
        if shown(page) == frames[key]:
            return time.monotonic() - start
        time.sleep(0.05)
    now = [k for k, png in frames.items() if png == shown(page)]
    pytest.fail(f"{what}: the picture is not frame {key} after {TIMEOUT_S} s (it is {now})")


def check_static_figure(page, active_cell: str, report: dict) -> None:
    """The HTML book's version of the figure, shown as an HTML output: its script ran, and its
    slider takes the arrow keys without moving the notebook's selection (command mode)."""
    root = page.locator(".vitbook-explorer").first
    root.wait_for(timeout=TIMEOUT_S * 1000)
    page.wait_for_function(
        "() => document.querySelector('.vitbook-explorer').getAttribute('data-ready') === 'true'",
        timeout=10_000,
    )
    key = "root => root.getAttribute('data-key')"
    assert root.evaluate(key) == "2,0"
    slider = root.locator("input[type=range]")
    slider.focus()
    cell = page.evaluate(active_cell)
    slider.press("ArrowRight")
    assert root.evaluate(key) == "3,0", "ArrowRight moved the static slider"
    # Up and Down: in command mode, one of them would move the selection to another cell.
    slider.press("ArrowUp")
    assert root.evaluate(key) == "4,0", "ArrowUp moved the static slider"
    for _ in range(3):
        slider.press("ArrowDown")
    assert root.evaluate(key) == "1,0", "ArrowDown moved the static slider"
    assert page.evaluate(active_cell) == cell, "the arrow keys reached the notebook"
    root.locator("select").select_option("1")
    assert root.evaluate(key) == "1,1"
    report["static figure"] = "starts, keys and menu work"


def check_playground(page, folder: Path, report: dict) -> None:
    """The digit playground's output: shown once and started, registered once, the same
    probabilities as PyTorch for a test digit, and a mouse stroke on its grid draws."""
    start = time.monotonic()
    page.locator(".vitbook-playground[data-ready=true]").first.wait_for(timeout=TIMEOUT_S * 1000)
    report["playground start s"] = round(time.monotonic() - start, 2)
    reference = json.loads((folder / "playground.json").read_text())  # written before it
    kernel_vitbook = Path(reference["vitbook"])
    assert kernel_vitbook.is_relative_to(ROOT), f"the kernel imported {kernel_vitbook}"
    root = page.locator(".vitbook-playground")
    assert root.count() == 1, f"{root.count()} playgrounds in the page"
    root.scroll_into_view_if_needed()
    assert root.is_visible()
    assert page.evaluate("() => window.vitbook.playgrounds.length") == 1
    ink, expected = reference["ink"], reference["probabilities"]
    shown = page.evaluate("ink => window.vitbook.playgrounds[0].predict(ink).probabilities", ink)
    gap = max(abs(a - b) for a, b in zip(shown, expected, strict=True))
    assert gap < 1e-5, f"the page's probabilities differ from PyTorch's by {gap}"
    assert shown.index(max(shown)) == expected.index(max(expected))
    # A stroke down the middle of the grid with the mouse.
    pixels = "() => window.vitbook.playgrounds[0].pixels()"
    before = page.evaluate(pixels)
    grid = root.locator("canvas.vbp-grid")
    box = grid.bounding_box()
    page.mouse.move(box["x"] + 0.5 * box["width"], box["y"] + 0.1 * box["height"])
    page.mouse.down()
    for step in range(1, 11):
        y = box["y"] + (0.1 + 0.08 * step) * box["height"]
        page.mouse.move(box["x"] + 0.5 * box["width"], y)
    page.mouse.up()
    after = page.evaluate(pixels)
    assert after != before, "the mouse stroke did not draw"
    assert sum(after[r * 8 + c] for r in range(8) for c in (3, 4)) > sum(
        before[r * 8 + c] for r in range(8) for c in (3, 4)
    ), "the stroke did not add ink down the middle"
    bars = root.evaluate(
        """root => Array.from(root.querySelectorAll(".vbp-bar"),
                              bar => Number(bar.getAttribute("data-probability")))"""
    )
    drawn = page.evaluate("ink => window.vitbook.playgrounds[0].predict(ink).probabilities", after)
    assert bars == drawn, "the bars do not show the drawn digit's probabilities"
    # For people: what the playground looks like in this front end (kept in tmp_path).
    page.screenshot(path=folder / "playground.png")
    report["playground"] = f"starts, agrees with PyTorch to {gap:.0e}, draws"
    report["playground check s"] = round(time.monotonic() - start, 2)


def check_photo_playground(page, folder: Path, report: dict) -> None:
    """The photo playground's output: started and registered once, the same probabilities as
    PyTorch for a shipped test photo given as 3,072 pixel values, and its menu shows a photo."""
    start = time.monotonic()
    ready = ".vitbook-photo-playground[data-ready=true]"
    page.locator(ready).first.wait_for(timeout=TIMEOUT_S * 1000)
    report["photo playground start s"] = round(time.monotonic() - start, 2)
    root = page.locator(".vitbook-photo-playground")
    assert root.count() == 1, f"{root.count()} photo playgrounds in the page"
    root.scroll_into_view_if_needed()
    assert root.is_visible()
    assert page.evaluate("() => window.vitbook.photoPlaygrounds.length") == 1
    reference = json.loads((folder / "photo_playground.json").read_text())  # written before it
    pixels, expected = reference["pixels"], reference["probabilities"]
    assert len(pixels) == 3072
    shown = page.evaluate(
        "pixels => window.vitbook.photoPlaygrounds[0].predict(pixels).probabilities", pixels
    )
    gap = max(abs(a - b) for a, b in zip(shown, expected, strict=True))
    assert gap < 1e-5, f"the page's probabilities differ from PyTorch's by {gap}"
    assert shown.index(max(shown)) == expected.index(max(expected))
    status = root.locator(".vpp-status")
    before = status.text_content()
    root.locator("select.vpp-example").select_option(index=2)
    page.wait_for_function(
        "([s, b]) => document.querySelector(s).textContent !== b", arg=[".vpp-status", before]
    )
    page.screenshot(path=folder / "photo_playground.png")
    report["photo playground"] = f"starts, agrees with PyTorch to {gap:.0e}, shows another photo"
    report["photo playground check s"] = round(time.monotonic() - start, 2)


def drive(page, folder: Path, slider: str, report: dict) -> None:
    """Check the default frame, then one step of the slider by keyboard, then the menu."""
    frames_file = folder / "frames.json"
    deadline = time.monotonic() + TIMEOUT_S
    while not frames_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert frames_file.exists(), "the notebook did not run (no frames.json)"
    time.sleep(0.2)  # let the kernel finish writing it
    frames = json.loads(frames_file.read_text())
    assert len(set(frames.values())) == 10, "every combination has its own picture"
    page.locator(PICTURE).first.wait_for(timeout=TIMEOUT_S * 1000)
    report["first picture s"] = round(wait_for_frame(page, frames, "2,0", "default"), 2)
    handle = page.locator(slider).first
    handle.focus()
    handle.press("ArrowRight")
    report["slider redraw s"] = round(wait_for_frame(page, frames, "3,0", "slider moved"), 2)
    page.locator(".widget-dropdown select").first.select_option(label="C3")
    report["menu redraw s"] = round(wait_for_frame(page, frames, "3,1", "menu changed"), 2)
    handle.focus()
    handle.press("ArrowLeft")
    handle.press("ArrowLeft")
    report["two steps back s"] = round(wait_for_frame(page, frames, "1,1", "slider back"), 2)


def test_jupyterlab_with_ipywidgets_8(tmp_path, record_property):
    python = Path(sys.executable)
    lab = python.parent / "jupyter-lab"
    if not lab.exists():
        pytest.fail("no jupyter-lab in this environment: run python3 tasks.py test", pytrace=False)
    report = versions(python, ["jupyterlab", "ipywidgets", "jupyterlab_widgets"])
    path = write_notebook(tmp_path)
    # No "get notified about official Jupyter news?" prompt over the notebook.
    labconfig = tmp_path / ".config" / "labconfig"  # the server's JUPYTER_CONFIG_DIR
    labconfig.mkdir(parents=True)
    (labconfig / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}})
    )
    port = free_port()
    command = [
        str(lab), "--no-browser", f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1",
        "--IdentityProvider.token=", f"--ServerApp.root_dir={tmp_path}", *AS_ROOT,
        "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ]  # fmt: skip
    start = time.monotonic()
    with server(command, tmp_path, port), browser() as (context, refused):
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"http://127.0.0.1:{port}/lab/tree/{path.name}")
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell", timeout=60_000)
        page.wait_for_function(
            """() => {
              const widget = window.jupyterapp.shell.currentWidget;
              const kernel = widget && widget.sessionContext && widget.sessionContext.session
                && widget.sessionContext.session.kernel;
              return kernel && kernel.connectionStatus === "connected" && kernel.status === "idle";
            }""",
            timeout=TIMEOUT_S * 1000,
        )
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        drive(page, tmp_path, ".widget-slider .noUi-handle, .widget-hslider .noUi-handle", report)
        check_static_figure(
            page, "() => window.jupyterapp.shell.currentWidget.content.activeCellIndex", report
        )
        check_playground(page, tmp_path, report)
        check_photo_playground(page, tmp_path, report)
        assert not errors, f"page errors in JupyterLab: {errors}"
    assert not refused, f"requests that left the machine: {refused}"
    report["wall s"] = round(time.monotonic() - start, 1)
    record_property("jupyterlab", report)
    print(f"JupyterLab: {report}")


def load_tasks():
    spec = importlib.util.spec_from_file_location("vitbook_tasks", ROOT / "tasks.py")
    tasks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks)
    return tasks


@pytest.fixture(scope="session")
def classic_python() -> Path:
    """The Python of .venv-classic, created or refreshed by tasks.py when needed."""
    tasks = load_tasks()
    try:
        tasks.ensure_classic_venv()
    except SystemExit as error:
        pytest.fail(
            f"could not set up .venv-classic (the classic Notebook with ipywidgets 7): {error}",
            pytrace=False,
        )
    return tasks.CLASSIC_PYTHON


def test_classic_notebook_with_ipywidgets_7(tmp_path, classic_python, record_property):
    report = versions(classic_python, ["notebook", "ipywidgets", "widgetsnbextension"])
    assert report["ipywidgets"].startswith("7.") and report["widgetsnbextension"] == "3.6.10"
    path = write_notebook(tmp_path)
    port = free_port()
    command = [
        str(classic_python.parent / "jupyter-notebook"), "--no-browser",
        f"--NotebookApp.port={port}", "--NotebookApp.ip=127.0.0.1", "--NotebookApp.token=",
        "--NotebookApp.password=", f"--NotebookApp.notebook_dir={tmp_path}", *AS_ROOT,
    ]  # fmt: skip
    start = time.monotonic()
    with server(command, tmp_path, port), browser() as (context, refused):
        page = context.new_page()
        errors, console, warnings = [], [], []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda m: (console if m.type == "error" else warnings).append(m.text))
        page.goto(f"http://127.0.0.1:{port}/notebooks/{path.name}")
        page.wait_for_function(
            """() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel
                 && Jupyter.notebook.kernel.is_connected()""",
            timeout=TIMEOUT_S * 1000,
        )
        # The widget manager first asks the kernel for the widgets it already has (ipywidgets 7
        # answers on the second try, after "Failed to fetch ipywidgets through the
        # jupyter.widget.control comm channel"); widgets created while it asks are lost. A reader
        # runs a cell long after that; the test waits for it.
        deadline = time.monotonic() + 10
        while not any("jupyter.widget.control" in text for text in warnings):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        time.sleep(0.5)
        page.evaluate("() => Jupyter.notebook.execute_all_cells()")
        drive(page, tmp_path, ".widget-hslider .ui-slider-handle", report)
        check_static_figure(page, "() => Jupyter.notebook.get_selected_index()", report)
        check_playground(page, tmp_path, report)
        check_photo_playground(page, tmp_path, report)
        failed = [text for text in console if "Could not create" in text or "model" in text]
        assert not failed, f"widget errors in the classic notebook: {failed}"
        assert not errors, f"page errors in the classic notebook: {errors}"
    assert not refused, f"requests that left the machine: {refused}"
    report["wall s"] = round(time.monotonic() - start, 1)
    record_property("classic", report)
    print(f"classic Notebook: {report}")
