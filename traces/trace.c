/* Step-trace types: names, the checks shared by the reader and
 * ps_trace_validate(), the in-memory trace. Compact forms (mesh orders,
 * groups, pairs) live in trace_groups.c, the text form in trace_writer.c and
 * trace_reader.c. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "common/ndindex.h"
#include "traces/trace_private.h"

/* ---- names ------------------------------------------------------------------ */

static const struct { const char *name; int size; } dtypes[PS_TRACE_DTYPE_COUNT] = {
  [PS_TRACE_PRED] = { "pred", 1 }, [PS_TRACE_S8] = { "s8", 1 },
  [PS_TRACE_S16] = { "s16", 2 },   [PS_TRACE_S32] = { "s32", 4 },
  [PS_TRACE_S64] = { "s64", 8 },   [PS_TRACE_U8] = { "u8", 1 },
  [PS_TRACE_U16] = { "u16", 2 },   [PS_TRACE_U32] = { "u32", 4 },
  [PS_TRACE_U64] = { "u64", 8 },   [PS_TRACE_F16] = { "f16", 2 },
  [PS_TRACE_BF16] = { "bf16", 2 }, [PS_TRACE_F32] = { "f32", 4 },
  [PS_TRACE_F64] = { "f64", 8 },   [PS_TRACE_C64] = { "c64", 8 },
  [PS_TRACE_C128] = { "c128", 16 },
};

const char *
ps_trace_dtype_name (PsTraceDtype t)
{
  g_return_val_if_fail ((unsigned) t < PS_TRACE_DTYPE_COUNT, "?");
  return dtypes[t].name;
}

gboolean
ps_trace_dtype_from_name (const char *name, PsTraceDtype *out)
{
  for (int i = 0; i < PS_TRACE_DTYPE_COUNT; i++)
    if (strcmp (name, dtypes[i].name) == 0)
      {
        *out = (PsTraceDtype) i;
        return TRUE;
      }
  return FALSE;
}

int
ps_trace_dtype_size_bytes (PsTraceDtype t)
{
  g_return_val_if_fail ((unsigned) t < PS_TRACE_DTYPE_COUNT, 0);
  return dtypes[t].size;
}

static const char *const op_kind_names[PS_TRACE_OP_COUNT] = {
  "matmul", "conv", "elementwise", "reduce", "data-movement", "other",
};

const char *
ps_trace_op_kind_name (PsTraceOpKind k)
{
  g_return_val_if_fail ((unsigned) k < PS_TRACE_OP_COUNT, "?");
  return op_kind_names[k];
}

const char *
ps_trace_precision_name (PsTracePrecision p)
{
  switch (p)
    {
    case PS_TRACE_PRECISION_DEFAULT: return "default";
    case PS_TRACE_PRECISION_HIGH: return "high";
    case PS_TRACE_PRECISION_HIGHEST: return "highest";
    }
  return "?";
}

static const char *const collective_names[PS_TRACE_COLLECTIVE_COUNT] = {
  "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
};

const char *
ps_trace_collective_kind_name (PsTraceCollectiveKind k)
{
  g_return_val_if_fail ((unsigned) k < PS_TRACE_COLLECTIVE_COUNT, "?");
  return collective_names[k];
}

void
tr_append_name (GString *out, const char *name)
{
  for (const unsigned char *p = (const unsigned char *) name; *p; p++)
    {
      if (*p > 0x20 && *p < 0x7f && *p != '%')
        g_string_append_c (out, (char) *p);
      else
        g_string_append_printf (out, "%%%02X", *p);
    }
}

gboolean
tr_decode_name (char *name)
{
  char *w = name;
  for (const char *r = name; *r; r++)
    {
      if (*r != '%')
        {
          *w++ = *r;
          continue;
        }
      if (!g_ascii_isxdigit (r[1]) || !g_ascii_isxdigit (r[2]))
        return FALSE;
      int v = g_ascii_xdigit_value (r[1]) * 16 + g_ascii_xdigit_value (r[2]);
      if (v == 0)
        return FALSE;
      *w++ = (char) v;
      r += 2;
    }
  *w = '\0';
  return TRUE;
}

