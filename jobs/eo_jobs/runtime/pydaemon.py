"""The PySpark daemon of eo's drivers and executors (``spark.python.daemon.module``).

Spark puts archives on every Python worker's path: ``pyspark.zip``, ``py4j-*-src.zip`` and
the spark-core jar (which may carry pyspark). Before each task the worker calls
``importlib.invalidate_caches()``, and on Python 3.10+ that makes every ``zipimporter`` on the
path re-read its archive's directory: the jar's thousands of entries, ~0.1 s per task on 2 busy
cores (py-spy), about a quarter of a 20,000-row batch.
Where the same packages are installed (pip's pyspark, as in eo's image and venv), the archives
only shadow them, so this daemon drops them from the path (and from the importer cache) before
it forks workers, which inherit that path. Anywhere else nothing is dropped.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys

SPARK_ARCHIVES = ("pyspark.zip", "py4j-")
"""Names of the archives Spark adds from ``$SPARK_HOME/python/lib`` (and any jar)."""
PACKAGES = ("pyspark", "py4j")


def _spark_archive(entry: str) -> bool:
    name = os.path.basename(entry)
    return name.endswith(".jar") or (name.endswith(".zip") and name.startswith(SPARK_ARCHIVES))


def without_shadowed_archives(path: list[str]) -> list[str]:
    """``path`` without Spark's archives when the rest of it provides their packages."""
    rest = [entry for entry in path if not _spark_archive(entry)]
    if len(rest) == len(path):
        return path
    finder = importlib.machinery.PathFinder
    if all(finder.find_spec(name, rest) is not None for name in PACKAGES):
        return rest
    return path


def main() -> None:
    """Trim the path, then run PySpark's own daemon (it forks the workers)."""
    kept = without_shadowed_archives(sys.path)
    for entry in set(sys.path) - set(kept):
        sys.path_importer_cache.pop(entry, None)
    sys.path[:] = kept
    from pyspark import daemon

    daemon.manager()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
