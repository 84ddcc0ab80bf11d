/* The option table of tagc-worker (worker/run_config.h). */
#include "run_config.h"

#include <stddef.h>

#include "cluster/etcd.h"
#include "data/data.h"

#define OFF(f) offsetof(tagc_train_config, f)

static const tagc_opt train_opts[] = {
    {"corpus", TAGC_OPT_STRING, OFF(corpus), TAGC_DEFAULT_CORPUS, 0, -1, NULL,
     "text file or directory to train on (*.dat and symlinks skipped)"},
    {"data", TAGC_OPT_STRING, OFF(data), "", 0, -1, NULL,
     "token shards to train on instead of --corpus: a file or a glob (quoted), e.g. "
     "'fineweb/fineweb_train_*.bin'; memory-mapped, read as one concatenation"},
    {"val-data", TAGC_OPT_STRING, OFF(val_data), "", 0, -1, NULL,
     "validation shards (a file or a glob), required with --data"},
    {"data-format", TAGC_OPT_CHOICE, OFF(data_format), "llmc", 0, -1, "llmc|nanogpt",
     "format of --data: llm.c shards (1024-byte header, uint16 tokens) or nanoGPT .bin "
     "(headerless uint16 tokens, needs --vocab)"},
    {"vocab", TAGC_OPT_INT, OFF(vocab), "0", 0, 65536, NULL,
     "vocabulary of --data (0 = from the data: GPT-2's 50257 for llm.c shards); the model pads "
     "it to a multiple of 128"},
    {"out", TAGC_OPT_STRING, OFF(out), "out", 0, -1, NULL,
     "output directory: metrics.jsonl, summary.json"},
    {"steps", TAGC_OPT_INT, OFF(steps), "300", 1, 1e9, NULL,
     "optimizer steps of the job: where the cosine learning-rate decay ends (a larger value "
     "over a finished --out trains on, with the decay stretched to it)"},
    {"batch", TAGC_OPT_INT, OFF(batch), "16", 1, 1 << 20, NULL, "global batch in sequences"},
    {"micro-batch", TAGC_OPT_INT, OFF(micro_batch), "0", 0, 1 << 20, NULL,
     "sequences per forward/backward (0 = whole local batch); same math for any value"},
    {"ctx", TAGC_OPT_INT, OFF(ctx), "64", 2, 4096, NULL,
     "context window in tokens (bytes of a text corpus)"},
    {"layers", TAGC_OPT_INT, OFF(layers), "2", 1, 64, NULL, "transformer blocks"},
    {"heads", TAGC_OPT_INT, OFF(heads), "4", 1, 256, NULL, "attention heads"},
    {"dim", TAGC_OPT_INT, OFF(dim), "64", 4, 16384, NULL, "model width (divisible by heads)"},
    {"lr", TAGC_OPT_DOUBLE, OFF(lr), "0.003", 0, 10, NULL, "peak learning rate"},
    {"min-lr-ratio", TAGC_OPT_DOUBLE, OFF(min_lr_ratio), "0.1", 0, 1, NULL,
     "final learning rate as a fraction of the peak (cosine decay)"},
    {"warmup", TAGC_OPT_INT, OFF(warmup), "20", 0, 1e9, NULL, "linear warmup steps"},
    {"weight-decay", TAGC_OPT_DOUBLE, OFF(weight_decay), "0.1", 0, 10, NULL,
     "AdamW decoupled weight decay (not on norms and biases)"},
    {"grad-clip", TAGC_OPT_DOUBLE, OFF(grad_clip), "1.0", 0, 1e9, NULL,
     "global gradient norm clip (0 = off)"},
    {"beta1", TAGC_OPT_DOUBLE, OFF(beta1), "0.9", 0, 0.999999, NULL, "AdamW beta1"},
    {"beta2", TAGC_OPT_DOUBLE, OFF(beta2), "0.95", 0, 0.999999, NULL, "AdamW beta2"},
    {"eps", TAGC_OPT_DOUBLE, OFF(eps), "1e-8", 1e-30, 1, NULL, "AdamW epsilon"},
    {"seed", TAGC_OPT_INT, OFF(seed), "1337", 0, 9.2e18, NULL, "seed of init and sampler"},
    {"eval-every", TAGC_OPT_INT, OFF(eval_every), "50", 0, 1e9, NULL,
     "validation every N steps (0 = only at the end)"},
    {"eval-windows", TAGC_OPT_INT, OFF(eval_windows), "64", 1, 1 << 20, NULL,
     "validation windows per evaluation"},
    {"threads", TAGC_OPT_INT, OFF(threads), "0", 0, 1024, NULL,
     "compute threads (BLAS and OpenMP; 0 = all cores)"},
    {"log", TAGC_OPT_STRING, OFF(log), "info", 0, -1, NULL,
     "log filter, e.g. info or warn,train=debug"},
    {"log-format", TAGC_OPT_CHOICE, OFF(log_format), "auto", 0, -1, "auto|text|json",
     "log lines as text or one JSON object each (auto: text when stderr is a terminal; "
     "tagctl run hands its children the format it resolved)"},
    {"compress", TAGC_OPT_STRING, OFF(compress), "auto", 0, -1, NULL,
     "gradient compression: auto|tagc|bf16|none, optionally with role=kind[:density[:rho]] rules "
     "(auto: each MLP/embedding segment's wire, fp32, bf16, int8 or the sketch, and each "
     "attention and norm segment's, fp32, bf16 or int8, from the measured link)"},
    {"compress-warmup", TAGC_OPT_INT, OFF(compress_warmup), "-1", -1, 1e9, NULL,
     "steps at the start of training whose tagc segments are sent dense (bf16) before the sketch "
     "starts (-1 = the larger of --warmup and a fifth of --steps; 0 = sketch from step 1)"},
    {"rank", TAGC_OPT_INT, OFF(rank), "0", 0, 4095, NULL, "rank of this worker"},
    {"world", TAGC_OPT_INT, OFF(world), "1", 1, 4096, NULL, "number of workers"},
    {"rendezvous", TAGC_OPT_STRING, OFF(rendezvous), "", 0, -1, NULL,
     "directory shared by the workers for the static rendezvous (world > 1)"},
    {"ckpt-every", TAGC_OPT_INT, OFF(ckpt_every), "100", 0, 1e9, NULL,
     "save a checkpoint every N steps and at the end (0 = never)"},
    {"ckpt-every-s", TAGC_OPT_DOUBLE, OFF(ckpt_every_s), "0", 0, 1e9, NULL,
     "also save a checkpoint once this many seconds have passed since the last one (wall "
     "clock, agreed by all workers at a step; 0 = off)"},
    {"ckpt-dir", TAGC_OPT_STRING, OFF(ckpt_dir), "", 0, -1, NULL,
     "checkpoint root (default OUT/ckpt); shared by all workers"},
    {"ckpt-keep-last", TAGC_OPT_INT, OFF(ckpt_keep_last), "3", 0, 1e6, NULL,
     "keep the newest N checkpoints (0 = keep all) ..."},
    {"ckpt-keep-every", TAGC_OPT_INT, OFF(ckpt_keep_every), "0", 0, 1e9, NULL,
     "... and every checkpoint whose step is a multiple of N (0 = none)"},
    {"on-ckpt-failure", TAGC_OPT_CHOICE, OFF(on_ckpt_failure), "stop", 0, -1, "stop|warn",
     "when checkpoint saves fail (a full disk, a read-only folder): stop, once "
     "--ckpt-failures-max saves in a row failed, the whole job at one step (exit 4, naming "
     "the newest valid checkpoint), or warn: an error line per failed save, training on"},
    {"ckpt-failures-max", TAGC_OPT_INT, OFF(ckpt_failures_max), "3", 1, 1e6, NULL,
     "--on-ckpt-failure stop: failed saves in a row the job trains on with"},
    {"resume", TAGC_OPT_BOOL, OFF(resume), "true", 0, -1, NULL,
     "continue from the newest valid checkpoint in the checkpoint root; --no-resume: the first "
     "generation starts at step 0 (later ones still resume from their plan's checkpoint)"},
    {"allow-restart-from-scratch", TAGC_OPT_BOOL, OFF(allow_restart_from_scratch), "false", 0, -1,
     NULL, "when checkpoints exist but none is valid, train from step 0 (saying so in an error "
     "line) instead of refusing to start"},
    {"stop-at", TAGC_OPT_INT, OFF(stop_at), "0", 0, 1e9, NULL,
     "stop after this step as if interrupted, without changing the schedule (0 = run to --steps)"},
    {"check-rebuild", TAGC_OPT_BOOL, OFF(check_rebuild), "false", 0, -1, NULL,
     "test hook: after a rebuild from the in-memory copies, compare every rank's shards bit for "
     "bit with the checkpoint of the same step when there is one (a difference fails the run)"},
    {"check-feedback", TAGC_OPT_BOOL, OFF(check_feedback), "false", 0, -1, NULL,
     "test hook: measure error-feedback mass conservation each step (metrics: feedback_error)"},
    {"fault", TAGC_OPT_STRING, OFF(fault), "", 0, -1, NULL,
     "arm fault points: crash|exit|oom|hang|drop|nan@STEP, nan@FIRST-LAST, slow=SECONDS, "
     "ckpt:STAGE (also TAGC_FAULT)"},
    {"mirror-every", TAGC_OPT_INT, OFF(mirror_every), "-1", -2, 1e9, NULL,
     "every N steps each worker also sends its whole training state to the next rank, so that "
     "after a failure or a leave the survivors rebuild the last such step from memory and "
     "joiners heal from live peers (0 = off: recovery from the disk checkpoint; -1 = auto in "
     "elastic mode: every step while a copy costs at most --mirror-budget of a step, else "
     "less often; 0 in a static run, which has no recovery; -2 = auto in a static run too, to "
     "measure the copies' cost)"},
    {"failure-domain", TAGC_OPT_STRING, OFF(failure_domain), "", 0, -1, NULL,
     "what this worker fails with (a node or pod name; default $TAGC_FAILURE_DOMAIN, else "
     "$NODE_NAME, else the host name): in-memory copies go to a rank of another domain when "
     "the ranks' order allows"},
    {"mirror-copies", TAGC_OPT_INT, OFF(mirror_copies), "1", 1, 2, NULL,
     "copies of each worker's state on other ranks (at most the world size - 1): 1 survives "
     "any one lost worker and pairs that do not hold each other's copy, 2 any two at once, at "
     "twice the copies' bytes and memory"},
    {"mirror-budget", TAGC_OPT_DOUBLE, OFF(mirror_budget), "0.05", 0.001, 100, NULL,
     "--mirror-every -1: the largest fraction of the step time the copies may cost (the period "
     "is chosen from their measured cost, the same on every rank)"},
    {"max-nonfinite-skips", TAGC_OPT_INT, OFF(max_nonfinite_skips), "3", 1, 1e6, NULL,
     "after this many consecutive steps skipped for a non-finite gradient, roll back to the "
     "newest valid checkpoint (docs/operations.md)"},
    {"straggler-ratio", TAGC_OPT_DOUBLE, OFF(straggler_ratio), "1.5", 1.01, 1000, NULL,
     "a rank whose compute time per step (waits on peers excluded) has a median over "
     "--straggler-window above this many times the ranks' median is warned about as a "
     "straggler, by rank and worker id (docs/operations.md, Stragglers)"},
    {"straggler-window", TAGC_OPT_DOUBLE, OFF(straggler_window), "10", 0.1, 86400, NULL,
     "seconds of the straggler medians; a rank is named once slow for half of it more, and "
     "recovered once below half the excess (1.25x) for as long"},
    {"exclude-straggler", TAGC_OPT_BOOL, OFF(exclude_straggler), "false", 0, -1, NULL,
     "elastic mode: report a straggler to the coordinator, which plans a generation without "
     "it (failure kind 'straggler'); it asks back in after --straggler-rejoin"},
    {"straggler-rejoin", TAGC_OPT_DOUBLE, OFF(straggler_rejoin), "300", 0, 86400, NULL,
     "--exclude-straggler: seconds an excluded straggler waits before asking back in"},
    {"etcd", TAGC_OPT_STRING, OFF(etcd), "", 0, -1, NULL,
     "etcd endpoints (comma-separated URLs): elastic mode, membership and rendezvous through etcd"},
    {"job", TAGC_OPT_STRING, OFF(job), "default", 0, -1, NULL, "job name (etcd key prefix)"},
    {"worker-id", TAGC_OPT_STRING, OFF(worker_id), "", 0, -1, NULL,
     "this worker's id in etcd (default HOSTNAME-PID)"},
    {"lease-ttl", TAGC_OPT_DOUBLE, OFF(lease_ttl), "3", 1, 600, NULL,
     "seconds of the worker's etcd lease: how soon a vanished worker is noticed"},
    TAGC_ETCD_CREDENTIAL_OPTS(OFF),
    {"etcd-patience", TAGC_OPT_DOUBLE, OFF(etcd_patience), "120", 1, 86400, NULL,
     "seconds a worker waiting for a plan waits for an etcd out of reach before it gives up "
     "(exit 1, rank 0 writes summary.json); training itself goes on without etcd"},
    {"leave-timeout", TAGC_OPT_DOUBLE, OFF(leave_timeout), "5", 0, 3600, NULL,
     "SIGTERM/SIGINT: seconds to keep training until the coordinator's generation without this "
     "worker exists (the peers are then superseded, not failed); after it, stop anyway"},
    {"leave-ckpt-wait", TAGC_OPT_DOUBLE, OFF(leave_ckpt_wait), "0", 0, 86400, NULL,
     "SIGTERM/SIGINT: first keep training up to this many seconds until the next periodic "
     "checkpoint is committed (0 = leave at once)"},
    {"leave-exit-code", TAGC_OPT_INT, OFF(leave_exit_code), "0", 0, 255, NULL,
     "exit status after leaving the job on SIGTERM/SIGINT before it is done (0: success; "
     "143 on Kubernetes, so that an evicted pod counts as failed and is replaced, not as a "
     "completed index)"},
    {"init-from", TAGC_OPT_STRING, OFF(init_from), "", 0, -1, NULL,
     "start from these weights instead of the seed's (when there is no checkpoint to resume): "
     "a Hugging Face GPT-2 folder or safetensors file, an llm.c model file or a tagc checkpoint, "
     "of the run's exact shape (--vocab, --ctx, --layers, --heads, --dim)"},
    {"dump-params", TAGC_OPT_STRING, OFF(dump_params), "", 0, -1, NULL,
     "at the end, rank 0 writes the full fp32 parameter arena to this file (tests, tools)"},
    {"gather", TAGC_OPT_CHOICE, OFF(gather), "auto", 0, -1, "auto|fp32|bf16|int8",
     "parameter all-gather precision (bf16 = mixed-precision FSDP, int8 = blockwise int8 with one "
     "scale per 256 elements; the master shards stay fp32; auto = bf16 when --compress "
     "compresses any role, else fp32; under --compress auto fp32, bf16 or int8 with the link)"},
    {"link-rate", TAGC_OPT_DOUBLE, OFF(link_rate), "0", 0, 1e12, NULL,
     "bytes/s the --compress/--gather auto choices assume for the slowest link (0 = measure it; "
     "set it when the link is known and measurements are noisy)"},
    {"reshard-after-forward", TAGC_OPT_CHOICE, OFF(reshard_after_forward), "auto", 0, -1,
     "auto|true|false",
     "true: free a unit's gathered parameters after forward and gather again for backward "
     "(ZeRO-3); false: keep them for the whole step (one gather per unit and step, the full "
     "parameters held); auto: true, except that --compress auto keeps them when every unit "
     "fits --max-gather-mem on every rank"},
    {"max-gather-mem", TAGC_OPT_DOUBLE, OFF(max_gather_mem), "0", 0, 1e9, NULL,
     "MiB of gathered parameters --reshard-after-forward auto may hold for a whole step "
     "(0 = 1/8 of the GPU's memory, or of the host's RAM on the CPU)"},
    {"device", TAGC_OPT_STRING, OFF(device), "cpu", 0, -1, NULL,
     "where the model computes: cpu, cuda (device 0) or cuda:N; cuda uses NCCL between workers"},
    {"compute", TAGC_OPT_CHOICE, OFF(compute), "fp32", 0, -1, "fp32|bf16",
     "precision of the matrix products on cuda (bf16 operands, fp32 accumulation and master "
     "weights); the CPU computes in fp32"},
    {"host", TAGC_OPT_STRING, OFF(host), "127.0.0.1", 0, -1, NULL,
     "address this worker listens on and advertises to its peers"},
    {"op-timeout", TAGC_OPT_DOUBLE, OFF(op_timeout), "60", 0.1, 86400, NULL,
     "base seconds a collective may take before the worker treats it as failed; large "
     "collectives get 3x their transfer time at the measured link rate on top"},
    {"metrics-addr", TAGC_OPT_STRING, OFF(metrics_addr), "", 0, -1, NULL,
     "serve /metrics (Prometheus) and /healthz on HOST:PORT (port 0 = any free one; "
     "empty = off)"},
};

