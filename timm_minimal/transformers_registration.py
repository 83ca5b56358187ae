"""Registers the ``vit_minimal`` model type with transformers' Auto classes when transformers loads them.

``import timm_minimal`` must stay as light as ``import timm``: a timm-only user and every command-line tool
would otherwise pay for importing transformers (1-2 s on a 2-core CPU). transformers keeps its Auto mappings
in four modules, and a third-party model type joins them through each Auto class's ``register``. So the
registration waits for those modules: a module already imported is registered at once, and one imported later
is registered as soon as it has run, through a finder on ``sys.meta_path`` that wraps only those four loaders.
``from transformers import AutoModel`` after ``import timm_minimal`` therefore finds ``vit_minimal``, and
a program that never touches transformers never imports it.
"""
from __future__ import annotations

import importlib.abc
import sys
from typing import Callable

_AUTO = 'transformers.models.auto.'


def _config(module) -> None:
    from .models.configuration_vit_minimal import VitMinimalConfig  # lazy: imports transformers
    module.AutoConfig.register(VitMinimalConfig.model_type, VitMinimalConfig, exist_ok=True)


def _models(module) -> None:
    from .models.configuration_vit_minimal import VitMinimalConfig  # lazy: imports transformers
    from .models.modeling_vit_minimal import (  # lazy: imports transformers
        VitMinimalForImageClassification, VitMinimalModel)
    module.AutoModel.register(VitMinimalConfig, VitMinimalModel, exist_ok=True)
    module.AutoModelForImageClassification.register(VitMinimalConfig, VitMinimalForImageClassification, exist_ok=True)


def _image_processor(module) -> None:
    from .models.configuration_vit_minimal import VitMinimalConfig  # lazy: imports transformers
    from .models.image_processing_vit_minimal import (  # lazy: imports transformers
        VitMinimalImageProcessor, VitMinimalImageProcessorPil)
    module.AutoImageProcessor.register(
        VitMinimalConfig, image_processor_classes={'pil': VitMinimalImageProcessorPil,
                                                   'torchvision': VitMinimalImageProcessor}, exist_ok=True)


def _no_video_processor(module) -> None:
    # Said explicitly: transformers' pipelines look for a video processor and would otherwise take the
    # checkpoint's AutoImageProcessor auto_map for remote video code and ask whether to run it.
    from .models.configuration_vit_minimal import VitMinimalConfig  # lazy: imports transformers
    try:
        module.AutoVideoProcessor.register(VitMinimalConfig, video_processor_classes={}, exist_ok=True)
    except TypeError:  # an older transformers without per-backend registration
        pass


_PENDING: dict[str, Callable] = {
    _AUTO + 'configuration_auto': _config,
    _AUTO + 'modeling_auto': _models,
    _AUTO + 'image_processing_auto': _image_processor,
    _AUTO + 'video_processing_auto': _no_video_processor,
}


class _RegisterAfter(importlib.abc.Loader):
    """The module's own loader, then the registration of that Auto module."""

    def __init__(self, loader, register: Callable):
        self.loader, self.register = loader, register

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        self.register(module)

    def __getattr__(self, name):  # get_source, is_package, ... as the module's own loader answers them
        return getattr(self.loader, name)


class _AutoModulesFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        register = _PENDING.pop(name, None)
        if register is None:
            return None
        for finder in sys.meta_path:
            find = None if finder is self else getattr(finder, 'find_spec', None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _RegisterAfter(spec.loader, register)
                return spec
        return None


def register_with_transformers() -> None:
    """Registers at once with the Auto modules already imported, and with the rest when they are imported."""
    for name in list(_PENDING):
        if name in sys.modules:
            _PENDING.pop(name)(sys.modules[name])
    if _PENDING and not any(isinstance(finder, _AutoModulesFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AutoModulesFinder())
