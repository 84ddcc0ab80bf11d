/* libFuzzer target over the etcd reply decoders. The first byte picks the HTTP status and the
 * decoder; the rest is the reply body. Any input must give a status, never a crash or leak.
 * Built with -DTAGC_FUZZ_REPLAY it is a plain program that runs the inputs named on its
 * command line (the seed corpus) through the same function. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cluster/etcd_decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  long http = (data[0] & 0x80) ? 503 : 200;
  json_t *reply = NULL;
  int retryable;
  if (tagc_etcd_decode_reply(http, (const char *)data + 1, size - 1, &reply, &retryable) != TAGC_OK)
    return 0;
  tagc_etcd_range_result range;
  tagc_etcd_txn_result txn;
  tagc_etcd_watch_reply watch;
  int64_t a, b, c;
  switch (data[0] & 3) {
  case 0:
    if (tagc_etcd_decode_range(reply, &range) == TAGC_OK)
      tagc_etcd_range_result_free(&range);
    break;
  case 1:
    if (tagc_etcd_decode_txn(reply, &txn) == TAGC_OK)
      tagc_etcd_txn_result_free(&txn);
    break;
  case 2:
    if (tagc_etcd_decode_watch(reply, &watch) == TAGC_OK)
      tagc_etcd_watch_reply_free(&watch);
    break;
  default:
    tagc_etcd_decode_lease(reply, &a, &b, &c);
    break;
  }
  json_decref(reply);
  return 0;
}

#ifdef TAGC_FUZZ_REPLAY
int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    if (!f) {
      perror(argv[i]);
      return 1;
    }
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
  }
  printf("%d inputs decoded\n", argc - 1);
  return 0;
}
#endif
