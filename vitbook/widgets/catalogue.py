"""The book's explorers: one function per interactive figure of the chapters.

Each is built on :func:`vitbook.widgets.explorer.explore` (the engine: a live ipywidgets view in a
kernel, kernel-free frames in the HTML book, at most :data:`~vitbook.widgets.explorer.MAX_FRAMES`
combinations) with a plotting function of :mod:`vitbook.plotting`: :func:`patch_explorer`,
:func:`sincos_explorer`, :func:`position_similarity_explorer`, :func:`attention_explorer` and
:func:`axial_reach_explorer`. ipywidgets is imported only when a live widget is built.

See chapter: How the interactive figures work.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from matplotlib.figure import Figure

from vitbook import _checks, plotting
from vitbook.positional import LearnedPositionEmbedding, sincos_1d, sincos_2d
from vitbook.widgets.explorer import MAX_FRAMES, Explorer, explore

__all__ = [
    "attention_explorer",
    "axial_reach_explorer",
    "patch_explorer",
    "position_similarity_explorer",
    "sincos_explorer",
]


def _controls(plot_fn, values: dict[str, object], **options: object) -> Explorer:
    """:func:`explore` with one control per parameter of ``values`` that has 2 or more values.

    A parameter with a single value is passed to ``plot_fn`` as a constant.
    """
    fixed, varying = {}, {}
    for name, given in values.items():
        listed = list(given.items()) if isinstance(given, dict) else None
        if listed is not None and len(listed) == 1:
            fixed[name] = listed[0][1]
        elif listed is None and len(given := list(given)) == 1:
            fixed[name] = given[0]
        else:
            varying[name] = given
    if not fixed:
        return explore(plot_fn, **options, **varying)

    def draw(**chosen: object) -> Figure:
        return plot_fn(**chosen, **fixed)

    draw.__name__, draw.__doc__ = plot_fn.__name__, plot_fn.__doc__
    for key in ("labels", "defaults"):
        options[key] = {k: v for k, v in dict(options.get(key) or {}).items() if k in varying}
    return explore(draw, **options, **varying)


def _grid_queries(gh: int, gw: int, queries: object, most: int) -> dict[str, object]:
    """The ``query`` slider's values and default: the given patches, or every patch up to ``most``.

    The default is the offered patch nearest the grid's centre.
    """
    if queries is None and gh * gw <= most:
        queries = range(gh * gw)
    elif queries is None:  # evenly spread rows and columns, corners included
        step = max(1.0, math.sqrt(gh * gw / most))
        rows = np.linspace(0, gh - 1, max(1, round(gh / step))).round().astype(int)
        cols = np.linspace(0, gw - 1, max(1, round(gw / step))).round().astype(int)
        queries = [int(r * gw + c) for r in sorted(set(rows)) for c in sorted(set(cols))]
    chosen = {}
    for k in itertools.islice(queries, MAX_FRAMES + 1):  # an endless iterator is cut here
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < gh * gw:
            raise ValueError(
                f"query patch {k!r} is not on the {gh}x{gw} grid; use 0 .. {gh * gw - 1} "
                "(row-major: k = row * Gw + column)."
            )
        chosen[f"{int(k)} (row {k // gw}, col {k % gw})"] = int(k)
    if not chosen:
        raise ValueError("queries is empty; pass at least one patch index, e.g. queries=[0].")
    centre = min(
        chosen.values(),
        key=lambda k: ((k // gw - (gh - 1) / 2) ** 2 + (k % gw - (gw - 1) / 2) ** 2, k),
    )
    return {"query": chosen, "defaults": {"query": centre}}


def patch_explorer(
    image: torch.Tensor, patch_sizes: object = None, *, num_shown: int = 10
) -> Explorer:
    """The image cut into patches, the patch size on a slider (see ``plot_patch_grid``).

    ``image`` is (C, H, W) in [0, 1]; ``patch_sizes`` default to every divisor of H and W giving
    2 to 32 patches a side.

    Raises:
        TypeError / ValueError: an image that is not (C, H, W) float, patch sizes that do not
            divide H and W, ``num_shown`` not a positive int.

    Example:
        >>> from vitbook.data import sample_image
        >>> patch_explorer(sample_image(size=224))
        Explorer(plot_patch_grid; patch_size: 8 values; 8 frames)

    See chapter: Images as sequences of patches.
    """
    image = _checks.tensor("image", image, 3, "(C, H, W)")
    _checks.positive_int("num_shown", num_shown)
    h, w = image.shape[-2:]
    if patch_sizes is None:
        patch_sizes = [
            p
            for p in range(1, min(h, w) + 1)
            if h % p == 0 and w % p == 0 and min(h, w) // p >= 2 and max(h, w) // p <= 32
        ]

    def plot_patch_grid(patch_size: int) -> Figure:
        """The image cut into patches, and the start of the sequence of patches"""
        return plotting.plot_patch_grid(image, patch_size, num_shown=num_shown)

    explorer = explore(
        plot_patch_grid, patch_size=patch_sizes, labels={"patch_size": "patch size P"}
    )
    for _, size in explorer.params[0].options:
        _checks.positive_int("patch_size", size)
        _checks.multiple_of("image height", h, "patch_size", size)
        _checks.multiple_of("image width", w, "patch_size", size)
    return explorer


def sincos_explorer(
    positions: object = range(0, 64, 4),
    dimensions: object = (0, 1, 10, 11, 40, 41),
    bases: object = (100, 10000),
    *,
    num_positions: int = 64,
    dim: int = 64,
) -> Explorer:
    """The 1D sine-cosine encoding: a position, a channel and the base on controls.

    Draws :func:`vitbook.plotting.plot_sincos`, every fourth position by default.

    Raises:
        TypeError / ValueError: a position or channel out of range, a base not above 1, or sizes
            that are not positive.

    Example:
        >>> sincos_explorer()
        Explorer(plot_sincos; position: 16 values, dimension: 6 values, base: 2 values; 192 frames)

    See chapter: Positional encodings.
    """

    sincos_1d(num_positions, dim)  # checks both sizes (dim even) before any value is offered
    positions = _checks.indices("positions", positions, num_positions, "positions", most=MAX_FRAMES)
    dimensions = _checks.indices("dimensions", dimensions, dim, "channels", most=MAX_FRAMES)
    if isinstance(bases, (list, tuple, range)):
        for base in bases:
            _checks.real("base", base, low=1, open_low=True, fix="the usual value is 10000")

    def plot_sincos(position: int, dimension: int, base: float) -> Figure:
        """The sine-cosine table with one position and one channel marked"""
        return plotting.plot_sincos(
            position, dimension, base=base, num_positions=num_positions, dim=dim
        )

    return _controls(  # a single base (or channel) is fixed, not a control
        plot_sincos,
        {"position": positions, "dimension": dimensions, "base": bases},
        labels={"dimension": "channel"},
    )


def position_similarity_explorer(
    grid_size: int | tuple[int, int] = (7, 7),
    dim: int = 64,
    *,
    learned: torch.Tensor | None = None,
    queries: object = None,
    seed: int = 0,
) -> Explorer:
    """Similarity of one patch's position embedding to all others, for three kinds of embedding.

    A menu picks learned, 1D or 2D sine-cosine embeddings; a slider the query patch
    (:func:`vitbook.plotting.plot_position_similarity`). ``learned`` is (Gh * Gw, D), by default
    a seeded :class:`vitbook.LearnedPositionEmbedding`; ``dim`` D is a multiple of 4.

    Raises:
        TypeError / ValueError: a grid or ``dim`` that is not positive (``dim`` a multiple of
            4), a ``learned`` table that is not (Gh * Gw, D), query patches off the grid.

    Example:
        >>> position_similarity_explorer((3, 4), 16)
        Explorer(plot_position_similarity; embedding: 3 values, query: 12 values; 36 frames)

    See chapter: Positional encodings.
    """
    gh, gw = _checks.pair("grid_size", grid_size)
    if learned is None:
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        learned, name = LearnedPositionEmbedding(gh * gw, dim).weight[0], "learned (random init)"
        torch.random.set_rng_state(generator_state)
    else:
        learned, name = _checks.tensor("learned", learned, 2, "(Gh * Gw, D)"), "learned"
        if tuple(learned.shape) != (gh * gw, dim):
            raise ValueError(
                f"learned has shape {tuple(learned.shape)}, but grid_size=({gh}, {gw}) and "
                f"dim={dim} need ({gh * gw}, {dim}): one row per patch; pass pos_embed[0, 1:] "
                "of a model with this grid, and its embed_dim as dim."
            )
    embeddings = {
        name: learned.detach(),
        "sin-cos 1D (patch index)": sincos_1d(gh * gw, dim),
        "sin-cos 2D (row, column)": sincos_2d((gh, gw), dim),
    }

    scales = {}
    for kind, table in embeddings.items():  # one colour scale per embedding, for every query
        unit = torch.nn.functional.normalize(table.float(), dim=1)
        lowest = float((unit @ unit.T).min())
        scales[kind] = (math.floor(lowest * 10) / 10, 1.0)

    def plot_position_similarity(embedding: str, query: int) -> Figure:
        """Cosine similarity of one patch's position embedding to every patch's"""
        vmin, vmax = scales[embedding]
        return plotting.plot_position_similarity(
            embeddings[embedding],
            (gh, gw),
            query,
            title=embedding.split(" (")[0],
            vmin=vmin,
            vmax=vmax,
        )

    query = _grid_queries(gh, gw, queries, most=64)
    query["defaults"]["embedding"] = "sin-cos 2D (row, column)"
    return _controls(
        plot_position_similarity,
        {"embedding": list(embeddings), "query": query["query"]},
        labels={"query": "query patch"},
        defaults=query["defaults"],
    )


def attention_explorer(
    model: torch.nn.Module,
    image: torch.Tensor,
    *,
    layers: object = None,
    heads: object = None,
    queries: object = None,
) -> Explorer:
    """Attention maps of a :class:`vitbook.VisionTransformer`: layer, head and query patch.

    Runs ``model.forward_with_attention`` once on the (C, H, W) image and shows the chosen query's
    weights over the patches (:func:`vitbook.plotting.plot_attention_map`), on one colour scale.
    ``layers``, ``heads``, ``queries`` default to all (queries: a sub-grid of about 64 on grids
    over 64 patches); one value fixes it.

    Raises:
        TypeError / ValueError: a model that is not a vitbook ViT, an image it refuses (see
            :class:`vitbook.VisionTransformer`), layers, heads or query patches out of range.

    Example:
        >>> from vitbook import VisionTransformer, ViTConfig
        >>> cfg = ViTConfig(img_size=32, patch_size=8, embed_dim=24, depth=2, num_heads=3)
        >>> attention_explorer(VisionTransformer(cfg), torch.rand(3, 32, 32), queries=[0, 5])
        Explorer(plot_attention; layer: 2 values, head: 3 values, query: 2 values; 12 frames)

    See chapter: Multi-head attention.
    """
    cfg = getattr(model, "config", None)
    if cfg is None or not hasattr(model, "forward_with_attention"):
        raise TypeError(f"model must be a vitbook.VisionTransformer, got {type(model).__name__}.")
    image = _checks.tensor("image", image, 3, "(C, H, W)")
    if layers is not None:
        layers = _checks.indices("layers", layers, cfg.depth, "layers", most=MAX_FRAMES)
    if heads is not None:
        heads = _checks.indices("heads", heads, cfg.num_heads, "heads", most=MAX_FRAMES)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        _, attention = model.forward_with_attention(image[None])  # [(1, Nh, N, N)] * depth
    model.train(was_training)
    gh, gw = cfg.grid_size
    prefix = cfg.num_prefix_tokens

    layers = list(range(cfg.depth) if layers is None else layers)
    heads = list(range(cfg.num_heads) if heads is None else heads)
    query = _grid_queries(gh, gw, queries, most=64)
    rows = torch.stack(  # (layers, heads, queries, Gh * Gw): every row that a frame can show
        [
            torch.stack([attention[i][0, h, prefix + q, prefix:] for q in query["query"].values()])
            for i in layers
            for h in heads
        ]
    )
    vmax = float(rows.max())

    def plot_attention(layer: int, head: int, query: int) -> Figure:
        """Where one query patch looks: its attention weights over the patches"""
        row = attention[layer][0, head, prefix + query, prefix:]  # (Gh * Gw,) over patch keys
        return plotting.plot_attention_map(
            image, row.reshape(gh, gw), query, title=f"layer {layer}, head {head}", vmax=vmax
        )

    return _controls(
        plot_attention,
        {"layer": layers, "head": heads, "query": query["query"]},
        labels={"query": "query patch"},
        defaults=query["defaults"],
    )


def axial_reach_explorer(
    grid_size: int | tuple[int, int] = (6, 8), queries: object = None
) -> Explorer:
    """Which patches reach a query patch: full attention versus one and two axial layers.

    See :func:`vitbook.plotting.plot_axial_reach`.

    Raises:
        TypeError / ValueError: a grid that is not positive, query patches off the grid.

    Example:
        >>> axial_reach_explorer((3, 5))
        Explorer(plot_axial_reach; query: 15 values; 15 frames)

    See chapter: The cost of attention and axial attention.
    """
    gh, gw = _checks.pair("grid_size", grid_size)

    def plot_axial_reach(query: int) -> Figure:
        """Which patches reach the query: full attention, a row layer, a row then a column layer"""
        return plotting.plot_axial_reach((gh, gw), query)

    return explore(
        plot_axial_reach, labels={"query": "query patch"}, **_grid_queries(gh, gw, queries, most=64)
    )
