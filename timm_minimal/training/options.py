"""The trainer's options as typed groups: one frozen dataclass per argument group of its parser
(``cli.build_parser``: run, model, distillation, optimisation, data path, augmentation), generated from the group's
actions as transformers generates a config from a model's signature. The parser stays the one home of the names, the
types, the ranges and the defaults; a stage takes the groups it reads (building the model its ``ModelOptions``, the
optimizer its ``OptimisationOptions``, ...), never the whole command line.

The options the plan decides (``PLANNED``: the model's full name, the recipe, the device and the system group's
precision, compilation, processes and threads) are in no stage's group, so a stage cannot read an undecided value:
it reads the plan's decision. ``PlannedOptions`` keeps them as they were given, for ``args.yaml``.
"""
import argparse
from dataclasses import dataclass, fields, make_dataclass
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence

from .cli import ModelKwargs, build_parser, option_groups

__all__ = ['PLANNED', 'OptionGroup', 'Options', 'PlannedOptions', 'RunOptions', 'ModelOptions', 'DistillationOptions',
           'OptimisationOptions', 'DataPathOptions', 'AugmentationOptions', 'option_class', 'group_of']

# The options the plan decides (``plan.resolve_plan``); the stages after it read them from the plan alone.
PLANNED = ('model', 'recipe', 'cpu', 'mixed_precision', 'compile', 'compile_mode', 'pad_heads', 'cpu_processes',
           'threads')


class OptionGroup:
    """The base of the generated groups: a frozen dataclass of option values."""

    def values(self) -> Dict[str, Any]:
        """The group's options by name (the values themselves, not copies)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _annotation(action: argparse.Action) -> Any:
    """The type of an option's value, as its action parses it: a flag a bool (None: unset, for ``--x/--no-x``), a
    choice one of its choices, a number the kind of its range-checked type (``cli.number``), several values a list."""
    if isinstance(action, argparse._StoreTrueAction):
        return bool
    if isinstance(action, argparse.BooleanOptionalAction):
        return Optional[bool]
    if isinstance(action, ModelKwargs):
        return Dict[str, Any]
    kind: Any = Literal[tuple(action.choices)] if action.choices else getattr(action.type, 'kind', str)
    if action.nargs not in (None, '?'):
        kind = List[kind]
    return kind if action.default is not None else Optional[kind]


def option_class(name: str, actions: Sequence[argparse.Action], doc: str) -> type:
    """A frozen dataclass named ``name`` with one field per action (its ``dest``, typed by ``_annotation``)."""
    cls = make_dataclass(name, [(a.dest, _annotation(a)) for a in actions], bases=(OptionGroup,), frozen=True,
                         namespace={'__module__': __name__})
    cls.__doc__ = doc
    return cls


_PARSER = build_parser()
_ACTIONS = option_groups(_PARSER)


def _group(name: str, key: str, doc: str) -> type:
    return option_class(name, [a for a in _ACTIONS[key] if a.dest not in PLANNED], doc)


RunOptions = _group('RunOptions', 'run', 'What to train on, where the run lives and how it reports.')
ModelOptions = _group('ModelOptions', 'model', 'The model\'s keywords, its starting point and its input preprocessing.')
DistillationOptions = _group('DistillationOptions', 'distillation', 'The teacher and how it enters the loss.')
OptimisationOptions = _group('OptimisationOptions', 'optimisation', 'The optimizer, its schedule and the EMA.')
DataPathOptions = _group('DataPathOptions', 'data_path', 'Where the data live during training.')
AugmentationOptions = _group('AugmentationOptions', 'augmentation', 'The training augmentation and label smoothing.')
PlannedOptions = option_class('PlannedOptions', [a for g in _ACTIONS.values() for a in g if a.dest in PLANNED],
                              'The options the plan decides, as they were given (``args.yaml`` keeps them so).')


@dataclass(frozen=True)
class Options:
    """The resolved options that the stages read, one typed group each."""
    run: RunOptions
    model: ModelOptions
    distillation: DistillationOptions
    optimisation: OptimisationOptions
    data_path: DataPathOptions
    augmentation: AugmentationOptions

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> 'Options':
        """The groups of a resolved option mapping (``cli.parse_args``'s, or ``vars`` of a namespace); every option
        of every group must be there."""
        return cls(**{f.name: group_of(f.type, values) for f in fields(cls)})

    def values(self) -> Dict[str, Any]:
        """Every option of every group by name: what the groups hold, flat."""
        return {k: v for f in fields(self) for k, v in getattr(self, f.name).values().items()}


def group_of(cls: type, values: Mapping[str, Any]) -> Any:
    """The ``cls`` group of ``values`` (its fields, taken by name)."""
    names = [f.name for f in fields(cls)]
    missing = [n for n in names if n not in values]
    if missing:
        raise TypeError(f'{cls.__name__} needs the options {", ".join(missing)} (resolve them with cli.parse_args).')
    return cls(**{n: values[n] for n in names})
