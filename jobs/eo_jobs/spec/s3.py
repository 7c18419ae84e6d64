"""What an ``s3a://`` checkpoint's ``spec.checkpoint.s3`` means to Hadoop S3A and to the pod.

Pure and shared: the driver turns it into Hadoop settings and AWS_* variables, the operator
into the driver pod's Secret-backed environment. Credentials never enter Spark's configuration:
PySpark hands its configuration to ``spark-submit`` on the command line, where every local user
could read it; S3A reads them from the environment instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from eo_jobs.spec.models import S3_SCHEME, Checkpoint, CredentialRef

ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID"
SECRET_KEY_ENV = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 - a variable name, not a secret
ENV_PROVIDER = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
DEFAULT_CHAIN = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
"""The AWS SDK's own chain: environment, web identity (IRSA), profile, container, instance.
S3A's default list lacks web identity, which is how pods on EKS get their role."""


class MissingS3CredentialError(LookupError):
    """A referenced S3 key is not in this process's environment."""


def uses_s3(checkpoint: Checkpoint) -> bool:
    """Whether the checkpoint lives in an S3-compatible store (and needs the S3A jars)."""
    return checkpoint.location.startswith(S3_SCHEME)


def hadoop_conf(checkpoint: Checkpoint) -> dict[str, str]:
    """``spark.hadoop.fs.s3a.*`` settings for the checkpoint's store (empty when not S3)."""
    if not uses_s3(checkpoint):
        return {}
    store = checkpoint.s3
    prefix = "spark.hadoop.fs.s3a."
    keys = store is not None and store.access_key_id is not None
    conf = {prefix + "aws.credentials.provider": ENV_PROVIDER if keys else DEFAULT_CHAIN}
    if store is not None:
        if store.endpoint:
            conf[prefix + "endpoint"] = store.endpoint
        if store.region:
            conf[prefix + "endpoint.region"] = store.region
        conf[prefix + "path.style.access"] = str(store.path_style_access).lower()
    return conf


def secret_env(checkpoint: Checkpoint) -> dict[str, tuple[str, str]]:
    """Pod variable -> (Secret, key) for the keys given by secretKeyRef."""
    store = checkpoint.s3
    if store is None:
        return {}
    pairs = ((ACCESS_KEY_ENV, store.access_key_id), (SECRET_KEY_ENV, store.secret_access_key))
    return {
        variable: (ref.secret_key_ref.name, ref.secret_key_ref.key)
        for variable, ref in pairs
        if ref is not None and ref.secret_key_ref is not None
    }


def credential_env(checkpoint: Checkpoint, environ: Mapping[str, str]) -> dict[str, str]:
    """AWS_* variables the driver's JVM needs, read from where the spec's references point.

    A secretKeyRef arrives as AWS_* itself (the operator maps it); an ``env`` reference names
    the variable to copy from.
    """
    store = checkpoint.s3
    if store is None or store.access_key_id is None or store.secret_access_key is None:
        return {}
    fields = (
        (ACCESS_KEY_ENV, "accessKeyId", store.access_key_id),
        (SECRET_KEY_ENV, "secretAccessKey", store.secret_access_key),
    )
    return {variable: _read(variable, name, ref, environ) for variable, name, ref in fields}


def _read(variable: str, field: str, ref: CredentialRef, environ: Mapping[str, str]) -> str:
    source = ref.env or variable
    value = environ.get(source)
    if not value:
        where = (
            f"set environment variable {source} (spec.checkpoint.s3.{field}.env)"
            if ref.env
            else f"the operator fills {variable} from Secret "
            f"{ref.secret_key_ref.name if ref.secret_key_ref else '?'}; check that it exists"
        )
        raise MissingS3CredentialError(f"no S3 credential for spec.checkpoint.s3.{field}: {where}")
    return value
