"""Run a documentation's Python example as a user would paste it, in the current folder, in an environment that has
only what `make serve` installs: the packages named in BLOCKED (a JSON list of top-level modules, those of every
distribution here that the serve extras do not bring) cannot be imported, as they would not be there. An optional
import the example's libraries try (and do without) still does without; a needed one fails as it would for the user.

    python pyexample.py SCRIPT BLOCKED
"""

import importlib.abc
import json
import runpy
import sys
from pathlib import Path

script, blocked = Path(sys.argv[1]), frozenset(json.loads(Path(sys.argv[2]).read_text()))


class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named '{name}' (`make serve` does not install it)", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
sys.argv = [str(script)]
sys.path[0] = ""  # the current folder first, as in an interactive session
runpy.run_path(str(script), run_name="__main__")
