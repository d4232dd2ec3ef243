/* The sharding algebra the propagation pass needs, with the semantics of
 * XLA's hlo_sharding_util: queries, partial replication of dims, transposes
 * with collapsed dims, reshape propagation, moving splits along dims,
 * MergeShardingIfCompatible (which reshape propagation needs; the rest of
 * merging and ordering is propagate_merge.c, built on this file). The
 * files' calls run one way: rules -> gather, norm -> merge -> algebra.
 * Tile assignments are
 * handled as plain row-major arrays: a reshape only relabels dims, a
 * transpose permutes elements. */
#include "config.h"

#include <string.h>

#include "common/ndindex.h"
#include "partitioner/propagate/propagate_private.h"

/* A tile assignment: dims and the device array (row-major). The array is
 * either borrowed from a sharding (owned FALSE: read only) or owned. On a
 * 2048-device pod each array is 16 KiB and the pass builds tens of
 * thousands of them, so arrays are only copied when they change. */
typedef struct {
  int nd;
  int64_t d[PP_MAX_DIMS];
  int64_t *v;
  int64_t n;
  gboolean owned;
} Ta;

static void
ta_clear (Ta *t)
{
  if (t->owned)
    g_free (t->v);
  t->v = NULL;
  t->owned = FALSE;
}

/* A read-only view of s's tile assignment. */
static Ta
ta_of (const PsSharding *s)
{
  Ta t = { 0 };
  t.nd = s->n_tile_dims;
  for (int i = 0; i < t.nd; i++)
    t.d[i] = s->tile_dims[i];
  t.n = s->n_devices;
  t.v = s->devices;
  t.owned = FALSE;
  return t;
}

/* A writable copy of s's tile assignment. */
static Ta
ta_copy_of (const PsSharding *s)
{
  Ta t = ta_of (s);
  t.v = g_new (int64_t, t.n > 0 ? t.n : 1);
  memcpy (t.v, s->devices, sizeof (int64_t) * t.n);
  t.owned = TRUE;
  return t;
}

static void
ta_reshape (Ta *t, int nd, const int64_t *dims)
{
  int64_t p = 1;
  for (int i = 0; i < nd; i++)
    p *= dims[i];
  g_assert (p == t->n && nd <= PP_MAX_DIMS);
  t->nd = nd;
  for (int i = 0; i < nd; i++)
    t->d[i] = dims[i];
}

/* out dim j = in dim perm[j] (numpy transpose). */
static Ta
ta_transpose (const Ta *t, const int64_t *perm)
{
  Ta r = { 0 };
  r.nd = t->nd;
  r.n = t->n;
  for (int j = 0; j < t->nd; j++)
    r.d[j] = t->d[perm[j]];
  r.v = ps_transpose_row_major (t->v, t->nd, t->d, perm);
  r.owned = TRUE;
  return r;
}

static gboolean
contains (int n, const int64_t *v, int64_t x)
{
  for (int i = 0; i < n; i++)
    if (v[i] == x)
      return TRUE;
  return FALSE;
}

static PsSharding *
with_meta (PsSharding *r, const PsSharding *meta_src)
{
  if (r && meta_src && meta_src->metadata && !r->metadata)
    r->metadata = g_strdup (meta_src->metadata);
  return r;
}

/* Builds a sharding from t, taking its array when t owns it. The ids are
 * a permutation of an already validated tile assignment, so the per-id
 * checks of ps_sharding_subgroup (a bitmap over every id, a copy) are
 * skipped: on a 2048-device pod they were a fifth of the pass. The shape
 * checks stay. */
static PsSharding *
sh_from_ta (Ta *t, int nsub, const PsSubgroupKind *kinds, const PsSharding *meta_src)
{
  g_return_val_if_fail (t->nd >= 1 && t->nd <= PS_SHARDING_MAX_DIMS, NULL);
  g_return_val_if_fail (nsub >= 0 && nsub <= t->nd && (nsub == 0 || kinds != NULL), NULL);
  int64_t total = 1;
  for (int i = 0; i < t->nd; i++)
    {
      g_return_val_if_fail (t->d[i] >= 1, NULL);
      total *= t->d[i];
    }
  g_return_val_if_fail (total == t->n && t->v != NULL, NULL);
  int64_t *v;
  if (t->owned)
    {
      v = t->v;
      t->v = NULL;
      t->owned = FALSE;
    }
  else
    v = g_memdup2 (t->v, (gsize) total * sizeof (int64_t));
  return with_meta (ps_sharding_subgroup_take (t->nd, t->d, v, nsub, kinds), meta_src);
}

