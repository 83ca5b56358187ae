"""The test images that ship with the package: a few MNIST digits and CIFAR-10 images, for examples and the app."""
from importlib import resources
from typing import List

__all__ = ['example_image', 'example_images']


def example_images() -> List[str]:
    """The paths of the bundled test images (``mnist_test0_digit7.png``, ``cifar10_test_cat_0000.png``, ...)."""
    folder = resources.files('timm_minimal').joinpath('data/examples')
    return sorted(str(p) for p in folder.iterdir() if p.name.endswith('.png'))


def example_image(name: str) -> str:
    """The path of one bundled test image by its file name; a ValueError lists the names there are."""
    for path in example_images():
        if path.endswith('/' + name) or path.endswith('\\' + name):
            return path
    names = ', '.join(p.replace('\\', '/').rsplit('/', 1)[-1] for p in example_images())
    raise ValueError(f"no bundled example image '{name}'; there are: {names}")
