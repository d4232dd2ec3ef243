/* podsim hlo FILE: read an HLO module, validate it, print it canonically. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/hlo_printer.h"

int
ps_cmd_hlo (int argc, char **argv)
{
  g_autofree char *module_name = NULL;
  gboolean no_shardings = FALSE, no_metadata = FALSE, no_layouts = FALSE;
  GOptionEntry entries[] = {
    { "no-shardings", 0, 0, G_OPTION_ARG_NONE, &no_shardings, "Leave out sharding= attributes", NULL },
    { "no-metadata", 0, 0, G_OPTION_ARG_NONE, &no_metadata, "Leave out metadata= attributes", NULL },
    { "no-layouts", 0, 0, G_OPTION_ARG_NONE, &no_layouts, "Print shapes without layouts", NULL },
    ps_cli_module_name_entry (&module_name),
    { NULL, 0, 0, 0, NULL, NULL, NULL },
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("FILE");
  g_option_context_set_summary (ctx,
                                "Reads an HLO text module (FILE, or - for standard input), checks it\n"
                                "(grammar, operands, shapes, attributes, shardings) and prints it in\n"
                                "canonical form on standard output. StableHLO (MLIR) text and an\n"
                                "HloModuleProto in protobuf text format are read too (doc/hlo.md).\n"
                                "Errors are one line FILE:LINE:COL: message on standard error, exit\n"
                                "status 2.");
  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!ps_cli_parse_one (ctx, &argc, &argv, "FILE"))
    return PS_EXIT_USAGE;
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_hlo_parse_file_module (argv[1], module_name, &error);
  if (!m)
    return ps_cli_fail (error);
  PsHloPrintOptions opts = { no_shardings, no_metadata, no_layouts };
  g_autofree char *out = ps_hlo_print (m, &opts);
  fputs (out, stdout); /* write errors: main's close_stdout */
  return 0;
}
