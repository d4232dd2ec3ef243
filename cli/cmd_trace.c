/* podsim trace: step-trace tools.
 *   podsim trace check FILE   validate a trace and print a summary
 *   podsim trace dump FILE    print a trace as plain text (canonical form)
 *   podsim trace lower FILE.hlo -o OUT.pst.gz
 *                             lower a per-device (SPMD) HLO module to a trace */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/checked.h"
#include "partitioner/analysis/cost.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/analysis/lower.h"
#include "partitioner/analysis/memory.h"
#include "traces/trace.h"

/* Bytes with the exact count, so scripts can compare. */
static void
print_bytes (const char *label, guint64 bytes)
{
  g_autofree char *h = ps_format_bytes ((double) bytes);
  printf ("%-18s %s (%" G_GUINT64_FORMAT " bytes)\n", label, h, bytes);
}

static int
trace_check (int argc, char **argv)
{
  g_autoptr (GOptionContext) ctx = g_option_context_new ("FILE - validate a step trace");
  g_option_context_set_summary (ctx,
      "Reads a step trace (.pst or .pst.gz, '-' for standard input), checks every\n"
      "line, the end line's event count and checksum and the header totals, and\n"
      "prints a summary: devices, mesh, events by kind, loops, FLOPs, HBM bytes and\n"
      "collective bytes by kind (FLOPs and bytes count each event as often as one\n"
      "step runs it). Exit status 2 with one error line on bad input.");
  if (!ps_cli_parse (ctx, &argc, &argv))
    return PS_EXIT_USAGE;
  if (argc != 2)
    {
      fprintf (stderr, "podsim trace check: expected one FILE (see --help)\n");
      return PS_EXIT_USAGE;
    }
  GError *error = NULL;
  g_autoptr (PsTraceReader) r = ps_trace_reader_open (argv[1], &error);
  if (!r)
    return ps_cli_fail (error);

  guint64 n_kind[PS_TRACE_EVENT_KIND_COUNT] = { 0 }, n_op[PS_TRACE_OP_COUNT] = { 0 };
  guint64 flops_op[PS_TRACE_OP_COUNT] = { 0 };
  guint64 n_coll[PS_TRACE_COLLECTIVE_COUNT] = { 0 }, bytes_coll[PS_TRACE_COLLECTIVE_COUNT] = { 0 };
  guint64 n_async = 0;
  /* Events as written, and as one step runs them (loops expanded; the
   * reader has checked that these products and sums fit 64 bits). */
  guint64 runs[PS_TRACE_MAX_LOOP_DEPTH + 1] = { 1 }, run_compute = 0, run_coll = 0;
  guint depth = 0, max_depth = 0;
  for (;;)
    {
      const PsTraceEvent *e;
      if (!ps_trace_reader_next (r, &e, &error))
        return ps_cli_fail (error);
      if (!e)
        break;
      n_kind[e->kind]++;
      if (e->kind == PS_TRACE_EVENT_COMPUTE)
        {
          n_op[e->compute.op]++;
          flops_op[e->compute.op] += e->compute.flops * runs[depth];
          run_compute += runs[depth];
        }
      else if (e->kind == PS_TRACE_EVENT_COLLECTIVE)
        {
          n_coll[e->collective.kind]++;
          bytes_coll[e->collective.kind] += e->collective.in_bytes * runs[depth];
          n_async += e->collective.async_id != 0;
          run_coll += runs[depth];
        }
      else if (e->kind == PS_TRACE_EVENT_LOOP)
        {
          depth++;
          runs[depth] = runs[depth - 1] * e->trips;
          max_depth = MAX (max_depth, depth);
        }
      else if (e->kind == PS_TRACE_EVENT_END_LOOP)
        depth--;
    }

  const PsTraceHeader *h = ps_trace_reader_header (r);
  printf ("%s: valid step trace, format version %u\n",
          strcmp (argv[1], "-") == 0 ? "<stdin>" : argv[1], h->version);
  printf ("%-18s %s\n", "program:", h->program);
  printf ("%-18s %" G_GUINT64_FORMAT "\n", "devices:", h->n_devices);
  GString *mesh = g_string_new (NULL);
  for (guint i = 0; i < h->mesh.rank; i++)
    g_string_append_printf (mesh, i ? "x%" G_GINT64_FORMAT : "%" G_GINT64_FORMAT,
                            h->mesh.dims[i]);
  static const char *const orders[] = { "arange", "arange_T", "nonpod2d", "list" };
  printf ("%-18s %s order %s\n", "mesh:", mesh->str, orders[h->mesh.order]);
  g_string_free (mesh, TRUE);
  if (h->slice)
    printf ("%-18s %s\n", "slice:", h->slice);
  printf ("%-18s %" G_GUINT64_FORMAT " (compute %" G_GUINT64_FORMAT ", collective %"
          G_GUINT64_FORMAT " of which async %" G_GUINT64_FORMAT ", memory %"
          G_GUINT64_FORMAT ")\n", "events:", h->totals.n_events,
          n_kind[PS_TRACE_EVENT_COMPUTE], n_kind[PS_TRACE_EVENT_COLLECTIVE], n_async,
          n_kind[PS_TRACE_EVENT_MEMORY]);
  if (n_kind[PS_TRACE_EVENT_LOOP])
    printf ("%-18s %" G_GUINT64_FORMAT " (nested %u deep); one step runs %" G_GUINT64_FORMAT
            " compute events and %" G_GUINT64_FORMAT " collectives\n", "loops:",
            n_kind[PS_TRACE_EVENT_LOOP], max_depth, run_compute, run_coll);
  for (int i = 0; i < PS_TRACE_OP_COUNT; i++)
    if (n_op[i])
      printf ("  compute %-14s %" G_GUINT64_FORMAT " events, %" G_GUINT64_FORMAT " FLOPs\n",
              ps_trace_op_kind_name ((PsTraceOpKind) i), n_op[i], flops_op[i]);
  printf ("%-18s %" G_GUINT64_FORMAT " (%.4g)\n", "FLOPs per device:", h->totals.flops,
          (double) h->totals.flops);
  print_bytes ("HBM read:", h->totals.read_bytes);
  print_bytes ("HBM written:", h->totals.write_bytes);
  print_bytes ("collective bytes:", h->totals.collective_bytes);
  for (int i = 0; i < PS_TRACE_COLLECTIVE_COUNT; i++)
    if (n_coll[i])
      {
        g_autofree char *b = ps_format_bytes ((double) bytes_coll[i]);
        printf ("  %-22s %" G_GUINT64_FORMAT " events, %s (%" G_GUINT64_FORMAT " bytes)\n",
                ps_trace_collective_kind_name ((PsTraceCollectiveKind) i), n_coll[i], b,
                bytes_coll[i]);
      }
  print_bytes ("peak memory:", h->totals.peak_bytes);
  return 0;
}

