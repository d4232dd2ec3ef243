/* Resharding: moving a partitioned value from one sharding to another with
 * the cheapest collectives that do it, and the sharding arithmetic the
 * handlers share (offset tables, device groups, padding masks, deriving a
 * sharding from another's tile array).
 *
 * Strategy, in order (see doc/partitioner.md for the table):
 *  - same layout: nothing;
 *  - every device already holds the target tile (replicated -> tiled,
 *    partially replicated -> tiled, coarse -> finer tiles in a compatible
 *    device order): a local dynamic-slice at a per-device offset;
 *  - same tile structure in another device order: one collective-permute;
 *  - a dim sharded in the source but not in the same way in the target:
 *    all-to-all when the shards move to another dim, otherwise all-gather
 *    that dim, then continue from the partially replicated result;
 *  - anything else (maximal, other device orders): through replicated. */
#include "config.h"

#include <string.h>

#include "common/ndindex.h"
#include "partitioner/spmd/spmd_private.h"

/* ---- memo ----
 *
 * The handlers derive the same few shardings, groups and slice checks over
 * and over (every dot of every layer asks for the same remaps of the same
 * 2048-device tile arrays), and each costs a pass over the device array or
 * more. For the duration of one ps_spmd_partition call they are memoised:
 * tiled shardings are interned (keyed by their tile structure and device
 * array, compared like ps_sharding_equal_layout), and results are kept per
 * (operation, interned ids, arguments). Every memoised function depends
 * only on those, so its results are the same as computing them again. */

typedef struct {
  GHashTable *interned;  /* PsSharding* (owned copy) -> id + 1 */
  GHashTable *results;   /* MemoKey* -> MemoVal* */
  int next_id;
} SpMemo;

typedef struct {
  guint hash;
  int n;
  int64_t v[];
} MemoKey;

typedef struct {
  PsSharding *sharding;  /* remap result (may be NULL) */
  int64_t *ids;          /* groups */
  int n_groups, group_size;
  gboolean flag;         /* local_slice_ok */
} MemoVal;

static _Thread_local SpMemo *memo_cur;

enum { MEMO_REMAP = 1, MEMO_GROUPS, MEMO_SLICE_OK, MEMO_LOCAL_SLICE };

static guint
mix (guint h, int64_t v)
{
  return (h ^ (guint) (v ^ (v >> 32))) * 16777619u;
}

guint
sp_sharding_layout_hash (gconstpointer p)
{
  const PsSharding *s = p;
  guint h = mix (2166136261u, s->n_tile_dims);
  for (int k = 0; k < s->n_tile_dims; k++)
    h = mix (h, s->tile_dims[k]);
  h = mix (h, s->n_subgroups);
  for (int k = 0; k < s->n_subgroups; k++)
    h = mix (h, s->subgroup_kinds[k]);
  /* Equal arrays always have equal iota forms (sharding.c derives the form
   * from the array), so hashing the form is enough when there is one. */
  if (s->n_iota_dims > 0)
    {
      h = mix (h, s->n_iota_dims);
      for (int k = 0; k < s->n_iota_dims; k++)
        h = mix (mix (h, s->iota_dims[k]), s->iota_perm ? s->iota_perm[k] : -1);
      return h;
    }
  int64_t step = s->n_devices / 64 + 1;
  for (int64_t i = 0; i < s->n_devices; i += step)
    h = mix (h, s->devices[i]);
  return h;
}

gboolean
sp_sharding_layout_same (gconstpointer pa, gconstpointer pb)
{
  const PsSharding *a = pa, *b = pb;
  if (a->n_tile_dims != b->n_tile_dims || a->n_subgroups != b->n_subgroups
      || a->n_devices != b->n_devices)
    return FALSE;
  if (memcmp (a->tile_dims, b->tile_dims, sizeof (int64_t) * (gsize) a->n_tile_dims) != 0)
    return FALSE;
  for (int k = 0; k < a->n_subgroups; k++)
    if (a->subgroup_kinds[k] != b->subgroup_kinds[k])
      return FALSE;
  if (a->n_iota_dims > 0 && b->n_iota_dims > 0)
    {
      if (a->n_iota_dims != b->n_iota_dims || (a->iota_perm == NULL) != (b->iota_perm == NULL))
        return FALSE;
      for (int k = 0; k < a->n_iota_dims; k++)
        if (a->iota_dims[k] != b->iota_dims[k] || (a->iota_perm && a->iota_perm[k] != b->iota_perm[k]))
          return FALSE;
      return TRUE;
    }
  return memcmp (a->devices, b->devices, sizeof (int64_t) * (gsize) a->n_devices) == 0;
}

static guint
memo_key_hash (gconstpointer p)
{
  return ((const MemoKey *) p)->hash;
}

static gboolean
memo_key_equal (gconstpointer pa, gconstpointer pb)
{
  const MemoKey *a = pa, *b = pb;
  return a->n == b->n && memcmp (a->v, b->v, sizeof (int64_t) * (gsize) a->n) == 0;
}

static void
memo_val_free (gpointer p)
{
  MemoVal *v = p;
  if (v->sharding)
    ps_sharding_free (v->sharding);
  g_free (v->ids);
  g_free (v);
}

void
sp_memo_push (gpointer *saved)
{
  *saved = memo_cur;
  SpMemo *m = g_new0 (SpMemo, 1);
  m->interned = g_hash_table_new_full (sp_sharding_layout_hash, sp_sharding_layout_same,
                                       (GDestroyNotify) ps_sharding_free, NULL);
  m->results = g_hash_table_new_full (memo_key_hash, memo_key_equal, g_free, memo_val_free);
  memo_cur = m;
}

void
sp_memo_pop (gpointer saved)
{
  SpMemo *m = memo_cur;
  if (m)
    {
      g_hash_table_destroy (m->results);
      g_hash_table_destroy (m->interned);
      g_free (m);
    }
  memo_cur = saved;
}

/* Partitioned values share the memo's interned copy of each tiled
 * sharding while it is active instead of copying the device array each. */
