"""Print the requirements of pyproject.toml's project plus the given extras, one per line.

The Dockerfile installs them before it copies the source, so buildah/Docker layer caches keep
the heavy dependency layers (PySpark, kopf) when only eo's own code changed.
Usage: python requirements.py pyproject.toml EXTRA...
"""

import sys
import tomllib

with open(sys.argv[1], "rb") as handle:
    project = tomllib.load(handle)["project"]
requirements = list(project["dependencies"])
for extra in sys.argv[2:]:
    requirements += project["optional-dependencies"][extra]
print("\n".join(requirements))
