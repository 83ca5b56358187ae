"""The run's log: a line said by the main process alone, through the ``timm_minimal.training`` logger, which the tools
show on the console (``cli.console``) and a caller of ``train`` configures as any logger. Every part of the trainer
(its data, its stages, its loop) says its lines here."""
import logging

from accelerate.state import PartialState, is_initialized

__all__ = ['say']

_RUN_LOG = logging.getLogger('timm_minimal.training')


def say(message: str, warning: bool = False) -> None:
    """A line of the run's log (a warning with ``warning``), said once: by the main process of a run of several."""
    if not is_initialized() or PartialState().is_main_process:
        (_RUN_LOG.warning if warning else _RUN_LOG.info)(message)
