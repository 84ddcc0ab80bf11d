#!/usr/bin/env python3
"""tagctl's command-line conventions. Every subcommand that `tagctl --help` names (and every
`tagctl ckpt` command that `tagctl ckpt --help` names) answers --help with status 0 on stdout,
nothing on stderr, a first line `usage: tagctl SUB ...`, lines of at most 79 columns and only
its own options (status vs inject vs job, each checked against what the parser accepts);
`tagctl run --help` lists every worker option exactly once under a group heading except the
four tagctl run sets itself; `tagctl --version` names the CMake project version; `tagctl ckpt
ls|verify|inspect OUT` read OUT/ckpt.
usage: test_help.py BINDIR SOURCE_DIR"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from harness import Checks  # noqa: E402

bindir, source = sys.argv[1], sys.argv[2]
tagctl = os.path.join(bindir, "tagctl")
check = Checks()
HIDDEN = {"rank", "world", "rendezvous", "worker-id"}  # set by tagctl run for each worker


def run(*args, timeout=120):
    return subprocess.run([tagctl] + list(args), capture_output=True, text=True, timeout=timeout)


def section(text, heading):
    """The names listed under `heading:` (two-space indent, name first) up to a blank line."""
    names, inside = [], False
    for line in text.splitlines():
        if line == heading + ":":
            inside = True
        elif inside and not line.strip():
            break
        elif inside and re.match(r"^  [a-z]", line):
            names.append(line.split()[0])
    return names


def options(text):
    """Option entries of a help text: '--name' at the start of an indented line."""
    return re.findall(r"^  --([a-z0-9-]+)", text, re.M)


def help_ok(args, usage):
    r = run(*args)
    first = r.stdout.splitlines()[0] if r.stdout else ""
    long_lines = [l for l in r.stdout.splitlines() if len(l) > 79]
    check(r.returncode == 0 and r.stderr == "" and
          (first.startswith("usage: " + usage + " ") or first == "usage: " + usage),
          "tagctl %s: status 0, stdout only, first line 'usage: %s ...' (status %d, first "
          "line %r, stderr %r)" % (" ".join(args), usage, r.returncode, first, r.stderr[:200]))
    check(not long_lines, "tagctl %s: no line over 79 columns %s" % (" ".join(args), long_lines[:2]))
    check("  --help" in r.stdout, "tagctl %s: lists --help" % " ".join(args))
    return r.stdout


def refused(args, text):
    r = run(*args)
    err = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(err) == 1 and text in err[0],
          "tagctl %s: status 2, one line with %r (status %d: %s)"
          % (" ".join(args), text, r.returncode, r.stderr.strip()))


# ---- the subcommands, from the program's own list ----
r = run("--help")
commands = section(r.stdout, "commands")
check(r.returncode == 0 and len(commands) >= 8 and "run" in commands and "ckpt" in commands,
      "tagctl --help lists its commands (%s)" % commands)
refused(["no-such-command", "--help"], "unknown command 'no-such-command'")
helps = {}
for c in commands:
    helps[c] = help_ok([c, "--help"], "tagctl " + c)
    for flag in ("-h",):
        r = run(c, flag)
        check(r.returncode == 0 and r.stdout == helps[c], "tagctl %s -h is --help" % c)

ckpt_commands = section(helps["ckpt"], "commands")
check(set(ckpt_commands) >= {"ls", "verify", "inspect", "export"},
      "tagctl ckpt --help names ls, verify, inspect, export (%s)" % ckpt_commands)
for c in ckpt_commands:
    helps["ckpt " + c] = help_ok(["ckpt", c, "--help"], "tagctl ckpt " + c)
    r = run("ckpt", c, "/tmp", "--help")
    check(r.returncode == 0 and r.stdout == helps["ckpt " + c],
          "tagctl ckpt %s DIR --help: the same help" % c)
refused(["ckpt", "ls", "--bogus", "/tmp"], "unknown option '--bogus'")
refused(["ckpt", "ls"], "usage: tagctl ckpt ls DIR")

# ---- each help names its own options, and those are the ones the parser takes ----
own = {"status": {"json"}, "inject": {"worker", "at-step", "seconds", "clear", "force"},
       "job": {"force"}}
everyone = set().union(*own.values())
for c, mine in own.items():
    listed = set(options(helps[c]))
    check(mine <= listed and not ((everyone - mine) & listed),
          "tagctl %s --help: its options %s, none of the others' (%s)"
          % (c, sorted(mine), sorted((everyone - mine) & listed)))
    for other in sorted(everyone - mine):
        refused([c, "--" + other], "unknown option '--%s'" % other)
    for opt in ("etcd", "job", "etcd-ca", "etcd-user", "config", "help"):
        check(opt in listed, "tagctl %s --help lists --%s" % (c, opt))

# ---- tagctl run --help: grouped, the worker's options once each, internal ones hidden ----
run_help = helps["run"]
worker_help = subprocess.run([os.path.join(bindir, "tagc-worker"), "--help"], capture_output=True,
                             text=True, timeout=60).stdout
worker_opts = set(options(worker_help)) - {"config", "help"}
listed = options(run_help)
check(len(worker_opts) > 40 and HIDDEN <= worker_opts, "tagc-worker --help lists %d options, "
      "the hidden ones among them" % len(worker_opts))
missing = sorted(worker_opts - HIDDEN - set(listed))
twice = sorted(o for o in set(listed) if listed.count(o) > 1)
check(not missing and not twice, "tagctl run --help lists every worker option once (missing %s, "
      "twice %s)" % (missing, twice))
check(not (HIDDEN & set(listed)), "tagctl run --help leaves out %s" % sorted(HIDDEN))
for opt in sorted(HIDDEN - {"rendezvous", "worker-id"}):
    refused(["run", "--" + opt, "x"], "--%s: 'x' is not an integer" % opt)  # still taken
headings = [l for l in run_help.splitlines() if re.match(r"^[A-Z][^:]*:$", l)]
check(len(headings) >= 8 and "Other options:" not in headings,
      "tagctl run --help: options under %d headings, none left ungrouped %s"
      % (len(headings), headings))
check(re.search(r"^  --resume, --no-resume ", run_help, re.M) is not None,
      "tagctl run --help shows --no-resume")
ctx = re.search(r"^  --ctx N .*?(?=^  --|\n\n)", run_help, re.M | re.S)
check(ctx is not None and "in bytes" not in ctx.group(0) and "in tokens" in ctx.group(0),
      "--ctx is a context window in tokens: %r" % (ctx.group(0) if ctx else None))

# ---- --version ----
with open(os.path.join(source, "CMakeLists.txt")) as f:
    project = re.search(r"project\(tagc VERSION ([0-9.]+)", f.read()).group(1)
r = run("--version")
check(r.returncode == 0 and re.fullmatch(r"tagctl \(tagc\) %s(, git \S+)?\n" % re.escape(project),
                                         r.stdout) is not None,
      "tagctl --version: 'tagctl (tagc) %s[, git DESCRIBE]' (%r)" % (project, r.stdout))

# ---- ckpt ls|verify|inspect OUT read OUT/ckpt ----
tmp = tempfile.mkdtemp(prefix="tagc-help-")
try:
    out = os.path.join(tmp, "out")
    r = run("run", "--steps", "4", "--ckpt-every", "2", "--threads", "1", "--eval-windows", "8",
            "--out", out, timeout=240)
    check(r.returncode == 0, "tagctl run --steps 4 --ckpt-every 2 (status %d)" % r.returncode)
    by_root, by_out = run("ckpt", "ls", os.path.join(out, "ckpt")), run("ckpt", "ls", out)
    rows = [l.split()[:2] for l in by_out.stdout.splitlines()[1:]]
    check(by_out.returncode == 0 and by_out.stdout == by_root.stdout and rows == [["4", "1"], ["2", "1"]],
          "tagctl ckpt ls OUT lists OUT/ckpt: steps 4 and 2 (%r)" % by_out.stdout)
    r = run("ckpt", "verify", out)
    check(r.returncode == 0 and "%s/ckpt/step-4: ok" % out in r.stdout, "tagctl ckpt verify OUT")
    r = run("ckpt", "inspect", out)
    check(r.returncode == 0 and "%s/ckpt/step-4" % out in r.stdout, "tagctl ckpt inspect OUT")
    empty = os.path.join(tmp, "empty")
    os.mkdir(empty)
    r = run("ckpt", "ls", empty)
    check(r.returncode == 0 and "no checkpoints in %s" % empty in r.stdout,
          "tagctl ckpt ls of a folder without checkpoints says so")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

check.exit()
