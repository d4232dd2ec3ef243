/* podsim tables: placeholder until its issue lands. */
#include "config.h"

#include "cli/commands.h"

int
ps_cmd_tables (int argc, char **argv)
{
  return ps_cli_not_yet ("tables");
}