/* ps_sharding_subgroup (n, dims, s->devices, s's subgroups) for dims
 * whose product is s's device count (s's tile dims with size-1 dims put in
 * or taken out): s's array is a validated tile assignment already, so its
 * per-id check (a bitmap over every id) is skipped, as in sh_from_ta. */
PsSharding *
pp_subgroup_of (int n, const int64_t *dims, const PsSharding *s)
{
  if (n < 1 || n > PS_SHARDING_MAX_DIMS || s->n_subgroups > n || ps_product (n, dims) != s->n_devices)
    return ps_sharding_subgroup (n, dims, s->devices, s->n_subgroups, s->subgroup_kinds);
  for (int k = 0; k < n; k++)
    if (dims[k] < 1)
      return ps_sharding_subgroup (n, dims, s->devices, s->n_subgroups, s->subgroup_kinds);
  return ps_sharding_subgroup_take (n, dims, g_memdup2 (s->devices, (gsize) s->n_devices * sizeof (int64_t)),
                                    s->n_subgroups, s->subgroup_kinds);
}

static PsSharding *
partial_tile (Ta *t, const PsSharding *meta_src)
{
  PsSubgroupKind k = PS_SUBGROUP_REPLICATED;
  return sh_from_ta (t, 1, &k, meta_src);
}

/* ---- queries ------------------------------------------------------------ */

gboolean
pp_is_tuple (const PsSharding *s)
{
  return s && s->kind == PS_SHARDING_TUPLE;
}

gboolean
pp_is_manual (const PsSharding *s)
{
  if (!s)
    return FALSE;
  if (s->kind == PS_SHARDING_TUPLE)
    {
      for (int i = 0; i < s->n_elems; i++)
        if (!pp_is_manual (s->elems[i]))
          return FALSE;
      return TRUE;
    }
  return s->kind == PS_SHARDING_MANUAL;
}

gboolean
pp_is_replicated (const PsSharding *s)
{
  if (!s)
    return FALSE;
  if (s->kind == PS_SHARDING_TUPLE)
    {
      for (int i = 0; i < s->n_elems; i++)
        if (!pp_is_replicated (s->elems[i]))
          return FALSE;
      return TRUE;
    }
  return s->kind == PS_SHARDING_REPLICATED || s->kind == PS_SHARDING_UNKNOWN;
}

gboolean
pp_is_tile_maximal (const PsSharding *s)
{
  if (!s)
    return FALSE;
  if (s->kind == PS_SHARDING_TUPLE)
    {
      for (int i = 0; i < s->n_elems; i++)
        if (!pp_is_tile_maximal (s->elems[i]))
          return FALSE;
      return TRUE;
    }
  return s->kind == PS_SHARDING_REPLICATED || s->kind == PS_SHARDING_MAXIMAL
         || s->kind == PS_SHARDING_UNKNOWN;
}

gboolean
pp_is_tiled (const PsSharding *s)
{
  return s && s->kind == PS_SHARDING_TILED;
}

gboolean
pp_is_spatially_partitioned (const PsSharding *s)
{
  if (!s)
    return FALSE;
  if (s->kind == PS_SHARDING_TUPLE)
    {
      for (int i = 0; i < s->n_elems; i++)
        if (pp_is_spatially_partitioned (s->elems[i]))
          return TRUE;
      return FALSE;
    }
  return !pp_is_tile_maximal (s) || pp_is_replicated (s);
}

gboolean
pp_has_partial_replication (const PsSharding *s)
{
  return pp_subgroup_dim (s, PS_SUBGROUP_REPLICATED) >= 0;
}

gboolean
pp_replicate_on_last_tile_dim (const PsSharding *s)
{
  return pp_is_tiled (s) && s->n_subgroups == 1
         && s->subgroup_kinds[0] == PS_SUBGROUP_REPLICATED;
}

gboolean
pp_is_manual_subgroup (const PsSharding *s)
{
  return pp_subgroup_dim (s, PS_SUBGROUP_MANUAL) >= 0;
}

int
pp_data_rank (const PsSharding *s)
{
  return pp_is_tiled (s) ? s->n_tile_dims - s->n_subgroups : 0;
}

int64_t
pp_num_tiles (const PsSharding *s)
{
  if (!pp_is_tiled (s))
    return 1;
  return ps_product (pp_data_rank (s), s->tile_dims);
}

int64_t
pp_tile_dim (const PsSharding *s, int i)
{
  if (!pp_is_tiled (s) || i < 0 || i >= s->n_tile_dims)
    return 1;
  return s->tile_dims[i];
}

