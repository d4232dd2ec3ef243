/* Per-opcode rules of the propagation pass: what sharding an instruction
 * gets from its operands (forward) and what an operand gets from one user
 * (backward). The rules and their levels of aggressiveness follow XLA's
 * ShardingPropagation so that results match its tests. Gather and scatter
 * live in propagate_gather.c. */
#include "config.h"

#include <string.h>

#include "common/ndindex.h"
#include "partitioner/propagate/propagate_private.h"

gboolean
pp_is_custom_call (const PsInstr *i, const char *target)
{
  return i->opcode == PS_OP_CUSTOM_CALL && i->custom_call_target
         && strcmp (i->custom_call_target, target) == 0;
}

gboolean
pp_thread_included (const PpCtx *c, const char *thread)
{
  if (!c->threads)
    return TRUE;
  if (!thread)
    thread = "main";
  for (int k = 0; c->threads[k]; k++)
    if (strcmp (c->threads[k], thread) == 0)
      return TRUE;
  return FALSE;
}

/* An asynchronous call whose callee runs on a thread this run skips. */
static gboolean
async_outside (const PpCtx *c, const PsInstr *i)
{
  if (i->opcode != PS_OP_CALL_START && i->opcode != PS_OP_CALL_DONE)
    return FALSE;
  const char *t = ps_instr_get_raw_attr (i, "async_execution_thread");
  if (!t && i->opcode == PS_OP_CALL_DONE && i->n_operands > 0)
    t = ps_instr_get_raw_attr (i->operands[0], "async_execution_thread");
  g_autofree char *name = t ? g_strdup (t) : NULL;
  if (name && name[0] == '"')
    {
      memmove (name, name + 1, strlen (name));
      char *q = strchr (name, '"');
      if (q)
        *q = 0;
    }
  return !pp_thread_included (c, name);
}

gboolean
pp_is_elementwise (const PsInstr *i)
{
  if (ps_opcode_is_elementwise (i->opcode))
    return TRUE;
  if (i->opcode == PS_OP_RNG)
    return TRUE;
  if (i->opcode == PS_OP_BITCAST_CONVERT && i->n_operands == 1
      && ps_etype_size_bytes (i->operands[0]->shape->etype) == ps_etype_size_bytes (i->shape->etype))
    return TRUE;
  return FALSE;
}

static gboolean
has_side_effect (const PsInstr *i)
{
  switch (i->opcode)
    {
    case PS_OP_SEND: case PS_OP_SEND_DONE: case PS_OP_RECV: case PS_OP_RECV_DONE:
    case PS_OP_RNG: case PS_OP_INFEED: case PS_OP_OUTFEED:
      return TRUE;
    case PS_OP_CUSTOM_CALL:
      return i->custom_call_has_side_effect;
    default:
      return FALSE;
    }
}

int
pp_non_root_users (const PsInstr *i)
{
  int n = 0;
  for (guint k = 0; k < i->users->len; k++)
    if (g_ptr_array_index (i->users, k) != i->parent->root)
      n++;
  return n;
}


static gboolean
is_passthrough_custom (const PsInstr *i)
{
  if (pp_is_custom_call (i, "Sharding") || pp_is_custom_call (i, "X64Combine")
      || pp_is_custom_call (i, "LayoutConstraint"))
    return TRUE;
  if (i->opcode != PS_OP_CUSTOM_CALL || i->n_operands != 1 || !ps_shape_is_array (i->shape)
      || !ps_shape_is_array (i->operands[0]->shape)
      || i->operands[0]->shape->rank != i->shape->rank)
    return FALSE;
  static const char *const names[] = { "ResizeNearest", "ResizeBilinear", "ResizeNearestGrad",
                                       "ResizeBilinearGrad", "Cholesky", "MoveToDevice",
                                       "MoveToHost", NULL };
  for (int k = 0; names[k]; k++)
    if (pp_is_custom_call (i, names[k]))
      return TRUE;
  return FALSE;
}

static gboolean
is_barrier (const PsInstr *i)
{
  return pp_is_custom_call (i, "ShardBarrierFrom") || pp_is_custom_call (i, "ShardBarrierTo");
}

gboolean
pp_support_spatial (PpCtx *c, const PsInstr *i, gboolean to_output, gboolean to_params)
{
  gboolean is_entry_root = c->m->entry && c->m->entry->root == i;
  if (i->parent->root == i && !g_hash_table_contains (c->comp_map, i->parent)
      && !(is_entry_root && to_output))
    return FALSE;
  if (pp_is_elementwise (i) && (i->opcode != PS_OP_RNG || c->is_spmd))
    return TRUE;
  switch (i->opcode)
    {
    case PS_OP_BROADCAST: case PS_OP_CONCATENATE: case PS_OP_CONDITIONAL:
    case PS_OP_CONSTANT: case PS_OP_CONVOLUTION: case PS_OP_OPTIMIZATION_BARRIER:
    case PS_OP_DOT: case PS_OP_RAGGED_DOT: case PS_OP_DYNAMIC_SLICE: case PS_OP_DYNAMIC_UPDATE_SLICE:
    case PS_OP_GATHER: case PS_OP_GET_TUPLE_ELEMENT: case PS_OP_INFEED: case PS_OP_IOTA:
    case PS_OP_PAD: case PS_OP_REDUCE_WINDOW: case PS_OP_RESHAPE: case PS_OP_SCATTER:
    case PS_OP_SELECT_AND_SCATTER: case PS_OP_SLICE: case PS_OP_SORT: case PS_OP_TRANSPOSE:
    case PS_OP_TUPLE: case PS_OP_WHILE: case PS_OP_REDUCE: case PS_OP_RNG_BIT_GENERATOR:
    case PS_OP_ALL_REDUCE: case PS_OP_REDUCE_SCATTER:
    case PS_OP_BATCH_NORM_TRAINING: case PS_OP_BATCH_NORM_INFERENCE: case PS_OP_BATCH_NORM_GRAD:
      return TRUE;
    case PS_OP_PARAMETER:
      return to_params || g_hash_table_contains (c->comp_map, i->parent);
    case PS_OP_REVERSE:
      return c->is_spmd;
    case PS_OP_CUSTOM_CALL:
      if (!c->is_spmd)
        return FALSE;
      return is_barrier (i) || is_passthrough_custom (i);
    default:
      return FALSE;
    }
}

gboolean
pp_can_propagate_at (const PsInstr *i, int aggr)
{
  if (pp_is_elementwise (i) || pp_is_custom_call (i, "Sharding"))
    return TRUE;
  switch (i->opcode)
    {
    case PS_OP_CALL: case PS_OP_FUSION: case PS_OP_CONCATENATE: case PS_OP_COPY: case PS_OP_DYNAMIC_SLICE:
    case PS_OP_DYNAMIC_UPDATE_SLICE: case PS_OP_GET_TUPLE_ELEMENT:
    case PS_OP_OPTIMIZATION_BARRIER: case PS_OP_RESHAPE: case PS_OP_TUPLE:
    case PS_OP_TRANSPOSE: case PS_OP_WHILE:
      return TRUE;
    case PS_OP_BROADCAST:
      return aggr >= 2;
    default:
      return aggr >= 1;
    }
}


/* pp_maybe_improve with a borrowed sharding: copied only when it may
 * improve i (a 2048-device copy is 16 KiB). */
static gboolean
maybe_improve_from (const PsSharding *s, PsInstr *i, gboolean may_combine, gboolean aggressive)
{
  if (s && i->sharding && ps_sharding_equal_layout (s, i->sharding))
    return FALSE;
  return pp_maybe_improve (ps_sharding_share (s), i, may_combine, aggressive);
}


static PsSharding *
tuple_of (const PsShape *shape, const PsSharding *s)
{
  return pp_single_tuple (shape, s);
}

