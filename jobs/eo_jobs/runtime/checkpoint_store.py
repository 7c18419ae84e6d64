"""Folder operations on a checkpoint location, wherever it lives: what lifecycle actions need.

A snapshot copies the checkpoint's files, a start-over moves them aside, retention deletes old
copies. As ``runtime.checkpoint`` reads them: a local folder (a path or ``file://``) directly,
any other URI (``s3a://``, ``gs://``, ``hdfs://``) through the Hadoop FileSystem of the Spark
session, with the settings Spark writes the checkpoint with.
"""

from __future__ import annotations

import shutil
import urllib.parse
from pathlib import Path
from typing import Any, Protocol

from pyspark.sql import SparkSession

from eo_jobs.runtime.checkpoint import local_path


class Store(Protocol):
    """The folder operations a lifecycle action uses; locations are ``folder/name`` strings."""

    def names(self, folder: str) -> list[str]:
        """Names of the entries of ``folder``, sorted ([] when it does not exist)."""
        ...

    def exists(self, location: str) -> bool:
        """Whether a file or folder is at ``location``."""
        ...

    def modified(self, location: str) -> int | None:
        """A file's modification time in milliseconds (as Spark's file source logs it), None
        when absent."""
        ...

    def copy(self, source: str, target: str) -> None:
        """Copy a file or a folder (recursively) to ``target`` (its parent is created)."""
        ...

    def move(self, source: str, target: str) -> None:
        """Move a file or a folder to ``target`` (its parent is created)."""
        ...

    def delete(self, location: str) -> None:
        """Delete a file or a folder (recursively); nothing when absent."""
        ...

    def read(self, location: str) -> str | None:
        """A file's text, None when absent."""
        ...

    def write(self, location: str, text: str) -> None:
        """Write a file (replacing it; its parent is created)."""
        ...


class LocalStore:
    """``Store`` on this machine's file system (a path or a ``file:`` URI)."""

    @staticmethod
    def path(location: str) -> Path:
        """The path of a location: a plain path, ``file:///p`` or ``file:/p`` (Hadoop's
        spelling, which Spark's file source logs), URL-encoded or not."""
        if location.startswith("file:"):
            rest = urllib.parse.unquote(location[len("file:") :])
            if rest.startswith("//"):
                rest = rest[2:]
            return Path(rest)
        found = local_path(location)
        if found is None:
            raise ValueError(f"{location} is not on this machine's file system")
        return found

    def names(self, folder: str) -> list[str]:
        """``Store.names``."""
        path = self.path(folder)
        return sorted(p.name for p in path.iterdir()) if path.is_dir() else []

    def exists(self, location: str) -> bool:
        """``Store.exists``."""
        return self.path(location).exists()

    def modified(self, location: str) -> int | None:
        """``Store.modified`` (Hadoop's local file system reads the same clock, in ms)."""
        path = self.path(location)
        return path.stat().st_mtime_ns // 1_000_000 if path.exists() else None

    def copy(self, source: str, target: str) -> None:
        """``Store.copy``."""
        src, dst = self.path(source), self.path(target)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy2(src, dst)

    def move(self, source: str, target: str) -> None:
        """``Store.move`` (a rename on one file system)."""
        dst = self.path(target)
        dst.parent.mkdir(parents=True, exist_ok=True)
        self.path(source).rename(dst)

    def delete(self, location: str) -> None:
        """``Store.delete``."""
        path = self.path(location)
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()

    def read(self, location: str) -> str | None:
        """``Store.read``."""
        path = self.path(location)
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def write(self, location: str, text: str) -> None:
        """``Store.write`` (a temporary file renamed over it: never half written)."""
        path = self.path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)


class HadoopStore:
    """``Store`` through the JVM's Hadoop FileSystem, configured like the streaming query's."""

    def __init__(self, spark: SparkSession) -> None:
        jvm: Any = spark._jvm
        if jvm is None:
            raise RuntimeError("the Spark session has no JVM")
        self._jvm = jvm
        self._conf = spark._jsparkSession.sessionState().newHadoopConf()

    def _fs(self, location: str) -> tuple[Any, Any]:
        path = self._jvm.org.apache.hadoop.fs.Path(location)
        return path.getFileSystem(self._conf), path

    def names(self, folder: str) -> list[str]:
        """``Store.names``."""
        fs, path = self._fs(folder)
        if not fs.exists(path):
            return []
        return sorted(str(status.getPath().getName()) for status in fs.listStatus(path))

    def exists(self, location: str) -> bool:
        """``Store.exists``."""
        fs, path = self._fs(location)
        return bool(fs.exists(path))

    def modified(self, location: str) -> int | None:
        """``Store.modified``."""
        fs, path = self._fs(location)
        return int(fs.getFileStatus(path).getModificationTime()) if fs.exists(path) else None

    def copy(self, source: str, target: str) -> None:
        """``Store.copy`` (Hadoop's ``FileUtil.copy``, recursive)."""
        src_fs, src = self._fs(source)
        dst_fs, dst = self._fs(target)
        dst_fs.mkdirs(dst.getParent())
        if not self._jvm.org.apache.hadoop.fs.FileUtil.copy(
            src_fs, src, dst_fs, dst, False, True, self._conf
        ):
            raise OSError(f"could not copy {source} to {target}")

    def move(self, source: str, target: str) -> None:
        """``Store.move`` (``FileSystem.rename``; a copy and a delete on an object store)."""
        fs, src = self._fs(source)
        _, dst = self._fs(target)
        fs.mkdirs(dst.getParent())
        if not fs.rename(src, dst):
            raise OSError(f"could not move {source} to {target}")

    def delete(self, location: str) -> None:
        """``Store.delete``."""
        fs, path = self._fs(location)
        if fs.exists(path):
            fs.delete(path, True)

    def read(self, location: str) -> str | None:
        """``Store.read``."""
        fs, path = self._fs(location)
        if not fs.exists(path):
            return None
        stream = fs.open(path)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write(self, location: str, text: str) -> None:
        """``Store.write`` (``FileSystem.create`` with overwrite)."""
        fs, path = self._fs(location)
        stream = fs.create(path, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()


def store_for(location: str, spark: SparkSession | None) -> Store:
    """The store of a location: local for a path or ``file:``, else Hadoop's (needs Spark)."""
    if location.startswith("file:") or local_path(location) is not None:
        return LocalStore()
    if spark is None:
        raise RuntimeError(f"{location} needs Spark's Hadoop file system")
    return HadoopStore(spark)
