/* Shardings: construction, normalisation, equality and queries.
 *
 * The text form (parser and printer) lives in sharding_text.c; both share
 * the normalising constructor ps_sharding_subgroup_take (sharding.h).
 *
 * A TILED sharding always carries its expanded device array. The iota form
 * (iota_dims/iota_perm) is recomputed from that array after every
 * normalisation, so how a sharding was written never changes how it prints
 * or compares.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "common/ndindex.h"
#include "partitioner/ir/sharding.h"
#include "partitioner/ir/sharding_private.h"

static PsSharding *
sharding_new (PsShardingKind kind)
{
  PsSharding *s = g_new0 (PsSharding, 1);
  s->kind = kind;
  return s;
}

PsSharding *
ps_sharding_replicated (void)
{
  return sharding_new (PS_SHARDING_REPLICATED);
}

PsSharding *
ps_sharding_manual (void)
{
  return sharding_new (PS_SHARDING_MANUAL);
}

PsSharding *
ps_sharding_unknown (void)
{
  return sharding_new (PS_SHARDING_UNKNOWN);
}

PsSharding *
ps_sharding_maximal (int64_t device)
{
  g_return_val_if_fail (device >= 0, NULL);
  PsSharding *s = sharding_new (PS_SHARDING_MAXIMAL);
  s->device = device;
  return s;
}

void
ps_sharding_free (PsSharding *s)
{
  if (s == NULL)
    return;
  g_free (s->tile_dims);
  if (!s->devices_ref)
    g_free (s->devices);
  else if (g_atomic_int_dec_and_test (s->devices_ref))
    {
      g_free (s->devices);
      g_free (s->devices_ref);
    }
  g_free (s->subgroup_kinds);
  g_free (s->iota_dims);
  g_free (s->iota_perm);
  for (int i = 0; i < s->n_elems; i++)
    ps_sharding_free (s->elems[i]);
  g_free (s->elems);
  g_free (s->metadata);
  g_free (s);
}

static int64_t *
dup_i64 (const int64_t *v, int64_t n)
{
  if (n <= 0 || v == NULL)
    return NULL;
  return g_memdup2 (v, (gsize) n * sizeof (int64_t));
}

/* A copy of s that owns every array, or (share) that shares s's device
 * array, counted beside it, and owns the rest. */
static PsSharding *
copy_sharding (const PsSharding *s, gboolean share)
{
  PsSharding *c = g_new0 (PsSharding, 1);
  *c = *s;
  c->devices_ref = NULL;
  if (!share)
    c->devices = dup_i64 (s->devices, s->n_devices);
  else if (s->devices)
    {
      /* The count lives beside the array, so s (const here) gets one
       * the first time it is shared. */
      PsSharding *m = (PsSharding *) s;
      if (!m->devices_ref)
        {
          m->devices_ref = g_new (int, 1);
          *m->devices_ref = 1;
        }
      g_atomic_int_inc (m->devices_ref);
      c->devices_ref = m->devices_ref;
    }
  c->tile_dims = dup_i64 (s->tile_dims, s->n_tile_dims);
  c->subgroup_kinds = s->n_subgroups > 0
    ? g_memdup2 (s->subgroup_kinds, (gsize) s->n_subgroups * sizeof (PsSubgroupKind))
    : NULL;
  c->iota_dims = dup_i64 (s->iota_dims, s->n_iota_dims);
  c->iota_perm = dup_i64 (s->iota_perm, s->n_iota_dims);
  c->elems = s->n_elems > 0 ? g_new0 (PsSharding *, s->n_elems) : NULL;
  for (int i = 0; i < s->n_elems; i++)
    c->elems[i] = copy_sharding (s->elems[i], share);
  c->metadata = g_strdup (s->metadata);
  return c;
}

PsSharding *
ps_sharding_copy (const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, NULL);
  return copy_sharding (s, FALSE);
}

PsSharding *
ps_sharding_share (const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, NULL);
  return copy_sharding (s, TRUE);
}

/* ---- array helpers -------------------------------------------------------- */

int64_t *
sh_expand_iota (int n_reshape, const int64_t *reshape, const int64_t *perm)
{
  int64_t total = ps_product (n_reshape, reshape);
  int64_t *iota = g_new (int64_t, MAX (total, 1));
  for (int64_t i = 0; i < total; i++)
    iota[i] = i;
  if (perm == NULL)
    return iota;
  int64_t *out = ps_transpose_row_major (iota, n_reshape, reshape, perm);
  g_free (iota);
  return out;
}

/* Finds the canonical iota form of a device array: reshape dims R ordered by
 * decreasing stride and the permutation that maps them back to the flat
 * order. Walking the flat array from the innermost position, each maximal
 * arithmetic run becomes one output dim; adjacent dims that are contiguous
 * in both orders merge by construction, which is XLA's canonical form. The
 * candidate is verified by expanding it, so a wrong guess only costs the
 * (still correct) explicit printing. */