static const PsInstr *
pick_representative (const PsInstr *i)
{
  switch (i->opcode)
    {
    case PS_OP_MAP: case PS_OP_PAD: case PS_OP_POWER: case PS_OP_OPTIMIZATION_BARRIER:
    case PS_OP_REVERSE: case PS_OP_SLICE: case PS_OP_SHIFT_LEFT:
    case PS_OP_SHIFT_RIGHT_ARITHMETIC: case PS_OP_SHIFT_RIGHT_LOGICAL:
      return i->operands[0]->sharding ? i->operands[0] : NULL;
    case PS_OP_CUSTOM_CALL:
      return is_passthrough_custom (i) && i->n_operands > 0 ? i->operands[0] : NULL;
    case PS_OP_BROADCAST: case PS_OP_CALL: case PS_OP_FUSION: case PS_OP_CONDITIONAL: case PS_OP_CONSTANT:
    case PS_OP_CONVOLUTION: case PS_OP_DOT: case PS_OP_RAGGED_DOT: case PS_OP_DYNAMIC_SLICE:
    case PS_OP_DYNAMIC_UPDATE_SLICE: case PS_OP_GATHER: case PS_OP_GET_TUPLE_ELEMENT:
    case PS_OP_INFEED: case PS_OP_IOTA: case PS_OP_OUTFEED: case PS_OP_PARAMETER:
    case PS_OP_REDUCE: case PS_OP_REDUCE_WINDOW: case PS_OP_RESHAPE: case PS_OP_SCATTER:
    case PS_OP_SELECT_AND_SCATTER: case PS_OP_TRANSPOSE: case PS_OP_TUPLE:
    case PS_OP_AFTER_ALL: case PS_OP_BITCAST: case PS_OP_RNG: case PS_OP_RNG_BIT_GENERATOR:
    case PS_OP_FFT: case PS_OP_DOMAIN: case PS_OP_PARTITION_ID: case PS_OP_REPLICA_ID:
    case PS_OP_SEND: case PS_OP_SEND_DONE: case PS_OP_RECV: case PS_OP_RECV_DONE:
    case PS_OP_TRIANGULAR_SOLVE: case PS_OP_CHOLESKY: case PS_OP_CALL_START:
    case PS_OP_CALL_DONE: case PS_OP_DYNAMIC_RESHAPE:
      return NULL;
    default:
      {
        const PsInstr *best = NULL;
        for (int k = 0; k < i->n_operands; k++)
          {
            const PsInstr *op = i->operands[k];
            if (op->sharding && (!best || pp_is_more_specific (op->sharding, best->sharding)))
              best = op;
          }
        return best;
      }
    }
}

static gboolean
spatial (const PsInstr *i)
{
  return i && i->sharding && pp_is_spatially_partitioned (i->sharding);
}

/* A ragged-dot whose dims read (and fit PpDotDims); else nothing
 * propagates through it. */
static gboolean
ragged_dims_ok (const PsInstr *i)
{
  int64_t lrag, rgrp;
  return i->n_operands == 3 && ps_instr_ragged_dims (i, &lrag, &rgrp) != PS_RAGGED_NONE
         && i->operands[0]->shape->rank <= PP_MAX_DIMS && i->operands[1]->shape->rank <= PP_MAX_DIMS
         && i->shape->rank <= PP_MAX_DIMS;
}

/* ---- dot ---------------------------------------------------------------- */

/* A dot's dims; also a ragged-dot's (ir.h PsRaggedMode), by the op
 * sharding rule XLA's Shardy partitioner gives ragged-dot
 * (xla/service/spmd/shardy/test/mhlo_extensions_test.mlir): batch, free
 * and contracting dims propagate as a dot's, but the lhs ragged dim and
 * the group dim "need replication" when the ragged dim is a free one (the
 * rhs group dim and the ragged lhs dim with its result dim) or a
 * contracting one (the ragged pair and the result's leading group dim);
 * a ragged batch dim is an ordinary batch dim. They go to d->rep, so
 * nothing moves through them. XLA's GSPMD sharding propagation has no
 * rule for ragged-dot (it only lists it in PickRepresentativeOperand,
 * xla/service/sharding_propagation.cc); the partitioner's handler keeps
 * the same dims whole (spmd_dot.c). */
void
pp_dot_dims_from_dot (const PsInstr *dot, PpDotDims *d)
{
  memset (d, 0, sizeof *d);
  const PsDotDims *dn = &dot->dot;
  int lr = dot->operands[0]->shape->rank, rr = dot->operands[1]->shape->rank;
  d->lhs_rank = lr;
  d->rhs_rank = rr;
  d->out_rank = dot->shape->rank;
  int64_t lrag = -1, rgrp = -1;
  PsRaggedMode mode = ps_instr_ragged_dims (dot, &lrag, &rgrp);
  int o0 = 0;
  if (mode == PS_RAGGED_CONTRACTING)
    {
      o0 = 1;
      d->rep[2][d->nrep[2]++] = 0;
    }
  if (mode == PS_RAGGED_NON_CONTRACTING && rgrp >= 0)
    d->rep[1][d->nrep[1]++] = rgrp;
  for (int k = 0; k < dn->lhs_batch.n && k < dn->rhs_batch.n; k++)
    d->batch[d->nb++] = (PpDimNums) { dn->lhs_batch.v[k], dn->rhs_batch.v[k], o0 + k };
  for (int k = 0; k < dn->lhs_contracting.n && k < dn->rhs_contracting.n; k++)
    if (mode == PS_RAGGED_CONTRACTING && dn->lhs_contracting.v[k] == lrag)
      {
        d->rep[0][d->nrep[0]++] = lrag;
        d->rep[1][d->nrep[1]++] = dn->rhs_contracting.v[k];
      }
    else
      d->contracting[d->nc++] = (PpDimNums) { dn->lhs_contracting.v[k], dn->rhs_contracting.v[k], -1 };
  int out = o0 + d->nb;
  for (int k = 0; k < lr; k++)
    if (!ps_ints_contains (&dn->lhs_batch, k) && !ps_ints_contains (&dn->lhs_contracting, k))
      {
        if (mode == PS_RAGGED_NON_CONTRACTING && k == lrag)
          {
            d->rep[0][d->nrep[0]++] = k;
            d->rep[2][d->nrep[2]++] = out++;
          }
        else
          d->lhs_nc[d->nln++] = (PpDimNums) { k, -1, out++ };
      }
  for (int k = 0; k < rr; k++)
    if (!ps_ints_contains (&dn->rhs_batch, k) && !ps_ints_contains (&dn->rhs_contracting, k)
        && !(mode == PS_RAGGED_NON_CONTRACTING && k == rgrp))
      d->rhs_nc[d->nrn++] = (PpDimNums) { -1, k, out++ };
}

static int64_t
or1 (int64_t v)
{
  return v <= 0 ? 1 : v;
}

void
pp_dot_dims_from_conv (const PsInstr *conv, PpDotDims *d)
{
  memset (d, 0, sizeof *d);
  const PsConvDims *cd = &conv->conv;
  d->lhs_rank = conv->operands[0]->shape->rank;
  d->rhs_rank = conv->operands[1]->shape->rank;
  d->out_rank = conv->shape->rank;
  d->lhs_nc[d->nln++] = (PpDimNums) { cd->in_batch, -1, cd->out_batch };
  d->rhs_nc[d->nrn++] = (PpDimNums) { -1, cd->k_out_feature, cd->out_feature };
  d->contracting[d->nc++] = (PpDimNums) { cd->in_feature, cd->k_in_feature, -1 };
  for (int k = 0; k < cd->n_spatial; k++)
    {
      int64_t lhs = cd->in_spatial[k], rhs = cd->k_spatial[k], out = cd->out_spatial[k];
      int64_t ls = conv->operands[0]->shape->dims[lhs];
      int64_t rs = conv->operands[1]->shape->dims[rhs];
      PsWindowDim w = { 1, 1, 0, 0, 1, 1, FALSE };
      if (k < conv->window.n)
        w = conv->window.dims[k];
      int64_t size = or1 (w.size), stride = or1 (w.stride), bd = or1 (w.base_dilation),
              wd = or1 (w.window_dilation);
      PpDimNums dn = { lhs, rhs, out };
      if (ls == size && ls == bd
          && ((MAX (1, ls - 1) == stride && wd == 1) || (MAX (1, ls - 1) == wd && stride == 1))
          && w.pad_hi == 0 && w.pad_lo == 0 && !w.reversal)
        d->batch[d->nb++] = dn;
      else if (ls == size && bd == 1 && wd == 1 && w.pad_hi == 0 && w.pad_lo == 0 && !w.reversal)
        d->contracting[d->nc++] = dn;
      else if (stride == 1 && wd == 1 && bd == 1)
        {
          if (rs == 1 && size == 1 && w.pad_hi == 0 && w.pad_lo == 0 && !w.reversal)
            d->lhs_nc[d->nln++] = dn;
          else if (ls == 1 && size == rs && w.pad_hi == rs - 1 && w.pad_lo == rs - 1 && w.reversal)
            d->rhs_nc[d->nrn++] = dn;
          else
            d->spatial[d->ns++] = dn;
        }
      else
        d->spatial[d->ns++] = dn;
    }
}

static int64_t
pick (const PpDimNums *n, int which)
{
  return which == 0 ? n->lhs : n->rhs;
}

