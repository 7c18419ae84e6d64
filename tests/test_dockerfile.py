"""The Dockerfile yields two small non-root images: an operator without Spark, and a Spark job.

No Docker daemon runs here, so the file is parsed with BuildKit's own parser (the
``dockerfile`` package wraps moby/buildkit's Go parser) and its stages are checked as data.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import dockerfile
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
UID = "10001"
# An exact release tag: a full X.Y.Z version, optionally with a variant (-slim-bookworm).
EXACT_TAG = re.compile(r"^\d+\.\d+\.\d+(-[a-z0-9][a-z0-9.-]*)?$")
SPARK_OR_JAVA = re.compile(r"spark|java|jdk|jre|maven|\bmvn\b|fetch-jars", re.IGNORECASE)
BUILD_TOOLS = re.compile(r"build-essential|\bgcc\b|\bmaven\b|--mount=type=cache")


@dataclass
class Stage:
    """One ``FROM`` section: its base (an image or an earlier stage) and its instructions."""

    name: str
    base: str
    commands: list[dockerfile.Command] = field(default_factory=list)

    def all(self, cmd: str) -> list[dockerfile.Command]:
        """The stage's instructions of one kind, in order."""
        return [c for c in self.commands if c.cmd == cmd]

    def last(self, cmd: str) -> dockerfile.Command:
        """The stage's last instruction of one kind (the one in force)."""
        found = self.all(cmd)
        assert found, f"stage {self.name} has no {cmd}"
        return found[-1]

    def runs(self) -> list[str]:
        """Each RUN instruction with its flags, as one string."""
        return [" ".join((*c.flags, *c.value)) for c in self.all("RUN")]

    def env(self) -> dict[str, str]:
        """The variables the stage's ENV instructions set."""
        pairs: dict[str, str] = {}
        for command in self.all("ENV"):
            values = command.value
            pairs.update(zip(values[::2], values[1::2], strict=True))
        return pairs


def global_args() -> dict[str, str]:
    """The ARGs declared before the first FROM, with their defaults (usable in FROM lines)."""
    args: dict[str, str] = {}
    for command in dockerfile.parse_file(str(DOCKERFILE)):
        if command.cmd == "FROM":
            break
        if command.cmd == "ARG":
            name, _, default = command.value[0].partition("=")
            args[name] = default
    return args


ARGS = global_args()


def resolve(image: str) -> str:
    """A FROM image with the global ARGs' defaults substituted (what a plain build uses)."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: ARGS[m.group(1)], image)


def parse_stages() -> dict[str, Stage]:
    """The Dockerfile's stages by name (bases as written, e.g. ``${BASE_IMAGE}``)."""
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for command in dockerfile.parse_file(str(DOCKERFILE)):
        if command.cmd == "FROM":
            image, *rest = command.value
            assert [word.upper() for word in rest[:1]] == ["AS"], f"unnamed stage: {command}"
            current = Stage(rest[1], image)
            stages[current.name] = current
        elif current is not None:
            current.commands.append(command)
    return stages


STAGES = parse_stages()


def closure(name: str) -> list[Stage]:
    """A stage and every stage it builds on or copies from."""
    seen: dict[str, Stage] = {}
    pending = [name]
    while pending:
        stage = STAGES[pending.pop()]
        if stage.name in seen:
            continue
        seen[stage.name] = stage
        if stage.base in STAGES:
            pending.append(stage.base)
        for copy in stage.all("COPY"):
            pending += [flag.split("=", 1)[1] for flag in copy.flags if flag.startswith("--from=")]
    return list(seen.values())


def pip_extras(stage: Stage) -> set[str]:
    """The extras one stage installs: the project's (``pip install "/src[extra]"``) and the
    dependency lists read from pyproject.toml first (``requirements.py pyproject.toml extra``)."""
    extras: set[str] = set()
    for run in stage.runs():
        if "pip install" in run:
            for group in re.findall(r"/src\[([a-z,]+)\]", run):
                extras.update(group.split(","))
            for group in re.findall(r"requirements\.py pyproject\.toml ((?:[a-z]+ ?)+)", run):
                extras.update(group.split())
    return extras


