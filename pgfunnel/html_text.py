"""The readable text of an HTML page: its main content, without the site around it.

A documentation page carries the same navigation bar, sidebar, breadcrumbs and footer
on every page. Indexed with the page, that text lands in every page's first and last
chunk: BM25 shrugs it off (its words are in every document), but the embedder does
not, and those chunks all look alike to the dense leg. So only the main content is
kept, found the way browsers' reader modes start: the element marked ``role="main"``,
else ``<main>``, else the page's only ``<article>``, else the whole ``<body>``. Inside
it, and in the fallback, page chrome is dropped: ``nav``, ``aside`` (but for the footnotes,
citations, topics and sidebars docutils writes as ``<aside>``), scripts and forms,
the ARIA landmarks that are not content (navigation, banner, contentinfo,
complementary, search), hidden elements, heading permalinks, Sphinx's toctrees and
docutils' tables of contents, and the classes that the
common documentation generators give their navigation (Sphinx, DocBook, MkDocs,
Docusaurus).

The text comes out markdown-ish, which is what the chunker reads: ``<hN>`` headings become
``#`` lines of their level (each starts a section, and the chunker keeps the headings a
section sits under); an API object's signature or a glossary term becomes a heading of the
lowest level (it heads its own section but is never the section of another, so a method
sits under the page's sections rather than under its class's signature); list items
become ``- `` lines (an item holding only a list, none), a table row is a line of its
cells joined with `` | `` (a cell's
paragraphs and lists are one cell; a cell holding code, a heading or a table keeps its
blocks), code blocks keep their lines and
are indented by four spaces (so a ``#`` comment in code never reads as a heading), and
other whitespace collapses as a browser collapses it.

The title is the first ``<h1>`` of the main content, whose wording is the page's own, else
``<title>``, which usually carries the site's name as well; when ``<title>`` starts with
the content's first heading followed by a separator (``File system | Node.js
Documentation``), that heading. An ``<h1>`` is a site banner, and the title is a later
heading of the page, when ``<title>`` is that heading and does not mention the ``<h1>``,
or when ``<title>`` is that heading, a separator and the ``<h1>`` (Django's theme).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

from pgfunnel.markdown_lines import text_line

__all__ = ["HtmlPage", "html_page", "html_to_text"]

# elements that never hold page content
_DROP_TAGS = frozenset({
    "script", "style", "noscript", "template", "nav", "aside", "form", "button", "select",
    "input", "textarea", "svg", "iframe", "object", "canvas", "dialog",
})  # fmt: skip
# outside the main content these are the site's header and footer; inside it (an
# article's header holds its title) they are kept
_CHROME_TAGS = frozenset({"header", "footer"})
_DROP_ROLES = frozenset({"navigation", "banner", "contentinfo", "complementary", "search"})
# whole class tokens that documentation generators give to navigation and permalinks
_DROP_CLASSES = frozenset({
    "headerlink", "hash-link", "anchor-link", "anchorjs-link",  # heading permalinks
    "sphinxsidebar", "sphinxsidebarwrapper", "related", "rst-footer-buttons",  # Sphinx
    "navheader", "navfooter",  # DocBook
    "nav-panel",  # Texinfo 7 (Texinfo 6: class "header", see _CHROME_TAGS)
    "md-sidebar", "md-header", "md-footer", "md-nav", "md-source",  # MkDocs Material
    "wy-nav-side", "wy-breadcrumbs", "breadcrumbs", "breadcrumb",  # Read the Docs theme
    "theme-doc-sidebar-container", "pagination-nav", "theme-doc-toc-desktop",  # Docusaurus
    "skip-link", "skip-to-content", "visually-hidden", "sr-only",
    "viewcode-link",  # Sphinx: "[source]" beside a signature
    # Sphinx's toctree: links to other pages, each title and section, written into a
    # page (an index page, a chapter's first page) as the reST reader leaves out the
    # directive; kept, aiohttp's "Client" page matched every method of the API it lists
    "toctree-wrapper",
    # a code block's line numbers (Pygments, as Sphinx and MkDocs write them: inline
    # spans, or a table column beside the code; Chroma's table column, as Hugo writes
    # it): inline, "1" was glued to the first word of each line ("1def f(x):")
    "linenos", "linenodiv", "lineno", "lntd",
    # javadoc's tabs that filter a summary table ("Instance Methods", "Concrete Methods"):
    # the table shows every row without them (javadoc 11: spans in its caption; 17:
    # buttons, which tab labels otherwise are not dropped for); the chosen one stays
    "tableTab", "table-tab",
    # Doxygen: the tooltip of each name linked in a code block (its declaration, brief and
    # "Definition: json_types.h:47"), written after the block's lines and shown on hover
    "ttc",
})  # fmt: skip
# the ids that documentation generators give to their banners and a page's own table of
# contents: Doxygen's project name and number over every page ("json-c 0.16"), Haddock's
# package line and page menu ("split-0.2.3.5: Combinator library for splitting lists.
# Source Contents Index") and its list of the page's sections
_DROP_IDS = frozenset({"titlearea", "package-header", "table-of-contents"})
# the line numbers of Chroma's (Hugo's) code blocks, inline or in their own column:
# dropped inside a code block only, where the short class names mean nothing else
_CODE_LINE_NUMBERS = frozenset({"ln", "lnt"})
# what a link to its own heading shows
_PERMALINK_MARKS = frozenset({"#", "¶", "§", "🔗", "🔗\ufe0e", "◆"})  # ◆: Doxygen
_VOID_TAGS = frozenset({
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
    "source", "track", "wbr",
})  # fmt: skip
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
# block elements: their text is a paragraph of its own
_PARAGRAPH_TAGS = frozenset({
    "p", "div", "section", "article", "main", "header", "footer", "blockquote", "figure",
    "figcaption", "table", "ul", "ol", "dl", "details", "summary", "address", "hr",
    "caption", "body",
})  # fmt: skip
_LINE_TAGS = frozenset({"li", "tr", "dt", "dd", "br"})
# Sphinx's description lists of API objects (<dl class="py method">, <dl class="function">
# in older themes) and glossaries: each term starts a section, so that each object's (or
# term's) description is a chunk of its own under its signature, not a slice of a
# 200-word window that starts in the middle of the one before
_OBJECT_TYPES = frozenset({
    "class", "function", "method", "classmethod", "staticmethod", "attribute", "property",
    "data", "exception", "decorator", "decoratormethod", "module", "describe", "option",
    "cmdoption", "envvar", "type", "member", "macro", "var", "struct", "union", "enum",
    "enumerator", "setting", "templatetag", "templatefilter", "fieldlookup", "django-admin",
})  # fmt: skip
_TERM_LISTS = frozenset({"glossary"})
_CELL_TAGS = frozenset({"td", "th"})
_SPACE = re.compile(r"\s+")
# what ends a table cell in a paragraph being written: " | " once the row's line is done,
# and nothing after its last cell. Dropped from the page's text afterwards, a trailing
# "|" went from code lines too (a YAML "stderr: |", a shell pipe, a CMake signature)
_CELL_END = "\x01"
_TRAILING_CELL_ENDS = re.compile(r"(?:\s*\x01)+\s*$")
# a level of nesting of a list item being written, before its "- ": two spaces in the
# page's text (where a nested item is written under its item's text, as Markdown nests
# it), none in a heading's or a cell's
_NESTED = "\x02"


@dataclass
class _Element:
    tag: str
    attrs: dict[str, str]
    children: list[_Element | str] = field(default_factory=list)
    #: _raw_text's answer, kept once the tree is built: a link's own text decides whether
    #: it is a permalink (_is_dropped), so without it each level of links nested in links
    #: (`<a href="#s1">One<a>`, a typo browsers forgive) read its subtree twice, and 40 of
    #: them in a 2.5 KB page took longer than anyone waits
    raw: tuple[str, ...] | None = field(default=None, compare=False, repr=False)

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


# elements no deeper than this in the tree (see _TreeBuilder.handle_starttag)
_MAX_DEPTH = 250
# what a start tag closes when it is open (the end tags HTML allows a page to leave out),
# and the elements it does not look past for one
_SCOPE = frozenset({"html", "table", "td", "th", "caption", "button", "template", "object"})
_P_CLOSERS = frozenset({
    "address", "article", "aside", "blockquote", "details", "div", "dl", "fieldset",
    "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
    "hr", "main", "menu", "nav", "ol", "p", "pre", "section", "table", "ul",
})  # fmt: skip
_IMPLIED_END: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    **{tag: (frozenset({"p"}), _SCOPE) for tag in _P_CLOSERS},
    "li": (frozenset({"li"}), _SCOPE | {"ul", "ol"}),
    "dt": (frozenset({"dt", "dd"}), _SCOPE | {"dl"}),
    "dd": (frozenset({"dt", "dd"}), _SCOPE | {"dl"}),
    "tr": (frozenset({"tr"}), _SCOPE - {"td", "th"}),
    "td": (frozenset({"td", "th"}), _SCOPE - {"td", "th"} | {"tr"}),
    "th": (frozenset({"td", "th"}), _SCOPE - {"td", "th"} | {"tr"}),
}


class _TreeBuilder(HTMLParser):
    """A forgiving element tree: unknown end tags are ignored, unclosed ones close with
    their parent, as browsers do for the malformed pages found in the wild."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = _Element("#document", {})
        self._stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = _Element(tag, {k: v or "" for k, v in attrs})
        self._close_implied(tag)
        self._stack[-1].children.append(element)
        if tag not in _VOID_TAGS and len(self._stack) < _MAX_DEPTH:
            # past the cap (tags never closed: <font> after <font>), an element holds
            # nothing and what follows is its sibling; the tree stays shallower than
            # Python's recursion limit, which the rendering walks within
            self._stack.append(element)

    def _close_implied(self, tag: str) -> None:
        """End tags HTML lets a page leave out, closed as browsers close them: a ``<p>``
        by the next paragraph or block, an ``<li>`` by the next item, ``<dt>``/``<dd>``
        by the next term or description, a row or cell by the next. Left open, a page of
        1,200 ``<p>`` paragraphs nested them 1,200 deep (and stopped the ingest with a
        RecursionError)."""
        closes = _IMPLIED_END.get(tag)
        if closes is None:
            return
        ends, scope = closes
        for depth in range(len(self._stack) - 1, 0, -1):
            open_tag = self._stack[depth].tag
            if open_tag in ends:
                del self._stack[depth:]
                return
            if open_tag in scope:
                return

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._stack[-1].children.append(_Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self._stack) - 1, 0, -1):
            if self._stack[depth].tag == tag:
                del self._stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        # a NUL in a page's text is dropped, as browsers drop it; kept, it read as a line
        # break (the renderer marks its own line breaks with NUL)
        self._stack[-1].children.append(data.replace("\x00", ""))

    def close(self) -> None:
        """The end of the page, taken as browsers take it: a comment left open runs to
        the end and hides what follows it, as does a ``<!...`` or ``<?...`` declaration;
        a tag left open at the end is dropped. Python's parser gave all of these back as
        text (3.11, 3.12), so words commented out of a page were indexed."""
        if self.cdata_elem is None and _OPEN_AT_END.match(self.rawdata):
            if self.rawdata.startswith("<!--"):
                self.handle_comment(self.rawdata[4:])
            self.rawdata = ""
        super().close()