static PsSharding *
dot_from_operand (const PsInstr *i, const PpDotDims *d, int idx)
{
  const PsInstr *op = i->operands[idx];
  const PsSharding *s = op->sharding;
  if (pp_is_tile_maximal (s) || pp_is_manual (s))
    return ps_sharding_share (s);
  int64_t contr[PP_MAX_DIMS * 2];
  int nc = 0;
  for (int k = 0; k < d->nc; k++)
    contr[nc++] = pick (&d->contracting[k], idx);
  const PpDimNums *other = idx == 0 ? d->rhs_nc : d->lhs_nc;
  int no = idx == 0 ? d->nrn : d->nln;
  for (int k = 0; k < no; k++)
    if (pick (&other[k], idx) >= 0)
      contr[nc++] = pick (&other[k], idx);
  for (int k = 0; k < d->nrep[idx]; k++)
    contr[nc++] = d->rep[idx][k];
  PsSharding *rep = pp_partially_replicate_on_dims (s, nc, contr);
  int64_t out_to_op[PP_MAX_DIMS], op_to_out[PP_MAX_DIMS];
  for (int k = 0; k < d->out_rank; k++)
    out_to_op[k] = -1;
  for (int k = 0; k < op->shape->rank; k++)
    op_to_out[k] = -1;
  for (int k = 0; k < d->nb; k++)
    {
      out_to_op[d->batch[k].out] = pick (&d->batch[k], idx);
      op_to_out[pick (&d->batch[k], idx)] = d->batch[k].out;
    }
  const PpDimNums *mine = idx == 0 ? d->lhs_nc : d->rhs_nc;
  int nm = idx == 0 ? d->nln : d->nrn;
  for (int k = 0; k < nm; k++)
    {
      out_to_op[mine[k].out] = pick (&mine[k], idx);
      op_to_out[pick (&mine[k], idx)] = mine[k].out;
    }
  PsSharding *r = pp_transpose_collapsed (rep, op->shape->rank, op_to_out, d->out_rank, out_to_op);
  ps_sharding_free (rep);
  return r;
}

static PsSharding *lookahead_user_sharding (PpCtx *c, PsInstr *i);

/* ---- memo of dot derivations ---------------------------------------------- */

/* One remembered derivation: its sharding inputs (NULL allowed), the
 * may_combine flag and the result (NULL allowed). The dims, shapes and
 * operand index are fixed by the key (instruction, direction, operand).
 * The stored shardings' device arrays point into the memo's table of
 * distinct arrays: a 64-layer model has thousands of entries but only a
 * handful of distinct 16 KiB arrays. */
typedef struct {
  PsSharding *in[2];
  gboolean mc;
  PsSharding *out;
} DotMemo;

struct PpDotMemo {
  GHashTable *entries;  /* gint64 key -> DotMemo* */
  GHashTable *arrays;   /* DevArray* set, holds one count of each array */
};

/* An array of the memo with its count (PsSharding.devices_ref): the memo's
 * shardings and the copies a hit hands out (ps_sharding_share) hold it
 * too, so a hit copies no ids and an array outlives the memo while a
 * sharding still reads it. */
typedef struct {
  int64_t n;
  int64_t *v;
  int *ref;
} DevArray;

static guint
dev_array_hash (gconstpointer p)
{
  const DevArray *a = p;
  guint64 h = 1469598103934665603ull ^ (guint64) a->n;
  for (int64_t k = 0; k < a->n; k++)
    h = (h ^ (guint64) a->v[k]) * 1099511628211ull;
  return (guint) (h ^ (h >> 32));
}

static gboolean
dev_array_equal (gconstpointer pa, gconstpointer pb)
{
  const DevArray *a = pa, *b = pb;
  return a->n == b->n && memcmp (a->v, b->v, sizeof (int64_t) * a->n) == 0;
}

static void
dev_array_free (gpointer p)
{
  DevArray *a = p;
  if (g_atomic_int_dec_and_test (a->ref))
    {
      g_free (a->v);
      g_free (a->ref);
    }
  g_free (a);
}

/* Frees s; the memo's arrays it held lose one count. */
static void
memo_sharding_free (PsSharding *s)
{
  ps_sharding_free (s);
}

/* l (a leaf of a memo sharding) holds `shared`. */
static void
hold_shared (PsSharding *l, DevArray *shared)
{
  l->devices = shared->v;
  l->devices_ref = shared->ref;
  g_atomic_int_inc (shared->ref);
}

/* A copy of s for the memo, its device arrays shared through the table. */
static PsSharding *
memo_sharding_keep (PpDotMemo *memo, const PsSharding *s)
{
  if (!s)
    return NULL;
  PsSharding *c;
  if (s->kind != PS_SHARDING_TUPLE && s->devices)
    {
      /* Copy the shell only; the array is looked up first. */
      PsSharding shell = *s;
      shell.devices = NULL;
      c = ps_sharding_copy (&shell);
      DevArray probe = { s->n_devices, s->devices };
      DevArray *shared = g_hash_table_lookup (memo->arrays, &probe);
      if (!shared)
        {
          shared = g_new (DevArray, 1);
          shared->n = s->n_devices;
          shared->v = g_memdup2 (s->devices, sizeof (int64_t) * s->n_devices);
          shared->ref = g_new (int, 1);
          *shared->ref = 1;
          g_hash_table_add (memo->arrays, shared);
        }
      hold_shared (c, shared);
      return c;
    }
  c = ps_sharding_copy (s);
  PsSharding *one[1] = { c };
  PsSharding **leaves = c->kind == PS_SHARDING_TUPLE ? c->elems : one;
  int n = c->kind == PS_SHARDING_TUPLE ? c->n_elems : 1;
  for (int k = 0; k < n; k++)
    {
      PsSharding *l = leaves[k];
      if (!l->devices)
        continue;
      DevArray probe = { l->n_devices, l->devices };
      DevArray *shared = g_hash_table_lookup (memo->arrays, &probe);
      if (shared)
        g_free (l->devices);
      else
        {
          shared = g_new (DevArray, 1);
          *shared = probe;
          shared->ref = g_new (int, 1);
          *shared->ref = 1;
          g_hash_table_add (memo->arrays, shared);
        }
      hold_shared (l, shared);
    }
  return c;
}

static void
dot_memo_entry_free (gpointer p)
{
  DotMemo *m = p;
  memo_sharding_free (m->in[0]);
  memo_sharding_free (m->in[1]);
  memo_sharding_free (m->out);
  g_free (m);
}

PpDotMemo *
pp_dot_memo_new (void)
{
  PpDotMemo *m = g_new0 (PpDotMemo, 1);
  m->entries = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, dot_memo_entry_free);
  m->arrays = g_hash_table_new_full (dev_array_hash, dev_array_equal, dev_array_free, NULL);
  return m;
}

void
pp_dot_memo_free (PpDotMemo *m)
{
  if (!m)
    return;
  /* Entries first: they point into the arrays. */
  g_hash_table_destroy (m->entries);
  g_hash_table_destroy (m->arrays);
  g_free (m);
}

/* Same sharding down to the metadata (which derived shardings carry). */
static gboolean
same_sharding (const PsSharding *a, const PsSharding *b)
{
  if (!a || !b)
    return a == b;
  if (!ps_sharding_equal (a, b) || g_strcmp0 (a->metadata, b->metadata) != 0)
    return FALSE;
  if (a->kind == PS_SHARDING_TUPLE)
    for (int k = 0; k < a->n_elems; k++)
      if (!same_sharding (a->elems[k], b->elems[k]))
        return FALSE;
  return TRUE;
}

/* The remembered result for `key` if its inputs match (*hit set), else the
 * entry to fill (NULL without a memo). */
static DotMemo *
dot_memo_lookup (PpCtx *c, gint64 key, const PsSharding *a, const PsSharding *b, gboolean mc,
                 gboolean *hit)
{
  *hit = FALSE;
  if (!c || !c->dot_memo)
    return NULL;
  DotMemo *m = g_hash_table_lookup (c->dot_memo->entries, &key);
  if (m && m->mc == mc && same_sharding (m->in[0], a) && same_sharding (m->in[1], b))
    {
      *hit = TRUE;
      return m;
    }
  if (!m)
    {
      m = g_new0 (DotMemo, 1);
      gint64 *k = g_new (gint64, 1);
      *k = key;
      g_hash_table_insert (c->dot_memo->entries, k, m);
    }
  return m;
}

static void
dot_memo_store (PpCtx *c, DotMemo *m, const PsSharding *a, const PsSharding *b, gboolean mc,
                const PsSharding *out)
{
  if (!m)
    return;
  memo_sharding_free (m->in[0]);
  memo_sharding_free (m->in[1]);
  memo_sharding_free (m->out);
  m->in[0] = memo_sharding_keep (c->dot_memo, a);
  m->in[1] = memo_sharding_keep (c->dot_memo, b);
  m->mc = mc;
  m->out = memo_sharding_keep (c->dot_memo, out);
}

static gint64
dot_memo_key (const PsInstr *i, int direction, int idx)
{
  return (gint64) i->id * 4 + direction * 2 + idx;
}

/* dot_from_operand through the memo. */
static PsSharding *
memo_dot_from_operand (PpCtx *c, const PsInstr *i, const PpDotDims *d, int idx)
{
  const PsSharding *in = i->operands[idx]->sharding;
  gboolean hit;
  DotMemo *m = dot_memo_lookup (c, dot_memo_key (i, 0, idx), in, NULL, FALSE, &hit);
  if (hit)
    return m->out ? ps_sharding_share (m->out) : NULL;
  PsSharding *r = dot_from_operand (i, d, idx);
  dot_memo_store (c, m, in, NULL, FALSE, r);
  return r;
}