static void
detect_iota_scan (PsSharding *s)
{
  g_clear_pointer (&s->iota_dims, g_free);
  g_clear_pointer (&s->iota_perm, g_free);
  s->n_iota_dims = 0;
  int64_t n = s->n_devices;
  if (n <= 0 || s->devices[0] != 0)
    return;
  int64_t sizes[64], strides[64];
  int k = 0;
  int64_t pos = 1;     /* flat-index stride of the current output dim */
  while (pos < n)
    {
      if (k == 64)
        return;
      int64_t step = s->devices[pos];
      if (step <= 0)
        return;
      int64_t len = 1;
      while (len * pos < n && s->devices[len * pos] == len * step)
        len++;
      while (len > 1 && (n / pos) % len != 0)
        len--;
      if (len < 2)
        return;
      sizes[k] = len;
      strides[k] = step;
      k++;
      pos *= len;
    }
  if (k == 0)
    {
      /* A single device: the iota form is [1]. */
      s->n_iota_dims = 1;
      s->iota_dims = g_new (int64_t, 1);
      s->iota_dims[0] = 1;
      return;
    }
  /* Output dims outermost first. */
  int64_t out_sizes[64], out_strides[64];
  for (int j = 0; j < k; j++)
    {
      out_sizes[j] = sizes[k - 1 - j];
      out_strides[j] = strides[k - 1 - j];
    }
  /* Input dims: output dims sorted by decreasing stride. */
  int order[64];
  for (int j = 0; j < k; j++)
    order[j] = j;
  for (int a = 1; a < k; a++)
    for (int b = a; b > 0 && out_strides[order[b]] > out_strides[order[b - 1]]; b--)
      {
        int t = order[b];
        order[b] = order[b - 1];
        order[b - 1] = t;
      }
  int64_t reshape[64], perm[64];
  int64_t expect = 1;
  for (int i = k - 1; i >= 0; i--)
    {
      if (out_strides[order[i]] != expect)
        return;
      expect *= out_sizes[order[i]];
    }
  if (expect != n)
    return;
  for (int i = 0; i < k; i++)
    {
      reshape[i] = out_sizes[order[i]];
      perm[order[i]] = i;
    }
  gboolean identity = TRUE;
  for (int j = 0; j < k; j++)
    identity &= perm[j] == j;
  if (k > PS_SHARDING_MAX_DIMS)
    return;
  /* Verify the candidate in place: the element at output multi-index idx
   * of iota(reshape) transposed by perm is sum(idx[j] * out_strides[j]),
   * because the reshape dims are the output dims sorted by stride. */
  {
    int64_t idx[64] = { 0 };
    int64_t len = out_sizes[k - 1], step = out_strides[k - 1];
    int64_t base = 0;
    const int64_t *d = s->devices;
    for (int64_t pos0 = 0;;)
      {
        for (int64_t t = 0; t < len; t++)
          if (d[pos0 + t] != base + t * step)
            return;
        pos0 += len;
        int j = k - 2;
        for (; j >= 0; j--)
          {
            idx[j]++;
            base += out_strides[j];
            if (idx[j] < out_sizes[j])
              break;
            base -= out_strides[j] * out_sizes[j];
            idx[j] = 0;
          }
        if (j < 0)
          break;
      }
  }
  if (identity)
    {
      s->n_iota_dims = 1;
      s->iota_dims = g_new (int64_t, 1);
      s->iota_dims[0] = n;
      return;
    }
  s->n_iota_dims = k;
  s->iota_dims = dup_i64 (reshape, k);
  s->iota_perm = dup_i64 (perm, k);
}

/* detect_iota_scan's answers for the last few large device arrays it saw.
 * Propagation rebuilds shardings over the same 2048-id arrays thousands of
 * times (a partially replicated sharding and its rewrites, one per tensor
 * of every layer), and the scan reads every id with a multi-index; a
 * memcmp against a remembered array is several times cheaper, and the
 * answer depends on the array's contents alone. Per thread, so no lock. */
#define IOTA_MEMO_SIZE 8
#define IOTA_MEMO_MIN 64
typedef struct {
  int64_t n;
  int64_t *devices;
  int n_iota_dims;
  int64_t iota_dims[PS_SHARDING_MAX_DIMS];
  int64_t iota_perm[PS_SHARDING_MAX_DIMS];
  gboolean has_perm;
} IotaMemo;
static _Thread_local IotaMemo iota_memo[IOTA_MEMO_SIZE];
static _Thread_local int iota_memo_next;

