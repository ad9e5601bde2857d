"""The dependency rule of docs/architecture.md holds for every import under delegate/ (those inside
functions and under TYPE_CHECKING too): the layer table there is the rule this test reads."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "delegate"
DOC = ROOT / "docs" / "architecture.md"
#: not part of the installed package's import graph: the build scripts run at build time
NOT_UNITS = {"_build_native", "_build_c_host"}


def _layer_table() -> tuple[dict[str, int], set[tuple[str, str]]]:
    """unit -> layer, and the (importer, imported) pairs allowed within a layer."""
    layers: dict[str, int] = {}
    same_layer: set[tuple[str, str]] = set()
    for line in DOC.read_text().splitlines():
        row = re.match(r"^\| (\d) \| (.*?) \|(.*?)\|$", line)
        if not row:
            continue
        level = int(row.group(1))
        for unit in re.findall(r"`([\w.]+)`", row.group(2)):
            layers[unit] = level
        for importer, imported in re.findall(r"`([\w.]+)` -> ((?:`[\w.]+`(?:, )?)+)", row.group(3)):
            same_layer |= {(importer, name) for name in re.findall(r"`([\w.]+)`", imported)}
    return layers, same_layer


def _unit_of(module: str) -> str:
    """``delegate.compiler.ops.conv`` -> ``compiler``; ``delegate.api`` -> ``api``; the package -> ``delegate``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "delegate"


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every delegate module ``path`` imports (absolute names)."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "delegate"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "delegate":
                continue
            # `from . import x` names a module; `from .m import x` names m (x is inside it)
            found |= {f"{target}.{a.name}" for a in node.names} if node.module is None else {target}
    return found


def unit_imports(package: Path = PACKAGE) -> dict[str, set[str]]:
    """unit -> the units it imports, over the modules of ``package`` (a folder named delegate)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in package.rglob("*.py"):
        if "_generated" in path.parts or path.stem in NOT_UNITS:
            continue
        source = _unit_of(_module_name(path, package.parent))
        for target in _imports(path, package.parent):
            unit = _unit_of(target)
            if target == "delegate.__version__":  # `from delegate import __version__`: the package
                unit = "delegate"
            if unit != source:
                edges[source].add(unit)
    return edges


def test_every_unit_is_in_the_layer_table():
    layers, _ = _layer_table()
    units = {_unit_of(_module_name(p)) for p in PACKAGE.rglob("*.py") if p.stem not in NOT_UNITS}
    units |= {"_generated", "_native"}  # generated code and the compiled extension
    assert units - set(layers) == set(), "add these to the layer table of docs/architecture.md"
    assert set(layers) - units == set(), "the layer table names units that do not exist"


def test_imports_follow_the_layers():
    layers, same_layer = _layer_table()
    broken = []
    for source, targets in sorted(unit_imports().items()):
        for target in sorted(targets):
            if layers[target] > layers[source] or (
                layers[target] == layers[source] and (source, target) not in same_layer
            ):
                broken.append(f"{source} (layer {layers[source]}) imports {target} (layer {layers[target]})")
    assert broken == [], "imports against docs/architecture.md's layers:\n" + "\n".join(broken)


def test_no_cycle_between_units():
    edges = unit_imports()
    state: dict[str, int] = {}

    def visit(unit: str, trail: list[str]) -> list[str] | None:
        state[unit] = 1
        for target in sorted(edges.get(unit, ())):
            if state.get(target) == 1:
                return [*trail, unit, target]
            if target not in state:
                cycle = visit(target, [*trail, unit])
                if cycle:
                    return cycle
        state[unit] = 2
        return None

    for unit in sorted(edges):
        if unit not in state:
            cycle = visit(unit, [])
            assert cycle is None, " -> ".join(cycle or [])


def test_the_rule_can_fail(tmp_path):
    """The checks see an import that breaks the rule: the runtime reaching into the compiler. The
    probe goes into a copy of the package (tests in other workers read the checkout's meanwhile)."""
    copy = tmp_path / "delegate"
    for path in PACKAGE.rglob("*.py"):
        target = copy / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    assert "compiler" not in unit_imports(copy)["runtime"]
    (copy / "runtime" / "_architecture_probe.py").write_text("from ..compiler import partition  # noqa: F401\n")
    layers, same_layer = _layer_table()
    assert "compiler" in unit_imports(copy)["runtime"]
    assert layers["compiler"] == layers["runtime"] and ("runtime", "compiler") not in same_layer


def test_the_readme_names_the_layers():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Architecture") :]
    section = section[: section.index("\n## ", 1)]
    assert "docs/architecture.md" in section
    for unit in ("settings", "compiler", "context", "runtime", "plugin"):
        assert f"`delegate/{unit}/`" in section, unit


#: the sizes docs/architecture.md promises a reader: a module fits in one sitting, a function on a screen
MODULE_LINES, FUNCTION_LINES = 600, 100


def test_modules_and_functions_stay_readable():
    too_long = []
    for path in PACKAGE.rglob("*.py"):
        if "_generated" in path.parts:
            continue
        source = path.read_text()
        if source.count("\n") > MODULE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, "split these: " + "; ".join(too_long)