/* pp_infer_dot_operand for operand idx of `user` through the memo. */
static PsSharding *
memo_infer_dot_operand (PpCtx *c, const PsInstr *user, const PsSharding *dot_sharding,
                        const PsSharding *other, int idx, const PpDotDims *d, gboolean mc)
{
  gboolean hit;
  DotMemo *m = dot_memo_lookup (c, dot_memo_key (user, 1, idx), dot_sharding, other, mc, &hit);
  if (hit)
    return m->out ? ps_sharding_share (m->out) : NULL;
  PsSharding *r = pp_infer_dot_operand (dot_sharding, other, idx, d, mc);
  dot_memo_store (c, m, dot_sharding, other, mc, r);
  return r;
}

gboolean
pp_infer_dot_from_operands (PpCtx *c, PsInstr *i, const PpDotDims *d, gboolean may_combine)
{
  PsSharding *imp[2] = { NULL, NULL };
  for (int k = 0; k < 2; k++)
    if (spatial (i->operands[k]))
      {
        PsSharding *f = memo_dot_from_operand (c, i, d, k);
        imp[k] = f ? pp_return_improved (f, i->sharding, i->shape, may_combine, FALSE) : NULL;
      }
  if (!imp[0] && !imp[1])
    return FALSE;
  if (!imp[0] || !imp[1])
    {
      PsSharding *one = imp[0] ? imp[0] : imp[1];
      ps_sharding_free (i->sharding);
      i->sharding = one;
      return TRUE;
    }
  PsSharding *prio[2] = { imp[0], imp[1] };
  gboolean by_lookahead = FALSE;
  PsSharding *la = lookahead_user_sharding (c, i);
  if (la)
    {
      gboolean s0 = pp_is_subtiling_or_equal (i->shape, la, imp[0]);
      gboolean s1 = pp_is_subtiling_or_equal (i->shape, la, imp[1]);
      if (s0 && !s1)
        by_lookahead = TRUE;
      if (!s0 && s1)
        {
          prio[0] = imp[1];
          prio[1] = imp[0];
          by_lookahead = TRUE;
        }
      ps_sharding_free (la);
    }
  if (!by_lookahead
      && ps_shape_bytes (i->operands[0]->shape) < ps_shape_bytes (i->operands[1]->shape))
    {
      prio[0] = imp[1];
      prio[1] = imp[0];
    }
  ps_sharding_free (i->sharding);
  i->sharding = prio[0];
  pp_maybe_improve (prio[1], i, may_combine, FALSE);
  return TRUE;
}

PsSharding *
pp_infer_dot_operand (const PsSharding *dot_sharding, const PsSharding *other, int idx,
                      const PpDotDims *d, gboolean may_combine)
{
  int64_t out_rep[PP_MAX_DIMS * 2], other_rep[PP_MAX_DIMS * 2];
  int no = 0, nother = 0;
  const PpDimNums *theirs = idx == 0 ? d->rhs_nc : d->lhs_nc;
  int nt = idx == 0 ? d->nrn : d->nln;
  for (int k = 0; k < nt; k++)
    {
      out_rep[no++] = theirs[k].out;
      other_rep[nother++] = pick (&theirs[k], 1 - idx);
    }
  for (int k = 0; k < d->nc; k++)
    if (d->contracting[k].out >= 0)
      out_rep[no++] = d->contracting[k].out;
  const PpDimNums *mine = idx == 0 ? d->lhs_nc : d->rhs_nc;
  int nm = idx == 0 ? d->nln : d->nrn;
  for (int k = 0; k < nm; k++)
    if (pick (&mine[k], 1 - idx) >= 0)
      other_rep[nother++] = pick (&mine[k], 1 - idx);
  for (int k = 0; k < d->nrep[2]; k++)
    out_rep[no++] = d->rep[2][k];
  for (int k = 0; k < d->nrep[1 - idx]; k++)
    other_rep[nother++] = d->rep[1 - idx][k];
  int op_rank = idx == 0 ? d->lhs_rank : d->rhs_rank;
  int other_rank = idx == 0 ? d->rhs_rank : d->lhs_rank;
  PsSharding *sharding = NULL;
  if (dot_sharding)
    {
      PsSharding *rep = pp_partially_replicate_on_dims (dot_sharding, no, out_rep);
      int64_t out_to_op[PP_MAX_DIMS], op_to_out[PP_MAX_DIMS];
      for (int k = 0; k < d->out_rank; k++)
        out_to_op[k] = -1;
      for (int k = 0; k < op_rank; k++)
        op_to_out[k] = -1;
      for (int k = 0; k < d->nb; k++)
        {
          out_to_op[d->batch[k].out] = pick (&d->batch[k], idx);
          op_to_out[pick (&d->batch[k], idx)] = d->batch[k].out;
        }
      for (int k = 0; k < nm; k++)
        {
          out_to_op[mine[k].out] = pick (&mine[k], idx);
          op_to_out[pick (&mine[k], idx)] = mine[k].out;
        }
      sharding = pp_transpose_collapsed (rep, d->out_rank, out_to_op, op_rank, op_to_out);
      ps_sharding_free (rep);
    }
  if (!sharding)
    sharding = ps_sharding_replicated ();
  if (other && pp_is_spatially_partitioned (other))
    {
      PsSharding *rep = pp_partially_replicate_on_dims (other, nother, other_rep);
      int64_t other_to_op[PP_MAX_DIMS], op_to_other[PP_MAX_DIMS];
      for (int k = 0; k < other_rank; k++)
        other_to_op[k] = -1;
      for (int k = 0; k < op_rank; k++)
        op_to_other[k] = -1;
      for (int k = 0; k < d->nb; k++)
        {
          other_to_op[pick (&d->batch[k], 1 - idx)] = pick (&d->batch[k], idx);
          op_to_other[pick (&d->batch[k], idx)] = pick (&d->batch[k], 1 - idx);
        }
      for (int k = 0; k < d->nc; k++)
        {
          other_to_op[pick (&d->contracting[k], 1 - idx)] = pick (&d->contracting[k], idx);
          op_to_other[pick (&d->contracting[k], idx)] = pick (&d->contracting[k], 1 - idx);
        }
      PsSharding *from_other = pp_transpose_collapsed (rep, other_rank, other_to_op, op_rank,
                                                       op_to_other);
      ps_sharding_free (rep);
      if (from_other)
        {
          if (pp_merge_sharding (sharding, &from_other, may_combine))
            {
              ps_sharding_free (sharding);
              sharding = from_other;
            }
          else
            ps_sharding_free (from_other);
        }
    }
  return sharding;
}

/* XLA's LookaheadUserSharding: follow a chain of single users to the first
 * one with a sharding and bring it back. */
static PsSharding *
lookahead_user_sharding (PpCtx *c, PsInstr *i)
{
  if (i->users->len != 1)
    return NULL;
  GPtrArray *chain = g_ptr_array_new ();
  g_ptr_array_add (chain, i);
  PsInstr *cur = g_ptr_array_index (i->users, 0);
  g_ptr_array_add (chain, cur);
  gboolean ok = TRUE;
  while (!cur->sharding)
    {
      if (cur->users->len != 1 || chain->len > 64)
        {
          ok = FALSE;
          break;
        }
      cur = g_ptr_array_index (cur->users, 0);
      g_ptr_array_add (chain, cur);
    }
  PsSharding *s = NULL;
  if (ok)
    {
      for (int k = (int) chain->len - 1; k >= 1; k--)
        {
          PsInstr *user = g_ptr_array_index (chain, k);
          PsInstr *curr = g_ptr_array_index (chain, k - 1);
          if (s)
            ps_sharding_free (s);
          s = pp_sharding_from_user (c, curr, user, G_MAXINT);
          if (s && k != 1)
            {
              ps_sharding_free (curr->sharding);
              curr->sharding = ps_sharding_share (s);
              continue;
            }
          break;
        }
      for (guint k = 1; k + 1 < chain->len; k++)
        {
          PsInstr *mid = g_ptr_array_index (chain, k);
          ps_sharding_free (mid->sharding);
          mid->sharding = NULL;
        }
    }
  g_ptr_array_free (chain, TRUE);
  return s;
}

/* ---- forward ------------------------------------------------------------ */

static gboolean
conv_kernel_small (const PsInstr *i)
{
  const PsConvDims *cd = &i->conv;
  int64_t kp = 1, op = 1;
  for (int k = 0; k < cd->n_spatial; k++)
    {
      int64_t kd = i->operands[1]->shape->dims[cd->k_spatial[k]];
      int64_t od = i->shape->dims[cd->out_spatial[k]];
      kp *= kd;
      op *= od;
      if (kd >= od && (k < 2 || kd > 3 || kp >= op))
        return FALSE;
    }
  return TRUE;
}

