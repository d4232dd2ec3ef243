/* Merging and ordering of shardings for the propagation pass, with the
 * semantics of XLA's hlo_sharding_util: MergeSharding,
 * IsShardingMoreSpecific, IsSubTilingOrEqualSharding,
 * ReturnImprovedSharding, FindCommonSharding (MergeShardingIfCompatible,
 * with the metadata lists merged shardings carry, is in
 * propagate_algebra.c, since reshape propagation needs it), and improving
 * an instruction's sharding with a candidate (pp_maybe_improve), which
 * every per-op rule file calls. */
#include "config.h"

#include <string.h>

#include "common/ndindex.h"
#include "partitioner/propagate/propagate_private.h"

/* Metadata lists: a sharding's metadata text is one "{...}" entry or a
 * list "{{...}, {...}}". Merging two shardings keeps the first one's entries
 * and appends the second one's that are new (as XLA does). */
static gboolean
leaf_more_specific (const PsSharding *lhs, const PsSharding *rhs)
{
  gboolean lm = lhs->kind == PS_SHARDING_MANUAL, rm = rhs->kind == PS_SHARDING_MANUAL;
  if (lm && pp_is_tile_maximal (rhs))
    return TRUE;
  if (lm || rm)
    return FALSE;
  if (!pp_is_tile_maximal (rhs))
    return pp_num_tiles (lhs) > pp_num_tiles (rhs);
  return !(pp_is_replicated (rhs) ? pp_is_replicated (lhs) : pp_is_tile_maximal (lhs));
}

gboolean
pp_is_more_specific (const PsSharding *lhs, const PsSharding *rhs)
{
  if (pp_is_tuple (lhs) != pp_is_tuple (rhs))
    return FALSE;
  if (pp_is_tuple (lhs))
    {
      if (lhs->n_elems != rhs->n_elems)
        return FALSE;
      gboolean better = FALSE;
      for (int i = 0; i < lhs->n_elems; i++)
        {
          if (pp_is_more_specific (rhs->elems[i], lhs->elems[i]))
            return FALSE;
          if (pp_is_more_specific (lhs->elems[i], rhs->elems[i]))
            better = TRUE;
        }
      return better;
    }
  return leaf_more_specific (lhs, rhs);
}

gboolean
pp_is_strictly_better (const PsSharding *lhs, const PsSharding *rhs)
{
  if (pp_is_tuple (lhs) != pp_is_tuple (rhs))
    return FALSE;
  if (pp_is_tuple (lhs))
    {
      int mask = 0;
      int n = MIN (lhs->n_elems, rhs->n_elems);
      for (int i = 0; i < n; i++)
        {
          const PsSharding *a = lhs->elems[i], *b = rhs->elems[i];
          if (a->kind == PS_SHARDING_MANUAL && pp_is_tile_maximal (b))
            mask |= 1;
          if (b->kind == PS_SHARDING_MANUAL && pp_is_tile_maximal (a))
            mask |= 2;
        }
      return mask == 1;
    }
  return lhs->kind == PS_SHARDING_MANUAL && pp_is_tile_maximal (rhs);
}

gboolean
pp_merge_sharding (const PsSharding *to_merge, PsSharding **dst, gboolean may_combine)
{
  if (pp_is_tuple (to_merge))
    {
      if (!pp_is_tuple (*dst) || (*dst)->n_elems != to_merge->n_elems)
        return FALSE;
      gboolean changed = FALSE;
      for (int i = 0; i < to_merge->n_elems; i++)
        changed |= pp_merge_sharding (to_merge->elems[i], &(*dst)->elems[i], may_combine);
      return changed;
    }
  if (pp_is_tuple (*dst))
    return FALSE;
  if (may_combine && pp_has_partial_replication (to_merge) && pp_has_partial_replication (*dst)
      && to_merge->n_devices == (*dst)->n_devices)
    {
      int64_t mt = MAX (pp_num_tiles (to_merge), pp_num_tiles (*dst)) + 1;
      PsSharding *m = pp_merge_if_compatible (to_merge, mt, *dst);
      if (m)
        {
          ps_sharding_free (*dst);
          *dst = m;
          return TRUE;
        }
    }
  return leaf_more_specific (*dst, to_merge);
}

