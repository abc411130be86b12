"""A small, strict model of the Dockerfile subset this project uses, and of .dockerignore.

check_image_commands.py replays a target's stages from this model, and the tests in
tests/deploy read the same model, so the commands that are checked are the commands the
image runs, not a copy of them. Anything outside the subset raises DockerfileError instead
of being skipped.
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

KNOWN = {"FROM", "ARG", "ENV", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "HEALTHCHECK", "CMD",
         "ENTRYPOINT", "LABEL", "STOPSIGNAL"}  # STOPSIGNAL: the replay stops with SIGTERM
_VAR = re.compile(r"\$(?:\{(\w+)(?::-([^}]*))?\}|(\w+))")


class DockerfileError(ValueError):
    pass


@dataclass
class Instruction:
    keyword: str
    value: str          # the text after the keyword, continuation lines joined
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON-array form (`["python", "-m", "x"]`) as a list, or None for shell form."""
        text = self.value.strip()
        if not text.startswith("["):
            return None
        try:
            form = json.loads(text)
        except json.JSONDecodeError as e:
            raise DockerfileError(f"line {self.line}: {self.keyword} is not a valid JSON array: {e}") from None
        if not (isinstance(form, list) and all(isinstance(a, str) for a in form)):
            raise DockerfileError(f"line {self.line}: {self.keyword} must be a JSON array of strings")
        return form


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None


@dataclass
class Dockerfile:
    args: dict[str, str]            # global ARG defaults (before the first FROM)
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise DockerfileError(f"no stage named '{name}'; stages: {', '.join(s.name for s in self.stages)}")

    def chain(self, target: str) -> list[Stage]:
        """The stages `docker build --target TARGET` runs, dependencies first."""
        order: list[Stage] = []

        def visit(name: str) -> None:
            stage = self.stage(name)
            for copy in stage.all("COPY"):
                src_stage = parse_copy(copy).from_stage
                if src_stage and src_stage not in [s.name for s in order]:
                    visit(src_stage)
            if stage not in order:
                order.append(stage)

        visit(target)
        return order


def _logical_lines(text: str):
    """Yield (line number, instruction text): comments dropped, `\\` continuations joined."""
    buf, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buf):
            continue
        if not buf:
            start = n
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        yield start, buf
        buf = ""
    if buf:
        raise DockerfileError(f"line {start}: continuation at the end of the file")


def expand(text: str, env: dict[str, str]) -> str:
    """$VAR, ${VAR} and ${VAR:-default}, as Dockerfile ENV/ARG/WORKDIR expansion does."""
    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in env and env[name] != "":
            return env[name]
        return m.group(2) if m.group(2) is not None else env.get(name, "")
    return _VAR.sub(sub, text)


def parse(text: str) -> Dockerfile:
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line, logical in _logical_lines(text):
        keyword, _, value = logical.partition(" ")
        keyword = keyword.upper()
        if keyword not in KNOWN:
            raise DockerfileError(f"line {line}: instruction {keyword} is outside the subset this model replays")
        if keyword == "FROM":
            parts = value.split()
            if len(parts) != 3 or parts[1].upper() != "AS":
                raise DockerfileError(f"line {line}: every stage needs a name: FROM IMAGE AS NAME")
            stages.append(Stage(name=parts[2], base=expand(parts[0], args)))
        elif not stages:
            if keyword != "ARG":
                raise DockerfileError(f"line {line}: {keyword} before the first FROM")
            key, _, default = value.strip().partition("=")
            args[key] = default
        else:
            stages[-1].instructions.append(Instruction(keyword, value.strip(), line))
    if not stages:
        raise DockerfileError("no FROM instruction")
    return Dockerfile(args, stages)


