/* Scaled-down copies of sharded modules (see shrink.h). */
#include "config.h"

#include "partitioner/interp/shrink.h"

#include <string.h>

#include "partitioner/ir/sharding.h"
#include "partitioner/interp/shrink_private.h"

static int64_t
shape_max_leaf_elements (const PsShape *s)
{
  if (!ps_shape_is_tuple (s))
    return ps_shape_elements (s);
  int64_t best = 0;
  for (int i = 0; i < s->n_elems; i++)
    best = MAX (best, shape_max_leaf_elements (s->elems[i]));
  return best;
}

static int64_t
module_max_elements (const PsModule *m)
{
  int64_t best = 0;
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *c = m->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        {
          const PsInstr *in = c->instrs->pdata[i];
          best = MAX (best, shape_max_leaf_elements (in->shape));
        }
    }
  return best;
}

/* Attributes that spell out a full dim follow the dim's new size. */
static void
fix_attributes (PsInstr *ni, const PsInstr *oi)
{
  if (ni->opcode == PS_OP_SLICE && ni->n_operands == 1)
    {
      const PsShape *old_op = oi->operands[0]->shape, *new_op = ni->operands[0]->shape;
      for (int d = 0; d < ni->slice_limits.n && d < old_op->rank; d++)
        {
          int64_t stride = d < ni->slice_strides.n ? ni->slice_strides.v[d] : 1;
          if (ni->slice_starts.v[d] == 0 && stride == 1 && ni->slice_limits.v[d] == old_op->dims[d])
            ni->slice_limits.v[d] = new_op->dims[d];
        }
    }
  else if (ni->opcode == PS_OP_GATHER && ni->n_operands == 2)
    {
      const PsShape *old_op = oi->operands[0]->shape, *new_op = ni->operands[0]->shape;
      for (int d = 0; d < ni->gather.slice_sizes.n && d < old_op->rank; d++)
        if (ni->gather.slice_sizes.v[d] == old_op->dims[d])
          ni->gather.slice_sizes.v[d] = new_op->dims[d];
    }
  else if (ni->opcode == PS_OP_DYNAMIC_SLICE)
    {
      const PsShape *old_op = oi->operands[0]->shape, *new_op = ni->operands[0]->shape;
      for (int d = 0; d < ni->dynamic_slice_sizes.n && d < old_op->rank; d++)
        if (ni->dynamic_slice_sizes.v[d] == old_op->dims[d])
          ni->dynamic_slice_sizes.v[d] = new_op->dims[d];
    }
}

void
ps_shrink_options_init (PsShrinkOptions *opts)
{
  memset (opts, 0, sizeof *opts);
  opts->min_size = 8;
}

