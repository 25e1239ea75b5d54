"""The bodies of the public calls that ``import cheems`` offers, one module per family of jobs.

:mod:`cheems` loads each call from here on first use (PEP 562), so ``import cheems`` stays as
light as the core. Each call is what one ``cheems`` command does, less the printing: it takes
the settings objects whose fields are that command's flags, returns data and raises
:class:`~cheems.records.CheemsInputError` on bad input.

- :mod:`~cheems.api.data_files`: read, validate, stats, make_tasks, rank.
- :mod:`~cheems.api.evaluation`: evaluate, score, best_of_n.
- :mod:`~cheems.api.reports`: compare, correlate, write_report.
- :mod:`~cheems.api.models`: train, init_model, convert, serve.
- :mod:`~cheems.api.datasets`: list_datasets, dataset_info, load_dataset.
- :mod:`~cheems.api.experiments`: run_experiment, experiment_status, experiment_tables.
- :mod:`~cheems.api.curation`: curate_sample ... curate_merge, analyze_bias.
- :mod:`~cheems.api.annotation`: annotate_init ... annotate_list_studies.
"""

__all__: list[str] = []
