/* The sharding algebra the propagation pass needs, with the semantics of
 * XLA's hlo_sharding_util (partial replication of dims, transposes with
 * collapsed dims, reshape propagation, merging of compatible partially
 * replicated shardings, "more specific" ordering). Tile assignments are
 * handled as plain row-major arrays: a reshape only relabels dims, a
 * transpose permutes elements. */
#include "config.h"

#include <string.h>

#include "partitioner/propagate_internal.h"

/* A tile assignment: dims and the device array (row-major, owned). */
typedef struct {
  int nd;
  int64_t d[PP_MAX_DIMS];
  int64_t *v;
  int64_t n;
} Ta;

static void
ta_clear (Ta *t)
{
  g_free (t->v);
  t->v = NULL;
}

static Ta
ta_of (const PsSharding *s)
{
  Ta t = { 0 };
  t.nd = s->n_tile_dims;
  for (int i = 0; i < t.nd; i++)
    t.d[i] = s->tile_dims[i];
  t.n = s->n_devices;
  t.v = g_new (int64_t, t.n > 0 ? t.n : 1);
  memcpy (t.v, s->devices, sizeof (int64_t) * t.n);
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
  r.v = g_new (int64_t, r.n > 0 ? r.n : 1);
  int64_t in_stride[PP_MAX_DIMS];
  int64_t s = 1;
  for (int i = t->nd - 1; i >= 0; i--)
    {
      in_stride[i] = s;
      s *= t->d[i];
    }
  int64_t idx[PP_MAX_DIMS] = { 0 };
  for (int64_t k = 0; k < r.n; k++)
    {
      int64_t off = 0;
      for (int j = 0; j < r.nd; j++)
        off += idx[j] * in_stride[perm[j]];
      r.v[k] = t->v[off];
      for (int j = r.nd - 1; j >= 0; j--)
        {
          if (++idx[j] < r.d[j])
            break;
          idx[j] = 0;
        }
    }
  return r;
}

static int64_t
prod (int n, const int64_t *v)
{
  int64_t p = 1;
  for (int i = 0; i < n; i++)
    p *= v[i];
  return p;
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

static PsSharding *
sh_from_ta (const Ta *t, int nsub, const PsSubgroupKind *kinds, const PsSharding *meta_src)
{
  PsSharding *r;
  if (nsub == 0)
    r = ps_sharding_tiled (t->nd, t->d, t->v);
  else
    r = ps_sharding_subgroup (t->nd, t->d, t->v, nsub, kinds);
  return with_meta (r, meta_src);
}

static PsSharding *
partial_tile (const Ta *t, const PsSharding *meta_src)
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
  return prod (pp_data_rank (s), s->tile_dims);
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
  return s ? ps_sharding_copy (s) : NULL;
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
    e[i] = ps_sharding_copy (s);
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
  return ps_sharding_copy (s);
}