# what the page's unparsed rest starts with when a comment, declaration or tag is left open
_OPEN_AT_END = re.compile(r"<[!?/a-zA-Z]")


def _is_dropped(element: _Element, inside_main: bool) -> bool:
    attrs = element.attrs
    if element.tag in _DROP_TAGS and not (element.tag == "aside" and _is_docutils_aside(
            element, inside_main)) and not (element.tag == "button"
                                            and attrs.get("role") == "tab"):
        # (a tab's label is a button in sphinx-tabs: "Linux", "pip")
        return True
    if not inside_main and (element.tag in _CHROME_TAGS
                            or not _CHROME_TAGS.isdisjoint(element.classes())
                            or attrs.get("id") in _CHROME_TAGS):
        # a page without a main element marks its header and footer with a class as
        # often as with the tag (Texinfo: <div class="header">Next: ... Up: ...</div>),
        # or with an id (YARD: <div id="header"> holds the breadcrumbs "Index (S) »
        # Mocha » Sequence", <div id="footer"> "Generated by yard 0.9.28")
        return True
    if attrs.get("id") in _DROP_IDS:
        return True
    if ("hidden" in attrs or attrs.get("aria-hidden") == "true") \
            and attrs.get("role") != "tabpanel":
        # a tab panel is hidden until its tab is chosen (Docusaurus, sphinx-tabs: every
        # tab but the first), and its text is the page's
        return True
    if attrs.get("role") in _DROP_ROLES:
        return True
    if element.tag == "table" and (attrs.get("summary", "").lower().startswith("navigation")
                                   or "nav" in element.classes()):
        # DocBook's older stylesheets (the Valgrind manual): <table class="nav"
        # summary="Navigation header"> with Prev / Up / Next / Home links
        return True
    if {"contents", "topic"} <= element.classes():
        # docutils' table of contents of the page's own sections (``.. contents::``,
        # as <nav class="contents"> in newer docutils, which _DROP_TAGS drops)
        return True
    if element.tag == "a" and attrs.get("href", "").startswith("#") and \
            "".join(_raw_text(element)).strip() in _PERMALINK_MARKS:
        # a permalink without a class of its own (Node.js: <a class="mark" href="#x">#</a>)
        return True
    classes = element.classes()
    if "toctree-wrapper" in classes and _inlines_documents(element):
        # Sphinx's singlehtml builder writes the whole manual into the toctrees of its
        # one page (Debian's python-policy.html: 88 KB of HTML read as its 38-word
        # abstract)
        return not _DROP_CLASSES.isdisjoint(classes - {"toctree-wrapper"})
    return not _DROP_CLASSES.isdisjoint(classes)


