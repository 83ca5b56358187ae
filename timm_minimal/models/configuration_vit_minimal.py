"""Hugging Face ``transformers`` configuration of the minimal vision transformers.

One ``config.json`` serves both libraries. On disk it is timm's hub format plus the transformers
fields::

    {
      "architecture": "vit_minimal_sym_6x4",        # timm: the registered entry point
      "num_classes": 10, "num_features": 60,        # timm: head size, feature width
      "model_args": {"img_size": 28, "patch_size": 7, "in_chans": 1, "attn_type": "sym", ...},
      "pretrained_cfg": {"input_size": [1, 28, 28], "mean": [...], "std": [...], ...},
      "label_names": ["0", "1", ...],               # timm: class names
      "model_type": "vit_minimal",                  # transformers
      "architectures": [...], "auto_map": {...}, "id2label": {...}, "label2id": {...}
    }

``model_args`` holds every keyword of ``VisionTransformerMinimal`` except ``num_classes`` (which
timm reads at the top level; transformers' ``TimmWrapper`` fails on a ``num_classes`` inside
``model_args``). In Python the same values are typed config fields (``config.attn_type``,
``config.depth``...; ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads`` are aliases).

This file travels with saved checkpoints (``trust_remote_code=True``): it imports only the
model's own modules, relatively.
"""
import copy
import dataclasses
import inspect
from typing import Any, Dict, List, Literal, Optional, Tuple, Union, get_args, get_origin

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

from .config_checks import architecture_args, check_architecture, registered_architecture
from .datasets import channel_stats
from .pretrained import (dataset_label_names, describe_pretrained_cfg, jsonable, pretrained_cfg_for, tag_dataset,
                         tag_geometry)
from .model_size import check_model_size
from .model_args import check_model_args
from .vit_minimal import ARCHITECTURES, MODEL_KEYWORDS, VisionTransformerMinimal

__all__ = ['VitMinimalConfig', 'MODEL_ARG_NAMES', 'AUTO_MAP', 'dataset_label_names', 'class_names', 'timm_model']


def class_names(n: int, label_names: Optional[List[str]], tag: Optional[str]) -> List[str]:
    """The names of ``n`` classes: ``label_names`` where they fit, else the tag's dataset's, else LABEL_<i>."""
    for names in (label_names, dataset_label_names(tag)):
        if names is not None and len(names) == n:
            return list(names)
    return [f'LABEL_{i}' for i in range(n)]


def timm_model(model_or_name: Any, defaults: Optional[Dict[str, Any]] = None, **kwargs) -> Any:
    """A timm model: the instance given, or ``timm.create_model(name, **defaults, **kwargs)``; keyword arguments
    apply to a name only."""
    if isinstance(model_or_name, str):
        import timm  # lazy: the config loads without torch and timm (remote code)
        return timm.create_model(model_or_name, **{**(defaults or {}), **kwargs})
    if kwargs:
        raise TypeError(f'from_timm got keyword arguments {sorted(kwargs)} with a model instance; '
                        f'they apply to a model name only.')
    return model_or_name

# The keywords of VisionTransformerMinimal a config describes (num_classes is the config's num_labels).
MODEL_ARG_NAMES: Tuple[str, ...] = tuple(k for k in MODEL_KEYWORDS if k != 'num_classes')

# Where transformers finds the classes of a saved checkpoint when the package is not installed.
AUTO_MAP: Dict[str, Any] = {
    'AutoConfig': 'configuration_vit_minimal.VitMinimalConfig',
    'AutoModel': 'modeling_vit_minimal.VitMinimalModel',
    'AutoModelForImageClassification': 'modeling_vit_minimal.VitMinimalForImageClassification',
    # by backend, as transformers 5 names them: the torchvision processor plainly (its default), the PIL one ...Pil
    'AutoImageProcessor': {'torchvision': 'image_processing_vit_minimal.VitMinimalImageProcessor',
                           'pil': 'image_processing_vit_minimal.VitMinimalImageProcessorPil'},
}


