"""Every format ingest reads, fed hostile files: a document or a named error, never a crash."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pgfunnel.errors import InvalidDocumentError
from pgfunnel.sources import SUPPORTED_SUFFIXES, read_path

HOSTILE: dict[str, bytes] = {
    "nul": b"# Title\n\ntext \x00 after a NUL\n",
    "invalid-utf8": b"# Title\n\n\xff\xfe not UTF-8\n",
    "long-line": b"x" * 1_000_000,
    "unclosed": b"# T\n\n````{note}\n<!--\n----\n:::tip\n```\nimport x\n<div>\n[[a\n",
    "markers-only": b"!!! \n=== \"\n--8<--\n{: }\n(x)=\n//\n////\n+\n:toc:\n",
    "deep-json": b"[" * 5000 + b"]" * 5000,
    "bom-crlf": "\ufeff= Title\r\n\r\n== Part\r\nText.\r\n".encode(),
    "empty": b"",
}


@pytest.mark.parametrize("suffix", SUPPORTED_SUFFIXES)
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_file_gives_a_document_or_a_named_error(tmp_path: Path, suffix: str,
                                                        name: str) -> None:
    path = tmp_path / f"page{suffix}"
    path.write_bytes(HOSTILE[name])
    # this process's CPU time: the reader's work, not a loaded machine's other processes
    started = time.process_time()
    try:
        docs = list(read_path(path))
    except InvalidDocumentError as exc:
        assert str(path) in str(exc)
    else:
        assert all(d.citekey == "page" and d.text.strip() for d in docs) or suffix == ".jsonl"
        assert all("\x00" not in d.text for d in docs) or name == "nul"
    assert time.process_time() - started < 5


def test_judged_queries_nested_too_deeply_are_a_named_error(tmp_path: Path) -> None:
    from pgfunnel.errors import InvalidInputError
    from pgfunnel.eval.qrels import load_queries

    path = tmp_path / "q.jsonl"
    path.write_bytes(HOSTILE["deep-json"] + b"\n")
    with pytest.raises(InvalidInputError, match=r"line 1: invalid JSON: nested too deeply"):
        load_queries(path)


def test_a_jsonl_document_that_is_only_its_title_is_searched_by_its_title() -> None:
    from pgfunnel.sources import record_from_dict

    rec = record_from_dict({"_id": "p7", "title": "Masks and transmission", "text": ""}, "x:1")
    assert rec.citekey == "p7" and rec.text == rec.title == "Masks and transmission"
    # no text field at all is a mistake more often than a title-only document
    # ({"content": ...}): refused
    with pytest.raises(InvalidDocumentError, match=r"x:2: missing or empty 'text'"):
        record_from_dict({"citekey": "p8", "title": "Only a title", "content": "..."}, "x:2")
    # neither text nor title: nothing to search, refused with the place and the field
    with pytest.raises(InvalidDocumentError, match=r"x:3: missing or empty 'text'"):
        record_from_dict({"_id": "p9", "title": " ", "text": ""}, "x:3")
    # a text of the wrong type is named as such, as every other field's is
    with pytest.raises(InvalidDocumentError, match=r"x:4: 'text' must be a string, got int"):
        record_from_dict({"citekey": "p10", "title": "T", "text": 5}, "x:4")



def test_a_jsonl_file_of_other_data_in_a_folder_says_it_is_not_documents(
        tmp_path: Path) -> None:
    # a docs folder that also holds a .jsonl of other data (events, a dataset's labels)
    # stopped the ingest with "events.jsonl:1: missing or empty 'citekey'", as if one line
    # lacked one field, and nothing said a .jsonl is read as documents or how to leave it out
    from pgfunnel.sources import read_path

    (tmp_path / "guide.md").write_text("# Guide\n\nText.\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "events.jsonl").write_text(
        '{"event": "login", "user": "bob"}\n{"event": "logout"}\n')
    with pytest.raises(InvalidDocumentError, match=(
            r"events\.jsonl:1: not a document: the line has no 'citekey' and no 'text' \(its "
            r"keys: 'event', 'user'\); a \.jsonl file is read as one document per line, a "
            r"JSON object with 'citekey' and 'text' .*leave out a file of other data with "
            r"--exclude 'events\.jsonl'")):
        list(read_path(tmp_path))
    # the --exclude it names leaves it out
    assert [d.citekey for d in read_path(tmp_path, exclude=["events.jsonl"])] == ["guide"]
    # a document line that lacks one of the two is told as before
    (tmp_path / "logs" / "events.jsonl").write_text('{"citekey": "k", "body": "x"}\n')
    with pytest.raises(InvalidDocumentError, match=r"events\.jsonl:1: missing or empty 'text'"):
        list(read_path(tmp_path))
    # past a document the file is documents: a line without either field is that line's
    # error, not advice to leave the whole file out
    (tmp_path / "logs" / "events.jsonl").write_text(
        '{"citekey": "k", "text": "x"}\n{"title": "T"}\n')
    with pytest.raises(InvalidDocumentError,
                       match=r"events\.jsonl:2: missing or empty 'citekey'$"):
        list(read_path(tmp_path))


def test_the_exclude_a_message_suggests_is_one_shell_word_for_a_name_with_a_quote(
        tmp_path: Path) -> None:
    # `--exclude 'it's.jsonl'`, as the message wrote it for such a name, is a command the
    # shell cannot read: the name is quoted so that pasting it leaves that file out
    import shlex

    from pgfunnel.sources import read_path

    (tmp_path / "guide.md").write_text("# Guide\n\nText.\n")
    (tmp_path / "it's.jsonl").write_text('{"event": "login"}\n')
    with pytest.raises(InvalidDocumentError) as exc:
        list(read_path(tmp_path))
    said = str(exc.value)
    assert said.endswith("--exclude 'it'\"'\"'s.jsonl'"), said
    words = shlex.split(said[said.rindex("--exclude"):])
    assert words == ["--exclude", "it's.jsonl"]
    assert [d.citekey for d in read_path(tmp_path, exclude=[words[1]])] == ["guide"]


def test_a_file_whose_path_makes_too_long_a_citekey_says_what_to_do(tmp_path: Path) -> None:
    # a deep tree of long folder names made a citekey past 1,000 bytes: the error said
    # "citekey is 1,445 bytes long; the limit is 1,000", of a key its owner never typed
    from pgfunnel.sources import read_path

    deep = tmp_path / "docs"
    for _ in range(5):
        deep = deep / ("é" * 100)
    deep.mkdir(parents=True)
    (deep / "guide.md").write_text("# Guide\n\nText.\n")
    (tmp_path / "docs" / "short.md").write_text("# Short\n\nText.\n")
    with pytest.raises(InvalidDocumentError, match=(
            r"guide\.md: its citekey, the file's path from the folder given, is 1,010 bytes "
            r"long; the limit is 1,000 \(it is a key of a document index\): give the file "
            r"or a folder on its path a shorter name, or leave it out with --exclude$")):
        list(read_path(tmp_path / "docs"))
    assert [d.citekey for d in read_path(tmp_path / "docs", exclude=["guide.md"])] == ["short"]

def test_a_pipe_or_a_device_given_by_name_is_refused_without_reading_it(
        tmp_path: Path) -> None:
    """A named pipe given to ingest or eval waited for a writer forever, and a link to
    /dev/zero read without end; both are refused naming the path, unread."""
    import os
    import subprocess
    import sys

    pipe = tmp_path / "pipe.md"
    os.mkfifo(pipe)
    device = tmp_path / "zero.jsonl"
    device.symlink_to("/dev/zero")
    for args, path in ((["ingest", str(pipe), "--dry-run"], pipe),
                       (["ingest", str(device), "--dry-run"], device),
                       (["eval", str(pipe), "--dsn", "postgresql://nobody@127.0.0.1:1/x"],
                        pipe)):
        # a child process: a read that hangs is a timeout here, not a hung test run
        res = subprocess.run([sys.executable, "-m", "pgfunnel.cli.main", *args],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 1, (args, res.stdout, res.stderr)
        out = res.stdout + res.stderr
        assert f"{path}: cannot read" in out and "not a regular file" in out, out
        assert "Traceback" not in out, out


def test_a_notebook_cell_whose_source_is_not_text_is_named(tmp_path: Path) -> None:
    import json

    for source, said in (([ "# a", None], "a list holding other things than strings"),
                         ([1, 2], "a list holding other things than strings"),
                         (None, "NoneType"), ({"a": 1}, "dict")):
        nb = tmp_path / "n.ipynb"
        nb.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": "# ok"},
                                            {"cell_type": "markdown", "source": source}]}))
        with pytest.raises(InvalidDocumentError,
                           match=rf"n.ipynb: not a valid notebook \(cell 2: its source is "
                                 rf"{said}"):
            list(read_path(nb))


def test_a_jsonl_string_may_hold_line_and_paragraph_separators(tmp_path: Path) -> None:
    import json

    lines = tmp_path / "u.jsonl"
    lines.write_text("\n".join(json.dumps({"citekey": key, "text": text}, ensure_ascii=False)
                               for key, text in (("a", "Para one\u2028para two"),
                                                 ("b", "next\u0085line\u2029end"))) + "\r\n",
                     encoding="utf-8")
    records = list(read_path(lines))
    assert [r.citekey for r in records] == ["a", "b"]
    assert "para two" in records[0].text and "end" in records[1].text
    # a bad line is still named by its own number
    lines.write_text(lines.read_text() + "{not json\n")
    with pytest.raises(InvalidDocumentError, match=r"u.jsonl:3: not valid JSON"):
        list(read_path(lines))
    # a field given twice: json.loads kept the last and dropped the first, unsaid
    lines.write_text('{"citekey": "a", "text": "first", "text": "second"}\n')
    with pytest.raises(InvalidDocumentError, match=r"u.jsonl:1: not valid JSON \(key 'text' "
                                                   "appears twice in one object"):
        list(read_path(lines))


def test_a_symbolic_link_loop_or_a_folder_that_cannot_be_listed_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    from collections.abc import Iterator

    from pgfunnel.sources import read_paths

    (tmp_path / "selfa").symlink_to(tmp_path / "selfb.md")
    (tmp_path / "selfb.md").symlink_to(tmp_path / "selfa")
    with pytest.raises(InvalidDocumentError, match=r"selfb.md: cannot read it"):
        list(read_paths([tmp_path / "selfb.md"]))
    docs = tmp_path / "docs"
    (docs / "locked").mkdir(parents=True)
    (docs / "a.md").write_text("# A\n\ntext\n")
    (docs / "locked" / "b.md").write_text("# B\n\ntext\n")
    real_scandir = os.scandir

    def refusing(path: str | os.PathLike[str] = ".") -> Iterator[os.DirEntry[str]]:
        # root lists every folder whatever its mode: refuse as Postgres' own user would
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    with pytest.raises(InvalidDocumentError, match=r"locked: cannot list this folder "
                                                   r"\(Permission denied\)"):
        list(read_path(docs))


def test_myst_directives_nested_a_thousand_deep_are_read_without_recursing_past_a_cap(
        tmp_path: Path) -> None:
    page = tmp_path / "m.md"
    for opener in ("```{note}", ":::{note}"):
        page.write_text("# T\n\n" + (opener + "\n") * 3000 + "innermost words\n")
        [record] = read_path(page)
        assert "innermost words" in record.text


def test_pipes_and_links_to_devices_in_a_folder_are_named_not_read(tmp_path: Path) -> None:
    import os
    import warnings

    from pgfunnel.sources import OtherFilesWarning

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\ntext\n")
    os.mkfifo(docs / "pipe.md")  # reading it would wait for a writer forever
    (docs / "zero-link.md").symlink_to("/dev/zero")  # and this would never end
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = list(read_path(docs))
    assert [d.citekey for d in found] == ["a"]
    [warning] = [str(w.message) for w in caught if issubclass(w.category, OtherFilesWarning)]
    assert warning == (f"{docs}: left out 2 special files (a pipe, socket or device, or a "
                       "link to one): pipe.md, zero-link.md")


@pytest.mark.parametrize("field, value", [
    ("readers", ""), ("readers", {}), ("readers", False), ("readers", 0),
    ("metadata", []), ("metadata", ""), ("metadata", 0), ("metadata", False),
    ("title", 0), ("title", []), ("title", False),
])
def test_a_jsonl_field_of_the_wrong_type_is_refused_even_when_it_is_falsy(
        field: str, value: object) -> None:
    """`"readers": ""` (or false, 0, {}) was read as no readers, so the document was
    ingested public; `"metadata": []` and `"title": 0` were dropped without a word,
    while `"readers": "alice"` and `"metadata": [1]` were refused."""
    from pgfunnel.sources import record_from_dict

    with pytest.raises(InvalidDocumentError, match=rf"^x:1: '{field}' must be"):
        record_from_dict({"citekey": "a", "text": "secret", field: value}, "x:1")
    # null, like a missing key, still takes the default
    rec = record_from_dict({"citekey": "a", "text": "secret", field: None}, "x:1")
    assert (rec.readers, rec.metadata, rec.title) == ([], {}, "")


@pytest.mark.parametrize("field, value", [
    ("valid_from", "2020-01-01T00:00:00+16:00"), ("valid_to", "2030-01-01T00:00:00-23:59"),
    ("valid_from", "9999-12-31T23:59:59.999999-23:59"),
])
def test_a_time_zone_offset_postgres_cannot_take_is_named_before_anything_is_written(
        db: str, tmp_path: Path, field: str, value: str) -> None:
    """ISO 8601 and Python take offsets up to 23:59, Postgres under 16 hours: the ingest
    failed with Postgres' "time zone displacement out of range", naming neither the line
    nor the field."""
    import json

    from pgfunnel.cli.main import app
    from typer.testing import CliRunner

    from pgfunnel.db import connect
    from pgfunnel.sources import record_from_dict

    with pytest.raises(InvalidDocumentError, match=rf"^x:1: '{field}' .* time zone offset"):
        record_from_dict({"citekey": "a", "text": "t", field: value}, "x:1")
    # 15:59 is taken
    record_from_dict({"citekey": "a", "text": "t", field: "2020-01-01T00:00:00+15:59"}, "x:1")
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"citekey": "ok", "text": "fine"}) + "\n"
                    + json.dumps({"citekey": "a", "text": "t", field: value}) + "\n")
    res = CliRunner().invoke(app, ["ingest", str(path), "--dsn", db], env={"COLUMNS": "300"})
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    assert f"docs.jsonl:2: '{field}'" in res.output, res.output
    with connect(db) as conn:
        assert conn.execute("select count(*) from pgfunnel.document").fetchone() == (0,)


CRLF_PAGES: dict[str, str] = {
    ".md": "---\ntitle: Install the CLI\nsidebar_position: 2\n---\n# Install\n\nIntro text.\n\n"
           "Setup\n=====\n\n```bash\npip install x\n# not a heading\n```\n\n| a | b |\n|---|---|\n"
           "| 1 | 2 |\n\n## Deep\n\nDeep text.\n",
    ".mdx": "---\ntitle: Tabs page\n---\nimport Tabs from '@theme/Tabs';\n\n# Tabs\n\n<Tabs>\n"
            "<TabItem value=\"a\">\nInside the tab.\n</TabItem>\n</Tabs>\n\n:::tip Tip title\n"
            "Tip text.\n:::\n",
    ".rst": "=====\nTitle\n=====\n\nIntro.\n\nPart\n====\n\n.. note::\n\n   A note.\n\n"
            "Literal::\n\n    code 1\n    code 2\n\nSub\n---\n\nSub text.\n",
    ".adoc": "= Title\n\n== Part\n\nText.\n\n[source,python]\n----\nprint(1)\n\nprint(2)\n----\n",
    ".txt": "Title\n=====\n\nPlain text.\nSecond line.\n\nNew paragraph.\n",
    ".html": "<html><head><title>Page</title></head><body><main><h1>Page</h1>\n<p>Some\ntext."
             "</p>\n<pre>line 1\n\nline 3\n</pre></main></body></html>\n",
    ".ipynb": '{"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["---\\n", '
              '"title: Notebook title\\n", "---\\n", "# Notebook\\n", "\\n", "Text."]}], '
              '"metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n',
}


@pytest.mark.parametrize("suffix", sorted(CRLF_PAGES))
@pytest.mark.parametrize("ending", ["\r\n", "\r"])
def test_windows_and_old_mac_line_ends_read_as_unix_ones(tmp_path: Path, suffix: str,
                                                          ending: str) -> None:
    # a markdown file saved on Windows (or with a BOM and CRLF) lost its front matter:
    # `---\r\n` opened none, so the title was the first heading and `--- title: ...`
    # a heading and a chunk of its own
    page = CRLF_PAGES[suffix]
    (tmp_path / "unix").mkdir()
    (tmp_path / "unix" / f"page{suffix}").write_bytes(page.encode())
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / f"page{suffix}").write_bytes(
        ("\ufeff" + page.replace("\n", ending)).encode())
    (unix,) = read_path(tmp_path / "unix" / f"page{suffix}")
    (other,) = read_path(tmp_path / "other" / f"page{suffix}")
    assert (other.title, other.text) == (unix.title, unix.text)
    assert "\r" not in other.text and "title:" not in other.text


def test_a_warning_shows_a_file_names_control_characters_escaped(tmp_path: Path) -> None:
    """The warnings read_paths gives (a file without text, files of other types, a page
    that declares no charset) put the file's name in their text raw: Python printed a
    name holding an escape sequence to stderr as it is, recolouring the terminal or
    setting its title. Control characters are written as \\xNN, as the CLI shows them."""
    import warnings

    from pgfunnel.sources import read_paths

    folder = tmp_path / "docs\x1b[31m"
    folder.mkdir()
    (folder / "empty\x1b]0;pwned\x07.md").write_text("")
    (folder / "notes\x9b1m.tex").write_text("\\section{x}")
    (folder / "latin\x1b[2J.html").write_bytes(b"<p>caf\xe9 au lait</p>")
    (folder / "ok.md").write_text("# Ok\n\nquokka text\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = list(read_paths([folder]))
    assert [r.citekey for r in records] == ["latin\x1b[2J", "ok"]  # the data stays as is
    said = [str(w.message) for w in caught]
    assert len(said) == 3, said
    for text in said:
        assert not any(c in text for c in "\x1b\x07\x9b"), repr(text)
        assert "docs\\x1b[31m" in text, text
    assert any("empty\\x1b]0;pwned\\x07.md: no text" in text for text in said), said
    assert any("latin\\x1b[2J.html: declares no charset" in text for text in said), said
    assert {type(w.message).__name__ for w in caught} == {
        "EmptyFileWarning", "OtherFilesWarning", "GuessedEncodingWarning"}


@pytest.mark.parametrize("name, data", [
    ("front.md", "---\ntitle: Only\n---\n"), ("toml.md", "+++\ntitle = 'Only'\n+++\n"),
    ("fields.rst", ":title: Only\n:author: Jane\n"), ("comment.rst", ".. a comment\n"),
    ("entries.adoc", ":toc: left\n// a comment\n"),
])
def test_a_file_of_markup_only_is_not_called_empty(tmp_path: Path, name: str,
                                                   data: str) -> None:
    # "no text to ingest (it is empty)" sent its author to look at a file that is not
    (tmp_path / name).write_text(data)
    with pytest.raises(InvalidDocumentError, match=r"no text to ingest \(it holds only what "
                                                   r"its page does not show: front matter"):
        list(read_path(tmp_path / name))
    (tmp_path / name).write_text(" \n\n")
    with pytest.raises(InvalidDocumentError, match=r"no text to ingest \(it is empty\)"):
        list(read_path(tmp_path / name))
