// Gloo backend: the only C++ in comm/. Exports comm_gloo_create() and the backend ops of
// comm_backend.h; every C++ exception is caught here and becomes a tagc_status.
//
// Transfers use Gloo's unbound buffers over its TCP full mesh: one buffer per peer and
// direction, waited for in peer order with the time left to the deadline.
//
// Ranks whose calls diverge must fail, not crash: Gloo's event loop throws (and so ends the
// process) when a message is longer than the receive posted for it, on a thread no try/catch
// of ours reaches. So no payload is sent before both sides agree on it. Every exchange sends
// each peer a fixed-size header (the exchange's tag: call number, operation kind, step; and
// the byte counts each way) on one header slot, and sends its payload to that peer only once
// the peer's header matches; a mismatch is TAGC_EPEER naming the peer, and both sides see
// it, as each checks the same pair of headers. Payloads travel on a slot made from the tag,
// so a payload reaches only the receive of the same exchange, which the sender has checked
// has its size: the receives can therefore be posted at once with the headers, and the
// check costs about one message latency per exchange.
//
// abort() (any thread) calls abortWaitRecv/abortWaitSend on the registered buffers; Gloo keeps that flag until the wait consumes it, so an abort that
// arrives before the wait still ends it. After any failure the connections are closed under
// the pairs' locks, so no late transfer writes into the caller's memory and peers see
// "connection closed" at once.
//
// Gloo fails pending receives when a connection breaks, but not an unbound send that is
// already queued for writing (its tx queue only signals bound buffers), so a peer that dies
// while our data is in flight would leave waitSend() blocked until the deadline. So every
// communicator keeps one probe receive posted per peer on a slot nobody sends on; Gloo fails
// it when that connection breaks. A monitor thread checks the probes of the peers of a
// running exchange every kProbeS seconds without blocking (abortWaitRecv, then waitRecv:
// it throws if the probe has failed, else returns at once) and wakes the exchange when one
// has.
//
// The bootstrap (connect_mesh) replaces Gloo's connectFullMesh, which connects the peers one
// after the other, waits five times the timeout for each and throws an error that names an
// address, not a rank. Here every rank publishes the address of its pair with each peer p
// under <prefix>/<p>/<rank> (all in one store request where the store can: set_many), reads
// the addresses its peers published for it (<prefix>/<rank>/: one prefix read, get_many),
// so that a bootstrap costs the store O(W) requests, not W (W - 1) of each kind, then connects
// all pairs at once, each within the timeout, so a failing create says which rank could not
// be reached — what the planner needs to tell a partitioned worker from its accusers.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/comm_backend.h"
#include "comm/reduce_host.h"
extern "C" {
#include "common/timeutil.h"
}

namespace {

// A Gloo context whose transport context and device are set by connect_mesh().
class MeshContext : public gloo::Context {
 public:
  MeshContext(int rank, int size) : gloo::Context(rank, size) {}

  void adopt(std::shared_ptr<gloo::transport::Device> device,
             std::shared_ptr<gloo::transport::Context> transport) {
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }
};

// Seconds between two health probes of the connections of a running exchange.
constexpr double kProbeS = 0.05;

// Slots: the probes use the context's first slot (nextSlot() at create), headers this fixed
// one, in order; the payload of an exchange kPayloadSlot | tag bits.
constexpr uint64_t kHeaderSlot = uint64_t(1) << 62;
constexpr uint64_t kPayloadSlot = uint64_t(2) << 62;
constexpr uint64_t kHeaderMagic = 0x7461676368647231; // "tagchdr1"

// What a rank tells a peer before an exchange: which exchange it is in, and the bytes it
// will send to the peer and expects from it.
struct Header {
  uint64_t magic;
  uint64_t call;
  uint64_t kind_step; // kind << 32 | step
  uint64_t send_bytes;
  uint64_t recv_bytes;
};

using Buffer = std::unique_ptr<gloo::transport::UnboundBuffer>;

struct Pending {
  gloo::transport::UnboundBuffer *buffer;
  int peer;
};

struct GlooComm {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<MeshContext> context;
  std::vector<char> scratch;
  // probes[p]: zero-byte receive from peer p, posted at create, never completed.
  std::vector<Buffer> probes;
  std::thread monitor;