static void
detect_iota (PsSharding *s)
{
  int64_t n = s->n_devices;
  if (n < IOTA_MEMO_MIN || !s->devices)
    {
      detect_iota_scan (s);
      return;
    }
  for (int k = 0; k < IOTA_MEMO_SIZE; k++)
    {
      IotaMemo *m = &iota_memo[k];
      if (m->n != n || memcmp (m->devices, s->devices, (gsize) n * sizeof (int64_t)) != 0)
        continue;
      g_clear_pointer (&s->iota_dims, g_free);
      g_clear_pointer (&s->iota_perm, g_free);
      s->n_iota_dims = m->n_iota_dims;
      s->iota_dims = dup_i64 (m->iota_dims, m->n_iota_dims);
      s->iota_perm = m->has_perm ? dup_i64 (m->iota_perm, m->n_iota_dims) : NULL;
      return;
    }
  detect_iota_scan (s);
  if (s->n_iota_dims > PS_SHARDING_MAX_DIMS)
    return;
  IotaMemo *m = &iota_memo[iota_memo_next];
  iota_memo_next = (iota_memo_next + 1) % IOTA_MEMO_SIZE;
  if (m->n != n)
    {
      g_free (m->devices);
      m->devices = g_new (int64_t, n);
      m->n = n;
    }
  memcpy (m->devices, s->devices, (gsize) n * sizeof (int64_t));
  m->n_iota_dims = s->n_iota_dims;
  if (s->n_iota_dims > 0)
    memcpy (m->iota_dims, s->iota_dims, sizeof (int64_t) * (gsize) s->n_iota_dims);
  m->has_perm = s->iota_perm != NULL;
  if (m->has_perm)
    memcpy (m->iota_perm, s->iota_perm, sizeof (int64_t) * (gsize) s->n_iota_dims);
}

/* ---- normalising constructor --------------------------------------------- */

static PsSharding *
tile_raw (int n_dims, const int64_t *dims, int64_t *devices, int n_sub,
          const PsSubgroupKind *kinds)
{
  PsSharding *s = sharding_new (PS_SHARDING_TILED);
  s->n_tile_dims = n_dims;
  s->tile_dims = dup_i64 (dims, n_dims);
  s->n_devices = ps_product (n_dims, dims);
  s->devices = devices;
  s->n_subgroups = n_sub;
  if (n_sub > 0)
    s->subgroup_kinds = g_memdup2 (kinds, (gsize) n_sub * sizeof (PsSubgroupKind));
  detect_iota (s);
  return s;
}

static int
cmp_i64 (const void *a, const void *b)
{
  int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;
  return x < y ? -1 : x > y;
}

/* Sorts each run of `group` ids of devices[0..total) (distinct ids >= 0).
 * Propagation rebuilds partially replicated 2048-device shardings all the
 * time, often with groups that a transpose left out of order, where an
 * insertion sort per group was quadratic in the group size. */
static void
sort_groups (int64_t *devices, int64_t total, int64_t group)
{
  gboolean sorted = TRUE;
  int64_t max_id = 0;
  for (int64_t g = 0; g < total; g += group)
    {
      max_id = MAX (max_id, devices[g]);
      for (int64_t j = g + 1; j < g + group; j++)
        {
          max_id = MAX (max_id, devices[j]);
          sorted &= devices[j] > devices[j - 1];
        }
    }
  if (sorted)
    return;
  if (max_id > 4 * total + 1024)
    {
      for (int64_t g = 0; g < total; g += group)
        qsort (devices + g, (size_t) group, sizeof (int64_t), cmp_i64);
      return;
    }
  /* Counting sort of all groups at once: walk the ids in increasing order
   * and append each to its group. */
  int64_t *group_of = g_new (int64_t, max_id + 1);
  for (int64_t d = 0; d <= max_id; d++)
    group_of[d] = -1;
  for (int64_t i = 0, g = 0; i < total; i += group, g++)
    for (int64_t j = i; j < i + group; j++)
      group_of[devices[j]] = g;
  int64_t *fill = g_new (int64_t, total / group);
  for (int64_t g = 0; g < total / group; g++)
    fill[g] = g * group;
  for (int64_t d = 0; d <= max_id; d++)
    if (group_of[d] >= 0)
      devices[fill[group_of[d]]++] = d;
  g_free (fill);
  g_free (group_of);
}

/* XLA's PartialTile: the last dim replicates. */
static PsSharding *
partial_tile (int n_dims, const int64_t *dims, int64_t *devices, int n_sub,
              const PsSubgroupKind *kinds)
{
  int64_t total = ps_product (n_dims, dims);
  int64_t group = dims[n_dims - 1];
  if (n_sub == 1 && (n_dims == 1 || group == total))
    {
      g_free (devices);
      return ps_sharding_replicated ();
    }
  if (group == 1)
    return ps_sharding_subgroup_take (n_dims - 1, dims, devices, n_sub - 1, kinds);
  /* Device order inside a replication group carries no meaning, so sort it
   * to make equal shardings have equal arrays. */
  sort_groups (devices, total, group);
  return tile_raw (n_dims, dims, devices, n_sub, kinds);
}

