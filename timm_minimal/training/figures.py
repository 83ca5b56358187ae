"""The figures a finished run sends to its trackers: its curves, the test confusion matrix and the attention of one
test image (for a model with attention maps)."""
from typing import Any, Dict, List, Optional

import torch

from ..plots.attention import attention_maps, plot_attention
from ..plots.confusion import confusion_figure
from .engine import Run, TrainState, confusion
from .run.folder import curves_figure

__all__ = ['run_figures']


def run_figures(run: Run, state: TrainState, dataset_name: str) -> Dict[str, Any]:
    """name: matplotlib figure, on the main process ({} on the others); every process calls it (the confusion matrix
    counts all processes' shards)."""
    matrix = confusion(run, run.unwrapped).cpu().numpy()
    if not run.is_main:
        return {}
    cfg = run.model_config['pretrained_cfg']
    names = [str(n) for n in cfg.get('label_names') or range(run.model_config['num_classes'])]
    title = f'{run.model_name} on {dataset_name}'
    acc = 100. * matrix.trace() / max(int(matrix.sum()), 1)
    figures = {'curves': curves_figure(state.history, run.folder.read_steps(), title),
               'confusion': confusion_figure(matrix, names, f'{title}: test confusion matrix, top-1 {acc:.2f}%')}
    attention = _attention_figure(run, names, cfg)
    if attention is not None:
        figures['attention'] = attention
    return figures


def _attention_figure(run: Run, names: List[str], cfg: Dict[str, Any]) -> Optional[Any]:
    """The attention figure of the first test image (the model's input as the evaluation sees it)."""
    net = run.unwrapped
    if not hasattr(net, 'get_attention_maps'):
        return None
    x, _ = next(iter(run.data.eval_batches()))
    x = x[:1].float()
    mean = torch.tensor(cfg['mean'], dtype=torch.float32).view(-1, 1, 1)
    std = torch.tensor(cfg['std'], dtype=torch.float32).view(-1, 1, 1)
    shown = (x[0].cpu() * std + mean).clamp(0, 1).permute(1, 2, 0).numpy()
    maps = attention_maps(net, x, shown[..., 0] if shown.shape[-1] == 1 else shown, run.model_name, names,
                          ['the first test image'])
    return plot_attention(maps)