def parse_env(instr: Instruction) -> list[tuple[str, str]]:
    """ENV a=1 b="two words" → [(a, 1), (b, two words)]; values still unexpanded."""
    pairs = []
    for token in shlex.split(instr.value, posix=True):
        key, eq, val = token.partition("=")
        if not eq:
            raise DockerfileError(f"line {instr.line}: use ENV KEY=VALUE, got '{token}'")
        pairs.append((key, val))
    return pairs


@dataclass
class Copy:
    sources: list[str]
    dest: str
    from_stage: str | None


def parse_copy(instr: Instruction) -> Copy:
    tokens = instr.exec_form() or shlex.split(instr.value)
    from_stage = None
    while tokens and tokens[0].startswith("--"):
        flag = tokens.pop(0)
        if flag.startswith("--from="):
            from_stage = flag.split("=", 1)[1]
        elif not flag.startswith(("--chown=", "--chmod=")):
            raise DockerfileError(f"line {instr.line}: COPY flag {flag} is outside the replayed subset")
    if len(tokens) < 2:
        raise DockerfileError(f"line {instr.line}: COPY needs a source and a destination")
    return Copy(tokens[:-1], tokens[-1], from_stage)


@dataclass
class Healthcheck:
    command: list[str]
    interval: float = 30.0
    timeout: float = 30.0
    start_period: float = 0.0
    retries: int = 3


def _seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if not m:
        raise DockerfileError(f"bad duration '{text}'")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def parse_healthcheck(instr: Instruction) -> Healthcheck:
    options, _, rest = instr.value.partition("CMD")
    cmd = Instruction("HEALTHCHECK", rest.strip(), instr.line).exec_form()
    if cmd is None:
        raise DockerfileError(f"line {instr.line}: HEALTHCHECK CMD must use the exec (JSON) form")
    hc = Healthcheck(cmd)
    for opt in options.split():
        key, _, val = opt.lstrip("-").partition("=")
        if key == "retries":
            hc.retries = int(val)
        elif key in ("interval", "timeout", "start-period"):
            setattr(hc, key.replace("-", "_"), _seconds(val))
        else:
            raise DockerfileError(f"line {instr.line}: unknown HEALTHCHECK option --{key}")
    return hc


class DockerIgnore:
    """.dockerignore matching: last matching pattern wins, `!` re-includes, a pattern that
    matches a directory matches everything under it, `**` spans directories."""

    def __init__(self, text: str):
        self.rules: list[tuple[bool, re.Pattern]] = []
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            include = line.startswith("!")
            pattern = line[1:].strip() if include else line
            pattern = pattern.strip("/")
            self.rules.append((include, re.compile(self._regex(pattern))))

    @staticmethod
    def _segment(seg: str) -> str:
        """One path segment of a Go filepath.Match pattern as a regex."""
        out, i = "", 0
        while i < len(seg):
            c = seg[i]
            if c == "*":
                out += "[^/]*"
            elif c == "?":
                out += "[^/]"
            elif c == "[" and "]" in seg[i + 1:]:
                end = seg.index("]", i + 1)
                body = seg[i + 1:end]
                out += "[" + ("^" + body[1:] if body.startswith("^") else body) + "]"
                i = end
            else:
                out += re.escape(c)
            i += 1
        return out

    @classmethod
    def _regex(cls, pattern: str) -> str:
        regex = ""
        for n, seg in enumerate(pattern.split("/")):
            if seg == "**":
                regex += "(?:[^/]+(?:/|$))*" if n == 0 else "(?:/[^/]+)*"
            else:
                regex += ("" if n == 0 or regex.endswith("$))*") else "/") + cls._segment(seg)
        return regex + "$"

    def excluded(self, relpath: str) -> bool:
        parts = Path(relpath).parts
        candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        result = False
        for include, rx in self.rules:
            if any(rx.match(c) for c in candidates):
                result = not include
        return result

    @classmethod
    def load(cls, context: Path) -> "DockerIgnore":
        path = context / ".dockerignore"
        return cls(path.read_text() if path.exists() else "")
