"""AG News CSV loader and the built-in word tokenizer on tiny fixtures in the official CSV format."""
import csv
import sys

import pytest
import torch

import fedhet.data.paper_datasets  # noqa: F401  (registers the datasets)
from fedhet.core.registry import DATASETS
from fedhet.data.agnews import PAD_ID, UNK_ID, WordTokenizer, load_agnews, read_agnews_csv, words
from fedhet.data.errors import DatasetFileError

TRAIN_ROWS = [
    ("3", "Wall St. Bears Claw Back", "Reuters - Short-sellers, Wall Street's dwindling band"),
    ("4", "Space probe", "NASA's probe reaches the moon; the moon is far"),
    ("2", "Cup final", "The team wins the cup"),
    ("1", "Summit talks", "Leaders meet, the talks go on"),
]
TEST_ROWS = [("4", "Probe news", "the probe and a comet"), ("1", "Talks", "zebra talks")]


def write_csv(path, rows):
    """Every field quoted, no header: the layout of ag_news_csv/train.csv."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(rows)


def write_agnews(directory):
    directory.mkdir(parents=True, exist_ok=True)
    write_csv(directory / "train.csv", TRAIN_ROWS)
    write_csv(directory / "test.csv", TEST_ROWS)


def test_read_csv_maps_classes_and_joins_title_and_description(tmp_path):
    write_csv(tmp_path / "train.csv", TRAIN_ROWS)
    labels, texts = read_agnews_csv(tmp_path / "train.csv")
    assert labels == [2, 3, 1, 0]
    assert texts[2] == "Cup final The team wins the cup"


def test_word_split_rule():
    assert words("Wall Street's 2 dwindling, BAND!") == ["wall", "street's", "2", "dwindling", "band"]


def test_vocabulary_is_most_frequent_words_with_alphabetical_ties():
    tokenizer = WordTokenizer.fit(["b a c a", "c a d"], vocab_size=2)
    # counts: a 3, c 2, b 1, d 1 -> keep a, c
    assert tokenizer.vocabulary == {"a": 2, "c": 3} and tokenizer.num_ids == 4
    tie = WordTokenizer.fit(["y x z"], vocab_size=2)
    assert tie.vocabulary == {"x": 2, "y": 3}
    ids = tokenizer.encode(["a b c a c a", "d"], max_length=4)
    assert ids.tolist() == [[2, UNK_ID, 3, 2], [UNK_ID, PAD_ID, PAD_ID, PAD_ID]]


def test_load_agnews_with_builtin_tokenizer(tmp_path):
    write_agnews(tmp_path / "ag_news_csv")
    bundle = load_agnews(tmp_path, vocab_size=3, max_length=6)
    assert bundle.name == "agnews" and bundle.num_classes == 4 and bundle.input_shape == (6,)
    assert bundle.train.inputs.dtype == torch.int64 and bundle.train.inputs.shape == (4, 6)
    assert bundle.train.targets.tolist() == [2, 3, 1, 0] and bundle.test.targets.tolist() == [3, 0]
    # Training counts: "the" 5; "cup", "moon", "probe", "talks", "wall" 2; the rest 1. Top 3 with
    # alphabetical ties: the, cup, moon.
    the, cup, moon = 2, 3, 4
    assert bundle.train.inputs[2].tolist() == [cup, UNK_ID, the, UNK_ID, UNK_ID, the]  # "cup final the team wins the"
    assert bundle.test.inputs[0].tolist() == [UNK_ID, UNK_ID, the, UNK_ID, UNK_ID, UNK_ID]
    assert bundle.test.inputs[1].tolist() == [UNK_ID, UNK_ID, UNK_ID, PAD_ID, PAD_ID, PAD_ID]
    assert bundle.train.inputs[1].tolist() == [UNK_ID] * 5 + [the]  # "space probe nasa's probe reaches the"
    longer = load_agnews(tmp_path, vocab_size=3, max_length=10)
    assert longer.train.inputs[1].tolist() == [UNK_ID] * 5 + [the, moon, the, moon, UNK_ID]


def test_bad_class_index_names_file_and_line(tmp_path):
    write_csv(tmp_path / "train.csv", TRAIN_ROWS[:2] + [("5", "t", "d")])
    with pytest.raises(DatasetFileError, match=r"train\.csv, line 3: class index must be 1, 2, 3 or 4, found '5'"):
        read_agnews_csv(tmp_path / "train.csv")


def test_wrong_field_count_and_missing_files(tmp_path):
    write_csv(tmp_path / "test.csv", [("1", "only a title")])
    with pytest.raises(DatasetFileError, match=r"test\.csv, line 1: expected 3 fields"):
        read_agnews_csv(tmp_path / "test.csv")
    with pytest.raises(DatasetFileError, match=r"no AG News train\.csv"):
        load_agnews(tmp_path / "empty")
    (tmp_path / "bin.csv").write_bytes(b'"1","\xff\xfe","x"\n')
    with pytest.raises(DatasetFileError, match=r"bin\.csv: not a readable UTF-8 CSV"):
        read_agnews_csv(tmp_path / "bin.csv")


def test_tokenizer_path_without_transformers_gives_install_hint(tmp_path, monkeypatch):
    write_agnews(tmp_path)
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"pip install fedhet\[nlp\]"):
        load_agnews(tmp_path, tokenizer=str(tmp_path / "tok"))


def test_registered_agnews(tmp_path):
    write_agnews(tmp_path)
    entry = DATASETS.get("agnews")
    bundle = entry.factory(entry.options_cls(root=str(tmp_path), vocab_size=5, max_length=8), seed=0)
    assert bundle.train.inputs.shape == (4, 8) and bundle.train_transform is None
    assert int(bundle.train.inputs.max()) < 5 + 2


def _save_word_level_tokenizer(directory, *, with_eos=True):
    """A tiny Hugging Face tokenizer saved locally (no hub access), GPT-NeoX-like: no pad token."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {"<|endoftext|>": 0, "[UNK]": 1, "the": 2, "probe": 3, "moon": 4, "talks": 5}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    extra = {"eos_token": "<|endoftext|>"} if with_eos else {}
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", **extra)
    fast.save_pretrained(str(directory))


