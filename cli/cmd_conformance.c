/* podsim conformance: dispatches to the conformance runners. */
#include "config.h"

#include "cli/commands.h"

static const PsCommand suites[] = {
  { "propagation", "run sharding-propagation test vectors", ps_cmd_conformance_propagation },
  { "partitioner", "run SPMD-partitioner test vectors through the interpreter", ps_cmd_conformance_partitioner },
};

int
ps_cmd_conformance (int argc, char **argv)
{
  static const PsCommandGroup group = {
    "podsim conformance", "Usage: podsim conformance propagation|partitioner FILE.jsonl [--json]\n",
    "Run 'podsim conformance COMMAND --help' for a suite's options.\n",
    suites, G_N_ELEMENTS (suites)
  };
  return ps_cli_dispatch (&group, argc, argv);
}
