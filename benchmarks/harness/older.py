"""A module of the package as an older commit had it, loaded beside today's (experiments/ races)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType

from .paths import ROOT


def module_at(rev: str, path: str, name: str) -> ModuleType:
    """The file ``path`` (``delegate/...``) at commit ``rev``, run as the module ``name`` of its
    package (``delegate.runtime._raced_x``): its relative imports find today's siblings."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True, capture_output=True, text=True
    ).stdout
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = name.rsplit(".", 1)[0]
    sys.modules[name] = module
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
    return module