def _pattern(glob: str) -> re.Pattern[str]:
    """A .dockerignore glob as a regex, with Go's filepath.Match rules plus ``**``."""
    out = ""
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out, i = out + "(.*/)?", i + 3
        elif glob.startswith("**", i):
            out, i = out + ".*", i + 2
        elif glob[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif glob[i] == "?":
            out, i = out + "[^/]", i + 1
        elif glob[i] == "[":
            end = glob.index("]", i)
            out, i = out + glob[i : end + 1], end + 1
        else:
            out, i = out + re.escape(glob[i]), i + 1
    return re.compile(f"^{out}$")


def ignored(path: str) -> bool:
    """Whether Docker leaves ``path`` out of the build context (last matching pattern wins;
    a pattern matching a parent folder applies to everything inside it)."""
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = _pattern(line.lstrip("!").strip("/"))
        if any(pattern.match(candidate) for candidate in candidates):
            excluded = not negated
    return excluded


def test_the_operator_and_job_targets_exist_and_come_from_exact_python_tags() -> None:
    assert {"operator", "job"} <= set(STAGES)
    external = {resolve(stage.base) for stage in STAGES.values() if stage.base not in STAGES}
    for image in external:
        tag = image.partition(":")[2]
        assert EXACT_TAG.match(tag), f"{image}: pin an exact release tag"
    builder_bases = {s.base for s in closure("operator") + closure("job") if s.base not in STAGES}
    assert len(builder_bases) == 1, "the venv moves between stages: one interpreter image"


def test_the_base_image_is_one_build_arg_whose_default_is_the_pinned_python_image() -> None:
    # scripts/build-images.sh replaces it with a local debootstrap of the same Debian release
    # and Python minor version, both read from this default.
    assert {s.base for s in STAGES.values() if s.base not in STAGES} == {"${BASE_IMAGE}"}
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-[a-z]+", ARGS["BASE_IMAGE"])
    script = (ROOT / "scripts" / "build-images.sh").read_text()
    assert '--build-arg "BASE_IMAGE=$BASE"' in script


JOB_ENTRYPOINT = ("/usr/bin/tini", "-s", "--", "/opt/eo/bin/entrypoint")


@pytest.mark.parametrize(
    ("target", "entrypoint", "command"),
    [("operator", ("eo",), "operator"), ("job", JOB_ENTRYPOINT, "run")],
)
def test_final_stages_run_the_eo_cli_as_uid_10001(
    target: str, entrypoint: tuple[str, ...], command: str
) -> None:
    stage = STAGES[target]
    user = stage.last("USER").value[0]
    assert user.split(":")[0] == UID, f"{target} runs as {user!r}, not numeric uid {UID}"
    entry, cmd = stage.last("ENTRYPOINT"), stage.last("CMD")
    assert (entry.json, entry.value) == (True, entrypoint)
    assert (cmd.json, cmd.value) == (True, (command,))
    assert any(f"--uid {UID}" in run for run in stage.runs()), "no user with that uid is created"
    assert stage.env()["HOME"] == "/tmp", "only /tmp is writable (an emptyDir in the pods)"


def test_the_job_entrypoint_is_the_executor_dispatch_script_and_passes_the_rest_to_eo() -> None:
    job = STAGES["job"]
    assert ("docker/entrypoint.sh", "/opt/eo/bin/entrypoint") in {c.value for c in job.all("COPY")}
    assert any("tini" in run.split() for run in job.runs()), "tini is installed for PID 1"
    script = (ROOT / "docker" / "entrypoint.sh").read_text()
    assert script.rstrip().endswith('exec eo "$@"')
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in script


@pytest.mark.parametrize("target", ["operator", "job"])
def test_a_code_change_leaves_the_dependency_layers_and_the_venv_copy_as_they_were(
    target: str,
) -> None:
    # Dependencies are installed into the venv before eo's source is copied, and eo itself
    # goes to /opt/eo/app: the final stage's copy of the venv (1 GB for the job) stays the
    # same layer when only the code changed, instead of a new one each build.
    stages = closure(target)
    commands = [(stage, c) for stage in stages for c in stage.commands]
    first_source = min(
        i for i, (_, c) in enumerate(commands) if c.cmd == "COPY" and "jobs/" in c.value
    )
    for index, (stage, command) in enumerate(commands):
        text = " ".join((*command.flags, *command.value))
        if command.cmd == "RUN" and "pip install" in text and "/src[" in text:
            assert index > first_source, f"{stage.name}: eo installed before its source is copied"
            assert "--target /opt/eo/app" in text, f"{stage.name}: {text}"
        elif command.cmd == "RUN" and "pip install" in text:
            assert index < first_source, f"{stage.name}: a dependency install after the source"
    final = STAGES[target]
    copied = [c.value for c in final.all("COPY") if any(f.startswith("--from=") for f in c.flags)]
    assert ("/opt/eo/venv", "/opt/eo/venv") in copied and ("/opt/eo/app", "/opt/eo/app") in copied
    assert final.env()["PATH"].startswith("/opt/eo/app/bin:/opt/eo/venv/bin:")
    assert any("/opt/eo/app >" in run and ".pth" in run for run in STAGES["builder"].runs())


def test_the_operator_image_installs_no_spark_and_no_java() -> None:
    for stage in closure("operator"):
        for run in stage.runs():
            assert not SPARK_OR_JAVA.search(run), f"stage {stage.name}: {run}"
    assert set().union(*(pip_extras(s) for s in closure("operator"))) == {"operator"}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pulled = project["dependencies"] + project["optional-dependencies"]["operator"]
    assert not [dep for dep in pulled if "pyspark" in dep.lower()]


def test_the_job_image_has_pyspark_4_1_1_a_jre_17_and_the_kafka_connector_jars() -> None:
    extras = set().union(*(pip_extras(s) for s in closure("job")))
    assert extras == {"spark"}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "pyspark==4.1.3" in project["optional-dependencies"]["spark"]
    job = STAGES["job"]
    assert any("openjdk-17-jre-headless" in run for run in job.runs())
    assert job.env()["EO_CACHE"] == "/opt/eo/cache"
    assert any("scripts/fetch-jars.sh" in run for s in closure("job") for run in s.runs())
    copied = {c.value for c in job.all("COPY") if any(f.startswith("--from=") for f in c.flags)}
    assert ("/opt/eo/cache", "/opt/eo/cache") in copied


def test_the_job_image_has_the_jvm_writer_built_from_the_checkout_and_points_eo_at_it() -> None:
    builds = [run for s in closure("job") for run in s.runs() if "build-writer.sh" in run]
    assert len(builds) == 1 and builds[0].endswith(" scripts/build-writer.sh /opt/eo/writer")
    job = STAGES["job"]
    copied = {c.value for c in job.all("COPY") if any(f.startswith("--from=") for f in c.flags)}
    assert ("/opt/eo/writer", "/opt/eo/writer") in copied
    assert job.env()["EO_WRITER_JARS"] == "/opt/eo/writer"
    assert not ignored("jvm/writer/pom.xml")
    assert not ignored("jvm/writer/src/main/java/dev/eo/writer/postgres/TaskWriter.java")
    assert ignored("jvm/writer/target/eo-writer.jar")
    assert not ignored("scripts/build-writer.sh")


@pytest.mark.parametrize("target", ["operator", "job"])
def test_compilers_maven_and_caches_stay_in_builder_stages(target: str) -> None:
    for run in STAGES[target].runs():
        assert not BUILD_TOOLS.search(run), run
    assert STAGES[target].base not in STAGES, "a final stage must start from a clean base image"


def test_no_stage_declares_a_healthcheck() -> None:
    assert not [c for stage in STAGES.values() for c in stage.all("HEALTHCHECK")]


def test_everything_copied_from_the_context_exists_and_is_not_dockerignored() -> None:
    for stage in STAGES.values():
        for copy in stage.all("COPY") + stage.all("ADD"):
            if any(flag.startswith("--from=") for flag in copy.flags):
                continue
            for source in copy.value[:-1]:
                assert (ROOT / source).exists(), f"{stage.name}: COPY {source}: not in the repo"
                assert not ignored(source), (
                    f"{stage.name}: COPY {source}: excluded by .dockerignore"
                )


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "charts/eo/Chart.yaml",
        "jobs/eo_jobs/__pycache__/cli.cpython-311.pyc",
    ],
)
def test_the_build_context_leaves_out_the_venv_git_tests_and_caches(path: str) -> None:
    assert ignored(path)


def test_the_dockerignore_matcher_follows_docker_rules() -> None:
    assert not ignored("jobs/eo_jobs/cli.py")
    assert not ignored("tools/jars/spark-kafka/pom.xml")
    assert ignored("scripts/setup.sh")
    assert not ignored("scripts/fetch-jars.sh")
    assert not ignored("docker/entrypoint.sh")
    assert ignored("docker/anything-else")