SpPVal *
sp_pval_new (PsInstr *hlo, const PsSharding *s, const PsShape *full)
{
  SpPVal *v = g_new0 (SpPVal, 1);
  v->hlo = hlo;
  /* Values share one interned copy of each tiled sharding while the memo
   * is active instead of copying the device array each. */
  const PsSharding *shared = s ? sp_sharding_intern (s) : NULL;
  v->shared = shared != NULL;
  v->sharding = shared ? (PsSharding *) shared : ps_sharding_copy (s ? s : sp_replicated ());
  v->full = ps_shape_copy (full);
  return v;
}

void
sp_pval_free (SpPVal *v)
{
  if (!v)
    return;
  if (!v->shared)
    ps_sharding_free (v->sharding);
  ps_shape_free (v->full);
  g_free (v);
}

/* The interned id of a tiled sharding, or -1 (no memo, or not tiled). */
static int64_t
memo_id (const PsSharding *s)
{
  if (!memo_cur || !s || s->kind != PS_SHARDING_TILED)
    return -1;
  gpointer id = g_hash_table_lookup (memo_cur->interned, s);
  if (id)
    return GPOINTER_TO_INT (id) - 1;
  int nid = memo_cur->next_id++;
  /* Interned copies carry the layout only (sp_sharding_intern hands them
   * out for shardings without metadata or group). */
  PsSharding *copy = ps_sharding_copy (s);
  g_clear_pointer (&copy->metadata, g_free);
  copy->group_kind = PS_SHARD_GROUP_NONE;
  copy->group_id = 0;
  g_hash_table_insert (memo_cur->interned, copy, GINT_TO_POINTER (nid + 1));
  return nid;
}

const PsSharding *
sp_sharding_intern (const PsSharding *s)
{
  if (!memo_cur || s->kind != PS_SHARDING_TILED || s->metadata
      || s->group_kind != PS_SHARD_GROUP_NONE || s->group_id != 0)
    return NULL;
  gpointer key;
  if (!g_hash_table_lookup_extended (memo_cur->interned, s, &key, NULL))
    {
      memo_id (s);
      if (!g_hash_table_lookup_extended (memo_cur->interned, s, &key, NULL))
        return NULL;
    }
  const PsSharding *k = key;
  /* Equal layouts: also equal in what the layout does not compare (the
   * iota form is derived from the array), except hand-set fields. */
  if (k->device != s->device || k->n_iota_dims != s->n_iota_dims || k->n_elems != 0
      || s->n_elems != 0)
    return NULL;
  return k;
}

/* A key of n values (the caller fills k->v). transfer full. */
static MemoKey *
memo_key_new (int n)
{
  MemoKey *k = g_malloc (sizeof (MemoKey) + sizeof (int64_t) * (gsize) n);
  k->n = n;
  return k;
}

static void
memo_key_seal (MemoKey *k)
{
  guint h = 2166136261u;
  for (int i = 0; i < k->n; i++)
    h = mix (h, k->v[i]);
  k->hash = h;
}

/* The stored value for k (taking k), or NULL after remembering k in *pending
 * for memo_store. */
static MemoVal *
memo_find (MemoKey *k, MemoKey **pending)
{
  memo_key_seal (k);
  MemoVal *v = g_hash_table_lookup (memo_cur->results, k);
  if (v)
    {
      g_free (k);
      *pending = NULL;
      return v;
    }
  *pending = k;
  return NULL;
}

static MemoVal *
memo_store (MemoKey *pending)
{
  MemoVal *v = g_new0 (MemoVal, 1);
  g_hash_table_insert (memo_cur->results, pending, v);
  return v;
}

int64_t
sp_shards (const PsSharding *s, int d)
{
  if (!s || s->kind != PS_SHARDING_TILED || d >= ps_sharding_data_rank (s))
    return 1;
  return s->tile_dims[d];
}

/* Tile index along tile dim `td` of the device at linear position pos. */
static int64_t
tile_coord (const PsSharding *s, int64_t pos, int td)
{
  int64_t stride = 1;
  for (int k = s->n_tile_dims - 1; k > td; k--)
    stride *= s->tile_dims[k];
  return (pos / stride) % s->tile_dims[td];
}

/* Linear position of every device in the tile array (-1: absent).
 * transfer full, n entries. */
static int64_t *
positions (const PsSharding *s, int64_t n)
{
  int64_t *pos = g_new (int64_t, n > 0 ? n : 1);
  for (int64_t i = 0; i < n; i++)
    pos[i] = -1;
  if (s->kind == PS_SHARDING_TILED)
    for (int64_t p = 0; p < s->n_devices; p++)
      if (s->devices[p] >= 0 && s->devices[p] < n)
        pos[s->devices[p]] = p;
  return pos;
}

int64_t *
sp_offset_table (SpModule *m, const PsSharding *s, const PsShape *full, int d)
{
  int64_t *t = g_new0 (int64_t, m->n > 0 ? m->n : 1);
  int64_t k = sp_shards (s, d);
  if (k <= 1)
    return t;
  int64_t size = ps_ceil_div (full->dims[d], k);
  g_autofree int64_t *pos = positions (s, m->n);
  for (int64_t dev = 0; dev < m->n; dev++)
    if (pos[dev] >= 0)
      t[dev] = tile_coord (s, pos[dev], d) * size;
  return t;
}

PsInstr *
sp_offset (SpComp *c, const PsSharding *s, const PsShape *full, int d)
{
  g_autofree int64_t *t = sp_offset_table (c->m, s, full, d);
  return sp_table_lookup (c, t);
}

