"""What a ``--dataset`` name means, without torch: the built-in names, timm's dataset-factory prefixes, an image
folder, and the error for a dataset that cannot be found or read. The command-line parser reads these before
anything is imported that trains (``timm_minimal.training.data.loading`` loads the datasets)."""
import os

from ...cli import UsageError
from ...models.datasets import DATASETS, SAMPLES

__all__ = ['BUILTIN_DATASETS', 'TIMM_FACTORY_PREFIXES', 'DatasetError', 'damaged_file', 'dataset_kind']

BUILTIN_DATASETS = tuple(d.kind for d in DATASETS.values()) + tuple(SAMPLES)
TIMM_FACTORY_PREFIXES = ('hfds/', 'hfids/', 'wds/', 'tfds/', 'torch/')


class DatasetError(UsageError):
    """A dataset that cannot be found or read; the message says what was expected and where
    (``timm_minimal.training.data.loading`` exports it)."""


def damaged_file(path: object, error: BaseException, as_what: str = '') -> DatasetError:
    """The error for a data file that cannot be read through (cut short, not of its format): its path, the reader's
    complaint (its first line) and the remedy."""
    detail = ' '.join((str(error).splitlines() or [''])[0].split()).rstrip(':') or 'no detail'
    return DatasetError(f'cannot read {path}{as_what} ({type(error).__name__}: {detail}); replace it with a complete '
                        f'copy.')


def dataset_kind(name: str) -> str:
    """'mnist', 'mnist-sample', 'cifar10', 'imagenet', 'timm' (factory prefix) or 'folder' (a path); errors
    otherwise."""
    low = name.lower()
    if low in BUILTIN_DATASETS:
        return low
    if low.startswith(TIMM_FACTORY_PREFIXES):
        return 'timm'
    if os.sep in name or '/' in name or os.path.isdir(name):
        return 'folder'
    raise DatasetError(
        f"Unknown dataset '{name}': use one of {', '.join(BUILTIN_DATASETS)}, a path to an image folder with "
        f"train/ and val/ (or test/) subfolders, or a timm dataset name with one of the prefixes "
        f"{', '.join(TIMM_FACTORY_PREFIXES)}.")