static gboolean
infer_conv (PpCtx *c, PsInstr *i, gboolean mc)
{
  PpDotDims d;
  pp_dot_dims_from_conv (i, &d);
  int64_t lp = 1, rp = 1;
  for (int k = 0; k < d.ns; k++)
    {
      lp *= pp_tile_dim (i->operands[0]->sharding, (int) d.spatial[k].lhs);
      rp *= pp_tile_dim (i->operands[1]->sharding, (int) d.spatial[k].rhs);
    }
  if (d.ns == 0 || (lp == 1 && rp == 1 && or1 (i->batch_group_count) == 1
                    && or1 (i->feature_group_count) == 1))
    return pp_infer_dot_from_operands (c, i, &d, mc);
  const PsInstr *lhs = i->operands[0];
  if (!spatial (lhs))
    return FALSE;
  if (pp_is_tile_maximal (lhs->sharding) || pp_is_manual (lhs->sharding))
    return maybe_improve_from (lhs->sharding, i, mc, FALSE);
  const PsConvDims *cd = &i->conv;
  if (conv_kernel_small (i))
    {
      if (pp_tile_dim (lhs->sharding, (int) cd->in_feature) > 1)
        return FALSE;
      int64_t o2l[PP_MAX_DIMS];
      o2l[cd->out_batch] = cd->in_batch;
      o2l[cd->out_feature] = cd->in_feature;
      for (int k = 0; k < cd->n_spatial; k++)
        o2l[cd->out_spatial[k]] = cd->in_spatial[k];
      return pp_maybe_improve (pp_transpose (lhs->sharding, i->shape->rank, o2l), i, mc, FALSE);
    }
  int64_t keep = cd->in_batch;
  return pp_maybe_improve (pp_partially_replicate_all_except (lhs->sharding, 1, &keep), i, mc,
                           FALSE);
}

static gboolean
infer_reduce (PpCtx *c, PsInstr *i, gboolean mc)
{
  int nin = i->n_operands / 2;
  gboolean changed = FALSE;
  gboolean aggressive = pp_non_root_users (i) == 1;
  for (int k = 0; k < nin; k++)
    {
      const PsInstr *op = i->operands[k];
      if (!spatial (op))
        continue;
      const PsSharding *s = op->sharding;
      if (pp_is_manual (s))
        {
          changed |= pp_maybe_improve_sub_ (ps_sharding_share (s), i, k, mc);
          continue;
        }
      gboolean reduce_sharded = FALSE;
      for (int d = 0; d < i->dimensions.n; d++)
        if (pp_tile_dim (s, (int) i->dimensions.v[d]) > 1)
          reduce_sharded = TRUE;
      PsSharding *ns;
      if (pp_is_replicated (s) || (!c->is_spmd && reduce_sharded))
        {
          PsSharding *r = pp_replicate_all_data_dims (s, -1);
          ns = tuple_of (i->shape, r);
          ps_sharding_free (r);
        }
      else
        {
          PsSharding *after = pp_partially_replicate_on_dims (s, i->dimensions.n, i->dimensions.v);
          if (pp_is_replicated (after))
            ns = tuple_of (i->shape, after);
          else
            {
              PsSharding *rm = pp_remove_shape_dims (after, i->dimensions.n, i->dimensions.v);
              ns = rm ? tuple_of (i->shape, rm) : NULL;
              if (rm)
                ps_sharding_free (rm);
            }
          ps_sharding_free (after);
        }
      if (ns)
        changed |= pp_maybe_improve (ns, i, mc, aggressive);
    }
  (void) c;
  return changed;
}

static gboolean
infer_broadcast (PsInstr *i, int aggr, gboolean mc)
{
  if (aggr < 3)
    return FALSE;
  const PsInstr *op = i->operands[0];
  if (!spatial (op) || pp_is_replicated (op->sharding) || !pp_is_tiled (op->sharding))
    return FALSE;
  const PsSharding *s = op->sharding;
  int64_t t[PP_MAX_DIMS];
  int n = 0;
  for (int k = 0; k < i->shape->rank; k++)
    {
      int src = -1;
      for (int j = 0; j < i->dimensions.n; j++)
        if (i->dimensions.v[j] == k)
          src = j;
      t[n++] = src < 0 ? 1 : s->tile_dims[src];
    }
  for (int k = pp_data_rank (s); k < s->n_tile_dims; k++)
    t[n++] = s->tile_dims[k];
  PsSharding *ns = pp_subgroup_of (n, t, s);
  if (ns && s->metadata)
    ns->metadata = g_strdup (s->metadata);
  return pp_maybe_improve (ns, i, mc, pp_non_root_users (i) == 1);
}

static gboolean
concat_operand_can_pass (const PsInstr *op)
{
  return spatial (op) && op->sharding && pp_num_tiles (op->sharding) > 1
         && op->opcode == PS_OP_RESHAPE
         && (op->operands[0]->opcode == PS_OP_PARAMETER
             || op->operands[0]->opcode == PS_OP_GET_TUPLE_ELEMENT);
}

static gboolean
infer_slice_like (PsInstr *i, int operand, gboolean mc)
{
  const PsInstr *op = i->operands[operand];
  if (!spatial (op))
    return FALSE;
  int64_t dims[PP_MAX_DIMS];
  int n = 0;
  for (int k = 0; k < i->shape->rank && k < op->shape->rank; k++)
    if (i->shape->dims[k] != op->shape->dims[k])
      dims[n++] = k;
  return pp_maybe_improve (pp_partially_replicate_on_dims (op->sharding, n, dims), i, mc,
                           pp_non_root_users (i) == 1);
}

/* Manual shardings spread to an instruction of manual operands, before any
 * other rule. TRUE when this decided (*changed says whether the sharding
 * changed); FALSE: no operand is manual, the other rules apply. */
static gboolean
infer_manual (PpCtx *c, PsInstr *i, int aggr, gboolean *changed)
{
  *changed = FALSE;
  if (!((!i->sharding || pp_is_tile_maximal (i->sharding))
        && (ps_shape_is_array (i->shape) || i->opcode == PS_OP_REDUCE || i->opcode == PS_OP_SORT
            || i->opcode == PS_OP_REDUCE_WINDOW
            || (i->opcode == PS_OP_CUSTOM_CALL && ps_shape_is_tuple (i->shape))
            || async_outside (c, i))))
    return FALSE;
  for (int k = 0; k < i->n_operands; k++)
    {
      const PsInstr *op = i->operands[k];
      if (!op->sharding || !pp_is_manual (op->sharding))
        continue;
      if (pp_is_custom_call (i, "SPMDShardToFullShape"))
        return TRUE;
      if (aggr == 0 && (i->opcode == PS_OP_CONCATENATE || i->opcode == PS_OP_DYNAMIC_SLICE))
        return TRUE;
      /* A tuple sharding carries no metadata of its own. */
      PsSharding *m = pp_manual_like (pp_is_tuple (op->sharding) ? NULL : op->sharding);
      ps_sharding_free (i->sharding);
      i->sharding = pp_normalize_tuple (m, i->shape);
      ps_sharding_free (m);
      *changed = TRUE;
      return TRUE;
    }
  return FALSE;
}

/* An op without spatial rules: only a maximal sharding (one device) of an
 * operand passes through. */
static gboolean
infer_without_spatial (PsInstr *i, gboolean mc)
{
  if (ps_shape_is_tuple (i->shape) || i->n_operands == 0 || i == i->parent->root
      || has_side_effect (i))
    return FALSE;
  for (int k = 0; k < i->n_operands; k++)
    {
      const PsSharding *s = i->operands[k]->sharding;
      if (s && !pp_is_tuple (s) && pp_is_tile_maximal (s) && !pp_has_unique_device (s, NULL))
        return maybe_improve_from (s, i, mc, FALSE);
    }
  return FALSE;
}

/* A tuple: each leaf from the operand it comes from, where that is more
 * specific than what the tuple has. */
static gboolean
infer_tuple (PsInstr *i)
{
  gboolean any = FALSE;
  for (int k = 0; k < i->n_operands; k++)
    any |= spatial (i->operands[k]);
  if (!any)
    return FALSE;
  int nl = ps_shape_leaf_count (i->shape);
  PsSharding **subs = g_new0 (PsSharding *, nl > 0 ? nl : 1);
  for (int k = 0; k < nl; k++)
    subs[k] = i->sharding && pp_is_tuple (i->sharding) && k < i->sharding->n_elems
                  ? ps_sharding_share (i->sharding->elems[k])
                  : ps_sharding_replicated ();
  int idx = 0;
  for (int k = 0; k < i->n_operands; k++)
    {
      const PsInstr *op = i->operands[k];
      int cnt = ps_shape_leaf_count (op->shape);
      if (op->sharding)
        {
          if (ps_shape_is_tuple (op->shape))
            {
              PsSharding *os = pp_normalize_tuple (op->sharding, op->shape);
              for (int j = 0; j < cnt && j < os->n_elems && idx + j < nl; j++)
                if (!i->sharding || pp_is_more_specific (os->elems[j], subs[idx + j]))
                  {
                    ps_sharding_free (subs[idx + j]);
                    subs[idx + j] = ps_sharding_share (os->elems[j]);
                  }
              ps_sharding_free (os);
            }
          else
            {
              const PsSharding *os = op->sharding;
              if (op->opcode == PS_OP_OUTFEED && pp_is_tuple (os) && os->n_elems > 0)
                os = os->elems[os->n_elems - 1];
              if (idx < nl && !pp_is_tuple (os)
                  && (!i->sharding || pp_is_more_specific (os, subs[idx])))
                {
                  ps_sharding_free (subs[idx]);
                  subs[idx] = ps_sharding_share (os);
                }
            }
        }
      idx += cnt;
    }
  PsSharding *ns = ps_sharding_tuple (nl, subs);
  g_free (subs);
  if (!i->sharding || !ps_sharding_equal (ns, i->sharding))
    {
      ps_sharding_free (i->sharding);
      i->sharding = ns;
      return TRUE;
    }
  ps_sharding_free (ns);
  return FALSE;
}