static int64_t *
groups_compute (const PsSharding *s, const gboolean *dims_mask, int *n_groups, int *group_size)
{
  int nt = s->n_tile_dims;
  int64_t gs = 1, ng = 1;
  for (int k = 0; k < nt; k++)
    {
      if (dims_mask[k])
        gs *= s->tile_dims[k];
      else
        ng *= s->tile_dims[k];
    }
  int64_t *g = g_new0 (int64_t, ng * gs);
  for (int64_t p = 0; p < s->n_devices; p++)
    {
      int64_t gi = 0, mi = 0;
      for (int k = 0; k < nt; k++)
        {
          int64_t ck = tile_coord (s, p, k);
          if (dims_mask[k])
            mi = mi * s->tile_dims[k] + ck;
          else
            gi = gi * s->tile_dims[k] + ck;
        }
      g[gi * gs + mi] = s->devices[p];
    }
  *n_groups = (int) ng;
  *group_size = (int) gs;
  return g;
}

int64_t *
sp_groups (const PsSharding *s, const gboolean *dims_mask, int *n_groups, int *group_size)
{
  int64_t id = memo_id (s);
  if (id < 0)
    return groups_compute (s, dims_mask, n_groups, group_size);
  int nt = s->n_tile_dims;
  MemoKey *k = memo_key_new (2 + nt), *pending;
  k->v[0] = MEMO_GROUPS;
  k->v[1] = id;
  for (int i = 0; i < nt; i++)
    k->v[2 + i] = dims_mask[i] ? 1 : 0;
  MemoVal *v = memo_find (k, &pending);
  if (!v)
    {
      v = memo_store (pending);
      v->ids = groups_compute (s, dims_mask, &v->n_groups, &v->group_size);
    }
  *n_groups = v->n_groups;
  *group_size = v->group_size;
  return g_memdup2 (v->ids, sizeof (int64_t) * (gsize) v->n_groups * (gsize) v->group_size);
}

gboolean
sp_has_padding (const PsSharding *s, const PsShape *full)
{
  if (!s || s->kind != PS_SHARDING_TILED || !ps_shape_is_array (full))
    return FALSE;
  int r = ps_sharding_data_rank (s);
  for (int d = 0; d < r && d < full->rank; d++)
    if (full->dims[d] % s->tile_dims[d] != 0)
      return TRUE;
  return FALSE;
}

/* The groups of devices that split any reduced dim (red[d]) of s: each
 * group's partial results combine into one. NULL when no reduced dim is
 * split. transfer full. */
int64_t *
sp_reduced_groups (const PsSharding *s, const gboolean *red, int r, int *ng, int *gs)
{
  gboolean mask[s->n_tile_dims > 0 ? s->n_tile_dims : 1];
  memset (mask, 0, sizeof mask);
  gboolean any = FALSE;
  for (int d = 0; d < r; d++)
    if (red[d] && sp_shards (s, d) > 1)
      mask[d] = any = TRUE;
  return any ? sp_groups (s, mask, ng, gs) : NULL;
}

PsInstr *
sp_mask_padding (SpComp *c, const SpPVal *v, const gboolean *dims_mask, PsInstr *fill)
{
  const PsSharding *s = v->sharding;
  PsInstr *x = v->hlo;
  if (!sp_has_padding (s, v->full))
    return x;
  PsInstr *pred = NULL;
  const PsShape *ls = x->shape;
  for (int d = 0; d < v->full->rank; d++)
    {
      int64_t k = sp_shards (s, d);
      if (k <= 1 || v->full->dims[d] % k == 0 || (dims_mask && !dims_mask[d]))
        continue;
      PsInstr *io = sp_iota (c, PS_S32, ls->rank, ls->dims, d);
      PsInstr *off = sp_broadcast_scalar (c, sp_offset (c, s, v->full, d), io->shape);
      PsInstr *idx = sp_binary (c, PS_OP_ADD, io, off);
      PsInstr *lim = sp_broadcast_scalar (c, sp_const_scalar (c, PS_S32, (double) v->full->dims[d]),
                                          io->shape);
      PsInstr *p = sp_compare (c, idx, lim, PS_CMP_LT);
      pred = pred ? sp_binary (c, PS_OP_AND, pred, p) : p;
    }
  if (!pred)
    return x;
  return sp_select (c, pred, x, sp_broadcast_scalar (c, fill, x->shape));
}

PsSharding *
sp_make_sharding (int rank, const int64_t *tiles, int64_t rep, const int64_t *devices)
{
  int64_t prod = 1;
  for (int i = 0; i < rank; i++)
    prod *= tiles[i];
  if (prod == 1)
    return ps_sharding_replicated ();
  if (rep <= 1)
    return ps_sharding_tiled (rank, tiles, devices);
  int64_t dims[rank + 1];
  memcpy (dims, tiles, sizeof (int64_t) * (gsize) rank);
  dims[rank] = rep;
  return ps_sharding_partial (rank + 1, dims, devices);
}

/* sp_sharding_remap, optionally keeping manual subgroup dims as manual
 * subgroup dims of the result (they are never data dims). */
static PsSharding *
remap (const PsSharding *s, int rank, const int64_t *src_dim, gboolean keep_manual)
{
  if (s->kind != PS_SHARDING_TILED)
    return ps_sharding_copy (s);
  if (ps_sharding_has_manual_subgroup (s) && !keep_manual)
    return NULL;
  int nt = s->n_tile_dims;
  int first_sub = nt - s->n_subgroups;
  gboolean is_manual_dim[nt];
  for (int k = 0; k < nt; k++)
    is_manual_dim[k] = k >= first_sub && s->subgroup_kinds[k - first_sub] == PS_SUBGROUP_MANUAL;
  int64_t perm[nt];
  gboolean used[nt];
  memset (used, 0, sizeof used);
  int np = 0;
  int64_t tiles[rank > 0 ? rank : 1];
  for (int i = 0; i < rank; i++)
    {
      tiles[i] = 1;
      if (src_dim[i] >= 0 && src_dim[i] < ps_sharding_data_rank (s) && !used[src_dim[i]])
        {
          used[src_dim[i]] = TRUE;
          perm[np++] = src_dim[i];
          tiles[i] = s->tile_dims[src_dim[i]];
        }
    }
  int64_t rep = 1;
  for (int k = 0; k < nt; k++)
    if (!used[k] && !is_manual_dim[k])
      {
        perm[np++] = k;
        rep *= s->tile_dims[k];
      }
  int n_manual = 0;
  int64_t manual_dims[nt];
  for (int k = 0; k < nt; k++)
    if (is_manual_dim[k])
      {
        perm[np++] = k;
        manual_dims[n_manual++] = s->tile_dims[k];
      }
  /* Transpose the tile array by perm, row-major. */
  int64_t *devs = ps_transpose_row_major (s->devices, nt, s->tile_dims, perm);
  PsSharding *r;
  if (n_manual == 0)
    r = sp_make_sharding (rank, tiles, rep, devs);
  else
    {
      int nd = rank + 1 + n_manual;
      int64_t dims[nd];
      PsSubgroupKind kinds[1 + n_manual];
      for (int i = 0; i < rank; i++)
        dims[i] = tiles[i];
      dims[rank] = rep;
      kinds[0] = PS_SUBGROUP_REPLICATED;
      for (int k = 0; k < n_manual; k++)
        {
          dims[rank + 1 + k] = manual_dims[k];
          kinds[1 + k] = PS_SUBGROUP_MANUAL;
        }
      r = ps_sharding_subgroup (nd, dims, devs, 1 + n_manual, kinds);
    }
  g_free (devs);
  return r;
}