int
pp_subgroup_dim (const PsSharding *s, PsSubgroupKind k)
{
  if (!pp_is_tiled (s))
    return -1;
  int dr = pp_data_rank (s);
  for (int i = 0; i < s->n_subgroups; i++)
    if (s->subgroup_kinds[i] == k)
      return dr + i;
  return -1;
}

gboolean
pp_has_unique_device (const PsSharding *s, int64_t *device)
{
  if (!s)
    return FALSE;
  if (s->kind == PS_SHARDING_MAXIMAL)
    {
      if (device)
        *device = s->device;
      return TRUE;
    }
  if (s->kind == PS_SHARDING_TUPLE && s->n_elems > 0)
    {
      int64_t d0 = -1;
      for (int i = 0; i < s->n_elems; i++)
        {
          int64_t d;
          if (!pp_has_unique_device (s->elems[i], &d))
            return FALSE;
          if (i > 0 && d != d0)
            return FALSE;
          d0 = d;
        }
      if (device)
        *device = d0;
      return TRUE;
    }
  return FALSE;
}

/* XLA's subgroup_types(): a plain last_tile_dim_replicate sharding has none. */
static int
xla_subgroup_count (const PsSharding *s)
{
  if (!pp_is_tiled (s) || pp_replicate_on_last_tile_dim (s))
    return 0;
  return s->n_subgroups;
}

/* ---- constructors ------------------------------------------------------- */

PsSharding *
pp_copy (const PsSharding *s)
{
  return s ? ps_sharding_share (s) : NULL;
}

PsSharding *
pp_replicated_like (const PsSharding *meta_src)
{
  return with_meta (ps_sharding_replicated (), meta_src);
}

PsSharding *
pp_manual_like (const PsSharding *meta_src)
{
  return with_meta (ps_sharding_manual (), meta_src);
}

PsSharding *
pp_single_tuple (const PsShape *shape, const PsSharding *s)
{
  if (!ps_shape_is_tuple (shape))
    return pp_copy (s);
  int n = ps_shape_leaf_count (shape);
  PsSharding **e = g_new (PsSharding *, n > 0 ? n : 1);
  for (int i = 0; i < n; i++)
    e[i] = ps_sharding_share (s);
  PsSharding *r = ps_sharding_tuple (n, e);
  g_free (e);
  return r;
}

PsSharding *
pp_normalize_tuple (const PsSharding *s, const PsShape *shape)
{
  if (!s)
    return NULL;
  if (ps_shape_is_tuple (shape) && !pp_is_tuple (s))
    return pp_single_tuple (shape, s);
  return ps_sharding_share (s);
}

PsSharding *
pp_normalize_tuple_take (PsSharding *s, const PsShape *shape)
{
  /* Nothing to expand: hand s back instead of copying it. */
  if (!s || !ps_shape_is_tuple (shape) || pp_is_tuple (s))
    return s;
  PsSharding *r = pp_normalize_tuple (s, shape);
  ps_sharding_free (s);
  return r;
}

void
pp_tuple_leaf_range (const PsShape *shape, int index, int *first, int *count)
{
  int f = 0;
  for (int i = 0; i < index && i < shape->n_elems; i++)
    f += ps_shape_leaf_count (shape->elems[i]);
  *first = f;
  *count = index < shape->n_elems ? ps_shape_leaf_count (shape->elems[index]) : 0;
}

PsSharding *
pp_sub_sharding (const PsSharding *s, const PsShape *shape, int index)
{
  if (!s)
    return NULL;
  if (!ps_shape_is_tuple (shape) || index >= shape->n_elems)
    return ps_sharding_share (s);
  if (!pp_is_tuple (s))
    return pp_normalize_tuple (s, shape->elems[index]);
  int first, count;
  pp_tuple_leaf_range (shape, index, &first, &count);
  if (first + count > s->n_elems)
    return NULL;
  if (!ps_shape_is_tuple (shape->elems[index]))
    return ps_sharding_share (s->elems[first]);
  PsSharding **e = g_new (PsSharding *, count > 0 ? count : 1);
  for (int i = 0; i < count; i++)
    e[i] = ps_sharding_share (s->elems[first + i]);
  PsSharding *r = ps_sharding_tuple (count, e);
  g_free (e);
  return r;
}

/* ---- algebra ------------------------------------------------------------ */

