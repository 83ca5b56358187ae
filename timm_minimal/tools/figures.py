"""matplotlib for the tools' figures, imported on first use (a module that only names it stays light)."""


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display): a figure costs its import only where one is drawn."""
    import matplotlib  # lazy: matplotlib where a figure is drawn
    matplotlib.use('Agg', force=True)
    import matplotlib.pyplot as plt  # lazy: matplotlib where a figure is drawn
    return plt


# where a label may go beside its point, in the order tried: right, then above and below, then left
_PLATE = dict(boxstyle='square,pad=0.05', facecolor='white', edgecolor='none', alpha=.75)  # lines pass behind names
_DIRECTIONS = ((1, 0), (1, 1), (1, -1), (0, 1), (0, -1), (-1, 0), (-1, 1), (-1, -1))


def label_points(ax, points, labels, colors=None, fontsize: float = 7, step: float = 6):
    """Name each of ``points`` (data coordinates) beside it where the name overlaps no other name, no point and not
    the axes' edge: tried in eight directions at growing distances, a name set apart joined to its point by a thin
    line. Call it once the axes' limits and the figure's layout are final (the names keep their offsets in points).
    Returns the annotations."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    dots = [ax.transData.transform(p) for p in points]
    from matplotlib.transforms import Bbox  # lazy: matplotlib where a figure is drawn
    taken = [Bbox.from_extents(x - 4, y - 4, x + 4, y + 4) for x, y in dots]
    colors = colors or ['black'] * len(points)
    placed = []
    for point, label, color in zip(points, labels, colors):
        style = dict(fontsize=fontsize, color=color, bbox=_PLATE, textcoords='offset points')
        best = None
        for distance in (1, 2, 3, 4.5, 6.5, 9, 12):
            for dx, dy in _DIRECTIONS:
                where = dict(xytext=(dx * step * distance, dy * step * distance * .8),
                             ha={1: 'left', 0: 'center', -1: 'right'}[dx], va={1: 'bottom', 0: 'center', -1: 'top'}[dy])
                text = ax.annotate(label, point, **where, **style)
                box = text.get_window_extent(renderer)  # the name alone: its line is drawn once it has a place
                text.remove()
                if frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1) and \
                        not any(box.overlaps(t) for t in taken):
                    best = (where, box, distance > 1)
                    break
            if best:
                break
        if best is None:  # nowhere free: beside the point
            best = (dict(xytext=(step, 0), va='center'), None, False)
        where, box, line = best
        text = ax.annotate(label, point, **where, **style, arrowprops=dict(
            arrowstyle='-', lw=.4, color=color, shrinkA=0, shrinkB=3) if line else None)
        taken.append(box or text.get_window_extent(renderer))
        placed.append(text)
    return placed
