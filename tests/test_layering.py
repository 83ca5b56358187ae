"""The package's layers, models <- plots <- training <- tools: no import runs back up, and models/ imports nothing of
the package outside itself (remote code copies that folder alone)."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / 'timm_minimal'
# what each layer may not import: its name inside the package
FORBIDDEN = {'models': ('training', 'tools', 'cli', 'examples', 'transformers_registration'),
             'plots': ('training', 'tools', 'cli', 'examples', 'transformers_registration'),
             'training': ('tools',)}


def imported_modules(path: Path, module_level: bool = False):
    """Each import of a module as a dotted name inside the package (``training.data``), with its line; with
    ``module_level``, only those that run when the module is imported (not inside a function)."""
    package = path.relative_to(PACKAGE.parent).with_suffix('').parts[:-1]  # ('timm_minimal', 'training')
    tree = ast.parse(path.read_text(), str(path))
    for node in (_module_level(tree) if module_level else ast.walk(tree)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                names = [(base + tuple((node.module or '').split('.')) if node.module else base)]
                if not node.module:  # from . import x: x may be a module
                    names = [base + (alias.name,) for alias in node.names]
            else:
                names = [tuple((node.module or '').split('.'))]
        elif isinstance(node, ast.Import):
            names = [tuple(alias.name.split('.')) for alias in node.names]
        else:
            continue
        for name in names:
            if name and name[0] == 'timm_minimal':
                yield '.'.join(name[1:]), node.lineno


def _module_level(tree: ast.AST):
    """The nodes that run at import: the module's statements and what they hold, but no function or class body."""
    todo = list(ast.iter_child_nodes(tree))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def violations(layer: str):
    for path in sorted((PACKAGE / layer).rglob('*.py')):
        for module, line in imported_modules(path):
            if module.split('.')[0] in FORBIDDEN[layer] or (layer == 'models' and not module.startswith('models')):
                yield f'{path.relative_to(PACKAGE.parent)}:{line} imports timm_minimal.{module}'


@pytest.mark.parametrize('layer', sorted(FORBIDDEN))
def test_no_import_runs_back_up(layer):
    assert list(violations(layer)) == []


def test_the_check_sees_an_import_that_runs_back_up(tmp_path, monkeypatch):
    fake = tmp_path / 'timm_minimal'
    (fake / 'training').mkdir(parents=True)
    (fake / 'models').mkdir()
    (fake / 'training' / 'bad.py').write_text('from ..tools.app import build_app\nfrom . import data\n')
    (fake / 'models' / 'bad.py').write_text('import timm_minimal.training.train\nfrom ..cli import command\n'
                                            'from .layers import Block\n')
    monkeypatch.setattr(__import__(__name__), 'PACKAGE', fake)
    assert list(violations('training')) == ['timm_minimal/training/bad.py:1 imports timm_minimal.tools.app']
    assert list(violations('models')) == ['timm_minimal/models/bad.py:1 imports timm_minimal.training.train',
                                          'timm_minimal/models/bad.py:2 imports timm_minimal.cli']


def test_the_machine_facts_import_nothing_of_the_package():
    """machine.py is read by the trainer and by tools that start without it (the zoo's cache folder)."""
    assert list(imported_modules(PACKAGE / 'machine.py')) == []


# the run folder's on-disk format: what a tool that reads or writes run folders may enter of training/
RUN_FOLDER_FORMAT = {'training', 'training.run', 'training.run.checkpoint', 'training.run.files',
                     'training.run.folder', 'training.run.record'}


@pytest.mark.slow
def test_publishing_the_zoo_enters_only_the_run_folder_format_of_training(tmp_path):
    """``timm-minimal-publish --zoo`` finds its cache folder in machine.py: no parser, option or data module of the
    trainer is imported on the way."""
    script = ('import sys\nfrom timm_minimal.tools.hub import publish\n'
              f"rc = publish.main(['--zoo', '--output', {str(tmp_path / 'zoo')!r}, '--only', "
              f"'vit_minimal_sym_6x4.mnist', '--cards', {str(PACKAGE.parent / 'model_cards')!r}])\n"
              "print(rc, *sorted(m[13:] for m in sys.modules if m.startswith('timm_minimal.training')))\n")
    out = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True, check=True).stdout
    rc, *modules = out.splitlines()[-1].split()
    assert rc == '0' and (tmp_path / 'zoo' / 'vit_minimal_sym_6x4.mnist' / 'model.safetensors').is_file()
    assert 'training.run.record' in modules and set(modules) <= RUN_FOLDER_FORMAT, modules


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix('').parts
    return '.'.join(parts[1:-1] if parts[-1] == '__init__' else parts[1:])