static int
trace_dump (int argc, char **argv)
{
  g_autoptr (GOptionContext) ctx = g_option_context_new ("FILE - print a step trace as text");
  g_option_context_set_summary (ctx,
      "Reads and validates a step trace (.pst or .pst.gz, '-' for standard input)\n"
      "and prints it as plain text in canonical form (doc/trace-format.md).");
  if (!ps_cli_parse (ctx, &argc, &argv))
    return PS_EXIT_USAGE;
  if (argc != 2)
    {
      fprintf (stderr, "podsim trace dump: expected one FILE (see --help)\n");
      return PS_EXIT_USAGE;
    }
  GError *error = NULL;
  g_autoptr (PsTrace) t = ps_trace_read (argv[1], &error);
  if (!t)
    return ps_cli_fail (error);
  gsize len;
  g_autofree char *text = ps_trace_to_text (t, &len);
  fwrite (text, 1, len, stdout);
  return 0;
}

static gboolean
parse_order (const char *text, PsTraceMesh *m, GError **error)
{
  g_auto (GStrv) xyc = g_str_has_prefix (text, "nonpod2d:") ? g_strsplit (text + 9, "x", -1) : NULL;
  guint64 v[3];
  if (strcmp (text, "arange") == 0)
    m->order = PS_TRACE_ORDER_ARANGE;
  else if (strcmp (text, "arange_T") == 0)
    m->order = PS_TRACE_ORDER_ARANGE_T;
  else if (xyc && g_strv_length (xyc) == 3)
    {
      /* Each extent checked on its own (sscanf's %ld wrapped on overflow);
       * the trace header checks that the product holds the devices. */
      for (int i = 0; i < 3; i++)
        if (!g_ascii_string_to_unsigned (xyc[i], 10, 1, PS_MAX_DEVICES, &v[i], NULL))
          {
            g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--device-order %s: '%s' is not an extent 1 .. %d",
                         text, xyc[i], PS_MAX_DEVICES);
            return FALSE;
          }
      m->order = PS_TRACE_ORDER_NONPOD2D;
      for (int i = 0; i < 3; i++)
        m->physical[i] = (gint64) v[i];
    }
  else
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--device-order: '%s' is not arange, "
                   "arange_T or nonpod2d:XxYxC", text);
      return FALSE;
    }
  return TRUE;
}