PsSharding *
pp_transpose (const PsSharding *s, int n, const int64_t *dims)
{
  if (!pp_is_tiled (s))
    return pp_copy (s);
  int dr = pp_data_rank (s);
  int64_t perm[PP_MAX_DIMS];
  int np = 0;
  for (int i = 0; i < n; i++)
    perm[np++] = dims[i];
  if (n == dr)
    for (int i = dr; i < s->n_tile_dims; i++)
      perm[np++] = i;
  if (np != s->n_tile_dims)
    return NULL;
  Ta t = ta_of (s);
  Ta r = ta_transpose (&t, perm);
  PsSubgroupKind kinds[PP_MAX_DIMS];
  int nsub = s->n_subgroups;
  for (int i = dr; i < np; i++)
    kinds[i - dr] = s->subgroup_kinds[perm[i] - dr];
  PsSharding *out = sh_from_ta (&r, nsub, kinds, s);
  ta_clear (&t);
  ta_clear (&r);
  return out;
}

PsSharding *
pp_partially_replicate_on_dims (const PsSharding *s, int n, const int64_t *dims)
{
  if (!pp_is_tiled (s))
    return pp_copy (s);
  int dr = pp_data_rank (s);
  int64_t valid[PP_MAX_DIMS];
  int nv = 0;
  int64_t group = 1;
  for (int i = 0; i < n; i++)
    {
      if (dims[i] < 0 || dims[i] >= dr || contains (nv, valid, dims[i]))
        continue;
      valid[nv++] = dims[i];
      group *= s->tile_dims[dims[i]];
    }
  if (group == 1)
    return ps_sharding_share (s);
  if (group == pp_num_tiles (s) && s->n_subgroups == 0)
    return pp_replicated_like (s);
  int64_t perm[PP_MAX_DIMS];
  int np = 0;
  for (int i = 0; i < dr; i++)
    if (!contains (nv, valid, i))
      perm[np++] = i;
  for (int i = 0; i < dr; i++)
    if (contains (nv, valid, i))
      perm[np++] = i;
  for (int i = dr; i < s->n_tile_dims; i++)
    perm[np++] = i;
  Ta t = ta_of (s);
  Ta r = ta_transpose (&t, perm);
  int64_t shape[PP_MAX_DIMS];
  int ns = 0;
  for (int i = 0; i < s->n_tile_dims; i++)
    shape[ns++] = contains (nv, valid, i) ? 1 : s->tile_dims[i];
  PsSharding *out;
  if (pp_replicate_on_last_tile_dim (s))
    {
      shape[ns - 1] *= group;
      ta_reshape (&r, ns, shape);
      out = partial_tile (&r, s);
    }
  else
    {
      memmove (shape + dr + 1, shape + dr, sizeof (int64_t) * (ns - dr));
      shape[dr] = group;
      ns++;
      ta_reshape (&r, ns, shape);
      PsSubgroupKind kinds[PP_MAX_DIMS];
      kinds[0] = PS_SUBGROUP_REPLICATED;
      for (int i = 0; i < s->n_subgroups; i++)
        kinds[i + 1] = s->subgroup_kinds[i];
      out = sh_from_ta (&r, s->n_subgroups + 1, kinds, s);
    }
  ta_clear (&t);
  ta_clear (&r);
  return out;
}

PsSharding *
pp_partially_replicate_all_except (const PsSharding *s, int n, const int64_t *keep)
{
  if (!pp_is_tiled (s))
    return pp_copy (s);
  int64_t dims[PP_MAX_DIMS];
  int nd = 0;
  for (int i = 0; i < pp_data_rank (s); i++)
    if (!contains (n, keep, i))
      dims[nd++] = i;
  return pp_partially_replicate_on_dims (s, nd, dims);
}

PsSharding *
pp_replicate_all_data_dims (const PsSharding *s, int data_rank)
{
  if (pp_is_manual (s))
    return ps_sharding_share (s);
  if (xla_subgroup_count (s) == 0)
    return pp_replicated_like (s);
  PsSharding *r = pp_partially_replicate_all_except (s, 0, NULL);
  if (data_rank >= 0 && pp_is_tiled (r) && data_rank != pp_data_rank (r))
    {
      Ta t = ta_of (r);
      int64_t shape[PP_MAX_DIMS];
      int ns = 0;
      for (int i = 0; i < data_rank; i++)
        shape[ns++] = 1;
      for (int i = pp_data_rank (r); i < r->n_tile_dims; i++)
        shape[ns++] = r->tile_dims[i];
      ta_reshape (&t, ns, shape);
      PsSharding *x = sh_from_ta (&t, r->n_subgroups, r->subgroup_kinds, r);
      ta_clear (&t);
      ps_sharding_free (r);
      r = x;
    }
  return r;
}

