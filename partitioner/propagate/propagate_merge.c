/* Merging and ordering of shardings for the propagation pass, with the
 * semantics of XLA's hlo_sharding_util: MergeShardingIfCompatible (combine
 * two partially replicated shardings whose device groups intersect),
 * MergeSharding, IsShardingMoreSpecific, IsSubTilingOrEqualSharding,
 * ReturnImprovedSharding, FindCommonSharding, and the metadata lists merged
 * shardings carry. */
#include "config.h"

#include <string.h>

#include "common/ndindex.h"
#include "partitioner/propagate/propagate_private.h"

/* Metadata lists: a sharding's metadata text is one "{...}" entry or a
 * list "{{...}, {...}}". Merging two shardings keeps the first one's entries
 * and appends the second one's that are new (as XLA does). */
static void
meta_items (const char *text, GPtrArray *out)
{
  if (!text)
    return;
  const char *p = text;
  while (*p == ' ')
    p++;
  if (p[0] != '{' || p[1] != '{')
    {
      g_ptr_array_add (out, g_strdup (text));
      return;
    }
  p++;
  while (*p && *p != '}')
    {
      while (*p == ' ' || *p == ',')
        p++;
      if (*p != '{')
        break;
      const char *start = p;
      int depth = 0;
      gboolean in_str = FALSE;
      for (; *p; p++)
        {
          if (in_str)
            {
              if (*p == '\\' && p[1])
                p++;
              else if (*p == '"')
                in_str = FALSE;
              continue;
            }
          if (*p == '"')
            in_str = TRUE;
          else if (*p == '{')
            depth++;
          else if (*p == '}' && --depth == 0)
            {
              p++;
              break;
            }
        }
      g_ptr_array_add (out, g_strndup (start, p - start));
      while (*p == ' ' || *p == ',')
        p++;
    }
}

static char *
meta_union (const char *a, const char *b)
{
  if (!a && !b)
    return NULL;
  GPtrArray *items = g_ptr_array_new_with_free_func (g_free);
  meta_items (a, items);
  GPtrArray *more = g_ptr_array_new_with_free_func (g_free);
  meta_items (b, more);
  for (guint k = 0; k < more->len; k++)
    {
      gboolean dup = FALSE;
      for (guint j = 0; j < items->len && !dup; j++)
        dup = strcmp (g_ptr_array_index (items, j), g_ptr_array_index (more, k)) == 0;
      if (!dup)
        g_ptr_array_add (items, g_strdup (g_ptr_array_index (more, k)));
    }
  char *r;
  if (items->len == 1)
    r = g_strdup (g_ptr_array_index (items, 0));
  else
    {
      GString *g = g_string_new ("{");
      for (guint k = 0; k < items->len; k++)
        g_string_append_printf (g, "%s%s", k ? ", " : "", (char *) g_ptr_array_index (items, k));
      g_string_append_c (g, '}');
      r = g_string_free (g, FALSE);
    }
  g_ptr_array_free (items, TRUE);
  g_ptr_array_free (more, TRUE);
  return r;
}

/* ---- merging ------------------------------------------------------------ */