/* ---- checks ---------------------------------------------------------------------- */

char *
tr_check_header (const PsTraceHeader *h)
{
  const PsTraceMesh *m = &h->mesh;
  if (m->rank < 1 || m->rank > PS_TRACE_MAX_RANK)
    return g_strdup_printf ("mesh rank %u outside 1..%d", m->rank, PS_TRACE_MAX_RANK);
  guint64 n = 1;
  for (guint i = 0; i < m->rank; i++)
    {
      if (m->dims[i] < 1 || m->dims[i] > PS_TRACE_MAX_DEVICES)
        return g_strdup_printf ("mesh dimension %u is %" G_GINT64_FORMAT, i, m->dims[i]);
      n *= (guint64) m->dims[i];
      if (n > PS_TRACE_MAX_DEVICES)
        return g_strdup_printf ("mesh has more than %u devices", PS_TRACE_MAX_DEVICES);
    }
  if (n != h->n_devices)
    return g_strdup_printf ("mesh has %" G_GUINT64_FORMAT " devices but the header "
                            "says %" G_GUINT64_FORMAT, n, h->n_devices);
  if (m->order == PS_TRACE_ORDER_NONPOD2D)
    {
      if (m->rank != 2)
        return g_strdup ("order nonpod2d needs a 2-D mesh");
      if (m->physical[2] != 2)
        return g_strdup ("order nonpod2d needs 2 cores per chip (XxYx2)");
      int64_t cores;
      if (m->physical[0] < 1 || m->physical[1] < 1
          || !ps_checked_product (3, m->physical, PS_MAX_DEVICES, &cores) || (guint64) cores != n)
        return g_strdup_printf ("nonpod2d physical shape %" G_GINT64_FORMAT "x%"
                                G_GINT64_FORMAT "x%" G_GINT64_FORMAT " does not hold the "
                                "%" G_GUINT64_FORMAT " devices", m->physical[0],
                                m->physical[1], m->physical[2], n);
    }
  if (m->order == PS_TRACE_ORDER_LIST)
    {
      if (!m->devices)
        return g_strdup ("order list without devices");
      g_autofree guint8 *seen = g_new0 (guint8, n);
      /* the reader gives at most as many ids as it read; count them there */
      for (guint64 i = 0; i < n; i++)
        {
          if (m->devices[i] >= n)
            return g_strdup_printf ("device %u in the mesh order is not below %"
                                    G_GUINT64_FORMAT, m->devices[i], n);
          if (seen[m->devices[i]]++)
            return g_strdup_printf ("device %u appears twice in the mesh order",
                                    m->devices[i]);
        }
    }
  return NULL;
}

static char *
check_cover (const guint32 *ids, guint64 count, guint64 n_devices, const char *what)
{
  if (count != n_devices)
    return g_strdup_printf ("%s cover %" G_GUINT64_FORMAT " devices, the mesh has %"
                            G_GUINT64_FORMAT, what, count, n_devices);
  g_autofree guint8 *seen = g_new0 (guint8, n_devices ? n_devices : 1);
  for (guint64 i = 0; i < count; i++)
    {
      if (ids[i] >= n_devices)
        return g_strdup_printf ("device %u in %s is not below the %" G_GUINT64_FORMAT
                                " devices of the mesh", ids[i], what, n_devices);
      if (seen[ids[i]]++)
        return g_strdup_printf ("device %u appears twice in %s", ids[i], what);
    }
  return NULL;
}

