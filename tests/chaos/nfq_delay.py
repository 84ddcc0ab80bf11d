#!/usr/bin/env python3
"""Delays every packet of an NFQUEUE queue by a uniform random time in [mean - jitter,
mean + jitter] ms (netem's `delay MEAN JITTER`, for kernels without sch_netem), keeping
each direction in order, talking
nfnetlink_queue directly so that it needs no library. Run it inside the network namespace
whose iptables rules send packets to the queue (`-j NFQUEUE --queue-num Q --queue-bypass`);
it gives up after --seconds (packets then pass unqueued, thanks to --queue-bypass).

    nfq_delay.py --queue 7 --mean-ms 30 --jitter-ms 20 --seconds 160

Prints one line at the end: packets delayed and the mean delay."""
import argparse
import heapq
import random
import select
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQNL_CFG_CMD_BIND, NFQNL_COPY_META = 1, 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NF_ACCEPT = 1
QUEUE_MAXLEN = 16384


def attr(kind, payload):
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * ((4 - n % 4) % 4)


def message(msg_type, queue, attrs, flags=NLM_F_REQUEST, seq=0):
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + b"".join(attrs)
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg_type, flags, seq,
                       0) + body


def config(sock, queue, attrs, seq):
    """Sends a config message and waits for its ack; raises OSError on a netlink error."""
    sock.send(message(NFQNL_MSG_CONFIG, queue, attrs, NLM_F_REQUEST | NLM_F_ACK, seq))
    data = sock.recv(65536)
    _, kind, _, _, _ = struct.unpack_from("=IHHII", data)
    if kind == NLMSG_ERROR:
        (err,) = struct.unpack_from("=i", data, 16)
        if err:
            raise OSError(-err, "nfnetlink_queue config")


def packets(data):
    """(packet id, hook) of each NFQNL_MSG_PACKET message in one netlink datagram."""
    off = 0
    while off + 16 <= len(data):
        n, kind, _, _, _ = struct.unpack_from("=IHHII", data, off)
        if n < 16:
            break
        if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            a = off + 20  # after nlmsghdr and nfgenmsg
            while a + 4 <= off + n:
                alen, akind = struct.unpack_from("=HH", data, a)
                if alen < 4:
                    break
                if akind & 0x7FFF == NFQA_PACKET_HDR:
                    yield struct.unpack_from("!IHB", data, a + 4)[::2]
                a += (alen + 3) & ~3
        off += (n + 3) & ~3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queue", type=int, required=True)
    ap.add_argument("--mean-ms", type=float, required=True)
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not 0 <= a.jitter_ms <= a.mean_ms or not 0 <= a.queue < 65536 or a.seconds <= 0:
        sys.exit("nfq_delay: need 0 <= jitter <= mean, a queue in 0..65535 and seconds > 0")
    rng = random.Random(a.seed)
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE: no drops in bursts
    sock.bind((0, 0))
    config(sock, a.queue, [attr(NFQA_CFG_CMD, struct.pack("=BBH", NFQNL_CFG_CMD_BIND, 0, 0))], 1)
    config(sock, a.queue, [attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)),
                           attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN))], 2)
    print("nfq_delay: queue %d bound, %.0f±%.0f ms for %.0f s" % (
        a.queue, a.mean_ms, a.jitter_ms, a.seconds), flush=True)
    due = []  # (monotonic time, packet id)
    last = {}  # hook (direction) -> the latest release time given to a packet of it
    end = time.monotonic() + a.seconds
    delayed, total_delay = 0, 0.0
    while True:
        now = time.monotonic()
        if now >= end:
            break
        verdicts = []
        while due and due[0][0] <= now:
            verdicts.append(message(NFQNL_MSG_VERDICT, a.queue, [
                attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, heapq.heappop(due)[1]))]))
        if verdicts:
            sock.send(b"".join(verdicts))
        wait = min(due[0][0] - now if due else 0.1, end - now)
        if select.select([sock], [], [], max(wait, 0))[0]:
            data = sock.recv(1 << 20)
            now = time.monotonic()
            for pid, hook in packets(data):
                d = (a.mean_ms + rng.uniform(-a.jitter_ms, a.jitter_ms)) / 1000.0
                # in order per direction, as through a real link's queue: a packet never
                # overtakes the one before it (netem's jitter would reorder, and TCP would
                # read the reordering as loss)
                t = max(now + d, last.get(hook, 0.0))
                last[hook] = t
                heapq.heappush(due, (t, pid))
                delayed += 1
                total_delay += t - now
    # what is still queued passes now rather than waiting for the kernel to drop it
    if due:
        sock.send(b"".join(message(NFQNL_MSG_VERDICT, a.queue, [
            attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, pid))]) for _, pid in due))
    print("nfq_delay: %d packets delayed, mean %.1f ms" % (
        delayed, 1000 * total_delay / delayed if delayed else 0), flush=True)


if __name__ == "__main__":
    main()
