/* The SPMD partitioner driver: walks each computation in post order, asks the
 * op's handler for a partitioned result, reshards it to the instruction's
 * own sharding, and builds the per-device module. Control flow (while,
 * conditional, call) partitions the called computations recursively with
 * the shardings at their boundaries; reducers and comparators are scalar
 * computations copied verbatim. Ops without a handler, and cases a handler
 * declines, take the replicate-then-slice fallback. */
#include "config.h"

#include <stdarg.h>
#include <string.h>

#include "partitioner/ir/cse.h"
#include "partitioner/spmd/spmd_private.h"

void
ps_spmd_options_init (PsSpmdOptions *opts)
{
  memset (opts, 0, sizeof *opts);
  opts->use_all_gather = TRUE;
  opts->conv_halo_exchange_always_on_lhs = TRUE;
  opts->windowed_einsum_threshold_bytes = -1;
  opts->cse = TRUE;
}

const PsParamSpec ps_spmd_param_windowed_einsum = {
  .section = "options", .key = "windowed_einsum", .type = PS_PARAM_INT, .def = "-1",
  .doc = "Partition dots whose operand would be all-gathered to more than this many bytes per "
         "device as windowed einsums (0: all such dots; -1: off)",
  .min = -1, .max = G_MAXINT64
};

void
ps_spmd_report_init (PsSpmdReport *report)
{
  memset (report, 0, sizeof *report);
  report->fallback_ops = g_hash_table_new (g_str_hash, g_str_equal);
}

void
ps_spmd_report_clear (PsSpmdReport *report)
{
  if (report->fallback_ops)
    g_hash_table_destroy (report->fallback_ops);
  memset (report, 0, sizeof *report);
}

/* ---- computations ---- */

static PsComputation *partition_comp (SpModule *m, const PsComputation *src,
                                      PsSharding *const *param_shardings,
                                      const PsSharding *root_sharding);

SpPVal *
sp_fallback (SpComp *c, const PsInstr *in)
{
  int n = in->n_operands;
  PsInstr *ops[n > 0 ? n : 1];
  /* An op whose operands and result are all replicated is partitioned
   * exactly by running it: not a fallback worth reporting. */
  gboolean degraded = !ps_sharding_is_replicated (sp_sharding_of (in))
                      && !ps_sharding_is_maximal (sp_sharding_of (in));
  for (int i = 0; i < n; i++)
    {
      SpPVal *v = sp_operand (c, in, i);
      if (!ps_sharding_is_replicated (v->sharding) && !ps_sharding_is_maximal (v->sharding))
        degraded = TRUE;
      ops[i] = sp_reshard (c, v, sp_replicated ());
    }
  if (degraded)
    sp_note_fallback (c, in->opcode);
  PsInstr *x = sp_clone_with (c, in, ps_shape_copy (in->shape), n, ops);
  return sp_pval_new (x, sp_replicated (), in->shape);
}

/* The sharding an instruction's value must end in, expanded over tuples;
 * borrowed from the instruction unless it had to be made (then *owned
 * holds it for the caller to free): copying each instruction's 2048-device
 * array was a seventh of the stage. */
static const PsSharding *
target_view (const PsInstr *in, PsSharding **owned)
{
  const PsSharding *s = sp_sharding_of (in);
  *owned = NULL;
  if (ps_shape_is_tuple (in->shape))
    return *owned = ps_sharding_expand_to_shape (s, in->shape);
  if (ps_sharding_is_tuple (s))
    return *owned = ps_sharding_leaf (s, 0);
  return s;
}

/* The same, always a new copy. */
static PsSharding *
target_of (const PsInstr *in)
{
  const PsSharding *s = sp_sharding_of (in);
  if (ps_shape_is_tuple (in->shape))
    return ps_sharding_expand_to_shape (s, in->shape);
  if (ps_sharding_is_tuple (s))
    return ps_sharding_leaf (s, 0);
  return ps_sharding_copy (s);
}

static gboolean
is_manual (const PsSharding *s)
{
  if (!s)
    return FALSE;
  if (s->kind == PS_SHARDING_TUPLE)
    {
      for (int i = 0; i < s->n_elems; i++)
        if (is_manual (s->elems[i]))
          return TRUE;
      return FALSE;
    }
  return s->kind == PS_SHARDING_MANUAL || ps_sharding_has_manual_subgroup (s);
}

