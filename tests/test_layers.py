"""bertwb's layers: no module imports one above it, no modules import each other, and every function-level
import has a reason.

`LAYERS` places every module bottom up, with why; a module imports its own layer and those below, and no
circle of imports runs within a layer. Every import counts (module level, inside a function, under
TYPE_CHECKING: a lazy or typing-only import still ties two modules together), read with ast, nothing run;
so does the stage registry's loading of every module of its package by name (`registry_loads`).
An import inside a function is allowed only to keep a heavy library (`HEAVY`) out of light commands such
as `bertwb status`: the module it imports loads one that the importing module does not, and a comment
at the head of its block of imports says so. There are no exceptions.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from conftest import REPO

# Bottom up. A name covers the module or the package of that name (the longest name that matches wins).
LAYERS: list[tuple[str, dict[str, str]]] = [
    ("foundation", {
        "bertwb": "the package's face: its version, and the parent every module loads",
        "bertwb.errors": "the one user-error type and the exit codes",
        "bertwb.ui": "all terminal output; knows no stage, model or file",
        "bertwb.config": "the typed sections of bertwb.yaml: what every part reads its settings from",
        "bertwb.faults": "the test-only fault hook that every writer calls",
        "bertwb.memory": "glibc's allocator settings, set before torch loads",
        "bertwb.cpuinfo": "this CPU's facts (flags, maker) for the rules that choose by CPU",
        "bertwb.environment": "disk, permission and memory failures as one line, for any writer",
        "bertwb.textinput": "text as users give it (arguments, files, stdin): decoding and lines, for any reader",
        "bertwb.artifacts": "the files stages and runs leave (manifests, metrics, results), without torch",
    }),
    ("workspace", {
        "bertwb.workspace": "paths, the lock and atomic writes: the ground every writer stands on",
        "bertwb.outputs": "which paths a command may not write over: the workspace's and the config's",
    }),
    ("data", {
        "bertwb.data": "corpus readers, pairs, masking, batching, tokenizers, and who runs the data stages' tasks "
                       "and where their tables' rows go (executor, sinks); knows no model",
        "bertwb.embed.pooling": "how a model's vectors are pooled (sentence-transformers' config as data)",
    }),
    ("model", {
        "bertwb.model": "the plain BERT, its heads, Hugging Face names and model directories",
        "bertwb.fast": "faster CPU subclasses of the model's pieces, installed by whoever trains a model",
    }),
    ("train", {
        "bertwb.train": "the one trainer and its parts, for any objective; knows no task",
    }),
    ("tasks", {
        "bertwb.tasks": "what is learned: pre-training's and each fine-tuning type's objective, data and prediction",
        "bertwb.embed": "the feature-based use of a model: inputs, the encoder, vectors written and searched",
    }),
    ("stages", {
        "bertwb.stage": "the contract a stage declares and the engine reads",
        "bertwb.stages": "one module per stage: a task's training or a data step, keyed and cached",
        "bertwb.keys": "stage keys: a stage's declared settings, its upstreams' identities and its input fingerprints",
    }),
    ("engine", {
        "bertwb.current": "what the current config makes of any stage (its key, its run), through the stage registry",
        "bertwb.embed.source": "which model `embed` reads (pretrain, a task, a folder) and its identity, by the keys",
        "bertwb.engine": "keys, freshness, running, launching and status of any stage",
        "bertwb.commit": "the engine's atomic commit of a stage's tables, directory and manifest",
        "bertwb.disk": "the bytes each stage's outputs take, for status",
        "bertwb.embed.store": "`embed --into` tables keyed and committed like a stage, and their status rows",
    }),
    ("commands", {
        "bertwb.sql": "`bertwb sql`: queries over the workspace's database",
        "bertwb.inference": "`bertwb fill-mask` and `nsp` on a pre-trained model",
        "bertwb.report": "`bertwb report`: figures and a page from every stage's artifacts",
        "bertwb.compare": "`bertwb compare`: several workspaces' manifests side by side",
        "bertwb.scaffold": "`bertwb init`: a new project's starting files",
        "bertwb.recipes": "`bertwb init --recipe`: configs for one purpose, sized by measuring the machine",
        "bertwb.embed.run": "`bertwb embed` and `similar`: read, encode, write or search",
        "bertwb.docs_config": "docs/configuration.md from the typed config and every task type's options",
    }),
    ("cli", {
        "bertwb.cli": "the commands, a family a module, on one group: parse, load the config, call one function, print",
        "bertwb.configfile": "bertwb.yaml and --set read into config: each task type declares its options (tasks/)",
        "bertwb.__main__": "python -m bertwb",
    }),
]

# What light commands never load; a function-level import is there to keep one of these out.
HEAVY = ("torch", "safetensors", "transformers", "matplotlib", "scipy", "sklearn", "seqeval", "ray")


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str  # a bertwb module
    line: int
    where: str  # "module", "function", "typing" (under TYPE_CHECKING, at module level) or "registry"
    commented: bool  # a comment on the first line of its block of imports (function-level imports)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((REPO / "bertwb").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _module_of(name: str) -> str:
    """The bertwb module an imported name lives in: ``bertwb.engine`` for ``bertwb.engine.run_pipeline``."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _statements(module: str, tree: ast.Module):
    """(statement, where, commented) of every import statement: module, function or typing, and whether the
    first line of its block of consecutive imports carries a comment."""
    lines = MODULES[module].read_text(encoding="utf-8").splitlines()

    def visit(body: list[ast.stmt], where: str):
        commented = None  # the block's comment, while in a block of imports
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if commented is None:
                    commented = "#" in lines[node.lineno - 1]
                yield node, where, commented
                continue
            commented = None
            inner_where = where
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner_where = "function"
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) and where == "module":
                inner_where = "typing"
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.AST):
                    yield from visit([s for h in inner for s in h.body] if field == "handlers" else inner, inner_where)

    yield from visit(tree.body, "module")