PsModule *
ps_shrink_module (const PsModule *m, const PsShrinkOptions *opts, PsShrinkReport *report,
                  GError **error)
{
  PsShrinkOptions def;
  if (!opts)
    {
      ps_shrink_options_init (&def);
      opts = &def;
    }
  int64_t min_size = opts->min_size > 0 ? opts->min_size : 8;
  int64_t extra_mod = opts->num_devices > 1 ? opts->num_devices : 1;
  PsShrinkReport rep = { 0 };
  rep.max_elements_before = module_max_elements (m);

  SkShrink sh;
  sk_shrink_init (&sh, m);
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *c = m->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        {
          const PsInstr *in = c->instrs->pdata[i];
          sk_constrain (&sh, in);
          sk_note_sharding (&sh, in);
        }
    }

  /* Fold pins and shard counts into the class roots. */
  int n_nodes = (int) sh.parent->len;
  for (int n = 0; n < n_nodes; n++)
    {
      int r = sk_find (&sh, n);
      if (r == n)
        continue;
      if (NODE_PINNED (&sh, n))
        NODE_PINNED (&sh, r) = TRUE;
      int64_t a = NODE_MOD (&sh, r), b = NODE_MOD (&sh, n);
      NODE_MOD (&sh, r) = a / ps_gcd64 (a, b) * b;
    }
  /* Derived classes (merged reshape dims): der_src[root] is the class root
   * its size follows, times der_mult[root]. */
  int *der_src = g_new (int, MAX (n_nodes, 1));
  int64_t *der_mult = g_new0 (int64_t, MAX (n_nodes, 1));
  gboolean *is_src = g_new0 (gboolean, MAX (n_nodes, 1));
  for (int n = 0; n < n_nodes; n++)
    der_src[n] = -1;
  for (guint k = 0; k < sh.derivs->len; k++)
    {
      const SkDeriv *dv = &g_array_index (sh.derivs, SkDeriv, k);
      int r = sk_find (&sh, dv->node), src = sk_find (&sh, dv->src);
      if (r == src || (der_src[r] >= 0 && (der_src[r] != src || der_mult[r] != dv->mult)))
        {
          NODE_PINNED (&sh, r) = NODE_PINNED (&sh, src) = TRUE;
          if (der_src[r] >= 0)
            NODE_PINNED (&sh, der_src[r]) = TRUE;
          continue;
        }
      der_src[r] = src;
      der_mult[r] = dv->mult;
      is_src[src] = TRUE;
    }
  /* A derived class and its source are pinned together; chains are pinned. */
  for (gboolean changed = TRUE; changed;)
    {
      changed = FALSE;
      for (int r = 0; r < n_nodes; r++)
        {
          int src = der_src[r];
          if (src < 0)
            continue;
          gboolean pin = NODE_PINNED (&sh, r) != NODE_PINNED (&sh, src) || is_src[r]
                         || der_src[src] >= 0;
          if (pin && !(NODE_PINNED (&sh, r) && NODE_PINNED (&sh, src)))
            {
              NODE_PINNED (&sh, r) = NODE_PINNED (&sh, src) = TRUE;
              changed = TRUE;
            }
        }
    }
  /* The source keeps the derived class's remainders: mult * (S' - S) must
   * be a multiple of the derived class's shard counts. */
  for (int r = 0; r < n_nodes; r++)
    if (der_src[r] >= 0 && !NODE_PINNED (&sh, r))
      {
        int src = der_src[r];
        int64_t need = NODE_MOD (&sh, r) / ps_gcd64 (NODE_MOD (&sh, r), der_mult[r]);
        int64_t a = NODE_MOD (&sh, src);
        NODE_MOD (&sh, src) = a / ps_gcd64 (a, need) * need;
      }
  int64_t *new_size = g_new (int64_t, MAX (n_nodes, 1));
  for (int n = 0; n < n_nodes; n++)
    {
      int r = sk_find (&sh, n);
      int64_t s = NODE_SIZE (&sh, r);
      if (r == n)
        {
          rep.n_classes++;
          if (s > min_size && NODE_PINNED (&sh, r))
            rep.n_pinned++;
        }
      new_size[n] = s;
      if (r != n || NODE_PINNED (&sh, r) || s <= min_size || der_src[r] >= 0)
        continue;
      int64_t l = NODE_MOD (&sh, r);
      l = l / ps_gcd64 (l, extra_mod) * extra_mod;
      int64_t rem = s % l, t = rem + l;
      while (t < min_size)
        t += l;
      if (t < s)
        {
          new_size[n] = t;
          rep.n_shrunk++;
        }
    }
  for (int r = 0; r < n_nodes; r++)
    if (der_src[r] >= 0 && !NODE_PINNED (&sh, r))
      {
        new_size[r] = der_mult[r] * new_size[der_src[r]];
        if (new_size[r] < NODE_SIZE (&sh, r))
          rep.n_shrunk++;
      }
  g_free (der_src);
  g_free (der_mult);
  g_free (is_src);
  for (int n = 0; n < n_nodes; n++)
    new_size[n] = new_size[sk_find (&sh, n)];

  if (rep.n_shrunk == 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED,
                   "cannot scale the module down: every dimension over %" G_GINT64_FORMAT
                   " elements is fixed by an attribute or literal the program depends on",
                   min_size);
      g_free (new_size);
      sk_shrink_clear (&sh);
      return NULL;
    }

  PsModule *out = ps_module_clone (m);
  g_clear_pointer (&out->entry_layout, g_free);
  for (guint k = 0; k < out->computations->len; k++)
    {
      PsComputation *c = out->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        {
          PsInstr *in = c->instrs->pdata[i];
          GPtrArray *leaves = ps_shape_leaves (in->shape);
          for (guint l = 0; l < leaves->len; l++)
            {
              PsShape *ls = leaves->pdata[l];
              int li = sk_leaf_index (&sh, in, (int) l);
              if (li < 0 || ls->etype == PS_TOKEN)
                continue;
              int first = g_array_index (sh.leaf_node, int, li);
              for (int d = 0; d < ls->rank; d++)
                ls->dims[d] = new_size[first + d];
            }
          g_ptr_array_free (leaves, TRUE);
        }
    }
  for (guint k = 0; k < out->computations->len; k++)
    {
      PsComputation *c = out->computations->pdata[k];
      const PsComputation *oc = m->computations->pdata[k];
      for (guint i = 0; i < c->instrs->len; i++)
        fix_attributes (c->instrs->pdata[i], oc->instrs->pdata[i]);
    }
  g_free (new_size);
  sk_shrink_clear (&sh);

  GError *ve = NULL;
  if (!ps_module_validate (out, NULL, &ve))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED, "cannot scale the module down: %s",
                   ve->message);
      g_error_free (ve);
      ps_module_free (out);
      return NULL;
    }
  rep.max_elements_after = module_max_elements (out);
  if (report)
    *report = rep;
  return out;
}