gboolean
pp_is_subtiling_or_equal (const PsShape *shape, const PsSharding *p, const PsSharding *s)
{
  if (pp_is_manual (p) || pp_is_manual (s))
    return FALSE;
  if (pp_is_tile_maximal (s))
    return TRUE;
  if (pp_is_tile_maximal (p))
    return FALSE;
  if (!pp_is_tiled (p) || !pp_is_tiled (s))
    return FALSE;
  int dr = pp_data_rank (p);
  if (dr != pp_data_rank (s) || dr != shape->rank)
    return FALSE;
  int64_t pbase[PP_MAX_DIMS], sbase[PP_MAX_DIMS];
  gboolean shortcut = TRUE;
  for (int i = 0; i < dr; i++)
    {
      int64_t sz = shape->dims[i], pt = p->tile_dims[i], stt = s->tile_dims[i];
      if (pt < stt)
        return FALSE;
      pbase[i] = ps_ceil_div (sz, pt);
      sbase[i] = ps_ceil_div (sz, stt);
      if (stt != 1 && (pt % stt != 0 || (pbase[i] && sbase[i] % pbase[i] != 0)
                       || sz <= (pt - 1) * pbase[i] || sz <= (stt - 1) * sbase[i]))
        shortcut = FALSE;
    }
  if (shortcut && !pp_has_partial_replication (s))
    return ps_sharding_equal_layout (p, s);
  /* Offsets of each device's tile under s (first occurrence wins). */
  int64_t maxdev = 0;
  for (int64_t k = 0; k < s->n_devices; k++)
    maxdev = MAX (maxdev, s->devices[k]);
  for (int64_t k = 0; k < p->n_devices; k++)
    maxdev = MAX (maxdev, p->devices[k]);
  int64_t *soff = g_new0 (int64_t, (maxdev + 1) * (dr ? dr : 1));
  gboolean *seen = g_new0 (gboolean, maxdev + 1);
  int64_t idx[PP_MAX_DIMS] = { 0 };
  for (int64_t k = 0; k < s->n_devices; k++)
    {
      int64_t d = s->devices[k];
      if (!seen[d])
        {
          seen[d] = TRUE;
          for (int i = 0; i < dr; i++)
            soff[d * dr + i] = sbase[i] * idx[i];
        }
      ps_index_next (s->n_tile_dims, s->tile_dims, idx);
    }
  gboolean ok = TRUE;
  memset (idx, 0, sizeof idx);
  for (int64_t k = 0; k < p->n_devices && ok; k++)
    {
      int64_t d = p->devices[k];
      if (!seen[d])
        ok = FALSE;
      for (int j = 0; j < dr && ok; j++)
        {
          int64_t po = pbase[j] * idx[j];
          if (po < soff[d * dr + j])
            ok = FALSE;
          else if (po + pbase[j] <= shape->dims[j] && po + pbase[j] > soff[d * dr + j] + sbase[j])
            ok = FALSE;
        }
      ps_index_next (p->n_tile_dims, p->tile_dims, idx);
    }
  g_free (soff);
  g_free (seen);
  return ok;
}

PsSharding *
pp_return_improved (PsSharding *from, const PsSharding *to_improve, const PsShape *shape,
                    gboolean may_combine, gboolean allow_aggressive)
{
  if (!from)
    return NULL;
  if (to_improve && pp_is_strictly_better (from, to_improve))
    return from;
  if (!pp_is_spatially_partitioned (from))
    goto fail;
  if (!to_improve)
    return from;
  if (pp_is_manual (from))
    goto fail;
  if (pp_is_tuple (from) != pp_is_tuple (to_improve))
    goto fail;
  int64_t tiles = pp_num_tiles (from);
  if (pp_merge_sharding (to_improve, &from, may_combine))
    {
      if (!allow_aggressive && ps_shape_is_array (shape) && !pp_is_tile_maximal (to_improve)
          && !pp_is_tuple (from) && pp_num_tiles (from) == tiles)
        {
          if (!pp_is_subtiling_or_equal (shape, from, to_improve))
            goto fail;
        }
      return from;
    }
fail:
  ps_sharding_free (from);
  return NULL;
}

