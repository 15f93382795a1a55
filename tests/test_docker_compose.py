"""docker-compose.yml, the Dockerfile and .dockerignore, checked by reading them (no Docker
engine here): the services and how they find one another, the pinned pyspark against
pyproject.toml, the mounts, and every published port on 127.0.0.1 only."""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from pyspark_reactive.session import read_spark_defaults

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest brings tomli
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("spark-master", "spark-worker", "jupyter")


def dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (INSTRUCTION, arguments), continuations joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).strip().partition(" ")
        instructions.append((keyword.upper(), " ".join(arguments.split())))
        pending = ""
    return instructions


def arguments(keyword: str) -> list[str]:
    return [args for instruction, args in dockerfile() if instruction == keyword]


def settings(keyword: str) -> dict[str, str]:
    """ARG or ENV values (``NAME=value`` forms) of the Dockerfile."""
    found: dict[str, str] = {}
    for args in arguments(keyword):
        for word in shlex.split(args):
            name, _, value = word.partition("=")
            found[name] = value
    return found


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def command(service: dict[str, Any]) -> list[str]:
    given = service["command"]
    return shlex.split(given) if isinstance(given, str) else [str(word) for word in given]


def option(words: list[str], name: str) -> str:
    for index, word in enumerate(words):
        if word == name:
            return words[index + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    raise AssertionError(f"{name} not in {words}")


def master_url(compose: dict[str, Any]) -> str:
    words = command(compose["services"]["spark-master"])
    return f"spark://{option(words, '--host')}:{option(words, '--port')}"


def test_services_run_master_worker_and_jupyter_from_the_dockerfile(
        compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(SERVICES) <= set(services), sorted(services)
    for name in SERVICES:
        build = services[name].get("build")
        context = build if isinstance(build, str) else (build or {}).get("context")
        dockerfile_name = "Dockerfile" if isinstance(build, str) else build.get(
            "dockerfile", "Dockerfile")
        assert context is not None and (ROOT / context / dockerfile_name).resolve() == (
            ROOT / "Dockerfile"), f"{name} is not built from the repository's Dockerfile"
        assert "network_mode" not in services[name], f"{name}: host networking"

    master = command(services["spark-master"])
    worker = command(services["spark-worker"])
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    assert worker[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    url = master_url(compose)
    # Other containers reach the master by its service name, the host it binds to.
    assert option(master, "--host") == "spark-master"
    assert worker[-1] == url, f"the worker registers with {worker[-1]}, the master is {url}"
    assert option(worker, "--host") == "spark-worker"

    jupyter = services["jupyter"]
    assert command(jupyter)[:2] == ["jupyter", "lab"]
    environment = jupyter["environment"]
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    assert environment["PYSPARK_REACTIVE_MASTER"] == url
    # The driver runs in this container: the executors must reach it by a name they resolve.
    assert environment["SPARK_LOCAL_HOSTNAME"] == "jupyter" == jupyter["hostname"]
    assert {"spark-master", "spark-worker"} <= set(jupyter["depends_on"])


def test_the_image_pins_the_pyspark_that_pyproject_accepts_and_the_tests_run() -> None:
    import pyspark

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # pyspark comes from the `spark` extra (Databricks carries its own).
    wanted = next(Requirement(r) for r in project["optional-dependencies"]["spark"]
                  if Requirement(r).name == "pyspark")
    pinned = settings("ARG").get("PYSPARK_VERSION")
    assert pinned, "the Dockerfile has no ARG PYSPARK_VERSION=<version>"
    assert wanted.specifier.contains(pinned), (
        f"the Dockerfile pins pyspark {pinned}; pyproject.toml wants {wanted}")
    installs = [args for args in arguments("RUN") if "pip install" in args]
    assert any('"pyspark==${PYSPARK_VERSION}"' in args for args in installs), installs
    # This package itself, with the notebooks' extra, from the copied sources.
    assert any(re.search(r'(--editable|-e) "?\.\[spark,notebooks\]"?', args)
               for args in installs), installs
    assert any("jupyterlab" in args for args in installs)
    # The newest line the tests run on: a new pyspark line means a new pin.
    tested = Version(pyspark.__version__)
    assert Version(pinned).release[:2] == tested.release[:2], (
        f"the tests run pyspark {tested}, the image pins {pinned}: "
        f"move PYSPARK_VERSION to {tested.major}.{tested.minor}.x")
    base = arguments("FROM")[0]
    assert ":" in base and not base.endswith(":latest"), f"unpinned base image {base}"
    assert any(re.search(r"openjdk-(17|21)-jre", args) for args in arguments("RUN")), (
        "Spark 4 needs Java 17 or 21")


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Target -> source of each of a service's volumes."""
    found = {}
    for volume in service.get("volumes", []):
        source, target = (volume.split(":")[:2] if isinstance(volume, str)
                          else (volume["source"], volume["target"]))
        found[target] = source
    return found


def entrypoint_default(variable: str) -> str:
    """The default of ``${variable:-...}`` in docker-entrypoint.sh."""
    found = re.search(r"\$\{" + variable + r":-([^}]+)\}",
                      (ROOT / "docker-entrypoint.sh").read_text())
    assert found, f"docker-entrypoint.sh has no ${{{variable}:-default}}"
    return found.group(1)


def test_spark_conf_and_notebooks_are_mounted_where_they_are_read(
        compose: dict[str, Any]) -> None:
    workdir = arguments("WORKDIR")[-1]
    # local_session() of an editable install reads <project>/spark-conf; the entrypoint
    # makes the master's, the worker's and spark-submit's $SPARK_CONF_DIR from it.
    conf_dir = f"{workdir}/spark-conf"
    assert entrypoint_default("PROJECT_SPARK_CONF") == conf_dir
    assert (ROOT / "spark-conf" / "spark-defaults.conf").is_file()
    services = compose["services"]
    for name in SERVICES:
        assert mounts(services[name]).get(conf_dir) == "./spark-conf", (
            f"{name} mounts {mounts(services[name])}")
        if name == "jupyter":
            notebooks = f"{workdir}/notebooks"
            assert mounts(services[name]).get(notebooks) == "./notebooks"
            assert option(command(services[name]), "--ServerApp.root_dir") == notebooks


def published(ports: list[Any]) -> list[tuple[str | None, str]]:
    """(host address or None, host port) of each entry in a service's ``ports``."""
    found: list[tuple[str | None, str]] = []
    for entry in ports:
        if isinstance(entry, dict):  # the long syntax
            found.append((entry.get("host_ip"), str(entry.get("published", ""))))
            continue
        parts = str(entry).split("/")[0].rsplit(":", 2)
        if len(parts) == 3:
            found.append((parts[0].strip("[]"), parts[1]))
        elif len(parts) == 2:
            found.append((None, parts[0]))
        else:  # a container port alone: published on a random port of every address
            found.append((None, ""))
    return found


def test_every_published_port_listens_on_loopback_only(compose: dict[str, Any]) -> None:
    everything: dict[str, list[tuple[str | None, str]]] = {}
    for name, service in compose["services"].items():
        everything[name] = published(service.get("ports", []))
        for address, port in everything[name]:
            assert address == "127.0.0.1", f"{name} publishes port {port or '?'} on " \
                                           f"{address or 'every address'}"
    assert ("127.0.0.1", "8888") in everything["jupyter"]
    assert ("127.0.0.1", "8080") in everything["spark-master"]


def test_published_checks_would_catch_an_open_port() -> None:
    assert published(["8888:8888", "8888", "0.0.0.0:1:1", {"published": 2, "target": 2},
                      "127.0.0.1:3:3/tcp", {"host_ip": "127.0.0.1", "published": "4"}]) == [
        (None, "8888"), (None, ""), ("0.0.0.0", "1"), (None, "2"), ("127.0.0.1", "3"),
        ("127.0.0.1", "4")]


def excluded(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore ``patterns`` leave ``path`` out of the build context: the last
    pattern matching it or a folder above it decides; ``!`` lets it back in."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[:end]) for end in range(1, len(parts) + 1)]
    decision = False
    for pattern in patterns:
        keep = pattern.startswith("!")
        glob = pattern.lstrip("!").strip("/")
        if any(fnmatch.fnmatchcase(prefix, glob) for prefix in prefixes):
            decision = not keep
    return decision


def test_the_build_context_holds_what_the_dockerfile_copies_and_no_local_state() -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    for args in arguments("COPY"):
        *sources, _ = shlex.split(args)
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
            assert not excluded(source, patterns), f"COPY {source}: .dockerignore drops it"
    for local in (".git", ".venv", ".venv-spark40/bin/python", "notebooks",
                  "src/pyspark_reactive/__pycache__/sink.cpython-311.pyc", "spark-warehouse"):
        assert excluded(local, patterns), f"{local} would be sent to the Docker daemon"


def test_every_service_runs_with_sparks_authentication_and_no_secret_in_sight(
        compose: dict[str, Any]) -> None:
    # Without spark.authenticate anyone who reaches the master's port submits code that the
    # worker runs. The secret is in a volume of these containers only, made at the first
    # start, never in the compose file, the image or a command line.
    assert arguments("ENTRYPOINT") == ['["docker-entrypoint.sh"]']
    assert any(args.startswith("docker-entrypoint.sh ") for args in arguments("COPY"))
    assert os.access(ROOT / "docker-entrypoint.sh", os.X_OK)
    assert "SPARK_CONF_DIR" not in settings("ENV"), "the entrypoint sets SPARK_CONF_DIR"
    shared = entrypoint_default("SPARK_AUTH_DIR")
    assert any(re.search(rf"install --directory --owner=spark .*--mode=0700 {shared}$", args)
               for args in arguments("RUN")), "the volume's folder: the user's, 0700"
    assert "spark-auth" in (compose.get("volumes") or {})
    for name in SERVICES:
        service = compose["services"][name]
        assert mounts(service).get(shared) == "spark-auth", f"{name} mounts {mounts(service)}"
        assert "entrypoint" not in service, f"{name} replaces the image's entrypoint"
        text = yaml.safe_dump(service)
        assert "authenticate" not in text and "--conf" not in text, text
    # In the script, the secret goes to the shell's own printf and test only (no other
    # program, so no command line).
    uses = [line.strip() for line in (ROOT / "docker-entrypoint.sh").read_text().splitlines()
            if "$secret" in line]
    assert len(uses) == 2 and all(use.startswith(("printf ", "if [ ")) for use in uses), uses


def run_entrypoint(shared: Path, home: Path) -> tuple[Path, str]:
    """docker-entrypoint.sh run as a container would (its paths moved to ``shared`` and
    ``home``): the SPARK_CONF_DIR it gives the command, and the secret written there."""
    home.mkdir(mode=0o700)
    done = subprocess.run(
        ["sh", str(ROOT / "docker-entrypoint.sh"), "sh", "-c", 'printf %s "$SPARK_CONF_DIR"'],
        env={"PATH": os.environ["PATH"], "HOME": str(home), "SPARK_AUTH_DIR": str(shared),
             "PROJECT_SPARK_CONF": str(ROOT / "spark-conf")},
        capture_output=True, text=True, timeout=30, check=True)
    conf = Path(done.stdout)
    settings = read_spark_defaults(conf / "spark-defaults.conf")
    return conf, settings["spark.authenticate.secret"]


def test_the_entrypoint_shares_one_secret_in_private_files(tmp_path: Path) -> None:
    shared = tmp_path / "spark-auth"
    shared.mkdir(mode=0o700)
    conf, secret = run_entrypoint(shared, tmp_path / "master")
    assert re.fullmatch(r"[0-9a-f]{64}", secret), secret
    assert conf == tmp_path / "master" / ".spark-conf"
    assert conf.stat().st_mode & 0o777 == 0o700
    for path in (conf / "spark-defaults.conf", shared / "secret"):
        assert path.stat().st_mode & 0o777 == 0o600, path
    settings = read_spark_defaults(conf / "spark-defaults.conf")
    project = read_spark_defaults(ROOT / "spark-conf" / "spark-defaults.conf")
    assert settings == {**project, "spark.authenticate": "true",
                        "spark.authenticate.secret": secret}
    assert (conf / "log4j2.properties").resolve() == ROOT / "spark-conf" / "log4j2.properties"
    # Another container (and this one restarted): the same secret.
    assert run_entrypoint(shared, tmp_path / "worker")[1] == secret
    assert sorted(p.name for p in shared.iterdir()) == ["secret"]