char *
tr_groups_resolve (PsTraceGroups *g, const PsTraceHeader *h)
{
  const PsTraceMesh *m = &h->mesh;
  switch (g->form)
    {
    case PS_TRACE_GROUPS_ALL:
      g->n_groups = 1;
      g->group_size = h->n_devices;
      return NULL;
    case PS_TRACE_GROUPS_AXES:
      {
        guint seen = 0;
        guint64 size = 1;
        if (g->n_axes == 0)
          return g_strdup ("groups name no mesh axis");
        for (guint i = 0; i < g->n_axes; i++)
          {
            if (g->axes[i] >= m->rank)
              return g_strdup_printf ("groups name mesh axis %u but the mesh has %u "
                                      "axes", g->axes[i], m->rank);
            if (seen & (1u << g->axes[i]))
              return g_strdup_printf ("groups name mesh axis %u twice", g->axes[i]);
            seen |= 1u << g->axes[i];
            size *= (guint64) m->dims[g->axes[i]];
          }
        g->group_size = size;
        g->n_groups = h->n_devices / size;
        return NULL;
      }
    case PS_TRACE_GROUPS_IOTA:
      {
        /* bounded products: huge dims must not wrap around to a match */
        guint64 n = 1;
        for (guint i = 0; i < g->iota_rank; i++)
          {
            if (g->iota_dims[i] < 1 || (guint64) g->iota_dims[i] > h->n_devices)
              return g_strdup_printf ("iota reshape dim %" G_GINT64_FORMAT " does not fit "
                                      "the %" G_GUINT64_FORMAT " devices", g->iota_dims[i],
                                      h->n_devices);
            n *= (guint64) g->iota_dims[i];
            if (n > h->n_devices)
              return g_strdup_printf ("iota reshape dims hold more than the %"
                                      G_GUINT64_FORMAT " devices", h->n_devices);
          }
        if (g->n_groups > h->n_devices || g->group_size > h->n_devices)
          return g_strdup_printf ("iota groups [%" G_GUINT64_FORMAT ",%" G_GUINT64_FORMAT
                                  "] do not fit the %" G_GUINT64_FORMAT " devices",
                                  g->n_groups, g->group_size, h->n_devices);
        if (g->n_groups * g->group_size != n)
          return g_strdup_printf ("iota groups [%" G_GUINT64_FORMAT ",%" G_GUINT64_FORMAT
                                  "] do not hold the %" G_GUINT64_FORMAT " ids of their "
                                  "reshape dims", g->n_groups, g->group_size, n);
        if (n != h->n_devices)
          return g_strdup_printf ("iota groups cover %" G_GUINT64_FORMAT " devices, the "
                                  "mesh has %" G_GUINT64_FORMAT, n, h->n_devices);
        if (g->group_size == 0)
          return g_strdup ("empty replica group");
        return NULL;
      }
    case PS_TRACE_GROUPS_LIST:
      if (g->group_size == 0 || !g->devices)
        return g_strdup ("empty replica group");
      return check_cover (g->devices, g->n_groups * g->group_size, h->n_devices,
                          "replica groups");
    }
  return g_strdup ("unknown groups form");
}

char *
tr_check_pairs (const PsTracePairs *p, const PsTraceHeader *h)
{
  const PsTraceMesh *m = &h->mesh;
  if (p->form == PS_TRACE_PAIRS_SHIFT)
    {
      if (p->axis >= m->rank)
        return g_strdup_printf ("shift along mesh axis %u but the mesh has %u axes",
                                p->axis, m->rank);
      if (p->offset == 0 || p->offset >= m->dims[p->axis]
          || -p->offset >= m->dims[p->axis])
        return g_strdup_printf ("shift offset %" G_GINT64_FORMAT " along mesh axis %u "
                                "of size %" G_GINT64_FORMAT " (need 0 < |offset| < size)",
                                p->offset, p->axis, m->dims[p->axis]);
      return NULL;
    }
  if (p->n_pairs > 0 && !p->pairs)
    return g_strdup ("pairs missing");
  g_autofree guint8 *src = g_new0 (guint8, h->n_devices ? h->n_devices : 1);
  g_autofree guint8 *dst = g_new0 (guint8, h->n_devices ? h->n_devices : 1);
  for (guint64 i = 0; i < p->n_pairs; i++)
    {
      guint32 a = p->pairs[2 * i], b = p->pairs[2 * i + 1];
      if (a >= h->n_devices || b >= h->n_devices)
        return g_strdup_printf ("pair {%u,%u} names a device not below the %"
                                G_GUINT64_FORMAT " devices of the mesh", a, b,
                                h->n_devices);
      if (src[a]++)
        return g_strdup_printf ("device %u is the source of two pairs", a);
      if (dst[b]++)
        return g_strdup_printf ("device %u is the target of two pairs", b);
    }
  return NULL;
}