/* Takes ownership of `devices` (prod(dims) ids, already validated). Mirrors
 * XLA's HloSharding::Subgroup. */
PsSharding *
ps_sharding_subgroup_take (int n_dims, const int64_t *dims, int64_t *devices, int n_sub,
                           const PsSubgroupKind *kinds)
{
  g_assert (n_sub >= 0 && n_sub <= n_dims && n_dims <= PS_SHARDING_MAX_DIMS);
  if (n_sub == 0)
    return tile_raw (n_dims, dims, devices, 0, NULL);
  int data = n_dims - n_sub;
  gboolean all_same = TRUE;
  for (int i = 1; i < n_sub; i++)
    all_same &= kinds[i] == kinds[0];
  if (all_same && ps_product (data, dims) == 1)
    {
      g_free (devices);
      return kinds[0] == PS_SUBGROUP_MANUAL ? ps_sharding_manual () : ps_sharding_replicated ();
    }
  /* Drop size-1 subgroup dims, then merge dims of one kind, manual first. */
  int64_t perm[PS_SHARDING_MAX_DIMS];
  int64_t merged[PS_SHARDING_MAX_DIMS];
  PsSubgroupKind mkinds[2];
  int np = 0, nm = data, nk = 0;
  gboolean needs_merge = FALSE;
  for (int i = 0; i < data; i++)
    {
      perm[np++] = i;
      merged[i] = dims[i];
    }
  for (int pass = 0; pass < 2; pass++)
    {
      PsSubgroupKind want = pass == 0 ? PS_SUBGROUP_MANUAL : PS_SUBGROUP_REPLICATED;
      int64_t size = 1;
      int count = 0;
      for (int i = data; i < n_dims; i++)
        {
          if (kinds[i - data] != want)
            continue;
          if (dims[i] == 1)
            {
              needs_merge = TRUE;
              continue;
            }
          perm[np++] = i;
          size *= dims[i];
          count++;
        }
      if (count > 1)
        needs_merge = TRUE;
      if (count > 0)
        {
          merged[nm++] = size;
          mkinds[nk++] = want;
        }
    }
  /* Kinds out of canonical order (replicated before manual) need the
   * transpose too. */
  for (int i = 0; i < n_sub - 1; i++)
    if (kinds[i] == PS_SUBGROUP_REPLICATED && kinds[i + 1] == PS_SUBGROUP_MANUAL)
      needs_merge = TRUE;
  int64_t *arr = devices;
  int n_out = n_dims;
  const int64_t *out_dims = dims;
  const PsSubgroupKind *out_kinds = kinds;
  int out_sub = n_sub;
  if (needs_merge)
    {
      /* Size-1 dims left out of perm: fold them away first. */
      int64_t sq_dims[PS_SHARDING_MAX_DIMS], sq_perm[PS_SHARDING_MAX_DIMS];
      int nsq = 0;
      int map[PS_SHARDING_MAX_DIMS];
      for (int i = 0; i < n_dims; i++)
        {
          gboolean dropped = i >= data && dims[i] == 1;
          map[i] = dropped ? -1 : nsq;
          if (!dropped)
            sq_dims[nsq++] = dims[i];
        }
      for (int j = 0; j < np; j++)
        sq_perm[j] = map[perm[j]];
      arr = ps_transpose_row_major (devices, nsq, sq_dims, sq_perm);
      g_free (devices);
      n_out = nm;
      out_dims = merged;
      out_kinds = mkinds;
      out_sub = nk;
    }
  if (n_out == 0)
    {
      /* Every dim had size 1: one device holds the whole (scalar) tensor.
       * A rank-0 tile assignment has no text form; maximal says the same. */
      PsSharding *s = ps_sharding_maximal (arr[0]);
      g_free (arr);
      return s;
    }
  if (out_sub == 0)
    return tile_raw (n_out, out_dims, arr, 0, NULL);
  if (out_sub == 1 && out_kinds[0] == PS_SUBGROUP_MANUAL
      && ps_product (n_out, out_dims) == out_dims[n_out - 1])
    {
      g_free (arr);
      return ps_sharding_manual ();
    }
  if (out_kinds[out_sub - 1] == PS_SUBGROUP_REPLICATED)
    return partial_tile (n_out, out_dims, arr, out_sub, out_kinds);
  return tile_raw (n_out, out_dims, arr, out_sub, out_kinds);
}

