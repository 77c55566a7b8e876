"""The outbox reader contract on SQLite (a file per test): see tests/contracts/reader.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contracts.reader import ReaderContract


class TestSqliteReader(ReaderContract):
    @pytest.fixture()
    def backend_url(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'outbox.db'}"