/* Elementwise ops: every operand in the output's sharding (scalar operands
 * of clamp and friends replicated), the op itself unchanged. */
static SpPVal *
handle_elementwise (SpComp *c, const PsInstr *in, const PsSharding *target)
{
  if (target->kind == PS_SHARDING_TUPLE)
    return NULL;
  int n = in->n_operands;
  PsInstr *ops[n > 0 ? n : 1];
  for (int i = 0; i < n; i++)
    {
      SpPVal *v = sp_operand (c, in, i);
      const PsSharding *want = v->full->rank == in->shape->rank ? target : sp_replicated ();
      ops[i] = sp_reshard (c, v, want);
    }
  g_autoptr (PsShape) local = ps_sharding_tile_shape (target, in->shape);
  PsShape *ls = ps_shape_copy (local);
  ls->etype = in->shape->etype;
  PsInstr *x = sp_clone_with (c, in, ls, n, ops);
  return sp_pval_new (x, target, in->shape);
}

/* A copy of a tuple: the operand moved to the copy's sharding element by
 * element, then copied. */
static SpPVal *
handle_tuple_copy (SpComp *c, const PsInstr *in, const PsSharding *target)
{
  if (in->n_operands != 1 || !ps_shape_is_tuple (in->shape))
    return NULL;
  PsInstr *x = sp_reshard (c, sp_operand (c, in, 0), target);
  if (!x)
    return NULL;
  return sp_pval_new (sp_copy (c, x), target, in->shape);
}

static SpPVal *
handle_tuple (SpComp *c, const PsInstr *in)
{
  int n = in->n_operands;
  PsInstr *ops[n > 0 ? n : 1];
  GPtrArray *leaves = g_ptr_array_new ();
  for (int i = 0; i < n; i++)
    {
      SpPVal *v = sp_operand (c, in, i);
      ops[i] = v->hlo;
      int nl = ps_shape_leaf_count (v->full);
      for (int k = 0; k < nl; k++)
        g_ptr_array_add (leaves, ps_sharding_leaf (v->sharding, k));
    }
  PsSharding *ts = ps_sharding_tuple ((int) leaves->len, (PsSharding **) leaves->pdata);
  g_ptr_array_free (leaves, TRUE);
  PsInstr *x = sp_tuple (c, n, ops);
  SpPVal *r = sp_pval_new (x, ts, in->shape);
  ps_sharding_free (ts);
  return r;
}

static SpPVal *
handle_gte (SpComp *c, const PsInstr *in)
{
  SpPVal *t = sp_operand (c, in, 0);
  int64_t idx = in->tuple_index;
  int first = 0;
  for (int64_t i = 0; i < idx; i++)
    first += ps_shape_leaf_count (t->full->elems[i]);
  const PsShape *es = t->full->elems[idx];
  int nl = ps_shape_leaf_count (es);
  PsSharding *s;
  if (!ps_shape_is_tuple (es))
    s = ps_sharding_leaf (t->sharding, first);
  else
    {
      PsSharding **e = g_new (PsSharding *, nl > 0 ? nl : 1);
      for (int k = 0; k < nl; k++)
        e[k] = ps_sharding_leaf (t->sharding, first + k);
      s = ps_sharding_tuple (nl, e);
      g_free (e);
    }
  PsInstr *x = sp_gte (c, t->hlo, idx);
  SpPVal *r = sp_pval_new (x, s, es);
  ps_sharding_free (s);
  return r;
}

/* Ops inside a manual region already have local shapes: copy them. */
static gboolean
fully_manual (const PsSharding *s)
{
  if (s->kind == PS_SHARDING_TUPLE)
    {
      for (int i = 0; i < s->n_elems; i++)
        if (!fully_manual (s->elems[i]))
          return FALSE;
      return TRUE;
    }
  return s->kind == PS_SHARDING_MANUAL;
}

/* A cross-partition all-reduce in a partially manual region is copied as
 * it is, so its groups must only combine devices that hold the same tile
 * of the data dims (they differ in the manual dims only): otherwise the
 * devices would add pieces of different parts of the array. XLA rejects
 * the same programs. */