/* The memoised remap (borrowed), or NULL with *found FALSE when s is not
 * memoised. */
static const PsSharding *
remap_lookup (const PsSharding *s, int rank, const int64_t *src_dim, gboolean keep_manual,
              gboolean *found)
{
  int64_t id = memo_id (s);
  *found = id >= 0;
  if (id < 0)
    return NULL;
  MemoKey *k = memo_key_new (3 + rank), *pending;
  k->v[0] = MEMO_REMAP;
  k->v[1] = id;
  k->v[2] = keep_manual ? 1 : 0;
  for (int i = 0; i < rank; i++)
    k->v[3 + i] = src_dim[i];
  MemoVal *v = memo_find (k, &pending);
  if (!v)
    {
      v = memo_store (pending);
      v->sharding = remap (s, rank, src_dim, keep_manual);
    }
  return v->sharding;
}

const PsSharding *
sp_sharding_remap_view (const PsSharding *s, int rank, const int64_t *src_dim,
                        PsSharding **owned)
{
  gboolean found;
  const PsSharding *r = remap_lookup (s, rank, src_dim, FALSE, &found);
  *owned = NULL;
  if (found)
    return r;
  return *owned = remap (s, rank, src_dim, FALSE);
}

static PsSharding *
remap_memo (const PsSharding *s, int rank, const int64_t *src_dim, gboolean keep_manual)
{
  gboolean found;
  const PsSharding *r = remap_lookup (s, rank, src_dim, keep_manual, &found);
  if (found)
    return r ? ps_sharding_copy (r) : NULL;
  return remap (s, rank, src_dim, keep_manual);
}

PsSharding *
sp_sharding_remap (const PsSharding *s, int rank, const int64_t *src_dim)
{
  return remap_memo (s, rank, src_dim, FALSE);
}

PsSharding *
sp_sharding_remap_keep_manual (const PsSharding *s, int rank, const int64_t *src_dim)
{
  return remap_memo (s, rank, src_dim, TRUE);
}

/* ---- the moves ---- */

static PsInstr *
maximal_to_replicated (SpComp *c, PsInstr *x, int64_t device)
{
  PsInstr *pid = sp_partition_id (c);
  PsInstr *is_dev = sp_compare (c, pid, sp_const_scalar (c, PS_S32, (double) device), PS_CMP_EQ);
  PsInstr *zero = sp_broadcast_scalar (c, sp_const_zero (c, x->shape->etype), x->shape);
  g_autoptr (PsShape) ps = sp_shape (PS_PRED, x->shape->rank, x->shape->dims);
  PsInstr *sel = sp_select (c, sp_broadcast_scalar (c, is_dev, ps), x, zero);
  int64_t n = c->m->n;
  g_autofree int64_t *all = g_new (int64_t, n);
  for (int64_t i = 0; i < n; i++)
    all[i] = i;
  return sp_all_reduce (c, sel, SP_RED_SUM, 1, (int) n, all);
}

static PsInstr *
tiled_to_replicated (SpComp *c, const SpPVal *v)
{
  const PsSharding *s = v->sharding;
  PsInstr *x = v->hlo;
  int r = v->full->rank;
  gboolean mask[s->n_tile_dims];
  if (!c->m->opts.use_all_gather)
    {
      /* Zeros of the padded full shape, this tile written at its offset,
       * summed over the devices that hold different tiles. */
      int64_t pdims[r > 0 ? r : 1];
      PsInstr *starts[r > 0 ? r : 1];
      memset (mask, 0, sizeof mask);
      for (int d = 0; d < r; d++)
        {
          int64_t k = sp_shards (s, d);
          pdims[d] = ps_ceil_div (v->full->dims[d], k) * k;
          starts[d] = sp_offset (c, s, v->full, d);
          mask[d] = k > 1;
        }
      PsShape *ps = sp_shape (x->shape->etype, r, pdims);
      PsInstr *zeros = sp_broadcast_scalar (c, sp_const_zero (c, x->shape->etype), ps);
      ps_shape_free (ps);
      PsInstr *dus = sp_dynamic_update_slice (c, zeros, x, starts);
      int ng, gs;
      g_autofree int64_t *groups = sp_groups (s, mask, &ng, &gs);
      x = sp_all_reduce (c, dus, SP_RED_SUM, ng, gs, groups);
    }
  else
    for (int d = 0; d < r; d++)
      {
        if (sp_shards (s, d) <= 1)
          continue;
        memset (mask, 0, sizeof mask);
        mask[d] = TRUE;
        int ng, gs;
        g_autofree int64_t *groups = sp_groups (s, mask, &ng, &gs);
        x = sp_all_gather (c, x, d, ng, gs, groups);
      }
  int64_t zeros[r > 0 ? r : 1];
  memset (zeros, 0, sizeof zeros);
  return sp_slice (c, x, zeros, v->full->dims);
}

