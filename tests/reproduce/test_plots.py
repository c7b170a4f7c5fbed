"""baco.plots: each plot draws what it is given and saves a PNG atomically."""

import numpy as np

from baco import plots


def test_convergence_is_log_scaled_steps(tmp_path):
    fig = plots.convergence({"baco": [(1, 10.0), (50, 2.0), (80, 1.5)],
                             "random": [(1, 12.0), (40, float("inf")), (60, 8.0)]},
                            title="t")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "samples"
    assert plots.convergence({"baco": [(0.5, 3.0)]}, xlabel="wall seconds",
                             log_x=True).axes[0].get_xlabel() == "wall seconds"
    assert [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")
            ] == ["baco", "random"]
    plots.save(fig, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["c.png"]


def test_energy_latency_marks_the_chosen_design():
    points = [("a", 10.0, 5.0), ("a", 20.0, 2.0), ("b", 5.0, 9.0)]
    fig = plots.energy_latency(points, chosen=1)
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert "chosen: a" in labels and labels.count("a") == 1
    star = ax.collections[-1].get_offsets()
    assert np.allclose(star, [[20.0, 2.0]])
    assert ax.get_xscale() == ax.get_yscale() == "log"


def test_layer_breakdown_bars_per_method():
    fig = plots.layer_breakdown({"x": [("l1", 3.0), ("l2", 4.0)], "y": [("l2", 1.0)]})
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["l1", "l2"]
    heights = [p.get_height() for p in ax.patches]
    assert heights[:2] == [3.0, 4.0] and heights[3] == 1.0 and np.isnan(heights[2])


def test_predicted_vs_measured_reports_log_correlation():
    m = np.array([10.0, 100.0, 1000.0])
    fig = plots.predicted_vs_measured({"model": (m * 2, m)}, highlight=[True, False, True])
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "model (log r=1.00)" in labels and "y = x" in labels


def test_grouped_bars_with_reference_markers():
    fig = plots.grouped_bars(["g1", "g2"], {"a": [2.0, None], "b": [1.0, 1.0]},
                             reference={"a": [3.0, 4.0]})
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["g1", "g2"]
    assert "seed (printed)" in ax.get_legend_handles_labels()[1]
