"""Result tables that read well wherever a chapter runs: the HTML book, Jupyter, Colab, a terminal.

A :class:`Table` carries an HTML rendition (whose cells wrap on a phone), a Markdown one, and
aligned plain text (``print(table)``); each front end picks the best it can show.

See chapter: Real photos.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

__all__ = ["Table"]

ALIGNMENTS = {"l": "left", "r": "right", "c": "center"}


class Table:
    """A small table of results with an HTML, a Markdown and a plain-text rendition.

    Args:
        rows: one sequence of cells per row, shown with ``str`` (format numbers first); a cell
            of several lines keeps them (``<br>`` in HTML and Markdown).
        align: one of ``l``, ``r``, ``c`` per column; by default the first left, the rest right.
        caption: an optional line shown above the table.

    Raises:
        TypeError: ``columns`` or a row that is a string, or not a sequence.
        ValueError: a row with another number of cells than ``columns``; an unknown alignment.

    Example:
        >>> table = Table(["row", "test"], [["vit", "0.783"], ["resnet18", "0.893"]])
        >>> print(table)
        row        test
        vit       0.783
        resnet18  0.893
        >>> print(table._repr_markdown_())
        | row | test |
        | :-- | --: |
        | vit | 0.783 |
        | resnet18 | 0.893 |

    See chapter: Real photos.
    """

    def __init__(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[object]],
        *,
        align: str | None = None,
        caption: str | None = None,
    ) -> None:
        for name, value in (("columns", columns), ("rows", rows)):
            if isinstance(value, str) or not isinstance(value, Sequence):
                raise TypeError(
                    f"{name} must be a list, got {type(value).__name__}; e.g. "
                    "Table(['row', 'test'], [['vit', '0.783']])."
                )
        self.columns = [str(c) for c in columns]
        self.rows: list[list[str]] = []
        for i, row in enumerate(rows):
            if isinstance(row, str) or not isinstance(row, Sequence):
                raise TypeError(f"rows[{i}] must be a list of cells, got {type(row).__name__}.")
            if len(row) != len(self.columns):
                raise ValueError(
                    f"rows[{i}] has {len(row)} cells and the table {len(self.columns)} columns "
                    f"({self.columns}); give one cell per column (an empty string for none)."
                )
            self.rows.append(["" if cell is None else str(cell) for cell in row])
        align = align if align is not None else "l" + "r" * (len(self.columns) - 1)
        if len(align) != len(self.columns) or set(align) - set(ALIGNMENTS):
            raise ValueError(
                f"align={align!r} must have one of 'l', 'r', 'c' per column "
                f"({len(self.columns)} columns), e.g. {'l' + 'r' * (len(self.columns) - 1)!r}."
            )
        self.align = align
        self.caption = caption

    def __len__(self) -> int:
        return len(self.rows)

    def __str__(self) -> str:
        widths = [
            max(len(text) for cell in column for text in _lines(cell))
            for column in zip(self.columns, *self.rows, strict=True)
        ]

        def line(cells: Sequence[str]) -> str:
            padded = [
                cell.ljust(width) if a == "l" else cell.rjust(width) if a == "r"
                else cell.center(width)
                for cell, width, a in zip(cells, widths, self.align, strict=True)
            ]  # fmt: skip
            return "  ".join(padded).rstrip()

        def lines(cells: Sequence[str]) -> list[str]:  # a row of several-line cells
            split = [_lines(cell) for cell in cells]
            height = max(len(texts) for texts in split)
            return [line([texts[k] if k < len(texts) else "" for texts in split])
                    for k in range(height)]  # fmt: skip

        text = [*lines(self.columns), *(t for row in self.rows for t in lines(row))]
        return "\n".join(([self.caption] if self.caption else []) + text)

    __repr__ = __str__

    def _repr_markdown_(self) -> str:
        rule = {"l": ":--", "r": "--:", "c": ":-:"}

        def line(cells: Sequence[str]) -> str:
            one_line = ("<br>".join(_lines(c)).replace("|", "\\|") for c in cells)
            return "| " + " | ".join(one_line) + " |"

        lines = [line(self.columns), "| " + " | ".join(rule[a] for a in self.align) + " |"]
        lines += [line(row) for row in self.rows]
        return "\n".join(([self.caption, ""] if self.caption else []) + lines)

    def _repr_html_(self) -> str:
        def cells(tag: str, values: Sequence[str]) -> str:
            return "".join(
                f'<{tag} style="text-align: {ALIGNMENTS[a]}">'
                f'{"<br>".join(html.escape(text) for text in _lines(v))}</{tag}>'
                for v, a in zip(values, self.align, strict=True)
            )

        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        body = "".join(f"<tr>{cells('td', row)}</tr>" for row in self.rows)
        return (
            f'<table class="vb-table">{caption}<thead><tr>{cells("th", self.columns)}</tr>'
            f"</thead><tbody>{body}</tbody></table>"
        )


def _lines(cell: str) -> list[str]:
    """A cell's lines (``"\\n"``, ``"\\r\\n"`` and the like); one empty line for an empty cell."""
    return cell.splitlines() or [""]
