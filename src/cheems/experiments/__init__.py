"""Study grids (paper §6): datasets x base models x data sizes x seeds, each cell trained and
evaluated into one experiment folder, resumable cell by cell.

- :mod:`~cheems.experiments.grid`: the YAML grid, read and checked once.
- :mod:`~cheems.experiments.cells`: the cells, their ids and settings fingerprints.
- :mod:`~cheems.experiments.prepare`: a cell's training data (curated, sampled by prompt).
- :mod:`~cheems.experiments.run`: running the cells (in this process, or as Ray tasks:
  :mod:`~cheems.experiments.ray_cells`).
- :mod:`~cheems.experiments.folder`: the experiment folder's files;
  :mod:`~cheems.experiments.status`: where a folder stands.
"""

from cheems.experiments.grid import Grid, read_grid
from cheems.experiments.run import CellProgress, run_experiment
from cheems.experiments.status import experiment_status

__all__ = ["CellProgress", "Grid", "experiment_status", "read_grid", "run_experiment"]
