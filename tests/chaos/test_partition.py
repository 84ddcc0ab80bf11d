#!/usr/bin/env python3
"""A partition: 1 of 3 workers is cut off from the other two (iptables in its network
namespace) while all three still reach etcd and the coordinator. The cut worker must be
excluded within 3 generations of the cut and the job must finish with the other two; no
generation of 3 may train a step after the cut.

Network: a hub namespace holds a bridge (10.233.0.254/24), etcd and the coordinator; each
worker runs in its own namespace with a veth into the bridge (10.233.0.1..3) and --host set to
its address. Addresses exist only inside these namespaces (named after this process's PID, so
parallel runs do not collide), which are removed at the end. Needs root and `ip netns`;
exits 77 without them."""
import atexit
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import START_WAIT_S, Checks, Cluster, job_args, metrics, wait_for  # noqa: E402

bindir = sys.argv[1]
STEPS = 240
CUT_AT = 40  # metrics rows (steps) before the cut
PFX = "tagcp%d" % os.getpid()
HUB = PFX + "-hub"
NS = ["%s-w%d" % (PFX, i) for i in range(3)]
HUB_IP = "10.233.0.254"
IPS = ["10.233.0.%d" % (i + 1) for i in range(3)]


def sh(*argv, timeout=20):
    subprocess.run(argv, check=True, timeout=timeout, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


def in_ns(ns, *argv, timeout=20):
    sh("ip", "netns", "exec", ns, *argv, timeout=timeout)


def make_network():
    """The hub (already added) with its bridge, and one namespace per worker joined to it by
    a veth."""
    sh("ip", "-n", HUB, "link", "set", "lo", "up")
    sh("ip", "-n", HUB, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", HUB, "addr", "add", HUB_IP + "/24", "dev", "br0")
    sh("ip", "-n", HUB, "link", "set", "br0", "up")
    for i, ns in enumerate(NS):
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", "p%d" % i,
           "netns", HUB)
        sh("ip", "-n", ns, "addr", "add", IPS[i] + "/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", HUB, "link", "set", "p%d" % i, "master", "br0")
        sh("ip", "-n", HUB, "link", "set", "p%d" % i, "up")


def remove_network():
    for ns in NS + [HUB]:
        subprocess.run(["ip", "netns", "del", ns], timeout=20, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def cut(i):
    """Drops everything between worker i and the other workers, in worker i's namespace;
    the hub (etcd, coordinator) stays reachable."""
    for j, ip in enumerate(IPS):
        if j != i:
            in_ns(NS[i], "iptables", "-w", "5", "-A", "OUTPUT", "-d", ip, "-j", "DROP")
            in_ns(NS[i], "iptables", "-w", "5", "-A", "INPUT", "-s", ip, "-j", "DROP")


class NetnsCluster(Cluster):
    """The harness's cluster with every process started inside a namespace: etcd and the
    coordinator in the hub, worker wI in namespace I."""

    def ns_of(self, name):
        return NS[int(name[1:])] if name[0] == "w" else HUB

    def _start(self, name, argv, env=None):
        super()._start(name, ["ip", "netns", "exec", self.ns_of(name)] + argv, env)

    def start_etcd(self, ports=None):
        self.etcd_url = "http://%s:2379" % HUB_IP
        peer = "http://127.0.0.1:2380"
        self._start("etcd", ["etcd", "--data-dir", os.path.join(self.tmp, "etcd"), "--name",
                             "part", "--listen-client-urls", self.etcd_url,
                             "--advertise-client-urls", self.etcd_url, "--listen-peer-urls", peer,
                             "--initial-advertise-peer-urls", peer, "--initial-cluster",
                             "part=" + peer])
        probe = "import urllib.request; urllib.request.urlopen('%s/version', timeout=1)" % (
            self.etcd_url)

        def up():
            return subprocess.run(["ip", "netns", "exec", HUB, sys.executable, "-c", probe],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=10).returncode == 0
        wait_for(up, 20, "etcd in the hub namespace")


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


if os.geteuid() != 0:
    skip("needs root (network namespaces, iptables)")
if not shutil.which("ip") or not shutil.which("iptables"):
    skip("needs ip (iproute2) and iptables")
try:
    sh("ip", "netns", "add", HUB)
except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
    skip("ip netns is not available: %s" % (getattr(e, "stderr", b"") or b"").decode().strip())
atexit.register(remove_network)  # also when the clean-up below raises

check = Checks()
c = NetnsCluster(bindir, job="partition")
try:
    make_network()
    c.start_etcd()
    c.start_coordinator("coord0", "--min-workers", "2", "--max-workers", "3", "--start-workers", "3",
                        "--start-wait", str(START_WAIT_S))
    out = os.path.join(c.tmp, "out")
    common = job_args(STEPS, 10, 12, "none", "--op-timeout", "3", "--out", out)
    for i in range(3):
        c.start_worker("w%d" % i, "--host", IPS[i], *common)
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= CUT_AT,
             60, "%d steps with 3 workers" % CUT_AT)
    cut(2)
    t_cut = time.time()
    rows = metrics(out)
    gen_cut = rows[-1]["generation"]
    check(rows[-1]["world_size"] == 3, "3 workers trained up to the cut (generation %d, step %d)"
          % (gen_cut, rows[-1]["step"]))
    first2 = wait_for(lambda: next((r for r in metrics(out) if r["world_size"] == 2), None), 60,
                      "a step with 2 workers")
    took = time.time() - t_cut
    gens = first2["generation"] - gen_cut
    print("cut in generation %d; first step with 2 workers in generation %d (%d generations, "
          "%.1f s after the cut)" % (gen_cut, first2["generation"], gens, took))
    check(gens <= 3, "w2 excluded within 3 generations of the cut (%d)" % gens)
    rc = [c.wait("w%d" % i, 120) for i in range(2)]
    t_done = time.time()
    check(rc == [0, 0], "w0 and w1 finished with status 0 (%s)" % rc)
    rows = metrics(out)
    last = max(rows, key=lambda r: r["step"])
    check(last["step"] == STEPS and last["world_size"] == 2,
          "the final step %d of %d ran with %d workers" % (last["step"], STEPS, last["world_size"]))
    # summary.json is missing when a rejoin supersedes the last generation between its last
    # step and the final parameter gather (the leader then ends the job from the progress).
    if os.path.exists(out + "/summary.json"):
        s = json.load(open(out + "/summary.json"))
        check(s["steps"] == STEPS and s["world_size"] == 2,
              "summary: %d steps, %d workers" % (s["steps"], s["world_size"]))
    after = [r for r in rows if r["generation"] > gen_cut]
    check(after and all(r["world_size"] == 2 for r in after),
          "every step after the cut ran with 2 workers (%d steps)" % len(after))
    coord = c.log("coord0")
    check("excluded w2" in coord and "excluded w0" not in coord and "excluded w1" not in coord,
          "the coordinator excluded w2, never w0 or w1")
    print("run: %.1f s from the cut to the end of the job" % (t_done - t_cut))
finally:
    try:
        check.print_logs(c, ("coord0", "w0", "w1", "w2"))
    finally:
        c.close()
check.exit()