typedef struct {
  gsize event;             /* 1-based index of the start */
  guint64 body;            /* the loop body it started in (0: none) */
} PsTraceAsyncStart;

void
tr_checker_init (TrChecker *c, const PsTraceHeader *header)
{
  memset (c, 0, sizeof *c);
  c->header = header;
  c->open_async = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, g_free);
  c->mult[0] = 1;
}

void
tr_checker_clear (TrChecker *c)
{
  g_clear_pointer (&c->open_async, g_hash_table_unref);
}

/* sum += x * runs; FALSE (sum unchanged) when that leaves 64 bits. */
static gboolean
add_runs (guint64 *sum, guint64 x, guint64 runs)
{
  guint64 p;
  return ps_checked_mul_u64 (x, runs, &p) && ps_checked_add_u64 (*sum, p, sum);
}

/* The same, saturating (for writers, whose traces then fail validation). */
static void
add_runs_saturating (guint64 *sum, guint64 x, guint64 runs)
{
  if (!add_runs (sum, x, runs))
    *sum = G_MAXUINT64;
}

char *
tr_checker_event (TrChecker *c, const PsTraceEvent *e, const char **key)
{
  *key = NULL;
  c->sums.n_events++;
  guint64 runs = c->mult[c->depth];
  guint64 body = c->depth > 0 ? c->body[c->depth] : 0;
  switch (e->kind)
    {
    case PS_TRACE_EVENT_COMPUTE:
      {
        const PsTraceCompute *k = &e->compute;
        gboolean mxu_op = k->op == PS_TRACE_OP_MATMUL || k->op == PS_TRACE_OP_CONV;
        /* Sums that wrapped could match a hostile header's totals. An event
         * inside loops counts as often as one step runs it. */
        const char *over = !add_runs (&c->sums.flops, k->flops, runs) ? "flops"
          : !add_runs (&c->sums.read_bytes, k->read_bytes, runs) ? "read_bytes"
          : !add_runs (&c->sums.write_bytes, k->write_bytes, runs) ? "write_bytes"
          : NULL;
        if (over)
          {
            *key = over;
            return g_strdup_printf ("%s of the events so far add up to more than 2^64-1", over);
          }
        if (mxu_op && !k->has_mxu)
          {
            *key = "mxu";
            return g_strdup_printf ("%s event without mxu=BxMxKxN dims",
                                    ps_trace_op_kind_name (k->op));
          }
        if (!mxu_op && k->has_mxu)
          {
            *key = "mxu";
            return g_strdup_printf ("mxu dims on a %s event (only matmul and conv use "
                                    "the MXU)", ps_trace_op_kind_name (k->op));
          }
        if (k->has_mxu && (k->mxu_batch == 0 || k->mxu_m == 0 || k->mxu_k == 0
                           || k->mxu_n == 0))
          {
            *key = "mxu";
            return g_strdup ("mxu dims must be positive");
          }
        return NULL;
      }
    case PS_TRACE_EVENT_COLLECTIVE:
      {
        const PsTraceCollective *k = &e->collective;
        if (!add_runs (&c->sums.collective_bytes, k->in_bytes, runs))
          {
            *key = "in_bytes";
            return g_strdup ("in_bytes of the collectives so far add up to more than 2^64-1");
          }
        guint64 g = k->groups.group_size, gathered;
        const char *kind = ps_trace_collective_kind_name (k->kind);
        *key = "out_bytes";
        switch (k->kind)
          {
          case PS_TRACE_ALL_GATHER:
            if (!ps_checked_mul_u64 (k->in_bytes, g, &gathered) || k->out_bytes != gathered)
              return g_strdup_printf ("all-gather over groups of %" G_GUINT64_FORMAT
                                      " needs out_bytes = %" G_GUINT64_FORMAT " x in_bytes",
                                      g, g);
            break;
          case PS_TRACE_REDUCE_SCATTER:
            if (!ps_checked_mul_u64 (k->out_bytes, g, &gathered) || k->in_bytes != gathered)
              return g_strdup_printf ("reduce-scatter over groups of %" G_GUINT64_FORMAT
                                      " needs in_bytes = %" G_GUINT64_FORMAT " x out_bytes",
                                      g, g);
            break;
          default:
            if (k->in_bytes != k->out_bytes)
              return g_strdup_printf ("%s needs out_bytes = in_bytes", kind);
            break;
          }
        *key = NULL;
        if (k->async_id != 0)
          {
            if (g_hash_table_contains (c->open_async, &k->async_id))
              {
                *key = "async";
                return g_strdup_printf ("async id %" G_GUINT64_FORMAT " is already in "
                                        "flight", k->async_id);
              }
            gint64 *id = g_new (gint64, 1);
            *id = (gint64) k->async_id;
            PsTraceAsyncStart *st = g_new (PsTraceAsyncStart, 1);
            st->event = c->sums.n_events;
            st->body = body;
            g_hash_table_insert (c->open_async, id, st);
          }
        return NULL;
      }
    case PS_TRACE_EVENT_DONE:
      {
        PsTraceAsyncStart *st = g_hash_table_lookup (c->open_async, &e->async_id);
        if (!st)
          return g_strdup_printf ("done for async id %" G_GUINT64_FORMAT " that is not in "
                                  "flight", e->async_id);
        if (st->body != body)
          return g_strdup_printf ("done for async id %" G_GUINT64_FORMAT " started in "
                                  "another loop body (a collective started in a loop is "
                                  "done in the same iteration)", e->async_id);
        g_hash_table_remove (c->open_async, &e->async_id);
        return NULL;
      }
    case PS_TRACE_EVENT_MEMORY:
      if (e->live_bytes > c->sums.peak_bytes)
        c->sums.peak_bytes = e->live_bytes;
      if (c->header && e->live_bytes > c->header->totals.peak_bytes)
        {
          *key = "live_bytes";
          return g_strdup_printf ("live bytes %" G_GUINT64_FORMAT " above the header's "
                                  "peak_bytes %" G_GUINT64_FORMAT, e->live_bytes,
                                  c->header->totals.peak_bytes);
        }
      return NULL;
    case PS_TRACE_EVENT_LOOP:
      if (c->header && c->header->version < 2)
        return g_strdup_printf ("loop lines need format version 2 (the file says %u)",
                                c->header->version);
      if (c->depth >= PS_TRACE_MAX_LOOP_DEPTH)
        return g_strdup_printf ("loops nested deeper than %d", PS_TRACE_MAX_LOOP_DEPTH);
      c->depth++;
      if (!ps_checked_mul_u64 (runs, e->trips, &c->mult[c->depth]))
        {
          *key = "trips";
          return g_strdup ("the loops around this one run it more than 2^64-1 times");
        }
      c->loop_event[c->depth] = c->sums.n_events;
      c->body[c->depth] = ++c->next_body;
      return NULL;
    case PS_TRACE_EVENT_END_LOOP:
      {
        if (c->depth == 0)
          return g_strdup ("endloop without a loop");
        GHashTableIter it;
        gpointer k, v;
        g_hash_table_iter_init (&it, c->open_async);
        while (g_hash_table_iter_next (&it, &k, &v))
          if (((PsTraceAsyncStart *) v)->body == body)
            return g_strdup_printf ("async collective %" G_GINT64_FORMAT " (event %"
                                    G_GSIZE_FORMAT ") started in the loop body has no done "
                                    "before its endloop", *(gint64 *) k,
                                    ((PsTraceAsyncStart *) v)->event);
        c->depth--;
        return NULL;
      }
    default:
      break;
    }
  return g_strdup ("unknown event kind");
}

