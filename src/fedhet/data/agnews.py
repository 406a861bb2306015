"""AG News topic classification from the CSV release, tokenised to fixed-length int64 id sequences.

Format (Zhang, Zhao & LeCun, "Character-level Convolutional Networks for Text Classification",
NeurIPS 2015; ``ag_news_csv.tgz``, e.g. https://s3.amazonaws.com/fast-ai-nlp/ag_news_csv.tgz):
``ag_news_csv/train.csv`` (120,000 rows) and ``test.csv`` (7,600), no header, each row
``"class index","title","description"`` with class index 1..4 (World, Sports, Business, Sci/Tech),
mapped here to labels 0..3. A row's text is ``title + " " + description``.

Tokenisation:

- With ``tokenizer`` = a local directory holding a Hugging Face tokenizer (e.g. Pythia-70M's, as in
  the FedAWARE AG News experiment) and ``transformers`` installed: that tokenizer, loaded with
  ``local_files_only=True`` (never downloads); padding uses its pad token, or its end-of-text token
  when it has none (GPT-NeoX/Pythia: id 0).
- Otherwise the built-in :class:`WordTokenizer`: lower-case, words = runs of letters/digits
  (with inner apostrophes), a vocabulary of the ``vocab_size`` most frequent training-set words,
  id 0 = padding, id 1 = unknown word, words 2 .. vocab_size + 1. **This is not Pythia's BPE**: use
  it for models with their own embedding table, not with pretrained Pythia weights.

Every sequence is truncated or right-padded to ``max_length`` ids.
"""
from __future__ import annotations

import collections
import csv
import dataclasses
import re
from pathlib import Path
from typing import Iterable, Sequence

import torch

from fedhet.core.dataset import DatasetBundle, TensorDataset
from fedhet.data.errors import DatasetFileError

AGNEWS_SOURCE = "ag_news_csv.tgz (Zhang et al. 2015), e.g. https://s3.amazonaws.com/fast-ai-nlp/ag_news_csv.tgz"
AGNEWS_NUM_CLASSES = 4

PAD_ID = 0
UNK_ID = 1
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")


def read_agnews_csv(path: str | Path) -> tuple[list[int], list[str]]:
    """Labels 0..3 and texts (``title description``) of one AG News CSV file."""
    path = Path(path)
    if not path.is_file():
        raise DatasetFileError(f"{path}: missing; expected train.csv and test.csv from {AGNEWS_SOURCE}")
    labels, texts = [], []
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            for row in reader:
                line = reader.line_num
                if not row:
                    continue  # a blank line carries no example
                if len(row) != 3:
                    raise DatasetFileError(f"{path}, line {line}: expected 3 fields (class index, title, description), "
                                           f"found {len(row)}: {row!r:.200}")
                index = row[0].strip()
                if index not in ("1", "2", "3", "4"):
                    raise DatasetFileError(f"{path}, line {line}: class index must be 1, 2, 3 or 4, found {row[0]!r}")
                labels.append(int(index) - 1)
                texts.append(f"{row[1]} {row[2]}")
    except (UnicodeDecodeError, csv.Error) as error:
        raise DatasetFileError(f"{path}: not a readable UTF-8 CSV file ({type(error).__name__}: {error})") from error
    if not labels:
        raise DatasetFileError(f"{path}: no rows")
    return labels, texts


def words(text: str) -> list[str]:
    """The built-in tokenizer's word split: lower-case runs of letters/digits (inner apostrophes kept)."""
    return _WORD.findall(text.lower())


