#!/usr/bin/env python3
"""A lossy, slow link to one worker: 5 % loss and 30±20 ms delay both ways on w2's link for
SECONDS seconds (default 40) while 3 workers train. A healthy worker behind such a link must
keep its membership: no lease lost, no failure reported, no new generation; and its etcd
client must reuse its connections rather than open one per request (each new connection
risks a lost SYN, which costs TCP's 1 s retransmission against a 3 s lease).

    test_lossy_link.py BINDIR [SECONDS]

Network: a hub namespace holds a bridge (10.234.0.254/24) with etcd and the coordinator; w0
and w1 sit on it (10.234.0.1, .2). w2 (10.234.1.3) reaches the bridge only through a router
namespace (10.234.1.254 | 10.234.0.253) that queues every forwarded packet to nfq_delay.py
(this kernel has no sch_netem) and then drops 5 % of them (iptables `statistic`). Loss and
delay sit on forwarded packets, not at a sender's OUTPUT, where a held packet would still
count against the sending socket (TCP small queues) and a drop would be a local error rather
than a loss. A counter rule counts the SYNs w2 sends to etcd. Namespaces are
named after this process's PID and removed at the end; every address exists only inside
them. Needs root, `ip netns`, iptables with NFQUEUE, etcd and etcdctl; exits 77 without them."""
import atexit
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (START_WAIT_S, WORKER_LEASE_TTL_S, Checks, Cluster, job_args,  # noqa: E402
                     metrics, wait_for)

try:
    bindir = sys.argv[1]
    SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 40.0
    if not SECONDS > 0 or len(sys.argv) > 3:
        raise ValueError
except (IndexError, ValueError):
    sys.exit("usage: test_lossy_link.py BINDIR [SECONDS > 0]")
LOSS = 0.05
DELAY_MS, JITTER_MS = 30, 20
QUEUE = 7
WARM_STEPS = 20  # steps with 3 workers before the link goes bad
PFX = "tagcl%d" % os.getpid()
HUB, LINK = PFX + "-hub", PFX + "-lk"
NS = ["%s-w%d" % (PFX, i) for i in range(3)]
HUB_IP = "10.234.0.254"
IPS = ["10.234.0.1", "10.234.0.2", "10.234.1.3"]
ROUTER_HUB_IP, ROUTER_W2_IP = "10.234.0.253", "10.234.1.254"
W2_NET = "10.234.1.0/24"
ETCD_PORT = 2379


def sh(*argv, timeout=20):
    return subprocess.run(argv, check=True, timeout=timeout, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE).stdout.decode()


def in_ns(ns, *argv, timeout=20):
    return sh("ip", "netns", "exec", ns, *argv, timeout=timeout)


def veth(ns_a, name_a, ns_b, name_b):
    sh("ip", "link", "add", name_a, "netns", ns_a, "type", "veth", "peer", "name", name_b,
       "netns", ns_b)