char *
tr_checker_finish (TrChecker *c, gboolean check_totals)
{
  if (c->depth > 0)
    return g_strdup_printf ("the loop of event %" G_GUINT64_FORMAT " has no endloop",
                            c->loop_event[c->depth]);
  if (g_hash_table_size (c->open_async) > 0)
    {
      /* name the earliest unfinished one, deterministically */
      GHashTableIter it;
      gpointer k, v;
      gint64 id = 0;
      gsize first = G_MAXSIZE;
      g_hash_table_iter_init (&it, c->open_async);
      while (g_hash_table_iter_next (&it, &k, &v))
        if (((PsTraceAsyncStart *) v)->event < first)
          {
            first = ((PsTraceAsyncStart *) v)->event;
            id = *(gint64 *) k;
          }
      return g_strdup_printf ("async collective %" G_GINT64_FORMAT " (event %" G_GSIZE_FORMAT
                              ") has no done", id, first);
    }
  if (!check_totals)
    return NULL;
  const PsTraceTotals *t = &c->header->totals, *s = &c->sums;
  struct { const char *name; guint64 header, sum; } f[] = {
    { "events", t->n_events, s->n_events },
    { "flops", t->flops, s->flops },
    { "read_bytes", t->read_bytes, s->read_bytes },
    { "write_bytes", t->write_bytes, s->write_bytes },
    { "collective_bytes", t->collective_bytes, s->collective_bytes },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (f); i++)
    if (f[i].header != f[i].sum)
      return g_strdup_printf ("totals %s=%" G_GUINT64_FORMAT " in the header but the "
                              "events sum to %" G_GUINT64_FORMAT, f[i].name, f[i].header,
                              f[i].sum);
  return NULL;
}