PsSharding *
pp_merge_if_compatible (const PsSharding *to_merge, int64_t minimum_tiles, const PsSharding *dst)
{
  if (!to_merge || !dst || pp_is_tuple (to_merge) || pp_is_tuple (dst)
      || pp_is_manual (to_merge) || pp_is_manual (dst))
    return NULL;
  if (pp_is_tile_maximal (to_merge) || to_merge->kind != PS_SHARDING_TILED)
    return NULL;
  if (pp_is_tile_maximal (dst))
    return ps_sharding_copy (to_merge);
  if (!pp_has_partial_replication (dst))
    return NULL;
  int dr = pp_data_rank (to_merge);
  if (dr != pp_data_rank (dst))
    return NULL;
  int mm = pp_subgroup_dim (to_merge, PS_SUBGROUP_MANUAL);
  int dm = pp_subgroup_dim (dst, PS_SUBGROUP_MANUAL);
  if ((mm >= 0) != (dm >= 0))
    return NULL;
  if (to_merge->n_devices != dst->n_devices)
    return NULL;
  int64_t merged[PP_MAX_DIMS];
  int nm = 0;
  int64_t n_merge_groups = 1, n_dst_groups = 1;
  for (int i = 0; i < dr; i++)
    {
      int64_t a = to_merge->tile_dims[i], b = dst->tile_dims[i];
      n_merge_groups *= a;
      n_dst_groups *= b;
      if (a == b || b == 1)
        merged[nm++] = a;
      else if (a == 1)
        merged[nm++] = b;
      else
        return NULL;
    }
  int64_t ndev = to_merge->n_devices;
  int64_t ntiles = ps_product (nm, merged);
  if (ndev % ntiles != 0 || ntiles < minimum_tiles)
    return NULL;
  int64_t repl;
  int64_t man_size = 1;
  if (mm >= 0)
    {
      man_size = to_merge->tile_dims[mm];
      if (man_size != dst->tile_dims[dm])
        return NULL;
      merged[nm++] = man_size;
      n_merge_groups *= man_size;
      n_dst_groups *= man_size;
      if (ndev % (ntiles * man_size) != 0)
        return NULL;
      repl = ndev / (ntiles * man_size);
    }
  else
    repl = ndev / ntiles;
  if (repl > 1)
    merged[nm++] = repl;
  /* Group members: with subgroup dims trailing and manual before
   * replicated, a group is a contiguous run of the device array.
   *
   * Each merged tile (data and manual coordinates) names exactly one group
   * of each side, and a device lies in one group of each side, so the
   * tiles draw from disjoint sets: a tile gets the `repl` smallest devices
   * common to its two groups, in increasing order (XLA's "smallest common
   * device" choice), and the merge fails when some tile has fewer. One
   * sweep over each to_merge group in increasing order fills the tiles:
   * O(devices) where scanning both groups per device cost O(devices x
   * group size) on a 2048-device pod. */
  int64_t mgs = ndev / n_merge_groups, dgs = ndev / n_dst_groups;
  /* Row-major strides of the merged dims, and the mixed radices of each
   * side's groups (data dims then the manual dim). */
  int ng = dr + (mm >= 0 ? 1 : 0);
  int64_t ma[PP_MAX_DIMS + 1], mb[PP_MAX_DIMS + 1], tstride[PP_MAX_DIMS + 1];
  for (int i = 0; i < dr; i++)
    {
      ma[i] = to_merge->tile_dims[i];
      mb[i] = dst->tile_dims[i];
    }
  if (mm >= 0)
    {
      ma[dr] = man_size;
      mb[dr] = man_size;
    }
  {
    int64_t st = 1;
    for (int i = ng - 1; i >= 0; i--)
      {
        tstride[i] = st;
        st *= merged[i];
      }
  }
  /* A group's coordinates, encoded with the merged strides, split in two:
   * `part` over the dims only this side splits (to_merge also owns the dims
   * both split), `key` over the dims both split, where the two groups must
   * agree. The tile of a (to_merge, dst) group pair is the sum of parts. */
#define GROUP_CODE(gidx, mine, other, own_shared, part, key)                       \
  do                                                                              \
    {                                                                             \
      int64_t rest_ = (gidx);                                                     \
      (part) = 0;                                                                 \
      (key) = 0;                                                                  \
      for (int i_ = ng - 1; i_ >= 0; i_--)                                        \
        {                                                                         \
          int64_t c_ = rest_ % (mine)[i_];                                        \
          rest_ /= (mine)[i_];                                                    \
          if ((mine)[i_] > 1 && (other)[i_] > 1)                                  \
            {                                                                     \
              (key) += c_ * tstride[i_];                                          \
              if (own_shared)                                                     \
                (part) += c_ * tstride[i_];                                       \
            }                                                                     \
          else                                                                    \
            (part) += c_ * tstride[i_];                                           \
        }                                                                         \
    }                                                                             \
  while (0)
  int64_t max_id = 0;
  for (int64_t k = 0; k < ndev; k++)
    max_id = MAX (max_id, MAX (to_merge->devices[k], dst->devices[k]));
  /* Per device id: its dst group's part and key (-1: not in dst). */
  int64_t *dpart = g_new (int64_t, 2 * (max_id + 1));
  int64_t *dkey = dpart + max_id + 1;
  for (int64_t d = 0; d <= max_id; d++)
    dkey[d] = -1;
  for (int64_t gd = 0; gd < n_dst_groups; gd++)
    {
      int64_t part, key;
      GROUP_CODE (gd, mb, ma, FALSE, part, key);
      for (int64_t k = gd * dgs; k < (gd + 1) * dgs; k++)
        {
          dpart[dst->devices[k]] = part;
          dkey[dst->devices[k]] = key;
        }
    }
  int64_t n_tiles = ndev / repl;
  int64_t *count = g_new0 (int64_t, n_tiles);
  int64_t *out = g_new (int64_t, ndev);
  int64_t *group = g_new (int64_t, mgs);
  for (int64_t gm = 0; gm < n_merge_groups; gm++)
    {
      int64_t mpart, mkey;
      GROUP_CODE (gm, ma, mb, TRUE, mpart, mkey);
      memcpy (group, to_merge->devices + gm * mgs, sizeof (int64_t) * mgs);
      for (int64_t i = 1; i < mgs; i++)
        for (int64_t j = i; j > 0 && group[j] < group[j - 1]; j--)
          {
            int64_t x = group[j];
            group[j] = group[j - 1];
            group[j - 1] = x;
          }
      for (int64_t x = 0; x < mgs; x++)
        {
          int64_t d = group[x];
          if (dkey[d] != mkey)
            continue;
          int64_t t = mpart + dpart[d];
          if (count[t] < repl)
            out[t * repl + count[t]++] = d;
        }
    }
#undef GROUP_CODE
  gboolean ok = TRUE;
  for (int64_t t = 0; t < n_tiles && ok; t++)
    ok = count[t] == repl;
  PsSharding *r = NULL;
  if (ok)
    {
      PsSubgroupKind kinds[2];
      int nk = 0;
      if (mm >= 0)
        kinds[nk++] = PS_SUBGROUP_MANUAL;
      if (repl > 1)
        kinds[nk++] = PS_SUBGROUP_REPLICATED;
      /* `out` holds distinct ids of to_merge's validated assignment. */
      r = ps_sharding_subgroup_take (nm, merged, g_steal_pointer (&out), nk, kinds);
      g_free (r->metadata);
      r->metadata = meta_union (dst->metadata, to_merge->metadata);
    }
  g_free (out);
  g_free (count);
  g_free (group);
  g_free (dpart);
  return r;
}

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
  PsSharding *common = ps_sharding_copy (shardings[0]);
  for (int i = 1; i < n; i++)
    {
      if (ps_sharding_equal_layout (common, shardings[i]))
        continue;
      PsSharding *m = pp_merge_if_compatible (shardings[i], pp_num_tiles (common), common);
      if (!m)
        {
          ps_sharding_free (common);
          return ps_sharding_copy (dflt ? dflt : shardings[0]);
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
