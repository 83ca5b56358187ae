"""What a training launch writes about itself: ``args.yaml`` and ``run.json`` at its start (a ``RunRecord``, or a new
launch of a resumed one), each process's ``rank<N>.json`` at its end, and the closed record with the curves."""
import os
import platform
import shlex
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional

import accelerate
import numpy as np
import timm
import torch
import torchvision
from timm.models import split_model_name_tag

from .engine import Run, TrainState, weights_hash
from .run.files import write_json_atomic
from .run.record import Launch, RunRecord
from .. import __version__
from ..machine import cpu_signature
from .cpu.policy import SPLIT_STATUS_ENV

__all__ = ['RunInputs', 'versions', 'device_name', 'launched_alone', 'write_run_record', 'finish_run', 'closing_lines', 'rank_report']


@dataclass(frozen=True)
class RunInputs:
    """What run.json records of a run's start beyond its options and its plan: the command line, the model's keywords
    and size, its preprocessing, the data it uses, and a distilled run's teacher."""
    argv: List[str]
    model_kwargs: Dict[str, Any]
    data_cfg: Dict[str, Any]  # timm's data config of the run's preprocessing
    num_params: int
    dataset: Dict[str, Any]  # the dataset's own description and the images the run uses of each split
    teacher: Optional[Dict[str, Any]] = None  # ``distill.TeacherInfo`` as a dict


def versions() -> Dict[str, str]:
    return dict(python=platform.python_version(), torch=torch.__version__, torchvision=torchvision.__version__,
                timm=timm.__version__, accelerate=accelerate.__version__, timm_minimal=__version__,
                numpy=np.__version__)


def device_name(device: torch.device) -> str:
    if device.type == 'cuda':
        return torch.cuda.get_device_name(device)
    return f"{cpu_signature()['cpu']}, {cpu_signature()['cores']} cores"


def cpu_flags(device: torch.device) -> Optional[str]:
    """The CPU's SIMD flags where the run trains on the CPU (they decide its speed and its bf16 path)."""
    if device.type == 'cuda':
        return None
    return cpu_signature()['flags']


def launched_alone() -> bool:
    """accelerate launch set this process up for several (``--num_processes 2`` sets MASTER_ADDR) but started it alone,
    without a world (``--cpu`` without ``--multi_cpu``)."""
    return 'MASTER_ADDR' in os.environ and 'WORLD_SIZE' not in os.environ


def launcher_command() -> Optional[str]:
    """The command that started this process where another launcher did (``accelerate launch``, ``torchrun``: this
    process's parent, as the system shows it), the interpreter's path left out; None for a run of one process that no
    launcher started, or the package's own CPU split (whose ``timm-minimal-train`` line relaunches it)."""
    world = os.environ.get('WORLD_SIZE', '1')
    if os.environ.get(SPLIT_STATUS_ENV) or not (launched_alone() or (world.isdigit() and int(world) > 1)):
        return None
    try:
        words = [w.decode(errors='replace') for w in Path(f'/proc/{os.getppid()}/cmdline').read_bytes().split(b'\0') if w]
    except OSError:  # no /proc (not Linux): the record keeps the trainer's own line
        return None
    if len(words) > 1 and Path(words[0]).name.startswith('python') and not words[1].startswith('-'):
        words = words[1:]  # python /path/to/accelerate launch ...: the script is the command
    if not words:
        return None
    return shlex.join([Path(words[0]).name, *words[1:]])


