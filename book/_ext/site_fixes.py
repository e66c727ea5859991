"""Small fixes to what the theme and its extensions put on every page of the book.

- Inline scripts added twice. sphinx-thebe (and sphinx-togglebutton) add their inline
  `<script>` bodies with `app.add_js_file(None, body=...)` after the HTML builder was created.
  Sphinx 7 hands them to the builder at once *and* keeps them in its registry, from which
  `prepare_writing` adds them again, as `''` rather than `None`, so the builder's duplicate
  check misses them: every page carried `const THEBE_JS_URL = ...` twice, and the second copy
  threw "Identifier 'THEBE_JS_URL' has already been declared". Each page's script list is
  de-duplicated here.
- The download menu's ".pdf" entry only calls `window.print()`. The book has no PDF build, so
  the entry is removed; the source (.ipynb, .md) download stays.
- The static files of book/_static: copy-button labels (a11y.js) and collapsible long
  source listings (listings.js, listings.css).
- MyST substitutions for the book's repository, read from _config.yml's `repository` section,
  so that pages can name it without repeating it: {{ repository }} and {{ colab_chapter_1 }}.
"""

from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).resolve().parent.parent / "_static"
JS_FILES = ["a11y.js", "listings.js"]
CSS_FILES = ["listings.css"]


def _asset_key(asset):
    """What makes two script entries the same script: file (None and '' alike), priority, attributes."""
    filename = getattr(asset, "filename", asset)
    attributes = getattr(asset, "attributes", {}) or {}
    return (filename or "", getattr(asset, "priority", None),
            tuple(sorted((str(k), str(v)) for k, v in attributes.items())))


def dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for asset in scripts:
        key = _asset_key(asset)
        if key not in seen:
            seen.add(key)
            unique.append(asset)
    context["script_files"] = unique


def drop_print_button(app, pagename, templatename, context, doctree):
    """Remove the download menu's "print to PDF" entry (sphinx-book-theme has no option for it)."""
    for button in context.get("header_buttons", []):
        if button.get("type") == "group" and "buttons" in button:
            button["buttons"] = [b for b in button["buttons"]
                                 if b.get("label") != "download-pdf-button"
                                 and "print(" not in str(b.get("javascript", ""))]


def add_static_path(app):
    paths = [(Path(app.confdir) / p).resolve() for p in app.config.html_static_path]
    if STATIC not in paths:
        app.config.html_static_path.append(str(STATIC))


def _repository(app, config):
    """(url, branch, path_to_book) of _config.yml's repository section."""
    path = Path(app.confdir) / "_config.yml"
    if path.is_file():
        import yaml

        repository = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("repository") or {}
        return repository.get("url"), repository.get("branch"), repository.get("path_to_book")
    options = config.html_theme_options or {}
    return options.get("repository_url"), options.get("repository_branch"), options.get("path_to_docs")


def add_repository_substitutions(app, config):
    url, branch, book = _repository(app, config)
    url = str(url or "").rstrip("/").removesuffix(".git")
    if not url.startswith("https://github.com/"):
        return
    name = url.removeprefix("https://github.com/")
    book = str(book or "").strip("/")
    notebook = f"{book}/book/01_attention.ipynb" if book else "book/01_attention.ipynb"
    colab = f"https://colab.research.google.com/github/{name}/blob/{branch or 'main'}/{notebook}"
    config.myst_substitutions = {
        **(config.myst_substitutions or {}),
        "repository": f"[{name}]({url})",
        "colab_chapter_1": f"[chapter 1 in Colab]({colab})",
    }


def setup(app):
    app.connect("config-inited", add_repository_substitutions, priority=900)
    app.connect("builder-inited", add_static_path)
    for name in JS_FILES:
        app.add_js_file(name)
    for name in CSS_FILES:
        app.add_css_file(name)
    # after sphinx-book-theme's header buttons (501) and asset hashing (500)
    app.connect("html-page-context", drop_print_button, priority=900)
    app.connect("html-page-context", dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