gboolean
pp_infer_from_operands (PpCtx *c, PsInstr *i, int aggr)
{
  if (!pp_can_propagate_at (i, aggr))
    return FALSE;
  if (i->sharding && pp_is_manual (i->sharding))
    return FALSE;
  gboolean mc = c->is_spmd && aggr > 0;
  gboolean changed;
  if (infer_manual (c, i, aggr, &changed))
    return changed;
  if (pp_is_custom_call (i, "ShardBarrierFrom"))
    return FALSE;
  if (!pp_support_spatial (c, i, c->to_output, FALSE))
    return infer_without_spatial (i, mc);
  gboolean aggressive = pp_non_root_users (i) == 1;
  switch (i->opcode)
    {
    case PS_OP_GET_TUPLE_ELEMENT:
      {
        const PsInstr *op = i->operands[0];
        if (!spatial (op))
          return FALSE;
        PsSharding *ns = pp_sub_sharding (op->sharding, op->shape, (int) i->tuple_index);
        if (!ns)
          return FALSE;
        if (pp_is_manual (ns))
          {
            ps_sharding_free (i->sharding);
            i->sharding = ns;
            return TRUE;
          }
        return pp_maybe_improve (ns, i, mc, aggressive);
      }
    case PS_OP_TUPLE:
      return infer_tuple (i);
    case PS_OP_REDUCE:
      return infer_reduce (c, i, mc);
    case PS_OP_BROADCAST:
      return infer_broadcast (i, aggr, mc);
    case PS_OP_CONCATENATE:
      {
        const PsInstr *op = pick_representative (i);
        if (!op || !spatial (op))
          return FALSE;
        if (aggr == 0)
          for (int k = 0; k < i->n_operands; k++)
            {
              const PsInstr *co = i->operands[k];
              if (!concat_operand_can_pass (co))
                return FALSE;
              for (int d = 0; d < i->dimensions.n; d++)
                if (pp_tile_dim (co->sharding, (int) i->dimensions.v[d]) > 1)
                  return FALSE;
            }
        return maybe_improve_from (op->sharding, i, mc, aggressive);
      }
    case PS_OP_CONVOLUTION:
      return infer_conv (c, i, mc);
    case PS_OP_TRANSPOSE:
      {
        const PsInstr *op = i->operands[0];
        if (!spatial (op))
          return FALSE;
        return pp_maybe_improve (pp_transpose (op->sharding, i->dimensions.n, i->dimensions.v),
                                 i, mc, aggressive);
      }
    case PS_OP_REDUCE_WINDOW:
      {
        for (int k = 0; k < i->window.n; k++)
          if (or1 (i->window.dims[k].base_dilation) > 1 || or1 (i->window.dims[k].window_dilation) > 1)
            return FALSE;
        gboolean changed = FALSE;
        int nin = i->n_operands / 2;
        for (int k = 0; k < nin; k++)
          if (spatial (i->operands[k]))
            changed |= pp_maybe_improve (tuple_of (i->shape, i->operands[k]->sharding), i, mc,
                                         aggressive);
        return changed;
      }
    case PS_OP_SELECT_AND_SCATTER:
      {
        const PsInstr *op = i->operands[0];
        if (!spatial (op))
          return FALSE;
        for (int k = 0; k < i->window.n; k++)
          if (or1 (i->window.dims[k].base_dilation) > 1)
            return FALSE;
        return maybe_improve_from (op->sharding, i, mc, aggressive);
      }
    case PS_OP_RESHAPE:
      {
        const PsInstr *op = i->operands[0];
        if (!spatial (op))
          return FALSE;
        return pp_maybe_improve (pp_propagate_through_reshape (op->shape, i->shape, op->sharding),
                                 i, mc, aggressive);
      }
    case PS_OP_REVERSE:
      {
        const PsInstr *op = i->operands[0];
        if (!spatial (op))
          return FALSE;
        return pp_maybe_improve (pp_reverse (op->sharding, i->dimensions.n, i->dimensions.v), i,
                                 mc, aggressive);
      }
    case PS_OP_DOT: case PS_OP_RAGGED_DOT:
      {
        if (i->opcode == PS_OP_RAGGED_DOT && !ragged_dims_ok (i))
          return FALSE;
        PpDotDims d;
        pp_dot_dims_from_dot (i, &d);
        return pp_infer_dot_from_operands (c, i, &d, mc);
      }
    case PS_OP_PARAMETER:
      {
        PsInstr *caller = g_hash_table_lookup (c->comp_map, i->parent);
        if (!caller)
          return FALSE;
        if (caller->opcode == PS_OP_CONDITIONAL)
          {
            for (int k = 1; k < caller->n_operands; k++)
              if (k - 1 < caller->n_called && caller->called[k - 1] == i->parent)
                {
                  if (caller->operands[k]->sharding)
                    return maybe_improve_from (caller->operands[k]->sharding, i,
                                             mc, FALSE);
                  return FALSE;
                }
            return FALSE;
          }
        if (caller->opcode == PS_OP_CALL || caller->opcode == PS_OP_FUSION)
          {
            int64_t k = i->parameter_number;
            if (k < caller->n_operands && caller->operands[k]->sharding)
              return maybe_improve_from (caller->operands[k]->sharding, i, mc,
                                       FALSE);
          }
        return FALSE;
      }
    case PS_OP_SORT:
      {
        const PsInstr *op = pick_representative (i);
        if (!op || !spatial (op))
          return FALSE;
        int64_t sd = i->dimensions.n > 0 ? i->dimensions.v[0] : 0;
        if (pp_is_tiled (op->sharding) && pp_tile_dim (op->sharding, (int) sd) != 1)
          {
            /* Propagated only if a free dim (not split, not of size 1) can
             * later take the sort dim's split (XLA's
             * IsSortOperandShardingMovable). */
            gboolean movable = FALSE;
            const PsShape *sh = op->shape;
            if (sh->rank >= 2)
              for (int d = 0; d < sh->rank; d++)
                if (d != sd && pp_tile_dim (op->sharding, d) == 1 && sh->dims[d] != 1)
                  {
                    movable = TRUE;
                    break;
                  }
            if (!movable)
              return FALSE;
          }
        return pp_maybe_improve (tuple_of (i->shape, op->sharding), i, mc, aggressive);
      }
    case PS_OP_DYNAMIC_SLICE:
      return infer_slice_like (i, 0, mc);
    case PS_OP_DYNAMIC_UPDATE_SLICE:
      {
        gboolean changed = infer_slice_like (i, 1, mc);
        if (spatial (i->operands[0]))
          changed |= maybe_improve_from (i->operands[0]->sharding, i, mc, FALSE);
        return changed;
      }
    case PS_OP_BATCH_NORM_TRAINING: case PS_OP_BATCH_NORM_INFERENCE: case PS_OP_BATCH_NORM_GRAD:
      return pp_infer_batch_norm_from_operands (c, i, mc, aggressive);
    case PS_OP_GATHER:
      return pp_infer_gather_from_operands (c, i, mc);
    case PS_OP_SCATTER:
      return pp_infer_scatter_from_operands (c, i, mc);
    case PS_OP_WHILE:
      {
        const PsInstr *op = i->operands[0];
        if (!op->sharding)
          return FALSE;
        PsSharding *s = pp_normalize_tuple (op->sharding, i->shape);
        if (i->sharding)
          pp_merge_sharding (i->sharding, &s, mc);
        return pp_maybe_improve (s, i, mc, FALSE);
      }
    case PS_OP_CUSTOM_CALL:
      {
        if (pp_is_custom_call (i, "ShardBarrierTo"))
          {
            if (!i->operands[0]->sharding)
              return FALSE;
            return maybe_improve_from (i->operands[0]->sharding, i, mc,
                                     aggressive);
          }
        const PsInstr *op = pick_representative (i);
        if (!op || !spatial (op))
          return FALSE;
        return maybe_improve_from (op->sharding, i, mc, aggressive);
      }
    default:
      {
        if (pp_is_elementwise (i) && mc)
          {
            gboolean changed = FALSE;
            for (int k = 0; k < i->n_operands; k++)
              {
                const PsInstr *op = i->operands[k];
                if (!spatial (op))
                  continue;
                if (i->opcode == PS_OP_RNG)
                  {
                    changed |= pp_maybe_improve (
                        pp_replicate_all_data_dims (op->sharding, i->shape->rank), i, mc,
                        aggressive);
                    continue;
                  }
                changed |= maybe_improve_from (op->sharding, i, mc,
                                             i->n_operands == 1 && aggressive);
              }
            return changed;
          }
        const PsInstr *op = pick_representative (i);
        if (!op || !spatial (op))
          return FALSE;
        return maybe_improve_from (op->sharding, i, mc, aggressive);
      }
    }
}