static gboolean
check_devices (int n_dims, const int64_t *dims, const int64_t *devices)
{
  g_return_val_if_fail (n_dims >= 1 && n_dims <= PS_SHARDING_MAX_DIMS, FALSE);
  int64_t total = 1;
  for (int i = 0; i < n_dims; i++)
    {
      g_return_val_if_fail (dims[i] >= 1 && dims[i] <= PS_SHARDING_MAX_DEVICES / total, FALSE);
      total *= dims[i];
    }
  g_return_val_if_fail (devices != NULL, FALSE);
  /* Propagation builds many shardings over thousands of devices: a bitmap
   * over the ids is much cheaper than a hash set here. */
  int64_t max_id = 0;
  for (int64_t i = 0; i < total; i++)
    {
      g_return_val_if_fail (devices[i] >= 0 && devices[i] < PS_SHARDING_MAX_DEVICES, FALSE);
      max_id = MAX (max_id, devices[i]);
    }
  /* Up to 32768 ids (a pod has 2048) the bitmap lives on the stack. */
  guint8 local[4096];
  gsize bytes = (gsize) (max_id / 8 + 1);
  g_autofree guint8 *heap = bytes > sizeof local ? g_malloc0 (bytes) : NULL;
  guint8 *seen = heap ? heap : local;
  if (!heap)
    memset (seen, 0, bytes);
  for (int64_t i = 0; i < total; i++)
    {
      guint8 bit = (guint8) (1u << (devices[i] & 7));
      g_return_val_if_fail (!(seen[devices[i] >> 3] & bit), FALSE);
      seen[devices[i] >> 3] |= bit;
    }
  return TRUE;
}

PsSharding *
ps_sharding_tiled (int n_dims, const int64_t *dims, const int64_t *devices)
{
  if (!check_devices (n_dims, dims, devices))
    return NULL;
  return ps_sharding_subgroup_take (n_dims, dims, dup_i64 (devices, ps_product (n_dims, dims)), 0,
                                    NULL);
}

PsSharding *
ps_sharding_subgroup (int n_dims, const int64_t *dims, const int64_t *devices, int n_subgroups,
                      const PsSubgroupKind *kinds)
{
  g_return_val_if_fail (n_subgroups >= 0 && n_subgroups <= n_dims, NULL);
  g_return_val_if_fail (n_subgroups == 0 || kinds != NULL, NULL);
  if (!check_devices (n_dims, dims, devices))
    return NULL;
  return ps_sharding_subgroup_take (n_dims, dims, dup_i64 (devices, ps_product (n_dims, dims)),
                                    n_subgroups, kinds);
}

PsSharding *
ps_sharding_partial (int n_dims, const int64_t *dims, const int64_t *devices)
{
  static const PsSubgroupKind repl = PS_SUBGROUP_REPLICATED;
  return ps_sharding_subgroup (n_dims, dims, devices, 1, &repl);
}

PsSharding *
ps_sharding_tuple (int n, PsSharding **elems)
{
  g_return_val_if_fail (n >= 0 && (n == 0 || elems != NULL), NULL);
  PsSharding *s = sharding_new (PS_SHARDING_TUPLE);
  /* Tuple shardings list leaves depth-first, so nested tuples flatten. */
  GPtrArray *leaves = g_ptr_array_new ();
  for (int i = 0; i < n; i++)
    {
      g_return_val_if_fail (elems[i] != NULL, NULL);
      if (elems[i]->kind == PS_SHARDING_TUPLE)
        {
          for (int j = 0; j < elems[i]->n_elems; j++)
            g_ptr_array_add (leaves, elems[i]->elems[j]);
          elems[i]->n_elems = 0;
          ps_sharding_free (elems[i]);
        }
      else
        g_ptr_array_add (leaves, elems[i]);
    }
  s->n_elems = (int) leaves->len;
  s->elems = leaves->len > 0 ? (PsSharding **) g_ptr_array_free (leaves, FALSE) : NULL;
  if (s->elems == NULL)
    g_ptr_array_free (leaves, TRUE);
  return s;
}

/* ---- equality ------------------------------------------------------------- */

