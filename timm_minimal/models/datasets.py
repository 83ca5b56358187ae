"""The one home of the dataset facts: one frozen record per pretrained tag.

A tag (``.mnist``, ``.cifar10``, ``.in1k``) names a dataset and everything that follows from it: the
geometry of its models (input size, patch size), the preprocessing (mean, std, crop, interpolation), the
dataset kind the trainer reads (``--dataset``), the display name and Hub dataset id of the model cards,
the number of training samples (the paper's Q = samples x classes / parameters), the class names and the
training recipe. Every other module looks these facts up here; this module imports nothing else of the
package, so the remote code of a checkpoint can carry it.
"""
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

# ImageNet's normalisation as timm writes it (timm.data.IMAGENET_DEFAULT_MEAN / _STD; a test keeps them equal),
# written here so that the dataset facts import without torch: the command-line parsers read them
IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)

__all__ = ['MIN_CROP_PCT', 'DatasetInfo', 'DATASETS', 'SAMPLES', 'dataset_for_kind', 'tag_for_kind', 'channel_stats', 'MNIST_CLASSES',
           'CIFAR10_CLASSES']

MNIST_CLASSES = tuple('0123456789')
# The smallest centre-crop fraction any path takes (the image processor, the trainer, evaluate): images are resized to
# size / crop_pct before the crop, so a tiny fraction asks for a huge image (1e-6 of 28 px: 28 million px a side).
MIN_CROP_PCT = 0.1
CIFAR10_CLASSES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck')


@dataclass(frozen=True)
class DatasetInfo:
    """What a pretrained tag means."""
    tag: str                              # the pretrained tag: vit_minimal_sym_6x4.<tag>
    kind: str                             # the trainer's --dataset for it
    display_name: str                     # for people: model cards, reports
    hub_id: str                           # the dataset's Hugging Face Hub id (model card metadata)
    train_samples: int                    # training images
    input_size: Tuple[int, int, int]      # (channels, height, width)
    patch_size: int
    num_classes: int
    mean: Tuple[float, ...]
    std: Tuple[float, ...]
    crop_pct: float
    interpolation: str
    recipe: str                           # the trainer's recipe (timm_minimal/training/recipes/<recipe>.yaml)
    label_names: Optional[Tuple[str, ...]] = None  # None: timm's ImageNetInfo has them (in1k)
    note: str = ''                        # what a model card says about the data
    bundled: str = ''                     # a sample shipped in timm_minimal/data: its .npz file
    test_samples: Optional[int] = None    # test images, where the record states them (the samples)
    cpu_recipe: Optional[str] = None      # the recipe on a CPU, where one was measured to pay there (else recipe)

    def preprocessing(self) -> Dict[str, object]:
        """The keys of timm's pretrained cfg that describe the inputs and the classes."""
        cfg: Dict[str, object] = dict(input_size=self.input_size, num_classes=self.num_classes, mean=self.mean,
                                      std=self.std, crop_pct=self.crop_pct, interpolation=self.interpolation)
        if self.label_names is not None:
            cfg['label_names'] = self.label_names
        return cfg

    def geometry(self) -> Dict[str, object]:
        """``in_chans``, ``img_size`` and ``patch_size`` of the models of this tag."""
        return dict(in_chans=self.input_size[0], img_size=tuple(self.input_size[1:]), patch_size=self.patch_size)


DATASETS: Dict[str, DatasetInfo] = {d.tag: d for d in (
    DatasetInfo(
        tag='mnist', kind='mnist', display_name='MNIST', hub_id='ylecun/mnist', train_samples=60_000,
        input_size=(1, 28, 28), patch_size=7, num_classes=10, mean=(0.1307,), std=(0.3081,), crop_pct=1.0,
        interpolation='bilinear', recipe='mnist', cpu_recipe='mnist_cpu', label_names=MNIST_CLASSES,
        note='The MNIST test digits (as in the paper) also served as the validation set during training; there is '
             'no separate held-out split.'),
    DatasetInfo(
        tag='cifar10', kind='cifar10', display_name='CIFAR-10', hub_id='uoft-cs/cifar10', train_samples=50_000,
        input_size=(3, 32, 32), patch_size=4, num_classes=10, mean=(0.4914, 0.4822, 0.4465),
        std=(0.2470, 0.2435, 0.2616), crop_pct=1.0, interpolation='bilinear', recipe='cifar10', cpu_recipe='cifar10_cpu',
        label_names=CIFAR10_CLASSES,
        note='Trained and tested on a JPEG (quality 75) export of CIFAR-10; its pixels differ from the original '
             'images by about 6/255 on average, so accuracy on the original files may differ slightly.'),
    DatasetInfo(
        tag='in1k', kind='imagenet', display_name='ImageNet-1k', hub_id='ILSVRC/imagenet-1k',
        train_samples=1_281_167, input_size=(3, 224, 224), patch_size=16, num_classes=1000, mean=IMAGENET_DEFAULT_MEAN,
        std=IMAGENET_DEFAULT_STD, crop_pct=0.9, interpolation='bicubic', recipe='imagenet'),
)}


# Samples shipped with the package, so that a plain clone can train: each is a dataset kind of its own with the
# tag (geometry, normalisation, classes) of the dataset it was drawn from.
SAMPLES: Dict[str, DatasetInfo] = {d.kind: d for d in (
    replace(DATASETS['mnist'], kind='mnist-sample', display_name='MNIST (bundled sample)', train_samples=20_000,
            test_samples=1_000, recipe='mnist_sample', cpu_recipe=None, bundled='mnist_sample.npz',
            note='The 20,000 training and 1,000 test digits of MNIST that ship with timm-minimal: the first '
                 'digits of the original training and test files.'),
)}


def dataset_for_kind(kind: str) -> Optional[DatasetInfo]:
    """The record of a dataset kind (``mnist``, ``mnist-sample``, ``cifar10``, ``imagenet``); None for folders and
    timm datasets."""
    return SAMPLES.get(kind) or next((d for d in DATASETS.values() if d.kind == kind), None)


def tag_for_kind(kind: str) -> str:
    """The pretrained tag (geometry and normalisation) a model gets for a dataset kind when its name has no tag:
    the dataset's own, else ImageNet's (image folders and timm datasets)."""
    info = dataset_for_kind(kind)
    return info.tag if info is not None else 'in1k'


def channel_stats(values: Tuple[float, ...], channels: int, name: str = 'mean') -> List[float]:
    """A per-channel statistic for a model with ``channels`` input channels: one value is repeated, one per
    channel is kept, several for a 1-channel model are averaged (RGB statistics for a grey model); anything
    else raises ValueError naming ``name``."""
    values = [float(v) for v in values]
    if len(values) == 1:
        return values * channels
    if len(values) == channels:
        return values
    if channels == 1:
        return [sum(values) / len(values)]
    raise ValueError(f'{name} needs 1 or num_channels={channels} values, got {values}.')
