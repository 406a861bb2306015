"""Datasets as tensors, their on-disk formats, and partitioners (see docs/design.md, "Data").

Importing :mod:`fedhet.data.datasets` and :mod:`fedhet.data.partition` registers the datasets
("fmnist", "mnist", "synthetic") and partitioners ("iid", "dirichlet", "shards", "natural").
"""
from fedhet.core.dataset import BatchTransform, DatasetBundle, TensorDataset
from fedhet.data.datasets import IDX_SOURCES, IdxSource, load_idx_dataset, locate_idx_files, verify_idx_content
from fedhet.data.download import ChecksumError, DownloadError, download_file
from fedhet.data.errors import DatasetFileError
from fedhet.data.idx import DatasetNotFoundError, IdxFiles, find_idx_files, read_idx, read_idx_split, write_idx
from fedhet.data.partition import dirichlet_partition, iid_partition, natural_partition, shard_partition
from fedhet.data.partition_report import label_counts, plot_label_heatmap, write_label_report
from fedhet.data.synthetic import make_synthetic

__all__ = [
    "BatchTransform", "ChecksumError", "DatasetBundle", "DatasetFileError", "DatasetNotFoundError",
    "DownloadError", "IDX_SOURCES", "IdxFiles", "IdxSource", "TensorDataset", "dirichlet_partition",
    "download_file", "find_idx_files", "iid_partition", "label_counts", "load_idx_dataset",
    "locate_idx_files", "make_synthetic", "natural_partition", "plot_label_heatmap", "read_idx",
    "read_idx_split", "shard_partition", "verify_idx_content", "write_idx", "write_label_report",
]
