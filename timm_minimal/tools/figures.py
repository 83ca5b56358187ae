"""matplotlib for the tools' figures, imported on first use (a module that only names it stays light)."""


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display): a figure costs its import only where one is drawn."""
    import matplotlib
    matplotlib.use('Agg', force=True)
    import matplotlib.pyplot as plt
    return plt
