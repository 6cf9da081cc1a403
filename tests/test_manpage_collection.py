"""The retrieval benchmark's man page collection reads a page's NAME line as a reader would."""

from __future__ import annotations

from pathlib import Path

from bench._manpage_collection import description, is_query, scan

MAN_PAGE = r""".\" Copyright notice, not text
.TH CP 1 "2024" "coreutils"
.SH NAME
cp \- copy files and \fBdirectories\fR
.SH SYNOPSIS
.B cp
[\fIOPTION\fR]... \fISOURCE DEST\fR
"""

MDOC_PAGE = r""".Dd March 1, 2024
.Dt NC 1
.Sh NAME
.Nm nc
.Nd arbitrary TCP and UDP connections and listens
.Sh SYNOPSIS
"""


def test_a_man_pages_description_is_the_text_after_the_dash_without_escapes() -> None:
    assert description(MAN_PAGE) == "copy files and directories"


def test_an_mdoc_pages_description_is_its_nd_line() -> None:
    assert description(MDOC_PAGE) == "arbitrary TCP and UDP connections and listens"


def test_a_dash_inside_a_name_is_not_the_separator() -> None:
    page = ".SH NAME\ngcloud access\\-context\\-manager \\- manage access policies and levels\n"
    assert description(page) == "manage access policies and levels"


def test_a_name_section_of_several_entries_gives_no_description() -> None:
    page = ".SH NAME\nbzip2 \\- a block-sorting file compressor\nbzcat \\- decompresses files\n"
    assert description(page) is None


def test_a_query_is_long_english_and_not_boilerplate() -> None:
    assert is_query("copy files and directories")
    assert not is_query("format a file")  # three words
    assert not is_query("manual page for foo 1.2 and friends")
    assert not is_query("копировать файлы и каталоги целиком")


def test_aliases_and_symlinks_are_not_pages(tmp_path: Path) -> None:
    section = tmp_path / "man1"
    section.mkdir()
    (section / "cp.1").write_text(MAN_PAGE)
    (section / "copy.1").write_text(".so man1/cp.1\n")
    (section / "cp-link.1").symlink_to(section / "cp.1")
    assert [(page.key, page.description) for page in scan(tmp_path)] == [
        ("man1/cp.1", "copy files and directories")
    ]