void
tr_sum_events (const GArray *events, PsTraceTotals *s)
{
  memset (s, 0, sizeof *s);
  guint64 mult[PS_TRACE_MAX_LOOP_DEPTH + 2] = { 1 };
  guint depth = 0;
  for (guint i = 0; i < events->len; i++)
    {
      const PsTraceEvent *e = &g_array_index (events, PsTraceEvent, i);
      guint64 runs = mult[depth];
      s->n_events++;
      switch (e->kind)
        {
        case PS_TRACE_EVENT_COMPUTE:
          add_runs_saturating (&s->flops, e->compute.flops, runs);
          add_runs_saturating (&s->read_bytes, e->compute.read_bytes, runs);
          add_runs_saturating (&s->write_bytes, e->compute.write_bytes, runs);
          break;
        case PS_TRACE_EVENT_COLLECTIVE:
          add_runs_saturating (&s->collective_bytes, e->collective.in_bytes, runs);
          break;
        case PS_TRACE_EVENT_MEMORY:
          s->peak_bytes = MAX (s->peak_bytes, e->live_bytes);
          break;
        case PS_TRACE_EVENT_LOOP:
          if (depth <= PS_TRACE_MAX_LOOP_DEPTH)
            {
              depth++;
              if (!ps_checked_mul_u64 (runs, e->trips, &mult[depth]))
                mult[depth] = G_MAXUINT64;
            }
          break;
        case PS_TRACE_EVENT_END_LOOP:
          if (depth > 0)
            depth--;
          break;
        default:
          break;
        }
    }
}

/* ---- in-memory trace ----------------------------------------------------------------- */

void
tr_event_clear (PsTraceEvent *e)
{
  if (e->kind == PS_TRACE_EVENT_COLLECTIVE)
    {
      g_clear_pointer (&e->collective.groups.devices, g_free);
      g_clear_pointer (&e->collective.pairs.pairs, g_free);
    }
}

void
tr_header_clear (PsTraceHeader *h)
{
  g_clear_pointer (&h->program, g_free);
  g_clear_pointer (&h->slice, g_free);
  g_clear_pointer (&h->mesh.devices, g_free);
}

void
tr_header_copy (PsTraceHeader *dst, const PsTraceHeader *src)
{
  *dst = *src;
  dst->program = g_strdup (src->program);
  dst->slice = g_strdup (src->slice);
  if (src->mesh.devices)
    dst->mesh.devices = g_memdup2 (src->mesh.devices,
                                   (guint64) ps_product ((int) src->mesh.rank, src->mesh.dims)
                                   * sizeof (guint32));
}

