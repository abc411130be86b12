"""The examples of README.md, docs/*.md and docs/benchmarks/*.md (the benchmark families' pages), read with a
Markdown parser (markdown-it-py, CommonMark).

Every fenced block names its language. A block of `sh` (or `bash`, `shell`) or `python` is an example, and
tests/docs/test_examples.py runs it as written; any other language (`text`, `console` for a prompt and its output,
`json`, `protobuf`, `mermaid`, …) is shown, not run. An indented code block, or a fence with no language, is a
mistake this module reports: nobody could tell whether it is meant to run.

An HTML comment on the line just above a fence says more about the example:

    <!-- example: skip needs a Kubernetes cluster -->       not run; the reason is shown in the test's summary
    <!-- example: status 400 -->                           its requests may answer these HTTP statuses
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt

SHELL = {"sh", "bash", "shell"}
PYTHON = {"python", "py"}
MARKER = re.compile(r"<!--\s*example:\s*(.*?)\s*-->", re.S)


@dataclass
class Example:
    path: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    lang: str  # "sh" or "python"
    code: str
    skip: str | None = None  # the reason it is not run
    statuses: set[int] = field(default_factory=set)  # error statuses its requests may answer

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def documents(root: Path) -> list[Path]:
    return [
        root / "README.md",
        *sorted((root / "docs").glob("*.md")),
        *sorted((root / "docs" / "benchmarks").glob("*.md")),
    ]


def read(root: Path) -> tuple[list[Example], list[str]]:
    """Every example, in the order of `documents`, and the problems found (one line each)."""
    examples, problems = [], []
    md = MarkdownIt("commonmark")
    for doc in documents(root):
        rel = str(doc.relative_to(root))
        previous = None
        for token in md.parse(doc.read_text()):
            line = token.map[0] + 1 if token.map else 0
            if token.type == "code_block":
                problems.append(f"{rel}:{line}: an indented code block: fence it and name its language (sh, text, …)")
            elif token.type == "fence":
                lang = token.info.split()[0].lower() if token.info.strip() else ""
                marker = _marker(previous, rel, line, problems)
                if not lang:
                    problems.append(f"{rel}:{line}: a fence with no language: sh or python (run), or text, console, …")
                elif lang in SHELL | PYTHON:
                    examples.append(Example(rel, line, "sh" if lang in SHELL else "python", token.content, *marker))
                elif marker != (None, set()):
                    problems.append(f"{rel}:{line}: an example: marker on a {lang} block, which is never run")
            previous = token
    return examples, problems


def _marker(token, rel: str, line: int, problems: list[str]) -> tuple[str | None, set[int]]:
    """(skip reason, statuses) from an `<!-- example: … -->` comment that ends on the line above the fence."""
    if token is None or token.type != "html_block" or not token.map or token.map[1] != line - 1:
        return None, set()
    skip, statuses = None, set()
    for found in MARKER.finditer(token.content):
        word, _, rest = found.group(1).partition(" ")
        if word == "skip" and rest.strip():
            skip = rest.strip()
        elif word == "status" and rest.split() and all(s.isdigit() for s in rest.split()):
            statuses |= {int(s) for s in rest.split()}
        else:
            problems.append(f"{rel}:{line}: unknown marker {found.group(0)!r}: skip REASON, or status CODE…")
    return skip, statuses
