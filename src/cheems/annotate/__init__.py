"""The CheemsBench human annotation protocol as a web app (`cheems annotate`, extra ``[annotate]``):
triple-wise tasks with scores, pair labels and rankings, double-blind overlap with agreement and
alignment, cascading single-blind review with gold items, a dashboard, and export to a benchmark."""

__all__: list[str] = []