PsSharding *
pp_find_common (int n, PsSharding *const *shardings, const PsSharding *dflt)
{
  g_return_val_if_fail (n > 0, NULL);
  PsSharding *common = ps_sharding_share (shardings[0]);
  for (int i = 1; i < n; i++)
    {
      if (ps_sharding_equal_layout (common, shardings[i]))
        continue;
      PsSharding *m = pp_merge_if_compatible (shardings[i], pp_num_tiles (common), common);
      if (!m)
        {
          ps_sharding_free (common);
          return ps_sharding_share (dflt ? dflt : shardings[0]);
        }
      ps_sharding_free (common);
      common = m;
    }
  return common;
}

/* ---- metadata ----------------------------------------------------------- */

void
pp_set_metadata_text (PsSharding *s, const char *text)
{
  if (!s)
    return;
  if (s->kind == PS_SHARDING_TUPLE)
    {
      for (int i = 0; i < s->n_elems; i++)
        pp_set_metadata_text (s->elems[i], text);
      return;
    }
  g_free (s->metadata);
  s->metadata = g_strdup (text);
}

/* ---- improving an instruction's sharding with a candidate ------------------------ */

gboolean
pp_maybe_improve (PsSharding *s, PsInstr *i, gboolean may_combine, gboolean aggressive)
{
  /* Once the pass settles, most re-derivations give back the layout the
   * instruction already has; ReturnImprovedSharding rejects an equal
   * layout whatever the flags (not strictly better, no merge with more
   * tiles, not more specific), so skip the merge and normalisation. */
  if (s && i->sharding && ps_sharding_equal_layout (s, i->sharding))
    {
      ps_sharding_free (s);
      return FALSE;
    }
  PsSharding *r = pp_return_improved (s, i->sharding, i->shape, may_combine, aggressive);
  if (!r)
    return FALSE;
  PsSharding *n = pp_normalize_tuple_take (r, i->shape);
  ps_sharding_free (i->sharding);
  i->sharding = n;
  return TRUE;
}

/* Improves leaf `index` of a tuple-shaped instruction (or the whole of an
 * array-shaped one). Takes ownership of s. */
gboolean
pp_maybe_improve_sub_ (PsSharding *s, PsInstr *i, int index, gboolean may_combine)
{
  if (!ps_shape_is_tuple (i->shape))
    return pp_maybe_improve (s, i, may_combine, FALSE);
  PsShape *sub = i->shape->elems[index];
  PsSharding *cur = i->sharding ? pp_sub_sharding (i->sharding, i->shape, index) : NULL;
  PsSharding *r = pp_return_improved (s, cur, sub, may_combine, FALSE);
  if (cur)
    ps_sharding_free (cur);
  if (!r)
    return FALSE;
  PsSharding *base;
  if (i->sharding)
    base = pp_normalize_tuple (i->sharding, i->shape);
  else
    {
      PsSharding *rep = ps_sharding_replicated ();
      base = pp_single_tuple (i->shape, rep);
      ps_sharding_free (rep);
    }
  PsSharding *rr = pp_normalize_tuple (r, sub);
  ps_sharding_free (r);
  int first, count;
  pp_tuple_leaf_range (i->shape, index, &first, &count);
  for (int k = 0; k < count && first + k < base->n_elems; k++)
    {
      ps_sharding_free (base->elems[first + k]);
      base->elems[first + k] = ps_sharding_share (pp_is_tuple (rr) ? rr->elems[k] : rr);
    }
  ps_sharding_free (rr);
  ps_sharding_free (i->sharding);
  i->sharding = base;
  return TRUE;
}

int
pp_operand_index (const PsInstr *user, const PsInstr *op)
{
  for (int k = 0; k < user->n_operands; k++)
    if (user->operands[k] == op)
      return k;
  return -1;
}
