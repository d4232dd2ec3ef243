/* SPMD partitioning: turns a fully sharded module into the one program that
 * every device runs (GSPMD paper, section 4 and appendix A.2).
 *
 * Input: a module whose instructions carry shardings, as after propagation
 * (partitioner/propagate.h); an instruction without one is treated as
 * replicated. Output: a new module with the same computations structure
 * where every array has its per-device (local) shape, each sharded dim
 * rounded up to a multiple of its shard count and divided, and where the
 * collectives the shardings imply are explicit instructions: all-reduce,
 * all-gather, reduce-scatter, all-to-all, collective-permute, plus
 * partition-id driven dynamic-slice offsets. Collectives use global device
 * ids (use_global_device_ids=true and a channel_id), replica groups are
 * derived from the tile-assignment arrays.
 *
 * Padding of uneven shards holds unspecified values; the partitioner masks
 * it wherever it would change a result (reductions, contracting dims of
 * dots, windows of convolutions and reduce-windows).
 *
 * Operations without a dedicated handler (or cases a handler does not
 * cover) take the fallback: operands are resharded to replicated, the op
 * runs on full shapes, and the result is dynamic-sliced to its sharding.
 * The optional PsSpmdReport counts which opcodes used it.
 *
 * Ownership: ps_spmd_partition returns a new module (transfer full); the
 * input module and options are borrowed and not modified.
 */
#ifndef PS_PARTITIONER_SPMD_H
#define PS_PARTITIONER_SPMD_H

#include <glib.h>
#include "common/params.h"
#include <stdint.h>

#include "common/error.h"
#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

/* What the partitioner did; filled when PsSpmdOptions.report is set. */
typedef struct {
  int64_t n_fallbacks;          /* instructions partitioned by replicate-then-slice */
  /* opcode name (const char*, static) -> GINT_TO_POINTER (count) of
   * fallbacks; owned by the report, free with ps_spmd_report_clear(). */
  GHashTable *fallback_ops;
  int64_t n_collectives;        /* collective instructions emitted */
  int64_t n_cse_removed;        /* instructions CSE/DCE removed afterwards */
} PsSpmdReport;

typedef struct {
  /* Use all-gather to replicate a tiled dim (default TRUE). FALSE mimics
   * XLA's tests: dynamic-update-slice into zeros followed by all-reduce. */
  gboolean use_all_gather;
  /* Halo exchange of a spatially sharded convolution always on the input
   * (lhs), never on the kernel (default TRUE, as XLA's default). */
  gboolean conv_halo_exchange_always_on_lhs;
  /* Dots whose gathered operand exceeds this many bytes are partitioned
   * as a windowed einsum over collective-permutes; < 0 disables (default).
   * Applies when the cheapest plan reshards one operand by exactly an
   * all-gather of one free or contracting dim (split k ways): instead of
   * the all-gather, k local dots each on the chunk held now, the chunk
   * passed on around a ring of collective-permutes (the k devices holding
   * the chunks, in tile order), results dynamic-update-sliced into the
   * output (free dim) or summed (contracting dim). Unrolled: k dots, k - 1
   * collective-permutes (XLA emits a while loop). The size compared is the
   * gathered operand's per-device bytes. Likewise a dot whose split
   * contraction would end in a reduce-scatter, when its local partial
   * result exceeds the threshold: the partial sums of each output chunk
   * are passed around the ring and accumulated instead. See
   * doc/partitioner.md. */
  int64_t windowed_einsum_threshold_bytes;
  /* Windowed einsums of the all-gather kind send chunks both ways around
   * the ring (XLA's bidirectional_windowed_einsum): still k dots and k - 1
   * collective-permutes, but in k / 2 rounds of two concurrent transfers
   * (default FALSE; the reduce-scatter kind stays unidirectional). */
  gboolean windowed_einsum_bidirectional;
  /* Run partitioner/cse.h on the result (default TRUE), as XLA runs CSE
   * after partitioning: operands resharded once per use become one
   * collective. */
  gboolean cse;
  /* Optional, borrowed: receives statistics. */
  PsSpmdReport *report;
  /* Optional, borrowed: the decisions taken by comparing costs (which of a
   * dot's or convolution's candidate iteration shardings was cheapest), as
   * instruction name (char*, owned by the table: create it with
   * g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL)) ->
   * GINT_TO_POINTER (candidate + 1). For dots the value also carries the
   * windowed-einsum decision, which depends on sizes through
   * windowed_einsum_threshold_bytes: (candidate + 1) | (w << 4), w = 0 not
   * windowed, 1 lhs windowed, 2 rhs windowed, 3 reduce-scatter windowed
   * (partial sums passed around); a replayed dot is windowed
   * exactly when w says so (if its shapes still allow it), whatever the
   * threshold. With replay_choices FALSE the
   * partitioner records its decisions there; with TRUE it takes the
   * recorded decision for every instruction the table names instead of
   * comparing costs. shrink.h partitions a scaled copy of a module this way,
   * so that the copy is partitioned like the original. */
  GHashTable *choices;
  gboolean replay_choices;
} PsSpmdOptions;

void ps_spmd_options_init (PsSpmdOptions *opts);
/* The option of a run that sets windowed_einsum_threshold_bytes
 * ([options] windowed_einsum; -1: off; common/params.h). */
extern const PsParamSpec ps_spmd_param_windowed_einsum;

void ps_spmd_report_init (PsSpmdReport *report);
void ps_spmd_report_clear (PsSpmdReport *report);

/* Partitions `sharded` for `num_devices` devices (opts may be NULL for the
 * defaults). Returns NULL with a PS_ERROR error when a sharding does not fit
 * the device count or the module uses something that cannot be partitioned.
 * transfer full. */
PsModule *ps_spmd_partition (const PsModule *sharded, int64_t num_devices,
                             const PsSpmdOptions *opts, GError **error);

G_END_DECLS

#endif
