"""runtime/kernel_scan.py finds what the anchored patterns it stands in for find, on any text.

Each scan is compared with the plain regex it replaces (``^`` in multi-line mode, or ``\\b``)
over texts drawn from the tokens those patterns look at, so that every boundary case (a match
inside a rejected one, blank lines, a text that starts or ends mid-pattern) comes up.
"""

from __future__ import annotations

import re
import string

from hypothesis import given
from hypothesis import strategies as st

from delegate.runtime import kernel_scan, persistent, programs

_TOKENS = [
    "__local",
    "__kernel",
    "barrier",
    "#define",
    "# define",
    "float4",
    "x",
    "_y",
    "7",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    ";",
    "*",
    " ",
    "\t",
    "\n",
    "\n\n",
    "void",
    "CLK_LOCAL_MEM_FENCE",
    "float4 f(float4 x) {",
    "void g() {",
    "__local float4 m[16];",
]
_texts = st.lists(st.sampled_from(_TOKENS), max_size=40).map("".join)

_ANCHORED_LOCAL = re.compile(r"^[ \t]*__local\s+(\w+)\s+(\w+)\s*\[\s*(\d+)\s*\]\s*;", re.M)
_ANCHORED_BARRIER = re.compile(r"\bbarrier\s*\([^;]*\)\s*;")
_ANCHORED_MACRO = re.compile(r"^\s*#\s*define\s+(\w+)", re.M)
_ANCHORED_HELPER = re.compile(r"^(?!__kernel)[A-Za-z_]\w*[\w \t*]*?[ \t*]+(\w+)\s*\([^;{)]*\)\s*\{", re.M)


@given(_texts)
def test_local_declarations_are_those_on_a_line_of_their_own(text: str) -> None:
    found = [(line, m.end(), m.groups()) for line, m in kernel_scan.at_line_start(persistent._LOCAL_DECL, text, " \t")]
    assert found == [(m.start(), m.end(), m.groups()) for m in _ANCHORED_LOCAL.finditer(text)]


@given(_texts)
def test_barriers_are_whole_words(text: str) -> None:
    found = [m.span() for m in kernel_scan.after_non_word(persistent._BARRIER, text)]
    assert found == [m.span() for m in _ANCHORED_BARRIER.finditer(text)]
    assert kernel_scan.sub_after_non_word(persistent._BARRIER, text, lambda _: ";") == _ANCHORED_BARRIER.sub(";", text)


@given(_texts)
def test_macros_are_definitions_on_a_line_of_their_own(text: str) -> None:
    found = [m.group(1) for _, m in kernel_scan.at_line_start(programs._MACRO, text, string.whitespace)]
    assert found == _ANCHORED_MACRO.findall(text)


@given(_texts)
def test_helpers_are_functions_defined_from_a_line_start(text: str) -> None:
    found = [m.span() for m in kernel_scan.unindented(programs._HELPER, text)]
    assert found == [m.span() for m in _ANCHORED_HELPER.finditer(text)]


def test_a_barrier_inside_a_rejected_match_is_found() -> None:
    # the unanchored pattern matches from "barrier" in "xbarrier", which is no whole word; the
    # barrier in its parentheses is one
    text = "xbarrier( barrier(CLK_LOCAL_MEM_FENCE) );"
    assert [m.start() for m in kernel_scan.after_non_word(persistent._BARRIER, text)] == [10]


def test_replaced_keeps_the_text_between_spans() -> None:
    assert kernel_scan.replaced("abcdef", iter([(1, 2, "X"), (4, 6, "")])) == "aXcd"