PsTrace *
ps_trace_new (const char *program)
{
  PsTrace *t = g_new0 (PsTrace, 1);
  t->header.version = PS_TRACE_FORMAT_VERSION;
  /* the program line needs a non-empty token */
  t->header.program = g_strdup (program && *program ? program : "unnamed");
  t->header.n_devices = 1;
  t->header.mesh.rank = 1;
  t->header.mesh.dims[0] = 1;
  t->events = g_array_new (FALSE, TRUE, sizeof (PsTraceEvent));
  t->names = g_string_chunk_new (4096);
  return t;
}

void
ps_trace_free (PsTrace *t)
{
  if (!t)
    return;
  for (guint i = 0; i < t->events->len; i++)
    tr_event_clear (&g_array_index (t->events, PsTraceEvent, i));
  g_array_free (t->events, TRUE);
  g_string_chunk_free (t->names);
  tr_header_clear (&t->header);
  g_free (t);
}

PsTraceHeader *
ps_trace_header (PsTrace *t)
{
  return &t->header;
}

const PsTraceHeader *
ps_trace_get_header (const PsTrace *t)
{
  return &t->header;
}

void
ps_trace_set_slice (PsTrace *t, const char *slice)
{
  g_free (t->header.slice);
  t->header.slice = slice && *slice ? g_strdup (slice) : NULL;
}

void
ps_trace_set_mesh (PsTrace *t, guint rank, const gint64 *dims,
                   PsTraceDeviceOrder order, const guint32 *devices)
{
  g_return_if_fail (rank >= 1 && rank <= PS_TRACE_MAX_RANK);
  PsTraceMesh *m = &t->header.mesh;
  g_clear_pointer (&m->devices, g_free);
  m->rank = rank;
  memcpy (m->dims, dims, rank * sizeof (gint64));
  m->order = order;
  t->header.n_devices = (guint64) ps_product ((int) rank, dims);
  if (order == PS_TRACE_ORDER_LIST && devices)
    m->devices = g_memdup2 (devices, t->header.n_devices * sizeof (guint32));
}

static PsTraceEvent *
append_event (PsTrace *t, PsTraceEventKind kind, const char *name)
{
  PsTraceEvent e = { .kind = kind };
  if (name)
    e.name = g_string_chunk_insert_const (t->names, name);
  g_array_append_val (t->events, e);
  return &g_array_index (t->events, PsTraceEvent, t->events->len - 1);
}

void
ps_trace_add_compute (PsTrace *t, const char *name, const PsTraceCompute *compute)
{
  PsTraceEvent *e = append_event (t, PS_TRACE_EVENT_COMPUTE, name ? name : "");
  e->compute = *compute;
}

void
ps_trace_add_collective (PsTrace *t, const char *name, const PsTraceCollective *c)
{
  PsTraceEvent *e = append_event (t, PS_TRACE_EVENT_COLLECTIVE, name ? name : "");
  e->collective = *c;
  PsTraceCollective *k = &e->collective;
  if (c->kind == PS_TRACE_COLLECTIVE_PERMUTE)
    {
      memset (&k->groups, 0, sizeof k->groups);
      if (c->pairs.form == PS_TRACE_PAIRS_LIST)
        k->pairs.pairs = g_memdup2 (c->pairs.pairs, 2 * c->pairs.n_pairs * sizeof (guint32));
    }
  else
    {
      memset (&k->pairs, 0, sizeof k->pairs);
      if (c->groups.form == PS_TRACE_GROUPS_LIST)
        k->groups.devices = g_memdup2 (c->groups.devices, c->groups.n_groups
                                       * c->groups.group_size * sizeof (guint32));
      else
        k->groups.devices = NULL;
    }
}

void
ps_trace_add_done (PsTrace *t, guint64 async_id)
{
  append_event (t, PS_TRACE_EVENT_DONE, NULL)->async_id = async_id;
}