/* Per device and data dim, the offset of its target tile in the data it
 * holds (tables, r x n) and how far the target tiles overhang (over, r);
 * FALSE when some device's target tile is not inside its data. */
static gboolean
local_slice_plan (SpModule *m, const PsShape *full, const PsSharding *from,
                  const PsSharding *to, int64_t *tables, int64_t *over)
{
  int r = full->rank;
  int64_t n = m->n;
  g_autofree int64_t *pf = positions (from, n);
  g_autofree int64_t *pt = positions (to, n);
  gboolean from_tiled = from->kind == PS_SHARDING_TILED;
  gboolean ok = TRUE;
  for (int d = 0; d < r && ok; d++)
    {
      int64_t N = full->dims[d];
      int64_t ks = sp_shards (from, d), kt = sp_shards (to, d);
      int64_t ss = ps_ceil_div (N, ks), st = ps_ceil_div (N, kt);
      for (int64_t dev = 0; dev < n && ok; dev++)
        {
          if (pt[dev] < 0)
            continue;
          if (from_tiled && pf[dev] < 0)
            {
              ok = FALSE;
              break;
            }
          int64_t is = ks > 1 ? tile_coord (from, pf[dev], d) : 0;
          int64_t it = kt > 1 ? tile_coord (to, pt[dev], d) : 0;
          int64_t lo = it * st, hi = MIN (lo + st, N);
          if (lo >= N)
            continue; /* all padding: any data will do */
          if (lo < is * ss || hi > MIN (is * ss + ss, N))
            {
              ok = FALSE;
              break;
            }
          int64_t off = lo - is * ss;
          tables[d * n + dev] = off;
          over[d] = MAX (over[d], off + st - ss);
        }
    }
  return ok;
}

/* Whether every device's target tile lies in the data it already holds;
 * if so emits the local dynamic-slice and returns it. The plan depends
 * only on the two layouts and the full dims, and the same reshards recur
 * in every layer, so it is memoised. */
static PsInstr *
try_local_slice (SpComp *c, const SpPVal *v, const PsSharding *to)
{
  const PsSharding *from = v->sharding;
  int r = v->full->rank;
  int64_t n = c->m->n;
  gsize cells = (gsize) (r > 0 ? r : 1) * (gsize) n;
  int64_t *tables = NULL, *over = NULL;
  gboolean ok;
  int64_t tid = memo_id (to);
  int64_t fid = from->kind == PS_SHARDING_TILED ? memo_id (from) : -10 - (int64_t) from->kind;
  MemoVal *mv = NULL;
  if (tid >= 0 && fid != -1)
    {
      MemoKey *k = memo_key_new (5 + r), *pending;
      k->v[0] = MEMO_LOCAL_SLICE;
      k->v[1] = fid;
      k->v[2] = tid;
      k->v[3] = n;
      k->v[4] = r;
      for (int d = 0; d < r; d++)
        k->v[5 + d] = v->full->dims[d];
      mv = memo_find (k, &pending);
      if (!mv)
        {
          mv = memo_store (pending);
          /* ids: the tables, then the overhangs. */
          mv->ids = g_new0 (int64_t, cells + (gsize) (r > 0 ? r : 1));
          mv->flag = local_slice_plan (c->m, v->full, from, to, mv->ids, mv->ids + cells);
        }
      ok = mv->flag;
      tables = mv->ids;
      over = mv->ids + cells;
    }
  else
    {
      tables = g_new0 (int64_t, cells);
      over = g_new0 (int64_t, r > 0 ? r : 1);
      ok = local_slice_plan (c->m, v->full, from, to, tables, over);
    }
  PsInstr *res = NULL;
  if (ok)
    {
      PsInstr *x = v->hlo;
      int64_t lo[r > 0 ? r : 1], hi[r > 0 ? r : 1], sizes[r > 0 ? r : 1];
      PsInstr *starts[r > 0 ? r : 1];
      memset (lo, 0, sizeof lo);
      for (int d = 0; d < r; d++)
        hi[d] = MAX (over[d], 0);
      x = sp_pad (c, x, sp_const_zero (c, x->shape->etype), lo, hi);
      for (int d = 0; d < r; d++)
        {
          sizes[d] = ps_ceil_div (v->full->dims[d], sp_shards (to, d));
          starts[d] = sp_table_lookup (c, tables + d * n);
        }
      res = sp_dynamic_slice (c, x, starts, sizes);
    }
  if (!mv)
    {
      g_free (tables);
      g_free (over);
    }
  return res;
}

static gboolean
same_structure (const PsSharding *a, const PsSharding *b)
{
  if (a->kind != PS_SHARDING_TILED || b->kind != PS_SHARDING_TILED)
    return FALSE;
  if (a->n_tile_dims != b->n_tile_dims || a->n_subgroups != b->n_subgroups)
    return FALSE;
  for (int k = 0; k < a->n_tile_dims; k++)
    if (a->tile_dims[k] != b->tile_dims[k])
      return FALSE;
  for (int k = 0; k < a->n_subgroups; k++)
    if (a->subgroup_kinds[k] != b->subgroup_kinds[k])
      return FALSE;
  return TRUE;
}

/* Same tiles, other devices: each target device receives its tile from a
 * source device holding it (replicas paired in order). */
static PsInstr *
permute (SpComp *c, const SpPVal *v, const PsSharding *to)
{
  const PsSharding *from = v->sharding;
  /* Equal tile dims: position p names the same tile (and replica) in
   * both arrays, so p's source device sends to p's target device. */
  int64_t *pairs = g_new (int64_t, from->n_devices * 2);
  int np = 0;
  gboolean identity = TRUE;
  for (int64_t p = 0; p < from->n_devices; p++)
    {
      pairs[2 * np] = from->devices[p];
      pairs[2 * np + 1] = to->devices[p];
      if (from->devices[p] != to->devices[p])
        identity = FALSE;
      np++;
    }
  PsInstr *x = identity ? v->hlo : sp_collective_permute (c, v->hlo, np, pairs);
  g_free (pairs);
  return x;
}

