"""The training corpus's disk cache (targets/model/corpus_cache.py): a second process reads
what the first parsed, and anything that changed the text, or the file itself, misses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from moeperf.targets.model import corpus
from moeperf.targets.model.corpus import load_corpus, parse_corpus, stdlib_files


@pytest.fixture
def stdlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A two-module standard library, and an empty cache directory of this test's own."""
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "lib"
    root.mkdir()
    (root / "alpha.py").write_text('"""Alpha does the first thing."""\n')
    (root / "beta.py").write_text('def f():\n    """Beta explains f."""\n')
    load_corpus.cache_clear()  # this process's copy: each load below goes to the disk
    yield root
    load_corpus.cache_clear()


def _cache_files(stdlib: Path) -> list[Path]:
    return sorted((stdlib.parent / "cache").glob("corpus-*.json"))


def test_the_first_load_writes_the_parsed_text_and_the_next_reads_it(stdlib, monkeypatch):
    first = load_corpus(stdlib)
    assert first == parse_corpus(stdlib_files(stdlib))
    assert len(_cache_files(stdlib)) == 1
    # The next process: nothing may be parsed, the text comes from the file.
    load_corpus.cache_clear()
    monkeypatch.setattr(corpus, "parse_corpus", lambda files: pytest.fail("parsed again"))
    assert load_corpus(stdlib) == first


def test_a_changed_file_misses_the_cache_and_gets_its_own_text(stdlib):
    before = load_corpus(stdlib)
    (stdlib / "beta.py").write_text('def f():\n    """Beta now says something longer."""\n')
    load_corpus.cache_clear()
    after = load_corpus(stdlib)
    assert after.sha256 != before.sha256
    assert "Beta now says something longer." in "\n".join(after.documents)
    assert len(_cache_files(stdlib)) == 2


def test_a_file_that_does_not_match_its_checksum_is_parsed_again(stdlib):
    truth = load_corpus(stdlib)
    (written,) = _cache_files(stdlib)
    written.write_text(written.read_text().replace("Alpha does", "Alpha forged"))
    load_corpus.cache_clear()
    assert load_corpus(stdlib) == truth
    assert "Alpha does" in written.read_text()  # written again, whole


def test_an_unwritable_cache_leaves_the_text_correct(stdlib, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(blocker / "cache"))
    assert load_corpus(stdlib) == parse_corpus(stdlib_files(stdlib))