/* ---- backward ----------------------------------------------------------- */

static gboolean
compatible_shapes (const PsShape *a, const PsShape *b)
{
  if (ps_shape_is_tuple (a) != ps_shape_is_tuple (b))
    return FALSE;
  if (ps_shape_is_tuple (a))
    {
      if (a->n_elems != b->n_elems)
        return FALSE;
      for (int k = 0; k < a->n_elems; k++)
        if (!compatible_shapes (a->elems[k], b->elems[k]))
          return FALSE;
      return TRUE;
    }
  return ps_shape_same_dims (a, b);
}

static PsSharding *
broadcast_operand_sharding (const PsInstr *user, gboolean is_spmd)
{
  const PsSharding *s = user->sharding;
  if (pp_is_replicated (s) || pp_is_manual (s))
    return ps_sharding_share (s);
  if (!pp_is_tiled (s))
    return NULL;
  int64_t rep[PP_MAX_DIMS];
  int n = 0;
  gboolean needs = FALSE;
  for (int k = 0; k < user->shape->rank; k++)
    if (!ps_ints_contains (&user->dimensions, k))
      {
        rep[n++] = k;
        if (pp_tile_dim (s, k) > 1)
          needs = TRUE;
      }
  if (!is_spmd && needs)
    return NULL;
  PsSharding *p = pp_partially_replicate_on_dims (s, n, rep);
  PsSharding *r = pp_remove_shape_dims (p, n, rep);
  ps_sharding_free (p);
  return r;
}

static PsSharding *
reduce_operand_sharding (const PsInstr *i, const PsInstr *user)
{
  if (i->shape->rank == 0)
    return NULL;
  int idx = pp_operand_index (user, i);
  PsSharding *us = ps_shape_is_tuple (user->shape)
                       ? pp_sub_sharding (user->sharding, user->shape, idx)
                       : ps_sharding_share (user->sharding);
  if (!us)
    return NULL;
  if (pp_is_tiled (us))
    {
      int64_t t[PP_MAX_DIMS];
      int nt = i->shape->rank + us->n_subgroups;
      int next = 0;
      for (int k = 0; k < nt; k++)
        t[k] = ps_ints_contains (&user->dimensions, k) ? 1 : us->tile_dims[next++];
      PsSharding *r = pp_subgroup_of (nt, t, us);
      if (r && us->metadata)
        r->metadata = g_strdup (us->metadata);
      ps_sharding_free (us);
      us = r;
      if (!us)
        return NULL;
    }
  int nin = user->n_operands / 2;
  for (int k = 0; k < nin; k++)
    {
      const PsInstr *op = user->operands[k];
      if (op != i && op->sharding && !pp_is_tuple (op->sharding) && !pp_is_manual (op->sharding)
          && !pp_is_manual (us))
        {
          PsSharding *m = pp_merge_if_compatible (op->sharding, pp_num_tiles (us) + 1, us);
          if (m)
            {
              ps_sharding_free (us);
              us = m;
            }
        }
    }
  return us;
}

static PsSharding *as_result (const PsSharding *us, const PsSharding **borrowed);

static PsSharding *
gte_operand_sharding (const PsInstr *i, const PsInstr *user, const PsSharding **borrowed)
{
  if (!ps_shape_is_tuple (i->shape))
    return NULL;
  int first, count;
  pp_tuple_leaf_range (i->shape, (int) user->tuple_index, &first, &count);
  const PsSharding *us = user->sharding;
  /* A loop state's tuple has one element per carried value, each with
   * thousands of devices, and every get-tuple-element of it asks this
   * again once the pass settles: when the element already is the user's,
   * the answer is the operand's own sharding, without building a copy. */
  if (i->sharding && pp_is_tuple (i->sharding) && ps_shape_is_array (user->shape)
      && !pp_is_tuple (us) && i->sharding->n_elems == ps_shape_leaf_count (i->shape)
      && first < i->sharding->n_elems
      && ps_sharding_equal_layout (i->sharding->elems[first], us))
    return as_result (i->sharding, borrowed);
  PsSharding *base;
  if (i->sharding)
    base = pp_normalize_tuple (i->sharding, i->shape);
  else
    {
      const PsSharding *proto = pp_is_tuple (us) ? (us->n_elems ? us->elems[0] : NULL) : us;
      if (!proto)
        return NULL;
      GPtrArray *leaves = ps_shape_leaves (i->shape);
      int nl = (int) leaves->len;
      PsSharding **e = g_new (PsSharding *, nl > 0 ? nl : 1);
      for (int k = 0; k < nl; k++)
        {
          const PsShape *ls = g_ptr_array_index (leaves, k);
          e[k] = pp_replicate_all_data_dims (proto, ls->rank);
        }
      base = ps_sharding_tuple (nl, e);
      g_free (e);
      g_ptr_array_free (leaves, TRUE);
    }
  if (!pp_is_tuple (base))
    {
      ps_sharding_free (base);
      return NULL;
    }
  if (ps_shape_is_array (user->shape))
    {
      if (first < base->n_elems && !pp_is_tuple (us))
        {
          ps_sharding_free (base->elems[first]);
          base->elems[first] = ps_sharding_share (us);
        }
    }
  else
    {
      PsSharding *u = pp_normalize_tuple (us, user->shape);
      if (!pp_is_tuple (u) || u->n_elems == 0)
        {
          ps_sharding_free (u);
          ps_sharding_free (base);
          return NULL;
        }
      for (int k = 0; k < u->n_elems && first + k < base->n_elems; k++)
        {
          ps_sharding_free (base->elems[first + k]);
          base->elems[first + k] = ps_sharding_share (u->elems[k]);
        }
      ps_sharding_free (u);
    }
  return base;
}

/* A copy of us, or (borrowed != NULL) us itself through *borrowed and NULL:
 * most users hand their own sharding down unchanged, and the caller can
 * often see that it improves nothing without copying 16 KiB. */
static PsSharding *
as_result (const PsSharding *us, const PsSharding **borrowed)
{
  if (!borrowed)
    return ps_sharding_share (us);
  *borrowed = us;
  return NULL;
}

/* pp_sharding_from_user; with `borrowed`, a result that is the user's own
 * sharding comes back through *borrowed instead (set to NULL otherwise). */