def _inlines_documents(element: _Element) -> bool:
    """Whether a Sphinx toctree holds the documents it lists, not links to them: the
    singlehtml builder puts each document there, its sections and their headings (a
    toctree's links, and its caption, are never a heading)."""
    return any(node.tag in _HEADINGS for node in _walk(element))


# what docutils 0.18 and later (Sphinx 5+) write as <aside>: footnotes, citations and the
# ``topic`` directive, the page's own text
_DOCUTILS_ASIDES = frozenset({"footnote", "footnote-list", "citation", "citation-list",
                              "topic"})


def _is_docutils_aside(element: _Element, inside_main: bool) -> bool:
    """An ``<aside>`` that is a page's content rather than the site's: a footnote,
    citation or topic as docutils writes them, or (inside the main content, where a
    theme's sidebar never is) the ``sidebar`` directive. Dropped with the site's asides,
    Python 3.11's footnotes (78 pages) and an "Abstract" topic were lost."""
    classes = element.classes()
    return not _DOCUTILS_ASIDES.isdisjoint(classes) or (inside_main and "sidebar" in classes)


def _walk(element: _Element,
          skip_inside: Callable[[_Element], bool] = lambda node: False) -> Iterator[_Element]:
    """``element`` and the elements under it, in document order; the inside of an element
    ``skip_inside`` accepts is not walked."""
    stack = [element]
    while stack:
        node = stack.pop()
        yield node
        if not skip_inside(node):
            stack.extend(c for c in reversed(node.children) if isinstance(c, _Element))


