"""The lease and offset store contract on SQLite (a file per test): see tests/contracts/offsets.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contracts.offsets import OffsetStoreContract


class TestSqliteOffsetStore(OffsetStoreContract):
    @pytest.fixture()
    def backend_url(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'offsets.db'}"