/* Moves one dim's shards to another dim with an all-to-all: `from` splits
 * dim i by k where `to` does not split it, and `to` splits dim j by k where
 * `from` does not. The result is laid out as `from` with tile dim i moved to
 * j; *mid receives that sharding when it is not `to` yet (the caller goes
 * on from there). Returns NULL when no such pair of dims exists. */
static PsInstr *
try_all_to_all (SpComp *c, const SpPVal *v, const PsSharding *to, PsSharding **mid)
{
  const PsSharding *from = v->sharding;
  *mid = NULL;
  if (from->kind != PS_SHARDING_TILED || to->kind != PS_SHARDING_TILED)
    return NULL;
  if (from->n_tile_dims != to->n_tile_dims || from->n_subgroups != to->n_subgroups)
    return NULL;
  int r = v->full->rank;
  int si = -1, dj = -1;
  for (int d = 0; d < r && si < 0; d++)
    if (from->tile_dims[d] > 1 && to->tile_dims[d] == 1)
      for (int e = 0; e < r; e++)
        if (e != d && from->tile_dims[e] == 1 && to->tile_dims[e] == from->tile_dims[d])
          {
            si = d;
            dj = e;
            break;
          }
  if (si < 0 || dj < 0)
    return NULL;
  int64_t k = from->tile_dims[si];
  /* `to` must be `from` with tile dim si moved to dj in the same device
   * order, so that the all-to-all group of a device is its si-group. */
  g_autoptr (PsSharding) expect = NULL;
  {
    /* Rebuild `from` with si and dj swapped in the tile array. */
    int nt = from->n_tile_dims;
    int64_t dims[nt];
    memcpy (dims, from->tile_dims, sizeof dims);
    dims[si] = 1;
    dims[dj] = k;
    int64_t *devs = g_new (int64_t, from->n_devices);
    int64_t sf[nt], stt[nt], s1 = 1, s2 = 1;
    for (int d = nt - 1; d >= 0; d--)
      {
        sf[d] = s1;
        s1 *= from->tile_dims[d];
        stt[d] = s2;
        s2 *= dims[d];
      }
    for (int64_t p = 0; p < from->n_devices; p++)
      {
        int64_t q = 0;
        for (int d = 0; d < nt; d++)
          {
            int64_t cd = (p / sf[d]) % from->tile_dims[d];
            int dd = d == si ? dj : d;
            q += cd * stt[dd];
          }
        devs[q] = from->devices[p];
      }
    if (from->n_subgroups > 0)
      expect = ps_sharding_subgroup (nt, dims, devs, from->n_subgroups, from->subgroup_kinds);
    else
      expect = ps_sharding_tiled (nt, dims, devs);
    g_free (devs);
  }
  if (!expect)
    return NULL;
  if (!ps_sharding_equal_layout (expect, to))
    *mid = ps_sharding_copy (expect);
  /* Local [.., Ni/k, .., Nj, ..]: pad dim j to k * ceil(Nj/k), split it
   * into [k, Nj/k] at a new leading dim, exchange along it, then merge
   * the received pieces back into dim i. */
  int64_t Ni = v->full->dims[si], Nj = v->full->dims[dj];
  int64_t li = ps_ceil_div (Ni, k), lj = ps_ceil_div (Nj, k);
  PsInstr *x = v->hlo;
  int64_t lo[r], hi[r];
  memset (lo, 0, sizeof lo);
  memset (hi, 0, sizeof hi);
  hi[dj] = lj * k - Nj;
  x = sp_pad (c, x, sp_const_zero (c, x->shape->etype), lo, hi);
  /* Reshape to [k, ...] with dim j split: build dims with j -> (k, lj) and
   * move the k to the front. */
  int64_t d1[r + 1];
  int q = 0;
  for (int d = 0; d < r; d++)
    {
      if (d == dj)
        {
          d1[q++] = k;
          d1[q++] = lj;
        }
      else
        d1[q++] = x->shape->dims[d];
    }
  x = sp_reshape (c, x, r + 1, d1);
  int64_t perm[r + 1];
  perm[0] = dj;
  q = 1;
  for (int d = 0; d < r + 1; d++)
    if (d != dj)
      perm[q++] = d;
  x = sp_transpose (c, x, perm);
  gboolean mask[from->n_tile_dims];
  memset (mask, 0, sizeof mask);
  mask[si] = TRUE;
  int ng, gs;
  g_autofree int64_t *groups = sp_groups (from, mask, &ng, &gs);
  x = sp_all_to_all (c, x, 0, ng, gs, groups);
  /* Now [k (source shard of i), dims with i = li, j = lj]; move the k next
   * to dim i and merge. */
  int64_t perm2[r + 1];
  q = 0;
  for (int d = 0; d < r; d++)
    {
      if (d == si)
        perm2[q++] = 0;
      perm2[q++] = d + 1;
    }
  x = sp_transpose (c, x, perm2);
  int64_t d2[r];
  for (int d = 0; d < r; d++)
    d2[d] = d == si ? li * k : d == dj ? lj : x->shape->dims[d < si ? d : d + 1];
  x = sp_reshape (c, x, r, d2);
  int64_t starts[r], limits[r];
  for (int d = 0; d < r; d++)
    {
      starts[d] = 0;
      limits[d] = d == si ? Ni : d2[d];
    }
  x = sp_slice (c, x, starts, limits);
  /* Dim i now holds the full data; pad it back only as the layout needs
   * (none: dim i is not sharded in `to`). */
  return x;
}

static PsInstr *reshard_array (SpComp *c, const SpPVal *v, const PsSharding *to, int depth);

/* All-gathers the data dims d with keep[d] < 0 (each within the devices
 * that differ only in that tile dim, in tile order) and cuts their
 * padding: the result is laid out as sp_sharding_remap (from, keep). */