def _find(element: _Element, match: str) -> list[_Element]:
    """Elements under ``element`` (itself included) that match, outermost only."""
    def matches(node: _Element) -> bool:
        return (match == "role=main" and node.attrs.get("role") == "main") or node.tag == match

    return [node for node in _walk(element, matches) if matches(node)]


def _main_content(root: _Element) -> tuple[_Element, bool]:
    """The element holding the page's content, and whether it was recognised as such."""
    for match in ("role=main", "main"):
        found = _find(root, match)
        if found:
            return found[0], True
    articles = _find(root, "article")
    if len(articles) == 1:
        return articles[0], True
    bodies = _find(root, "body")
    return (bodies[0] if bodies else root), False


# the most words of a list item that is an entry of an index, a link and a few words
# (Doxygen's ``json_object_put() : json_object.h``; 8 took in the Python documentation's
# items of a link and a phrase, ``urllib.request for opening and reading URLs``), and
# the fewest such items an index holds (HtmlPage.is_link_list). Of its words at most 2
# are its own, outside the link: the entry's name and a colon. A changelog's short items
# (``Fix parser crash #12``, the issue a link) have more, and with 3 own words a page of
# them was an index and left out of a folder's ingest.
_ENTRY_WORDS = 5
_ENTRY_OWN_WORDS = 2
_MIN_ENTRIES = 3


@dataclass
class _LinkCounts:
    """The words and links a page's renderers wrote (HtmlPage), one for the page: the
    renderers of its cells and terms add to their page's."""

    words: int = 0
    link_words: int = 0
    links: int = 0
    own_vocabulary: set[str] = field(default_factory=set)  # words outside links, once each
    # list items that are a link and a few words of their own (_ENTRY_WORDS or fewer in
    # all), and the words of those items, an item inside another counted once
    entries: int = 0
    entry_words: int = 0
    code_words: int = 0  # words of code blocks


