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


#: inside the compiler, the kernel choice in layers (docs/architecture.md, "Where things live in
#: the compiler"): the templates (kernels/) below the selectors below the ops, and the options and
#: window arguments below all three; each part -> the parts it may not import
COMPILER_BELOW = {
    "options": {"kernels", "selectors", "ops"},
    "window": {"kernels", "selectors", "ops"},
    "kernels": {"selectors", "ops"},
    "selectors": {"ops"},
}


def compiler_reaches(package: Path = PACKAGE) -> list[str]:
    """Imports from a part of COMPILER_BELOW into a part above it, in ``package``."""
    found = []
    for part, above in COMPILER_BELOW.items():
        base = package / "compiler" / part
        for path in base.rglob("*.py") if base.is_dir() else [base.with_suffix(".py")]:
            for target in _imports(path, package.parent):
                parts = target.split(".")
                if parts[:2] == ["delegate", "compiler"] and len(parts) > 2 and parts[2] in above:
                    found.append(f"{_module_name(path, package.parent)} imports {target}")
    return found


def test_kernel_templates_and_selectors_sit_below_the_ops(tmp_path):
    assert compiler_reaches() == []
    copy = tmp_path / "delegate"  # a probe in a copy: a template reaching up into the ops is seen
    for path in (PACKAGE / "compiler").rglob("*.py"):
        target = copy / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    (copy / "compiler" / "kernels" / "_probe.py").write_text("from ..ops.base import EmitContext  # noqa: F401\n")
    assert compiler_reaches(copy) == ["delegate.compiler.kernels._probe imports delegate.compiler.ops.base"]


# ---------------------------------------------------------------- reach through duck typing
#
# An import is not the only way to depend on a unit: a function can take a higher layer's object
# through a parameter typed ``Any`` (or ``object``, or not typed) and walk its attributes, and the
# import checks above never see it. This check collects, with ast, the attribute names the classes
# of each unit define (methods, class fields, ``self.x`` assignments); a function that reads, on
# such a parameter (or on a name assigned from it: ``node = graph.nodes[i]``), an attribute only
# the classes of units it may not import define (not those of units it may import, nor the names
# of objects from outside the package: built-in types, the C API the cffi module exposes, the TFLite
# host's interpreter) reaches across the layers.

#: (module, function) -> why its reach is allowed for now; a listed function that no longer
#: reaches must leave the list
DUCK_TYPED_REACHES: dict[tuple[str, str], str] = {}


def _class_attributes(tree: ast.AST) -> set[str]:
    """Every attribute name the classes of ``tree`` define: methods, class-level names and fields,
    and what their methods assign to ``self``."""
    names: set[str] = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for item in cls.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(item.name)
                names |= {
                    n.attr
                    for n in ast.walk(item)
                    if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                    and isinstance(n.value, ast.Name) and n.value.id == "self"
                }  # fmt: skip
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                names.add(item.target.id)
            elif isinstance(item, ast.Assign):
                names |= {t.id for t in item.targets if isinstance(t, ast.Name)}
    return names


def _outside_names() -> set[str]:
    """Attribute names of objects from outside the package, which any layer may hold as ``Any``."""
    import importlib.util

    names: set[str] = set()
    for kind in (str, bytes, dict, list, tuple, set, frozenset, int, float, object, type, BaseException, Path):
        names |= set(dir(kind))
    for header in (ROOT / "csrc").glob("*.h"):  # the C structs and functions of the cffi module
        names |= set(re.findall(r"\b[A-Za-z_]\w*\b", header.read_text()))
    for module in ("ai_edge_litert.interpreter", "tflite_runtime.interpreter"):  # the TFLite hosts
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            continue
        if spec is not None and spec.origin:
            names |= _class_attributes(ast.parse(Path(spec.origin).read_text()))
    return names


def _importable(unit: str, layers: dict[str, int], same_layer: set[tuple[str, str]]) -> set[str]:
    """The units ``unit`` may import, itself included: every lower layer, and those of its own
    layer the table allows, and theirs (``model_run`` -> ``api`` -> ``interpreter``)."""
    allowed = {u for u in layers if layers[u] < layers[unit]} | {unit}
    todo = [unit]
    while todo:
        current = todo.pop()
        for importer, imported in same_layer:
            if importer == current and imported not in allowed:
                allowed.add(imported)
                todo.append(imported)
    return allowed


def _root(expr: ast.expr) -> str | None:
    """The name an attribute, subscript or call chain starts from (``graph`` of ``graph.tensor(i).shape``)."""
    while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Call, ast.Starred)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _bound_names(target: ast.expr) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_bound_names(e) for e in target.elts))
    return _bound_names(target.value) if isinstance(target, ast.Starred) else set()


