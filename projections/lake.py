"""Where a projection's files live under the lake root, and small text files read and written there.

Layout: `<lake>/<name>` (the table), `<lake>/_checkpoints/<name>`, `<lake>/_quarantine/<name>`,
`<lake>/_staging/<name>` (kinds that keep a deduplicated event set), `<lake>/_progress/<name>.json`.
The lake may be a local path or a Hadoop URI (s3a://, abfss://, hdfs://); small files then go through
Spark's Hadoop FileSystem.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_local(path: str) -> bool:
    """True for a plain path or a file:// URI."""
    return not _SCHEME.match(path) or path.startswith("file://")


def local_path(path: str) -> Path:
    return Path(path.removeprefix("file://"))


@dataclass(frozen=True)
class Lake:
    """The lake root and the paths of one projection's table, checkpoint, quarantine, staging and progress."""

    root: str

    def __post_init__(self) -> None:
        root = self.root.rstrip("/")
        if is_local(root):
            root = str(local_path(root).expanduser().resolve())
        object.__setattr__(self, "root", root)

    def table(self, name: str) -> str:
        return f"{self.root}/{name}"

    def checkpoint(self, name: str) -> str:
        return f"{self.root}/_checkpoints/{name}"

    def quarantine(self, name: str) -> str:
        return f"{self.root}/_quarantine/{name}"

    def staging(self, name: str) -> str:
        return f"{self.root}/_staging/{name}"

    def progress(self, name: str) -> str:
        return f"{self.root}/_progress/{name}.json"

    def lock(self, name: str) -> str:
        return f"{self.root}/_locks/{name}.lock"

    def replays(self, name: str) -> str:
        """Where replays of a projection build their new tables (one lake per replay) and leave a record."""
        return f"{self.root}/_replays/{name}"


def read_text(path: str, spark: SparkSession | None = None) -> str | None:
    """The file's text, or None when it does not exist."""
    if is_local(path):
        p = local_path(path)
        return p.read_text() if p.exists() else None
    fs, hpath = _hadoop(spark, path)
    if not fs.exists(hpath):
        return None
    stream = fs.open(hpath)
    try:
        jvm = _jvm(spark)
        return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def write_text(path: str, text: str, spark: SparkSession | None = None) -> None:
    """Replace the file's content atomically where the file system allows it (rename over the old file)."""
    if is_local(path):
        target = local_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, target)
        return
    fs, hpath = _hadoop(spark, path)
    stream = fs.create(hpath, True)
    try:
        stream.write(text.encode())
    finally:
        stream.close()


def has_entries(path: str, spark: SparkSession | None = None) -> bool:
    """Whether the directory exists and holds anything."""
    if is_local(path):
        p = local_path(path)
        return p.is_dir() and any(p.iterdir())
    fs, hpath = _hadoop(spark, path)
    return bool(fs.exists(hpath)) and len(fs.listStatus(hpath)) > 0


def delete_path(path: str, spark: SparkSession | None = None) -> bool:
    """Delete a file or a directory tree; True if something was there."""
    if is_local(path):
        import shutil

        p = local_path(path)
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
        else:
            return False
        return True
    fs, hpath = _hadoop(spark, path)
    return bool(fs.delete(hpath, True))


def move_path(source: str, target: str, spark: SparkSession | None = None) -> bool:
    """Move a file or directory tree to `target`, replacing what was there; False if `source` is missing."""
    if is_local(source) and is_local(target):
        import shutil

        src, dst = local_path(source), local_path(target)
        if not src.exists():
            return False
        delete_path(target)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(src), str(dst))
        return True
    fs, src_path = _hadoop(spark, source)
    if not fs.exists(src_path):
        return False
    _, dst_path = _hadoop(spark, target)
    fs.delete(dst_path, True)
    fs.mkdirs(dst_path.getParent())
    if not fs.rename(src_path, dst_path):
        raise OSError(f"could not move {source} to {target}")
    return True


def _jvm(spark: SparkSession | None) -> Any:
    if spark is None:
        raise ValueError("a Spark session is needed to reach a non-local lake")
    return spark.sparkContext._jvm


def _hadoop(spark: SparkSession | None, path: str) -> tuple[Any, Any]:
    jvm = _jvm(spark)
    assert spark is not None
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hpath