void
ps_trace_add_memory (PsTrace *t, guint64 live_bytes)
{
  append_event (t, PS_TRACE_EVENT_MEMORY, NULL)->live_bytes = live_bytes;
}

void
ps_trace_add_loop (PsTrace *t, const char *name, guint64 trips)
{
  append_event (t, PS_TRACE_EVENT_LOOP, name && *name ? name : "loop")->trips = trips;
}

void
ps_trace_add_end_loop (PsTrace *t)
{
  append_event (t, PS_TRACE_EVENT_END_LOOP, NULL);
}

gboolean
ps_trace_has_loops (const PsTrace *t)
{
  for (guint i = 0; i < t->events->len; i++)
    if (g_array_index (t->events, PsTraceEvent, i).kind == PS_TRACE_EVENT_LOOP)
      return TRUE;
  return FALSE;
}

guint64
ps_trace_n_events (const PsTrace *t)
{
  return t->events->len;
}

const PsTraceEvent *
ps_trace_get_event (const PsTrace *t, guint64 index)
{
  g_return_val_if_fail (index < t->events->len, NULL);
  return &g_array_index (t->events, PsTraceEvent, index);
}

/* Runs the checks; fills `sums` when non-NULL. */
static gboolean
validate (const PsTrace *t, gboolean check_totals, PsTraceTotals *sums, GError **error)
{
  const PsTraceHeader *h = &t->header;
  char *why = NULL;
  if (h->version < PS_TRACE_FORMAT_VERSION_MIN || h->version > PS_TRACE_FORMAT_VERSION)
    why = g_strdup_printf ("version %u (this podsim knows versions %d to %d)", h->version,
                           PS_TRACE_FORMAT_VERSION_MIN, PS_TRACE_FORMAT_VERSION);
  else if (!h->program || !*h->program)
    why = g_strdup ("no program name");
  else if (h->slice && !*h->slice)
    why = g_strdup ("empty slice hint");
  else
    why = tr_check_header (h);
  if (why)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "trace header: %s", why);
      g_free (why);
      return FALSE;
    }
  TrChecker c;
  tr_checker_init (&c, check_totals ? h : NULL);
  for (guint i = 0; i < t->events->len && !why; i++)
    {
      PsTraceEvent e = g_array_index (t->events, PsTraceEvent, i);
      const char *key;
      if (e.kind == PS_TRACE_EVENT_COLLECTIVE)
        {
          if (e.collective.kind == PS_TRACE_COLLECTIVE_PERMUTE)
            why = tr_check_pairs (&e.collective.pairs, h);
          else
            why = tr_groups_resolve (&e.collective.groups, h);
        }
      if (!why && (e.kind == PS_TRACE_EVENT_COMPUTE || e.kind == PS_TRACE_EVENT_COLLECTIVE
                   || e.kind == PS_TRACE_EVENT_LOOP)
          && (!e.name || strchr (e.name, '\n')))
        why = g_strdup ("bad event name");
      if (!why)
        why = tr_checker_event (&c, &e, &key);
      if (why)
        {
          static const char *const kinds[] = { "compute", "collective", "done", "memory",
                                               "loop", "endloop" };
          g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "event %u (%s): %s", i + 1,
                       e.name ? e.name : e.kind < G_N_ELEMENTS (kinds) ? kinds[e.kind] : "?",
                       why);
          g_free (why);
          tr_checker_clear (&c);
          return FALSE;
        }
    }
  why = tr_checker_finish (&c, check_totals);
  if (sums)
    *sums = c.sums;
  tr_checker_clear (&c);
  if (why)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "trace: %s", why);
      g_free (why);
      return FALSE;
    }
  return TRUE;
}

gboolean
ps_trace_validate (const PsTrace *t, GError **error)
{
  return validate (t, FALSE, NULL, error);
}

void
ps_trace_update_totals (PsTrace *t)
{
  PsTraceTotals s;
  tr_sum_events (t->events, &s);
  s.peak_bytes = MAX (s.peak_bytes, t->header.totals.peak_bytes);
  t->header.totals = s;
}
