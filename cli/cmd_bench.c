/* podsim bench: dispatches to the micro-benchmarks of the machine model. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/error.h"

int
ps_cmd_bench (int argc, char **argv)
{
  const char *usage =
    "Usage: podsim bench collective|matmul|conv [OPTIONS]\n"
    "\n"
    "  collective   time one collective on a slice (podsim bench collective --help)\n"
    "  matmul       time one matrix multiplication on one core (podsim bench matmul --help)\n"
    "  conv         time one convolution on one core (podsim bench conv --help)\n";
  if (argc < 2 || strcmp (argv[1], "--help") == 0 || strcmp (argv[1], "-h") == 0)
    {
      fputs (usage, argc < 2 ? stderr : stdout);
      return argc < 2 ? PS_EXIT_USAGE : 0;
    }
  g_autofree char *prg = g_strdup_printf ("podsim bench %s", argv[1]);
  if (strcmp (argv[1], "collective") == 0)
    {
      g_set_prgname (prg);
      argv[1] = prg;
      return ps_cmd_bench_collective (argc - 1, argv + 1);
    }
  if (strcmp (argv[1], "matmul") == 0)
    {
      g_set_prgname (prg);
      argv[1] = prg;
      return ps_cmd_bench_matmul (argc - 1, argv + 1);
    }
  if (strcmp (argv[1], "conv") == 0)
    {
      g_set_prgname (prg);
      argv[1] = prg;
      return ps_cmd_bench_conv (argc - 1, argv + 1);
    }
  fprintf (stderr, "podsim bench: unknown benchmark '%s' (collective, matmul or conv)\n", argv[1]);
  return PS_EXIT_USAGE;
}