/* ---- comparing two partitioned programs ------------------------------------ */

static gboolean
ints_equal (const PsInts *a, const PsInts *b)
{
  return a->n == b->n && (a->n == 0 || memcmp (a->v, b->v, sizeof (int64_t) * (size_t) a->n) == 0);
}

static gboolean
shape_ranks_equal (const PsShape *a, const PsShape *b)
{
  if (a->etype != b->etype)
    return FALSE;
  if (a->etype == PS_TUPLE)
    {
      if (a->n_elems != b->n_elems)
        return FALSE;
      for (int i = 0; i < a->n_elems; i++)
        if (!shape_ranks_equal (a->elems[i], b->elems[i]))
          return FALSE;
      return TRUE;
    }
  return a->rank == b->rank;
}

static char *
instr_difference (const PsInstr *a, const PsInstr *b)
{
  if (a->opcode != b->opcode)
    return g_strdup_printf ("%s is a %s where the other program has %s (%s)", a->name,
                            ps_opcode_name (a->opcode), b->name, ps_opcode_name (b->opcode));
  if (a->n_operands != b->n_operands || !shape_ranks_equal (a->shape, b->shape))
    return g_strdup_printf ("%s (%s) has other operands or rank than %s", a->name,
                            ps_opcode_name (a->opcode), b->name);
  for (int j = 0; j < a->n_operands; j++)
    {
      const PsInstr *oa = a->operands[j], *ob = b->operands[j];
      if (oa->opcode != ob->opcode || !shape_ranks_equal (oa->shape, ob->shape))
        return g_strdup_printf ("operand %d of %s differs from that of %s", j, a->name, b->name);
    }
  if (ps_opcode_is_collective (a->opcode)
      && (a->n_groups != b->n_groups || a->group_size != b->group_size
          || (a->n_groups * a->group_size > 0
              && memcmp (a->replica_groups, b->replica_groups,
                         sizeof (int64_t) * (size_t) (a->n_groups * a->group_size)) != 0)
          || a->n_pairs != b->n_pairs
          || (a->n_pairs > 0
              && memcmp (a->source_target_pairs, b->source_target_pairs,
                         sizeof (int64_t) * 2 * (size_t) a->n_pairs) != 0)))
    return g_strdup_printf ("%s (%s) has other device groups than %s", a->name,
                            ps_opcode_name (a->opcode), b->name);
  if (!ints_equal (&a->dimensions, &b->dimensions))
    return g_strdup_printf ("%s (%s) has other dimensions than %s", a->name,
                            ps_opcode_name (a->opcode), b->name);
  return NULL;
}

gboolean
ps_shrink_same_program (const PsModule *a, const PsModule *b, char **why)
{
  char *diff = NULL;
  if (a->computations->len != b->computations->len)
    diff = g_strdup_printf ("%u computations where the other program has %u",
                            a->computations->len, b->computations->len);
  for (guint k = 0; !diff && k < a->computations->len; k++)
    {
      const PsComputation *ca = a->computations->pdata[k], *cb = b->computations->pdata[k];
      if (ca->instrs->len != cb->instrs->len)
        {
          diff = g_strdup_printf ("computation %s has %u instructions where the other program has %u",
                                  ca->name, ca->instrs->len, cb->instrs->len);
          break;
        }
      for (guint i = 0; !diff && i < ca->instrs->len; i++)
        diff = instr_difference (ca->instrs->pdata[i], cb->instrs->pdata[i]);
    }
  if (why)
    *why = diff;
  else
    g_free (diff);
  return diff == NULL;
}

