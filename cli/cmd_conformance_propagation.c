/* podsim conformance propagation: placeholder until its issue lands. */
#include "config.h"

#include "cli/commands.h"

int
ps_cmd_conformance_propagation (int argc, char **argv)
{
  return ps_cli_not_yet ("conformance propagation");
}
