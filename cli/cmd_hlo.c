/* podsim hlo: placeholder until its issue lands. */
#include "config.h"

#include "cli/commands.h"

int
ps_cmd_hlo (int argc, char **argv)
{
  return ps_cli_not_yet ("hlo");
}