static gboolean
equal_impl (const PsSharding *a, const PsSharding *b, gboolean groups)
{
  if (a == b)
    return TRUE;
  if (a == NULL || b == NULL)
    return FALSE;
  if (a->kind != b->kind)
    return FALSE;
  if (groups && (a->group_kind != b->group_kind
                 || (a->group_kind != PS_SHARD_GROUP_NONE && a->group_id != b->group_id)))
    return FALSE;
  switch (a->kind)
    {
    case PS_SHARDING_REPLICATED:
    case PS_SHARDING_MANUAL:
    case PS_SHARDING_UNKNOWN:
      return TRUE;
    case PS_SHARDING_MAXIMAL:
      return a->device == b->device;
    case PS_SHARDING_TILED:
      if (a->n_tile_dims != b->n_tile_dims || a->n_subgroups != b->n_subgroups
          || a->n_devices != b->n_devices)
        return FALSE;
      for (int i = 0; i < a->n_tile_dims; i++)
        if (a->tile_dims[i] != b->tile_dims[i])
          return FALSE;
      for (int i = 0; i < a->n_subgroups; i++)
        if (a->subgroup_kinds[i] != b->subgroup_kinds[i])
          return FALSE;
      /* Every constructor derives the iota form from the array (the same
       * array always gives the same form, and a form expands to exactly
       * one array), so two iota forms compare the arrays in O(rank).
       * Propagation compares 2048-device shardings all the time. */
      if (a->n_iota_dims > 0 && b->n_iota_dims > 0)
        {
          if (a->n_iota_dims != b->n_iota_dims || (a->iota_perm == NULL) != (b->iota_perm == NULL))
            return FALSE;
          for (int i = 0; i < a->n_iota_dims; i++)
            if (a->iota_dims[i] != b->iota_dims[i]
                || (a->iota_perm && a->iota_perm[i] != b->iota_perm[i]))
              return FALSE;
          return TRUE;
        }
      return memcmp (a->devices, b->devices, (gsize) a->n_devices * sizeof (int64_t)) == 0;
    case PS_SHARDING_TUPLE:
      if (a->n_elems != b->n_elems)
        return FALSE;
      for (int i = 0; i < a->n_elems; i++)
        if (!equal_impl (a->elems[i], b->elems[i], groups))
          return FALSE;
      return TRUE;
    }
  return FALSE;
}

gboolean
ps_sharding_equal (const PsSharding *a, const PsSharding *b)
{
  return equal_impl (a, b, TRUE);
}

gboolean
ps_sharding_equal_layout (const PsSharding *a, const PsSharding *b)
{
  return equal_impl (a, b, FALSE);
}

/* ---- queries --------------------------------------------------------------- */

gboolean
ps_sharding_is_replicated (const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, FALSE);
  if (s->kind == PS_SHARDING_TUPLE)
    {
      for (int i = 0; i < s->n_elems; i++)
        if (!ps_sharding_is_replicated (s->elems[i]))
          return FALSE;
      return TRUE;
    }
  return s->kind == PS_SHARDING_REPLICATED;
}

gboolean
ps_sharding_is_tiled (const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, FALSE);
  return s->kind == PS_SHARDING_TILED;
}

gboolean
ps_sharding_is_manual (const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, FALSE);
  if (s->kind == PS_SHARDING_TUPLE)
    {
      for (int i = 0; i < s->n_elems; i++)
        if (!ps_sharding_is_manual (s->elems[i]))
          return FALSE;
      return s->n_elems > 0;
    }
  return s->kind == PS_SHARDING_MANUAL;
}

gboolean
ps_sharding_is_maximal (const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, FALSE);
  return s->kind == PS_SHARDING_MAXIMAL;
}

gboolean
ps_sharding_is_tuple (const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, FALSE);
  return s->kind == PS_SHARDING_TUPLE;
}

int
ps_sharding_data_rank (const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, 0);
  return s->kind == PS_SHARDING_TILED ? s->n_tile_dims - s->n_subgroups : 0;
}

int64_t
ps_sharding_num_tiles (const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, 1);
  return s->kind == PS_SHARDING_TILED ? ps_product (ps_sharding_data_rank (s), s->tile_dims) : 1;
}

int64_t
ps_sharding_replication (const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, 1);
  int64_t r = 1;
  if (s->kind != PS_SHARDING_TILED)
    return r;
  int data = ps_sharding_data_rank (s);
  for (int i = 0; i < s->n_subgroups; i++)
    if (s->subgroup_kinds[i] == PS_SUBGROUP_REPLICATED)
      r *= s->tile_dims[data + i];
  return r;
}

gboolean
ps_sharding_has_manual_subgroup (const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, FALSE);
  if (s->kind != PS_SHARDING_TILED)
    return FALSE;
  for (int i = 0; i < s->n_subgroups; i++)
    if (s->subgroup_kinds[i] == PS_SUBGROUP_MANUAL)
      return TRUE;
  return FALSE;
}

gboolean
ps_sharding_uses_device (const PsSharding *s, int64_t device)
{
  g_return_val_if_fail (s != NULL, FALSE);
  switch (s->kind)
    {
    case PS_SHARDING_MAXIMAL:
      return s->device == device;
    case PS_SHARDING_TILED:
      for (int64_t i = 0; i < s->n_devices; i++)
        if (s->devices[i] == device)
          return TRUE;
      return FALSE;
    case PS_SHARDING_TUPLE:
      for (int i = 0; i < s->n_elems; i++)
        if (ps_sharding_uses_device (s->elems[i], device))
          return TRUE;
      return FALSE;
    default:
      return FALSE;
    }
}