PsSharding *
pp_normalize_tuple_take (PsSharding *s, const PsShape *shape)
{
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
    return ps_sharding_copy (s);
  if (!pp_is_tuple (s))
    return pp_normalize_tuple (s, shape->elems[index]);
  int first, count;
  pp_tuple_leaf_range (shape, index, &first, &count);
  if (first + count > s->n_elems)
    return NULL;
  if (!ps_shape_is_tuple (shape->elems[index]))
    return ps_sharding_copy (s->elems[first]);
  PsSharding **e = g_new (PsSharding *, count > 0 ? count : 1);
  for (int i = 0; i < count; i++)
    e[i] = ps_sharding_copy (s->elems[first + i]);
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
    return ps_sharding_copy (s);
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
    return ps_sharding_copy (s);
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

static int64_t
gcd64 (int64_t a, int64_t b)
{
  while (b)
    {
      int64_t t = a % b;
      a = b;
      b = t;
    }
  return a;
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
  while (nsd > 0 && ntd > 0 && prod (nst, st) != 1)
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
          int64_t g = gcd64 (s_parts, t_size);
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
  if (prod (nout, out) == 1)
    return NULL;
  while (nout < tgt->rank)
    out[nout++] = 1;
  if (nout != tgt->rank)
    return NULL;
  PsSharding *sh = nrepl > 0 ? pp_partially_replicate_on_dims (s, nrepl, to_repl)
                             : ps_sharding_copy (s);
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
  int64_t p = prod (nout, out);
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
          int64_t pr = prod (nr, rd);
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
  Ta r = ta_of (s);
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
      for (int j = t.nd - 1; j >= 0; j--)
        {
          if (++idx[j] < t.d[j])
            break;
          idx[j] = 0;
        }
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
  if (prod (nt, tiles) == t.n)
    {
      ta_reshape (&t, nt, tiles);
      out = sh_from_ta (&t, tr->n_subgroups, tr->subgroup_kinds, s);
    }
  ta_clear (&t);
  ps_sharding_free (tr);
  return out;
}

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
  int64_t ntiles = prod (nm, merged);
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
   * replicated, a group is a contiguous run of the device array. */
  int64_t mgs = ndev / n_merge_groups, dgs = ndev / n_dst_groups;
  gboolean *mused = g_new0 (gboolean, ndev);
  gboolean *dused = g_new0 (gboolean, ndev);
  /* Members sorted within each group for "smallest common device". */
  int64_t *msorted = g_new (int64_t, ndev);
  int64_t *dsorted = g_new (int64_t, ndev);
  memcpy (msorted, to_merge->devices, sizeof (int64_t) * ndev);
  memcpy (dsorted, dst->devices, sizeof (int64_t) * ndev);
  for (int64_t g = 0; g < n_merge_groups; g++)
    {
      int64_t *a = msorted + g * mgs;
      for (int64_t i = 1; i < mgs; i++)
        for (int64_t j = i; j > 0 && a[j] < a[j - 1]; j--)
          {
            int64_t x = a[j];
            a[j] = a[j - 1];
            a[j - 1] = x;
          }
    }
  for (int64_t g = 0; g < n_dst_groups; g++)
    {
      int64_t *a = dsorted + g * dgs;
      for (int64_t i = 1; i < dgs; i++)
        for (int64_t j = i; j > 0 && a[j] < a[j - 1]; j--)
          {
            int64_t x = a[j];
            a[j] = a[j - 1];
            a[j - 1] = x;
          }
    }
  int64_t *out = g_new (int64_t, ndev);
  int64_t idx[PP_MAX_DIMS] = { 0 };
  gboolean ok = TRUE;
  for (int64_t k = 0; k < ndev && ok; k++)
    {
      int64_t gm = 0, gd = 0;
      for (int i = 0; i < dr; i++)
        {
          int64_t a = to_merge->tile_dims[i], b = dst->tile_dims[i];
          gm = gm * a + (a == 1 ? 0 : idx[i]);
          gd = gd * b + (b == 1 ? 0 : idx[i]);
        }
      if (mm >= 0)
        {
          gm = gm * man_size + idx[dr];
          gd = gd * man_size + idx[dr];
        }
      int64_t *a = msorted + gm * mgs, *b = dsorted + gd * dgs;
      int64_t i = 0, j = 0;
      gboolean found = FALSE;
      while (i < mgs && j < dgs)
        {
          if (mused[gm * mgs + i])
            {
              i++;
              continue;
            }
          if (dused[gd * dgs + j])
            {
              j++;
              continue;
            }
          if (a[i] == b[j])
            {
              out[k] = a[i];
              mused[gm * mgs + i] = TRUE;
              dused[gd * dgs + j] = TRUE;
              found = TRUE;
              break;
            }
          if (a[i] < b[j])
            i++;
          else
            j++;
        }
      if (!found)
        ok = FALSE;
      for (int d = nm - 1; d >= 0; d--)
        {
          if (++idx[d] < merged[d])
            break;
          idx[d] = 0;
        }
    }
  PsSharding *r = NULL;
  if (ok)
    {
      PsSubgroupKind kinds[2];
      int nk = 0;
      if (mm >= 0)
        kinds[nk++] = PS_SUBGROUP_MANUAL;
      if (repl > 1)
        kinds[nk++] = PS_SUBGROUP_REPLICATED;
      r = nk ? ps_sharding_subgroup (nm, merged, out, nk, kinds)
             : ps_sharding_tiled (nm, merged, out);
      g_free (r->metadata);
      r->metadata = meta_union (dst->metadata, to_merge->metadata);
    }
  g_free (out);
  g_free (mused);
  g_free (dused);
  g_free (msorted);
  g_free (dsorted);
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
      pbase[i] = (sz + pt - 1) / pt;
      sbase[i] = (sz + stt - 1) / stt;
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
      for (int j = s->n_tile_dims - 1; j >= 0; j--)
        {
          if (++idx[j] < s->tile_dims[j])
            break;
          idx[j] = 0;
        }
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
      for (int j = p->n_tile_dims - 1; j >= 0; j--)
        {
          if (++idx[j] < p->tile_dims[j])
            break;
          idx[j] = 0;
        }
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

char **
pp_metadata_op_names (const PsSharding *s)
{
  GPtrArray *a = g_ptr_array_new ();
  const char *p = s ? s->metadata : NULL;
  while (p && (p = strstr (p, "op_name=\"")) != NULL)
    {
      p += strlen ("op_name=\"");
      const char *e = p;
      while (*e && *e != '"')
        {
          if (*e == '\\' && e[1])
            e++;
          e++;
        }
      g_ptr_array_add (a, g_strndup (p, e - p));
      p = e;
    }
  g_ptr_array_add (a, NULL);
  return (char **) g_ptr_array_free (a, FALSE);
}

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
