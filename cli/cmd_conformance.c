/* podsim conformance: dispatches to the conformance runners. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/error.h"

int
ps_cmd_conformance (int argc, char **argv)
{
  const char *usage =
    "Usage: podsim conformance propagation|partitioner FILE.jsonl [--json]\n"
    "\n"
    "  propagation   run sharding-propagation test vectors\n"
    "  partitioner   run SPMD-partitioner test vectors through the interpreter\n";
  if (argc < 2 || strcmp (argv[1], "--help") == 0 || strcmp (argv[1], "-h") == 0)
    {
      fputs (usage, argc < 2 ? stderr : stdout);
      return argc < 2 ? PS_EXIT_USAGE : 0;
    }
  g_autofree char *prg = g_strdup_printf ("podsim conformance %s", argv[1]);
  if (strcmp (argv[1], "propagation") == 0)
    {
      g_set_prgname (prg);
      argv[1] = prg;
      return ps_cmd_conformance_propagation (argc - 1, argv + 1);
    }
  if (strcmp (argv[1], "partitioner") == 0)
    {
      g_set_prgname (prg);
      argv[1] = prg;
      return ps_cmd_conformance_partitioner (argc - 1, argv + 1);
    }
  fprintf (stderr, "podsim conformance: unknown suite '%s' (propagation or partitioner)\n", argv[1]);
  return PS_EXIT_USAGE;
}