def _imports(module: str) -> tuple[list[Import], list[str]]:
    """The bertwb imports of ``module``, and the other top-level packages it loads at module level."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found, loads = [], []
    for node, where, commented in _statements(module, ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1], *filter(None, [base])])
            names = [f"{base}.{alias.name}" for alias in node.names] if base.startswith("bertwb") else [base]
        for name in names:
            if name == "bertwb" or name.startswith("bertwb."):
                found.append(Import(module, _module_of(name), node.lineno, where, commented))
            elif where == "module":
                loads.append(name.split(".")[0])
    return found, loads


def registry_loads(module: str) -> list[Import]:
    """The modules a package loads by name, all of its own (`bertwb.stages` finds its stages with pkgutil and
    importlib): an import ast cannot see, and one that closes a circle (a stage module that imports what
    reads the registry) as surely as a written one."""
    path = MODULES[module]
    text = path.read_text(encoding="utf-8")
    if path.name != "__init__.py" or "iter_modules(__path__)" not in text or "import_module(" not in text:
        return []
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "iter_modules(__path__)" in row)
    return [Import(module, child, line, "registry", True) for child in MODULES
            if child.rpartition(".")[0] == module]


IMPORTS = {module: ((found := _imports(module))[0] + registry_loads(module), found[1]) for module in MODULES}


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest placed name that is ``module`` or a package holding it."""
    best = None
    for index, (_, places) in enumerate(LAYERS):
        for name in places:
            if (module == name or module.startswith(name + ".")) and (best is None or len(name) > len(best[1])):
                best = (index, name)
    assert best is not None, f"{module} is in no layer: place it in LAYERS with a one-line reason"
    return best[0]


def upward(imports: list[Import]) -> list[Import]:
    """The imports among ``imports`` from a higher layer."""
    return [i for i in imports if layer_of(i.imported) > layer_of(i.importer)]


def heavy_loads(module: str) -> set[str]:
    """The HEAVY libraries that importing ``module`` loads (its packages' and its imports', at module level)."""
    heavy, todo, seen = set(), [module], set()
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for prefix in (".".join(parts[:n]) for n in range(1, len(parts) + 1)):
            if prefix in seen or prefix not in MODULES:
                continue
            seen.add(prefix)
            imports, loads = IMPORTS[prefix]
            heavy.update(lib for lib in loads if lib in HEAVY)
            todo.extend(i.imported for i in imports if i.where == "module")
    return heavy


def needless(imports: list[Import]) -> list[Import]:
    """Function-level imports among ``imports`` that load nothing heavy their module has not, or lack their comment."""
    return [i for i in imports if i.where == "function" and i.imported != i.importer
            and (not heavy_loads(i.imported) - heavy_loads(i.importer) or not i.commented)]


