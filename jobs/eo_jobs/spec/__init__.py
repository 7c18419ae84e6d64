"""The ExactlyOncePipeline resource as pydantic models: the single source of the CRD."""

from eo_jobs.spec.loading import InputError, SpecError, load_pipeline, parse_pipeline
from eo_jobs.spec.models import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAME,
    VERSION,
    Guarantee,
    Pipeline,
    PipelineSpec,
    PipelineStatus,
    PostgresSink,
    SinkSpec,
)

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAME",
    "VERSION",
    "Guarantee",
    "InputError",
    "Pipeline",
    "PipelineSpec",
    "PipelineStatus",
    "PostgresSink",
    "SinkSpec",
    "SpecError",
    "load_pipeline",
    "parse_pipeline",
]
