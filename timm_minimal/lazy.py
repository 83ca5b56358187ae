"""Names a package exports from its submodules, imported when first asked for (PEP 562).

A package whose modules import torch, timm or transformers names what it exports by home module, and its
``__getattr__`` and ``__dir__`` hand over to a ``LazyNames``::

    _NAMES = LazyNames(__name__, {'measure': ('count_flops', ...), 'report': ('render_report',)}, globals())
    __getattr__, __dir__ = _NAMES.getattr, _NAMES.dir

so that importing the package imports none of them (the console scripts' ``--help`` stays fast). This module
imports nothing but the standard library.
"""
import importlib
from typing import Any, Dict, Iterable, List, MutableMapping, Optional, Sequence

__all__ = ['LazyNames']


class LazyNames:
    """The names of ``package`` by home module (``homes``: module relative to the package -> names), loaded into
    the package's ``namespace`` (its ``globals()``) on first use."""

    def __init__(self, package: str, homes: Dict[str, Sequence[str]], namespace: MutableMapping[str, Any]) -> None:
        self.package, self.homes, self.namespace = package, dict(homes), namespace
        self.home_of = {name: module for module, names in self.homes.items() for name in names}

    def getattr(self, name: str) -> Any:
        """``name`` from its home module, kept in the package's namespace; AttributeError where it has none."""
        module = self.home_of.get(name)
        if module is None:
            raise AttributeError(f'module {self.package!r} has no attribute {name!r}')
        self.load([module])
        return self.namespace[name]

    def load(self, modules: Optional[Iterable[str]] = None) -> None:
        """Import ``modules`` (default: every home) and put their names into the package's namespace."""
        for module in self.homes if modules is None else modules:
            loaded = importlib.import_module(f'.{module}', self.package)
            self.namespace.update({name: getattr(loaded, name) for name in self.homes[module]})

    def dir(self) -> List[str]:
        return sorted(set(self.namespace) | set(self.home_of))
