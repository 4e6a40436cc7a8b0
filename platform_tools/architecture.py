"""The project's structure as its sources state it: the layers, the import graph between the project's modules, and
the size limits a module and a function are held to. `docs/architecture.md` carries a generated map of the modules
by layer (between the markers below); `python -m platform_tools.architecture` (or `make docs`) writes it, and
tests/test_architecture.py fails when the map is stale, a module imports upward or in a circle, or a module or
function is over its limit without its reason.

Read from the source files (ast), never imported, so a module whose import would fail or register resources is read
all the same, and imports under TYPE_CHECKING or inside functions count like any other.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE_FILE = ROOT / "docs" / "architecture.md"
# Lowest first: a module may import its own layer's package and the layers below, never one above. The tools run
# the preview's stack reading and release records, so they sit above it.
LAYERS: tuple[tuple[str, str], ...] = (
    ("platform_config", "the stack config: its schema, the checks, the catalogs and pins, the registry"),
    ("components", "the plan resolved once from the config, the pure builders, and one ComponentResource a module"),
    ("preview", "the offline preview: the program under the mock engine, the stages, the report"),
    ("platform_tools", "commands run beside `pulumi up`: canary steps, registry aliases, stack edits"),
)
# Apart on purpose: the policy pack runs in its own process and virtualenv, and imports nothing of the project.
POLICY_PACK = "policies"
MODULE_LINES = 450
MODULE_LINES_AT_MOST = 600
FUNCTION_LINES = 80
# What a module over MODULE_LINES says within its first lines, and a function over FUNCTION_LINES in its docstring.
LONG_MODULE = "# Long module: "
LONG_FUNCTION = "Long because"
BEGIN = "<!-- generated: python -m platform_tools.architecture -->"
END = "<!-- end of generated -->"


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module
    text: str

    @property
    def lines(self) -> int:
        return len(self.text.splitlines())

    @property
    def package(self) -> str:
        return self.name.split(".")[0]

    @property
    def summary(self) -> str:
        """The first sentence of the module's docstring."""
        paragraph = " ".join((ast.get_docstring(self.tree) or "").strip().split("\n\n")[0].split())
        sentence, stop, _ = paragraph.partition(". ")
        return sentence + stop.strip()


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _read_module(path: Path, root: Path) -> Module:
    text = path.read_text()
    name = _module_name(path, root)
    return Module(name, path, ast.parse(text, str(path)), text)


def project_modules(root: Path = ROOT) -> dict[str, Module]:
    """Every module of the layers' packages and of the policy pack's, by dotted name (the pack's under `policies`)."""
    found: dict[str, Module] = {}
    for package in [name for name, _ in LAYERS] + [POLICY_PACK]:
        for path in sorted((root / package).rglob("*.py")):
            if "venv" in path.relative_to(root).parts:
                continue
            module = _read_module(path, root)
            found[module.name] = module
    return found


def test_modules(root: Path = ROOT) -> dict[str, Module]:
    """The modules outside the layers, by dotted name: the suite's (tests/**/*.py, its servers' and helpers' folders
    included), the benchmarks' (benchmarks/**/*.py) and the entry point (`__main__`), read as project_modules reads the
    layers', so that the size rules hold them as they hold the layers' (`modules_over_their_limit`,
    `functions_over_their_limit`); the module map and the import rules stay the layers' and the pack's."""
    paths = [*sorted((root / "tests").rglob("*.py")), *sorted((root / "benchmarks").rglob("*.py")), root / "__main__.py"]
    return {module.name: module for module in (_read_module(path, root) for path in paths if path.is_file())}


# A function of this module, not a test: pytest must not collect it where a test module imports it by name.
setattr(test_modules, "__test__", False)


def _imported(module: Module) -> set[str]:
    """Every dotted name a module imports, relative imports resolved; the pack's own package is `policies.<name>`."""
    is_package = module.path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.name.split(".") if is_package else module.name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
                if module.package == POLICY_PACK and target.split(".")[0] == "inference_governance":
                    target = f"{POLICY_PACK}.{target}"
            names.add(target)
            names.update(f"{target}.{alias.name}" for alias in node.names)
    return names