def circles(imports: list[Import]) -> list[list[str]]:
    """The import circles among ``imports``: each set of modules that reach one another (a strongly
    connected component of the import graph, any kind of import an edge), sorted."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        if i.imported != i.importer:
            graph.setdefault(i.importer, set()).add(i.imported)

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reached = {module: reach(module) for module in graph}
    found = {tuple(sorted(m for m in reached[module] if module in reached.get(m, ()))) for module in graph
             if module in reached[module]}
    return sorted(list(circle) for circle in found)


def _all() -> list[Import]:
    return [i for imports, _ in IMPORTS.values() for i in imports]


def test_every_module_has_a_layer_and_every_placed_name_exists():
    for module in MODULES:
        layer_of(module)
    for _, places in LAYERS:
        for name in places:
            assert name in MODULES, f"LAYERS places {name}, which is no module or package of bertwb"


def test_no_module_imports_from_a_layer_above_its_own():
    found = [(i.importer, i.imported, i.line) for i in upward(_all())]
    assert not found, f"imports that go up the layers (importer, imported, line): {found}; LAYERS gives the order"


def test_a_function_level_import_keeps_something_heavy_out_and_says_so():
    found = [(i.importer, i.imported, i.line) for i in needless(_all())]
    assert not found, (f"function-level imports that keep nothing of {HEAVY} out, or whose block of imports does "
                       f"not say what it keeps out (importer, imported, line): {found}; import them at module "
                       "level, or add the comment")


def test_no_modules_import_each_other_lazily_typing_only_or_at_all():
    found = circles(_all())
    assert not found, (f"import circles (each the modules that import one another, by any import: module level, in "
                       f"a function, under TYPE_CHECKING or by the stage registry's loading): {found}; move the "
                       "shared piece down a module, or pass what is needed in")


def test_the_checks_catch_what_they_look_for():
    """A planted upward import and a planted needless one are found; the real ones above are not made up."""
    planted = Import("bertwb.data.pairs", "bertwb.engine", 1, "function", True)
    assert upward([planted]) == [planted]
    assert not upward([Import("bertwb.engine", "bertwb.data.pairs", 1, "module", False)])
    assert needless([Import("bertwb.engine", "bertwb.errors", 1, "function", True)])  # loads nothing heavy
    assert needless([Import("bertwb.engine", "bertwb.train.trainer", 1, "function", False)])  # no comment
    assert not needless([Import("bertwb.engine", "bertwb.train.trainer", 1, "function", True)])  # torch, said so
    assert "torch" in heavy_loads("bertwb.train.trainer") and not heavy_loads("bertwb.engine")
    found = {(i.importer, i.imported, i.where) for i in _all()}
    assert ("bertwb.engine", "bertwb.train.distributed", "function") in found  # function-level imports are read
    assert ("bertwb.stage", "bertwb.workspace", "typing") in found  # and TYPE_CHECKING ones
    assert ("bertwb.stages", "bertwb.stages.evaluate", "registry") in found  # and the registry's loading by name
    registry = [Import("bertwb.stages", "bertwb.stages.evaluate", 23, "registry", True),
                Import("bertwb.stages.evaluate", "bertwb.keys", 18, "module", False),
                Import("bertwb.keys", "bertwb.stages", 17, "module", False)]
    assert circles(registry) == [["bertwb.keys", "bertwb.stages", "bertwb.stages.evaluate"]]  # as keys.py was
    lazy = [Import("bertwb.data.pairs", "bertwb.data.masking", 1, "module", False),
            Import("bertwb.data.masking", "bertwb.data.scripts", 1, "module", False),
            Import("bertwb.data.scripts", "bertwb.data.pairs", 9, "function", True)]
    assert circles(lazy) == [["bertwb.data.masking", "bertwb.data.pairs", "bertwb.data.scripts"]]
    typing_only = [Import("bertwb.train.trainer", "bertwb.train.optim", 1, "module", False),
                   Import("bertwb.train.optim", "bertwb.train.trainer", 5, "typing", False)]
    assert circles(typing_only + lazy[:2]) == [["bertwb.train.optim", "bertwb.train.trainer"]]


# A stage module says what rows a table gets and what its tasks do; who runs the tasks and where the rows land
# are the build's choice (`Build.map`, `Build.rows`), made once from workspace.executor.
_EXECUTOR_WORDS = re.compile(r"\bray\b|executor", re.IGNORECASE)


def executor_mentions(text: str) -> list[int]:
    """The lines of ``text`` that name an executor (``ray``, ``executor``, ``workspace.executor``)."""
    return [number for number, line in enumerate(text.splitlines(), 1) if _EXECUTOR_WORDS.search(line)]


def test_no_stage_module_names_an_executor():
    """So each data stage has one code path, whichever executor runs it; a planted branch is found."""
    found = {path.relative_to(REPO).as_posix(): lines for path in sorted((REPO / "bertwb" / "stages").rglob("*.py"))
             if (lines := executor_mentions(path.read_text(encoding="utf-8")))}
    assert not found, (f"stage modules that name an executor (file: lines): {found}; ask the build instead "
                       "(build.map, build.workers, build.rows)")
    assert executor_mentions('x = 1\nif cfg.workspace.executor == "ray":\n    # on Ray, tasks write files') == [2, 3]
    assert not executor_mentions("array = np.zeros(3)  # a stray x-ray of the data\n".replace("x-ray", "xray"))
