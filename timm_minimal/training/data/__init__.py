"""The data: the datasets and how they load (``loading``), what a ``--dataset`` name means (``names``), image
folders and archives, the two data paths (``loader_data``, ``device_data``; the choice: ``paths``) and the
batched augmentation. The package itself imports nothing: the trainer's command line reads ``names`` without
torch."""
