"""Chaos: a pipeline over a generated stream with known totals, under randomly chosen faults.

``python -m bench.chaos --seed N --minutes M`` (or ``--faults N``). See ``bench/README.md``.
"""
