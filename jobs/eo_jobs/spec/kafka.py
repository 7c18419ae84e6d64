"""What ``spec.source.kafka.secretOptions`` means to the driver pod and to Spark's Kafka reader.

Pure and shared, like ``spec.s3``: the operator turns each ``secretKeyRef`` into an environment
variable of the driver pod (``EO_KAFKA_<OPTION>``, from the Secret, so the value is never in the
spec's ConfigMap, the status or an event); the driver reads every option's value from its
environment (that variable, or the one an ``env`` reference names for a local ``eo run``) and
hands it to the reader as an option. Reader options are not Spark configuration, so they never
reach ``spark-submit``'s command line.
"""

from __future__ import annotations

from collections.abc import Mapping

from eo_jobs.spec.models import CredentialRef, KafkaSource

ENV_PREFIX = "EO_KAFKA_"


class MissingKafkaCredentialError(LookupError):
    """A referenced Kafka option is not in this process's environment."""


def env_var_for(option: str) -> str:
    """The pod variable that carries a secretKeyRef'd option: ``kafka.sasl.jaas.config`` ->
    ``EO_KAFKA_SASL_JAAS_CONFIG`` (one-to-one: keys are lower-case, dot-separated)."""
    return ENV_PREFIX + option.removeprefix("kafka.").upper().replace(".", "_")


def secret_env(source: KafkaSource | None) -> dict[str, tuple[str, str]]:
    """Pod variable -> (Secret, key) for the options given by secretKeyRef."""
    if source is None:
        return {}
    return {
        env_var_for(option): (ref.secret_key_ref.name, ref.secret_key_ref.key)
        for option, ref in source.secret_options.items()
        if ref.secret_key_ref is not None
    }


def secret_options(source: KafkaSource, environ: Mapping[str, str]) -> dict[str, str]:
    """Every secret option's value, read from where its reference points."""
    return {
        option: _read(option, ref, environ) for option, ref in sorted(source.secret_options.items())
    }


def _read(option: str, ref: CredentialRef, environ: Mapping[str, str]) -> str:
    variable = ref.env or env_var_for(option)
    value = environ.get(variable)
    if not value:
        field = f"spec.source.kafka.secretOptions[{option}]"
        where = (
            f"set environment variable {variable} ({field}.env)"
            if ref.env
            else f"the operator fills {variable} from Secret "
            f"{ref.secret_key_ref.name if ref.secret_key_ref else '?'} key "
            f"{ref.secret_key_ref.key if ref.secret_key_ref else '?'}; check that it exists"
        )
        raise MissingKafkaCredentialError(f"no value for {field}: {where}")
    return value
