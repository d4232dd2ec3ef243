/* podsim bench collective: placeholder until its issue lands. */
#include "config.h"

#include "cli/commands.h"

int
ps_cmd_bench_collective (int argc, char **argv)
{
  return ps_cli_not_yet ("bench collective");
}
