"""Benchmarks of eo's write paths against each other and against Spark's JDBC writer."""
