/* podsim propagate FILE.hlo: completes the shardings of a module
 * (partitioner/propagate/propagate.h) and prints it with every instruction's sharding. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "driver/driver.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/hlo_printer.h"
#include "partitioner/propagate/propagate.h"

int
ps_cmd_propagate (int argc, char **argv)
{
  g_auto (PsCliModuleOptions) mod = { 0 };
  gboolean mpmd = FALSE, metadata = FALSE;
  gboolean stats = FALSE;
  char *output = NULL;
  GOptionEntry entries[] = {
    { 0 }, { 0 }, { 0 },       /* ps_cli_module_entries */
    { "mpmd", 0, 0, G_OPTION_ARG_NONE, &mpmd,
      "Non-SPMD mode (XLA's is_spmd=false): more conservative rules", NULL },
    { "metadata", 0, 0, G_OPTION_ARG_NONE, &metadata,
      "Record in each sharding's metadata the op names it came from", NULL },
    { "stats", 0, 0, G_OPTION_ARG_NONE, &stats,
      "Print how many instructions have a sharding and the passes run, on stderr", NULL },
    { "output", 'o', 0, G_OPTION_ARG_FILENAME, &output, "Write the module to FILE (default: stdout)",
      "FILE" },
    { NULL, 0, 0, 0, NULL, NULL, NULL },
  };
  ps_cli_module_entries (&mod, FALSE, entries);
  g_autoptr (GOptionContext) ctx = g_option_context_new ("FILE.hlo");
  g_option_context_set_summary (
      ctx, "Reads an HLO text module (FILE, or - for standard input) whose shardings are\n"
           "partly annotated, completes them as XLA's sharding propagation does\n"
           "(doc/propagation.md) and prints the module with the shardings found (scalars\n"
           "only feeding reducers and reducer bodies keep none). Written shardings are\n"
           "never changed. Without --to-output and --to-parameters the entry root and\n"
           "parameters keep what the file says (unannotated ones stay unannotated), as\n"
           "a host would require, unless the module header allows it\n"
           "(allow_spmd_sharding_propagation_to_output/_to_parameters).");
  g_option_context_add_main_entries (ctx, entries, NULL);
  gboolean parsed = ps_cli_parse_one (ctx, &argc, &argv, "FILE.hlo");
  g_autofree char *out_path = output;
  if (!parsed)
    return PS_EXIT_USAGE;
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_hlo_load (argv[1], mod.module_name, &error);
  if (!m)
    return ps_cli_fail (error);
  PsPropagateOptions o;
  ps_driver_propagate_options (&o, m, mod.to_output, mod.to_parameters);
  o.is_spmd = !mpmd;
  o.propagate_metadata = metadata;
  PsPropagateStats st;
  if (!ps_propagate_full (m, &o, &st, &error))
    return ps_cli_fail (error);
  if (stats)
    {
      int total = 0, sharded = 0;
      for (guint c = 0; c < m->computations->len; c++)
        {
          PsComputation *comp = g_ptr_array_index (m->computations, c);
          for (guint k = 0; k < comp->instrs->len; k++)
            {
              PsInstr *i = g_ptr_array_index (comp->instrs, k);
              total++;
              sharded += i->sharding != NULL;
            }
        }
      fprintf (stderr, "%s: %d of %d instructions sharded after %d passes\n", m->source_name, sharded,
               total, st.iterations);
    }
  g_autofree char *printed = ps_hlo_print (m, NULL);
  if (!ps_write_file_atomic (out_path ? out_path : "-", printed, strlen (printed), &error))
    return ps_cli_fail (error);
  return 0;
}
