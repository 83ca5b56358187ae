"""The trainer's typed option groups: frozen dataclasses written out, the one home of the options' names, types,
ranges and defaults; the command line is made from their fields."""
import argparse
import dataclasses
import subprocess
import sys
import typing
from typing import Dict, List, Literal, Optional

import pytest
import yaml

from timm_minimal.cli import number
from timm_minimal.training import cli
from timm_minimal.training import options as O
from timm_minimal.training.cli import build_parser, parse_args
from timm_minimal.training.plan import resolve_plan

GROUPS = (O.RunOptions, O.ModelOptions, O.DistillationOptions, O.OptimisationOptions, O.DataPathOptions,
          O.AugmentationOptions)


def _names(cls):
    return {f.name for f in dataclasses.fields(cls)}


def test_the_command_line_is_the_groups_fields_and_nothing_else():
    keys = [f.name for f in dataclasses.fields(O.Options)]
    assert keys == ['run', 'model', 'distillation', 'optimisation', 'data_path', 'augmentation']
    assert tuple(typing.get_type_hints(O.Options)[k] for k in keys) == GROUPS == O.GROUPS
    every = set().union(*map(_names, GROUPS))
    assert not every & set(O.PLANNED) and set(O.PLANNED) == _names(O.PlannedOptions)
    dests = {a.dest for a in build_parser()._actions}
    # the command line's options beside the groups' are how a command talks (help, -q, -v), not the run's
    assert dests - every - set(O.PLANNED) == {'help', 'quiet', 'verbose'}
    assert every | set(O.PLANNED) <= dests
    sections = {title: {a.dest for a in g._group_actions} for g in build_parser()._action_groups
                for title in [g.title]}
    assert sections['system'] <= set(O.PLANNED)  # the system section is the plan's to decide, all of it


def test_the_types_are_declared_and_the_parser_follows_them():
    hints = {cls: typing.get_type_hints(cls) for cls in GROUPS}
    assert hints[O.RunOptions]['epochs'] is int and hints[O.RunOptions]['train_subset'] == Optional[int]
    assert hints[O.RunOptions]['no_download'] is bool
    assert hints[O.ModelOptions]['mean'] == Optional[List[float]]
    assert hints[O.ModelOptions]['model_kwargs'] == Dict[str, typing.Any]
    assert hints[O.DataPathOptions]['data_path'] == Literal['auto', 'device', 'loader']
    assert hints[O.OptimisationOptions]['model_ema'] == Optional[bool]
    assert hints[O.OptimisationOptions]['lr'] is float
    actions = {a.dest: a for a in build_parser()._actions}
    assert actions['data_path'].choices == O.DATA_PATHS == ('auto', 'device', 'loader')
    assert isinstance(actions['model_ema'], argparse.BooleanOptionalAction)
    assert isinstance(actions['no_download'], argparse._StoreTrueAction)
    assert actions['scale'].nargs == 2 and actions['mean'].nargs == '+'
    assert actions['lr'].type is O.NON_NEGATIVE


def test_a_new_option_is_one_field():
    """What a new option gets from its field alone: its flag, its kind of value and its range."""
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Toy(O.OptionGroup):
        size: int = O.option('how big', default=3, type=number(int, 1))
        betas: Optional[List[float]] = O.option(default=None, type=number(float, 0), nargs=2)
        mode: Literal['a', 'b'] = O.option(default='a')
        flag: bool = O.option(default=False)
        maybe: Optional[bool] = O.option(default=None)

    hints = typing.get_type_hints(Toy)
    p = argparse.ArgumentParser()
    for f in dataclasses.fields(Toy):
        p.add_argument('--' + f.name, default=f.default, **O.argument_of(f, hints[f.name]))
    parsed = vars(p.parse_args(['--size', '4', '--betas', '0.5', '1', '--mode', 'b', '--flag', '--no-maybe']))
    toy = Toy(**parsed)
    assert toy.values() == dict(size=4, betas=[0.5, 1.0], mode='b', flag=True, maybe=False)
    with pytest.raises(SystemExit):
        p.parse_args(['--size', '0'])
    with pytest.raises(dataclasses.FrozenInstanceError):
        toy.size = 5
    with pytest.raises(TypeError, match='needs the options size'):
        O.group_of(Toy, dict(mode='a'))


