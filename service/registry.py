"""The loaded models: one `ModelRuntime` per folder of the model repository.

A broken folder is listed as failed with its reason and never stops the others.
Hidden folders (the training CLI's `.NAME.tmp-*` while it writes) are skipped.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path

from .errors import ModelNotFound, ModelNotReady, NotLoaded, WrongTask
from .runtime import ModelRuntime, RuntimeOptions

log = logging.getLogger(__name__)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class Registry:
    def __init__(self, root: Path, options: RuntimeOptions):
        self.root = Path(root)
        self.options = options
        self.models: dict[str, ModelRuntime] = {}
        self.loaded = False

    def discover(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if p.is_dir() and NAME_RE.match(p.name))

    def load_all(self) -> None:
        """Load every model folder. DeviceError propagates (start-up must fail); nothing else does."""
        for path in self.discover():
            model = ModelRuntime(path, self.options)
            self.models[model.name] = model
            model.load()
        self.loaded = True
        ready = sum(m.ready for m in self.models.values())
        log.info("models: %d ready, %d failed, from %s", ready, len(self.models) - ready, self.root)

    def get(self, name: str) -> ModelRuntime:
        if not self.loaded:
            raise NotLoaded("models are still loading")
        try:
            return self.models[name]
        except KeyError:
            raise ModelNotFound(name, list(self.models)) from None

    def ready_model(self, name: str, task: str, action: str) -> ModelRuntime:
        """The named model, ready and of `task`; `action` names the endpoint for the error message."""
        model = self.get(name)
        if not model.ready:
            raise ModelNotReady(name, model.status, model.error)
        if model.task != task:
            raise WrongTask(name, str(model.task), task, action)
        return model