def import_graph():
    """Each module of the package (``training.train``) and the package modules its import runs: what it imports at
    module level, and the packages above each (importing ``training.data.paths`` runs ``training/__init__.py`` and
    ``training/data/__init__.py`` first)."""
    paths = {module_name(p): p for p in PACKAGE.rglob('*.py')}
    graph = {}
    for name, path in paths.items():
        edges = set()
        for module, _ in imported_modules(path, module_level=True):
            parts = module.split('.')
            edges.update('.'.join(parts[:i]) for i in range(1, len(parts) + 1) if '.'.join(parts[:i]) in paths)
        graph[name] = edges - {name, ''}
    return graph


def circles(graph):
    """The import circles of ``graph``: each set of modules that reach each other (Tarjan's strongly connected
    components of more than one module)."""
    index, low, stack, found = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_at_module_level():
    """No modules of the package import each other when they are imported: training's core and its sub-packages
    (data/, run/, cpu/) are layers, not folders that reach into each other."""
    graph = import_graph()
    assert {'training.train', 'training.data.paths', 'machine'} <= set(graph)
    assert 'training.run.files' in graph['training.data.loading']
    assert circles(graph) == []


def test_the_circle_check_finds_a_circle():
    assert circles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]
    assert circles({'a': {'b'}, 'b': set()}) == []


# An import inside a function buys a fast start (a command's --help, a module read by tools that start without
# torch), an optional extra, or a package imported only where it is used (matplotlib); each says which, marked
# "# lazy: <why>" on its line. Every other import sits at the top of its module.
MOST_IMPORTS_INSIDE_FUNCTIONS = 140


def imports_inside_functions():
    for path in sorted(PACKAGE.rglob('*.py')):
        lines = path.read_text().splitlines()
        tree = ast.parse('\n'.join(lines), str(path))
        inside = {node for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom))}
        for node in sorted(inside, key=lambda n: n.lineno):
            text = '\n'.join(lines[node.lineno - 1:node.end_lineno])
            yield f'{path.relative_to(PACKAGE.parent)}:{node.lineno}', '# lazy' in text


def test_imports_inside_functions_are_few_and_each_says_why():
    found = list(imports_inside_functions())
    assert 20 < len(found) <= MOST_IMPORTS_INSIDE_FUNCTIONS, len(found)
    assert [where for where, marked in found if not marked] == []


# Training's sub-packages are layers below its core: data/ (the datasets and data paths), cpu/ (how a run trains on
# the CPU) and run/ (the run folder's on-disk format) read the options, the seeds and the run's log, and nothing else
# of the trainer's core (engine, plan, train, its command line and stages).
TRAINING_LEAVES = {'training.options', 'training.seeding', 'training.log'}
TOOL_ROOMS = {'hub', 'deploy', 'inside', 'paper', 'benchmark'}


def layer_breaches(graph):
    core = {m for m in graph if m.startswith('training.') and m.count('.') == 1
            and not (PACKAGE / m.replace('.', '/')).is_dir()}
    for module in sorted(graph):
        if module.split('.')[:2] in (['training', 'data'], ['training', 'cpu'], ['training', 'run']):
            yield from (f'{module} imports {name}' for name in sorted(graph[module] & (core - TRAINING_LEAVES)))
        parts = module.split('.')  # the tools' shared modules (tools/*.py) import no room
        if parts[0] == 'tools' and len(parts) == 2:
            yield from (f'{module} imports {name}' for name in sorted(graph[module])
                        if name.split('.')[0] == 'tools' and name.split('.')[1:2] and name.split('.')[1] in TOOL_ROOMS)


def test_trainings_parts_and_the_tools_shared_modules_are_layers():
    graph = import_graph()
    assert {'training.data.paths', 'training.cpu.policy', 'training.run.folder', 'training.log'} <= set(graph)
    assert list(layer_breaches(graph)) == []


def test_the_layer_check_sees_a_breach():
    graph = {'training.engine': set(), 'training.options': set(), 'training.data.paths': {'training.engine',
             'training.options'}, 'tools.common': {'tools.hub.zoo'}, 'tools.hub.zoo': set()}
    assert list(layer_breaches(graph)) == ['tools.common imports tools.hub.zoo',
                                           'training.data.paths imports training.engine']
