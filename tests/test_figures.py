"""The figures people read: names of crowded points placed where they overlap no other name and no point, a title on
every figure, and a zoomed panel where the reproduction's curves crowd near 100%."""
import json
from pathlib import Path

from timm_minimal.tools.figures import label_points, pyplot
from timm_minimal.tools.paper import report, results_summary

ROOT = Path(__file__).resolve().parents[1]


def test_names_of_crowded_points_overlap_neither_each_other_nor_a_point():
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    points = [(70_000 + 500 * i, 98.0 + 0.05 * i) for i in range(6)] + [(2e5, 99.0), (2.1e5, 99.02), (3e4, 93.0)]
    ax.scatter(*zip(*points))
    ax.set_xscale('log')
    ax.set_xlim(2e4, 4e5)
    ax.set_ylim(92, 100)
    fig.tight_layout()
    texts = label_points(ax, points, [f'model_{i}_6x4' for i in range(len(points))])
    renderer = fig.canvas.get_renderer()
    from matplotlib.text import Text
    for t in texts:
        t.update_positions(renderer)
    boxes = [Text.get_window_extent(t, renderer) for t in texts]  # the names, without their lines
    frame = ax.get_window_extent(renderer)
    dots = [ax.transData.transform(p) for p in points]
    for i, box in enumerate(boxes):
        assert all(not box.overlaps(other) for other in boxes[i + 1:]), texts[i].get_text()
        assert not any(box.contains(x, y) for x, y in dots)
        assert frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
    plt.close(fig)


def test_the_reproduction_plot_zooms_in_where_the_curves_crowd(tmp_path, monkeypatch):
    rows = json.loads((ROOT / 'results' / 'reproduce_paper.json').read_text())
    figures = []
    plt = pyplot()
    monkeypatch.setattr(plt.Figure, 'savefig', lambda fig, *a, **k: figures.append(fig))
    report.write_plot(rows, tmp_path / 'plot.png')
    (fig,) = figures
    full, zoom = fig.axes[1], fig.axes[2]
    assert fig._suptitle.get_text() and all(ax.get_title() for ax in fig.axes)
    finals = sorted(r['val_acc_per_epoch'][-1] for r in rows)
    assert zoom.get_ylim()[0] >= 95 and zoom.get_ylim()[1] <= 100 and full.get_ylim()[0] < 50
    assert sum(zoom.get_ylim()[0] <= f for f in finals) >= len(finals) - 1  # all but the outlier inside the zoom


def test_the_summary_plot_has_a_titled_panel_per_group(tmp_path, monkeypatch):
    paths = sorted((ROOT / 'results').glob('*layer*.json')) + [ROOT / 'results' / 'reproduce_paper.json']
    rows = results_summary.load_rows(paths)
    figures = []
    plt = pyplot()
    monkeypatch.setattr(plt.Figure, 'savefig', lambda fig, *a, **k: figures.append(fig))
    results_summary.write_plot(rows, tmp_path / 'summary.png')
    (fig,) = figures
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert fig._suptitle.get_text() and len(panels) == 6 and all(ax.get_title() for ax in panels)
    assert sum(len(ax.texts) for ax in panels) == len(rows)  # every point named