def test_local_hugging_face_tokenizer_pads_with_end_of_text(tmp_path):
    write_agnews(tmp_path / "csv")
    _save_word_level_tokenizer(tmp_path / "tok")
    bundle = load_agnews(tmp_path / "csv", tokenizer=str(tmp_path / "tok"), max_length=7)
    assert bundle.train.inputs.dtype == torch.int64 and bundle.train.inputs.shape == (4, 7)
    # "Cup final The team wins the cup": case-sensitive word-level vocabulary, so only "the" is known.
    assert bundle.train.inputs[2].tolist() == [1, 1, 1, 1, 1, 2, 1]
    # "Talks zebra talks": right-padded with the end-of-text id 0 (GPT-NeoX/Pythia convention).
    assert bundle.test.inputs[1].tolist() == [1, 1, 5, 0, 0, 0, 0]


def test_hugging_face_tokenizer_problems_are_named(tmp_path):
    write_agnews(tmp_path / "csv")
    pytest.importorskip("transformers")
    with pytest.raises(DatasetFileError, match="tokenizer directory missing"):
        load_agnews(tmp_path / "csv", tokenizer=str(tmp_path / "absent"))
    _save_word_level_tokenizer(tmp_path / "no_eos", with_eos=False)
    with pytest.raises(DatasetFileError, match="neither a pad nor an end-of-text token"):
        load_agnews(tmp_path / "csv", tokenizer=str(tmp_path / "no_eos"))


def test_agnews_lists_the_csv_files_it_read(tmp_path):
    write_agnews(tmp_path)
    assert load_agnews(tmp_path, vocab_size=3, max_length=6).source_files == (
        str(tmp_path / "train.csv"), str(tmp_path / "test.csv"))