static gboolean
check_manual_all_reduce (SpComp *c, const PsInstr *in, const PsSharding *target)
{
  if (in->opcode != PS_OP_ALL_REDUCE || !in->channel_id || target->kind != PS_SHARDING_TILED
      || !ps_sharding_has_manual_subgroup (target))
    return TRUE;
  if (!in->use_global_device_ids)
    {
      sp_fail (c, PS_ERROR_UNSUPPORTED, "a cross-partition all-reduce in a partially manual "
               "region must use global device ids");
      return FALSE;
    }
  int nt = target->n_tile_dims, first = nt - target->n_subgroups;
  int64_t n = target->n_devices;
  int n_groups = in->n_groups > 0 && in->group_size > 0 ? in->n_groups : 1;
  int size = in->n_groups > 0 && in->group_size > 0 ? in->group_size : (int) n;
  int64_t *idx0 = g_new0 (int64_t, nt + 1), *idx = g_new0 (int64_t, nt + 1);
  gboolean ok = TRUE;
  for (int g = 0; g < n_groups && ok; g++)
    for (int k = 0; k < size && ok; k++)
      {
        int64_t dev = in->n_groups > 0 && in->group_size > 0
                      ? in->replica_groups[(gsize) g * size + k] : k;
        if (dev < 0)
          break; /* the padding of groups of different sizes */
        if (!ps_sharding_device_index (target, dev, k == 0 ? idx0 : idx))
          {
            sp_fail (c, PS_ERROR_INVALID, "all-reduce: device %" G_GINT64_FORMAT
                     " of its replica groups is not in its sharding", dev);
            ok = FALSE;
            break;
          }
        for (int d = 0; d < nt && k > 0 && ok; d++)
          {
            gboolean manual_dim = d >= first
                                  && target->subgroup_kinds[d - first] == PS_SUBGROUP_MANUAL;
            if (!manual_dim && idx[d] != idx0[d])
              {
                sp_fail (c, PS_ERROR_INVALID,
                         "manual all-reduce across devices that belong to different manual "
                         "subgroups (devices %" G_GINT64_FORMAT " and %" G_GINT64_FORMAT
                         " hold different tiles)",
                         in->n_groups > 0 ? in->replica_groups[(gsize) g * size] : 0, dev);
                ok = FALSE;
              }
          }
      }
  g_free (idx0);
  g_free (idx);
  return ok;
}

/* Fully manual ops already have local shapes: copy them. Partially manual
 * ones (a manual subgroup) are handled when every operand is laid out
 * like the result, which covers the elementwise ops of such regions. */
static SpPVal *
handle_manual (SpComp *c, const PsInstr *in, const PsSharding *target)
{
  int n = in->n_operands;
  PsInstr *ops[n > 0 ? n : 1];
  gboolean full = fully_manual (target);
  if (!check_manual_all_reduce (c, in, target))
    return NULL;
  if (!full && in->opcode == PS_OP_REDUCE)
    {
      SpPVal *r = sp_handle_manual_reduce (c, in);
      if (r || sp_failed (c))
        return r;
    }
  /* The branches would be copied with their full-size parameters while the
   * operands are local pieces: an invalid program. Not handled yet. */
  if (!full && in->opcode == PS_OP_CONDITIONAL)
    {
      sp_fail (c, PS_ERROR_UNSUPPORTED,
               "conditional with a partially manual sharding is not supported");
      return NULL;
    }
  for (int i = 0; i < n; i++)
    {
      SpPVal *v = sp_operand (c, in, i);
      ops[i] = v->hlo;
      if (!full && ps_shape_is_array (v->full) && v->full->rank == in->shape->rank
          && ps_shape_is_array (in->shape) && !ps_sharding_equal_layout (v->sharding, target))
        ops[i] = sp_reshard (c, v, target);
      else if (!full && !ps_sharding_equal_layout (v->sharding, target)
               && !ps_sharding_is_replicated (v->sharding))
        {
          sp_fail (c, PS_ERROR_UNSUPPORTED,
                   "%s with a partially manual sharding whose operands are laid out "
                   "differently is not supported", ps_opcode_name (in->opcode));
          return NULL;
        }
    }
  PsShape *shape = full ? ps_shape_copy (in->shape) : ps_sharding_tile_shape (target, in->shape);
  PsInstr *x = sp_clone_with (c, in, shape, n, ops);
  return sp_pval_new (x, target, in->shape);
}

