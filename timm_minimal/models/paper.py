"""The paper, as data: its Tables 1 and 2, the names of its modifications, and the architecture names.

Bermeitinger, Hrycej, Pavone, Kath, Handschuh, "Reducing the Transformer Architecture to a Minimum",
KDIR 2024 (arXiv:2410.13732). This module is the one home of these facts: the grid runner
(``timm_minimal.tools.paper.reproduce``), the benchmark, the publisher and the tests read them from here.
"""
import re
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional

from .datasets import DATASETS

__all__ = ['PAPER', 'PAPER_TITLE', 'PAPER_ARXIV', 'PAPER_EPOCHS', 'PAPER_DATASETS', 'MODIFICATIONS', 'VARIANTS', 'PaperRow',
           'TABLE1', 'TABLE2', 'TABLE2_CIFAR10', 'BASELINE', 'FLAGSHIP', 'arch_name', 'is_minimal', 'parse_arch']

PAPER_TITLE = 'Reducing the Transformer Architecture to a Minimum'
PAPER_ARXIV = 'arXiv:2410.13732'
PAPER = f'Bermeitinger et al., "{PAPER_TITLE}", KDIR 2024 ({PAPER_ARXIV})'
PAPER_EPOCHS = 500
# Each attention variant: the paper's name for it, and what it computes (short, and for a model card).
VARIANTS: Dict[str, Dict[str, str]] = {
    'std': dict(paper='unchanged', short='unchanged W_Q, W_K, W_V, W_O',
                long='separate W_Q, W_K, W_V, W_O (the paper\'s "unchanged" attention)'),
    'qk': dict(paper='Wqk', short='collapsed W_QK',
               long='one collapsed N x N matrix W_QK = W_Q W_K^T; keys are the raw inputs (the paper\'s "Wqk")'),
    'qkonly': dict(paper='Wqk + no Wv,Wo', short='W_QK only (no W_V, W_O)',
                   long='W_QK only, no W_V and W_O: each layer outputs convex combinations of its inputs '
                        '(the paper\'s "Wqk + no Wv,Wo")'),
    'sym': dict(paper='symmetry', short='symmetric, W_K := W_Q',
                long='symmetric attention, W_K := W_Q (the paper\'s "symmetry")'),
    'chol': dict(paper='(named in the text)', short='W_QK = T T^T (Cholesky)',
                 long='W_QK = T T^T with T lower triangular (symmetric positive semi-definite)'),
}

# The modification names of the paper's tables -> our attention variants.
MODIFICATIONS = {v['paper']: attn for attn, v in VARIANTS.items() if attn != 'chol'}


@dataclass(frozen=True)
class PaperRow:
    """One row of the paper's Table 1 or 2 (accuracies in percent, losses as cross-entropy).

    A row beyond the paper (``TABLE2_CIFAR10``) has no paper numbers: ``q``, the losses, the accuracies and
    ``params`` are None and ``measured`` is False.
    """
    table: int
    dataset: str
    depth: int
    heads: int
    mlp: bool
    modification: str
    q: Optional[float]
    train_loss: Optional[float]
    val_loss: Optional[float]
    train_acc: Optional[float]
    val_acc: Optional[float]
    params: Optional[int] = None  # as stated in the paper (None where it states only Q)

    @property
    def measured(self) -> bool:
        """Whether the paper reports numbers for this row."""
        return self.val_acc is not None

    @property
    def arch(self) -> str:
        return arch_name(MODIFICATIONS[self.modification], self.mlp, self.depth, self.heads)

    @property
    def model(self) -> str:
        return f'{self.arch}.{self.dataset}'

    @property
    def row_id(self) -> str:
        return f't{self.table}-{self.dataset}-{MODIFICATIONS[self.modification]}{"-mlp" if self.mlp else ""}-{self.depth}x{self.heads}'

    @property
    def params_from_q(self) -> Optional[int]:
        """The parameter count Q implies: training samples x classes / Q (rounded; Q has 3 digits)."""
        if self.q is None:
            return None
        return round(DATASETS[self.dataset].train_samples * DATASETS[self.dataset].num_classes / self.q)

    @property
    def label(self) -> str:
        return f'{self.depth}-{self.heads} {"MLP" if self.mlp else "no MLP"} {self.modification}'


def _t1(dataset, lh, mlp, q, tl, vl, ta, va, params=None):
    depth, heads = (int(v) for v in lh.split('-'))
    return PaperRow(1, dataset, depth, heads, mlp, 'unchanged', q, tl, vl, ta, va, params)