class _Renderer:
    def __init__(self, inside_main: bool, counts: _LinkCounts | None = None) -> None:
        self.inside_main = inside_main
        self.counts = counts if counts is not None else _LinkCounts()
        # the qualified name written for a signature's bare name (_qualified_sig_name)
        self.sig_name: str | None = None
        # the modules Sphinx declares here (_declared_module), not yet written
        self.modules: list[str] = []
        self.blocks: list[str] = []  # finished paragraphs, headings and code blocks
        self.line: list[str] = []  # the paragraph being written
        self.first_h1: str | None = None
        # the paragraphs written before the first <h1> (_page_title)
        self.before_h1: set[str] = set()
        self.h1s = 0  # <h1> headings written: more than one, and they are sections
        self.first_heading: str | None = None
        self.headings: list[str] = []
        self._bullet = ""  # a list item's "- " whose text starts in a paragraph of its own
        # whether lines of text are written for the chunker (text_line), not read as a
        # heading's text (_text_of)
        self.text_lines = True
        self._lists = 0  # the lists (ul, ol) the element being rendered is in
        self._in_link = False

    def _flush(self) -> None:
        text = _SPACE.sub(" ", "".join(self.line)).strip()
        # a line break inside a paragraph (li, tr, br) is kept as one; a table row's cells
        # are parted by " | ", without one after its last cell (nor its empty last cells);
        # each line with the nesting of the list item it starts, if any
        lines = [(len(line) - len(bare), bare) for p in text.split("\x00")
                 if (line := _TRAILING_CELL_ENDS.sub("", p).strip())
                 and (bare := line.lstrip(_NESTED).strip())]
        items = any(line.startswith("- ") for _, line in lines)
        # an item whose text starts in a paragraph of its own (`<li><p>`): its bullet goes
        # before that paragraph, also where an item above it is written in this flush
        pending = (lines[-1][0] if lines and lines[-1][1] == "-" and (items or len(lines) == 1)
                   else None)
        if items:
            # an item that holds nothing but a list, whose items follow as a block of their
            # own (javadoc's class hierarchy: "- java.lang.Object", then a bare "-"); only
            # among items, where a "-" of a line break or a table cell is the text's own
            lines = [(depth, line) for depth, line in lines if line != "-"]
        indent = "  " if self.text_lines else ""
        # a paragraph that starts with `# ` (a root prompt written as text) or three
        # backticks read as a heading or a code fence to the chunker
        written = [indent * depth + (text_line(line) if self.text_lines else line)
                   for depth, line in ((d, line.replace(_CELL_END, "|")) for d, line in lines)]
        text = "\n".join(written)
        self.line = []
        if text and text != "-" and lines:
            # (nor is the bullet of such an item written before its list's first item)
            item = lines[0][1].startswith("- ")
            self.blocks.append(text if item else self._bullet + text)
            self._bullet = ""
        if pending is not None:
            self._bullet = indent * pending + "- "

    def _write_modules(self) -> None:
        """A line for each declared module that the latest heading does not name."""
        named = self.headings[-1].casefold() if self.headings else ""
        self.blocks.extend(f"Module {module}" for module in self.modules
                           if module.casefold() not in named)
        self.modules.clear()

    def _text_of(self, element: _Element, sig_name: str | None = None) -> str:
        inner = _Renderer(self.inside_main, self.counts)
        inner.text_lines = False
        inner.sig_name = sig_name
        inner._in_link = self._in_link
        inner.render_children(element)
        inner._flush()
        return " ".join(" ".join(inner.blocks).split())

    def _term_heading(self, terms: list[str]) -> None:
        """The terms gathered so far as one section heading (then forgotten)."""
        if not terms:
            return
        self._flush()
        heading = " / ".join(terms)
        # the lowest level: an object's signature or a glossary term heads its own section
        # but is never the section of another
        self.blocks.append(f"###### {heading}")
        self.headings.append(heading)
        terms.clear()

    def render_children(self, element: _Element) -> None:
        for child in element.children:
            if isinstance(child, str):
                self.line.append(child)
                words = child.split()
                self.counts.words += len(words)
                if self._in_link:
                    self.counts.link_words += len(words)
                else:
                    self.counts.own_vocabulary.update(word.casefold() for word in words)
            else:
                self.render(child)

    def _render_item(self, item: _Element) -> None:
        """A list item's children, counted as an entry of an index (_LinkCounts.entries)
        when it is a link and a few words of its own."""
        counts = self.counts
        words, link_words, links = counts.words, counts.link_words, counts.links
        entry_words = counts.entry_words
        self.render_children(item)
        written = counts.words - words
        own = written - (counts.link_words - link_words)
        if counts.links > links and written <= _ENTRY_WORDS and 0 < own <= _ENTRY_OWN_WORDS:
            counts.entries += 1
            counts.entry_words = entry_words + written

    def render(self, element: _Element) -> None:
        if _is_dropped(element, self.inside_main):
            return
        if element.tag == "a" and "href" in element.attrs and not self._in_link:
            self.counts.links += 1
            self._in_link = True
            try:
                self._render(element)
            finally:
                self._in_link = False
            return
        self._render(element)

    def _render(self, element: _Element) -> None:
        tag = element.tag
        if tag in ("title", "head"):
            return
        declared = _declared_module(element)
        if declared is not None:
            self.modules.append(declared)
            if tag == "span":
                return
        if self.modules and tag in _MODULE_LINE_BEFORE:
            self._flush()
            self._write_modules()
        if self.sig_name is not None and not _SIG_NAMES.isdisjoint(element.classes()):
            self.line.append(self.sig_name)
            self.sig_name = None
            return
        if tag in _HEADINGS:
            self._flush()
            heading = self._text_of(element)
            if heading:
                self.blocks.append(f"{'#' * int(tag[1])} {heading}")
                self.headings.append(heading)
                if self.modules:
                    self._write_modules()
                if tag == "h1":
                    self.h1s += 1
                if tag == "h1" and self.first_h1 is None:
                    self.first_h1 = heading
                    self.before_h1 = set(self.blocks[:-1])
                if self.first_heading is None:
                    self.first_heading = heading
            return
        if tag == "dl" and _terms_are_sections(element):
            self._flush()
            # Terms in a row share the description that follows them (a glossary's
            # `expire`, `expired`, `expires`, `expiring` over one definition; an
            # object's overloaded signatures): one section headed by all of them. Each
            # term its own section left the first ones as chunks of one word, and the
            # definition under the last spelling only (SQLAlchemy's docs: the glossary
            # entry a keyword such as "Expiring" is judged to, outside BM25's top 10)
            terms: list[str] = []
            for child in element.children:
                if isinstance(child, str) and terms and not child.strip():
                    continue
                if isinstance(child, _Element) and child.tag == "dt":
                    if not _is_dropped(child, self.inside_main) and (
                            term := self._text_of(child, _qualified_sig_name(child))):
                        terms.append(term)
                    continue
                self._term_heading(terms)
                if isinstance(child, str):
                    self.line.append(child)
                else:
                    self.render(child)
            self._term_heading(terms)
            self._flush()
            return
        code_lines = None if tag == "pre" else _code_lines(element, self.inside_main)
        if tag == "pre" or code_lines is not None:
            self._flush()
            raw = ("".join(_raw_text(element)) if code_lines is None else "\n".join(
                "".join(_raw_text(line)).strip("\n") for line in code_lines))
            code = raw.strip("\n")
            self.counts.words += len(code.split())
            self.counts.code_words += len(code.split())
            if code.strip():
                self.blocks.append("\n".join("    " + line for line in code.splitlines()))
            return
        if tag in _PARAGRAPH_TAGS:
            self._flush()
            lists = self._lists
            self._lists += tag in ("ul", "ol")
            try:
                self.render_children(element)
            finally:
                self._lists = lists
            self._flush()
            return
        if tag in _LINE_TAGS or tag == "button":
            # (a tab's label, the only button kept, is an item as Docusaurus writes one; an
            # item of a list inside another's item is written nested in it)
            nested = _NESTED * (self._lists - 1) if tag == "li" else ""
            self.line.append(f"\x00{nested}- " if tag in ("li", "button") else "\x00")
            if tag == "li":
                self._render_item(element)
            else:
                self.render_children(element)
            return
        if tag in _CELL_TAGS:
            if _holds_blocks(element):
                # a layout cell (a code block beside its line numbers, a page's column):
                # its blocks as they come, and a separator only after text left on the line
                self.render_children(element)
                if "".join(self.line).strip(" \t\n\x00"):
                    self.line.append(f" {_CELL_END} ")
            else:
                # a cell's paragraphs and lists are one cell of the row (Sphinx writes
                # <td><p>...</p></td>): flushed as blocks, each cell was a line of its own
                # and the row was gone
                self.line.append(self._text_of(element))
                self.line.append(f" {_CELL_END} ")
            return
        self.render_children(element)


