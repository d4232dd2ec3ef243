/* Step-trace writer: the text form of doc/trace-format.md, gzip-compressed
 * for ".gz" paths, written atomically. */
#include "config.h"

#include <string.h>
#include <zlib.h>

#include "traces/trace_private.h"

void
tr_append_event (GString *out, const PsTraceEvent *e)
{
  switch (e->kind)
    {
    case PS_TRACE_EVENT_COMPUTE:
      {
        const PsTraceCompute *k = &e->compute;
        g_string_append_printf (out, "compute %s name=", ps_trace_op_kind_name (k->op));
        tr_append_name (out, e->name);
        g_string_append_printf (out, " dtype=%s precision=%s flops=%" G_GUINT64_FORMAT
                                " read_bytes=%" G_GUINT64_FORMAT " write_bytes=%"
                                G_GUINT64_FORMAT " vector_ops=%" G_GUINT64_FORMAT,
                                ps_trace_dtype_name (k->dtype),
                                ps_trace_precision_name (k->precision), k->flops,
                                k->read_bytes, k->write_bytes, k->vector_ops);
        if (k->has_mxu)
          g_string_append_printf (out, " mxu=%" G_GUINT64_FORMAT "x%" G_GUINT64_FORMAT
                                  "x%" G_GUINT64_FORMAT "x%" G_GUINT64_FORMAT,
                                  k->mxu_batch, k->mxu_m, k->mxu_k, k->mxu_n);
        if (k->has_mxu && k->mxu_window > 1)
          g_string_append_printf (out, " window=%" G_GUINT64_FORMAT, k->mxu_window);
        break;
      }
    case PS_TRACE_EVENT_COLLECTIVE:
      {
        const PsTraceCollective *k = &e->collective;
        g_string_append_printf (out, "collective %s name=",
                                ps_trace_collective_kind_name (k->kind));
        tr_append_name (out, e->name);
        g_string_append_printf (out, " dtype=%s in_bytes=%" G_GUINT64_FORMAT
                                " out_bytes=%" G_GUINT64_FORMAT,
                                ps_trace_dtype_name (k->dtype), k->in_bytes, k->out_bytes);
        g_autofree char *where = k->kind == PS_TRACE_COLLECTIVE_PERMUTE
                                 ? ps_trace_pairs_to_string (&k->pairs)
                                 : ps_trace_groups_to_string (&k->groups);
        g_string_append_printf (out, " %s=%s", k->kind == PS_TRACE_COLLECTIVE_PERMUTE
                                ? "pairs" : "groups", where);
        if (k->async_id)
          g_string_append_printf (out, " async=%" G_GUINT64_FORMAT, k->async_id);
        break;
      }
    case PS_TRACE_EVENT_DONE:
      g_string_append_printf (out, "done %" G_GUINT64_FORMAT, e->async_id);
      break;
    case PS_TRACE_EVENT_MEMORY:
      g_string_append_printf (out, "memory live_bytes=%" G_GUINT64_FORMAT, e->live_bytes);
      break;
    case PS_TRACE_EVENT_LOOP:
      g_string_append_printf (out, "loop trips=%" G_GUINT64_FORMAT " name=", e->trips);
      tr_append_name (out, e->name ? e->name : "loop");
      break;
    case PS_TRACE_EVENT_END_LOOP:
      g_string_append (out, "endloop");
      break;
    default:
      g_assert_not_reached ();
    }
  g_string_append_c (out, '\n');
}

