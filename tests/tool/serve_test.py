"""`mgm serve` without Prometheus: a scrape never waits on NVML. Over the fake NVML, the GPUs'
memory query becomes slow (20 s) once serving has begun; scrapes still answer at once with the last
sample, its age grows, /healthz turns 503, and SIGTERM stops the exporter with exit 0 within a few
seconds, without waiting for the query (Kubernetes kills a pod that outlives its grace period).
Usage: serve_test.py MGM FAKE_NVML"""
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

mgm, fake = sys.argv[1], sys.argv[2]
GiB = 1 << 30


def config(delay_ms):
    gpu = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-00000000-2222-3333-4444-555555555555",
           "pci_bus_id": "00000000:01:00.0", "memory": {"total": 80 * GiB, "reserved": 0, "used": 20 * GiB},
           "delay_ms": delay_ms}
    return json.dumps({"reload": True, "devices": [gpu]})


def get(url, timeout=10.0):
    start = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(), time.monotonic() - start
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), time.monotonic() - start


def sample_age(text):
    m = re.search(r"^mgm_sample_age_seconds(?:\{[^}]*\})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


with tempfile.TemporaryDirectory() as tmp:
    cfg = os.path.join(tmp, "nvml.json")
    with open(cfg, "w") as f:
        f.write(config(0))
    env = dict(os.environ, MGM_NVML_LIBRARY=fake, MGM_FAKE_NVML_CONFIG=cfg)
    p = subprocess.Popen([mgm, "serve", "--listen", "127.0.0.1:0", "--interval", "100ms"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([p.stdout], [], [], 30.0)
        line = p.stdout.readline() if ready else ""
        m = re.search(r"http://(\S+)/metrics", line)
        if not m:
            sys.exit("no address in %r" % line)
        base = "http://" + m.group(1)
        status, text, _ = get(base + "/metrics")
        if status != 200 or 'mgm_gpu_memory_used_bytes{gpu="0"' not in text:
            sys.exit("first scrape: %s\n%s" % (status, text[:2000]))
        if get(base + "/healthz")[0] != 200:
            sys.exit("/healthz is not 200 while samples are fresh")
        # NVML turns slow: the sampler is stuck in the query, the scrapes are not.
        with open(cfg + ".new", "w") as f:
            f.write(config(20000))
        os.replace(cfg + ".new", cfg)
        time.sleep(0.5)  # the sampler is now inside a 20 s query
        ages, slowest = [], 0.0
        for _ in range(6):
            status, text, took = get(base + "/metrics")
            slowest = max(slowest, took)
            if status != 200 or "mgm_gpu_memory_total_bytes" not in text:
                sys.exit("a scrape while NVML is slow: %s\n%s" % (status, text[:2000]))
            ages.append(sample_age(text))
            time.sleep(0.3)
        if None in ages or not all(b > a for a, b in zip(ages, ages[1:])):
            sys.exit("mgm_sample_age_seconds does not grow while the sampler waits: %s" % ages)
        # A 20 s query that a scrape waited on would take seconds; these take milliseconds.
        if slowest > 2.0:
            sys.exit("a scrape took %.2f s: it waited on NVML" % slowest)
        status, text, _ = get(base + "/healthz")
        if status != 503 or "older than" not in text:
            sys.exit("/healthz with a %.1f s old sample: %s %r" % (ages[-1], status, text))
        signalled = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=10)  # the query has more than 15 s to go
        except subprocess.TimeoutExpired:
            sys.exit("SIGTERM: still running after 10 s; it waits on NVML's 20 s query")
        stopped = time.monotonic() - signalled
        err = p.stderr.read()
        if rc != 0:
            sys.exit("SIGTERM: exit %d, %s" % (rc, err))
        if "query has not returned after 2 s; exiting without waiting for it" not in err:
            sys.exit("SIGTERM during a slow query: no word of it on stderr: %r" % err)
        print("scrapes answered in at most %.3f s while NVML took 20 s; sample ages %s; /healthz 503; "
              "SIGTERM to exit %.2f s" % (slowest, ["%.2f" % a for a in ages], stopped))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
