/* podsim run: placeholder until its issue lands. */
#include "config.h"

#include "cli/commands.h"

int
ps_cmd_run (int argc, char **argv)
{
  return ps_cli_not_yet ("run");
}
