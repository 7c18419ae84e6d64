"""The fenced two-phase commit protocol (see shared design brief ``protocol.md``).

Plain Python over psycopg: no pyspark, no kopf. The driver calls ``coordinator``; the operator
and ``eo recover`` call ``recovery``. Sinks implement ``participant.Participant``.
"""