const tagc_opt_program tagc_train_program = {
    "tagc-worker", "[options]",
    "Trains a GPT-style transformer on a byte-level text corpus or on token shards.", train_opts,
    sizeof train_opts / sizeof train_opts[0]};

const tagc_help_group tagc_train_help_groups[] = {
    {"Data", "corpus data val-data data-format vocab"},
    {"Model", "layers heads dim ctx init-from"},
    {"Optimisation", "steps batch micro-batch lr min-lr-ratio warmup weight-decay grad-clip beta1 "
                     "beta2 eps seed"},
    {"Output, evaluation and logging", "out eval-every eval-windows log log-format metrics-addr dump-params"},
    {"Checkpoints and resuming", "ckpt-every ckpt-every-s ckpt-dir ckpt-keep-last "
                                 "ckpt-keep-every on-ckpt-failure ckpt-failures-max resume "
                                 "allow-restart-from-scratch stop-at"},
    {"In-memory copies (zero steps lost)", "mirror-every mirror-copies mirror-budget failure-domain"},
    {"Device", "device compute threads"},
    {"Compression and communication", "compress compress-warmup gather link-rate "
                                      "reshard-after-forward max-gather-mem op-timeout host"},
    {"Elastic mode (etcd)", "etcd job lease-ttl etcd-ca etcd-cert etcd-key etcd-user "
                            "etcd-password-file etcd-patience leave-timeout leave-ckpt-wait leave-exit-code"},
    {"Failures and fault injection", "max-nonfinite-skips fault check-feedback check-rebuild"},
    {"Stragglers", "straggler-ratio straggler-window exclude-straggler straggler-rejoin"},
    {NULL, "rank world rendezvous worker-id"},
};
const size_t tagc_train_n_help_groups =
    sizeof tagc_train_help_groups / sizeof tagc_train_help_groups[0];