def _field_type(annotation: Any) -> Any:
    """A model keyword's type as a config field holds it after a JSON round trip: a (height, width) size may
    come back as a list, a float as an int, a choice as a plain string (the model's rules check its value)."""
    if annotation is float:
        return Union[float, int]
    if get_origin(annotation) is Literal:
        return str
    if get_origin(annotation) is Union and any(get_origin(a) is tuple for a in get_args(annotation)):
        return Union[int, List[int], Tuple[int, int]]
    return annotation


# The model's defaults, read from its signature (their one home), and one typed field per keyword with its default.
_MODEL_DEFAULTS = {name: p.default
                   for name, p in inspect.signature(VisionTransformerMinimal.__init__).parameters.items()}
_ModelFields = dataclasses.make_dataclass(
    'VitMinimalModelFields',
    [(name, _field_type(param.annotation), dataclasses.field(default=_MODEL_DEFAULTS[name]))
     for name, param in inspect.signature(VisionTransformerMinimal.__init__).parameters.items()
     if name in MODEL_ARG_NAMES],
    kw_only=True, repr=False)


def _to_size(value: Any) -> Union[int, List[int]]:
    """An int for a square size, else [height, width] (the JSON form of a 2-tuple)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise ValueError(f'Expected a size as an int or (height, width), got {value!r}.')
        return int(value[0]) if value[0] == value[1] else [int(value[0]), int(value[1])]
    return value


def _pair(value: Union[int, List[int], Tuple[int, int]]) -> Tuple[int, int]:
    return (int(value[0]), int(value[1])) if isinstance(value, (list, tuple)) else (int(value), int(value))


@strict
class VitMinimalConfig(PreTrainedConfig, _ModelFields):
    r"""Configuration of a minimal vision transformer (``VisionTransformerMinimal``).

    The fields are the keywords of ``timm_minimal.VisionTransformerMinimal`` (see its docstring);
    ``num_labels`` / ``id2label`` give the classifier head. ``pretrained_cfg`` is timm's
    preprocessing description (input size, mean, std, interpolation, crop): the image processor
    is built from it.

    Build a config from a registered timm name with ``VitMinimalConfig.from_timm``::

        >>> from timm_minimal import VitMinimalConfig, VitMinimalForImageClassification
        >>> config = VitMinimalConfig.from_timm('vit_minimal_sym_6x4.cifar10')
        >>> model = VitMinimalForImageClassification(config)

    Loading a ``config.json`` also accepts ``architecture`` (a registered name that supplies the
    attention variant, MLP, depth and heads that ``model_args`` leaves out).
    """

    model_type = 'vit_minimal'
    _auto_class = 'AutoConfig'  # save_pretrained copies this file (and its imports) next to config.json
    attribute_map = {
        'hidden_size': 'embed_dim',
        'num_hidden_layers': 'depth',
        'num_attention_heads': 'num_heads',
        'num_channels': 'in_chans',
        'image_size': 'img_size',
        'intermediate_size': 'mlp_hidden_dim',
    }

    # the model keywords are fields too (see _ModelFields): config.attn_type, config.depth, ...
    initializer_range: float = 0.02
    pretrained_cfg: Optional[Dict[str, Any]] = None

    def __post_init__(self, **kwargs):
        # timm's side of config.json: fold it into the fields (see the module docstring).
        model_args = dict(kwargs.pop('model_args', None) or {})
        architecture = kwargs.pop('architecture', None)
        num_classes = kwargs.pop('num_classes', None)
        label_names = kwargs.pop('label_names', None)
        kwargs.pop('num_features', None)  # informational for timm, always embed_dim
        kwargs.pop('label_descriptions', None)

        if 'num_classes' in model_args:  # timm's own exports put it there too
            num_classes = model_args.pop('num_classes') if num_classes is None else num_classes
            model_args.pop('num_classes', None)
        unknown = sorted(set(model_args) - set(MODEL_ARG_NAMES))
        if unknown:
            raise ValueError(
                f"Unknown model_args {unknown} for a vit_minimal config; allowed: {', '.join(MODEL_ARG_NAMES)}.")
        if architecture is not None:
            check_architecture(architecture, model_args, ARCHITECTURES)
            self._add_architecture_args(architecture, model_args)
        for key, value in model_args.items():
            setattr(self, key, value)
        self.img_size = _to_size(self.img_size)
        self.patch_size = _to_size(self.patch_size)

        if self.pretrained_cfg is None:
            self.pretrained_cfg = pretrained_cfg_for(self.in_chans, self.img_size, self.patch_size)
        else:
            self.pretrained_cfg = describe_pretrained_cfg(self.pretrained_cfg)
        self._check_size_before_labels(kwargs.get('num_labels', num_classes))
        if 'num_labels' not in kwargs:
            self._set_labels(num_classes, label_names)
        kwargs.setdefault('auto_map', copy.deepcopy(AUTO_MAP))
        super().__post_init__(**kwargs)

    def _add_architecture_args(self, architecture: str, model_args: Dict[str, Any]) -> None:
        """Adds to ``model_args`` what a registered ``architecture`` name implies (attention variant, MLP, depth,
        heads) and the geometry of its pretrained tag or input size, where ``model_args`` leaves them out; a field
        given otherwise that contradicts the name is refused."""
        for key, value in architecture_args(architecture, ARCHITECTURES).items():
            if key in model_args:
                continue
            if getattr(self, key) not in (value, self.__dataclass_fields__[key].default):
                raise ValueError(
                    f"architecture='{architecture}' implies {key}={value!r}, but {key}={getattr(self, key)!r} "
                    f"was given; pass one or the other.")
            model_args[key] = value
        # a timm export may leave the geometry to the pretrained tag
        tag = (self.pretrained_cfg or {}).get('tag')
        geometry = tag_geometry(tag) if tag_dataset(tag) else {}
        input_size = (self.pretrained_cfg or {}).get('input_size')
        if input_size is not None:
            geometry.update(in_chans=input_size[0], img_size=tuple(input_size[1:]))
        for key, value in geometry.items():
            model_args.setdefault(key, _to_size(value))

    def _set_labels(self, num_classes: Any, label_names: Any) -> None:
        """id2label and label2id where transformers' ``num_labels`` was not given: transformers' id2label wins,
        then timm's label_names / num_classes, then the classes of the tag's dataset."""
        if isinstance(label_names, dict):
            label_names = [label_names[k] for k in sorted(label_names, key=int)]
        if self.id2label is not None:
            if num_classes is not None and int(num_classes) != len(self.id2label):
                raise ValueError(
                    f'Inconsistent config: num_classes={num_classes} (timm) but id2label has {len(self.id2label)} '
                    f'entries (transformers).')
        elif label_names is not None:
            if num_classes is not None and int(num_classes) != len(label_names):
                raise ValueError(
                    f'Inconsistent config: num_classes={num_classes} but label_names has {len(label_names)} '
                    f'entries.')
            self.id2label = dict(enumerate(label_names))
        else:
            n = _MODEL_DEFAULTS['num_classes'] if num_classes is None else int(num_classes)
            self.id2label = dict(enumerate(class_names(n, None, self.pretrained_cfg.get('tag'))))
        if self.label2id is None:
            names = [str(v) for v in self.id2label.values()]
            if len(set(names)) == len(names):
                self.label2id = {name: int(i) for i, name in zip(self.id2label, names)}

    def _check_size_before_labels(self, num_classes: Any) -> None:
        """The model's size from the fields alone, before transformers makes one id2label entry per class (a config
        asking for 2e8 classes is refused here, not after gigabytes of labels); a field of the wrong type is left
        to the validation below."""
        fields = {k: getattr(self, k) for k in ('img_size', 'patch_size', 'in_chans', 'embed_dim', 'depth', 'num_heads',
                                                'use_mlp', 'mlp_hidden_dim', 'class_token', 'distill_token',
                                                'pos_embed')}
        try:
            check_model_size(**fields, num_classes=int(_MODEL_DEFAULTS['num_classes'] if num_classes is None
                                                       else num_classes))
        except (TypeError, OverflowError, ZeroDivisionError):  # a field of the wrong type or a zero patch size
            pass

    # -- validation (run by @strict after __init__) -------------------------------------------------

    def validate_architecture(self):
        super().validate_architecture()
        check_model_args(**self.model_kwargs(), num_classes=self.num_labels)  # the model's own rules

    # -- the two views of the config ----------------------------------------------------------------

    @property
    def architecture(self) -> str:
        """The registered timm entry point: this exact architecture if registered, else its family
        (``model_args`` then carry the differences, e.g. the depth)."""
        return registered_architecture(self.attn_type, self.use_mlp, self.depth, self.num_heads, ARCHITECTURES)

    @property
    def model_args(self) -> Dict[str, Any]:
        """Keywords of ``VisionTransformerMinimal`` (without ``num_classes``), JSON-ready."""
        return jsonable({k: getattr(self, k) for k in MODEL_ARG_NAMES})

    def model_kwargs(self) -> Dict[str, Any]:
        """Keywords to build the model: ``VisionTransformerMinimal(**config.model_kwargs(), num_classes=...)``."""
        kwargs = {k: getattr(self, k) for k in MODEL_ARG_NAMES}
        for key in ('img_size', 'patch_size'):
            kwargs[key] = _pair(kwargs[key])
        return kwargs

    def timm_pretrained_cfg(self) -> Dict[str, Any]:
        """The pretrained cfg timm reads: ``pretrained_cfg`` with the input size of the fields."""
        cfg = dict(self.pretrained_cfg)
        cfg['input_size'] = [self.in_chans, *_pair(self.img_size)]
        cfg['fixed_input_size'] = not self.dynamic_img_size
        for key in ('mean', 'std'):
            value = cfg.get(key)
            if value is not None and len(value) != self.in_chans:
                cfg[key] = channel_stats(value, self.in_chans, key)
        return jsonable(cfg)

    def to_dict(self) -> Dict[str, Any]:
        output = super().to_dict()
        for key in MODEL_ARG_NAMES:
            output.pop(key, None)
        output['architecture'] = self.architecture
        output['num_classes'] = self.num_labels
        output['num_features'] = self.embed_dim
        output['model_args'] = self.model_args
        output['pretrained_cfg'] = self.timm_pretrained_cfg()
        if self.id2label is not None:
            output['label_names'] = [self.id2label[i] for i in sorted(self.id2label)]
        return output

    # -- from timm -----------------------------------------------------------------------------------

    @classmethod
    def from_timm(cls, model_or_name: Any, **kwargs) -> 'VitMinimalConfig':
        """The config of a timm model: a ``VisionTransformerMinimal`` instance, or a registered name
        (with an optional pretrained tag, e.g. ``'vit_minimal_sym_6x4.cifar10'``; ``kwargs`` go to
        ``timm.create_model``). Class names come from the model's ``pretrained_cfg`` or its dataset."""
        model = timm_model(model_or_name, dict(pretrained=False), **kwargs)
        init_kwargs = getattr(model, 'init_kwargs', None)
        if init_kwargs is None:
            raise TypeError(f'from_timm expects a VisionTransformerMinimal or a vit_minimal_* name, '
                            f'got {type(model).__name__}.')
        import torch.nn as nn  # lazy: the config loads without torch and timm (remote code)
        for key, default in (('norm_layer', nn.LayerNorm), ('act_layer', nn.GELU)):
            if init_kwargs.get(key, default) is not default:
                raise ValueError(f'{key}={init_kwargs[key]!r} cannot be written to a config (only the default '
                                 f'{default.__name__} can).')
        args = {k: init_kwargs[k] for k in MODEL_ARG_NAMES}
        # what may have changed since construction
        args.update(global_pool=model.global_pool, depth=len(model.blocks), img_size=model.patch_embed.img_size)
        pretrained_cfg = dict(getattr(model, 'pretrained_cfg', None) or {})
        label_names = class_names(model.num_classes, pretrained_cfg.get('label_names'), pretrained_cfg.get('tag'))
        return cls(
            **args,
            pretrained_cfg=pretrained_cfg or None,
            id2label=dict(enumerate(label_names)),
        )