def import_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Which project modules each module imports (a name imported from a package counts as the package's module
    that defines it, where there is one)."""
    graph: dict[str, set[str]] = {}
    for name, module in modules.items():
        targets = set()
        for imported in _imported(module):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def upward_imports(modules: dict[str, Module], graph: dict[str, set[str]]) -> list[str]:
    """Each import from a lower layer to a higher one, and any import between the pack and the project."""
    rank = {package: i for i, (package, _) in enumerate(LAYERS)}
    wrong = []
    for name, targets in sorted(graph.items()):
        for target in sorted(targets):
            source_package, target_package = modules[name].package, modules[target].package
            if POLICY_PACK in (source_package, target_package):
                if source_package != target_package:
                    wrong.append(f"{name} -> {target}")
            elif rank[target_package] > rank[source_package]:
                wrong.append(f"{name} -> {target}")
    return wrong


def declares_component(module: Module) -> bool:
    """Whether the module declares a pulumi ComponentResource (a class whose base is named ComponentResource)."""
    return any(
        isinstance(node, ast.ClassDef)
        and any(
            (base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")) == "ComponentResource"
            for base in node.bases
        )
        for node in ast.walk(module.tree)
    )


def pure_modules_importing_components(modules: dict[str, Module], graph: dict[str, set[str]]) -> list[str]:
    """Each import, inside the components layer, from a module that declares no ComponentResource (the plan, its
    shapes, the pure builders, the backends) to one that declares one: a builder that reaches a component would run
    Pulumi's machinery where a plain value serves, and the plan would again depend on what it plans."""
    components = {name for name, module in modules.items() if module.package == "components" and declares_component(module)}
    return [
        f"{name} -> {target}"
        for name, targets in sorted(graph.items())
        if modules[name].package == "components" and name not in components
        for target in sorted(targets & components)
    ]


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        circles.append(sorted(group))
    return sorted(circles)


def modules_over_their_limit(modules: dict[str, Module]) -> list[str]:
    """Modules over MODULE_LINES_AT_MOST, and those over MODULE_LINES without a LONG_MODULE line at their top."""
    over = []
    for module in modules.values():
        top = module.text.splitlines()[:3]
        if module.lines > MODULE_LINES_AT_MOST:
            over.append(f"{module.name}: {module.lines} lines, more than {MODULE_LINES_AT_MOST}")
        elif module.lines > MODULE_LINES and not any(line.startswith(LONG_MODULE) for line in top):
            over.append(f"{module.name}: {module.lines} lines without `{LONG_MODULE}<why>` at its top")
    return sorted(over)


def functions_over_their_limit(modules: dict[str, Module]) -> list[str]:
    """Functions over FUNCTION_LINES whose docstring gives no reason (LONG_FUNCTION)."""
    over = []
    for module in modules.values():
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES and LONG_FUNCTION not in (ast.get_docstring(node) or ""):
                    over.append(f"{module.name}.{node.name}: {length} lines")
    return sorted(over)


def definitions(modules: dict[str, Module], name: str) -> list[str]:
    """The modules that define `name` at their top level (a def, a class or an assignment), leading underscores
    aside (a private copy is a copy), the pack apart: a value that must have one home is defined in one of them."""
    wanted = name.lstrip("_")
    found = []
    for module in modules.values():
        if module.package == POLICY_PACK:
            continue
        for node in module.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                continue
            if any(n.lstrip("_") == wanted for n in names):
                found.append(module.name)
                break
    return sorted(found)


def string_constants(module: Module) -> list[str]:
    """Every string literal a module holds (docstrings included), in the order written."""
    return [node.value for node in ast.walk(module.tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def string_assignments(module: Module) -> dict[str, str]:
    """The module's top-level names bound to a string literal (`NAME = "..."`), with their strings."""
    found = {}
    for node in module.tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            found.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return found


def string_collections(module: Module) -> list[set[str]]:
    """The string literals of each set, list or tuple literal the module writes (a collection of names)."""
    found = []
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            found.append({e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)})
    return found


def attribute_readers(modules: dict[str, Module], attribute: str) -> list[str]:
    """The modules that read `.attribute` of anything (the pack apart): a config field read in one place only."""
    return sorted(
        module.name
        for module in modules.values()
        if module.package != POLICY_PACK
        and any(isinstance(node, ast.Attribute) and node.attr == attribute for node in ast.walk(module.tree))
    )


def module_map(modules: dict[str, Module]) -> str:
    """The generated part of docs/architecture.md: each layer's modules, each with its docstring's first sentence."""
    out = [BEGIN, ""]
    for package, role in [*LAYERS, (POLICY_PACK, "the CrossGuard policy pack, apart: its own process and virtualenv")]:
        members = [m for m in modules.values() if m.package == package]
        out += [f"### `{package}/`: {role}", "", "| module | what it is |", "|---|---|"]
        out += [f"| `{m.name}` | {m.summary.replace('|', '/')} |" for m in members]
        out.append("")
    out.append(END)
    return "\n".join(out)


def rendered(current: str, modules: dict[str, Module]) -> str:
    """docs/architecture.md with its generated part replaced."""
    head, _, rest = current.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + module_map(modules) + tail


def main() -> int:
    current = ARCHITECTURE_FILE.read_text()
    if BEGIN not in current or END not in current:
        print(f"error: {ARCHITECTURE_FILE} has no generated part ({BEGIN} ... {END})", file=sys.stderr)
        return 2
    ARCHITECTURE_FILE.write_text(rendered(current, project_modules()))
    print(f"wrote {ARCHITECTURE_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
