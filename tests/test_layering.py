"""The house's layering (README, "Layout"), read from every import in the code, those inside
functions too: no module of keras_transformer/ imports one above it, none imports trainers/,
benchmarks/ or tests/, and the imports among its modules have no circle."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "keras_transformer"
# Left to right: each may import only what stands to its right; writing and signals serve all.
LAYERS = [("export",), ("training",), ("runs",), ("evaluation",), ("inference",), ("data",),
          ("tokenizer",), ("model",), ("layers", "decoding", "config"), ("writing",), ("signals",)]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def modules():
    """{module name: the module names it imports} for every module of the package."""
    found = {}
    for folder, _, names in os.walk(os.path.join(ROOT, PACKAGE)):
        for name in names:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            parts = os.path.relpath(path, ROOT)[:-len(".py")].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            with open(path, encoding="utf-8") as stream:
                tree = ast.parse(stream.read())
            imported = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    imported.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    imported.add(node.module)
                    imported.update(f"{node.module}.{alias.name}" for alias in node.names)
            found[".".join(parts)] = imported
    return {name: {m for m in imported if m in found or m.split(".")[0] in
                   ("trainers", "benchmarks", "tests")} for name, imported in found.items()}


def group(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_no_module_imports_one_above_it_or_the_programs():
    graph = modules()
    assert len(graph) > 30
    upward = []
    for module, imported in graph.items():
        for target in imported:
            assert target.split(".")[0] == PACKAGE, f"{module} imports {target}"
            source_group, target_group = group(module), group(target)
            if None in (source_group, target_group) or source_group == target_group:
                continue  # the package's own lazy __init__, or within one room
            if RANK[target_group] <= RANK[source_group]:
                upward.append(f"{module} -> {target}")
    assert not upward, upward


def test_no_circle_among_the_modules():
    graph = modules()
    # Imports of a package's __init__ (lazy re-exports) are not arrows between rooms.
    edges = {module: {t for t in imported if t != PACKAGE and graph.get(t) is not None
                      and not (t in module and module.startswith(t + "."))}
             for module, imported in graph.items()}
    state, path = {}, []

    def visit(module):
        state[module] = "open"
        path.append(module)
        for target in edges[module]:
            if state.get(target) == "open":
                raise AssertionError("circle: " + " -> ".join(path[path.index(target):] + [target]))
            if target not in state:
                visit(target)
        path.pop()
        state[module] = "done"

    for module in edges:
        if module not in state:
            visit(module)
