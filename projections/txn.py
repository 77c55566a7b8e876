"""Idempotent micro-batch writes with Delta's transaction identifiers.

Delta records, per table, the highest `txnVersion` committed for each `txnAppId` and skips a write whose
version is not higher. Each projection uses its micro-batch id as the version, so a batch that Spark runs
again after a failure (the Delta commit landed, the checkpoint commit did not) changes each table once.

Batch ids restart at 0 when a checkpoint is reset, so the app id must change with it: it is stored inside
the checkpoint directory and created with it. Deleting the checkpoint therefore rotates the app id.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from projections.lake import read_text, write_text

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TXN_APP_ID: Final = "spark.databricks.delta.write.txnAppId"
TXN_VERSION: Final = "spark.databricks.delta.write.txnVersion"
APP_ID_FILE: Final = "projection-app-id"


@dataclass(frozen=True)
class Txn:
    """The (app id, version) pair that makes one micro-batch's writes apply once per table."""

    app_id: str
    version: int

    @contextmanager
    def applied_once(self, session: SparkSession) -> Iterator[None]:
        """Within this block, Delta writes (MERGE included) of `session` carry this app id and version.

        Pass the micro-batch's own session (`batch_df.sparkSession`): Spark gives each streaming query a
        cloned session, so concurrent projections do not see each other's settings.
        """
        session.conf.set(TXN_APP_ID, self.app_id)
        session.conf.set(TXN_VERSION, str(self.version))
        try:
            yield
        finally:
            session.conf.unset(TXN_APP_ID)
            session.conf.unset(TXN_VERSION)

    def writer_options(self) -> dict[str, str]:
        """The same identifiers as DataFrameWriter options, for plain appends."""
        return {"txnAppId": self.app_id, "txnVersion": str(self.version)}


def checkpoint_app_id(checkpoint: str, projection: str, spark: SparkSession | None = None) -> str:
    """The app id stored in this checkpoint, created (new and unique) when the checkpoint is new."""
    path = f"{checkpoint}/{APP_ID_FILE}"
    existing = read_text(path, spark)
    if existing and existing.strip():
        return existing.strip()
    app_id = f"{projection}-{uuid.uuid4().hex}"
    write_text(path, app_id + "\n", spark)
    return app_id