def _code_lines(element: _Element, inside_main: bool) -> list[_Element] | None:
    """The lines of a code block written as a ``<div>`` of lines rather than a ``<pre>``,
    or None: Doxygen's ``<div class="fragment">`` of ``<div class="line">`` elements
    (styled to keep their spaces). Read as paragraphs, each line of an example was a
    paragraph of its own, its indentation gone. Each element is a line whether or not
    the HTML has a line break between them (minified, it has none)."""
    if element.tag != "div" or "fragment" not in element.classes():
        return None
    lines = [c for c in element.children
             if isinstance(c, _Element) and not _is_dropped(c, inside_main)]
    if lines and all(c.tag == "div" and "line" in c.classes() for c in lines):
        return lines
    return None


# what a table cell holds that one line of a row cannot: code keeps its lines, headings
# and tables their own blocks
_CELL_BLOCKS = _HEADINGS | {"pre", "table"}


def _holds_blocks(cell: _Element) -> bool:
    """Whether a table cell holds code, a heading or a table (a layout table's cell)."""
    return any(node.tag in _CELL_BLOCKS for node in _walk(cell))


def _terms_are_sections(dl: _Element) -> bool:
    """A description list whose terms are API objects (Sphinx 4+ marks each signature
    ``dt.sig-object``; older Sphinx names the object type in the list's class and gives
    the term an id) or glossary entries."""
    classes = dl.classes()
    if not _TERM_LISTS.isdisjoint(classes):
        return True
    terms = [c for c in dl.children if isinstance(c, _Element) and c.tag == "dt"]
    if not terms:
        return False
    if any("sig-object" in t.classes() for t in terms):
        return True
    return not _OBJECT_TYPES.isdisjoint(classes) and all("id" in t.attrs for t in terms)


# Sphinx writes a module's declaration (``.. module:: werkzeug.routing``) as an empty
# target, <span class="target" id="module-werkzeug.routing">, or as the id of the section
# it opens, and shows nothing: a page titled "URL Routing" named its module only in code
# samples, and the release notes, which name it in every entry that touched it, came
# first for `module werkzeug.routing`. The declaration is written as a line, "Module
# werkzeug.routing", under the heading that follows it (unless the heading names it, as
# Tornado's "tornado.ioloop — Main event loop" does) or before the text that follows it.
# Not in the title: the title heads every chunk of the page, twice in BM25, and the
# longer chunks lost single-word queries to other pages (docs/tuning.md)
_MODULE_ID = re.compile(r"module-([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)", re.ASCII)
# the blocks a declared module's line goes before when no heading comes first
_MODULE_LINE_BEFORE = frozenset({"p", "table", "ul", "ol", "dl", "pre", "blockquote",
                                 "figure"})


def _declared_module(element: _Element) -> str | None:
    """The module a Sphinx target declares: an empty ``span`` (``class="target"`` in
    newer builds; Django's has none), or a section by its id (``<section>``, or ``<div
    class="section">`` before docutils 0.17). Other pages' ``<div id="module-header">``
    (a CMS block) declare nothing."""
    if element.tag == "span":
        if element.children:
            return None
    elif not (element.tag == "section"
              or (element.tag == "div" and "section" in element.classes())):
        return None
    declared = _MODULE_ID.fullmatch(element.attrs.get("id", ""))
    return declared.group(1) if declared else None


# Sphinx's spans for an object's own name and for what qualifies it (4+ / older)
_SIG_NAMES = frozenset({"sig-name", "descname"})
_SIG_PRENAMES = frozenset({"sig-prename", "descclassname"})