PsSharding *
pp_remove_shape_dims (const PsSharding *s, int n, const int64_t *dims)
{
  if (!pp_is_tiled (s) || n == 0)
    return pp_copy (s);
  int64_t shape[PP_MAX_DIMS];
  int ns = 0;
  for (int i = 0; i < s->n_tile_dims; i++)
    {
      if (contains (n, dims, i))
        {
          if (s->tile_dims[i] != 1)
            return NULL;
        }
      else
        shape[ns++] = s->tile_dims[i];
    }
  Ta t = ta_of (s);
  ta_reshape (&t, ns, shape);
  PsSharding *r = sh_from_ta (&t, s->n_subgroups, s->subgroup_kinds, s);
  ta_clear (&t);
  return r;
}

PsSharding *
pp_transpose_collapsed (const PsSharding *s, int n_src, const int64_t *src_to_tgt_in,
                        int n_tgt, const int64_t *tgt_to_src_in)
{
  if (!pp_is_tiled (s))
    return pp_copy (s);
  int64_t src_to_tgt[PP_MAX_DIMS], tgt_to_src[PP_MAX_DIMS];
  memcpy (src_to_tgt, src_to_tgt_in, sizeof (int64_t) * n_src);
  memcpy (tgt_to_src, tgt_to_src_in, sizeof (int64_t) * n_tgt);
  if (n_src < s->n_tile_dims)
    {
      int extra = s->n_tile_dims - n_src;
      int ns0 = n_src, nt0 = n_tgt;
      for (int i = 0; i < extra; i++)
        {
          src_to_tgt[n_src++] = nt0 + i;
          tgt_to_src[n_tgt++] = ns0 + i;
        }
    }
  int nsub = s->n_subgroups;
  int64_t tgt_skip_new[PP_MAX_DIMS];
  int skipped_tgt = 0;
  int src_nonsub = n_src - nsub, tgt_nonsub = n_tgt - nsub;
  for (int i = 0; i < n_tgt; i++)
    {
      if (tgt_to_src[i] < 0)
        {
          tgt_skip_new[i] = -1;
          skipped_tgt++;
        }
      else
        tgt_skip_new[i] = i - skipped_tgt;
    }
  int skipped_src = 0;
  for (int i = 0; i < n_src; i++)
    if (src_to_tgt[i] < 0)
      skipped_src++;
  int64_t perm[PP_MAX_DIMS];
  for (int i = 0; i < n_src; i++)
    perm[i] = -1;
  for (int i = 0; i < src_nonsub; i++)
    {
      if (src_to_tgt[i] < 0)
        {
          if (s->tile_dims[i] > 1)
            return NULL;
          perm[src_nonsub - skipped_src] = i;
          skipped_src--;
        }
      else
        perm[tgt_skip_new[src_to_tgt[i]]] = i;
    }
  skipped_src = 0;
  for (int i = 0; i < n_src; i++)
    if (src_to_tgt[i] < 0)
      skipped_src++;
  for (int i = src_nonsub; i < n_src; i++)
    perm[src_to_tgt[i] - skipped_tgt + skipped_src] = i;
  for (int i = 0; i < n_src; i++)
    if (perm[i] < 0)
      return NULL;
  PsSharding *t = pp_transpose (s, n_src, perm);
  if (!t)
    return NULL;
  int64_t tiles[PP_MAX_DIMS];
  for (int i = 0; i < n_tgt; i++)
    {
      tiles[i] = 1;
      if (tgt_to_src[i] >= 0)
        {
          int64_t d = tgt_skip_new[i];
          if (i >= tgt_nonsub)
            d += skipped_src;
          tiles[i] = t->tile_dims[d];
        }
    }
  Ta ta = ta_of (t);
  ta_reshape (&ta, n_tgt, tiles);
  PsSharding *r = sh_from_ta (&ta, s->n_subgroups, s->subgroup_kinds, s);
  ta_clear (&ta);
  ps_sharding_free (t);
  return r;
}