  // Guards the fields below against abort() and the monitor thread.
  std::mutex lock;
  std::condition_variable wake; // the monitor waits on it
  bool aborted = false;
  bool stopping = false;  // destroy: the monitor exits
  bool busy = false;      // an exchange is between posting and its last wait
  bool closed = false;    // connections closed after a failure or abort
  int broken_peer = -1;   // found broken by the monitor
  std::vector<int> broken; // every peer whose connection had failed when an exchange failed
  std::vector<Pending> pending;
};

// Closes every pair; the caller holds g->lock.
void close_locked(GlooComm *g) {
  if (g->closed)
    return;
  g->closed = true;
  try {
    g->context->closeConnections();
  } catch (const std::exception &) {
    // The connections are being torn down either way; nothing more to do.
  }
}

// Wakes every pending wait of the running exchange; the caller holds g->lock.
void wake_pending_locked(GlooComm *g) {
  for (const Pending &p : g->pending) {
    p.buffer->abortWaitRecv();
    p.buffer->abortWaitSend();
  }
}

// True when the connection to peer has failed: its probe then holds Gloo's exception.
bool pair_broken(GlooComm *g, int peer) {
  auto &probe = g->probes[peer];
  probe->abortWaitRecv();
  try {
    probe->waitRecv(nullptr, std::chrono::milliseconds(1));
    return false;
  } catch (const std::exception &) {
    return true;
  }
}

void monitor_main(GlooComm *g) {
  std::unique_lock<std::mutex> guard(g->lock);
  while (!g->stopping) {
    if (!g->busy || g->closed || g->broken_peer >= 0) {
      g->wake.wait(guard);
      continue;
    }
    for (const Pending &p : g->pending) {
      if (pair_broken(g, p.peer)) {
        g->broken_peer = p.peer;
        wake_pending_locked(g);
        break;
      }
    }
    g->wake.wait_for(guard, std::chrono::duration<double>(kProbeS));
  }
}

// After a peer's failure, the connections a failed exchange notes as broken: at once and
// once more kBrokenSettleS later, since the sockets of workers killed together close within a
// few milliseconds of each other (on a loaded host), and the failure report names them all.
// It closes its own connections only kCloseAfterS after the failure, later than that second
// look, so that a peer that failed at the same moment never counts this live rank among its
// broken links (the planner excludes members that every report names and that are silent).
constexpr double kBrokenSettleS = 0.02;
constexpr double kCloseAfterS = 0.05;

// Adds each peer whose connection has failed to g->broken; the caller holds g->lock and the
// connections are not closed yet (then every probe has failed).
void note_broken_locked(GlooComm *g) {
  for (int p = 0; p < static_cast<int>(g->probes.size()); p++) {
    if (g->probes[p] && std::find(g->broken.begin(), g->broken.end(), p) == g->broken.end() &&
        pair_broken(g, p))
      g->broken.push_back(p);
  }
}

// Ends an exchange: unregisters its buffers and, after a failure, closes the connections;
// after a peer's failure (st TAGC_EPEER, not aborted) it first notes which connections broke.
void finish(GlooComm *g, tagc_status st) {
  std::unique_lock<std::mutex> guard(g->lock);
  g->busy = false;
  g->pending.clear();
  if (st == TAGC_OK)
    return;
  if (st == TAGC_EPEER && !g->aborted && !g->closed) {
    note_broken_locked(g);
    guard.unlock();
    tagc_sleep(kBrokenSettleS);
    guard.lock();
    if (!g->closed)
      note_broken_locked(g);
    std::sort(g->broken.begin(), g->broken.end());
    guard.unlock();
    tagc_sleep(kCloseAfterS - kBrokenSettleS);
    guard.lock();
  }
  close_locked(g);
}

std::chrono::milliseconds time_left(double deadline) {
  double left = deadline - tagc_now();
  long ms = left > 0 ? static_cast<long>(left * 1000.0 + 0.999) : 0;
  return std::chrono::milliseconds(ms);
}

// Classifies a failed wait or post: abort beats timeout (Gloo's own timeout breaks every
// connection, so it must not read as a peer failure), which beats a connection the monitor
// found broken, which beats the error Gloo reported. *peer is updated when the
// monitor knows better which peer failed.
tagc_status failure(GlooComm *g, double deadline, int *peer, const char *what,
                    const char *detail) {
  bool aborted;
  int broken;
  {
    std::lock_guard<std::mutex> guard(g->lock);
    aborted = g->aborted;
    broken = g->broken_peer;
  }
  if (aborted)
    return tagc_errorf(TAGC_EABORTED, "gloo %s: aborted", what);
  if (tagc_now() >= deadline - 1e-3)
    return tagc_errorf(TAGC_ETIMEDOUT, "gloo %s: timed out waiting for rank %d", what, *peer);
  if (broken >= 0) {
    *peer = broken;
    return tagc_errorf(TAGC_EPEER, "gloo %s: connection to rank %d failed", what, broken);
  }
  return tagc_errorf(TAGC_EPEER, "gloo %s: rank %d failed: %s", what, *peer, detail);
}

// Waits for one buffer in one direction. On failure returns the status and sets *peer
// (initially the buffer's peer) to the suspected rank.
tagc_status wait_one(GlooComm *g, gloo::transport::UnboundBuffer *b, bool recv, int *peer,
                     double deadline) {
  const char *what = recv ? "recv" : "send";
  try {
    auto left = time_left(deadline);
    if (left.count() <= 0)
      return failure(g, deadline, peer, what, "deadline");
    bool done = recv ? b->waitRecv(nullptr, left) : b->waitSend(nullptr, left);
    return done ? TAGC_OK : failure(g, deadline, peer, what, "woken");
  } catch (const std::exception &e) {
    return failure(g, deadline, peer, what, e.what());
  }
}

Header header_for(const comm_tag *tag, const comm_xfer &x) {
  return Header{kHeaderMagic, tag->call, uint64_t(tag->kind) << 32 | tag->step, x.send_bytes,
                x.recv_bytes};
}

// TAGC_EPEER unless the peer's header describes the same exchange as ours, with its bytes to
// us equal to ours from it and the other way round.
tagc_status check_header(const Header &mine, const Header &theirs, int peer) {
  if (theirs.magic == kHeaderMagic && theirs.call == mine.call &&
      theirs.kind_step == mine.kind_step && theirs.send_bytes == mine.recv_bytes &&
      theirs.recv_bytes == mine.send_bytes)
    return TAGC_OK;
  if (theirs.magic != kHeaderMagic)
    return tagc_errorf(TAGC_EPEER, "gloo exchange: rank %d sent a malformed header", peer);
  auto kind = [](const Header &h) {
    return comm_opkind_name(static_cast<uint32_t>(h.kind_step >> 32));
  };
  return tagc_errorf(
      TAGC_EPEER,
      "gloo exchange: calls diverged: rank %d is in %s #%llu step %u (sends %llu B, expects "
      "%llu B), this rank in %s #%llu step %u (sends %llu B, expects %llu B)",
      peer, kind(theirs), static_cast<unsigned long long>(theirs.call),
      static_cast<unsigned>(theirs.kind_step & 0xffffffffu),
      static_cast<unsigned long long>(theirs.send_bytes),
      static_cast<unsigned long long>(theirs.recv_bytes), kind(mine),
      static_cast<unsigned long long>(mine.call), static_cast<unsigned>(mine.kind_step & 0xffffffffu),
      static_cast<unsigned long long>(mine.send_bytes),
      static_cast<unsigned long long>(mine.recv_bytes));
}

// The buffers of one exchange: per peer a header each way, and the payload each way (null
// for a direction without bytes).
struct ExchangeBuffers {
  std::vector<Header> mine, theirs;
  std::vector<Buffer> header_send, header_recv, send, recv;
};

tagc_status create_buffers(GlooComm *g, const comm_tag *tag, const comm_xfer *x, int n,
                           ExchangeBuffers &b) {
  try {
    b.mine.resize(n);
    b.theirs.resize(n);
    b.header_send.resize(n);
    b.header_recv.resize(n);
    b.send.resize(n);
    b.recv.resize(n);
    for (int i = 0; i < n; i++) {
      b.mine[i] = header_for(tag, x[i]);
      b.header_send[i] = g->context->createUnboundBuffer(&b.mine[i], sizeof(Header));
      b.header_recv[i] = g->context->createUnboundBuffer(&b.theirs[i], sizeof(Header));
      if (x[i].send_bytes)
        b.send[i] = g->context->createUnboundBuffer(const_cast<void *>(x[i].send),
                                                    x[i].send_bytes);
      if (x[i].recv_bytes)
        b.recv[i] = g->context->createUnboundBuffer(x[i].recv, x[i].recv_bytes);
    }
  } catch (const std::exception &e) {
    return tagc_errorf(TAGC_ENOMEM, "gloo exchange: %s", e.what());
  }
  return TAGC_OK;
}

// Registers every buffer of the exchange with abort() and the monitor. TAGC_EABORTED when
// the communicator was aborted or closed already.
tagc_status start_exchange(GlooComm *g, const comm_xfer *x, int n, const ExchangeBuffers &b) {
  {
    std::lock_guard<std::mutex> guard(g->lock);
    if (g->aborted || g->closed)
      return tagc_errorf(TAGC_EABORTED, "gloo exchange: aborted");
    g->busy = true;
    for (int i = 0; i < n; i++) {
      for (const Buffer *buf : {&b.header_send[i], &b.header_recv[i], &b.send[i], &b.recv[i]}) {
        if (*buf)
          g->pending.push_back({buf->get(), x[i].peer});
      }
    }
  }
  g->wake.notify_all();
  return TAGC_OK;
}

// Posts a receive and/or a send on slot with x.peer; a failure to post is a failure of the
// peer.
tagc_status post(GlooComm *g, const Buffer &recv, const Buffer &send, const comm_xfer &x,
                 uint64_t slot, double deadline, int *peer) {
  try {
    if (recv)
      recv->recv(x.peer, slot);
    if (send)
      send->send(x.peer, slot);
  } catch (const std::exception &e) {
    *peer = x.peer;
    return failure(g, deadline, peer, "post", e.what());
  }
  return TAGC_OK;
}

// Waits for every buffer of one kind (recv or send) in peer order.
tagc_status wait_all(GlooComm *g, const std::vector<Buffer> &bufs, bool recv, const comm_xfer *x,
                     double deadline, int *peer) {
  for (size_t i = 0; i < bufs.size(); i++) {
    if (!bufs[i])
      continue;
    *peer = x[i].peer;
    TAGC_CHECK(wait_one(g, bufs[i].get(), recv, peer, deadline));
  }
  return TAGC_OK;
}

tagc_status gloo_exchange(void *impl, const comm_tag *tag, const comm_xfer *x, int n,
                          double deadline, int *peer) {
  GlooComm *g = static_cast<GlooComm *>(impl);
  ExchangeBuffers b;
  TAGC_CHECK(create_buffers(g, tag, x, n, b));
  TAGC_CHECK(start_exchange(g, x, n, b));
  uint64_t payload_slot = kPayloadSlot | ((tag->call << 2 | tag->step) & (kHeaderSlot - 1));
  tagc_status st = TAGC_OK;
  Buffer none;
  for (int i = 0; i < n && st == TAGC_OK; i++) {
    st = post(g, b.header_recv[i], b.header_send[i], x[i], kHeaderSlot, deadline, peer);
    if (st == TAGC_OK)
      st = post(g, b.recv[i], none, x[i], payload_slot, deadline, peer);
  }
  for (int i = 0; i < n && st == TAGC_OK; i++) {
    *peer = x[i].peer;
    st = wait_one(g, b.header_recv[i].get(), true, peer, deadline);
    if (st == TAGC_OK && (st = check_header(b.mine[i], b.theirs[i], x[i].peer)) != TAGC_OK) {
      // Let our header reach the peer before the connections close, so that it reports the
      // same mismatch rather than a lost connection.
      tagc_error_saved saved;
      tagc_error_save(&saved);
      int ignored = x[i].peer;
      (void)wait_one(g, b.header_send[i].get(), false, &ignored, deadline);
      tagc_error_restore(&saved);
    }
    if (st == TAGC_OK)
      st = post(g, none, b.send[i], x[i], payload_slot, deadline, peer);
  }
  if (st == TAGC_OK)
    st = wait_all(g, b.recv, true, x, deadline, peer);
  if (st == TAGC_OK)
    st = wait_all(g, b.send, false, x, deadline, peer);
  if (st == TAGC_OK)
    st = wait_all(g, b.header_send, false, x, deadline, peer);
  if (st == TAGC_OK)
    *peer = -1;
  finish(g, st);
  return st;
}

tagc_status gloo_copy(void *, void *dst, const void *src, size_t bytes) {
  std::memmove(dst, src, bytes);
  return TAGC_OK;
}

tagc_status gloo_to_bf16(void *, uint16_t *dst, const float *src, size_t n) {
  comm_f32_to_bf16(dst, src, n);
  return TAGC_OK;
}

tagc_status gloo_reduce(void *, void *out, const void *rows, int nrows, size_t count,
                        tagc_dtype dtype, tagc_redop op, tagc_wire wire) {
  comm_reduce_rows(out, rows, nrows, count, dtype, op, wire);
  return TAGC_OK;
}

tagc_status gloo_scratch(void *impl, size_t bytes, void **out) {
  GlooComm *g = static_cast<GlooComm *>(impl);
  try {
    if (g->scratch.size() < bytes)
      g->scratch.resize(bytes);
  } catch (const std::exception &) {
    return tagc_errorf(TAGC_ENOMEM, "gloo backend: scratch of %zu bytes: out of memory", bytes);
  }
  *out = g->scratch.data();
  return TAGC_OK;
}

int gloo_broken_peers(void *impl, int *ranks, int cap) {
  GlooComm *g = static_cast<GlooComm *>(impl);
  std::lock_guard<std::mutex> guard(g->lock);
  int n = 0;
  for (int p : g->broken) {
    if (n < cap)
      ranks[n++] = p;
  }
  return n;
}

void gloo_abort(void *impl) {
  GlooComm *g = static_cast<GlooComm *>(impl);
  std::lock_guard<std::mutex> guard(g->lock);
  g->aborted = true;
  if (g->busy)
    wake_pending_locked(g);
  else
    close_locked(g);
}

// Stops the monitor, closes the connections and frees everything (also for a partly built
// communicator).
void free_comm(GlooComm *g) {
  {
    std::lock_guard<std::mutex> guard(g->lock);
    g->stopping = true;
    if (g->device) /* connected */
      close_locked(g);
  }
  g->wake.notify_all();
  if (g->monitor.joinable())
    g->monitor.join();
  g->probes.clear();
  g->context.reset();
  g->device.reset();
  delete g;
}

void gloo_destroy(void *impl) {
  free_comm(static_cast<GlooComm *>(impl));
}

const comm_backend_ops gloo_ops = {gloo_exchange, gloo_copy,  gloo_to_bf16, gloo_reduce,
                                   gloo_scratch,  gloo_abort, gloo_destroy, gloo_broken_peers};

// A peer that closes its socket must not kill this process with SIGPIPE.
void ignore_sigpipe() {
  struct sigaction old;
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL &&
      !(old.sa_flags & SA_SIGINFO))
    signal(SIGPIPE, SIG_IGN);
}