def test_what_a_resume_keeps_and_what_a_recipe_sets_are_field_metadata():
    from timm_minimal.training import resume
    assert set(resume.FIXED_ON_RESUME) == {'opt', 'seed', 'grad_accum_steps', 'train_subset', 'model_kwargs',
                                           'weight_init', 'drop_path', 'drop'}
    assert resume.FIXED_TEACHER == tuple(f.name for f in dataclasses.fields(O.DistillationOptions))
    assert set(resume.FIXED_RUN) == {'dataset', 'num_classes', *resume.FIXED_ON_RESUME, *resume.FIXED_TEACHER}
    # the default recipe sets exactly the options without a built-in default, and so does every shipped recipe
    assert set(cli.load_recipe('default')) == set(O.recipe_keys())
    assert not set(O.recipe_keys()) & set(O.built_in_defaults())


MYPY_CHECK = """
from timm_minimal.training.options import (AugmentationOptions, DataPathOptions, DistillationOptions, ModelOptions,
                                           OptimisationOptions, PlannedOptions, RunOptions)


def stage(run: RunOptions, model: ModelOptions, distillation: DistillationOptions, opt: OptimisationOptions,
          data_path: DataPathOptions, aug: AugmentationOptions, given: PlannedOptions) -> None:
    reveal_type(run.epochs)
    reveal_type(run.log_with)
    reveal_type(model.weight_init)
    reveal_type(distillation.distill_temperature)
    reveal_type(opt.model_ema)
    reveal_type(data_path.data_path)
    reveal_type(aug.scale)
    reveal_type(given.threads)
    run.epoch
"""


def test_mypy_sees_each_fields_type_and_a_misspelt_option(tmp_path):
    """What an editor and a type checker see: each field's declared type (not Any), and a misspelt option as an
    error before any run."""
    pytest.importorskip('mypy', reason='mypy is not installed (pip install -e ".[dev]" installs it)')
    (tmp_path / 'check.py').write_text(MYPY_CHECK)
    out = subprocess.run([sys.executable, '-m', 'mypy', '--follow-imports=skip', '--ignore-missing-imports',
                          '--no-incremental', '--cache-dir', str(tmp_path / 'cache'), str(tmp_path / 'check.py'),
                          O.__file__], capture_output=True, text=True, cwd=tmp_path).stdout
    revealed = [line.split('Revealed type is ')[1].strip('"') for line in out.splitlines() if 'Revealed type' in line]
    assert revealed == ['int', 'list[str] | None', "Literal['default'] | Literal['mimetic']", 'float', 'bool | None',
                        "Literal['auto'] | Literal['device'] | Literal['loader']", 'list[float]', 'int | None'], out
    assert '"RunOptions" has no attribute "epoch"; maybe "epochs"?' in out, out
    assert 'not valid as a type' not in out and out.count('error:') == 1, out


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


def test_a_launch_parses_once_reads_one_recipe_and_says_nothing_with_q(tmp_path, monkeypatch, capsys, data):
    """One parse, one recipe read a launch; ``-q`` leaves warnings alone on the console."""
    from tests.trainer_runs import DDP_ARGS, run_inprocess
    calls = {'build_parser': 0, 'load_recipe': 0}

    def counted(name):
        original = getattr(cli, name)

        def call(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)
        monkeypatch.setattr(cli, name, call)
    counted('build_parser')
    counted('load_recipe')
    assert run_inprocess(DDP_ARGS + data + ['--epochs', '1', '--output', tmp_path / 'run', '-q']) == 0
    assert calls == {'build_parser': 1, 'load_recipe': 1}
    out = capsys.readouterr()
    assert out.out == '', out.out
    assert (tmp_path / 'run' / 'run.json').is_file()
