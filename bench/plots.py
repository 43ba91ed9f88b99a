"""Matplotlib for the report renderers, which draw their plots where it is
installed (`pip install -e '.[bench]'`) and leave them out where not."""
import os


def pyplot():
    """matplotlib.pyplot, drawing without a display; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save(fig, docs, name):
    """Writes `fig` to docs/<name>, laid out, at the report's resolution;
    returns `name` (what the page links to)."""
    fig.tight_layout()
    fig.savefig(os.path.join(docs, name), dpi=110)
    return name