static SpPVal *
handle_custom_call (SpComp *c, const PsInstr *in, const PsSharding *target)
{
  const char *t = in->custom_call_target ? in->custom_call_target : "";
  if (strcmp (t, "Sharding") == 0 && in->n_operands == 1)
    {
      SpPVal *v = sp_operand (c, in, 0);
      if (is_manual (target) || is_manual (v->sharding))
        return sp_pval_new (sp_copy (c, v->hlo), target, in->shape);
      PsInstr *x = sp_reshard (c, v, target);
      return sp_pval_new (sp_copy (c, x), target, in->shape);
    }
  if (strcmp (t, "SPMDFullToShardShape") == 0 && in->n_operands == 1)
    {
      SpPVal *v = sp_operand (c, in, 0);
      PsInstr *x = v->hlo;
      if (!ps_shape_equal (x->shape, in->shape))
        {
          sp_fail (c, PS_ERROR_UNSUPPORTED,
                   "SPMDFullToShardShape: operand's local shape does not match %s",
                   ps_shape_to_string (in->shape, FALSE));
          return NULL;
        }
      return sp_pval_new (sp_copy (c, x), target, in->shape);
    }
  /* Any other custom call in a manual region (TopK, a user's kernel...)
   * already works on local shapes, like every manual op. */
  if (is_manual (target) && strcmp (t, "SPMDFullToShardShape") != 0
      && strcmp (t, "SPMDShardToFullShape") != 0)
    return handle_manual (c, in, target);
  if (strcmp (t, "SPMDShardToFullShape") == 0 && in->n_operands == 1)
    {
      SpPVal *v = sp_operand (c, in, 0);
      g_autoptr (PsShape) local = ps_sharding_tile_shape (target, in->shape);
      if (!ps_shape_equal (local, v->hlo->shape))
        {
          sp_fail (c, PS_ERROR_UNSUPPORTED,
                   "SPMDShardToFullShape: operand shape does not match the local shape");
          return NULL;
        }
      return sp_pval_new (sp_copy (c, v->hlo), target, in->shape);
    }
  return NULL;
}

static SpPVal *
handle_while (SpComp *c, const PsInstr *in, const PsSharding *target)
{
  SpPVal *init = sp_operand (c, in, 0);
  PsInstr *x = sp_reshard (c, init, target);
  PsSharding *ps[1] = { (PsSharding *) target };
  PsComputation *cond = partition_comp (c->m, in->called[0], ps, sp_replicated ());
  PsComputation *body = partition_comp (c->m, in->called[1], ps, target);
  if (!cond || !body)
    return NULL;
  PsInstr *w = sp_add1 (c, PS_OP_WHILE, ps_shape_copy (x->shape), x);
  sp_copy_attrs (w, in);
  PsComputation *called[2] = { cond, body };
  ps_instr_set_called (w, 2, called);
  return sp_pval_new (w, target, in->shape);
}

static SpPVal *
handle_call_like (SpComp *c, const PsInstr *in, const PsSharding *target)
{
  /* conditional: operand 0 selects, operand i + 1 feeds branch i;
   * call: operand i is parameter i of the callee. */
  gboolean cond = in->opcode == PS_OP_CONDITIONAL;
  int n = in->n_operands;
  PsInstr *ops[n > 0 ? n : 1];
  PsComputation *called[in->n_called > 0 ? in->n_called : 1];
  if (cond)
    ops[0] = sp_reshard (c, sp_operand (c, in, 0), sp_replicated ());
  for (int b = 0; b < in->n_called; b++)
    {
      const PsComputation *callee = in->called[b];
      int np = (int) callee->params->len;
      PsSharding *ps[np > 0 ? np : 1];
      for (int k = 0; k < np; k++)
        {
          const PsInstr *p = g_ptr_array_index (callee->params, k);
          ps[k] = target_of (p);
          int oi = cond ? b + 1 : k;
          if (oi < n)
            ops[oi] = sp_reshard (c, sp_operand (c, in, oi), ps[k]);
        }
      called[b] = partition_comp (c->m, callee, ps, target);
      for (int k = 0; k < np; k++)
        ps_sharding_free (ps[k]);
      if (!called[b])
        return NULL;
    }
  g_autoptr (PsShape) local = ps_sharding_tile_shape (target, in->shape);
  PsInstr *x = sp_add (c, in->opcode, ps_shape_copy (local), n, ops);
  sp_copy_attrs (x, in);
  ps_instr_set_called (x, in->n_called, called);
  return sp_pval_new (x, target, in->shape);
}

