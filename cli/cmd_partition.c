/* podsim partition FILE.hlo --devices N [-o OUT.hlo] [--trace OUT.pst.gz] [--memory]
 *
 * Reads an HLO module, completes its shardings (propagation), partitions it
 * into the per-device SPMD program and prints that as HLO text, or writes it
 * atomically with -o. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/target_options.h"
#include "driver/driver.h"
#include "common/error.h"
#include "partitioner/hlo/hlo_printer.h"
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
  g_auto (PsCliModuleOptions) mod = { 0 };
  char *out_path = NULL, *trace_path = NULL;
  gboolean memory = FALSE, stats = FALSE, no_all_gather = FALSE;
  gint64 windowed = -1, trip;
  gboolean bidi = FALSE;
  GOptionEntry entries[] = {
    { 0 }, { 0 }, { 0 }, { 0 }, /* ps_cli_module_entries */
    { "output", 'o', 0, G_OPTION_ARG_FILENAME, &out_path,
      "Write the SPMD program to FILE (atomically) instead of standard output", "FILE" },
    { "trace", 0, 0, G_OPTION_ARG_FILENAME, &trace_path,
      "Also lower the program to a step trace (.pst.gz)", "FILE" },
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
    { NULL, 0, 0, 0, NULL, NULL, NULL }
  };
  ps_cli_module_entries (&mod, TRUE, entries);
  gint64 devices;
  g_autoptr (GOptionContext) ctx = g_option_context_new ("FILE.hlo - partition an HLO module");
  g_option_context_set_summary (ctx,
    "Propagates shardings through FILE.hlo, partitions it for N devices and prints the\n"
    "per-device (SPMD) program as HLO text: local shapes, collectives, partition-id offsets.");
  /* --trace and --memory schedule the program as podsim run does, with
   * run's options for it. */
  static const char *const target_keys[] = { "hw", "schedule", "async_collectives", "trip_count", NULL };
  static const PsParamSpec *const module_specs[] = { &ps_cost_param_trip_count };
  g_autoptr (PsTargetOptions) to = ps_target_options_new_with (target_keys, module_specs,
                                                               G_N_ELEMENTS (module_specs));
  g_option_context_set_main_group (ctx, ps_target_options_group (to, entries));
  int status = PS_EXIT_USAGE;
  if (!ps_cli_parse_one (ctx, &argc, &argv, "FILE.hlo"))
    goto out;
  devices = mod.devices;
  trip = ps_target_options_int (to, "trip_count");
  if (devices < 1 || devices > PS_MAX_DEVICES)
    {
      status = ps_cli_failf ("--devices N is required and must be between 1 and %d", PS_MAX_DEVICES);
      goto out;
    }
  {
    const char *path = argv[1];
    GError *error = NULL;
    g_autoptr (PsModule) m = ps_cli_load_unpartitioned (path, mod.module_name, &error);
    if (!m)
      {
        status = ps_cli_fail (error);
        goto out;
      }
    /* The same sequence as podsim run (driver/driver.h): the trace and the
     * peak come from the one schedule run would make of this program on the
     * bundled hardware's HBM budget. */
    g_autoptr (PsTarget) target = NULL;
    if (trace_path || memory)
      {
        target = ps_target_options_target (to, FALSE, &error);
        if (!target)
          {
            status = ps_cli_fail (error);
            goto out;
          }
      }
    PsSpmdOptions sopts;
    ps_spmd_options_init (&sopts);
    sopts.use_all_gather = !no_all_gather;
    sopts.windowed_einsum_threshold_bytes = windowed;
    sopts.windowed_einsum_bidirectional = bidi;
    PsDriverOptions dopts;
    ps_driver_options_init (&dopts);
    dopts.module = m;
    dopts.n_devices = devices;
    dopts.default_trip_count = trip;
    dopts.to_output = mod.to_output;
    dopts.to_parameters = mod.to_parameters;
    dopts.spmd = &sopts;
    dopts.target = target;
    dopts.stop_after = trace_path ? PS_STAGE_LOWER : memory ? PS_STAGE_MEMORY : PS_STAGE_PARTITION;
    dopts.lower_past_no_fit = TRUE;
    dopts.memory_holders = 10;
    dopts.keep_spmd = TRUE;
    PsStage failed = PS_STAGE_BUILD;
    g_autoptr (PsDriverResult) r = ps_driver_run (&dopts, &failed, &error);
    if (!r)
      {
        /* Everything that can fail runs before any output is written. */
        if (g_str_has_prefix (error->message, path))
          ;
        else if (failed == PS_STAGE_LOWER)
          g_prefix_error (&error, "%s: --trace: ", path);
        else if (failed == PS_STAGE_MEMORY)
          g_prefix_error (&error, "%s: --memory: ", path);
        status = ps_cli_fail (error);
        goto out;
      }
    const PsModule *part = r->spmd;
    if (stats)
      {
        g_autofree char *fb = fallback_summary (&r->spmd_report);
        fprintf (stderr, "collectives: %" G_GINT64_FORMAT "\nfallbacks: %" G_GINT64_FORMAT,
                 r->spmd_report.n_collectives, r->spmd_report.n_fallbacks);
        if (*fb)
          fprintf (stderr, " (%s)", fb);
        fputc ('\n', stderr);
      }
    const PsTrace *trace = r->trace;
    const char *memory_text = memory ? r->memory_text : NULL;
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