// Puts "<context>: " before the current error detail (copied first: tagc_errorf writes the
// buffer tagc_last_error() reads).
tagc_status with_detail(tagc_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

tagc_status with_detail(tagc_status st, const char *fmt, ...) {
  std::string detail = tagc_last_error();
  char context[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(context, sizeof context, fmt, ap);
  va_end(ap);
  return tagc_errorf(st, "%s: %s", context, detail.c_str());
}

// Store key of the address that rank `from` publishes for its pair with rank `to`: under
// <prefix>/<to>/, so that a rank's W - 1 peer addresses share a prefix the store can read
// at once (tagc_store_get_many).
std::string address_key(const tagc_comm_config *cfg, int from, int to) {
  return std::string(cfg->prefix) + "/" + std::to_string(to) + "/" + std::to_string(from);
}

// The ranks other than cfg->rank, in order.
std::vector<int> peers_of(const tagc_comm_config *cfg) {
  std::vector<int> peers;
  for (int p = 0; p < cfg->world_size; p++) {
    if (p != cfg->rank)
      peers.push_back(p);
  }
  return peers;
}

// One peer's part of the bootstrap.
struct PeerLink {
  std::vector<char> address; // the peer's end of our pair
  std::string error;         // why the connect failed; empty when it succeeded
  double seconds = 0;        // time the connect took
};

// Reads every peer's address for its pair with this rank, waiting until deadline. On
// failure *peer is the first rank whose address did not come (-1 for a store error).
tagc_status fetch_addresses(const tagc_comm_config *cfg, double deadline,
                            std::vector<PeerLink> &links, int *peer) {
  std::vector<int> peers = peers_of(cfg);
  std::vector<std::string> keys;
  std::vector<const char *> names;
  for (int p : peers)
    keys.push_back(address_key(cfg, p, cfg->rank));
  for (const std::string &k : keys)
    names.push_back(k.c_str());
  int n = static_cast<int>(peers.size()), missing = -1;
  std::vector<void *> values(n);
  std::vector<size_t> lens(n);
  double left = deadline - tagc_now();
  tagc_status st = tagc_store_get_many(cfg->store, names.data(), n, left > 0 ? left : 0,
                                       values.data(), lens.data(), &missing);
  if (st == TAGC_ETIMEDOUT && missing >= 0) {
    *peer = peers[missing];
    return tagc_errorf(st, "rank %d did not publish its address within %.1f s", *peer,
                       cfg->timeout_s);
  }
  if (st != TAGC_OK)
    return with_detail(st, "peer addresses");
  for (int i = 0; i < n; i++) {
    char *v = static_cast<char *>(values[i]);
    links[peers[i]].address.assign(v, v + lens[i]);
    std::free(v);
  }
  return TAGC_OK;
}

// The connects of one bootstrap: shared with their threads, so that a cancelled create can
// return while they run out (each within the pair timeout) on a detached reaper thread.
struct ConnectRun {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::transport::Context> transport;
  std::vector<PeerLink> links;
  std::vector<std::thread> threads;
  std::mutex lock;
  std::condition_variable done;
  int pending = 0;
};

// Whether cfg's cancel function says stop.
bool cancelled(const tagc_comm_config *cfg) {
  return cfg->cancelled && cfg->cancelled(cfg->cancel_arg);
}

// Joins the connect threads of run (on a thread of its own when detached).
void join_connects(std::shared_ptr<ConnectRun> run) {
  for (auto &t : run->threads)
    t.join();
}

// Connects every pair at once, one thread each; Gloo waits five times the pair timeout, so
// the pairs were made with a fifth of cfg->timeout_s. Returns when all connects ended (true),
// or false as soon as cfg's cancel function says stop: the connects then end on their own,
// on a detached thread that holds the transport until they have.
bool connect_pairs(const tagc_comm_config *cfg, const std::shared_ptr<ConnectRun> &run) {
  ConnectRun *r = run.get();
  auto connect_one = [r](int p) {
    double t0 = tagc_now();
    std::string error;
    try {
      r->transport->getPair(p)->connect(r->links[p].address);
    } catch (const std::exception &e) {
      error = e.what();
    }
    std::lock_guard<std::mutex> guard(r->lock);
    r->links[p].error = error;
    r->links[p].seconds = tagc_now() - t0;
    if (--r->pending == 0)
      r->done.notify_all();
  };
  r->pending = cfg->world_size - 1; // before any thread runs: each one counts down once
  try {
    for (int p = 0; p < cfg->world_size; p++) {
      if (p != cfg->rank)
        r->threads.emplace_back(connect_one, p);
    }
  } catch (const std::exception &) {
    {
      std::lock_guard<std::mutex> guard(r->lock);
      r->pending -= cfg->world_size - 1 - static_cast<int>(r->threads.size());
    }
    join_connects(run);
    throw;
  }
  std::unique_lock<std::mutex> guard(r->lock);
  while (r->pending > 0) {
    r->done.wait_for(guard, std::chrono::duration<double>(TAGC_STORE_CANCEL_POLL_S));
    if (r->pending > 0 && cancelled(cfg)) {
      guard.unlock();
      std::thread(join_connects, run).detach();
      return false;
    }
  }
  guard.unlock();
  join_connects(run);
  return true;
}

// The bootstrap (see the top of this file): on failure returns TAGC_ETIMEDOUT (a peer's
// address did not come, or a connect ran out of time) or TAGC_EPEER (a connect was refused
// or failed), with *peer the lowest rank that could not be reached; other failures (store,
// local sockets) keep *peer at -1.
tagc_status connect_mesh(const tagc_comm_config *cfg, MeshContext &ctx, int *peer) {
  gloo::transport::tcp::attr attr(cfg->host ? cfg->host : "127.0.0.1");
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto transport = device->createContext(cfg->rank, cfg->world_size);
  auto full = std::chrono::milliseconds(static_cast<long>(cfg->timeout_s * 1000));
  transport->setTimeout(std::max(std::chrono::milliseconds(1), full / 5));
  double deadline = tagc_now() + cfg->timeout_s;
  std::vector<PeerLink> links(cfg->world_size);
  std::vector<std::vector<char>> mine;
  std::vector<std::string> keys;
  for (int p : peers_of(cfg)) {
    mine.push_back(transport->createPair(p)->address().bytes());
    keys.push_back(address_key(cfg, cfg->rank, p));
  }
  std::vector<const char *> names;
  std::vector<const void *> values;
  std::vector<size_t> lens;
  for (size_t i = 0; i < keys.size(); i++) {
    names.push_back(keys[i].c_str());
    values.push_back(mine[i].data());
    lens.push_back(mine[i].size());
  }
  tagc_status st = tagc_store_set_many(cfg->store, names.data(), values.data(), lens.data(),
                                       static_cast<int>(names.size()));
  if (st != TAGC_OK)
    return with_detail(st, "publishing the addresses of the pairs");
  TAGC_CHECK(fetch_addresses(cfg, deadline, links, peer));
  if (cancelled(cfg))
    return tagc_errorf(TAGC_EABORTED, "gloo bootstrap cancelled before connecting");
  double connect_end = tagc_now() + cfg->timeout_s;
  auto run = std::make_shared<ConnectRun>();
  run->device = device;
  run->transport = transport;
  run->links = links;
  if (!connect_pairs(cfg, run))
    return tagc_errorf(TAGC_EABORTED, "gloo bootstrap cancelled while connecting");
  links = run->links;
  run.reset();
  int failed = 0;
  for (int p = 0; p < cfg->world_size; p++) {
    if (links[p].error.empty())
      continue;
    if (failed++ == 0)
      *peer = p;
  }
  if (failed) {
    // Keep our ends open until the peers' connects have run out of time too: one of ours
    // closing early would make a peer still connecting to us blame us for a working link.
    // A cancel ends that wait too: the peers are moving to a newer generation.
    while (tagc_now() < connect_end && !cancelled(cfg))
      tagc_sleep(std::min(TAGC_STORE_CANCEL_POLL_S, std::max(0.0, connect_end - tagc_now())));
    if (cancelled(cfg))
      return tagc_errorf(TAGC_EABORTED, "gloo bootstrap cancelled after failed connects");
    const PeerLink &l = links[*peer];
    tagc_status st = l.seconds >= 0.95 * cfg->timeout_s ? TAGC_ETIMEDOUT : TAGC_EPEER;
    return tagc_errorf(st, "cannot connect to rank %d (%d of %d peers unreachable) after %.1f s: "
                       "%s", *peer, failed, cfg->world_size - 1, l.seconds, l.error.c_str());
  }
  transport->setTimeout(full);
  ctx.setTimeout(full);
  ctx.adopt(std::move(device), std::move(transport));
  return TAGC_OK;
}

} // namespace

// One empty message each way with every peer, within the timeout: a peer that gave up after
// our connect reached its socket (its listener was still open while it exited) looks
// connected, and its first collective would be the first to know. This makes such a create
// fail and name it.
static tagc_status hello_peers(GlooComm *g, const tagc_comm_config *cfg, int *failed_peer) {
  uint64_t slot = static_cast<uint64_t>(g->context->nextSlot());
  int w = cfg->world_size;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> out(w), in(w);
  for (int p = 0; p < w; p++) {
    if (p == cfg->rank)
      continue;
    out[p] = g->context->createUnboundBuffer(nullptr, 0);
    in[p] = g->context->createUnboundBuffer(nullptr, 0);
    in[p]->recv(p, slot, 0, 0);
    out[p]->send(p, slot, 0, 0);
  }
  double deadline = tagc_now() + cfg->timeout_s;
  for (int dir = 0; dir < 2; dir++)
    for (int p = 0; p < w; p++) {
      if (p == cfg->rank)
        continue;
      int peer = p;
      tagc_status st = wait_one(g, dir == 0 ? in[p].get() : out[p].get(), dir == 0, &peer,
                                deadline);
      if (st != TAGC_OK) {
        *failed_peer = peer;
        return with_detail(st, "greeting rank %d after connecting", peer);
      }
    }
  return TAGC_OK;
}

extern "C" tagc_status comm_gloo_create(const tagc_comm_config *cfg,
                                        const comm_backend_ops **ops, void **impl,
                                        int *failed_peer) {
  *failed_peer = -1;
  ignore_sigpipe();
  GlooComm *g = new (std::nothrow) GlooComm();
  if (!g)
    return tagc_errorf(TAGC_ENOMEM, "gloo create: out of memory");
  tagc_status st;
  try {
    g->context = std::make_shared<MeshContext>(cfg->rank, cfg->world_size);
    st = connect_mesh(cfg, *g->context, failed_peer);
    if (st == TAGC_OK)
      st = hello_peers(g, cfg, failed_peer);
    if (st == TAGC_OK) {
      g->device = g->context->getDevice();
      uint64_t probe_slot = static_cast<uint64_t>(g->context->nextSlot());
      g->probes.resize(cfg->world_size);
      for (int p = 0; p < cfg->world_size; p++) {
        if (p == cfg->rank)
          continue;
        g->probes[p] = g->context->createUnboundBuffer(nullptr, 0);
        g->probes[p]->recv(p, probe_slot, 0, 0);
      }
      g->monitor = std::thread(monitor_main, g);
    }
  } catch (const std::exception &e) {
    st = tagc_errorf(TAGC_EPEER, "%s", e.what());
  }
  if (st != TAGC_OK) {
    with_detail(st, "gloo create (rank %d of %d, prefix %s)", cfg->rank, cfg->world_size,
                cfg->prefix);
    free_comm(g);
    return st;
  }
  *ops = &gloo_ops;
  *impl = g;
  return TAGC_OK;
}