PsSharding *
pp_reshape_sharding (const PsShape *src, const PsShape *tgt, const PsSharding *s)
{
  if (!pp_is_tiled (s))
    return pp_copy (s);
  /* Stacks hold dims innermost-last, as XLA's do (back = next dim). */
  int64_t sd[PP_MAX_DIMS * 2], td[PP_MAX_DIMS * 2], st[PP_MAX_DIMS * 2];
  int nsd = 0, ntd = 0, nst = 0;
  for (int i = src->rank - 1; i >= 0; i--)
    sd[nsd++] = src->dims[i];
  for (int i = tgt->rank - 1; i >= 0; i--)
    td[ntd++] = tgt->dims[i];
  for (int i = src->rank - 1; i >= 0; i--)
    st[nst++] = s->tile_dims[i];
  int64_t out[PP_MAX_DIMS * 2];
  int nout = 0;
  int64_t src_index = -1;
  int64_t to_repl[PP_MAX_DIMS];
  int nrepl = 0;
  gboolean inplace = FALSE;
#define APPEND_T(sz) do { if (inplace) out[nout - 1] *= (sz); else out[nout++] = (sz); inplace = FALSE; } while (0)
#define SPUSH(sz, p) do { sd[nsd++] = (sz); st[nst++] = (p); src_index--; } while (0)
#define SPOP() do { nsd--; nst--; src_index++; } while (0)
  while (nsd > 0 && ntd > 0 && ps_product (nst, st) != 1)
    {
      int64_t sp = 1;
      while (nst > 0 && st[nst - 1] == 1)
        {
          sp *= sd[nsd - 1];
          SPOP ();
        }
      while (ntd > 0 && td[ntd - 1] > 1 && sp % td[ntd - 1] == 0)
        {
          sp /= td[ntd - 1];
          ntd--;
          APPEND_T (1);
        }
      if (sp != 1)
        SPUSH (sp, 1);
      if (nsd == 0 || ntd == 0)
        break;
      int64_t s_size = sd[nsd - 1], s_parts = st[nst - 1];
      SPOP ();
      int64_t t_size = td[--ntd];
      if (s_size == t_size)
        APPEND_T (s_parts);
      else if (t_size == 1)
        {
          APPEND_T (1);
          SPUSH (s_size, s_parts);
        }
      else if (s_size == 1)
        {
          td[ntd++] = t_size;
          if (s_parts > 1)
            to_repl[nrepl++] = src_index;
        }
      else if (s_parts == 1)
        {
          if (nsd > 0 && st[nst - 1] == 1)
            sd[nsd - 1] *= s_size;
          else
            break;
        }
      else if (s_size % s_parts != 0)
        return NULL;
      else
        {
          int64_t g = ps_gcd64 (s_parts, t_size);
          if (g == 1)
            break;
          SPUSH (s_size / g, s_parts / g);
          td[ntd++] = t_size / g;
          APPEND_T (g);
          inplace = TRUE;
        }
      if (nout > PP_MAX_DIMS || nsd >= PP_MAX_DIMS * 2 - 1 || ntd >= PP_MAX_DIMS * 2 - 1)
        return NULL;
    }
#undef APPEND_T
#undef SPUSH
#undef SPOP
  if (ps_product (nout, out) == 1)
    return NULL;
  while (nout < tgt->rank)
    out[nout++] = 1;
  if (nout != tgt->rank)
    return NULL;
  PsSharding *sh = nrepl > 0 ? pp_partially_replicate_on_dims (s, nrepl, to_repl)
                             : ps_sharding_share (s);
  if (!pp_is_tiled (sh))
    {
      ps_sharding_free (sh);
      return NULL;
    }
  int dr = pp_data_rank (sh);
  int repl_dim = pp_subgroup_dim (sh, PS_SUBGROUP_REPLICATED);
  PsSubgroupKind kinds[PP_MAX_DIMS];
  int nk = 0;
  gboolean rolt = pp_replicate_on_last_tile_dim (sh);
  for (int i = dr; i < sh->n_tile_dims; i++)
    {
      out[nout++] = (i == repl_dim) ? 1 : sh->tile_dims[i];
      if (!rolt)
        kinds[nk++] = sh->subgroup_kinds[i - dr];
    }
  int64_t total = sh->n_devices;
  int64_t p = ps_product (nout, out);
  if (p == 0 || total % p != 0)
    {
      ps_sharding_free (sh);
      return NULL;
    }
  int64_t quot = total / p;
  if (rolt)
    {
      if (quot > 1)
        {
          out[nout - 1] = quot;
          kinds[nk++] = PS_SUBGROUP_REPLICATED;
        }
      else
        nout--;
    }
  else if (quot > 1)
    {
      if (repl_dim >= 0)
        out[repl_dim - dr + tgt->rank] = quot;
      else
        {
          out[nout++] = quot;
          kinds[nk++] = PS_SUBGROUP_REPLICATED;
        }
    }
  Ta t = ta_of (sh);
  ta_reshape (&t, nout, out);
  PsSharding *r = sh_from_ta (&t, nk, kinds, s);
  ta_clear (&t);
  ps_sharding_free (sh);
  return r;
}