def make_network():
    """The hub (already added) with its bridge; w0, w1 on the bridge; w2 behind the router."""
    for ns in NS + [LINK]:
        sh("ip", "netns", "add", ns)
    for ns in NS + [LINK, HUB]:
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "-n", HUB, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", HUB, "addr", "add", HUB_IP + "/24", "dev", "br0")
    sh("ip", "-n", HUB, "link", "set", "br0", "up")
    ports = [(NS[0], IPS[0] + "/24"), (NS[1], IPS[1] + "/24"), (LINK, ROUTER_HUB_IP + "/24")]
    for i, (ns, addr) in enumerate(ports):
        veth(ns, "eth0", HUB, "p%d" % i)
        sh("ip", "-n", ns, "addr", "add", addr, "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", HUB, "link", "set", "p%d" % i, "master", "br0")
        sh("ip", "-n", HUB, "link", "set", "p%d" % i, "up")
    veth(NS[2], "eth0", LINK, "eth1")
    sh("ip", "-n", NS[2], "addr", "add", IPS[2] + "/24", "dev", "eth0")
    sh("ip", "-n", NS[2], "link", "set", "eth0", "up")
    sh("ip", "-n", NS[2], "route", "add", "default", "via", ROUTER_W2_IP)
    sh("ip", "-n", LINK, "addr", "add", ROUTER_W2_IP + "/24", "dev", "eth1")
    sh("ip", "-n", LINK, "link", "set", "eth1", "up")
    in_ns(LINK, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    for ns in (HUB, NS[0], NS[1]):
        sh("ip", "-n", ns, "route", "add", W2_NET, "via", ROUTER_HUB_IP)
    # counts w2's connection attempts to etcd (SYNs, retransmissions included)
    in_ns(LINK, "iptables", "-w", "5", "-A", "FORWARD", "-s", IPS[2], "-d", HUB_IP, "-p", "tcp",
          "--dport", str(ETCD_PORT), "--syn")


def remove_network():
    for ns in NS + [LINK, HUB]:
        subprocess.run(["ip", "netns", "del", ns], timeout=20, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


# The delay queue in FORWARD, the loss after it in POSTROUTING: the kernel splits a GSO
# packet (up to 64 KiB of segments) into its segments before it queues them, so the loss
# falls on single packets as on a wire, not on bursts of segments.
IMPAIR = [("filter", "FORWARD", ["-j", "NFQUEUE", "--queue-num", str(QUEUE), "--queue-bypass"]),
          ("mangle", "POSTROUTING", ["-m", "statistic", "--mode", "random", "--probability",
                                     str(LOSS), "-j", "DROP"])]


def impair(on):
    for table, chain, rule in IMPAIR:
        in_ns(LINK, "iptables", "-w", "5", "-t", table, "-A" if on else "-D", chain, *rule)


def syns_to_etcd():
    """Packets counted by the first FORWARD rule (w2's SYNs to etcd)."""
    out = in_ns(LINK, "iptables", "-w", "5", "-L", "FORWARD", "1", "-v", "-x", "-n")
    return int(out.split()[0])


def etcd_keys(prefix):
    out = in_ns(HUB, "etcdctl", "--endpoints", "http://%s:%d" % (HUB_IP, ETCD_PORT), "get",
                "--prefix", "--keys-only", prefix)
    return [k for k in out.split("\n") if k.strip()]


class NetnsCluster(Cluster):
    """The harness's cluster with etcd and the coordinator in the hub, wI in namespace I."""

    def _start(self, name, argv, env=None):
        ns = NS[int(name[1:])] if name[0] == "w" else HUB
        super()._start(name, ["ip", "netns", "exec", ns] + argv, env)

    def start_etcd(self, ports=None):
        self.etcd_url = "http://%s:%d" % (HUB_IP, ETCD_PORT)
        peer = "http://127.0.0.1:2380"
        self._start("etcd", ["etcd", "--data-dir", os.path.join(self.tmp, "etcd"), "--name",
                             "lossy", "--listen-client-urls", self.etcd_url,
                             "--advertise-client-urls", self.etcd_url, "--listen-peer-urls", peer,
                             "--initial-advertise-peer-urls", peer, "--initial-cluster",
                             "lossy=" + peer])
        wait_for(lambda: subprocess.run(
            ["ip", "netns", "exec", HUB, "etcdctl", "--endpoints", self.etcd_url,
             "endpoint", "health"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            timeout=10).returncode == 0, 20, "etcd in the hub namespace")


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


if os.geteuid() != 0:
    skip("needs root (network namespaces, iptables)")
for tool in ("ip", "iptables", "etcd", "etcdctl"):
    if not shutil.which(tool):
        skip("needs " + tool)
try:
    sh("ip", "netns", "add", HUB)
except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
    skip("ip netns is not available: %s" % (getattr(e, "stderr", b"") or b"").decode().strip())
atexit.register(remove_network)  # also when the clean-up below raises

check = Checks()
c = NetnsCluster(bindir, job="lossy")
delayer = None
try:
    make_network()
    c.start_etcd()
    c.start_coordinator("coord0", "--min-workers", "2", "--max-workers", "3", "--start-workers", "3",
                        "--start-wait", str(START_WAIT_S))
    out = os.path.join(c.tmp, "out")
    common = job_args(1000000, 50, 12, "none", "--out", out)
    for i in range(3):
        c.start_worker("w%d" % i, "--host", IPS[i], *common)
    wait_for(lambda: os.path.exists(out + "/metrics.jsonl") and len(metrics(out)) >= WARM_STEPS,
             90, "%d steps with 3 workers" % WARM_STEPS)
    first = metrics(out)[-1]
    gen0 = first["generation"]
    check(first["world_size"] == 3, "3 workers train in generation %d" % gen0)

    delayer = subprocess.Popen(["ip", "netns", "exec", LINK, sys.executable,
                                os.path.join(os.path.dirname(os.path.abspath(__file__)), "nfq_delay.py"),
                                "--queue", str(QUEUE), "--mean-ms", str(DELAY_MS), "--jitter-ms",
                                str(JITTER_MS), "--seconds", str(SECONDS + 30)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    bound = delayer.stdout.readline().decode().strip()
    if not bound.startswith("nfq_delay: queue"):  # no nfnetlink_queue in this kernel
        skip("cannot serve an NFQUEUE: " + (bound + delayer.stdout.read().decode())[-300:])
    print(bound)  # from here on the queue is served
    syn0 = syns_to_etcd()
    step0 = metrics(out)[-1]["step"]
    impair(True)
    t0 = time.time()
    time.sleep(SECONDS)
    impair(False)
    syns = syns_to_etcd() - syn0
    step1 = metrics(out)[-1]["step"]
    print("%.0f s of %.0f %% loss and %d±%d ms delay on w2's link: steps %d -> %d, w2 sent %d "
          "SYNs to etcd" % (time.time() - t0, 100 * LOSS, DELAY_MS, JITTER_MS, step0, step1, syns))
    # a lease lost in the last moments of the impairment shows within a TTL and a request
    time.sleep(2 * WORKER_LEASE_TTL_S + 1)

    rows = [r for r in metrics(out) if r["step"] > step0]
    check(step1 > step0, "training went on over the lossy link (%d steps)" % (step1 - step0))
    check(rows and all(r["generation"] == gen0 and r["world_size"] == 3 for r in rows),
          "every step since ran in generation %d with 3 workers" % gen0)
    w2 = c.log("w2")
    lost = [l for l in w2.splitlines() if "lost" in l and "lease" in l]
    check(not lost, "w2 kept its lease%s" % (": " + lost[0] if lost else ""))
    coord = c.log("coord0")
    check("generation %d:" % (gen0 + 1) not in coord, "the coordinator planned no generation "
          "after %d" % gen0)
    failures = etcd_keys("/tagc/lossy/failures/")
    check(not failures, "no failure reported (%s)" % (failures or "none"))
    renewals_failed = w2.count("renewal failed")
    print("w2: %d lease renewals failed and were retried" % renewals_failed)
    # Reused connections: a few for the watches and the threads that talk to etcd, plus one
    # per attempt that timed out (its connection is closed). One per request would be
    # several a second.
    bound = 10 + SECONDS / 5
    check(syns <= bound, "w2 opened few connections to etcd: %d SYNs in %.0f s (at most %.0f)"
          % (syns, SECONDS, bound))
finally:
    try:
        if delayer and delayer.poll() is None:
            delayer.terminate()
            delayer.wait(10)
        check.print_logs(c, ("coord0", "w0", "w1", "w2"))
    finally:
        c.close()
check.exit()
