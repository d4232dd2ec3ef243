/* podsim bench: dispatches to the micro-benchmarks of the machine model. */
#include "config.h"

#include "cli/commands.h"

static const PsCommand benchmarks[] = {
  { "collective", "time one collective on a slice", ps_cmd_bench_collective },
  { "matmul", "time one matrix multiplication on one core", ps_cmd_bench_matmul },
  { "conv", "time one convolution on one core", ps_cmd_bench_conv },
};

int
ps_cmd_bench (int argc, char **argv)
{
  static const PsCommandGroup group = {
    "podsim bench", "Usage: podsim bench collective|matmul|conv [OPTIONS]\n",
    "Run 'podsim bench COMMAND --help' for a benchmark's options.\n",
    benchmarks, G_N_ELEMENTS (benchmarks)
  };
  return ps_cli_dispatch (&group, argc, argv);
}