def write_run_record(run: Run, state: TrainState, inputs: RunInputs, last_dir: Optional[Path],
                     compile_mode: Optional[str]) -> None:
    """args.yaml, run.json (a new record, or a new launch of a resumed one) and the metrics kept so far;
    ``compile_mode`` is torch.compile's mode where the run compiled."""
    opts, acc, folder = run.options, run.accelerator, run.folder
    saved_args = run.plan.saved_options()
    saved_args['output'] = str(folder)
    folder.write_args(saved_args)
    command = launcher_command() or 'timm-minimal-train ' + ' '.join(shlex.quote(a) for a in inputs.argv)
    launch = Launch(command=command, started=datetime.now(timezone.utc).isoformat(timespec='seconds'),
                    num_processes=run.world, device=str(run.device), device_name=device_name(run.device),
                    cpu_flags=cpu_flags(run.device), cpu_rates=run.plan.cpu_rates,
                    mixed_precision=acc.mixed_precision,
                    compiled=run.compiled, compile_mode=compile_mode,
                    data_path=run.data.describe(), torch_threads=torch.get_num_threads(),
                    num_workers=opts.run.num_workers, resumed_from=str(last_dir) if last_dir else None,
                    first_epoch=len(state.history) + 1)
    record = folder.read_record() if opts.run.resume is not None and folder.run_file.is_file() else None
    if record is not None:
        record.add_launch(launch, state.history)
    else:
        record = RunRecord(
            command=command, model=run.model_name,
            architecture=split_model_name_tag(run.model_name)[0], model_kwargs=inputs.model_kwargs,
            num_params=inputs.num_params, num_classes=run.model_config['num_classes'], dataset=inputs.dataset,
            data_config={k: (list(v) if isinstance(v, tuple) else v) for k, v in inputs.data_cfg.items()},
            recipe=run.plan.recipe, recipe_values=run.plan.provenance.recipe_values or None, teacher=inputs.teacher,
            args=saved_args,
            distributed=dict(num_processes=run.world, global_batch_size=run.loop.batch_size,
                             per_process_batch_size=run.loop.batch_size // run.world,
                             grad_accum_steps=run.loop.grad_accum_steps,
                             effective_batch_size=run.loop.batch_size * run.loop.grad_accum_steps),
            updates_per_epoch=run.batches_per_epoch // run.loop.grad_accum_steps,
            train_samples_per_epoch=run.batches_per_epoch * run.loop.batch_size,
            units=dict(accuracy='percent', loss='cross-entropy (nats)', throughput='training images per second',
                       time='seconds', elapsed='seconds since the launch\'s interpreter imported timm_minimal'),
            versions=versions(), launches=[launch])
    folder.write_record(record)
    folder.write_metrics(state.history)


def finish_run(run: Run, state: TrainState, status: str, message: Optional[str], launch_time: float) -> Dict[str, Any]:
    """Close run.json (status, wall time, final and best metrics) and the curves; main process only. Returns the
    record as a dict (what ``run.json`` holds)."""
    folder = run.folder
    record = folder.read_record()
    if record.launches and not run.compiled:  # what ran: a compilation that failed fell back to eager
        record.last_launch.compiled, record.last_launch.compile_mode = False, None
    record.close(status, datetime.now(timezone.utc).isoformat(timespec='seconds'), launch_time, state.history,
                 state.best if state.best.get('epoch') else None, message)
    folder.write_record(record)
    folder.plot_curves(state.history, title=f'{run.model_name} on {record.dataset.get("name")}')
    return record.to_dict()


def closing_lines(run: Run, record: Dict[str, Any]) -> List[str]:
    """What a finished run says last: where it went, its last and best test accuracy, and the commands that evaluate,
    export and publish its last checkpoint."""
    folder, opts = run.folder.path, run.options.run
    final, best = record.get('final') or {}, record.get('best') or {}
    if 'test_acc' not in final:
        return [f'Finished: {folder}']
    scores = f'test accuracy {final["test_acc"]:.2f}% at epoch {final["epoch"]}'
    if best.get('epoch') and best['epoch'] != final['epoch']:
        scores += f' (best {best["test_acc"]:.2f}% at epoch {best["epoch"]})'
    checkpoint = f'local-dir:{folder / "checkpoints" / "last"}'
    data = f' --dataset {opts.dataset}' + (f' --data-dir {opts.data_dir}' if opts.data_dir else '')
    return [f'Finished {run.model_name} in {folder}: {scores}.',
            f'  evaluate: timm-minimal-evaluate --model {checkpoint}{data}',
            f'  export:   timm-minimal-export --model {checkpoint} --output {folder / "onnx"}',
            f'  publish:  timm-minimal-publish {folder} --repo-id <user>/{Path(folder).name}']


def rank_report(run: Run, status: str, samples: int) -> None:
    write_json_atomic(run.folder.path / f'rank{run.rank}.json', dict(
        rank=run.rank, num_processes=run.world, weights_sha256=weights_hash(run.unwrapped.state_dict()),
        per_process_batch_size=run.loop.batch_size // run.world, local_train_samples=samples, status=status))
