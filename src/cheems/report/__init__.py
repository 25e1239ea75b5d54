"""What a team reads after evaluating: best-of-n curves, correlation with downstream results,
paired statistics between two reward models, and the HTML / Markdown report."""

__all__: list[str] = []