def _untyped(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return True
    if isinstance(annotation, ast.Constant):
        return annotation.value in ("Any", "object")
    return (isinstance(annotation, ast.Name) and annotation.id in ("Any", "object")) or (
        isinstance(annotation, ast.Attribute) and annotation.attr == "Any"
    )


def _duck_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The parameters of ``function`` typed ``Any``/``object`` or not at all, and the names
    assigned from them (``node = graph.nodes[i]``, ``for node in graph.nodes``)."""
    args = function.args
    ducks = {
        a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
        if a.arg not in ("self", "cls") and _untyped(a.annotation)
    }  # fmt: skip
    grew = bool(ducks)
    while grew:
        grew = False
        for node in ast.walk(function):
            pairs: list[tuple[ast.expr, ast.expr]] = []
            if isinstance(node, ast.Assign):
                pairs = [(t, node.value) for t in node.targets]
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                pairs = [(node.target, node.value)]
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                pairs = [(node.target, node.iter)]
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                pairs = [(node.optional_vars, node.context_expr)]
            for target, value in pairs:
                new = _bound_names(target) - ducks if _root(value) in ducks else set()
                ducks |= new
                grew = grew or bool(new)
    return ducks


def duck_typed_reaches(package: Path = PACKAGE) -> dict[tuple[str, str], set[str]]:
    """(module, function) -> the attributes of units it may not import that it reads through
    parameters typed ``Any`` (see above), over the modules of ``package`` (a folder named delegate)."""
    layers, same_layer = _layer_table()
    trees: dict[str, tuple[str, ast.Module]] = {}
    defined: dict[str, set[str]] = defaultdict(set)
    for path in package.rglob("*.py"):
        if "_generated" in path.parts or path.stem in NOT_UNITS:
            continue
        unit = _unit_of(_module_name(path, package.parent))
        tree = ast.parse(path.read_text())
        trees[path.relative_to(package.parent).as_posix()] = (unit, tree)
        defined[unit] |= _class_attributes(tree)
    outside = _outside_names()
    found: dict[tuple[str, str], set[str]] = defaultdict(set)
    for module, (unit, tree) in sorted(trees.items()):
        allowed = _importable(unit, layers, same_layer)
        own = set().union(*(defined[u] for u in allowed))
        foreign = set().union(*(defined[u] for u in layers if u not in allowed)) - own - outside
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            ducks = _duck_names(function)
            for node in ast.walk(function) if ducks else ():
                if isinstance(node, ast.Attribute) and node.attr in foreign and _root(node) in ducks:
                    found[module, function.name].add(node.attr)
    return dict(found)


def test_no_reach_across_the_layers_through_duck_typing():
    found = duck_typed_reaches()
    reaches = [f"{m} {f}() reads {', '.join(sorted(names))}" for (m, f), names in sorted(found.items())]
    unexplained = [r for r, key in zip(reaches, sorted(found), strict=True) if key not in DUCK_TYPED_REACHES]
    assert unexplained == [], (
        "these functions read attributes of classes of units they may not import (docs/architecture.md, "
        "Layers), through parameters typed Any: pass plain data or an interface of a lower layer:\n"
        + "\n".join(unexplained)
    )
    stale = sorted(set(DUCK_TYPED_REACHES) - set(found))
    assert stale == [], f"no longer reach across the layers: remove from DUCK_TYPED_REACHES: {stale}"


def test_the_duck_typing_rule_can_fail(tmp_path):
    """A deliberate reach is seen: a cache function (layer 1) reading a compiler node's custom
    options through an untyped parameter, and through a name assigned from one typed ``Any``."""
    copy = tmp_path / "delegate"
    for path in PACKAGE.rglob("*.py"):
        target = copy / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    assert not any(module.endswith("_duck_probe.py") for module, _ in duck_typed_reaches(copy))
    (copy / "context" / "_duck_probe.py").write_text(
        "from typing import Any\n\n\n"
        "def untyped(node):\n    return node.custom_options\n\n\n"
        "def walked(graph: Any, index: int) -> bytes:\n"
        "    node = graph.nodes[index]\n    return node.custom_options\n\n\n"
        "def typed(options: bytes) -> int:\n    return options.custom_options  # not duck typed: not flagged\n"
    )
    found = duck_typed_reaches(copy)
    probe = {function: names for (module, function), names in found.items() if module.endswith("_duck_probe.py")}
    assert probe == {"untyped": {"custom_options"}, "walked": {"custom_options"}}


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