static int
trace_lower (int argc, char **argv)
{
  g_autofree char *module_name = NULL;
  char *output = NULL, *mesh = NULL, *order = NULL, *slice = NULL;
  gint64 devices = 0, trip = 0;
  gboolean async = FALSE, no_memory = FALSE, cost_report = FALSE, memory_report = FALSE;
  gboolean unroll = FALSE;
  GOptionEntry entries[] = {
    { "output", 'o', 0, G_OPTION_ARG_FILENAME, &output, "Write the trace here (.pst.gz "
      "compressed, .pst plain, - standard output)", "OUT" },
    { "devices", 0, 0, G_OPTION_ARG_INT64, &devices, "Devices (default: the module's "
      "num_partitions, else 1)", "N" },
    { "mesh", 0, 0, G_OPTION_ARG_STRING, &mesh, "Logical device mesh, e.g. 2x4 (default: "
      "1-D)", "AxB" },
    { "device-order", 0, 0, G_OPTION_ARG_STRING, &order, "Mesh device order: arange (default), "
      "arange_T, nonpod2d:XxYxC (--order: the same)", "ORDER" },
    /* The spelling before run's and bench collective's --device-order. */
    { "order", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &order, NULL, NULL },
    { "slice", 0, 0, G_OPTION_ARG_STRING, &slice, "Slice hint written to the trace", "SLICE" },
    { "trip-count", 0, 0, G_OPTION_ARG_INT64, &trip, "Iterations of a while loop whose "
      "trip count cannot be found (default: such a loop is an error)", "N" },
    { "unroll", 0, 0, G_OPTION_ARG_NONE, &unroll, "Repeat each while loop's events trip-count "
      "times instead of writing a loop (a format version 1 trace)", NULL },
    { "async", 0, 0, G_OPTION_ARG_NONE, &async, "Overlap each collective with the compute "
      "that does not need its result (async start/done)", NULL },
    { "no-memory-events", 0, 0, G_OPTION_ARG_NONE, &no_memory, "No live-bytes watermarks",
      NULL },
    { "cost", 0, 0, G_OPTION_ARG_NONE, &cost_report, "Print FLOPs and HBM bytes per fusion",
      NULL },
    { "memory", 0, 0, G_OPTION_ARG_NONE, &memory_report, "Print the per-device peak and "
      "its largest holders", NULL },
    ps_cli_module_name_entry (&module_name),
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("FILE.hlo - lower an SPMD program "
                                                          "to a step trace");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_set_summary (ctx,
      "Reads an HLO module whose shapes are already per device (the partitioner's\n"
      "output, '-' for standard input) and writes the step trace the simulator\n"
      "replays: one compute event per fusion, a collective event per collective\n"
      "(groups as mesh axes where possible), a while loop as a loop of the trace\n"
      "(one iteration, run trip-count times).");
  gboolean ok = ps_cli_parse (ctx, &argc, &argv);
  g_autofree char *out_path = output, *mesh_s = mesh, *order_s = order, *slice_s = slice;
  if (!ok)
    return PS_EXIT_USAGE;
  if (argc != 2 || !output)
    {
      fprintf (stderr, "podsim trace lower: expected FILE.hlo and -o OUT (see --help)\n");
      return PS_EXIT_USAGE;
    }
  GError *error = NULL;
  PsLowerOptions o;
  ps_lower_options_init (&o);
  PsTraceMesh lmesh = { 0 };
  if ((mesh && !ps_trace_mesh_parse_dims (mesh, "--mesh", &lmesh, &error))
      || (order && !parse_order (order, &lmesh, &error)))
    return ps_cli_fail (error);
  o.mesh = &lmesh;
  if (devices < 0 || devices > PS_MAX_DEVICES || trip < 0)
    {
      fprintf (stderr, "podsim trace lower: --devices must be 1 .. %d and --trip-count positive\n",
               PS_MAX_DEVICES);
      return PS_EXIT_USAGE;
    }
  o.n_devices = devices;
  o.slice = slice;
  o.default_trip_count = trip;
  o.async_collectives = async;
  o.memory_events = !no_memory;
  o.unroll_loops = unroll;
  g_autoptr (PsModule) m = ps_hlo_load (argv[1], module_name, &error);
  if (!m)
    return ps_cli_fail (error);
  g_autoptr (PsTrace) t = ps_lower_module (m, &o, &error);
  if (!t)
    return ps_cli_fail (error);
  FILE *report = strcmp (output, "-") == 0 ? stderr : stdout;
  if (cost_report || memory_report)
    {
      PsCostOptions co;
      ps_cost_options_init (&co);
      co.default_trip_count = trip;
      g_autoptr (PsCostAnalysis) a = ps_cost_analyze (m, &co, &error);
      if (!a)
        return ps_cli_fail (error);
      if (cost_report)
        {
          g_autofree char *text = ps_cost_report (a);
          fputs (text, report);
        }
      if (memory_report)
        {
          g_autoptr (PsMemoryReport) r = ps_memory_analyze (m, a, &error);
          if (!r)
            return ps_cli_fail (error);
          g_autofree char *text = ps_memory_report_to_string (r, 10);
          fputs (text, report);
        }
    }
  if (!ps_trace_write (t, output, &error))
    return ps_cli_fail (error);
  return 0;
}

static const PsCommand subcommands[] = {
  { "check", "validate a step trace and print a summary", trace_check },
  { "dump", "print a step trace as plain text", trace_dump },
  { "lower", "lower a per-device HLO module to a step trace", trace_lower },
};

int
ps_cmd_trace (int argc, char **argv)
{
  static const PsCommandGroup group = {
    "podsim trace",
    "Usage: podsim trace COMMAND [OPTION...] FILE\n\nStep-trace tools (format: doc/trace-format.md).\n",
    "Run 'podsim trace COMMAND --help' for a command's options.\n",
    subcommands, G_N_ELEMENTS (subcommands)
  };
  return ps_cli_dispatch (&group, argc, argv);
}
