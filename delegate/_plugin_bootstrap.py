"""Imports the package for a host that loaded the plugin library without it.

csrc/python_side.c runs this file by path (``runpy.run_path``) the first time TFLite calls the
library in a process, before any callback into Python, giving ``library`` (the library's own path),
``build_sites`` (the site folders of the environment it was built in, os.pathsep-separated) and
``build_python`` ("3.11"). It must not import the package before placing it on the path, so it uses
the standard library only. Whatever it raises becomes the plugin's error message.
"""

from __future__ import annotations

import os
import site
import sys


def _python_side(library: str, build_sites: str, build_python: str) -> None:
    if "delegate._native" not in sys.modules:
        running = f"{sys.version_info[0]}.{sys.version_info[1]}"
        if build_python and build_python != running:
            raise ImportError(f"the plugin library {library} was built for Python {build_python}; this is {running}")
        root = os.path.dirname(os.path.dirname(library))
        # its dependencies: the host's own come first, then those installed beside it (an installed
        # package's root is a site folder), then those of the environment it was built in (an
        # editable install's)
        beside = [] if os.path.isfile(os.path.join(root, "pyproject.toml")) else [root]
        for folder in [*beside, *build_sites.split(os.pathsep)]:
            if folder and os.path.isdir(folder) and folder not in sys.path:
                site.addsitedir(folder)
        # the package that holds this library, ahead of any other of its name; its own imports then
        # go through the package's __path__, so this first entry is only needed for this import
        sys.path.insert(0, root)
        try:
            import delegate._native  # (the package, and the module this library is)
        finally:
            sys.path.remove(root)  # the first entry, the one inserted above
    native = sys.modules["delegate._native"]
    if not os.path.samefile(str(native.__file__), library):
        raise ImportError(
            f"this process already runs the package from {os.path.dirname(str(native.__file__))}; "
            f"load that package's plugin (delegate.plugin_path()) instead of {library}"
        )
    import delegate.plugin.callbacks  # noqa: F401  (attaches the callbacks the library calls)


_python_side(library, build_sites, build_python)  # type: ignore[name-defined]  # noqa: F821  (given by the library)
