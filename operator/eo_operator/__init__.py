"""eo operator: kopf handlers that observe, decide and act on ExactlyOncePipeline objects.

It never imports pyspark or the Spark runtime (its image has no Spark); it reuses the plain
Python spec, protocol and sink modules of ``eo_jobs`` to run recovery and to read sink health.
"""