def _qualified_sig_name(dt: _Element) -> str | None:
    """The name a Sphinx signature's bare name is written as, qualified by its class: a
    member described inside its class shows only ``raise_for_status()``, while its id is
    ``aiohttp.ClientResponse.raise_for_status``; the last two parts of the id,
    ``ClientResponse.raise_for_status``, are what users type, and BM25 indexes the dotted
    name whole and in parts (``raise_for_status`` still matches). Four of aiohttp's
    chunks read just ``url`` and one line, and ClientSession's ``raise_for_status`` came
    first for ``ClientResponse.raise_for_status``. The whole id (the module in
    front too, as the reST reader writes it) measured worse: every member's heading then
    carries its module's name, which crowds out the module's own entry and dilutes the
    embedding (docs/tuning.md). None when the name is shown qualified, is not the id's
    last part, or the id has no dot."""
    ident = dt.attrs.get("id", "")
    if "." not in ident:
        return None
    name: str | None = None
    for node in _walk(dt, lambda node: not _SIG_NAMES.isdisjoint(node.classes())):
        classes = node.classes()
        if not _SIG_PRENAMES.isdisjoint(classes) and "".join(_raw_text(node)).strip():
            return None  # already qualified (a class or function under its module)
        if name is None and not _SIG_NAMES.isdisjoint(classes):
            name = "".join(_raw_text(node)).strip()
    if not name or "." in name or not ident.endswith("." + name):
        return None
    return ".".join(ident.split(".")[-2:])


def _raw_text(element: _Element) -> list[str]:
    """The text of a code block as written (whitespace kept), chrome left out."""
    if element.raw is None:
        element.raw = tuple(_read_raw_text(element))
    return list(element.raw)


def _read_raw_text(element: _Element) -> list[str]:
    parts: list[str] = []
    for child in element.children:
        if isinstance(child, str):
            parts.append(child)
        elif child.tag == "br":
            parts.append("\n")
        elif not _is_dropped(child, True) and _CODE_LINE_NUMBERS.isdisjoint(child.classes()):
            if child.tag == "code" and element.tag == "pre" and parts and \
                    not "".join(parts).endswith("\n"):
                # a second listing in one block (Node.js: the ES module and the CommonJS
                # form of an example) starts on a line of its own
                parts.append("\n")
            parts.extend(_raw_text(child))
    return parts


@dataclass(frozen=True)
class HtmlPage:
    """An HTML page's title and the text of its main content, with what of that content
    is link text: an index or a table of contents is little else."""

    title: str
    text: str
    #: links in the main content, as rendered (dropped elements left out)
    links: int
    #: the share of the main content's words that are the text of a link
    link_share: float
    #: distinct words outside links (case folded)
    own_vocabulary: int = 0
    #: list items that are a link and a few words of their own (an index's entries)
    entries: int = 0
    #: the share of the main content's words that are those items'
    entry_share: float = 0.0
    #: the share of the main content's words that are code blocks'
    code_share: float = 0.0
    #: whether the main content has a heading of its own
    headed: bool = False

    def is_link_list(self) -> bool:
        """A generated index or table of contents rather than a page of text: 100 links
        or more, and either half its words theirs, or the words outside them a handful
        of glue words, fewer kinds than a tenth of its links (gtk-doc's
        api-index-full.html: ``asn1_create_element, function in libtasn1``, 40% link
        words and 11 other words for 300 links; Sphinx's general index by letter, 80 -
        98% link words). Among the Python documentation's other pages with 100 links
        or more, the most link words is 38% and the fewest other words 0.8 kinds per
        link (the C API's list of its stable functions, which has prose of its own);
        rsyslog's have none near either. Ingested among the pages they list, such a page
        matched every name it listed and took top slots for them.

        Or an index whose entries name what they link to in words of their own: 3 list
        items or more that are each a link and a few words besides (5 words at most in
        all, 1 or 2 outside the link), making up half the page's words (Doxygen's
        member indexes, ``json_bool : json_types.h`` with only the file a link, 32%
        link words and a kind of word for each link: 57 - 97% of their words are such
        items, on pages of 3 links to 197; in the Python documentation and rsyslog's,
        29% at most, a page of one such item).
        A table of contents, whose items are links alone, is not one."""
        return self.is_mostly_links() or self.is_entry_index()

    def is_mostly_links(self) -> bool:
        """The first kind of page of links (``is_link_list``): 100 links or more, and
        half its words theirs or its other words a handful of glue words."""
        return self.links >= 100 and (self.link_share >= 0.5
                                      or self.own_vocabulary * 10 <= self.links)

    def is_entry_index(self) -> bool:
        """The second kind of page of links (``is_link_list``): an index whose entries
        are each a link and a few words."""
        return self.entries >= _MIN_ENTRIES and self.entry_share >= 0.5

    def is_source_listing(self) -> bool:
        """A program's source as a page, code and nothing else (99% of its words or more):
        Haddock's hyperlinked source (``src/Data.List.Split.Internals.html``, one ``<pre>``
        of 9,491 words: 63 chunks, against the 24 of the module's documentation page).
        Beside the pages documenting it, it matched every name they describe, as Sphinx's
        ``_modules`` listings did (``sources.SPHINX_GENERATED``). The Python
        documentation's page with the most code, the full grammar, is 96% code under its
        heading and introduction; rsyslog's most, 69%. A page with a heading of its own is
        not one, however much code it holds: a sample configuration file under its
        heading is documentation, and Haddock's listings have none."""
        return self.code_share >= 0.99 and not self.headed


