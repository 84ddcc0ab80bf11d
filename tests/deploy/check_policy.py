#!/usr/bin/env python3
"""Checks a rendered overlay (kubectl kustomize output) for how its worker Job fails and
recovers, and for the GPU pod layout:  check_policy.py RENDERED.yaml cpu|gpu|gpu-rdma [LAUNCHER]

Every overlay: the worker Job is Indexed with restartPolicy Never, a backoff per index, a
replacement only once a failed pod is gone, and a podFailurePolicy that fails the Job on exit 2
(configuration) and 3 (cannot go on) and ignores disruptions (DisruptionTarget) and a leave on
SIGTERM (exit 143, which the workers are told to use); maxFailedIndexes keeps the coordinators'
--min-workers reachable; the grace period covers the leave hand-off.
gpu, gpu-rdma: one pod per node (hostname anti-affinity) holding N GPUs and running N workers
through node-launch.sh (its ConfigMap holds exactly LAUNCHER), a Memory /dev/shm, the world
(completions x N) equal to the coordinators' --start-workers (at most --max-workers), no fixed
--worker-id or --metrics-addr (the launcher sets them per GPU). gpu-rdma: an rdma/ resource,
IPC_LOCK, NCCL_IB_DISABLE=0. cpu: no GPU, one worker per pod.
Prints one line per failed check; exit 1 if any failed."""
import sys

import yaml

LEAVE_TIMEOUT_S = 5   # the workers' --leave-timeout default
SETTLE_S = 1          # the coordinators' --settle default

rendered, kind = sys.argv[1], sys.argv[2]
launcher = sys.argv[3] if len(sys.argv) > 3 else None
docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
failed = []


def need(ok, what):
    if not ok:
        failed.append(what)
        print("policy: " + what)


def one(kind_, name):
    found = [d for d in docs if d.get("kind") == kind_ and d["metadata"]["name"].startswith(name)]
    need(len(found) == 1, "expected one %s %s, found %d" % (kind_, name, len(found)))
    return found[0] if found else {}


def flags(args):
    """--name=value arguments as a dict (the last one wins)."""
    out = {}
    for a in args or []:
        if a.startswith("--"):
            k, _, v = a[2:].partition("=")
            out[k] = v
    return out


job = one("Job", "tagc-worker")
spec = job.get("spec", {})
pod = spec.get("template", {}).get("spec", {})
workers = [c for c in pod.get("containers", []) if c.get("name") == "worker"]
need(len(workers) == 1, "the worker Job has one container named worker")
w = workers[0] if workers else {}
wargs = flags(w.get("args"))
coord = one("Deployment", "tagc-coordinator")
cargs = flags(coord.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [{}])[0].get("args"))

need(spec.get("completionMode") == "Indexed", "the worker Job is Indexed")
need(pod.get("restartPolicy") == "Never", "restartPolicy Never (podFailurePolicy needs it; got %s)"
     % pod.get("restartPolicy"))
need("backoffLimit" not in spec, "no Job-wide backoffLimit (the budget is per index)")
need(isinstance(spec.get("backoffLimitPerIndex"), int) and spec["backoffLimitPerIndex"] >= 1,
     "backoffLimitPerIndex set")
need(spec.get("podReplacementPolicy") == "Failed", "podReplacementPolicy Failed")
rules = spec.get("podFailurePolicy", {}).get("rules", [])


def exit_rule(action, codes):
    return any(r.get("action") == action and r.get("onExitCodes", {}).get("operator") == "In" and
               r["onExitCodes"].get("containerName") == "worker" and
               sorted(r["onExitCodes"].get("values", [])) == codes for r in rules)


need(exit_rule("FailJob", [2, 3]), "podFailurePolicy: exit 2 and 3 of the worker fail the Job")
need(exit_rule("Ignore", [143]), "podFailurePolicy: exit 143 (a leave on SIGTERM) is ignored")
need(wargs.get("leave-exit-code") == "143", "the workers leave with --leave-exit-code=143")
need(any(r.get("action") == "Ignore" and
         {"type": "DisruptionTarget", "status": "True"} in r.get("onPodConditions", []) for r in rules),
     "podFailurePolicy: DisruptionTarget (evictions, preemption) is ignored")