/* Reshape propagation for shardings without manual subgroups. */
static PsSharding *
through_reshape_plain (const PsShape *src, const PsShape *tgt, const PsSharding *s)
{
  PsSharding *result = ps_sharding_replicated ();
  int start = 0;
  int rank = src->rank;
  while (start < rank)
    {
      gboolean found = FALSE;
      for (int end = rank; end > start; end--)
        {
          int64_t grouped[PP_MAX_DIMS];
          int64_t ndev = 1;
          for (int i = 0; i < rank; i++)
            {
              grouped[i] = (i >= start && i < end) ? s->tile_dims[i] : 1;
              ndev *= grouped[i];
            }
          int64_t *iota = g_new (int64_t, ndev);
          for (int64_t k = 0; k < ndev; k++)
            iota[k] = k;
          PsSharding *gs = ps_sharding_tiled (rank, grouped, iota);
          g_free (iota);
          PsSharding *reshaped = pp_reshape_sharding (src, tgt, gs);
          ps_sharding_free (gs);
          if (!reshaped)
            continue;
          int64_t perm[PP_MAX_DIMS];
          int np = 0;
          for (int i = start; i < end; i++)
            perm[np++] = i;
          for (int i = 0; i < start; i++)
            perm[np++] = i;
          for (int i = end; i < s->n_tile_dims; i++)
            perm[np++] = i;
          int64_t rd[PP_MAX_DIMS];
          int nr = 0;
          if (pp_is_tiled (reshaped))
            for (int i = 0; i < reshaped->n_tile_dims; i++)
              rd[nr++] = reshaped->tile_dims[i];
          else
            for (int i = 0; i < tgt->rank; i++)
              rd[nr++] = 1;
          ps_sharding_free (reshaped);
          int64_t pr = ps_product (nr, rd);
          if (pr == 0 || s->n_devices % pr != 0)
            continue;
          int64_t nrep = s->n_devices / pr;
          int diff = nr - tgt->rank;
          if (diff == 0)
            rd[nr++] = nrep;
          else if (diff == 1)
            rd[nr - 1] *= nrep;
          else
            continue;
          Ta t = ta_of (s);
          Ta tt = ta_transpose (&t, perm);
          ta_reshape (&tt, nr, rd);
          PsSharding *ungrouped = partial_tile (&tt, NULL);
          ta_clear (&t);
          ta_clear (&tt);
          PsSharding *merged = pp_merge_if_compatible (ungrouped, pp_num_tiles (result) + 1, result);
          ps_sharding_free (ungrouped);
          if (merged)
            {
              ps_sharding_free (result);
              result = merged;
              start = end;
              found = TRUE;
              break;
            }
        }
      if (!found)
        start++;
    }
  g_free (result->metadata);
  result->metadata = g_strdup (s->metadata);
  return result;
}

PsSharding *
pp_propagate_through_reshape (const PsShape *src, const PsShape *tgt, const PsSharding *s)
{
  if (!pp_is_tiled (s))
    return pp_copy (s);
  int man = pp_subgroup_dim (s, PS_SUBGROUP_MANUAL);
  if (man < 0)
    return through_reshape_plain (src, tgt, s);
  /* Manual subgroups: treat the manual group as an extra leading data dim of
   * both shapes, sharded as many ways as it has groups, so that it maps onto
   * itself; then move it back behind the data dims. */
  int dr = pp_data_rank (s);
  if (src->rank + 1 >= PP_MAX_DIMS || tgt->rank + 1 >= PP_MAX_DIMS)
    return pp_replicate_all_data_dims (s, tgt->rank);
  int64_t perm[PP_MAX_DIMS];
  int np = 0;
  perm[np++] = man;
  for (int i = 0; i < s->n_tile_dims; i++)
    if (i != man)
      perm[np++] = i;
  Ta t = ta_of (s);
  Ta tt = ta_transpose (&t, perm);
  PsSubgroupKind kinds[PP_MAX_DIMS];
  int nk = 0;
  for (int i = 0; i < s->n_subgroups; i++)
    if (s->subgroup_kinds[i] != PS_SUBGROUP_MANUAL)
      kinds[nk++] = s->subgroup_kinds[i];
  PsSharding *as_data = sh_from_ta (&tt, nk, kinds, s);
  ta_clear (&t);
  ta_clear (&tt);
  int64_t m = s->tile_dims[man];
  int64_t sdims[PP_MAX_DIMS], tdims[PP_MAX_DIMS];
  sdims[0] = m;
  tdims[0] = m;
  for (int i = 0; i < src->rank; i++)
    sdims[i + 1] = src->dims[i];
  for (int i = 0; i < tgt->rank; i++)
    tdims[i + 1] = tgt->dims[i];
  PsShape *s2 = ps_shape_new_array (src->etype, src->rank + 1, sdims);
  PsShape *t2 = ps_shape_new_array (tgt->etype, tgt->rank + 1, tdims);
  PsSharding *r = NULL;
  if (pp_is_tiled (as_data) && pp_data_rank (as_data) == dr + 1)
    r = through_reshape_plain (s2, t2, as_data);
  ps_shape_free (s2);
  ps_shape_free (t2);
  ps_sharding_free (as_data);
  PsSharding *out = NULL;
  if (r && pp_is_tiled (r) && r->tile_dims[0] == m)
    {
      int rdr = pp_data_rank (r);
      int64_t back[PP_MAX_DIMS];
      int nb = 0;
      for (int i = 1; i < rdr; i++)
        back[nb++] = i;
      back[nb++] = 0;
      for (int i = rdr; i < r->n_tile_dims; i++)
        back[nb++] = i;
      Ta a = ta_of (r);
      Ta b = ta_transpose (&a, back);
      PsSubgroupKind k2[PP_MAX_DIMS];
      int n2 = 0;
      k2[n2++] = PS_SUBGROUP_MANUAL;
      for (int i = 0; i < r->n_subgroups; i++)
        k2[n2++] = r->subgroup_kinds[i];
      out = sh_from_ta (&b, n2, k2, s);
      ta_clear (&a);
      ta_clear (&b);
    }
  if (r)
    ps_sharding_free (r);
  if (!out)
    out = pp_replicate_all_data_dims (s, tgt->rank);
  return out;
}