static PsInstr *
gather_dims (SpComp *c, const SpPVal *v, const int64_t *keep)
{
  const PsSharding *s = v->sharding;
  PsInstr *x = v->hlo;
  int r = v->full->rank;
  gboolean mask[s->n_tile_dims];
  int64_t starts[r > 0 ? r : 1], limits[r > 0 ? r : 1];
  for (int d = 0; d < r; d++)
    {
      starts[d] = 0;
      limits[d] = x->shape->dims[d];
      if (keep[d] >= 0 || sp_shards (s, d) <= 1)
        continue;
      memset (mask, 0, sizeof mask);
      mask[d] = TRUE;
      int ng, gs;
      g_autofree int64_t *groups = sp_groups (s, mask, &ng, &gs);
      x = sp_all_gather (c, x, d, ng, gs, groups);
      limits[d] = v->full->dims[d];
    }
  for (int d = 0; d < r; d++)
    if (keep[d] >= 0)
      limits[d] = x->shape->dims[d];
  return sp_slice (c, x, starts, limits);
}

static PsInstr *
replicated_to (SpComp *c, PsInstr *full_local, const PsShape *full, const PsSharding *to)
{
  if (to->kind != PS_SHARDING_TILED)
    return full_local;
  g_autoptr (PsSharding) rep = ps_sharding_replicated ();
  SpPVal tmp = { full_local, rep, (PsShape *) full };
  return try_local_slice (c, &tmp, to);
}

/* The dims reshard_array gathers on the way from `from` to `to`: those
 * split in `from` and not split alike in `to` get keep[d] = -1, the others
 * keep[d] = d (a remap that drops the gathered dims). TRUE when any is
 * gathered. */
static gboolean
dims_to_gather (const PsSharding *from, const PsSharding *to, int r, int64_t *keep)
{
  gboolean any = FALSE;
  for (int d = 0; d < r; d++)
    {
      int64_t kf = sp_shards (from, d);
      if (kf > 1 && kf != sp_shards (to, d))
        {
          keep[d] = -1;
          any = TRUE;
        }
      else
        keep[d] = d;
    }
  return any;
}

static PsInstr *
reshard_array (SpComp *c, const SpPVal *v, const PsSharding *to, int depth)
{
  const PsSharding *from = v->sharding;
  if (ps_sharding_equal_layout (from, to))
    return v->hlo;
  if (v->full->etype == PS_TOKEN || v->full->etype == PS_TUPLE)
    return v->hlo;
  if (to->kind == PS_SHARDING_MANUAL && from->kind == PS_SHARDING_REPLICATED)
    return v->hlo; /* every device holds the whole value: so does each manual shard */
  gboolean fm = ps_sharding_has_manual_subgroup (from), tm = ps_sharding_has_manual_subgroup (to);
  if ((tm && (fm || from->kind == PS_SHARDING_REPLICATED)) || (fm && tm))
    {
      /* Between partially manual layouts (or from replicated): the manual
       * subgroup dims never take part in the groups, so gathering the data
       * dims and slicing again stays within each manual group. */
      PsInstr *x = from->kind == PS_SHARDING_TILED ? tiled_to_replicated (c, v) : v->hlo;
      return replicated_to (c, x, v->full, to);
    }
  if (from->kind == PS_SHARDING_MANUAL || to->kind == PS_SHARDING_MANUAL || fm || tm)
    {
      sp_fail (c, PS_ERROR_UNSUPPORTED, "cannot reshard between manual and non-manual shardings");
      return v->hlo;
    }
  if (to->kind == PS_SHARDING_UNKNOWN || from->kind == PS_SHARDING_UNKNOWN)
    return v->hlo;
  if (from->kind == PS_SHARDING_MAXIMAL)
    {
      PsInstr *rep = maximal_to_replicated (c, v->hlo, from->device);
      return replicated_to (c, rep, v->full, to);
    }
  if (from->kind == PS_SHARDING_REPLICATED)
    return replicated_to (c, v->hlo, v->full, to);
  /* from is tiled. */
  if (to->kind != PS_SHARDING_TILED)
    return tiled_to_replicated (c, v);
  PsInstr *x = try_local_slice (c, v, to);
  if (x)
    return x;
  if (same_structure (from, to))
    return permute (c, v, to);
  PsSharding *mid_a2a = NULL;
  x = depth < 6 ? try_all_to_all (c, v, to, &mid_a2a) : NULL;
  if (x && mid_a2a)
    {
      SpPVal tmp = { x, mid_a2a, v->full };
      PsInstr *y = reshard_array (c, &tmp, to, depth + 1);
      ps_sharding_free (mid_a2a);
      return y;
    }
  if (x)
    {
      /* The result is `from` with si's shards moved to dj: exactly `to`,
       * but padded dims of the new layout need no fix-up: the slice above
       * removed dim i's padding and dim j was padded before the exchange. */
      return x;
    }
  if (depth < 6)
    {
      /* Gather the dims whose sharding differs, keep the others. */
      int r = v->full->rank;
      int64_t keep[r > 0 ? r : 1];
      if (dims_to_gather (from, to, r, keep))
        {
          g_autoptr (PsSharding) mid = sp_sharding_remap (from, r, keep);
          if (mid && !ps_sharding_equal_layout (mid, from))
            {
              PsInstr *g = gather_dims (c, v, keep);
              SpPVal tmp = { g, mid, v->full };
              return reshard_array (c, &tmp, to, depth + 1);
            }
        }
    }
  PsInstr *rep = tiled_to_replicated (c, v);
  return replicated_to (c, rep, v->full, to);
}

