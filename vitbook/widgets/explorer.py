"""explore() and Explorer: one figure with controls, live in a kernel and static in a web page.

Imported through :mod:`vitbook.widgets`, which also says how the two views are shown.

See chapter: How the interactive figures work.
"""

from __future__ import annotations

import inspect
import io
import itertools
import math
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from matplotlib.figure import Figure

from vitbook.plotting.style import CSS_PX_PER_INCH, PNG_SCALE
from vitbook.widgets import _panels, _static_page

__all__ = ["MAX_FRAMES", "MENU_MAX_CHOICES", "Explorer", "Param", "explore"]

MAX_FRAMES = 400
MENU_MAX_CHOICES = 4  # up to 4 choices: a menu; a slider needs at least 5 values to be worth moving
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@dataclass(frozen=True)
class Param:
    """One control: its parameter name, its label, its (label, value) options, the default index."""

    name: str
    label: str
    options: tuple[tuple[str, object], ...]
    default: int

    @property
    def is_dropdown(self) -> bool:
        """A menu for words and for a few choices; a slider for a range of 5 values or more."""
        few = len(self.options) <= MENU_MAX_CHOICES
        return few or all(isinstance(value, str) for _, value in self.options)


def _label(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _options(name: str, values: object) -> tuple[tuple[str, object], ...]:
    too_many = ValueError(
        f"{name} has more than MAX_FRAMES={MAX_FRAMES} values, or no end; offer fewer (a finite "
        "list, a range or every other value)."
    )
    if isinstance(values, Mapping):
        if len(values) > MAX_FRAMES + 1:
            raise too_many
        options = [(str(label), value) for label, value in values.items()]
    elif isinstance(values, (torch.Tensor, np.ndarray)) and values.ndim == 1:
        if len(values) > MAX_FRAMES + 1:
            raise too_many
        options = [(_label(v), v) for v in values.tolist()]
    elif isinstance(values, (str, bytes, torch.Tensor, np.ndarray)) or not hasattr(
        values, "__iter__"
    ):
        raise TypeError(
            f"{name}={values!r} is not a list of values to choose from; pass a list, a range or "
            f"a 1-D array, e.g. {name}=[{values!r}]."
        )
    else:  # read at most one value past the limit: an endless iterator fails at once
        read = list(itertools.islice(values, MAX_FRAMES + 1))
        sized = hasattr(values, "__len__")
        if len(read) > MAX_FRAMES and (not sized or len(values) > len(read)):
            raise too_many  # (a sized container of MAX_FRAMES + 1 is counted below)
        options = [(_label(v), v) for v in read]
    if not options:
        raise ValueError(f"{name} has no values; pass at least one, e.g. {name}=[1, 2, 3].")
    labels = [label for label, _ in options]
    if len(set(labels)) != len(labels) and not isinstance(values, Mapping):
        if any(_index(options[:i], value) is not None for i, (_, value) in enumerate(options)):
            raise ValueError(f"{name} has repeated values {labels}; list each value once.")
        options = [(repr(value), value) for _, value in options]  # e.g. 0.1 and 0.1000001
        labels = [label for label, _ in options]
    if len(set(labels)) != len(labels):
        alike = sorted({label for label in labels if labels.count(label) > 1})
        raise ValueError(
            f"{name} has different values that print alike as {alike}; pass a dict "
            f"{{label: value}} that names each one, e.g. {name}={{'first': ..., 'second': ...}}."
        )
    return tuple(options)


def _index(options: tuple[tuple[str, object], ...], value: object) -> int | None:
    for i, (_, option) in enumerate(options):
        try:
            if bool(option == value):
                return i
        except (TypeError, ValueError, RuntimeError):  # arrays, tensors: no single truth value
            continue
    return None


def _check_signature(plot_fn: Callable[..., Figure], names: list[str]) -> None:
    try:
        parameters = inspect.signature(plot_fn).parameters.values()
    except (TypeError, ValueError):  # some builtins have no signature: nothing to check
        return
    by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    accepted = [p.name for p in parameters if p.kind in by_keyword]
    fn = getattr(plot_fn, "__name__", "plot_fn")
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        unknown = [name for name in names if name not in accepted]
        if unknown:
            raise ValueError(
                f"{fn}() has no parameter {', '.join(map(repr, unknown))}; its parameters are "
                f"{', '.join(accepted) or 'none'}. Rename the values, or wrap {fn} in a function "
                "that takes these names."
            )
    missing = [
        p.name
        for p in parameters
        if p.kind in by_keyword and p.default is inspect.Parameter.empty and p.name not in names
    ]
    if missing:
        raise ValueError(
            f"{fn}() needs {', '.join(map(repr, missing))}, which got no values; pass "
            f"{missing[0]}=[...], or fix it with functools.partial({fn}, {missing[0]}=...)."
        )


def _describe(plot_fn: Callable[..., Figure], params: list[Param]) -> str:
    """The alt text's start: the docstring's first line, else the name and what changes.

    Example:
        >>> _describe(lambda k: None, [Param("k", "query patch", (("0", 0), ("1", 1)), 0)])
        'A figure for each query patch'
    """
    doc = (getattr(plot_fn, "__doc__", None) or "").strip()
    if doc:
        return doc.splitlines()[0].rstrip(".")
    name = getattr(plot_fn, "__name__", "")
    what = " and ".join(p.label for p in params)
    return f"{name} for each {what}" if name.isidentifier() else f"A figure for each {what}"


def explore(
    plot_fn: Callable[..., Figure],
    *,
    defaults: Mapping[str, object] | None = None,
    labels: Mapping[str, str] | None = None,
    description: str | None = None,
    dpi: float = CSS_PX_PER_INCH,
    continuous_update: bool = False,
    **params: object,
) -> Explorer:
    """An interactive figure: one control per parameter, live in a kernel, static in the book.

    Args:
        plot_fn: ``plot_fn(**values) -> matplotlib.figure.Figure``; closed once drawn.
        defaults: each control's start (default: a slider's middle, a menu's first value).
        description: the alt text's start (default: the first line of ``plot_fn``'s docstring).
        dpi: CSS pixels per inch; pictures are stored at ``PNG_SCALE`` times that.
        continuous_update: redraw while a live slider is dragged.
        **params: per parameter, its values (a list, range, 1-D array or ``{label: value}``):
            strings or 2 to 4 values give a menu, otherwise a slider; at least 2 values.

    Raises:
        ValueError: no parameter, fewer than 2 values, a name that ``plot_fn`` does not take,
            a default that is not among the values, unknown names in ``defaults`` or ``labels``,
            or more than :data:`MAX_FRAMES` combinations.
        TypeError: ``plot_fn`` is not callable, or values that are not a list.

    Example:
        >>> from vitbook.plotting import plot_sincos
        >>> explorer = explore(plot_sincos, position=range(0, 64, 4), dimension=[0, 1, 8])
        >>> explorer.num_frames
        48
        >>> [p.is_dropdown for p in explorer.params]  # a slider, and a menu for 3 choices
        [False, True]
        >>> explore(plot_sincos, position=[], dimension=[0])
        Traceback (most recent call last):
        ...
        ValueError: position has no values; pass at least one, e.g. position=[1, 2, 3].

    See chapter: How the interactive figures work.
    """
    if not callable(plot_fn):
        raise TypeError(f"plot_fn must be a function returning a Figure, got {plot_fn!r}.")
    if not params:
        raise ValueError("explore needs at least one parameter to vary, e.g. position=range(8).")
    if not (isinstance(dpi, (int, float)) and not isinstance(dpi, bool) and dpi > 0):
        raise ValueError(f"dpi={dpi!r} must be a positive number, e.g. 80.")
    _check_signature(plot_fn, list(params))
    defaults, labels = dict(defaults or {}), dict(labels or {})
    for what, given in (("defaults", defaults), ("labels", labels)):
        unknown = sorted(set(given) - set(params))
        if unknown:
            raise ValueError(
                f"{what} names {unknown}, which are not parameters; the parameters are "
                f"{', '.join(params)}."
            )
    controls = []
    for name, values in params.items():
        options = _options(name, values)
        default = 0 if all(isinstance(v, str) for _, v in options) else len(options) // 2
        if name in defaults:
            default = _index(options, defaults[name])
            if default is None:
                raise ValueError(
                    f"defaults[{name!r}]={defaults[name]!r} is not one of the values of {name}: "
                    f"{', '.join(label for label, _ in options)}; pick one of them."
                )
        if len(options) < 2:
            raise ValueError(
                f"{name} has the single value {options[0][0]}: a control that cannot move. Offer "
                f"at least 2 values, or fix it with functools.partial(plot_fn, {name}=...)."
            )
        controls.append(Param(name, str(labels.get(name, name)), options, default))
    counts = [len(param.options) for param in controls]
    if math.prod(counts) > MAX_FRAMES:
        sizes = " x ".join(f"{n} {p.name}" for n, p in zip(counts, controls, strict=True))
        raise ValueError(
            f"{sizes} = {math.prod(counts)} combinations is more than MAX_FRAMES={MAX_FRAMES}, "
            "the frames a page of the HTML book can embed and stay under 5 MB; offer fewer "
            "values (every other one, say)."
        )
    if description is None:
        description = _describe(plot_fn, controls)
    return Explorer(
        plot_fn,
        tuple(controls),
        dpi=dpi,
        continuous_update=continuous_update,
        description=str(description),
    )


class Explorer:
    """A figure with controls; build it with :func:`explore`.

    Example:
        >>> from vitbook.plotting import plot_axial_reach
        >>> explorer = explore(plot_axial_reach, grid_size=[(2, 3), (3, 2)], query=range(6))
        >>> explorer
        Explorer(plot_axial_reach; grid_size: 2 values, query: 6 values; 12 frames)

    See chapter: How the interactive figures work.
    """

    def __init__(
        self,
        plot_fn: Callable[..., Figure],
        params: tuple[Param, ...],
        *,
        dpi: float,
        continuous_update: bool,
        description: str | None = None,
    ) -> None:
        self.plot_fn, self.params = plot_fn, params
        self.dpi, self.continuous_update = dpi, continuous_update
        self.description = _describe(plot_fn, list(params)) if description is None else description

    def __repr__(self) -> str:
        name = getattr(self.plot_fn, "__name__", "plot_fn")
        counts = ", ".join(
            f"{p.name}: {len(p.options)} value{'s' * (len(p.options) != 1)}" for p in self.params
        )
        return f"Explorer({name}; {counts}; {self.num_frames} frames)"

    @property
    def num_frames(self) -> int:
        """The number of combinations of values, one static frame each."""
        return math.prod(len(p.options) for p in self.params)

    def values(self, indices: tuple[int, ...]) -> dict[str, object]:
        """The keyword arguments of ``plot_fn`` for one index into each parameter's values."""
        return {p.name: p.options[i][1] for p, i in zip(self.params, indices, strict=True)}

    def alt(self, indices: tuple[int, ...]) -> str:
        """The alt text of one frame: the description and the value of every control."""
        values = ", ".join(
            f"{p.label} = {p.options[i][0]}" for p, i in zip(self.params, indices, strict=True)
        )
        return f"{self.description} ({values})"

    def png(self, indices: tuple[int, ...], *, palette: bool = False) -> bytes:
        """Draw one frame and return it as PNG bytes (palette-quantised for the static page).

        ``PNG_SCALE`` pixels per CSS pixel.
        """
        if not palette:
            import matplotlib.pyplot as plt

            fig = self._figure(indices)
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png", dpi=self.dpi * PNG_SCALE, facecolor="white")
            plt.close(fig)
            return buffer.getvalue()
        return _panels.encode(self.pixels(indices))

    def pixels(self, indices: tuple[int, ...]) -> np.ndarray:
        """One frame as an RGB array (H, W, 3) of uint8, exactly what ``png`` would encode."""
        return self._draw(indices)[0]

    def _draw(
        self, indices: tuple[int, ...], boxes: bool = False
    ) -> tuple[np.ndarray, list[_panels.Box]]:
        """One frame drawn straight into an RGB array, as ``savefig(dpi=..., facecolor="white")``
        would, and, with ``boxes``, its panels' boxes (``_panels.element_boxes``)."""
        import matplotlib.pyplot as plt
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        fig = self._figure(indices)
        canvas = FigureCanvasAgg(fig)
        fig.set_dpi(self.dpi * PNG_SCALE)
        fig.patch.set_facecolor("white")
        canvas.draw()
        rgb = np.array(canvas.buffer_rgba())[..., :3]
        found = _panels.element_boxes(fig, canvas.get_renderer()) if boxes else []
        plt.close(fig)
        return rgb, found

    def _figure(self, indices: tuple[int, ...]) -> Figure:
        fig = self.plot_fn(**self.values(indices))
        if not isinstance(fig, Figure):
            raise TypeError(
                f"plot_fn returned {type(fig).__name__}, not a matplotlib Figure; end it with "
                "`return fig`."
            )
        return fig

    def live(self):
        """The live figure: a ``VBox`` of one control per parameter, an ``Image`` and an ``HTML``.

        The ``Image`` (a core widget every manager renders) shows PNG bytes; an error of
        ``plot_fn`` shows in the ``HTML`` widget.
        """
        import html

        import ipywidgets as widgets

        controls = []
        for p in self.params:
            common = {
                "options": [label for label, _ in p.options],
                "index": p.default,
                "description": p.label,
                "style": {"description_width": "initial"},
            }
            if p.is_dropdown:
                controls.append(widgets.Dropdown(**common))
            else:
                controls.append(
                    widgets.SelectionSlider(
                        continuous_update=self.continuous_update,
                        layout=widgets.Layout(width="32em"),
                        **common,
                    )
                )
        picture = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        error = widgets.HTML(layout=widgets.Layout(display="none"))

        def redraw(change: object = None) -> None:
            indices = tuple(control.index for control in controls)
            try:
                png = self.png(indices)
            except Exception:  # show the error under the controls, as a notebook cell would
                error.value = (
                    '<pre style="color:#b00020;white-space:pre-wrap;margin:0">'
                    f"{html.escape(traceback.format_exc())}</pre>"
                )
                error.layout.display, picture.layout.display = None, "none"
                return
            picture.value = png
            error.value = ""
            error.layout.display, picture.layout.display = "none", None

        for control in controls:
            control.observe(redraw, names="index")
        redraw()
        return widgets.VBox([*controls, picture, error])

    def pictures(self, workers: int | None = None) -> _panels.Pictures:
        """Every frame, cut into one picture per panel (:mod:`vitbook.widgets._panels`), as PNGs.

        Cuts follow lines that cross no ink in any frame; a piece repeated across frames is
        stored once. ``workers``: drawing processes (``None``: ``VITBOOK_FRAME_WORKERS``, else
        one per core, at most 4; forking only, so one elsewhere).

        Raises:
            ValueError: ``plot_fn`` drew frames of different sizes.
        """
        keys = list(itertools.product(*(range(len(p.options)) for p in self.params)))
        workers = _frame_workers(workers, len(keys))
        drawn = _in_workers(self, _draw_forked_frame, keys, workers)
        sizes = sorted({frame.shape for frame in drawn})
        if len(sizes) > 1:
            raise ValueError(
                f"plot_fn drew frames of {len(sizes)} sizes ({sizes[0][1]} x {sizes[0][0]} and "
                f"{sizes[-1][1]} x {sizes[-1][0]} pixels); give every figure the same figsize "
                "and no bbox_inches='tight', so that the frames can replace each other."
            )
        height, width = sizes[0][:2]
        inked = np.zeros(height * width, bool)
        boxes: set[_panels.Box] = set()
        for frame in drawn:
            inked |= np.unpackbits(frame.ink, count=height * width).astype(bool)
            boxes.update(frame.boxes)
        plan = _panels.plan(inked.reshape(height, width), sorted(boxes))
        # each process encodes a piece it has met in an earlier frame only once
        pieces = _in_workers((plan, drawn, set()), _cut_forked_frame, range(len(keys)), workers)
        return _panels.collect(plan, [",".join(map(str, key)) for key in keys], pieces)

    def to_html(self, pictures: _panels.Pictures | None = None) -> str:
        """The static figure: controls, the pieces of every frame, and the script that shows
        the pieces of the frame the controls choose.

        ``pictures``: what :meth:`pictures` returned, to skip drawing again.
        """
        if pictures is None:
            pictures = self.pictures()
        return _static_page.render(self.params, pictures, description=self.description)

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict:
        box = self.live()
        bundle = {
            "text/plain": repr(self),
            WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": box.model_id},
        }
        # Colab shows the live widget: skip the frames there. VITBOOK_STATIC_FIGURES=0 skips
        # them too, for runs that only check that a notebook executes (the tests' nbval run;
        # the book build draws and the browser test checks every frame).
        wanted = os.environ.get("VITBOOK_STATIC_FIGURES", "1") != "0"
        if wanted and "google.colab" not in sys.modules:
            bundle["text/html"] = self.to_html()
        return bundle


# Drawing frames in forked processes. Matplotlib draws one figure at a time per process and the
# frames of an explorer are independent, so a process per core draws them about that many times
# faster. Forking is what lets any plot_fn (a closure, a lambda) run in the workers without
# pickling it: each worker inherits the explorer. The workers use one torch thread each, as
# PyTorch's DataLoader workers do (OpenMP state does not survive a fork).
MIN_FRAMES_PER_WORKER = 8  # fewer frames than this per worker: not worth starting processes
_FORKED: object = None  # what the forked workers read: set by _in_workers before the fork


def _frame_workers(workers: int | None, num_frames: int) -> int:
    if workers is None:
        setting = os.environ.get("VITBOOK_FRAME_WORKERS", "").strip()
        if setting and not setting.isdigit():
            raise ValueError(
                f"VITBOOK_FRAME_WORKERS={setting!r} must be a whole number of processes, e.g. 1 "
                "(draw frames one by one) or 2; unset it for one per core."
            )
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        workers = int(setting) if setting else min(4, cores or 1)
    elif isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers={workers!r} must be a positive whole number, e.g. 2.")
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(workers, num_frames // MIN_FRAMES_PER_WORKER))


def _in_workers(payload: object, function: Callable, items: object, workers: int) -> list:
    """``[function(item) for item in items]``, in ``workers`` forked processes that inherit
    ``payload`` (a closure or a lambda in it needs no pickling)."""
    global _FORKED
    _FORKED = payload
    try:
        items = list(items)
        if workers <= 1:
            return [function(item) for item in items]
        import multiprocessing

        context = multiprocessing.get_context("fork")
        with context.Pool(workers, initializer=torch.set_num_threads, initargs=(1,)) as pool:
            return pool.map(function, items, chunksize=max(1, len(items) // (4 * workers)))
    finally:
        _FORKED = None


def _draw_forked_frame(indices: tuple[int, ...]) -> _panels.Drawn:
    explorer = _FORKED
    default = tuple(p.default for p in explorer.params)
    return _panels.Drawn.of(*explorer._draw(indices, boxes=indices == default))


def _cut_forked_frame(index: int) -> list[tuple[bytes, bytes | None]]:
    # A process meets its frames in order (pool.map hands out chunks in order), so a piece
    # it encoded is in a frame before the one that repeats it, and collect meets it first.
    plan, drawn, encoded = _FORKED
    return _panels.encode_pieces(plan, drawn[index].rgb(), encoded)
