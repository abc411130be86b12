"""The Dockerfile's stages, read with dockerfile-parse, for the static checks of what cannot be built
here (the gpu target) and of what must agree across files (ports, settings, the torch pin).
The runtime and train targets are built and run for real by tests/containers."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from dockerfile_parse import DockerfileParser


@dataclass
class Instruction:
    kind: str
    value: str
    line: int

    def exec_form(self) -> list[str]:
        return json.loads(self.value)


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, kind: str) -> list[Instruction]:
        return [i for i in self.instructions if i.kind == kind]

    def last(self, kind: str) -> Instruction:
        return self.all(kind)[-1]

    def env(self) -> dict[str, str]:
        return dict(pair.split("=", 1) for i in self.all("ENV") for pair in shlex.split(i.value))

    def copies(self) -> list[tuple[str | None, list[str], str]]:
        """(from stage or None, sources, destination) of each COPY."""
        found = []
        for i in self.all("COPY"):
            words = shlex.split(i.value)
            source = next((w.split("=", 1)[1] for w in words if w.startswith("--from=")), None)
            paths = [w for w in words if not w.startswith("--")]
            found.append((source, paths[:-1], paths[-1]))
        return found

    def healthcheck(self) -> list[str]:
        return json.loads(self.last("HEALTHCHECK").value.split(" CMD ", 1)[1])


@dataclass
class Dockerfile:
    stages: list[Stage]

    @classmethod
    def read(cls, path: Path) -> "Dockerfile":
        parser = DockerfileParser(str(path), env_replace=True)
        bases = iter(parser.parent_images)  # FROM lines, ARG defaults substituted
        stages: list[Stage] = []
        for item in parser.structure:
            kind = item["instruction"]
            if kind == "FROM":
                words = item["value"].split()
                stages.append(Stage(words[-1] if len(words) >= 3 and words[-2].upper() == "AS" else "", next(bases)))
            elif kind != "COMMENT" and stages:
                stages[-1].instructions.append(Instruction(kind, item["value"], item["startline"] + 1))
        return cls(stages)

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def chain(self, target: str) -> list[Stage]:
        """The target and every stage it copies from."""
        stage = self.stage(target)
        before = [s for src, _, _ in stage.copies() if src for s in self.chain(src)]
        return before + [stage]

    def installs(self, target: str) -> str:
        return "\n".join(i.value for s in self.chain(target) for i in s.all("RUN"))
