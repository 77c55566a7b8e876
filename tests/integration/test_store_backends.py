"""The reader and offset-store contracts (tests/contracts/) on PostgreSQL, and on SQL Server when
TEST_SQLSERVER_URL names one (the `sqlserver_url` fixture skips, saying why, otherwise)."""

from __future__ import annotations

import pytest

from tests.contracts.offsets import OffsetStoreContract
from tests.contracts.reader import HorizonReaderContract

pytestmark = pytest.mark.integration


class TestPostgresReader(HorizonReaderContract):
    @pytest.fixture()
    def backend_url(self, postgres_url: str) -> str:
        return postgres_url


class TestPostgresOffsetStore(OffsetStoreContract):
    @pytest.fixture()
    def backend_url(self, postgres_url: str) -> str:
        return postgres_url


@pytest.mark.sqlserver
class TestMssqlReader(HorizonReaderContract):
    @pytest.fixture()
    def backend_url(self, sqlserver_url: str) -> str:
        return sqlserver_url


@pytest.mark.sqlserver
class TestMssqlOffsetStore(OffsetStoreContract):
    @pytest.fixture()
    def backend_url(self, sqlserver_url: str) -> str:
        return sqlserver_url