# Table 1: 500 epochs, MLP vs no MLP (train / validation).
TABLE1: List[PaperRow] = [
    _t1('mnist', '6-1', True, 2.15, 0.0067, 0.0747, 99.78, 98.38, 279_106),
    _t1('mnist', '6-1', False, 6.46, 0.0277, 0.1023, 99.07, 97.49, 92_890),
    _t1('mnist', '6-4', True, 2.09, 0.0018, 0.0739, 99.95, 98.26, 287_746),
    _t1('mnist', '6-4', False, 5.91, 0.0021, 0.0912, 99.92, 98.29, 101_530),
    _t1('mnist', '12-1', True, 1.08, 0.0052, 0.0652, 99.81, 98.71),
    _t1('mnist', '12-1', False, 3.29, 0.0117, 0.0970, 99.62, 97.94),
    _t1('mnist', '12-4', True, 1.08, 0.0025, 0.0656, 99.92, 98.70, 563_242),
    _t1('mnist', '12-4', False, 3.29, 0.0026, 0.1002, 99.93, 98.10),
    _t1('cifar10', '6-1', True, 1.74, 0.1533, 2.2418, 94.63, 60.24),
    _t1('cifar10', '6-1', False, 4.93, 0.9341, 1.3590, 66.16, 55.30),
    _t1('cifar10', '6-4', True, 1.74, 0.1109, 2.4033, 96.01, 60.46, 287_686),
    _t1('cifar10', '6-4', False, 4.92, 0.5621, 1.6984, 80.82, 52.37, 101_470),
    _t1('cifar10', '12-1', True, 0.89, 2.3026, 2.3026, 9.82, 10.00),
    _t1('cifar10', '12-1', False, 2.52, 0.5604, 1.7219, 79.48, 54.06),
    _t1('cifar10', '12-4', True, 0.89, 0.0632, 2.6379, 97.92, 58.02),
    _t1('cifar10', '12-4', False, 2.52, 0.1787, 2.3200, 93.59, 55.60),
]


def _t2(heads, mlp, mod, params, q, tl, vl, ta, va):
    return PaperRow(2, 'mnist', 6, heads, mlp, mod, q, tl, vl, ta, va, params)


# Table 2: MNIST, 6 layers, the matrix variants.
TABLE2: List[PaperRow] = [
    _t2(1, True, 'unchanged', 279_106, 2.15, 0.0067, 0.0747, 99.78, 98.38),
    _t2(4, True, 'unchanged', 287_746, 2.09, 0.0018, 0.0739, 99.95, 98.26),
    _t2(1, True, 'Wqk', 257_506, 2.33, 0.0037, 0.0794, 99.89, 98.43),
    _t2(1, True, 'Wqk + no Wv,Wo', 212_866, 2.82, 0.0063, 0.0951, 99.78, 98.27),
    _t2(1, False, 'unchanged', 92_890, 6.46, 0.0277, 0.1023, 99.07, 97.49),
    _t2(4, False, 'unchanged', 101_530, 5.91, 0.0021, 0.0912, 99.92, 98.29),
    _t2(1, False, 'symmetry', 69_910, 8.58, 0.0331, 0.0783, 98.85, 97.80),
    _t2(4, False, 'symmetry', 69_910, 8.58, 0.0158, 0.0762, 99.46, 98.24),
    _t2(1, False, 'Wqk', 70_570, 8.50, 0.0374, 0.0996, 98.70, 97.60),
    _t2(1, False, 'Wqk + no Wv,Wo', 26_650, 22.51, 0.1697, 0.1536, 94.82, 95.32),
]

# Beyond the paper: Table 2's architectures on CIFAR-10. The paper tested the matrix variants on MNIST
# only, so these rows carry no paper numbers; the grid trains them at one equal budget.
TABLE2_CIFAR10: List[PaperRow] = [
    replace(r, dataset='cifar10', q=None, train_loss=None, val_loss=None, train_acc=None, val_acc=None, params=None)
    for r in TABLE2]
# the datasets of the paper's tables, in their order (the grid's rows, the reports' sections)
PAPER_DATASETS = tuple(dict.fromkeys(row.dataset for row in TABLE1 + TABLE2 + TABLE2_CIFAR10))


_NAME_RE = re.compile(r'^vit_minimal_(?P<attn>[a-z]+?)(?P<mlp>_mlp)?_(?P<depth>\d+)x(?P<heads>\d+)$')


def is_minimal(arch: str) -> bool:
    """Whether ``arch`` (a timm name without its tag) names one of the minimal transformers."""
    return arch.startswith('vit_minimal')


def arch_name(attn: str, mlp: bool, depth: int, heads: int) -> str:
    """The registered name ``vit_minimal_<attn>[_mlp]_<depth>x<heads>``."""
    return f'vit_minimal_{attn}{"_mlp" if mlp else ""}_{depth}x{heads}'


# The paper's baseline: the unchanged transformer with its MLP, 6 layers, one head (Table 1's first row).
BASELINE = arch_name('std', True, 6, 1)
# The paper's point in one model: no MLP and symmetric attention (W_K := W_Q) with four heads, the smallest model of
# Table 2 within 0.2 points of the baseline (98.24% against 98.38% with a quarter of its parameters)
FLAGSHIP = arch_name('sym', False, 6, 4)


def parse_arch(name: str) -> Dict[str, Any]:
    """attn, mlp, depth and heads of a name ``vit_minimal_<attn>[_mlp]_<depth>x<heads>`` (ValueError otherwise)."""
    m = _NAME_RE.match(name)
    if m is None:
        raise ValueError(f'Not a vit_minimal architecture name: {name}')
    return dict(attn=m['attn'], mlp=m['mlp'] is not None, depth=int(m['depth']), heads=int(m['heads']))
