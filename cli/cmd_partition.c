/* podsim partition FILE.hlo --devices N [-o OUT.hlo] [--trace OUT.pst.gz] [--memory]
 *
 * Reads an HLO module, completes its shardings (propagation), partitions it
 * into the per-device SPMD program and prints that as HLO text, or writes it
 * atomically with -o. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/error.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/hlo_printer.h"
#include "partitioner/ir/async.h"
#include "partitioner/analysis/lower.h"
#include "partitioner/analysis/memory.h"
#include "partitioner/propagate/propagate.h"
#include "partitioner/spmd/spmd.h"

static int
compare_names (gconstpointer a, gconstpointer b)
{
  return strcmp (*(const char *const *) a, *(const char *const *) b);
}

/* "op: n, op: n" in name order, so the summary is deterministic. */
static char *
fallback_summary (const PsSpmdReport *r)
{
  GString *s = g_string_new (NULL);
  if (!r->fallback_ops)
    return g_string_free (s, FALSE);
  guint n = 0;
  gpointer *keys = g_hash_table_get_keys_as_array (r->fallback_ops, &n);
  qsort (keys, n, sizeof (gpointer), compare_names);
  for (guint i = 0; i < n; i++)
    g_string_append_printf (s, "%s%s: %d", i ? ", " : "", (const char *) keys[i],
                            GPOINTER_TO_INT (g_hash_table_lookup (r->fallback_ops, keys[i])));
  g_free (keys);
  return g_string_free (s, FALSE);
}

