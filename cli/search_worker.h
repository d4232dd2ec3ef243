/* The batch worker behind `podsim search` (and any study that hands a child
 * many runs at once): `podsim search --batch-worker FILE` runs each job of
 * FILE, a `podsim run ...` command line, in a fork of itself, so podsim
 * starts once per batch instead of once per run, and writes one record per
 * job on standard output (driver/pool.h, ps_pool_fork_job); the study reads
 * them back with ps_pool_batch_results.
 *
 * Jobs of one share group (consecutive, the same group number) differ only
 * in keys that are read after partitioning (ps_search_post_partition_keys):
 * a fork of the worker builds, propagates and partitions the group's
 * program once and forks again for each job, which resumes from that
 * partition (driver.h, ps_driver_resume_next). If the shared stages fail,
 * each job of the group runs on its own, so that its error is its own.
 *
 * FILE (written by ps_search_batch_write):
 *   podsim-batch 1
 *   limit SECONDS                 (per job; 0: none)
 *   job INDEX GROUP NARGS         (then NARGS lines, one argument each, C-escaped)
 */
#ifndef PS_CLI_SEARCH_WORKER_H
#define PS_CLI_SEARCH_WORKER_H

#include <glib.h>

/* Keys no stage before the memory stage reads (the target's schedule,
 * async_collectives, fusion, collectives, cache: driver/target.c reads
 * them, and only the memory, lower and simulate stages use them).
 * NULL-terminated. */
extern const char *const ps_search_post_partition_keys[];

/* Appends one job to a batch file's text (start it with
 * ps_search_batch_begin). argv is NULL-terminated and starts with the
 * program (ignored: the worker is podsim) and "run". */
void ps_search_batch_begin (GString *file, double time_limit_s);
void ps_search_batch_add (GString *file, guint index, guint group, const char *const *argv);

/* `podsim search --batch-worker FILE`: the exit status. */
int ps_search_worker (const char *file);

#endif