def html_to_text(html: str) -> tuple[str, str]:
    """(title, text) of an HTML page's main content; see the module docstring."""
    page = html_page(html)
    return page.title, page.text


def html_page(html: str) -> HtmlPage:
    """The page's title and main text (see the module docstring), and its links."""
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    titles = _find(builder.root, "title")
    page_title = " ".join("".join(_raw_text(titles[0])).split()) if titles else ""
    main, recognised = _main_content(builder.root)
    renderer = _Renderer(inside_main=recognised)
    renderer.render_children(main)
    renderer._flush()
    text = "\n\n".join(renderer.blocks)
    if page_title and "toctree-wrapper" in html and any(
            "toctree-wrapper" in node.classes() and _inlines_documents(node)
            for node in _walk(main)):
        # Sphinx's singlehtml page: the manual whole, its first <h1> the first document's
        # ("Abstract", above each of python-policy.html's 59 chunks); <title> names the
        # manual
        title = page_title
    elif _SPHINX_NO_TITLE.match(page_title):
        # Sphinx's placeholder for a source with no title (Buildbot's release notes):
        # "<no title>" heading every chunk would tell the embedder nothing
        title = renderer.first_heading or ""
    else:
        title = _page_title(renderer, page_title)
    counts = renderer.counts
    return HtmlPage(title, text, counts.links,
                    counts.link_words / counts.words if counts.words else 0.0,
                    len(counts.own_vocabulary), counts.entries,
                    counts.entry_words / counts.words if counts.words else 0.0,
                    counts.code_words / counts.words if counts.words else 0.0,
                    renderer.first_heading is not None)


# "<no title> — Buildbot 3.7 documentation"
_SPHINX_NO_TITLE = re.compile(r"<no title>(?:$|\s*[|—–·]|\s+-\s)", re.IGNORECASE)


def _page_title(renderer: _Renderer, page_title: str) -> str:
    """The first ``<h1>``, unless it is a banner: a site whose every page opens with its
    name in an ``<h1>`` names the page in ``<title>``, either as one of the page's later
    headings (libxslt's "The XSLT C library for GNOME") or as a later heading followed by
    a separator and that name (Django's "FAQ: General — Django 3.2 documentation" under
    an ``<h1>`` "Django 3.2 documentation"). Nor is it the title when the page has
    several ``<h1>`` and ``<title>``, not naming the first, is written as a paragraph of
    its own above it: the ``<h1>`` is then the page's first section (Haddock's module
    pages)."""
    h1 = renderer.first_h1
    if h1 is None:
        return _without_site_name(page_title, renderer.first_heading)
    if not page_title:
        return h1
    own = page_title.casefold()
    banner = h1.casefold()
    if renderer.h1s > 1 and banner not in own and page_title in renderer.before_h1:
        # the page's name written above its sections, which are <h1>s: Haddock's module
        # pages (<title> "Data.List.Split.Internals", a caption of that name, then <h1>
        # "Types and utilities", <h1> "Combinators", ...); titled by the first, each module
        # was named by its first section. A single <h1> names the page: a site whose
        # <title> is its name, written again above the <h1> as a logo, keeps the <h1>
        return page_title
    for heading in renderer.headings:
        if heading == h1:
            continue
        later = heading.casefold()
        if banner not in own and later == own:
            return heading
        rest = own[len(later):]
        if own.startswith(later) and _TITLE_SEPARATOR.match(rest) and banner in rest:
            return heading
    return h1


# what separates a page's own title from the site's name in <title>
_TITLE_SEPARATOR = re.compile(r"\s*[|—–·]|\s+-\s|:\s|\s+\(")
# "2.6 ", "A.1 ", "12. ": a heading's section number, which <title> leaves out
_SECTION_NUMBER = re.compile(r"^(?:\d+|[A-Z])(?:\.\d+)*\.?\s+")


def _without_site_name(page_title: str, first_heading: str | None) -> str:
    """``<title>`` without the site's name when it starts with the content's first heading
    ("File system | Node.js v20 Documentation" under a first heading "File system"; a
    Texinfo manual's "Closure Example (libffi: ...)" under "2.6 Closure Example"): the
    site's name in every title would head every chunk the embedder reads."""
    if not first_heading:
        return page_title
    for own in (first_heading, _SECTION_NUMBER.sub("", first_heading)):
        if own and page_title.startswith(own) and _TITLE_SEPARATOR.match(page_title, len(own)):
            return own
    return page_title