int64_t
ps_sharding_n_ids (const PsSharding *s)
{
  if (s->kind == PS_SHARDING_TILED)
    return s->n_devices;
  int64_t n = 0;
  for (int i = 0; s->kind == PS_SHARDING_TUPLE && i < s->n_elems; i++)
    n += ps_sharding_n_ids (s->elems[i]);
  return n;
}

int64_t
ps_sharding_min_devices (const PsSharding *s)
{
  g_return_val_if_fail (s != NULL, 0);
  int64_t m = 0;
  switch (s->kind)
    {
    case PS_SHARDING_MAXIMAL:
      return s->device + 1;
    case PS_SHARDING_TILED:
      for (int64_t i = 0; i < s->n_devices; i++)
        m = MAX (m, s->devices[i] + 1);
      return m;
    case PS_SHARDING_TUPLE:
      for (int i = 0; i < s->n_elems; i++)
        m = MAX (m, ps_sharding_min_devices (s->elems[i]));
      return m;
    default:
      return 0;
    }
}

gboolean
ps_sharding_device_index (const PsSharding *s, int64_t device, int64_t *index)
{
  g_return_val_if_fail (s != NULL && index != NULL, FALSE);
  g_return_val_if_fail (s->kind == PS_SHARDING_TILED, FALSE);
  for (int64_t i = 0; i < s->n_devices; i++)
    if (s->devices[i] == device)
      {
        int64_t rest = i;
        for (int d = s->n_tile_dims - 1; d >= 0; d--)
          {
            index[d] = rest % s->tile_dims[d];
            rest /= s->tile_dims[d];
          }
        return TRUE;
      }
  return FALSE;
}

/* ---- shapes ---------------------------------------------------------------- */

static int
shape_leaves (const PsShape *shape)
{
  if (shape->etype != PS_TUPLE)
    return 1;
  int n = 0;
  for (int i = 0; i < shape->n_elems; i++)
    n += shape_leaves (shape->elems[i]);
  return n;
}

PsSharding *
ps_sharding_expand_to_shape (const PsSharding *s, const PsShape *shape)
{
  g_return_val_if_fail (s != NULL && shape != NULL, NULL);
  if (shape->etype != PS_TUPLE || s->kind == PS_SHARDING_TUPLE)
    return ps_sharding_copy (s);
  int n = shape_leaves (shape);
  PsSharding **elems = g_new (PsSharding *, MAX (n, 1));
  for (int i = 0; i < n; i++)
    elems[i] = ps_sharding_copy (s);
  PsSharding *t = ps_sharding_tuple (n, elems);
  g_free (elems);
  return t;
}

static PsShape *
tile_shape_rec (const PsSharding *s, const PsShape *shape, int *leaf)
{
  if (shape->etype == PS_TUPLE)
    {
      PsShape *t = ps_shape_copy (shape);
      for (int i = 0; i < t->n_elems; i++)
        {
          PsShape *e = tile_shape_rec (s, shape->elems[i], leaf);
          ps_shape_free (t->elems[i]);
          t->elems[i] = e;
        }
      return t;
    }
  const PsSharding *ls = s;
  if (s->kind == PS_SHARDING_TUPLE)
    {
      g_return_val_if_fail (*leaf < s->n_elems, ps_shape_copy (shape));
      ls = s->elems[*leaf];
    }
  (*leaf)++;
  PsShape *out = ps_shape_copy (shape);
  if (ls->kind == PS_SHARDING_TILED)
    {
      g_return_val_if_fail (ps_sharding_data_rank (ls) == shape->rank, out);
      for (int i = 0; i < shape->rank; i++)
        out->dims[i] = (shape->dims[i] + ls->tile_dims[i] - 1) / ls->tile_dims[i];
    }
  return out;
}

PsShape *
ps_sharding_tile_shape (const PsSharding *s, const PsShape *shape)
{
  g_return_val_if_fail (s != NULL && shape != NULL, NULL);
  int leaf = 0;
  return tile_shape_rec (s, shape, &leaf);
}

