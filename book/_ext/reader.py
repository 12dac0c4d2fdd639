"""Sphinx extension: what every page gives its reader beyond the theme.

- The book's stylesheet and script, ``book/_static/vitbook.css`` and ``vitbook.js``: figures
  that stay readable on a phone (no picture shown below 81% of the width it was drawn for, so
  that its smallest text stays at 9 CSS px or more; a narrower column pans the picture inside a
  box of its own, while an interactive figure's panels wrap instead), tables that wrap to the
  column, a shadow at the edge of any figure or display equation that scrolls sideways,
  captions in the body text's weight, and side panels that close when a link in them is
  followed. The menu buttons themselves work because ``_config.yml`` leaves the theme's hidden
  top bar empty (``navbar_persistent: []``): sphinx-book-theme 1.3.0 and pydata-sphinx-theme
  0.17.1 both bind the first ``.primary-toggle`` of a page, which was that bar's hidden button
  (pydata/pydata-sphinx-theme#2451).
- Bibliography labels that read like the citations in the text ("Dosovitskiy et al., 2021"
  instead of "DBK+21"): the pybtex style ``author_year_labels``, which ``_config.yml`` names in
  ``bibtex_default_style``. :func:`author_year` is the one place that writes a citation's
  authors and year; the Colab copies of the chapters use it too (``book/_ext/colab.py``).
"""

from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).resolve().parents[1] / "_static"  # book/_static
STYLE_NAME = "author_year_labels"


def _surname(person) -> str:
    from pybtex.richtext import Text

    return str(Text.from_latex(" ".join(person.prelast_names + person.last_names)))


def author_year(entry) -> tuple[str, str]:
    """A pybtex entry's (authors, year) as the book cites it: "Ba et al.", "Kingma and Ba", ...

    One author: the surname; two: both, joined by "and"; more: the first and "et al." (the
    rule of sphinxcontrib-bibtex's ``author_year`` citations). No author or editor: the
    organisation, else the key. No year: "n.d.".
    """
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_surname(person) for person in people]
    if not names:
        authors = entry.fields.get("organization", entry.key)
    elif len(names) == 1:
        authors = names[0]
    elif len(names) == 2:
        authors = f"{names[0]} and {names[1]}"
    else:
        authors = f"{names[0]} et al."
    return authors, entry.fields.get("year", "n.d.")


def author_year_labels(entries) -> list[str]:
    """The label of each entry, "Authors, year"; entries that would share one get a, b, ..."""
    labels = [", ".join(author_year(entry)) for entry in entries]
    suffixed = []
    for i, label in enumerate(labels):
        same = [j for j, other in enumerate(labels) if other == label]
        suffixed.append(label + ("abcdefghijklmnopqrstuvwxyz"[same.index(i)] if same[1:] else ""))
    return suffixed


def _register_label_style() -> None:
    from pybtex.plugin import register_plugin
    from pybtex.style.formatting.alpha import Style as AlphaStyle
    from pybtex.style.labels import BaseLabelStyle

    class AuthorYearLabels(BaseLabelStyle):
        def format_labels(self, sorted_entries):
            return iter(author_year_labels(list(sorted_entries)))

    class Style(AlphaStyle):  # alpha's formatting and its author-year-title order
        default_label_style = AuthorYearLabels

    register_plugin("pybtex.style.formatting", STYLE_NAME, Style, force=True)


def add_static_files(app) -> None:
    app.config.html_static_path.append(str(STATIC))
    app.add_css_file("vitbook.css")
    app.add_js_file("vitbook.js", loading_method="defer")


def setup(app) -> dict:
    _register_label_style()
    app.connect("builder-inited", add_static_files)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
