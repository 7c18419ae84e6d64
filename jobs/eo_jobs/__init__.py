"""eo job side: pipeline spec, commit protocol, sinks and the Spark runtime.

Layers (enforced by import-linter, see pyproject.toml):
``cli`` -> ``runtime`` -> ``sinks`` -> ``protocol`` -> ``spec``. Only ``runtime`` may import
pyspark, and nothing here imports kopf, so the operator can run recovery with these modules.
"""
