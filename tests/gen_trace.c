/* gen_trace: writes a synthetic step trace for replay tests and benchmarks.
 *
 *   gen_trace OUT --mesh 32x64 --collectives 2000 --computes 10000
 *             [--bytes 16MiB] [--peak 4GiB] [--async]
 *
 * The mesh is arange over (dims...). The event list repeats a pattern of
 * collectives over the mesh axes (all-reduce along each axis and both,
 * all-gather, reduce-scatter, all-to-all, a shift permute) with the compute
 * events spread evenly between them: matmuls and elementwise ops of a few
 * sizes. With --async every collective is a start ... done pair around the
 * compute that follows it; collectives never overlap each other, so the
 * collective cache changes nothing. Deterministic. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "traces/trace.h"

int
main (int argc, char **argv)
{
  const char *out = NULL, *mesh = "32x64", *bytes_s = "16MiB", *peak_s = "4GiB";
  long n_coll = 2000, n_comp = 10000;
  gboolean async = FALSE;
  for (int i = 1; i < argc; i++)
    {
      if (strcmp (argv[i], "--mesh") == 0 && i + 1 < argc)
        mesh = argv[++i];
      else if (strcmp (argv[i], "--collectives") == 0 && i + 1 < argc)
        n_coll = atol (argv[++i]);
      else if (strcmp (argv[i], "--computes") == 0 && i + 1 < argc)
        n_comp = atol (argv[++i]);
      else if (strcmp (argv[i], "--bytes") == 0 && i + 1 < argc)
        bytes_s = argv[++i];
      else if (strcmp (argv[i], "--peak") == 0 && i + 1 < argc)
        peak_s = argv[++i];
      else if (strcmp (argv[i], "--async") == 0)
        async = TRUE;
      else if (!out && argv[i][0] != '-')
        out = argv[i];
      else
        {
          fprintf (stderr, "gen_trace: bad argument '%s'\n", argv[i]);
          return 2;
        }
    }
  if (!out)
    {
      fprintf (stderr, "usage: gen_trace OUT [--mesh AxB] [--collectives N] [--computes N] "
                       "[--bytes SIZE] [--peak SIZE] [--async]\n");
      return 2;
    }
  GError *error = NULL;
  guint64 bytes, peak;
  PsTraceMesh m = { 0 };
  if (!ps_parse_bytes (bytes_s, "--bytes", &bytes, &error)
      || !ps_parse_bytes (peak_s, "--peak", &peak, &error)
      || !ps_trace_mesh_parse_dims (mesh, "--mesh", &m, &error))
    {
      fprintf (stderr, "gen_trace: %s\n", error->message);
      return 2;
    }
  guint rank = m.rank;
  const gint64 *dims = m.dims;
  gint64 n = 1;
  for (guint i = 0; i < rank; i++)
    n *= dims[i];
  g_autoptr (PsTrace) t = ps_trace_new ("synthetic");
  ps_trace_set_mesh (t, rank, dims, PS_TRACE_ORDER_ARANGE, NULL);
  ps_trace_header (t)->totals.peak_bytes = peak;
  long comp_done = 0;
  for (long c = 0; c < n_coll; c++)
    {
      PsTraceCollective col = { 0 };
      int pattern = (int) (c % 7);
      col.dtype = PS_TRACE_BF16;
      col.groups.form = PS_TRACE_GROUPS_AXES;
      col.groups.n_axes = 1;
      col.groups.axes[0] = rank > 1 ? 1 : 0;
      guint64 g = (guint64) dims[rank > 1 ? 1 : 0];
      col.in_bytes = col.out_bytes = bytes;
      switch (pattern)
        {
        case 0: col.kind = PS_TRACE_ALL_REDUCE; break;
        case 1:
          col.kind = PS_TRACE_ALL_REDUCE;
          col.groups.axes[0] = 0;
          break;
        case 2:
          col.kind = PS_TRACE_ALL_REDUCE;
          col.groups.form = PS_TRACE_GROUPS_ALL;
          col.groups.n_axes = 0;
          col.in_bytes = col.out_bytes = bytes / 4;
          break;
        case 3:
          col.kind = PS_TRACE_ALL_GATHER;
          col.in_bytes = bytes / g;
          col.out_bytes = col.in_bytes * g;
          break;
        case 4:
          col.kind = PS_TRACE_REDUCE_SCATTER;
          col.out_bytes = bytes / g;
          col.in_bytes = col.out_bytes * g;
          break;
        case 5:
          col.kind = PS_TRACE_ALL_TO_ALL;
          col.groups.axes[0] = 0;
          break;
        default:
          col.kind = PS_TRACE_COLLECTIVE_PERMUTE;
          col.pairs.form = PS_TRACE_PAIRS_SHIFT;
          col.pairs.axis = 0;
          col.pairs.offset = 1;
          col.pairs.wrap = TRUE;
          break;
        }
      col.async_id = async ? (guint64) c + 1 : 0;
      char name[64];
      g_snprintf (name, sizeof name, "%s.%ld", ps_trace_collective_kind_name (col.kind), c);
      ps_trace_add_collective (t, name, &col);
      long until = (c + 1) * n_comp / n_coll;
      for (; comp_done < until; comp_done++)
        {
          PsTraceCompute cp = { 0 };
          g_snprintf (name, sizeof name, "fusion.%ld", comp_done);
          if (comp_done % 2 == 0)
            {
              gint64 m = 1024 << (comp_done % 3), k = 1024, nn = 2048;
              cp.op = PS_TRACE_OP_MATMUL;
              cp.dtype = PS_TRACE_BF16;
              cp.has_mxu = TRUE;
              cp.mxu_batch = 1;
              cp.mxu_m = (guint64) m;
              cp.mxu_k = (guint64) k;
              cp.mxu_n = (guint64) nn;
              cp.flops = (guint64) (2 * m * k * nn);
              cp.read_bytes = (guint64) (2 * (m * k + k * nn));
              cp.write_bytes = (guint64) (2 * m * nn);
            }
          else
            {
              cp.op = PS_TRACE_OP_ELEMENTWISE;
              cp.dtype = PS_TRACE_BF16;
              cp.vector_ops = 1 << 22;
              cp.read_bytes = 2 << 22;
              cp.write_bytes = 2 << 22;
            }
          ps_trace_add_compute (t, name, &cp);
        }
      if (async)
        ps_trace_add_done (t, col.async_id);
      if (c % 100 == 0)
        ps_trace_add_memory (t, peak / 2 + (guint64) (c % 3) * (peak / 8));
    }
  if (!ps_trace_write (t, out, &error))
    {
      fprintf (stderr, "gen_trace: %s\n", error->message);
      return 2;
    }
  (void) n;
  return 0;
}
