"""Turning a spec's credential reference into a DSN, without ever putting it in the spec.

On Kubernetes the operator maps ``secretKeyRef`` to an environment variable of the driver pod
(``EO_SINK_<NAME>_DSN``), so the driver resolves both kinds of reference from its environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from eo_jobs.spec.models import CredentialRef

CONTROL_ENV = "EO_CONTROL_DSN"
"""The environment variable that carries ``spec.control``'s secretKeyRef'd DSN into a pod."""


def env_var_for(sink: str) -> str:
    """The environment variable that carries a secretKeyRef'd DSN of ``sink`` into a pod."""
    return "EO_SINK_" + sink.upper().replace("-", "_") + "_DSN"


class MissingCredentialError(LookupError):
    """The referenced credential is not available in this process."""


def resolve_dsn(
    sink: str,
    ref: CredentialRef,
    environ: Mapping[str, str] | None = None,
    *,
    variable: str | None = None,
) -> str:
    """The DSN of a sink, read from the environment named by its reference.

    A secretKeyRef arrives in ``variable`` (default: the sink's ``EO_SINK_<NAME>_DSN``).
    """
    env = os.environ if environ is None else environ
    if ref.env is not None:
        variable = ref.env
    elif variable is None:
        variable = env_var_for(sink)
    value = env.get(variable)
    if not value:
        where = (
            f"environment variable {variable} (spec.sinks[{sink}].postgres.dsn.env)"
            if ref.env is not None
            else f"environment variable {variable}, which the operator fills from Secret "
            f"{ref.secret_key_ref.name if ref.secret_key_ref else '?'}"
        )
        raise MissingCredentialError(f"no DSN for sink {sink!r}: set {where}")
    return value