int
ps_cmd_partition (int argc, char **argv)
{
  g_autofree char *module_name = NULL;
  gint64 devices = 0;
  char *out_path = NULL, *trace_path = NULL;
  gboolean memory = FALSE, stats = FALSE, no_all_gather = FALSE;
  gint64 windowed = -1, trip = 0;
  gboolean async = FALSE, bidi = FALSE, to_output = FALSE, to_params = FALSE;
  GOptionEntry entries[] = {
    { "devices", 'n', 0, G_OPTION_ARG_INT64, &devices, "Number of devices (partitions)", "N" },
    { "to-output", 0, 0, G_OPTION_ARG_NONE, &to_output,
      "Let propagation choose (or refine) the entry root's sharding (else the module "
      "header decides; default: keep what the file says)", NULL },
    { "to-parameters", 0, 0, G_OPTION_ARG_NONE, &to_params,
      "Let propagation choose (or refine) the entry parameters' shardings", NULL },
    { "output", 'o', 0, G_OPTION_ARG_FILENAME, &out_path,
      "Write the SPMD program to FILE (atomically) instead of standard output", "FILE" },
    { "trace", 0, 0, G_OPTION_ARG_FILENAME, &trace_path,
      "Also lower the program to a step trace (.pst.gz)", "FILE" },
    { "async-collectives", 0, 0, G_OPTION_ARG_NONE, &async,
      "In the --trace, lower collectives as start/done pairs that overlap the compute "
      "in between (as podsim run --async-collectives)", NULL },
    { "trip-count", 0, 0, G_OPTION_ARG_INT64, &trip, "For --memory and --trace: iterations of a "
      "while loop whose trip count cannot be found (default: such a loop is an error)", "N" },
    { "memory", 0, 0, G_OPTION_ARG_NONE, &memory,
      "Print the per-device peak memory and its largest holders", NULL },
    { "stats", 0, 0, G_OPTION_ARG_NONE, &stats,
      "Print on standard error how many collectives were emitted and which ops "
      "took the replicate-then-slice fallback", NULL },
    { "no-all-gather", 0, 0, G_OPTION_ARG_NONE, &no_all_gather,
      "Replicate tiled dims with dynamic-update-slice + all-reduce (as XLA's tests do) "
      "instead of all-gather", NULL },
    { "windowed-einsum-threshold", 0, 0, G_OPTION_ARG_INT64, &windowed,
      "Partition a dot whose operand would be all-gathered to more than BYTES per device "
      "as a windowed einsum (one local dot per shard, the operand passed around a ring of "
      "collective-permutes); 0 windows every such dot, < 0 never (default)", "BYTES" },
    { "windowed-einsum-bidirectional", 0, 0, G_OPTION_ARG_NONE, &bidi,
      "Windowed einsums send chunks both ways around the ring (k/2 rounds instead of k-1)",
      NULL },
    { "module", 0, 0, G_OPTION_ARG_STRING, &module_name,
      "Read the module NAME of a file holding several (default: the first)", "NAME" },
    { NULL, 0, 0, 0, NULL, NULL, NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("FILE.hlo - partition an HLO module");
  g_option_context_set_summary (ctx,
    "Propagates shardings through FILE.hlo, partitions it for N devices and prints the\n"
    "per-device (SPMD) program as HLO text: local shapes, collectives, partition-id offsets.");
  g_option_context_add_main_entries (ctx, entries, NULL);
  int status = PS_EXIT_USAGE;
  if (!ps_cli_parse (ctx, &argc, &argv))
    goto out;
  if (argc != 2)
    {
      fprintf (stderr, "podsim: partition needs exactly one HLO file (see 'podsim partition --help')\n");
      goto out;
    }
  if (trip < 0)
    {
      fprintf (stderr, "podsim: --trip-count must not be negative\n");
      goto out;
    }
  if (devices < 1 || devices > PS_MAX_DEVICES)
    {
      fprintf (stderr, "podsim: --devices N is required and must be between 1 and %d\n",
               PS_MAX_DEVICES);
      goto out;
    }
  {
    const char *path = argv[1];
    GError *error = NULL;
    g_autoptr (PsModule) m = ps_hlo_load (path, module_name, &error);
    if (m && ps_async_module_is_partitioned (m))
      {
        g_set_error (&error, PS_ERROR, PS_ERROR_UNSUPPORTED, "%s: the module is already partitioned (a per-device SPMD program: entry "
                   "'%s', no shardings, partition-id or collectives); 'podsim run %s' "
                   "lowers and simulates it as it is", path, m->entry->name, path);
        g_clear_pointer (&m, ps_module_free);
      }
    if (!m)
      {
        status = ps_cli_fail (error);
        goto out;
      }
    PsPropagateOptions popts;
    ps_cli_propagate_options (&popts, m, to_output, to_params);
    if (!ps_propagate (m, &popts, &error))
      {
        status = ps_cli_fail (error);
        goto out;
      }
    PsSpmdOptions sopts;
    ps_spmd_options_init (&sopts);
    sopts.use_all_gather = !no_all_gather;
    sopts.windowed_einsum_threshold_bytes = windowed;
    sopts.windowed_einsum_bidirectional = bidi;
    PsSpmdReport report;
    ps_spmd_report_init (&report);
    sopts.report = &report;
    g_autoptr (PsModule) part = ps_spmd_partition (m, devices, &sopts, &error);
    if (!part)
      {
        ps_spmd_report_clear (&report);
        status = ps_cli_fail (error);
        goto out;
      }
    if (stats)
      {
        g_autofree char *fb = fallback_summary (&report);
        fprintf (stderr, "collectives: %" G_GINT64_FORMAT "\nfallbacks: %" G_GINT64_FORMAT,
                 report.n_collectives, report.n_fallbacks);
        if (*fb)
          fprintf (stderr, " (%s)", fb);
        fputc ('\n', stderr);
      }
    ps_spmd_report_clear (&report);
    /* Everything that can fail runs before any output is written. */
    g_autoptr (PsTrace) trace = NULL;
    if (trace_path)
      {
        PsLowerOptions lopts;
        ps_lower_options_init (&lopts);
        lopts.async_collectives = async;
        lopts.default_trip_count = trip;
        trace = ps_lower_module (part, &lopts, &error);
        if (!trace)
          {
            if (!g_str_has_prefix (error->message, path))
              g_prefix_error (&error, "%s: --trace: ", path);
            status = ps_cli_fail (error);
            goto out;
          }
      }
    g_autofree char *memory_text = NULL;
    if (memory)
      {
        PsCostOptions copts;
        ps_cost_options_init (&copts);
        copts.default_trip_count = trip;
        g_autoptr (PsCostAnalysis) cost = ps_cost_analyze (part, &copts, &error);
        g_autoptr (PsMemoryReport) mr = cost ? ps_memory_analyze (part, cost, &error) : NULL;
        if (!mr)
          {
            if (!g_str_has_prefix (error->message, path))
              g_prefix_error (&error, "%s: --memory: ", path);
            status = ps_cli_fail (error);
            goto out;
          }
        memory_text = ps_memory_report_to_string (mr, 10);
      }
    g_autofree char *printed = ps_hlo_print (part, NULL);
    gsize plen = strlen (printed);
    g_autofree char *text = plen > 0 && printed[plen - 1] != '\n'
                                ? g_strconcat (printed, "\n", NULL) : g_strdup (printed);
    if (trace && !ps_trace_write (trace, trace_path, &error))
      {
        status = ps_cli_fail (error);
        goto out;
      }
    if (out_path)
      {
        if (!ps_write_file_atomic (out_path, text, strlen (text), &error))
          {
            status = ps_cli_fail (error);
            goto out;
          }
      }
    else
      fputs (text, stdout);
    if (memory_text)
      {
        /* With the program on standard output, the report goes to stderr
         * so that the HLO stays parseable. */
        FILE *f = out_path ? stdout : stderr;
        fputs (memory_text, f);
        if (*memory_text && memory_text[strlen (memory_text) - 1] != '\n')
          fputc ('\n', f);
      }
    status = 0;
  }
out:
  g_free (out_path);
  g_free (trace_path);
  return status;
}
