"""docker/: the Dockerfile and the compose cluster, checked without a Docker daemon.

This machine cannot pull base images, so the images are not built here. What is checked:
the compose file parses and wires the cluster as documented (two lookupds, three nodes each with
its own volume registered with both lookupds, publishers, the Spark job reading through both
lookupds); every nsqpy service's command line, taken from compose.yaml with its hostnames and
ports mapped to loopback/ephemeral ones and /data to temporary directories, runs here as a real
process through the same console script (it listens, the nodes register with both lookupds
under their compose broadcast names, the publishers publish, SIGTERM stops each with exit 0); the
Spark job's argparse accepts exactly the compose flags; the Dockerfile's COPY sources exist and
are enough for `pip install .`, and the commands it and compose run are the project's scripts.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import pytest
import yaml
from support.daemons import ROOT

from nsqpy.spark.client import BatchPublisher
from nsqpy.testing import DaemonProcess, wait_for

DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILE = DOCKER / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SCRIPTS = PYPROJECT["project"]["scripts"]
BIN = Path(sys.executable).parent
if str(ROOT / "spark_jobs") not in sys.path:
    sys.path.insert(0, str(ROOT / "spark_jobs"))

# ------------------------------------------------------------------------------ processes


class Server(DaemonProcess):
    """A daemon started from a compose command line (nsqpy.testing's launcher: listening ports
    read from its log, dies with the test run), named after its compose service."""

    def __init__(self, cmd: list[str], name: str) -> None:
        self.name = name
        super().__init__(cmd, cwd=ROOT, start_timeout=20)


class HttpServer(Server):
    """A daemon with only an HTTP listener (nsqadmin)."""

    listens = ("HTTP",)


def healthcheck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """docker/healthcheck.py (the images' nsqpy-healthcheck) with ``args``."""
    return subprocess.run(
        [sys.executable, str(DOCKER / "healthcheck.py"), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


def script(name: str) -> list[str]:
    """The console script's command: the venv's executable when installed (as in the image),
    else the module behind it."""
    path = BIN / name
    if path.exists():
        return [str(path)]
    module = SCRIPTS[name].split(":")[0]
    if module.endswith(".cli"):
        module = module[: -len(".cli")]
    return [sys.executable, "-m", module]


# ------------------------------------------------------------------------------ compose


_INTERPOLATE_RE = re.compile(r"\$\{(\w+):-([^}]*)\}")


def compose() -> dict:
    """compose.yaml as compose reads it with none of its variables set (``${VAR:-default}``
    -> default; any other ``$`` form is refused here)."""
    text = _INTERPOLATE_RE.sub(lambda m: m.group(2), COMPOSE.read_text())
    assert "${" not in text, "only ${VAR:-default} interpolation is used"
    return yaml.safe_load(text)


def services() -> dict[str, dict]:
    return compose()["services"]


def flag_values(cmd: list[str], flag: str) -> list[str]:
    """Every value of ``--flag=value`` / ``--flag value`` in ``cmd``."""
    out = []
    for i, a in enumerate(cmd):
        if a.startswith(f"--{flag}="):
            out.append(a.split("=", 1)[1])
        elif a == f"--{flag}" and i + 1 < len(cmd):
            out.append(cmd[i + 1])
    return out


def flag_names(cmd: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in cmd if a.startswith("--")]


def jobs(job: str) -> dict[str, list[str]]:
    """The services that run spark_jobs/<job> (from the image's /src)."""
    return {
        n: s["command"]
        for n, s in services().items()
        if s["command"][:2] == ["python", f"/src/spark_jobs/{job}"]
    }


def listen_port(cmd: list[str], flag: str) -> int:
    (value,) = flag_values(cmd, flag)
    return int(value.rsplit(":", 1)[1])


def by_program(program: str) -> dict[str, list[str]]:
    return {n: s["command"] for n, s in services().items() if s["command"][0] == program}


def localize(cmd: list[str], addresses: dict[str, str], data_path: Path | None = None) -> list[str]:
    """A compose command line for this machine: listen addresses on 127.0.0.1 port 0,
    ``--data-path`` in ``data_path``, every ``service:port`` value mapped through ``addresses``
    (a KeyError for a reference to an address no service listens on)."""
    out = []
    for a in cmd[1:]:
        if not a.startswith("--") or "=" not in a:
            out.append(a)
            continue
        name, value = a.split("=", 1)
        if name in ("--tcp-address", "--http-address"):
            value = "127.0.0.1:0"
        elif name == "--data-path":
            assert data_path is not None
            value = str(data_path)
        elif name.endswith(("-tcp-address", "-http-address")):
            value = addresses[value]
        out.append(f"{name}={value}")
    return out


def test_compose_parses_and_wires_the_cluster() -> None:
    doc = compose()
    svc = doc["services"]
    lookupds = by_program("nsqpy-lookupd")
    nsqds = by_program("nsqpy-d")
    assert sorted(lookupds) == ["lookupd1", "lookupd2"]
    assert sorted(nsqds) == ["nsqd1", "nsqd2", "nsqd3"]
    lookupd_tcp = sorted(f"{n}:{listen_port(c, 'tcp-address')}" for n, c in lookupds.items())
    lookupd_http = sorted(f"{n}:{listen_port(c, 'http-address')}" for n, c in lookupds.items())
    assert lookupd_tcp == ["lookupd1:4160", "lookupd2:4160"]
    volumes = set()
    for name, cmd in nsqds.items():
        assert flag_values(cmd, "broadcast-address") == [name]
        assert sorted(flag_values(cmd, "lookupd-tcp-address")) == lookupd_tcp
        (data,) = flag_values(cmd, "data-path")
        mounts = [v for v in svc[name]["volumes"] if v.split(":")[1] == data]
        assert len(mounts) == 1, (name, svc[name]["volumes"])
        volume = mounts[0].split(":")[0]
        assert volume in doc["volumes"]
        volumes.add(volume)
    assert len(volumes) == 3  # each node its own named volume

    # Publishers: one per node, each to a node that listens there.
    nsqd_tcp = {f"{n}:{listen_port(c, 'tcp-address')}" for n, c in nsqds.items()}
    publishers = jobs("publish_events.py")
    assert {flag_values(c, "nsqd-tcp-address")[0] for c in publishers.values()} == nsqd_tcp
    # nsqadmin (when there is one) over both lookupds.
    for cmd in by_program("nsqpy-admin").values():
        assert sorted(flag_values(cmd, "lookupd-http-address")) == lookupd_http
    # The Spark job: through both lookupds' HTTP, no nsqd address of its own.
    spark = svc["spark"]["command"]
    assert Path(spark[1]).name == "event_counts.py"
    assert sorted(flag_values(spark, "lookupd-http-address")) == lookupd_http
    assert not flag_values(spark, "nsqd-tcp-address")
    assert len({flag_values(c, "topic")[0] for c in publishers.values()}) == 1
    assert flag_values(spark, "topic") == flag_values(next(iter(publishers.values())), "topic")

    # Builds, dependencies and health checks refer to what exists.
    stages = dockerfile_stages()
    for name, s in svc.items():
        b = s["build"]
        assert (COMPOSE.parent / b["context"]).resolve() == ROOT, name
        assert (ROOT / b["dockerfile"]).resolve() == DOCKERFILE, name
        assert b["target"] in stages, name
        deps = s.get("depends_on", {})
        assert set(deps) <= set(svc), (name, deps)
        for dep, how in deps.items() if isinstance(deps, dict) else []:
            if how.get("condition") == "service_healthy":
                assert "healthcheck" in svc[dep], (name, dep)
        # compose's ordering waits on health: every dependency is on a healthy service
        assert isinstance(deps, dict), (name, "depends_on with conditions")
        assert {how["condition"] for how in deps.values()} <= {"service_healthy"}, name
        hc = s.get("healthcheck")
        if hc and hc.get("disable"):
            # a run-once service turns off the image's check (which pings nsqd)
            assert s.get("restart") == "no" and name in jobs("publish_events.py"), name
            hc = None
        # every long-running service has a health check (the publishers run once)
        assert bool(hc) == (s.get("restart") == "unless-stopped"), name
        if hc:
            test = hc["test"]
            assert test[:2] == ["CMD", "nsqpy-healthcheck"], (name, test)
            if test[2] == "ping":
                port = int(re.fullmatch(r"http://127\.0\.0\.1:(\d+)/ping", test[3]).group(1))
                assert port == listen_port(s["command"], "http-address"), name
            elif test[2] == "ready":  # Prometheus: /-/ready on its --web.listen-address
                port = int(re.fullmatch(r"http://127\.0\.0\.1:(\d+)/-/ready", test[3]).group(1))
                assert port == listen_port(s["command"], "web.listen-address"), name
            else:
                assert test[2] in ("spark-master", "spark-worker", "spark-app"), name
    assert all(svc[n]["build"]["target"] == "nsqpy" for n in [*lookupds, *nsqds, *publishers])
    assert svc["nsqadmin"]["build"]["target"] == "nsqpy"
    # every node is crash-safe: a SIGKILL (the check's `podman kill`) loses no acknowledged PUB
    for cmd in nsqds.values():
        assert flag_values(cmd, "mem-queue-size") == ["0"]


def test_compose_runs_the_job_on_a_spark_standalone_cluster() -> None:
    """A master, two workers and the driver, all from the spark image; the driver submits to the
    master; the checkpoint (with the source's spool) and the output are on one volume that the
    driver and every worker mount at the same path."""
    doc = compose()
    svc = doc["services"]
    spark_services = {n for n, s in svc.items() if s["build"]["target"] == "spark"}
    assert spark_services == {"spark", "spark-master", "spark-worker1", "spark-worker2"}
    master = svc["spark-master"]["command"]
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    assert svc["spark-master"]["hostname"] == flag_values(master, "host")[0] == "spark-master"
    url = f"spark://spark-master:{flag_values(master, 'port')[0]}"
    workers = {n: svc[n]["command"] for n in ("spark-worker1", "spark-worker2")}
    for n, cmd in workers.items():
        assert cmd[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
        assert cmd[-1] == url
        # the health check looks itself up in the master's list by hostname
        assert svc[n]["hostname"] == flag_values(cmd, "host")[0] == n
        assert svc[n]["depends_on"] == {"spark-master": {"condition": "service_healthy"}}
    driver = svc["spark"]
    cmd = driver["command"]
    assert flag_values(cmd, "master") == [url]
    assert set(driver["depends_on"]) >= set(workers)
    submit = driver["environment"]["PYSPARK_SUBMIT_ARGS"].split()
    assert submit[-1] == "pyspark-shell"
    assert f"spark.driver.host={driver['hostname']}" in submit
    # one volume, one path, for the checkpoint (spool inside it) and the output
    (ckpt,) = flag_values(cmd, "checkpoint")
    (output,) = flag_values(cmd, "output")
    mounts = {n: svc[n]["volumes"] for n in ("spark", *workers)}
    (shared,) = set(mounts["spark"])
    volume, path = shared.split(":")
    assert volume in doc["volumes"]
    assert ckpt.startswith(path + "/") and output.startswith(path + "/")
    assert all(m == [shared] for m in mounts.values()), mounts
    # healthy: the master runs the job (event_counts.py names it after the topic) and its query
    # has started (the checkpoint's metadata file)
    assert driver["healthcheck"]["test"][2:] == [
        "spark-app",
        f"nsq-event-counts-{flag_values(cmd, 'topic')[0]}",
        f"{ckpt}/metadata",
    ]


def test_compose_prometheus_scrapes_every_daemon_with_the_alert_rules() -> None:
    """The prometheus service (Debian's package, the Dockerfile's `prometheus` stage) reads
    docker/prometheus/prometheus.yml as the image holds it: a job per kind of daemon whose
    targets are exactly the compose services' HTTP addresses, and nsq-alerts.yml beside it."""
    doc = compose()
    svc = doc["services"]
    prom = svc["prometheus"]
    assert prom["build"]["target"] == "prometheus"
    cmd = prom["command"]
    assert cmd[0] == "prometheus"
    (config_path,) = flag_values(cmd, "config.file")
    (tsdb,) = flag_values(cmd, "storage.tsdb.path")
    mounts = [v.split(":") for v in prom["volumes"]]
    assert any(tsdb.startswith(path + "/") and vol in doc["volumes"] for vol, path in mounts)
    # the stage copies the configuration and the rules to where the command reads them
    stage = dockerfile_stages()["prometheus"]
    copies = [rest.split() for i, rest in stage if i == "COPY" and "docker/prometheus/" in rest]
    (copy,) = copies
    dest = copy[-1].rstrip("/")
    assert config_path == f"{dest}/prometheus.yml"
    sources = {Path(c).name for c in copy[:-1]}
    config = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    assert set(config["rule_files"]) <= sources and "prometheus.yml" in sources
    runs = " ".join(rest for i, rest in stage if i == "RUN")
    assert "install -y --no-install-recommends prometheus" in runs
    assert f"promtool check config {config_path}" in runs
    # a job per daemon kind, targets = the services' service:port, exactly
    by_job = {
        j["job_name"]: sorted(t for sc in j["static_configs"] for t in sc["targets"])
        for j in config["scrape_configs"]
    }
    expected = {
        job: sorted(f"{n}:{listen_port(c, 'http-address')}" for n, c in by_program(prog).items())
        for job, prog in (
            ("nsqd", "nsqpy-d"),
            ("nsqlookupd", "nsqpy-lookupd"),
            ("nsqadmin", "nsqpy-admin"),
        )
    }
    assert by_job == expected
    # no start order: it scrapes whatever is up and retries the rest (a dependency on a daemon
    # that the check kills and recreates would hold a container id that is gone)
    assert "depends_on" not in prom
    # the image's own default command is the compose one
    (image_cmd,) = [rest for i, rest in stage if i == "CMD"]
    assert exec_form(image_cmd) == cmd


def test_compose_prometheus_command_runs_here(tmp_path: Path) -> None:
    """compose's Prometheus command with Debian's binary here: the configuration and rules
    from docker/prometheus/, the TSDB in a temporary directory, the listen address on a free
    loopback port; it turns ready (the compose health check passes) and has loaded every alert;
    before that, `ready` is unhealthy while nothing answers."""
    import signal
    import socket

    exe = shutil.which("prometheus")
    if exe is None:
        pytest.skip("prometheus is not installed (Debian package 'prometheus')")
    cmd = services()["prometheus"]["command"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/-/ready"
    assert healthcheck("ready", url).returncode == 1  # nothing listens yet
    args = []
    for a in cmd[1:]:
        name = a.split("=", 1)[0]
        if name == "--config.file":
            a = f"{name}={DOCKER / 'prometheus' / 'prometheus.yml'}"
        elif name == "--storage.tsdb.path":
            a = f"{name}={tmp_path / 'tsdb'}"
        elif name == "--web.listen-address":
            a = f"{name}=127.0.0.1:{port}"
        args.append(a)
    proc = subprocess.Popen(
        [exe, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        wait_for(lambda: healthcheck("ready", url).returncode == 0, 60, 0.5, "prometheus ready")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=10) as r:
            groups = json.loads(r.read())["data"]["groups"]
        loaded = {rule["name"] for g in groups for rule in g["rules"]}
        rules = yaml.safe_load((DOCKER / "prometheus" / "nsq-alerts.yml").read_text())
        assert loaded == {r["alert"] for g in rules["groups"] for r in g["rules"]}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_docker_compose_config_when_the_cli_has_compose(tmp_path: Path) -> None:
    docker = shutil.which("docker")
    if not docker:
        pytest.skip("no docker CLI")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=20)
    if probe.returncode != 0:
        pytest.skip("the docker CLI has no compose plugin here (the YAML is checked above)")
    r = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE), "config", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert set(json.loads(r.stdout)["services"]) == set(services())


def test_compose_services_run_here_as_processes(tmp_path: Path) -> None:
    """Each nsqpy service's compose command line, localized, runs: lookupds, then nodes that
    register with both under their compose names, then the publishers; all stop on SIGTERM."""
    svc = services()
    addresses: dict[str, str] = {}
    running: list[Server] = []
    try:
        for name, cmd in by_program("nsqpy-lookupd").items():
            s = Server([*script("nsqpy-lookupd"), *localize(cmd, addresses)], name)
            running.append(s)
            addresses[f"{name}:{listen_port(cmd, 'tcp-address')}"] = s.tcp_address
            addresses[f"{name}:{listen_port(cmd, 'http-address')}"] = s.http_address
        lookupds = list(running)
        nodes: dict[str, Server] = {}
        for name, cmd in by_program("nsqpy-d").items():
            s = Server([*script("nsqpy-d"), *localize(cmd, addresses, tmp_path / name)], name)
            running.append(s)
            nodes[name] = s
            addresses[f"{name}:{listen_port(cmd, 'tcp-address')}"] = s.tcp_address
            addresses[f"{name}:{listen_port(cmd, 'http-address')}"] = s.http_address
            assert (tmp_path / name).is_dir()

        def registered(lk: Server) -> bool:
            found = {
                (p["broadcast_address"], p["tcp_port"], p["http_port"])
                for p in lk.get_json("/nodes")["producers"]
            }
            return found == {(n, s.tcp_port, s.http_port) for n, s in nodes.items()}

        for lk in lookupds:
            wait_for(lambda lk=lk: registered(lk), 15, 0.1, f"{lk.name} lists the 3 nodes")

        # The images' health check script, as compose runs it, on each of them.
        for s in running:
            test = svc[s.name]["healthcheck"]["test"]
            port = test[3].rsplit(":", 1)[1].split("/")[0]
            url = test[3].replace(port, str(s.http_port))
            r = healthcheck(*test[2:3], url)
            assert r.returncode == 0, (s.name, r.stderr)

        # The publishers' compose commands, against the localized nodes (fewer, faster events).
        publishers = jobs("publish_events.py")
        assert len(publishers) == 3
        topic = None
        for name, cmd in publishers.items():
            args = localize(cmd, addresses)  # [script path, flags...]
            assert args[0] == "/src/spark_jobs/publish_events.py", args
            run = [sys.executable, str(ROOT / "spark_jobs" / "publish_events.py"), *args[1:]]
            r = subprocess.run(
                [*run, "--count=40", "--rate=2000", "--max-seconds=20"],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=ROOT,
            )
            assert r.returncode == 0, (name, r.stderr)
            topic = flag_values(cmd, "topic")[0]
            assert f"published 40 events to {topic}" in r.stdout
        assert topic
        for name, node in nodes.items():
            (t,) = list(node.get_json("/stats?format=json")["topics"])
            assert (t["topic_name"], t["message_count"]) == (topic, 40), name
        # Consumers through either lookupd find all three nodes under their compose names.
        for lk in lookupds:
            producers = lk.get_json(f"/lookup?topic={topic}")["producers"]
            assert sorted(p["broadcast_address"] for p in producers) == sorted(nodes)

        # nsqadmin over both lookupds lists the three nodes.
        for name, cmd in by_program("nsqpy-admin").items():
            admin = HttpServer([*script("nsqpy-admin"), *localize(cmd, addresses)], name)
            try:
                listed = wait_for(
                    lambda admin=admin: len(admin.get_json("/api/nodes")["nodes"]) == 3
                    and admin.get_json("/api/nodes")["nodes"],
                    15, 0.2, f"{name} lists the nodes",
                )  # fmt: skip
                assert sorted(p["broadcast_address"] for p in listed) == sorted(nodes)
            finally:
                assert admin.stop() == 0, admin.log_text()

        # The Spark job's argparse takes the compose flags as they are (same values).
        spark = svc["spark"]["command"]
        event_counts = importlib.import_module("event_counts")
        ns = event_counts.parse_args(spark[2:])
        assert ns.lookupd_http_address == flag_values(spark, "lookupd-http-address")
        assert ns.topic == topic and ns.trigger == "5 seconds"
        assert ns.checkpoint.startswith("/data/") and ns.output.startswith("/data/")
        assert ns.master == "spark://spark-master:7077"
        opts = event_counts.nsq_options(ns)
        assert opts["lookupd_http_addresses"] == "lookupd1:4161,lookupd2:4161"
    finally:
        codes = {}
        for s in reversed(running):
            codes[s.name] = s.stop()
    assert codes == {s.name: 0 for s in running}, {
        s.name: s.log_text()[-3000:] for s in running if codes[s.name]
    }


@pytest.mark.parametrize("job", ["publish_events.py", "event_counts.py"])
def test_spark_job_and_publisher_help_lists_every_compose_flag(job: str) -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "spark_jobs" / job), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    used = {f for cmd in jobs(job).values() for f in flag_names(cmd)}
    assert used
    for flag in used:
        assert re.search(rf"(^|[\s\[,]){re.escape(flag)}\b", r.stdout), (flag, r.stdout)


# ------------------------------------------------------------------------------ Dockerfile


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """Stage name -> its instructions (a stage inherits its parent's through FROM <stage>)."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for ins, rest in dockerfile_instructions():
        if ins == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.IGNORECASE)
            assert m, rest
            parent, name = m.group(1), m.group(2) or f"stage{len(stages)}"
            current = list(stages.get(parent, []))
            stages[name] = current
        elif current is not None:
            current.append((ins, rest))
    return stages


def exec_form(rest: str) -> list[str]:
    return json.loads(rest)


def copy_sources() -> list[str]:
    srcs = []
    for ins, rest in dockerfile_instructions():
        if ins in ("COPY", "ADD"):
            if "--from=" in rest:
                continue  # from another stage (the wheel), not the build context
            args = exec_form(rest) if rest.startswith("[") else rest.split()
            args = [a for a in args if not a.startswith("--")]
            srcs.extend(a for a in args[:-1] if a not in srcs)
    return srcs


def dockerignored() -> list[str]:
    p = DOCKER / "Dockerfile.dockerignore"
    return [
        ln.strip() for ln in p.read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]


def test_dockerfile_copies_exist_and_are_not_ignored() -> None:
    srcs = copy_sources()
    assert srcs
    ignored = dockerignored()
    for src in srcs:
        assert (ROOT / src).exists(), src
        top = src.strip("/").split("/")[0]
        assert top not in ignored, (src, "excluded by docker/Dockerfile.dockerignore")
    # Every file the image's commands run is copied.
    for s in services().values():
        for a in s["command"]:
            if str(a).startswith("/src/"):
                rel = a[len("/src/") :]
                assert any(rel == c.strip("/") or rel.startswith(c.strip("/") + "/") for c in srcs)
                assert (ROOT / rel).is_file(), a


def test_dockerfile_copies_are_enough_for_pip_install(tmp_path: Path) -> None:
    """What `pip install .` needs is in the copied files: the readme, every package listed in
    pyproject (and no package of the tree missing from that list), every console script's
    module and function, importable from the copy alone."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    for src in copy_sources():
        s = ROOT / src
        if s.is_dir():
            shutil.copytree(s, ctx / src.strip("/"), ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (ctx / src).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, ctx / src)
    assert (ctx / "pyproject.toml").exists()
    assert (ctx / PYPROJECT["project"]["readme"]).exists()
    on_disk = {
        ".".join(p.parent.relative_to(ctx).parts) for p in (ctx / "nsqpy").rglob("__init__.py")
    }
    packages = PYPROJECT["tool"]["setuptools"]["packages"]
    if isinstance(packages, list):
        installed = set(packages)
    else:  # [tool.setuptools.packages.find]
        import setuptools

        find = packages["find"]
        installed = set(
            setuptools.find_packages(
                where=str(ctx / find.get("where", ["."])[0]),
                include=find.get("include", ["*"]),
                exclude=find.get("exclude", []),
            )
        )
    assert installed == on_disk, "pyproject's [tool.setuptools] packages vs nsqpy/ packages"
    probe = "; ".join(
        f"import importlib; assert callable(getattr(importlib.import_module({m!r}), {f!r}))"
        for m, f in (v.split(":") for v in SCRIPTS.values())
    )
    r = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, '.'); {probe}"],
        cwd=ctx,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr


def test_dockerfile_stages_user_volume_ports_and_commands() -> None:
    stages = dockerfile_stages()
    assert {"nsqpy", "spark"} <= set(stages)
    froms = [rest for ins, rest in dockerfile_instructions() if ins == "FROM"]
    args = dict(r.split("=", 1) for i, r in dockerfile_instructions() if i == "ARG" and "=" in r)
    base = froms[0].split()[0]
    base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", base), base
    # The default target (the last stage) is the daemons' image.
    assert froms[-1].split()[-1] == "nsqpy"
    extras = PYPROJECT["project"]["optional-dependencies"]
    commands = [s["command"] for s in services().values()]
    for name in ("nsqpy", "spark"):
        ins = stages[name]
        runs = " ".join(rest for i, rest in ins if i == "RUN")
        # the wheel's install, shared by the runtime stages, is in a script the python stage
        # copies to /tmp/build/: read it as part of what the stage runs
        if "/tmp/build/install-wheel.sh" in runs:
            assert "docker/install-wheel.sh" in " ".join(r for i, r in ins if i == "COPY")
            runs += " " + (DOCKER / "install-wheel.sh").read_text()
        user = [rest for i, rest in ins if i == "USER"]
        assert user and user[-1] not in ("root", "0"), name
        assert any("/data" in rest for i, rest in ins if i == "VOLUME"), name
        cmd = exec_form([rest for i, rest in ins if i == "CMD"][-1])
        assert cmd[0] in SCRIPTS or cmd[0] == "python", cmd
        # The project itself: the build stage's compiled wheel, `pip install --no-deps`...
        installs = re.findall(r"pip install --no-deps (\S+)", runs)
        assert installs == ["/tmp/wheels/nsqpy-*.whl"], (name, installs)
        assert ("COPY", "--from=build /wheels/ /tmp/wheels/") in ins, name
        # ...after its dependencies, installed from pyproject's lists before the wheel comes
        # in, so an edit to nsqpy/ reuses the dependency layers.
        order = [(i, rest) for i, rest in ins if i in ("RUN", "COPY")]
        first_source = min(k for k, (i, r) in enumerate(order) if i == "COPY" and "/wheels/" in r)
        deps = [k for k, (i, r) in enumerate(order) if i == "RUN" and "requirements.py" in r]
        assert deps and max(deps) < first_source, name
        assert not any(
            "pip install" in r and "-r" not in r.split() for i, r in order[:first_source]
        )
        # the image runs the compiled build (its --version ends "-mypyc)")
        assert "nsqpy-d --version | grep -- '-mypyc)'" in runs, name
        # the daemons exist in the image (the build runs each one's --version)
        image_commands = {
            s["command"][0]
            for s in services().values()
            if s["build"]["target"] == name and s["command"][0] != "python"
        }
        for s in {"nsqpy-d", "nsqpy-lookupd"} | (image_commands - {"spark-class"}):
            assert s in SCRIPTS, s
            assert f"{s} --version" in runs, (name, s)
        # OCI labels on both images
        labels = " ".join(rest for i, rest in ins if i == "LABEL")
        for key in ("title", "description", "version", "revision", "licenses"):
            assert f"org.opencontainers.image.{key}=" in labels, (name, key)
    assert "openjdk-17-jre-headless" in " ".join(rest for i, rest in stages["spark"])
    assert "spark" in extras  # the extra whose requirements the spark stage installs
    assert re.search(r"requirements\.py \S+ spark\b", " ".join(r for _, r in stages["spark"]))
    # The wheel: compiled (NSQPY_MYPYC=1 fails the build rather than going pure) from the
    # sources and setup.py, which the build stage copies.
    build = " ".join(r for _, r in stages["build"])
    assert re.search(
        r"NSQPY_MYPYC=1 pip wheel --no-deps --no-build-isolation \S+ /wheels \.", build
    )
    assert "setup.py" in build and "gcc" in build and "mypy" in build
    # spark-class (the standalone master and workers) is on the spark image's PATH
    env = " ".join(rest for i, rest in stages["spark"] if i == "ENV")
    assert "SPARK_HOME=/opt/spark" in env and "/opt/spark/bin" in env
    # The daemons' image checks itself (nsqd's /ping unless NSQPY_HEALTHCHECK_URL says else).
    (hc,) = [rest for i, rest in stages["nsqpy"] if i == "HEALTHCHECK"]
    assert hc.endswith('CMD ["nsqpy-healthcheck"]'), hc
    assert any(
        i == "COPY"
        and rest.split()[-2:] == ["docker/healthcheck.py", "/usr/local/bin/nsqpy-healthcheck"]
        for i, rest in stages["nsqpy"]
    )
    exposed = {
        int(p)
        for i, rest in stages["nsqpy"]
        if i == "EXPOSE"
        for p in rest.replace("/tcp", "").split()
    }
    assert exposed >= {4150, 4151, 4160, 4161}
    # every port a compose daemon listens on is exposed
    listening = {
        int(v.rsplit(":", 1)[1])
        for c in commands
        if c[0] in SCRIPTS
        for f in ("tcp-address", "http-address")
        for v in flag_values(c, f)
    }
    assert listening <= exposed, listening - exposed
    # What compose runs is a console script from pyproject, or python on a copied job.
    for name, s in services().items():
        prog = s["command"][0]
        spark_class = prog == "spark-class" and s["build"]["target"] == "spark"
        prometheus = prog == "prometheus" and s["build"]["target"] == "prometheus"
        assert prog in SCRIPTS or prog == "python" or spark_class or prometheus, (name, prog)


def test_nsqd_stops_cleanly_after_publish_and_restarts_on_its_volume(tmp_path: Path) -> None:
    """The nodes' volumes matter: a compose node stopped (SIGTERM, as `docker compose stop`)
    and started again on the same --data-path still has its queued messages."""
    cmd = [a for a in services()["nsqd1"]["command"] if "lookupd" not in a]
    args = localize(cmd, {}, tmp_path / "nsqd1")
    s = Server([*script("nsqpy-d"), *args], "nsqd1")
    try:
        with BatchPublisher(s.tcp_address, "kept") as p:
            p.publish([b"m%d" % i for i in range(100)])
    finally:
        assert s.stop() == 0, s.log_text()
    s = Server([*script("nsqpy-d"), *args], "nsqd1")
    try:
        (t,) = s.get_json("/stats?format=json&topic=kept")["topics"]
        assert t["depth"] == 100
    finally:
        assert s.stop() == 0, s.log_text()


def test_healthcheck_script_fails_without_an_ok_answer(tmp_path: Path) -> None:
    """Unhealthy (exit 1, the reason on stderr) when nothing listens or the answer is not OK."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connection refused
        r = healthcheck("ping", f"http://127.0.0.1:{port}/ping")
    assert r.returncode == 1 and "refused" in r.stderr.lower(), r.stderr
    cmd = list(services()["lookupd1"]["command"])
    s = Server([*script("nsqpy-lookupd"), *localize(cmd, {})], "lookupd1")
    try:
        r = healthcheck("ping", f"http://{s.http_address}/info")  # answers, but not OK
        assert r.returncode == 1 and "answered" in r.stderr, r.stderr
        # a worker or job whose master does not answer (here: a lookupd, no /json/)
        r = healthcheck("spark-worker", env={"SPARK_MASTER_WEBUI": f"http://{s.http_address}"})
        assert r.returncode == 1 and "404" in r.stderr, r.stderr
    finally:
        assert s.stop() == 0


def test_requirements_script_lists_pyproject_dependencies() -> None:
    """docker/requirements.py, which the image's dependency layers install from."""
    spec = importlib.util.spec_from_file_location("docker_requirements", DOCKER / "requirements.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    base = mod.requirements(str(ROOT / "pyproject.toml"), [])
    assert base == [*PYPROJECT["build-system"]["requires"], *PYPROJECT["project"]["dependencies"]]
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert mod.requirements(str(ROOT / "pyproject.toml"), ["spark"]) == extras["spark"]