char *
ps_trace_to_text (const PsTrace *t, gsize *len_out)
{
  const PsTraceHeader *h = &t->header;
  PsTraceTotals s;
  tr_sum_events (t->events, &s);
  s.peak_bytes = MAX (s.peak_bytes, h->totals.peak_bytes);

  GString *out = g_string_sized_new (256 + 160 * t->events->len);
  /* the lowest version that can say it: 1 unless there are loops */
  g_string_append_printf (out, "pstrace %d\nprogram ", ps_trace_has_loops (t) ? 2 : 1);
  tr_append_name (out, h->program ? h->program : "");
  g_string_append_printf (out, "\ndevices %" G_GUINT64_FORMAT "\nmesh ", h->n_devices);
  for (guint i = 0; i < h->mesh.rank; i++)
    g_string_append_printf (out, i ? "x%" G_GINT64_FORMAT : "%" G_GINT64_FORMAT,
                            h->mesh.dims[i]);
  g_autofree char *order = tr_order_to_string (&h->mesh);
  g_string_append_printf (out, " order=%s\n", order);
  if (h->slice)
    {
      g_string_append (out, "slice ");
      tr_append_name (out, h->slice);
      g_string_append_c (out, '\n');
    }
  g_string_append_printf (out, "totals events=%" G_GUINT64_FORMAT " flops=%"
                          G_GUINT64_FORMAT " read_bytes=%" G_GUINT64_FORMAT
                          " write_bytes=%" G_GUINT64_FORMAT " collective_bytes=%"
                          G_GUINT64_FORMAT " peak_bytes=%" G_GUINT64_FORMAT "\n",
                          s.n_events, s.flops, s.read_bytes, s.write_bytes,
                          s.collective_bytes, s.peak_bytes);
  for (guint i = 0; i < t->events->len; i++)
    tr_append_event (out, &g_array_index (t->events, PsTraceEvent, i));
  uLong crc = crc32 (0L, Z_NULL, 0);
  /* crc32() takes a uInt length: feed large texts in pieces */
  for (gsize off = 0; off < out->len;)
    {
      gsize n = MIN (out->len - off, (gsize) 1 << 30);
      crc = crc32 (crc, (const Bytef *) out->str + off, (uInt) n);
      off += n;
    }
  g_string_append_printf (out, "end events=%" G_GUINT64_FORMAT " crc32=%08lx\n",
                          s.n_events, (unsigned long) crc);
  if (len_out)
    *len_out = out->len;
  return g_string_free (out, FALSE);
}

/* gzip in memory with a fixed header (no name, mtime 0) so equal traces give
 * equal files. */
static gboolean
gzip_bytes (const char *data, gsize len, GByteArray *out, const char *path,
            GError **error)
{
  z_stream z;
  memset (&z, 0, sizeof z);
  if (deflateInit2 (&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    {
      ps_set_error_at (error, PS_ERROR_IO, path, 0, 0, "cannot start zlib compression");
      return FALSE;
    }
  guint8 buf[65536];
  gsize off = 0;
  int rc;
  do
    {
      gsize chunk = MIN (len - off, (gsize) 1 << 30);
      z.next_in = (Bytef *) data + off;
      z.avail_in = (uInt) chunk;
      off += chunk;
      int flush = off == len ? Z_FINISH : Z_NO_FLUSH;
      do
        {
          z.next_out = buf;
          z.avail_out = sizeof buf;
          rc = deflate (&z, flush);
          if (rc == Z_STREAM_ERROR)
            {
              deflateEnd (&z);
              ps_set_error_at (error, PS_ERROR_IO, path, 0, 0, "zlib compression failed");
              return FALSE;
            }
          g_byte_array_append (out, buf, (guint) (sizeof buf - z.avail_out));
        }
      while (z.avail_out == 0);
    }
  while (off < len);
  deflateEnd (&z);
  if (rc != Z_STREAM_END)
    {
      ps_set_error_at (error, PS_ERROR_IO, path, 0, 0, "zlib compression did not finish");
      return FALSE;
    }
  return TRUE;
}

gboolean
ps_trace_write (const PsTrace *t, const char *path, GError **error)
{
  g_return_val_if_fail (t != NULL && path != NULL, FALSE);
  GError *local = NULL;
  if (!ps_trace_validate (t, &local))
    {
      ps_set_error_at (error, PS_ERROR_INVALID, path, 0, 0, "not written: %s",
                       local->message);
      g_error_free (local);
      return FALSE;
    }
  gsize len;
  g_autofree char *text = ps_trace_to_text (t, &len);
  if (g_str_has_suffix (path, ".gz"))
    {
      g_autoptr (GByteArray) gz = g_byte_array_new ();
      if (!gzip_bytes (text, len, gz, path, error))
        return FALSE;
      return ps_write_file_atomic (path, (const char *) gz->data, gz->len, error);
    }
  return ps_write_file_atomic (path, text, len, error);
}
