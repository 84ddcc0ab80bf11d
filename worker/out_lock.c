/* The owner of an output folder (out_lock.h): flock on OUT/.lock, the holder's record. */
#include "worker/out_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "common/json.h"
#include "common/log.h"
#include "common/timeutil.h"

typedef struct out_holder {
  char text[160]; /* "pid P on host H" */
  char job[128];
} out_holder;

/* Records this process as the holder, in the file the descriptor holds exclusively. */
static void write_holder(int fd, const char *job) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  json_t *h = json_pack("{s:i, s:s, s:s, s:f}", "pid", (int)getpid(), "host", host, "job",
                        job ? job : "", "since", tagc_wall_time());
  char *text = h ? tagc_json_dump(h) : NULL;
  if (text && ftruncate(fd, 0) == 0 && pwrite(fd, text, strlen(text), 0) < 0)
    LOG_WARN("train", "cannot record this process in the output lock: %s", strerror(errno));
  free(text);
  json_decref(h);
}

static void read_holder(int fd, out_holder *h) {
  char buf[1024];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  json_t *v = NULL;
  const char *host = "?", *job = "";
  int64_t pid = 0;
  if (n > 0 && tagc_json_parse(buf, (size_t)n, &v) == TAGC_OK) {
    tagc_json_get_int(v, "pid", &pid);
    tagc_json_get_str(v, "host", &host);
    tagc_json_get_str(v, "job", &job);
  }
  snprintf(h->text, sizeof h->text, "pid %lld on host %s", (long long)pid, host);
  snprintf(h->job, sizeof h->job, "%s", job);
  json_decref(v);
  tagc_clear_error();
}

tagc_status tagc_out_lock(const char *out, const char *job, int *fd_out) {
  return tagc_dir_lock(out, "output folder", "--out", job, fd_out);
}

tagc_status tagc_dir_lock(const char *out, const char *kind, const char *option, const char *job,
                          int *fd_out) {
  *fd_out = -1;
  char path[4200];
  snprintf(path, sizeof path, "%s/.lock", out);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return tagc_errnof(TAGC_EIO, "%s", path);
  /* a sharer holds the lock exclusively only while it writes the file: wait that out */
  double until = tagc_now() + (job ? 1.0 : 0.0);
  out_holder h;
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      write_holder(fd, job);
      if (!job || flock(fd, LOCK_SH | LOCK_NB) == 0)
        break;
    } else if (job && flock(fd, LOCK_SH | LOCK_NB) == 0) {
      read_holder(fd, &h);
      if (!strcmp(h.job, job))
        break;
      flock(fd, LOCK_UN); /* another job's, or a stale record: look again */
    }
    if (tagc_now() >= until) {
      read_holder(fd, &h);
      close(fd);
      return tagc_errorf(TAGC_EINVAL, "%s %s is in use by %s%s%s: use another %s, or stop "
                         "that run first", kind, out, h.text, *h.job ? ", job " : "", h.job,
                         option);
    }
    tagc_sleep(0.01);
  }
  *fd_out = fd;
  return TAGC_OK;
}

/* The descriptor `tagctl run` handed down, when it holds OUT/.lock; else -1. */
int tagc_out_lock_inherited(const char *out) {
  const char *v = getenv(TAGC_OUT_LOCK_FD_ENV);
  if (!v || !*v)
    return -1;
  int fd = atoi(v);
  char path[4200];
  snprintf(path, sizeof path, "%s/.lock", out);
  struct stat a, b;
  if (fd < 0 || fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_dev != b.st_dev ||
      a.st_ino != b.st_ino || flock(fd, LOCK_EX | LOCK_NB) != 0)
    return -1; /* not our OUT's lock, or not held through this descriptor */
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}
