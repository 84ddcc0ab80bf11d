/* tagc-worker: one training process. */
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/exit_codes.h"
#include "common/log.h"
#include "worker/elastic.h"
#include "worker/run_config.h"
#include "worker/train.h"

static sem_t signalled;
static volatile sig_atomic_t last_signal;

/* SIGTERM / SIGINT: hands the signal to the signal thread. A handler (not SIG_DFL) is also
 * what makes the kernel deliver SIGTERM to PID 1 of a PID namespace (a container) at all. It
 * may run on any thread that has the signals unblocked: the signal thread, or a thread a
 * library started before main (OpenBLAS). */
static void on_stop_signal(int sig) {
  last_signal = sig;
  sem_post(&signalled);
}

/* The signal thread: SIGTERM / SIGINT make an elastic worker leave its job gracefully
 * (worker/elastic.h); otherwise, or at a second signal, the process ends at once with the
 * status a shell gives a process killed by that signal. */
static void *take_signals(void *arg) {
  sigset_t *stop = arg;
  pthread_sigmask(SIG_UNBLOCK, stop, NULL);
  for (;;) {
    if (sem_wait(&signalled) != 0)
      continue; /* EINTR: the handler ran on this thread */
    int sig = last_signal;
    if (!tagc_elastic_terminate(sig)) {
      fprintf(stderr, "tagc-worker: %s: stopping now\n", strsignal(sig));
      _exit(128 + sig);
    }
  }
  return NULL;
}

/* Before any thread of ours exists: they all inherit the blocked mask, so that the handler
 * never interrupts a training or etcd call; only the signal thread unblocks them. */
static void catch_stop_signals(void) {
  static sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sem_init(&signalled, 0, 0);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  pthread_sigmask(SIG_BLOCK, &stop, NULL);
  pthread_t t;
  if (pthread_create(&t, NULL, take_signals, &stop) == 0)
    pthread_detach(t);
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN); /* a peer that dies must not kill us through a socket write */
  catch_stop_signals();
  tagc_train_config cfg;
  memset(&cfg, 0, sizeof cfg);
  int help = 0;
  tagc_status st = tagc_opts_parse(&tagc_train_program, &cfg, argc, argv, NULL, 0, NULL, &help);
  if (st != TAGC_OK || help) {
    if (st != TAGC_OK)
      fprintf(stderr, "tagc-worker: %s\n", tagc_last_error());
    tagc_opts_free(&tagc_train_program, &cfg);
    return st != TAGC_OK ? TAGC_EXIT_CONFIG : TAGC_EXIT_DONE;
  }
  tagc_log_format format = TAGC_LOG_AUTO;
  st = tagc_log_format_parse(cfg.log_format, &format);
  if (st == TAGC_OK)
    st = tagc_log_configure(cfg.log, format);
  if (st == TAGC_OK) { /* each line names its worker: the id, else the static rank */
    char tag[64];
    if (cfg.worker_id && *cfg.worker_id)
      snprintf(tag, sizeof tag, "%s", cfg.worker_id);
    else
      snprintf(tag, sizeof tag, "r%lld", (long long)cfg.rank);
    tagc_log_set_tag(tag);
  }
  if (st == TAGC_OK)
    st = tagc_train_run(&cfg);
  if (st != TAGC_OK)
    fprintf(stderr, "tagc-worker: %s\n", tagc_last_error());
  int code = tagc_exit_code_of(st); /* the one table, which tagctl run reads back */
  if (st == TAGC_OK && cfg.leave_exit_code && tagc_elastic_left())
    code = (int)cfg.leave_exit_code; /* left on a signal before the job was done */
  tagc_opts_free(&tagc_train_program, &cfg);
  return code;
}