PsInstr *
sp_reshard (SpComp *c, const SpPVal *v, const PsSharding *to)
{
  if (!to)
    to = sp_replicated ();
  if (sp_failed (c))
    return v->hlo;
  if (!ps_shape_is_tuple (v->full))
    {
      /* Borrowed unless a tuple sharding's leaf had to be made: copying
       * 2048-device arrays on every reshard was a tenth of the stage. */
      g_autoptr (PsSharding) own_from = ps_sharding_is_tuple (v->sharding)
                                            ? ps_sharding_leaf (v->sharding, 0) : NULL;
      g_autoptr (PsSharding) own_to = ps_sharding_is_tuple (to) ? ps_sharding_leaf (to, 0) : NULL;
      SpPVal tmp = { v->hlo, own_from ? own_from : v->sharding, v->full };
      return reshard_array (c, &tmp, own_to ? own_to : to, 0);
    }
  /* Tuples: element by element, the leaf shardings depth-first. */
  if (ps_sharding_equal_layout (v->sharding, to))
    return v->hlo;
  int n = v->full->n_elems;
  PsInstr *elems[n > 0 ? n : 1];
  int leaf = 0;
  for (int i = 0; i < n; i++)
    {
      const PsShape *es = v->full->elems[i];
      int nl = ps_shape_leaf_count (es);
      /* Sub-shardings of element i: leaves [leaf, leaf + nl). */
      PsSharding *ef, *et;
      if (nl == 1 && !ps_shape_is_tuple (es))
        {
          ef = ps_sharding_leaf (v->sharding, leaf);
          et = ps_sharding_leaf (to, leaf);
        }
      else
        {
          PsSharding **fe = g_new (PsSharding *, nl > 0 ? nl : 1);
          PsSharding **te = g_new (PsSharding *, nl > 0 ? nl : 1);
          for (int k = 0; k < nl; k++)
            {
              fe[k] = ps_sharding_leaf (v->sharding, leaf + k);
              te[k] = ps_sharding_leaf (to, leaf + k);
            }
          ef = ps_sharding_tuple (nl, fe);
          et = ps_sharding_tuple (nl, te);
          g_free (fe);
          g_free (te);
        }
      SpPVal sub = { sp_gte (c, v->hlo, i), ef, (PsShape *) es };
      elems[i] = sp_reshard (c, &sub, et);
      ps_sharding_free (ef);
      ps_sharding_free (et);
      leaf += nl;
    }
  return sp_tuple (c, n, elems);
}

SpPVal *
sp_reshard_pval (SpComp *c, const SpPVal *v, const PsSharding *to)
{
  PsInstr *x = sp_reshard (c, v, to);
  return sp_pval_new (x, to ? to : sp_replicated (), v->full);
}

/* Whether every device's tile under `to` lies inside the tile it holds under
 * `from`, so a local slice reshards without communication. */
static gboolean
local_slice_ok_compute (SpModule *m, const PsShape *full, const PsSharding *from,
                        const PsSharding *to)
{
  int r = full->rank;
  g_autofree int64_t *pf = positions (from, m->n);
  g_autofree int64_t *pt = positions (to, m->n);
  for (int d = 0; d < r; d++)
    {
      int64_t N = full->dims[d];
      int64_t ks = sp_shards (from, d), kt = sp_shards (to, d);
      int64_t ss = ps_ceil_div (N, ks), st = ps_ceil_div (N, kt);
      for (int64_t dev = 0; dev < m->n; dev++)
        {
          if (pt[dev] < 0)
            continue;
          if (pf[dev] < 0)
            return FALSE;
          int64_t is = ks > 1 ? tile_coord (from, pf[dev], d) : 0;
          int64_t it = kt > 1 ? tile_coord (to, pt[dev], d) : 0;
          int64_t lo = it * st, hi = MIN (lo + st, N);
          if (lo < N && (lo < is * ss || hi > MIN (is * ss + ss, N)))
            return FALSE;
        }
    }
  return TRUE;
}

static gboolean
local_slice_ok (SpModule *m, const PsShape *full, const PsSharding *from, const PsSharding *to)
{
  int64_t fid = memo_id (from), tid = memo_id (to);
  if (fid < 0 || tid < 0)
    return local_slice_ok_compute (m, full, from, to);
  int r = full->rank;
  MemoKey *k = memo_key_new (5 + r), *pending;
  k->v[0] = MEMO_SLICE_OK;
  k->v[1] = fid;
  k->v[2] = tid;
  k->v[3] = m->n;
  k->v[4] = r;
  for (int d = 0; d < r; d++)
    k->v[5 + d] = full->dims[d];
  MemoVal *v = memo_find (k, &pending);
  if (!v)
    {
      v = memo_store (pending);
      v->flag = local_slice_ok_compute (m, full, from, to);
    }
  return v->flag;
}

double
sp_reshard_cost (SpModule *m, const PsShape *full, const PsSharding *from, const PsSharding *to)
{
  /* Bytes each device receives, mirroring the path reshard_array takes, so
   * that the dot handler compares candidates in one unit (its reductions are
   * costed per device too). */
  if (ps_sharding_equal_layout (from, to))
    return 0;
  double full_bytes = (double) ps_shape_bytes (full);
  if (from->kind == PS_SHARDING_MAXIMAL || to->kind != PS_SHARDING_TILED)
    return full_bytes;
  if (from->kind == PS_SHARDING_REPLICATED)
    return full_bytes / (double) ps_sharding_num_tiles (to) * 0.01;
  if (from->kind != PS_SHARDING_TILED)
    return full_bytes;
  double local_bytes = full_bytes / (double) ps_sharding_num_tiles (from);
  if (local_slice_ok (m, full, from, to))
    return local_bytes * 0.01;
  if (same_structure (from, to))
    return local_bytes;
  /* Otherwise reshard_array gathers only the dims whose sharding differs
   * (each device ends up with the `mid` tile), then slices locally. */
  int r = full->rank;
  int64_t keep[r > 0 ? r : 1];
  if (dims_to_gather (from, to, r, keep))
    {
      g_autoptr (PsSharding) mid_own = NULL;
      const PsSharding *mid = sp_sharding_remap_view (from, r, keep, &mid_own);
      if (mid && mid->kind == PS_SHARDING_TILED && local_slice_ok (m, full, mid, to))
        return full_bytes / (double) ps_sharding_num_tiles (mid);
    }
  return full_bytes;
}
