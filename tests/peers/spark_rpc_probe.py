"""What a local user without the application's secret gets from Spark's own RPC: the script
:data:`PROBE` runs (as uid 65534, through ``other_user.run_as_other_user(...,
site_packages=True)``) a JVM of its own through pyspark's py4j gateway and speaks Spark's
protocols to the ports it is given, as Spark's own clients do, with no credential.

Each target is ``endpoint:PORT:NAME`` (an RPC endpoint such as a driver's
``BlockManagerMaster`` or a standalone ``Master``: looking it up is already a request
the endpoint answers) or ``blocks:PORT`` (a block manager's transfer service, asked for a
block). The script prints one JSON line per target: ``answered`` when the service handled
the request (it replied, or failed it in its own handler), else the error that refused it.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["PROBE", "assert_refused"]

PROBE = r"""
import json, sys
from pyspark.java_gateway import launch_gateway

gateway = launch_gateway()
jvm = gateway.jvm


def scala_object(name):
    return jvm.java.lang.Class.forName(name + "$").getField("MODULE$").get(None)


conf = jvm.org.apache.spark.SparkConf(False)
for key in ("spark.rpc.askTimeout", "spark.rpc.lookupTimeout", "spark.network.timeout"):
    conf.set(key, "20s")
secret_file = scala_object("org.apache.spark.internal.config.package").AUTH_SECRET_FILE()
security = jvm.org.apache.spark.SecurityManager(conf, jvm.scala.Option.empty(), secret_file)
rpc = scala_object("org.apache.spark.rpc.RpcEnv").create("probe", "127.0.0.1", 0, conf,
                                                        security, True)


def endpoint(port, name):
    ref = rpc.setupEndpointRef(jvm.org.apache.spark.rpc.RpcAddress("127.0.0.1", port), name)
    return f"found {ref.name()}"


def blocks(port):
    provider = jvm.org.apache.spark.network.util.MapConfigProvider(jvm.java.util.HashMap())
    transport = jvm.org.apache.spark.network.util.TransportConf("shuffle", provider)
    context = jvm.org.apache.spark.network.TransportContext(
        transport, jvm.org.apache.spark.network.server.NoOpRpcHandler())
    client = context.createClientFactory().createClient("127.0.0.1", port)
    ids = gateway.new_array(jvm.String, 1)
    ids[0] = "broadcast_0_piece0"
    request = jvm.org.apache.spark.network.shuffle.protocol.OpenBlocks("probe", "driver", ids)
    reply = client.sendRpcSync(request.toByteBuffer(), 20000)
    return f"{reply.remaining()} bytes"


for target in sys.argv[1:]:
    kind, port, *name = target.split(":")
    try:
        detail = endpoint(int(port), name[0]) if kind == "endpoint" else blocks(int(port))
        answered = True
    except Exception as error:  # the Java exception, its server-side stack trace included
        text = str(error)
        # Failed in the block manager's own handler (a block not found): handled all the same.
        answered = "NettyBlockRpcServer" in text
        detail = " | ".join(line.strip() for line in text.splitlines()
                            if "Exception" in line or line.startswith("Caused"))[:2000]
    print(json.dumps({"target": target, "answered": answered, "detail": detail}),
          flush=True)
rpc.shutdown()
gateway.shutdown()
"""


def _answers(stdout: str) -> dict[str, dict[str, Any]]:
    """The probe's result per target, from its output."""
    found: dict[str, dict[str, Any]] = {}
    for line in stdout.splitlines():
        if line.startswith('{"target"'):
            result = json.loads(line)
            found[result["target"]] = result
    return found


def assert_refused(targets: list[str]) -> None:
    """Run :data:`PROBE` as uid 65534 against ``targets`` and check that every one refused
    it for want of the application's secret (call ``other_user_reason(site_packages=True)``
    first)."""
    from other_user import run_as_other_user

    done = run_as_other_user(PROBE, *targets, site_packages=True, timeout=180)
    found = _answers(done.stdout)
    assert set(found) == set(targets), f"{done.stdout[-800:]} {done.stderr[-1500:]}"
    for target, result in found.items():
        assert not result["answered"], f"uid 65534 was answered by {target}: {result}"
        # Spark's SASL handler turned it away before any endpoint saw it.
        assert "SaslMessage" in result["detail"], result
