"""Named public preference datasets: one entry per dataset (hub id, revision, licence) and its
converter to cheems rows, loaded through Hugging Face ``datasets`` (the ``[datasets]`` extra).

- :mod:`cheems.catalog.entry`: the :class:`Entry` and the builders converters share;
- :mod:`cheems.catalog.chinese`, :mod:`cheems.catalog.english`, :mod:`cheems.catalog.rated`,
  :mod:`cheems.catalog.cheems_release`: the entries, by family;
- :mod:`cheems.catalog.registry`: every entry by name;
- :mod:`cheems.catalog.hub`: reading an entry's rows through ``datasets.load_dataset``;
- :mod:`cheems.catalog.lfs`: the Git LFS files of a GitHub repository (the Cheems releases);
- :mod:`cheems.catalog.get`: converting a dataset to a cheems JSONL file, and resolving a
  name or ``hf:ID[:config][@split]`` wherever a command takes a data file.
- :mod:`cheems.catalog.tables`: the catalogue as the tables of docs/catalog.md.
"""

__all__: list[str] = []