static SpPVal *
handle_constant (SpComp *c, const PsInstr *in)
{
  PsInstr *x = sp_clone_with (c, in, ps_shape_copy (in->shape), 0, NULL);
  return sp_pval_new (x, sp_replicated (), in->shape);
}

static SpPVal *
dispatch (SpComp *c, const PsInstr *in, const PsSharding *target)
{
  /* These only carry values and shardings, manual or not. */
  if (in->opcode == PS_OP_CONSTANT)
    return handle_constant (c, in);
  if (in->opcode == PS_OP_TUPLE)
    return handle_tuple (c, in);
  if (in->opcode == PS_OP_GET_TUPLE_ELEMENT)
    return handle_gte (c, in);
  if (is_manual (target) && in->opcode != PS_OP_CUSTOM_CALL)
    return handle_manual (c, in, target);
  switch (in->opcode)
    {
    case PS_OP_CONSTANT: return handle_constant (c, in);
    case PS_OP_TUPLE: return handle_tuple (c, in);
    case PS_OP_GET_TUPLE_ELEMENT: return handle_gte (c, in);
    case PS_OP_WHILE: return handle_while (c, in, target);
    case PS_OP_CONDITIONAL:
    case PS_OP_CALL: case PS_OP_FUSION: return handle_call_like (c, in, target);
    case PS_OP_CUSTOM_CALL: return handle_custom_call (c, in, target);
    case PS_OP_COPY:
      if (target->kind == PS_SHARDING_TUPLE)
        return handle_tuple_copy (c, in, target);
      return handle_elementwise (c, in, target);
    case PS_OP_DOT: case PS_OP_RAGGED_DOT: return sp_handle_dot (c, in);
    case PS_OP_CONVOLUTION: return sp_handle_convolution (c, in);
    case PS_OP_REDUCE_WINDOW: return sp_handle_reduce_window (c, in);
    case PS_OP_BROADCAST: return sp_handle_broadcast (c, in);
    case PS_OP_TRANSPOSE: return sp_handle_transpose (c, in);
    case PS_OP_RESHAPE: return sp_handle_reshape (c, in);
    case PS_OP_REDUCE: return sp_handle_reduce (c, in);
    case PS_OP_IOTA: return sp_handle_iota (c, in);
    case PS_OP_SLICE: return sp_handle_slice (c, in);
    case PS_OP_PAD: return sp_handle_pad (c, in);
    case PS_OP_CONCATENATE: return sp_handle_concatenate (c, in);
    case PS_OP_DYNAMIC_SLICE: return sp_handle_dynamic_slice (c, in);
    case PS_OP_DYNAMIC_UPDATE_SLICE: return sp_handle_dynamic_update_slice (c, in);
    case PS_OP_REVERSE: return sp_handle_reverse (c, in);
    case PS_OP_SORT: return sp_handle_sort (c, in);
    case PS_OP_GATHER: return sp_handle_gather (c, in);
    case PS_OP_SCATTER: return sp_handle_scatter (c, in);
    case PS_OP_BITCAST_CONVERT: return sp_handle_bitcast_convert (c, in);
    case PS_OP_BATCH_NORM_TRAINING: case PS_OP_BATCH_NORM_INFERENCE: case PS_OP_BATCH_NORM_GRAD:
      return sp_handle_batch_norm (c, in);
    case PS_OP_OPTIMIZATION_BARRIER:
      /* one array through the barrier: its shards, as an identity */
      if (ps_shape_is_array (in->shape) && in->n_operands == 1)
        return handle_elementwise (c, in, target);
      break;
    default:
      break;
    }
  if (ps_opcode_is_elementwise (in->opcode) && ps_shape_is_array (in->shape))
    return handle_elementwise (c, in, target);
  return NULL;
}