static PsSharding *
from_user (PpCtx *c, const PsInstr *i, const PsInstr *user, int aggr, const PsSharding **borrowed)
{
  if (borrowed)
    *borrowed = NULL;
  if (!pp_can_propagate_at (user, aggr))
    return NULL;
  if (!user->sharding || !pp_is_spatially_partitioned (user->sharding))
    return NULL;
  gboolean mc = c->is_spmd && aggr > 0;
  const PsSharding *us = user->sharding;
  switch (user->opcode)
    {
    case PS_OP_BROADCAST:
      return broadcast_operand_sharding (user, c->is_spmd);
    case PS_OP_CONCATENATE:
      {
        if (aggr == 0)
          return NULL;
        if (pp_is_replicated (us) || !pp_is_tiled (us))
          return as_result (us, borrowed);
        int64_t cdim = user->dimensions.n > 0 ? user->dimensions.v[0] : 0;
        if (pp_tile_dim (us, (int) cdim) == 1 || c->is_spmd)
          return as_result (us, borrowed);
        /* MPMD: the operand lives on the devices that hold its part. */
        int64_t start = 0;
        for (int k = 0; k < user->n_operands; k++)
          {
            if (user->operands[k] == i)
              break;
            start += user->operands[k]->shape->dims[cdim];
          }
        int64_t parts = us->tile_dims[cdim];
        int64_t tile = ps_ceil_div (user->shape->dims[cdim], parts);
        int64_t lo = start / tile;
        int64_t hi = (start + i->shape->dims[cdim] + tile - 1) / tile;
        if (hi > parts)
          hi = parts;
        int nd = us->n_tile_dims;
        int64_t nd_dims[PP_MAX_DIMS];
        for (int k = 0; k < nd; k++)
          nd_dims[k] = us->tile_dims[k];
        nd_dims[cdim] = hi - lo;
        int64_t total = 1;
        for (int k = 0; k < nd; k++)
          total *= nd_dims[k];
        int64_t *dev = g_new (int64_t, total);
        int64_t idx[PP_MAX_DIMS] = { 0 };
        for (int64_t e = 0; e < total; e++)
          {
            int64_t off = 0;
            for (int k = 0; k < nd; k++)
              off = off * us->tile_dims[k] + idx[k] + (k == cdim ? lo : 0);
            dev[e] = us->devices[off];
            ps_index_next (nd, nd_dims, idx);
          }
        PsSharding *r = total == 1 ? ps_sharding_maximal (dev[0])
                                   : ps_sharding_tiled (nd, nd_dims, dev);
        g_free (dev);
        if (r && us->metadata)
          r->metadata = g_strdup (us->metadata);
        return r;
      }
    case PS_OP_CONVOLUTION:
      {
        PpDotDims d;
        pp_dot_dims_from_conv (user, &d);
        if (d.ns != 0)
          return NULL;
        int idx = pp_operand_index (user, i);
        if (idx < 0 || idx > 1) /* e.g. a sparse dot's metadata operand */
          return NULL;
        return memo_infer_dot_operand (c, user, us, user->operands[1 - idx]->sharding, idx, &d,
                                       mc);
      }
    case PS_OP_DYNAMIC_SLICE:
    case PS_OP_DYNAMIC_UPDATE_SLICE:
      {
        if (aggr == 0)
          return NULL;
        if (pp_is_replicated (us))
          return as_result (us, borrowed);
        if (user->opcode == PS_OP_DYNAMIC_UPDATE_SLICE && i == user->operands[0])
          return as_result (us, borrowed);
        const PsInstr *op = user->opcode == PS_OP_DYNAMIC_SLICE ? user->operands[0]
                                                                : user->operands[1];
        if (i != op)
          return NULL;
        int64_t dims[PP_MAX_DIMS];
        int n = 0;
        for (int k = 0; k < user->shape->rank && k < op->shape->rank; k++)
          if (user->shape->dims[k] != op->shape->dims[k])
            dims[n++] = k;
        return pp_partially_replicate_on_dims (us, n, dims);
      }
    case PS_OP_REDUCE_WINDOW:
      {
        int idx = pp_operand_index (user, i);
        if (idx < 0 || idx >= user->n_operands / 2)
          return NULL;
        if (ps_shape_is_tuple (user->shape))
          return pp_sub_sharding (us, user->shape, idx);
        return as_result (us, borrowed);
      }
    case PS_OP_RESHAPE:
      return pp_propagate_through_reshape (user->shape, i->shape, us);
    case PS_OP_PAD:
      return i == user->operands[0] ? ps_sharding_share (us) : NULL;
    case PS_OP_SLICE:
      return as_result (us, borrowed);
    case PS_OP_TRANSPOSE:
      {
        int64_t rev[PP_MAX_DIMS];
        for (int k = 0; k < user->dimensions.n; k++)
          rev[user->dimensions.v[k]] = k;
        return pp_transpose (us, user->dimensions.n, rev);
      }
    case PS_OP_TUPLE:
      {
        /* the element of the user's (normalized) tuple sharding, borrowed
         * when i is one leaf used once */
        if (pp_is_tuple (us) && us->n_elems == ps_shape_leaf_count (user->shape)
            && ps_shape_is_array (i->shape))
          {
            int uses = 0, at = -1;
            for (int k = 0; k < user->n_operands; k++)
              if (user->operands[k] == i)
                {
                  uses++;
                  at = k;
                }
            int first, count;
            pp_tuple_leaf_range (user->shape, at, &first, &count);
            if (uses == 1 && count == 1 && first < us->n_elems)
              return as_result (us->elems[first], borrowed);
          }
        PsSharding *best = NULL;
        for (int k = 0; k < user->n_operands; k++)
          if (user->operands[k] == i)
            {
              PsSharding *alt = pp_sub_sharding (us, user->shape, k);
              if (!best)
                best = alt;
              else if (alt && pp_is_more_specific (alt, best))
                {
                  ps_sharding_free (best);
                  best = alt;
                }
              else if (alt)
                ps_sharding_free (alt);
            }
        return best;
      }
    case PS_OP_GET_TUPLE_ELEMENT:
      return gte_operand_sharding (i, user, borrowed);
    case PS_OP_DOT: case PS_OP_RAGGED_DOT:
      {
        if (user->opcode == PS_OP_RAGGED_DOT && !ragged_dims_ok (user))
          return NULL;
        PpDotDims d;
        pp_dot_dims_from_dot (user, &d);
        /* operand 2 of a ragged-dot, its group sizes, stays replicated,
         * as the partitioner needs it */
        int idx = pp_operand_index (user, i);
        if (idx < 0 || idx > 1) /* e.g. a sparse dot's metadata operand */
          return NULL;
        return memo_infer_dot_operand (c, user, us, user->operands[1 - idx]->sharding, idx, &d,
                                       mc);
      }
    case PS_OP_REDUCE:
      return reduce_operand_sharding (i, user);
    case PS_OP_SORT:
      if (pp_is_tuple (us))
        return pp_sub_sharding (us, user->shape, pp_operand_index (user, i));
      return as_result (us, borrowed);
    case PS_OP_REVERSE:
      return pp_reverse (us, user->dimensions.n, user->dimensions.v);
    case PS_OP_OUTFEED:
      {
        if (i != user->operands[0])
          return NULL;
        if (!pp_is_tuple (us))
          return as_result (us, borrowed);
        int cnt = ps_shape_leaf_count (i->shape);
        if (!ps_shape_is_tuple (i->shape))
          return us->n_elems > 0 ? ps_sharding_share (us->elems[0]) : NULL;
        PsSharding **e = g_new (PsSharding *, cnt > 0 ? cnt : 1);
        for (int k = 0; k < cnt; k++)
          e[k] = k < us->n_elems ? ps_sharding_share (us->elems[k]) : ps_sharding_replicated ();
        PsSharding *r = ps_sharding_tuple (cnt, e);
        g_free (e);
        return r;
      }
    case PS_OP_BATCH_NORM_TRAINING: case PS_OP_BATCH_NORM_INFERENCE: case PS_OP_BATCH_NORM_GRAD:
      return pp_batch_norm_operand_from_user (i, user);
    case PS_OP_GATHER:
      return pp_gather_operand_from_user (c, i, user);
    case PS_OP_SCATTER:
      return pp_scatter_operand_from_user (c, i, user);
    case PS_OP_CUSTOM_CALL:
      if (!compatible_shapes (i->shape, user->shape))
        return NULL;
      return as_result (us, borrowed);
    default:
      if (compatible_shapes (i->shape, user->shape))
        return as_result (us, borrowed);
      return NULL;
    }
}

PsSharding *
pp_sharding_from_user (PpCtx *c, const PsInstr *i, const PsInstr *user, int aggr)
{
  return from_user (c, i, user, aggr, NULL);
}

gboolean
pp_infer_from_users (PpCtx *c, PsInstr *i, int aggr)
{
  if (aggr < 2 && i->opcode == PS_OP_BROADCAST)
    return FALSE;
  if (i->sharding && pp_is_manual (i->sharding))
    return FALSE;
  if (!i->sharding || pp_is_tile_maximal (i->sharding))
    for (guint k = 0; k < i->users->len; k++)
      {
        const PsInstr *user = g_ptr_array_index (i->users, k);
        if (!user->sharding || pp_is_custom_call (user, "SPMDFullToShardShape"))
          continue;
        if (ps_shape_is_array (i->shape) && pp_is_manual (user->sharding)
            && !pp_is_tuple (user->sharding))
          {
            ps_sharding_free (i->sharding);
            i->sharding = pp_manual_like (user->sharding);
            return TRUE;
          }
        const PsSharding *b;
        PsSharding *s = from_user (c, i, user, aggr, &b);
        const PsSharding *r = s ? s : b;
        if (r && pp_is_manual (r))
          {
            PsSharding *n = pp_normalize_tuple (r, i->shape);
            ps_sharding_free (i->sharding);
            i->sharding = n;
            ps_sharding_free (s);
            return TRUE;
          }
        if (s)
          ps_sharding_free (s);
      }
  if (!pp_support_spatial (c, i, FALSE, c->to_params))
    return FALSE;
  gboolean improved = FALSE;
  gboolean mc = c->is_spmd && aggr > 0;
  for (guint k = 0; k < i->users->len; k++)
    {
      const PsInstr *user = g_ptr_array_index (i->users, k);
      if (user->opcode == PS_OP_RNG_BIT_GENERATOR)
        {
          PsSharding *rep = ps_sharding_replicated ();
          ps_sharding_free (i->sharding);
          i->sharding = pp_normalize_tuple (rep, i->shape);
          ps_sharding_free (rep);
          return TRUE;
        }
      const PsSharding *b;
      PsSharding *s = from_user (c, i, user, aggr, &b);
      if (b && !pp_is_custom_call (i, "ShardBarrierTo"))
        {
          improved |= maybe_improve_from (b, i, mc, FALSE);
          continue;
        }
      if (b)
        s = ps_sharding_share (b);
      if (s && pp_is_custom_call (i, "ShardBarrierTo"))
        {
          /* The barrier keeps its users' sharding from flowing on to its
           * operand: it takes a replicated sharding instead. */
          ps_sharding_free (s);
          s = pp_normalize_tuple_take (ps_sharding_replicated (), i->shape);
        }
      if (s)
        improved |= pp_maybe_improve (s, i, mc, FALSE);
    }
  return improved;
}