gboolean
ps_sharding_tile_bounds (const PsSharding *s, const PsShape *shape, int64_t device,
                         int64_t *offsets, int64_t *limits)
{
  g_return_val_if_fail (s != NULL && shape != NULL && shape->etype != PS_TUPLE, FALSE);
  g_return_val_if_fail (s->kind != PS_SHARDING_TUPLE, FALSE);
  g_return_val_if_fail (shape->rank == 0 || (offsets != NULL && limits != NULL), FALSE);
  for (int i = 0; i < shape->rank; i++)
    {
      offsets[i] = 0;
      limits[i] = shape->dims[i];
    }
  switch (s->kind)
    {
    case PS_SHARDING_MAXIMAL:
      return device == s->device;
    case PS_SHARDING_TILED:
      {
        g_return_val_if_fail (ps_sharding_data_rank (s) == shape->rank, FALSE);
        int64_t index[PS_SHARDING_MAX_DIMS];
        if (!ps_sharding_device_index (s, device, index))
          return FALSE;
        for (int i = 0; i < shape->rank; i++)
          {
            int64_t size = shape->dims[i];
            int64_t per = (size + s->tile_dims[i] - 1) / s->tile_dims[i];
            offsets[i] = MIN (index[i] * per, size);
            limits[i] = MIN (offsets[i] + per, size);
          }
        return TRUE;
      }
    default:
      return TRUE;
    }
}

PsSharding *
ps_sharding_leaf (const PsSharding *s, int leaf)
{
  g_return_val_if_fail (s != NULL, NULL);
  if (s->kind != PS_SHARDING_TUPLE)
    return ps_sharding_copy (s);
  g_return_val_if_fail (leaf >= 0 && leaf < s->n_elems, NULL);
  return ps_sharding_copy (s->elems[leaf]);
}

/* ---- mesh_split ------------------------------------------------------------ */

PsSharding *
ps_sharding_mesh_split (int rank, int mesh_rank, const int64_t *mesh_dims,
                        const int64_t *mesh_devices, const int64_t *dims_mapping,
                        GError **error)
{
  g_return_val_if_fail (rank >= 0 && mesh_rank >= 1 && mesh_dims != NULL, NULL);
  g_return_val_if_fail (rank == 0 || dims_mapping != NULL, NULL);
  if (rank + 1 > PS_SHARDING_MAX_DIMS || mesh_rank > PS_SHARDING_MAX_DIMS)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                   "mesh_split: rank %d or mesh rank %d exceeds %d", rank, mesh_rank,
                   PS_SHARDING_MAX_DIMS - 1);
      return NULL;
    }
  int64_t n = 1;
  for (int m = 0; m < mesh_rank; m++)
    {
      if (mesh_dims[m] < 1 || n > PS_SHARDING_MAX_DEVICES / mesh_dims[m])
        {
          g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                       "mesh_split: mesh dim %d has bad size %" G_GINT64_FORMAT, m,
                       mesh_dims[m]);
          return NULL;
        }
      n *= mesh_dims[m];
    }
  gboolean used[PS_SHARDING_MAX_DIMS] = { FALSE };
  int64_t perm[PS_SHARDING_MAX_DIMS];
  int64_t tile[PS_SHARDING_MAX_DIMS];
  int np = 0;
  for (int i = 0; i < rank; i++)
    {
      int64_t m = dims_mapping[i];
      tile[i] = 1;
      if (m == -1)
        continue;
      if (m < -1 || m >= mesh_rank)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                       "mesh_split: tensor dim %d maps to mesh dim %" G_GINT64_FORMAT
                       ", but the mesh has %d dims", i, m, mesh_rank);
          return NULL;
        }
      if (used[m])
        {
          g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                       "mesh_split: mesh dim %" G_GINT64_FORMAT " is used by two tensor dims",
                       m);
          return NULL;
        }
      used[m] = TRUE;
      perm[np++] = m;
      tile[i] = mesh_dims[m];
    }
  /* Mesh dims no tensor dim uses replicate; they go last, in mesh order,
   * and become the one replicated subgroup dim. */
  int64_t repl = 1;
  for (int m = 0; m < mesh_rank; m++)
    if (!used[m])
      {
        perm[np++] = m;
        repl *= mesh_dims[m];
      }
  tile[rank] = repl;

  int64_t *ids;
  if (mesh_devices != NULL)
    {
      g_autoptr (GHashTable) seen = g_hash_table_new (g_int64_hash, g_int64_equal);
      for (int64_t i = 0; i < n; i++)
        {
          if (mesh_devices[i] < 0 || g_hash_table_contains (seen, &mesh_devices[i]))
            {
              g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                           "mesh_split: mesh device %" G_GINT64_FORMAT " is %s",
                           mesh_devices[i], mesh_devices[i] < 0 ? "negative" : "listed twice");
              return NULL;
            }
          g_hash_table_add (seen, (gpointer) &mesh_devices[i]);
        }
      ids = ps_transpose_row_major (mesh_devices, mesh_rank, mesh_dims, perm);
    }
  else
    ids = sh_expand_iota (mesh_rank, mesh_dims, perm);
  static const PsSubgroupKind repl_kind = PS_SUBGROUP_REPLICATED;
  return ps_sharding_subgroup_take (rank + 1, tile, ids, 1, &repl_kind);
}