static PsComputation *
partition_comp (SpModule *m, const PsComputation *src, PsSharding *const *param_shardings,
                const PsSharding *root_sharding)
{
  if (m->error)
    return NULL;
  SpComp c = { 0 };
  c.m = m;
  c.src = src;
  g_autofree char *name = sp_fresh_comp_name (m, src->name);
  c.out = ps_computation_new (m->out, name);
  c.out->execution_thread = g_strdup (src->execution_thread);
  c.vals = g_hash_table_new_full (g_direct_hash, g_direct_equal, NULL,
                                  (GDestroyNotify) sp_pval_free);
  g_autoptr (GPtrArray) order = ps_computation_post_order (src);
  for (guint i = 0; i < order->len && !m->error; i++)
    {
      const PsInstr *in = g_ptr_array_index (order, i);
      c.cur = in;
      g_autoptr (PsSharding) target_own = NULL;
      const PsSharding *target = target_view (in, &target_own);
      SpPVal *r = NULL;
      guint first_new = c.out->instrs->len;
      if (in->opcode == PS_OP_PARAMETER)
        {
          const PsSharding *ps = param_shardings ? param_shardings[in->parameter_number] : target;
          g_autoptr (PsShape) local = fully_manual (ps) ? ps_shape_copy (in->shape)
                                                        : ps_sharding_tile_shape (ps, in->shape);
          PsInstr *p = ps_computation_add_instr (c.out, PS_OP_PARAMETER, in->name,
                                                 ps_shape_copy (local), 0, NULL);
          sp_copy_attrs (p, in);
          sp_set_param (c.out, p, in->parameter_number);
          r = sp_pval_new (p, ps, in->shape);
        }
      else
        {
          r = dispatch (&c, in, target);
          if (!r && !m->error)
            r = sp_fallback (&c, in);
        }
      if (!r)
        break;
      if (!m->error && !ps_sharding_equal_layout (r->sharding, target))
        {
          SpPVal *t = sp_reshard_pval (&c, r, target);
          sp_pval_free (r);
          r = t;
        }
      /* Everything emitted for an instruction carries its metadata, as
       * XLA's SpmdBuilder does, so a profile of the partitioned program
       * still names the source op (op_name) of each local op and of the
       * collectives that reshard its operands. */
      if (in->metadata)
        for (guint k = first_new; k < c.out->instrs->len; k++)
          {
            PsInstr *x = c.out->instrs->pdata[k];
            if (x->metadata == NULL)
              x->metadata = g_strdup (in->metadata);
          }
      g_hash_table_insert (c.vals, (gpointer) in, r);
    }
  if (m->error)
    {
      g_hash_table_destroy (c.vals);
      return NULL;
    }
  c.cur = src->root;
  SpPVal *rv = g_hash_table_lookup (c.vals, src->root);
  PsInstr *root = rv->hlo;
  if (root_sharding)
    root = sp_reshard (&c, rv, root_sharding);
  /* A root that is also a parameter or another computation's value would
   * alias; give the computation its own root instruction. */
  c.out->root = root;
  g_hash_table_destroy (c.vals);
  if (m->error)
    return NULL;
  g_ptr_array_add (m->helper_comps, c.out);
  return c.out;
}

/* The size of the first tile assignment (tuple leaves included) that does
 * not have exactly num_devices entries, or 0 when all do. */
static int64_t
tile_assignment_size_mismatch (const PsSharding *s, int64_t num_devices)
{
  if (s->kind == PS_SHARDING_TUPLE)
    {
      for (int i = 0; i < s->n_elems; i++)
        {
          int64_t t = tile_assignment_size_mismatch (s->elems[i], num_devices);
          if (t > 0)
            return t;
        }
      return 0;
    }
  if (s->kind == PS_SHARDING_TILED && s->n_devices != num_devices)
    return s->n_devices;
  return 0;
}

/* ps_sharding_min_devices, each distinct tile array scanned once (`seen`
 * holds the tiled shardings already scanned, borrowed, with their count
 * + 1): a 2048-device scan per instruction was a visible part of the
 * stage. */
static int64_t
min_devices (const PsSharding *s, GHashTable *seen)
{
  if (s->kind == PS_SHARDING_TUPLE)
    {
      int64_t m = 0;
      for (int i = 0; i < s->n_elems; i++)
        m = MAX (m, min_devices (s->elems[i], seen));
      return m;
    }
  if (s->kind != PS_SHARDING_TILED)
    return ps_sharding_min_devices (s);
  gpointer v = g_hash_table_lookup (seen, s);
  if (v)
    return (int64_t) GPOINTER_TO_SIZE (v) - 1;
  int64_t m = ps_sharding_min_devices (s);
  g_hash_table_insert (seen, (gpointer) s, GSIZE_TO_POINTER ((gsize) m + 1));
  return m;
}