/* One attempt of ps_shrink_verify with fixed shrink options. */
static gboolean
shrink_verify_once (const PsModule *sharded, const PsModule *partitioned, int64_t num_devices,
                    const PsSpmdOptions *spmd_opts, const PsShrinkOptions *shrink_opts,
                    const PsVerifyOptions *verify_opts, PsVerifyResult *result,
                    PsShrinkReport *report, GError **error)
{
  PsShrinkReport rep;
  g_autoptr (PsModule) small = ps_shrink_module (sharded, shrink_opts, &rep, error);
  if (!small)
    return FALSE;
  if (report)
    *report = rep;
  PsSpmdOptions so;
  if (spmd_opts)
    so = *spmd_opts;
  else
    ps_spmd_options_init (&so);
  so.report = NULL;
  g_autoptr (PsModule) part = ps_spmd_partition (small, num_devices, &so, error);
  if (!part)
    {
      g_prefix_error (error, "scaled copy: ");
      return FALSE;
    }
  /* Same decisions: compare the two programs before CSE, which merges
   * values of equal shapes and so merges more in the copy. */
  const PsModule *a = part, *b = partitioned;
  g_autoptr (PsModule) raw_small = NULL;
  g_autoptr (PsModule) raw_orig = NULL;
  if (so.cse)
    {
      so.cse = FALSE;
      raw_small = ps_spmd_partition (small, num_devices, &so, error);
      raw_orig = raw_small ? ps_spmd_partition (sharded, num_devices, &so, error) : NULL;
      if (!raw_orig)
        return FALSE;
      a = raw_small;
      b = raw_orig;
    }
  char *why = NULL;
  if (!ps_shrink_same_program (a, b, &why))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED,
                   "the scaled copy partitions differently from the original: %s", why);
      g_free (why);
      return FALSE;
    }
  if (!ps_verify_spmd (small, part, num_devices, verify_opts, result, error))
    {
      g_prefix_error (error, "scaled copy: ");
      return FALSE;
    }
  return TRUE;
}

gboolean
ps_shrink_verify (const PsModule *sharded, const PsModule *partitioned, int64_t num_devices,
                  const PsSpmdOptions *spmd_opts, const PsShrinkOptions *shrink_opts,
                  const PsVerifyOptions *verify_opts, PsVerifyResult *result,
                  PsShrinkReport *report, GError **error)
{
  if (shrink_opts)
    return shrink_verify_once (sharded, partitioned, num_devices, spmd_opts, shrink_opts,
                               verify_opts, result, report, error);
  PsShrinkOptions so;
  ps_shrink_options_init (&so);
  so.num_devices = num_devices;
  GError *first = NULL;
  if (num_devices > 1
      && shrink_verify_once (sharded, partitioned, num_devices, spmd_opts, &so, verify_opts,
                             result, report, &first))
    return TRUE;
  /* A failure other than "cannot do it this way" is final. */
  if (first && !g_error_matches (first, PS_ERROR, PS_ERROR_UNSUPPORTED)
      && !g_error_matches (first, PS_ERROR, PS_ERROR_LIMIT))
    {
      g_propagate_error (error, first);
      return FALSE;
    }
  so.num_devices = 0;
  GError *second = NULL;
  gboolean ok = shrink_verify_once (sharded, partitioned, num_devices, spmd_opts, &so, verify_opts,
                                    result, report, &second);
  /* Still too large: the smallest copy (dims down to 2 where the shard
   * counts allow), e.g. for a fallback that runs the whole op per device. */
  if (!ok && g_error_matches (second, PS_ERROR, PS_ERROR_LIMIT))
    {
      g_clear_error (&second);
      so.min_size = 2;
      ok = shrink_verify_once (sharded, partitioned, num_devices, spmd_opts, &so, verify_opts,
                               result, report, &second);
    }
  if (!ok)
    {
      if (first && strcmp (first->message, second->message) != 0)
        g_prefix_error (&second, "%s; ", first->message);
      g_propagate_error (error, second);
    }
  else
    g_clear_error (&second);
  g_clear_error (&first);
  return ok;
}
