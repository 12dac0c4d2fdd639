"""Sphinx extension: a page never goes out without its figures.

Two parts:

- The notebook kernels that the build starts inherit its environment. A headless server or CI
  runner often sets ``MPLBACKEND=Agg``; a kernel that inherits it draws to Agg instead of the
  inline backend, and ``plt.show()`` then puts nothing into the notebook. So the variable is
  removed from the build's environment when the extension loads (each chapter also selects
  the inline backend itself, through ``vitbook.plotting.use_book_style()``).
- A guard: a code cell that draws a figure but shows no picture is a warning, which fails the
  strict build, naming the notebook and the cell. A cell draws a figure when it carries a figure
  caption (``mystnb.figure`` metadata), calls ``plt.show()``, prints a figure's text form
  (``<Figure size 640x480 with 1 Axes>``) or gets matplotlib's "cannot be shown" warning. A
  picture is an image output or an interactive figure's HTML (which holds its frames as images,
  or canvases that its script draws on, as the digit playground).

How the pictures are shown on the page (narrow columns too) is ``book/_ext/reader.py``'s part.
"""

from __future__ import annotations

import os
import re

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

FIGURE_TEXT = re.compile(r"<Figure size \d+(\.\d+)?x\d+(\.\d+)? with \d+ Axes>")
CANNOT_SHOW = "non-interactive, and thus cannot be shown"
IMAGE_TYPES = {"image/png", "image/jpeg", "image/svg+xml", "image/gif"}


def figure_problem(source: str, metadata: dict, outputs: list[dict[str, str]]) -> str | None:
    """Why a cell that draws a figure shows none, or None when it is fine.

    Args:
        source: the cell's code.
        metadata: the cell's metadata.
        outputs: one dict per output, mime type (or ``"stderr"`` / ``"stdout"``) to its text;
            image data need not be included, only its key.
    """
    pictures = sum(
        any(kind in IMAGE_TYPES for kind in output)
        or "<img" in output.get("text/html", "")
        or "<canvas" in output.get("text/html", "")
        for output in outputs
    )
    if pictures:
        return None
    if (metadata.get("mystnb") or {}).get("figure"):
        return "it has a figure caption (mystnb.figure) but no image output"
    if any(CANNOT_SHOW in output.get("stderr", "") for output in outputs):
        return "matplotlib could not show its figure (a non-interactive backend such as Agg)"
    if any(FIGURE_TEXT.search(output.get("text/plain", "")) for output in outputs):
        return "it shows a figure's text form instead of its image"
    if re.search(r"\bplt\.show\(\)", source):
        return "it calls plt.show() but produced no image"
    return None


def _cell_outputs(cell: nodes.Element) -> list[dict[str, str]]:
    outputs = []
    for node in cell.findall(nodes.Element):
        if node.get("nb_element") == "mime_bundle":
            outputs.append(
                {
                    child["mime_type"]: child.astext()
                    if child["mime_type"] not in IMAGE_TYPES
                    else ""
                    for child in node.children
                    if isinstance(child, nodes.Element) and child.get("mime_type")
                }
            )
        elif "stderr" in node.get("classes", []):
            outputs.append({"stderr": node.astext()})
    return outputs


def check_figures(app: Sphinx, doctree: nodes.document) -> None:
    for cell in doctree.findall(nodes.container):
        if cell.get("nb_element") != "cell_code":
            continue
        source = "".join(
            node.astext()
            for node in cell.findall(nodes.literal_block)
            if node.parent.get("nb_element") == "cell_code_source"
        )
        problem = figure_problem(source, cell.get("cell_metadata", {}), _cell_outputs(cell))
        if problem:
            logger.warning(
                f"{app.env.docname}: code cell {cell.get('cell_index')} draws a figure but shows "
                f"no picture: {problem}.",
                location=cell,
                type="vitbook",
                subtype="figure",
            )


def setup(app: Sphinx) -> dict:
    # Before any kernel starts: kernels inherit this process's environment.
    os.environ.pop("MPLBACKEND", None)
    app.connect("doctree-read", check_figures)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
