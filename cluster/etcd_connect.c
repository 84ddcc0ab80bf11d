/* A client from a program's etcd options: TLS files, the auth user and its password (from a
 * file or the environment, never the command line). */
#include "cluster/etcd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *given(const char *s) { return s && *s ? s : NULL; }

/* The first line of a password file, in a new string. */
static tagc_status read_password_file(const char *path, char **out) {
  FILE *f = fopen(path, "r");
  if (!f)
    return tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EIO, "--etcd-password-file %s",
                       path);
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  int bad = ferror(f);
  fclose(f);
  if (bad)
    return tagc_errorf(TAGC_EIO, "--etcd-password-file %s: read error", path);
  buf[n] = '\0';
  buf[strcspn(buf, "\r\n")] = '\0';
  *out = strdup(buf);
  memset(buf, 0, sizeof buf);
  return *out ? TAGC_OK : tagc_errorf(TAGC_ENOMEM, "etcd password");
}

/* TAGC_EINVAL when any endpoint of the comma-separated list is plain http://. */
static tagc_status refuse_clear_text(const char *endpoints) {
  for (const char *p = endpoints; p && *p;) {
    p += strspn(p, ", ");
    size_t n = strcspn(p, ", ");
    if (strncmp(p, "http://", 7) == 0)
      return tagc_errorf(TAGC_EINVAL,
                         "refusing to send the etcd password over plain http:// (%.*s): use "
                         "https:// endpoints with --etcd-user",
                         (int)n, p);
    p += n;
  }
  return TAGC_OK;
}

tagc_status tagc_etcd_config_credentials(tagc_etcd_config *cfg, const tagc_etcd_credentials *cred,
                                         char **password) {
  *password = NULL;
  cfg->ca_file = given(cred->ca_file);
  cfg->cert_file = given(cred->cert_file);
  cfg->key_file = given(cred->key_file);
  cfg->user = given(cred->user);
  cfg->password = NULL;
  if ((cfg->cert_file != NULL) != (cfg->key_file != NULL))
    return tagc_errorf(TAGC_EINVAL, "--etcd-cert and --etcd-key go together");
  if (!cfg->user)
    return TAGC_OK;
  TAGC_CHECK(refuse_clear_text(cfg->endpoints));
  if (given(cred->password_file)) {
    TAGC_CHECK(read_password_file(cred->password_file, password));
  } else {
    const char *env = getenv(TAGC_ETCD_PASSWORD_ENV);
    if (!given(env))
      return tagc_errorf(TAGC_EINVAL, "--etcd-user %s needs a password: set %s or "
                         "--etcd-password-file", cfg->user, TAGC_ETCD_PASSWORD_ENV);
    if (!(*password = strdup(env)))
      return tagc_errorf(TAGC_ENOMEM, "etcd password");
  }
  cfg->password = *password;
  return TAGC_OK;
}

/* A TLS file that cannot be read, named with its option, before libcurl reports it as a failed
 * handshake on every attempt. */
static tagc_status check_tls_files(const tagc_etcd_config *cfg) {
  const struct {
    const char *opt, *path;
  } files[] = {{"--etcd-ca", cfg->ca_file}, {"--etcd-cert", cfg->cert_file}, {"--etcd-key", cfg->key_file}};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
    if (files[i].path && access(files[i].path, R_OK) != 0)
      return tagc_errnof(errno == ENOENT ? TAGC_ENOTFOUND : TAGC_EINVAL, "%s %s", files[i].opt, files[i].path);
  return TAGC_OK;
}

tagc_status tagc_etcd_connect(const char *endpoints, const tagc_etcd_credentials *cred,
                              double deadline_s, tagc_etcd **out) {
  *out = NULL;
  tagc_etcd_config ec;
  tagc_etcd_config_init(&ec);
  ec.endpoints = endpoints;
  ec.deadline_s = deadline_s;
  if (ec.request_timeout_s > deadline_s)
    ec.request_timeout_s = deadline_s;
  char *password = NULL;
  tagc_status st = tagc_etcd_config_credentials(&ec, cred, &password);
  if (st == TAGC_OK)
    st = tagc_etcd_create(&ec, out); /* refuses TLS files with an http:// endpoint */
  if (st == TAGC_OK && (st = check_tls_files(&ec)) != TAGC_OK) {
    tagc_etcd_destroy(*out);
    *out = NULL;
  }
  if (password)
    memset(password, 0, strlen(password));
  free(password);
  return st;
}
