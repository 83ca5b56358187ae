"""Figures of models and runs that the trainer and the tools both draw (matplotlib, imported where one is
drawn): ``attention`` and ``confusion``."""