need(rules and rules[0].get("action") == "FailJob", "the FailJob rule comes first")
grace = pod.get("terminationGracePeriodSeconds", 30)
need(grace >= 2 * (LEAVE_TIMEOUT_S + SETTLE_S), "grace period %s s covers the leave hand-off" % grace)

per_pod = 1
if kind in ("gpu", "gpu-rdma"):
    res = w.get("resources", {})
    gpus = res.get("limits", {}).get("nvidia.com/gpu")
    env = {e["name"]: e.get("value") for e in w.get("env", [])}
    need(gpus == res.get("requests", {}).get("nvidia.com/gpu") and isinstance(gpus, int) and gpus >= 1,
         "nvidia.com/gpu request = limit (got %s)" % gpus)
    need(env.get("TAGC_LOCAL_WORKERS") == str(gpus),
         "TAGC_LOCAL_WORKERS %s = the pod's GPUs %s" % (env.get("TAGC_LOCAL_WORKERS"), gpus))
    per_pod = gpus if isinstance(gpus, int) else 1
    cmd = " ".join(w.get("command", []))
    need("node-launch.sh" in cmd, "the pod runs node-launch.sh (%s)" % cmd)
    need("worker-id" not in wargs and "metrics-addr" not in wargs,
         "no fixed --worker-id / --metrics-addr (the launcher sets them per GPU)")
    anti = pod.get("affinity", {}).get("podAntiAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", [])
    need(any(t.get("topologyKey") == "kubernetes.io/hostname" and
             t.get("labelSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component") == "worker"
             for t in anti), "one worker pod per node (required hostname anti-affinity)")
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["mountPath"]: m["name"] for m in w.get("volumeMounts", [])}
    shm = vols.get(mounts.get("/dev/shm"), {}).get("emptyDir", {})
    need(shm.get("medium") == "Memory" and shm.get("sizeLimit"), "/dev/shm: a sized Memory emptyDir")
    cm_name = vols.get(mounts.get("/etc/tagc/launch"), {}).get("configMap", {}).get("name", "")
    cms = [d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == cm_name]
    need(cms and "node-launch.sh" in cms[0].get("data", {}), "node-launch.sh is mounted from its ConfigMap")
    if cms and launcher:
        need(cms[0]["data"].get("node-launch.sh") == open(launcher).read(),
             "the ConfigMap holds exactly %s" % launcher)
    need(wargs.get("device", "cuda").startswith("cuda") or "device" not in wargs, "workers on cuda")
    if kind == "gpu-rdma":
        need(any(k.startswith("rdma/") for k in res.get("limits", {})), "an rdma/ device resource")
        need("IPC_LOCK" in w.get("securityContext", {}).get("capabilities", {}).get("add", []),
             "IPC_LOCK for NCCL's pinned buffers")
        need(env.get("NCCL_IB_DISABLE") == "0", "NCCL_IB_DISABLE=0")
    else:
        need(env.get("NCCL_IB_DISABLE") == "1", "no RDMA device: NCCL_IB_DISABLE=1")
else:
    need("nvidia.com/gpu" not in str(w.get("resources")), "cpu: no GPU")
    need(wargs.get("worker-id") == "tagc-worker-$(WORKER_INDEX)", "cpu: worker id from the index")

try:
    world = spec.get("completions") * per_pod
    start, top, low = int(cargs["start-workers"]), int(cargs["max-workers"]), int(cargs["min-workers"])
    need(spec.get("parallelism") == spec.get("completions"), "parallelism = completions")
    need(world == start <= top, "the world %d (completions x %d) = --start-workers %d <= --max-workers %d"
         % (world, per_pod, start, top))
    need(spec.get("maxFailedIndexes") == (world - low) // per_pod,
         "maxFailedIndexes %s = (world %d - --min-workers %d) / %d workers per pod"
         % (spec.get("maxFailedIndexes"), world, low, per_pod))
except (KeyError, TypeError, ValueError) as e:
    need(False, "coordinator or Job sizes missing (%s)" % e)

print("policy %s: %s" % (kind, "ok" if not failed else "%d checks failed" % len(failed)))
sys.exit(1 if failed else 0)