PsSharding *
pp_reverse (const PsSharding *s, int n, const int64_t *dims)
{
  if (!pp_is_tiled (s) || n == 0)
    return pp_copy (s);
  Ta t = ta_of (s);
  Ta r = ta_copy_of (s);
  int64_t stride[PP_MAX_DIMS];
  int64_t st = 1;
  for (int i = t.nd - 1; i >= 0; i--)
    {
      stride[i] = st;
      st *= t.d[i];
    }
  int64_t idx[PP_MAX_DIMS] = { 0 };
  for (int64_t k = 0; k < t.n; k++)
    {
      int64_t off = 0;
      for (int j = 0; j < t.nd; j++)
        {
          int64_t x = contains (n, dims, j) ? t.d[j] - 1 - idx[j] : idx[j];
          off += x * stride[j];
        }
      r.v[k] = t.v[off];
      ps_index_next (t.nd, t.d, idx);
    }
  PsSharding *out = sh_from_ta (&r, s->n_subgroups, s->subgroup_kinds, s);
  ta_clear (&t);
  ta_clear (&r);
  return out;
}

PsSharding *
pp_along_dims (const PsSharding *s, int n, const int64_t *src_dims, const int64_t *tgt_dims,
               int tgt_rank)
{
  if (!pp_is_tiled (s))
    return pp_copy (s);
  PsSharding *rep = pp_partially_replicate_all_except (s, n, src_dims);
  if (!pp_is_tiled (rep))
    return rep;
  /* Order the kept source dims as their targets are ordered. */
  int64_t order[PP_MAX_DIMS];
  for (int i = 0; i < n; i++)
    order[i] = i;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && tgt_dims[order[j]] < tgt_dims[order[j - 1]]; j--)
      {
        int64_t x = order[j];
        order[j] = order[j - 1];
        order[j - 1] = x;
      }
  int64_t perm[PP_MAX_DIMS];
  int np = 0;
  for (int i = 0; i < n; i++)
    perm[np++] = src_dims[order[i]];
  int64_t ns = 0;
  for (int i = n; i < rep->n_tile_dims; i++)
    {
      while (contains (n, src_dims, ns))
        ns++;
      perm[np++] = ns++;
    }
  PsSharding *tr = pp_transpose (rep, np, perm);
  ps_sharding_free (rep);
  if (!tr)
    return NULL;
  int64_t tiles[PP_MAX_DIMS];
  for (int i = 0; i < tgt_rank; i++)
    tiles[i] = 1;
  for (int i = 0; i < n; i++)
    tiles[tgt_dims[i]] = s->tile_dims[src_dims[i]];
  int nt = tgt_rank;
  for (int i = pp_data_rank (tr); i < tr->n_tile_dims; i++)
    tiles[nt++] = tr->tile_dims[i];
  Ta t = ta_of (tr);
  PsSharding *out = NULL;
  if (ps_product (nt, tiles) == t.n)
    {
      ta_reshape (&t, nt, tiles);
      out = sh_from_ta (&t, tr->n_subgroups, tr->subgroup_kinds, s);
    }
  ta_clear (&t);
  ps_sharding_free (tr);
  return out;
}

/* ---- MergeShardingIfCompatible (reshape propagation needs it, and the
 * merging of propagate_merge.c builds on it) ------------------------------------------ */

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
    return ps_sharding_share (to_merge);
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