@dataclasses.dataclass(frozen=True)
class WordTokenizer:
    """Word-level tokenizer: id 0 pads, id 1 is an unknown word, ``vocabulary[word]`` >= 2."""

    vocabulary: dict[str, int]

    @property
    def num_ids(self) -> int:
        """Size of the id range (an embedding table needs this many rows)."""
        return len(self.vocabulary) + 2

    @classmethod
    def fit(cls, texts: Iterable[str], vocab_size: int) -> "WordTokenizer":
        """The ``vocab_size`` most frequent words of ``texts``; ties broken alphabetically (deterministic)."""
        if vocab_size < 1:
            raise ValueError(f"vocab_size = {vocab_size}: must be >= 1")
        counts = collections.Counter(word for text in texts for word in words(text))
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:vocab_size]
        return cls({word: position + 2 for position, (word, _) in enumerate(ranked)})

    def encode(self, texts: Sequence[str], max_length: int) -> torch.Tensor:
        """int64 ``[len(texts), max_length]``: ids of the first ``max_length`` words, right-padded with 0."""
        out = torch.full((len(texts), max_length), PAD_ID, dtype=torch.int64)
        for row, text in enumerate(texts):
            ids = [self.vocabulary.get(word, UNK_ID) for word in words(text)[:max_length]]
            if ids:
                out[row, :len(ids)] = torch.tensor(ids, dtype=torch.int64)
        return out


def hugging_face_encoder(directory: str | Path, max_length: int):
    """The text encoder of a saved Hugging Face tokenizer in ``directory`` (nothing is downloaded);
    ``transformers`` is imported here, only when ``data.tokenizer`` names one."""
    try:
        from transformers import AutoTokenizer
    except ImportError as error:
        raise ImportError("a Hugging Face tokenizer (data.tokenizer) needs transformers: pip install fedhet[nlp]; "
                          "or leave data.tokenizer unset to use the built-in word tokenizer") from error
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise DatasetFileError(f"{directory}: tokenizer directory missing; it must hold a saved Hugging Face "
                               "tokenizer (tokenizer.json / tokenizer_config.json); nothing is downloaded")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except Exception as error:
        raise DatasetFileError(f"{directory}: cannot load a tokenizer from it ({type(error).__name__}: {error})") from error
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise DatasetFileError(f"{directory}: the tokenizer has neither a pad nor an end-of-text token to pad with")
        tokenizer.pad_token = tokenizer.eos_token  # GPT-NeoX/Pythia convention for classification
    tokenizer.padding_side = "right"

    def encode(texts: Sequence[str]) -> torch.Tensor:
        batch = tokenizer(list(texts), max_length=max_length, truncation=True, padding="max_length",
                          return_tensors="pt")
        return batch["input_ids"].to(torch.int64)
    return encode


def _agnews_dir(root: Path) -> Path:
    for candidate in (root, root / "ag_news_csv"):
        if (candidate / "train.csv").is_file():
            return candidate
    raise DatasetFileError(f"{root}: no AG News train.csv; expected {root}/train.csv and {root}/test.csv "
                           f"(or {root}/ag_news_csv/...) from {AGNEWS_SOURCE}")


def load_agnews(root: str | Path, *, tokenizer: str | Path | None = None, vocab_size: int = 30000,
                max_length: int = 128) -> DatasetBundle:
    """AG News as int64 token ids ``[n, max_length]`` and int64 labels 0..3 (see module doc).

    ``tokenizer``: a local Hugging Face tokenizer directory, or ``None`` for the built-in
    :class:`WordTokenizer` fitted on the training texts with ``vocab_size`` words (ids then lie in
    ``0 .. vocab_size + 1``). ``vocab_size`` is ignored with a Hugging Face tokenizer.
    """
    if max_length < 1:
        raise ValueError(f"max_length = {max_length}: must be >= 1")
    base = _agnews_dir(Path(root).expanduser())
    train_labels, train_texts = read_agnews_csv(base / "train.csv")
    test_labels, test_texts = read_agnews_csv(base / "test.csv")
    if tokenizer is not None:
        encode = hugging_face_encoder(tokenizer, max_length)
        train_ids, test_ids = encode(train_texts), encode(test_texts)
    else:
        word_tokenizer = WordTokenizer.fit(train_texts, vocab_size)
        train_ids = word_tokenizer.encode(train_texts, max_length)
        test_ids = word_tokenizer.encode(test_texts, max_length)
    return DatasetBundle(
        name="agnews",
        train=TensorDataset(train_ids, torch.tensor(train_labels, dtype=torch.int64)),
        test=TensorDataset(test_ids, torch.tensor(test_labels, dtype=torch.int64)),
        num_classes=AGNEWS_NUM_CLASSES,
        input_shape=(max_length,),
        source_files=(str(base / "train.csv"), str(base / "test.csv")),
    )
