"""The trainer's typed option groups: generated from the parser's argument groups, which stay the one home of the
options' names, types and defaults."""
import argparse
import dataclasses
import typing

import pytest
import yaml

from timm_minimal.cli import number
from timm_minimal.training import options as O
from timm_minimal.training.cli import build_parser, option_groups, parse_args
from timm_minimal.training.plan import resolve_plan

GROUPS = (O.RunOptions, O.ModelOptions, O.DistillationOptions, O.OptimisationOptions, O.DataPathOptions,
          O.AugmentationOptions)


def _dests(actions):
    return {a.dest for a in actions}


def test_each_group_is_its_parser_groups_options_less_what_the_plan_decides():
    groups = option_groups(build_parser())
    keys = [f.name for f in dataclasses.fields(O.Options)]
    assert keys == ['run', 'model', 'distillation', 'optimisation', 'data_path', 'augmentation']
    for key, cls in zip(keys, GROUPS):
        assert {f.name for f in dataclasses.fields(cls)} == _dests(groups[key]) - set(O.PLANNED), key
    every = set().union(*map(_dests, groups.values()))
    assert {f.name for f in dataclasses.fields(O.PlannedOptions)} == set(O.PLANNED) <= every
    assert _dests(groups['system']) <= set(O.PLANNED)  # the system group is the plan's to decide, all of it
    # the command line's options outside the seven groups are how a command talks (help, -q, -v), not the run's
    assert {a.dest for a in build_parser()._actions} - every == {'help', 'quiet', 'verbose'}


def test_the_types_are_the_parsers():
    hints = {cls: typing.get_type_hints(cls) for cls in GROUPS}
    assert hints[O.RunOptions]['epochs'] is int and hints[O.RunOptions]['train_subset'] == typing.Optional[int]
    assert hints[O.RunOptions]['no_download'] is bool
    assert hints[O.ModelOptions]['mean'] == typing.Optional[typing.List[float]]
    assert hints[O.ModelOptions]['model_kwargs'] == typing.Dict[str, typing.Any]
    assert hints[O.DataPathOptions]['data_path'] == typing.Literal['auto', 'device', 'loader']
    assert hints[O.OptimisationOptions]['model_ema'] == typing.Optional[bool]
    assert hints[O.OptimisationOptions]['lr'] is float


def test_a_group_is_generated_from_any_parsers_actions():
    """What a new option gets without another line: its field, typed by its action."""
    p = argparse.ArgumentParser()
    g = p.add_argument_group('toy')
    g.add_argument('--size', type=number(int, 1), default=3)
    g.add_argument('--betas', type=number(float, 0), nargs=2)
    g.add_argument('--mode', choices=('a', 'b'), default='a')
    g.add_argument('--flag', action='store_true')
    cls = O.option_class('Toy', g._group_actions, 'A toy group.')
    assert typing.get_type_hints(cls) == dict(size=int, betas=typing.Optional[typing.List[float]],
                                              mode=typing.Literal['a', 'b'], flag=bool)
    toy = cls(size=4, betas=None, mode='b', flag=True)
    assert toy.values() == dict(size=4, betas=None, mode='b', flag=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        toy.size = 5
    with pytest.raises(TypeError, match='needs the options size'):
        O.group_of(cls, dict(mode='a'))


def test_args_yaml_holds_every_option_as_before(tmp_path):
    """The groups' union with the planned options is what args.yaml kept when the options travelled as one
    namespace: every option but how the launch started (--resume) and how it talks (-q, -v)."""
    args, provenance = parse_args(['--model', 'vit_minimal_sym_6x4', '--dataset', 'mnist', '--cpu',
                                   '--cpu-processes', '1', '--threads', '1', '--lr', '0.002'])
    plan = resolve_plan(args, provenance, split=False)
    saved = plan.saved_options()
    assert set(saved) == set(vars(args)) - {'resume', 'quiet', 'verbose'}
    decided = dict(compile=plan.compile, pad_heads=plan.pad_heads, mixed_precision=plan.precision, cpu_processes=1,
                   threads=1)  # kept for a resume
    assert saved == {**{k: getattr(args, k) for k in saved}, **decided}
    assert yaml.safe_load(yaml.safe_dump(saved)) == saved  # plain YAML: no Python tags
    assert plan.options.optimisation.lr == 0.002 and plan.given.model == 'vit_minimal_sym_6x4'
