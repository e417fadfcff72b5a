"""The shipped deployment files, as installed under PREFIX/share/multigpumem: the four files, the
dashboard a Grafana dashboard, and the Kubernetes manifests a DaemonSet, a Service and a
ServiceMonitor that agree on the port and run `mgm serve` with flags it takes.
Usage: deploy_files.py PREFIX MGM"""
import json
import os
import re
import subprocess
import sys

import yaml  # Debian's python3-yaml

prefix, mgm = sys.argv[1], sys.argv[2]
share = os.path.join(prefix, "share", "multigpumem")
problems = []
files = ("prometheus/mgm-rules.yml", "prometheus/mgm-rules.test.yml", "grafana/mgm-dashboard.json",
         "kubernetes/mgm-serve.yaml")
for f in files:
    if not os.path.isfile(os.path.join(share, f)):
        problems.append("not installed: share/multigpumem/" + f)
if problems:
    sys.exit("\n".join(problems))

dashboard = json.load(open(os.path.join(share, "grafana/mgm-dashboard.json")))
exprs = [t["expr"] for p in dashboard.get("panels", []) for t in p.get("targets", []) if "expr" in t]
if not exprs:
    problems.append("the dashboard has no panel with a PromQL target")

rules = yaml.safe_load(open(os.path.join(share, "prometheus/mgm-rules.yml")))
alerts = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
for want in ("Leak", "OutOfMemory", "Fragment"):
    if not any(want.lower() in a.lower() for a in alerts):
        problems.append("no alert about %s among %s" % (want, alerts))

docs = [d for d in yaml.safe_load_all(open(os.path.join(share, "kubernetes/mgm-serve.yaml"))) if d]
kinds = {d["kind"]: d for d in docs}
if sorted(kinds) != ["DaemonSet", "Service", "ServiceMonitor"]:
    problems.append("manifest kinds %s, not a DaemonSet, a Service and a ServiceMonitor" % sorted(kinds))
else:
    pod = kinds["DaemonSet"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    # The pools' figures: the node's publish folder, read with the node's process ids.
    if not pod.get("hostPID"):
        problems.append("the DaemonSet needs hostPID: the pools' pid labels would be the pods' own pids, not NVML's")
    volumes = {v.get("name"): v for v in pod.get("volumes", [])}
    container = pod["containers"][0]
    env = {e.get("name"): e.get("value") for e in container.get("env", [])}
    mounts = {m.get("name"): m for m in container.get("volumeMounts", [])}
    folder = env.get("MGM_PUBLISH_DIR")
    if not folder:
        problems.append("the DaemonSet sets no MGM_PUBLISH_DIR: it would read its own /dev/shm, which no job writes")
    elif not any(m.get("mountPath") == folder and volumes.get(n, {}).get("hostPath", {}).get("path") == folder
                 for n, m in mounts.items()):
        problems.append("MGM_PUBLISH_DIR=%s is not the node's folder (a hostPath mounted at the same path)" % folder)
    service_ports = {p["name"]: p["port"] for p in kinds["Service"]["spec"]["ports"]}
    monitor_ports = [e["port"] for e in kinds["ServiceMonitor"]["spec"]["endpoints"]]
    if ports.get("metrics") != service_ports.get("metrics") or monitor_ports != ["metrics"]:
        problems.append("ports disagree: container %s, service %s, monitor %s" % (ports, service_ports, monitor_ports))
    args = container["args"]
    if args[0] != "serve":
        problems.append("the container runs %s, not mgm serve" % args)
    listen = args[args.index("--listen") + 1] if "--listen" in args else ""
    if not listen.endswith(":%d" % ports.get("metrics", -1)):
        problems.append("--listen %s is not the container port %s" % (listen, ports.get("metrics")))
    if container["readinessProbe"]["httpGet"]["path"] != "/healthz":
        problems.append("the readiness probe does not ask /healthz")
    help_text = subprocess.run([mgm, "serve", "--help"], capture_output=True, text=True, timeout=30).stdout
    for flag in (a for a in args if a.startswith("--")):
        if flag not in help_text:
            problems.append("mgm serve takes no %s" % flag)
    default = re.search(r"--listen TEXT(?:=| \[):(\d+)", help_text)  # CLI11 2.1 and later forms
    if not default or int(default.group(1)) != ports.get("metrics"):
        problems.append("mgm serve's default port %s is not the manifests' %s" %
                        (default.group(1) if default else "?", ports.get("metrics")))
if problems:
    sys.exit("\n".join(problems))
print("%d files; dashboard %d queries; alerts %s; manifests %s" % (len(files), len(exprs), alerts, sorted(kinds)))