PsModule *
ps_spmd_partition (const PsModule *sharded, int64_t num_devices, const PsSpmdOptions *opts,
                   GError **error)
{
  g_return_val_if_fail (sharded != NULL && sharded->entry != NULL, NULL);
  if (num_devices < 1)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--devices must be at least 1 (got %"
                   G_GINT64_FORMAT ")", num_devices);
      return NULL;
    }
  /* Every sharding must fit the device count, and a tile assignment must
   * name every device (as XLA's HloSharding::Validate requires): one over a
   * subset would leave devices out of the groups of its collectives. */
  g_autoptr (GHashTable) seen = g_hash_table_new (sp_sharding_layout_hash,
                                                  sp_sharding_layout_same);
  for (guint k = 0; k < sharded->computations->len; k++)
    {
      const PsComputation *comp = g_ptr_array_index (sharded->computations, k);
      for (guint i = 0; i < comp->instrs->len; i++)
        {
          const PsInstr *in = g_ptr_array_index (comp->instrs, i);
          if (!in->sharding)
            continue;
          if (min_devices (in->sharding, seen) > num_devices)
            {
              ps_instr_error (error, PS_ERROR_INVALID, in,
                              "sharding needs %" G_GINT64_FORMAT " devices but the program runs on %" G_GINT64_FORMAT,
                              ps_sharding_min_devices (in->sharding), num_devices);
              return NULL;
            }
          int64_t tiles = tile_assignment_size_mismatch (in->sharding, num_devices);
          if (tiles > 0)
            {
              ps_instr_error (error, PS_ERROR_INVALID, in,
                              "the sharding's tile assignment names %" G_GINT64_FORMAT
                              " devices but the program runs on %" G_GINT64_FORMAT " (every device must appear once)",
                              tiles, num_devices);
              return NULL;
            }
        }
    }
  SpModule m = { 0 };
  m.src = sharded;
  m.n = num_devices;
  if (opts)
    m.opts = *opts;
  else
    ps_spmd_options_init (&m.opts);
  m.next_channel = 1;
  m.out = ps_module_new (sharded->name);
  m.out->num_partitions = num_devices;
  /* Errors of later stages (memory, lowering) name the file it came from. */
  m.out->source_name = g_strdup (sharded->source_name);
  /* Every device's program keeps the entry's parameters and results, so
   * the donations stay the same. */
  ps_module_copy_aliases (m.out, sharded);
  m.comp_map = g_hash_table_new (g_direct_hash, g_direct_equal);
  m.reducers = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  m.helper_comps = g_ptr_array_new ();

  const PsComputation *entry = sharded->entry;
  int np = (int) entry->params->len;
  PsSharding **ps = g_new0 (PsSharding *, np + 1);
  for (int k = 0; k < np; k++)
    ps[k] = target_of (g_ptr_array_index (entry->params, k));
  g_autoptr (PsSharding) rs = target_of (entry->root);
  gpointer saved_memo;
  sp_memo_push (&saved_memo);
  PsComputation *out_entry = partition_comp (&m, entry, ps, rs);
  sp_memo_pop (saved_memo);
  for (int k = 0; k < np; k++)
    ps_sharding_free (ps[k]);
  g_free (ps);

  PsModule *result = NULL;
  if (out_entry && !m.error)
    {
      out_entry->is_entry = TRUE;
      m.out->entry = out_entry;
      /* Callees before callers: helper_comps lists computations in the
       * order they were completed. */
      g_ptr_array_set_size (m.out->computations, 0);
      for (guint i = 0; i < m.helper_comps->len; i++)
        g_ptr_array_add (m.out->computations, g_ptr_array_index (m.helper_comps, i));
      result = m.out;
      if (m.opts.cse)
        {
          PsCseStats cs;
          ps_cse_module (result, &cs);
          if (m.opts.report)
            m.opts.report->n_cse_removed = cs.removed;
        }
    }
  else
    {
      if (m.error)
        g_propagate_error (error, m.error);
      else
        g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED, "partitioning failed");
      /* Computations not completed are still in out->computations. */
      ps_module_free (m.out);
    }
  g_hash_table_destroy (m.comp_map);
  g_hash_table_destroy (m.reducers);
  g_ptr_array_free (m.helper_comps, TRUE);
  return result;
}
