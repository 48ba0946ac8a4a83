#!/usr/bin/env python3
"""A plugin held to a small CPU share: does pacing cost more than it saves?

    python3 scripts/bench-paced.py BIN N CORES

starts `BIN serve` (the release `setpoint`) on a scratch directory with
the replicaset and podsim plugins (from `SCALE_PLUGINS`, default
target/wasm/wasm32-unknown-unknown/plugin; `scripts/bench scale` builds
them), grants podsim CORES cores of call time through a `PluginGrant`
(`-` for the default share), creates N podsim Pods from 16 client
threads, waits until every one is `Running`, and prints the time, podsim's
reconciles a Pod, its errors, the paced turns per plugin and the server's
CPU time. Quoted in docs/benchmarks/scale.md ("Reading your own writes").
Standard library only.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

BIN, N, CORES = sys.argv[1], int(sys.argv[2]), sys.argv[3]
PLUGINS = os.environ.get("SCALE_PLUGINS", "target/wasm/wasm32-unknown-unknown/plugin")
PORT = 18777
URL = f"http://127.0.0.1:{PORT}"


def request(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, method=method, data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as answer:
        return answer.read()


def metrics():
    return request("GET", "/metrics").decode().splitlines()


def metric(name):
    for line in metrics():
        if line.startswith(name):
            return float(line.split()[-1])
    return 0.0


def pod(i):
    return {"apiVersion": "demo.setpoint.dev/v1", "kind": "Pod",
            "metadata": {"name": f"pod-{i:07}", "namespace": "default", "labels": {"app": "paced"}},
            "spec": {"startupDelayMs": 0, "image": "registry.example.com/app:1"}}


def main():
    scratch = tempfile.mkdtemp(prefix="setpoint-paced")
    os.makedirs(f"{scratch}/plugins")
    for plugin in ["podsim", "replicaset"]:
        shutil.copy(f"{PLUGINS}/{plugin}.wasm", f"{scratch}/plugins/")
    log = open(f"{scratch}/serve.log", "w")
    server = subprocess.Popen(
        [BIN, "serve", "--addr", f"127.0.0.1:{PORT}", "--data", f"{scratch}/data",
         "--plugins", f"{scratch}/plugins"],
        stdout=log, stderr=log, env=dict(os.environ, SETPOINT_LOG="warn"))
    try:
        for _ in range(600):
            try:
                request("GET", "/readyz")
                break
            except OSError:
                time.sleep(0.1)
        if CORES != "-":
            request("POST", "/apis/setpoint.dev/v1/plugingrants",
                    {"apiVersion": "setpoint.dev/v1", "kind": "PluginGrant",
                     "metadata": {"name": "podsim"}, "spec": {"limits": {"cpu": float(CORES)}}})
            time.sleep(3)  # the limits are read again every 2 s
        following = [0]
        lock = threading.Lock()

        def client():
            while True:
                with lock:
                    i = following[0]
                    following[0] += 1
                if i >= N:
                    return
                request("POST", "/apis/demo.setpoint.dev/v1/namespaces/default/pods", pod(i))

        started = time.time()
        clients = [threading.Thread(target=client) for _ in range(16)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        print(f"created {N} Pods in {time.time() - started:.1f} s")
        while True:
            items = json.loads(request("GET", "/apis/demo.setpoint.dev/v1/pods"))["items"]
            if sum(p.get("status", {}).get("phase") == "Running" for p in items) == N:
                break
            time.sleep(1)
        print(f"all Running {time.time() - started:.1f} s after the first create")
        reconciles = metric('setpoint_plugin_reconciles_total{plugin="podsim"}')
        errors = metric('controller_runtime_reconcile_errors_total{controller="podsim"}')
        print(f"podsim reconciles {reconciles:.0f}, {reconciles / N:.2f} a Pod; errors {errors:.0f}")
        for line in metrics():
            if line.startswith("setpoint_plugin_paced_total"):
                print(line)
        stat = open(f"/proc/{server.pid}/stat").read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        print(f"server CPU {(int(stat[11]) + int(stat[12])) / ticks:.1f} s")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
