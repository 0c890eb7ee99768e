"""The house's layering (README, "Layout"), read from every import in the code, those inside
functions too: no module of keras_transformer/ imports one above it, none imports trainers/,
benchmarks/, docs/ or tests/, and the imports among its modules have no circle."""

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "keras_transformer"
# Left to right: each may import only what stands to its right; writing and signals serve all.
LAYERS = [("export",), ("training",), ("runs",), ("evaluation",), ("inference",), ("data",),
          ("tokenizer",), ("weights",), ("model",), ("layers", "decoding", "config"), ("writing",),
          ("signals",)]
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
                   ("trainers", "benchmarks", "docs", "tests")} for name, imported in found.items()}


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


# --- the rest of the architecture: the edges of the house (issue 33) ------------------------------


def _python_files(folder):
    for parent, _, names in os.walk(os.path.join(ROOT, folder)):
        for name in sorted(names):
            if name.endswith(".py"):
                yield os.path.join(parent, name)


def _parsed(path):
    with open(path, encoding="utf-8") as stream:
        source = stream.read()
    return source, ast.parse(source)


def test_benchmarks_are_an_instrument_of_bounded_size():
    """benchmarks/ holds the instrument (report, targets, throughput, decoding against CTranslate2,
    input pipeline, step profile, the recipe sweep and its checkpoint selections, the OpenNMT-tf
    twin), not a lab notebook of one-off harnesses."""
    lines, long_functions = 0, []
    for path in _python_files("benchmarks"):
        source, tree = _parsed(path)
        lines += len(source.splitlines())
        long_functions += [f"{os.path.relpath(path, ROOT)}:{node.lineno} {node.name} "
                           f"({node.end_lineno - node.lineno + 1} lines)"
                           for node in ast.walk(tree)
                           if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                           and node.end_lineno - node.lineno + 1 > 80]
    assert lines <= 2650, f"benchmarks/ has {lines} lines"
    assert not long_functions, long_functions


def _search_calls(text):
    return re.findall(r"\b(?:beam_search|greedy_search|sample_search)\(", text)


def test_only_the_translators_door_assembles_a_search():
    """``Translator.search`` is the one place (besides decoding.py, which defines the searches)
    that calls beam_search, greedy_search or sample_search: in the library, the programs, the benchmarks, the
    docs and the notebooks. Tests may build independent references by hand."""
    found = []
    for folder in ("keras_transformer", "trainers", "benchmarks", "docs", "notebooks"):
        for parent, _, names in os.walk(os.path.join(ROOT, folder)):
            for name in names:
                path = os.path.join(parent, name)
                relative = os.path.relpath(path, ROOT)
                if relative == os.path.join("keras_transformer", "decoding.py"):
                    continue
                if not name.endswith((".py", ".md", ".ipynb")):
                    continue
                with open(path, encoding="utf-8") as stream:
                    text = stream.read()
                if relative == os.path.join("keras_transformer", "inference.py"):
                    door = next(node for node in ast.walk(ast.parse(text))
                                if isinstance(node, ast.FunctionDef) and node.name == "search")
                    inside = "\n".join(text.splitlines()[door.lineno - 1:door.end_lineno])
                    text = text.replace(inside, "")
                found += [relative] * len(_search_calls(text))
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as stream:
        found += ["README.md"] * len(_search_calls(stream.read()))
    assert not found, found


def _imported_modules(tree):
    """Every module name an import names; a relative import's (``from . import wmt``) bare."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            yield base
            yield from (f"{base}.{alias.name}" if base else alias.name for alias in node.names)


def test_programs_share_configs_not_each_other():
    """A program (a trainers module with main) imports no other program: what two programs share
    lives in the flag modules, which return configs, and in the library."""
    programs = {os.path.basename(path)[:-len(".py")] for path in _python_files("trainers")
                if "def main(" in _parsed(path)[0]}
    assert {"wmt", "quickstart"} <= programs
    crossings = []
    for name in sorted(programs):
        imported = set(_imported_modules(_parsed(os.path.join(ROOT, "trainers", f"{name}.py"))[1]))
        crossings += [f"{name} imports {other}" for other in sorted(programs - {name})
                      if {f"trainers.{other}", other} & imported]
    assert not crossings, crossings


def test_the_model_names_its_optional_layers():
    """Optional layers (learned positions) are attributes set to None when absent, not probed."""
    source, _ = _parsed(os.path.join(ROOT, PACKAGE, "model.py"))
    assert "getattr(" not in source and "hasattr(" not in source


def _public_names(tree):
    return {node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_")}


def test_every_module_is_exercised_by_a_test_file():
    """Most modules have their own tests/test_<module>.py; the others are exercised by the test
    file of the concept they serve (e.g. the encoder and decoder layers by
    test_encoder_decoder.py): some test names the module, or runs it as a program, or uses one of
    its public functions or classes. None is left untested (docs/development.md, "Tests")."""
    used = set()
    for path in _python_files("tests"):
        source, tree = _parsed(path)
        used.update(_imported_modules(tree))
        used.update(re.findall(r"\b(?:trainers|keras_transformer)(?:\.\w+)+", source))
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.alias):
                used.add(node.name.split(".")[-1])
    untested = []
    for folder in (PACKAGE, "trainers"):
        for path in _python_files(folder):
            parts = os.path.relpath(path, ROOT)[:-len(".py")].split(os.sep)
            if parts[-1] in ("__init__", "__main__"):
                continue
            module = ".".join(parts)
            own_test = os.path.isfile(os.path.join(ROOT, "tests", f"test_{parts[-1]}.py"))
            if not (own_test or module in used or _public_names(_parsed(path)[1]) & used):
                untested.append(module)
    assert not untested, untested
