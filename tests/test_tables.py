"""vitbook.plotting.tables: one table, three renditions, and clear errors."""

from __future__ import annotations

import pytest

from vitbook.plotting.tables import Table


def test_renditions_hold_every_cell_in_order():
    table = Table(["setting", "1", "all"], [["scratch", "0.38", "0.82"], ["probe", "", "0.64"]])
    assert len(table) == 2
    text = str(table).splitlines()
    assert text[0].split() == ["setting", "1", "all"]
    assert text[2].split() == ["probe", "0.64"]  # the empty cell stays empty
    markdown = table._repr_markdown_().splitlines()
    assert markdown[1] == "| :-- | --: | --: |"
    assert markdown[3] == "| probe |  | 0.64 |"
    page = table._repr_html_()
    assert page.startswith('<table class="vb-table">')
    assert page.index("scratch") < page.index("0.38") < page.index("probe") < page.index("0.64")
    assert page.count("<tr>") == 3


def test_cells_are_escaped_and_the_caption_shown():
    table = Table(["a|b", "<x>"], [["1", "2"]], align="lc", caption="Table: a & b")
    assert "&lt;x&gt;" in table._repr_html_() and "<caption>Table: a &amp; b</caption>" in (
        table._repr_html_()
    )
    assert "a\\|b" in table._repr_markdown_()
    assert table._repr_markdown_().splitlines()[0] == "Table: a & b"
    assert "text-align: center" in table._repr_html_()


@pytest.mark.parametrize(
    ("columns", "rows", "align", "error", "match"),
    [
        ("ab", [], None, TypeError, "columns must be a list"),
        (["a"], "x", None, TypeError, "rows must be a list"),
        (["a", "b"], [["1"]], None, ValueError, r"rows\[0\] has 1 cells and the table 2"),
        (["a", "b"], ["12"], None, TypeError, r"rows\[0\] must be a list of cells"),
        (["a", "b"], [], "lx", ValueError, "align='lx' must have one of"),
        (["a", "b"], [], "l", ValueError, r"\(2 columns\)"),
    ],
)
def test_bad_tables_are_refused(columns, rows, align, error, match):
    with pytest.raises(error, match=match):
        Table(columns, rows, align=align)


def test_a_cell_of_several_lines_keeps_every_rendition_whole():
    """A newline in a Markdown table row would end the row and break the table."""
    rows = [["vit", "0.783\n(one seed)"], ["cnn\r\nr18", "0.893"]]
    table = Table(["row", "test\naccuracy"], rows)
    markdown = table._repr_markdown_().splitlines()
    assert markdown == [
        "| row | test<br>accuracy |",
        "| :-- | --: |",
        "| vit | 0.783<br>(one seed) |",
        "| cnn<br>r18 | 0.893 |",
    ]
    page = table._repr_html_()
    assert "<th style=\"text-align: right\">test<br>accuracy</th>" in page
    assert "0.783<br>(one seed)</td>" in page and "\n" not in page
    assert str(table).splitlines() == [
        "row        test",
        "       accuracy",
        "vit       0.783",
        "     (one seed)",
        "cnn       0.893",
        "r18",
    ]
    assert Table(["a"], [["<b>\nc"]])._repr_html_().count("&lt;b&gt;<br>c") == 1  # still escaped
