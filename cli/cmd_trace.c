/* podsim trace: placeholder until its issue lands. */
#include "config.h"

#include "cli/commands.h"

int
ps_cmd_trace (int argc, char **argv)
{
  return ps_cli_not_yet ("trace");
}
