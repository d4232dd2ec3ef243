/* The model options of `podsim run`, `sweep` and `search`, derived from the
 * model-family registry (models/family.h): `--preset NAME`, `--config
 * FILE.ini`, `--set KEY=VALUE`, and one option per parameter of the family
 * (`--layers N`, `--remat`/`--no-remat`, `--slice S`, ...), with the
 * parameter's doc and default in --help.
 *
 * Which family's options a command accepts is decided before parsing, from
 * the command line: the family of `--preset` or of the `--config` file,
 * else the first positional word: a family name, or a file name (it has a
 * '.' or a '/') for the family that reads files (`podsim run FILE.hlo`:
 * family hlo, key `file`); else dense. Options apply in command-line order
 * on top of the preset, the file or the family's defaults; options of a
 * list parameter (`--shard`) add to the list.
 *
 * Usage:
 *   g_autoptr (PsModelOptions) mo = ps_model_options_new (argc, argv, my_entries);
 *   GOptionGroup *g = ps_model_options_group (mo);
 *   g_option_context_set_main_group (ctx, g);
 *   ... parse ...
 *   g_autoptr (PsParams) p = ps_model_options_params (mo, family_word, &error);
 *
 * Ownership: PsModelOptions is transfer full (ps_model_options_free); the
 * group returned is transfer full (the context takes it).
 */
#ifndef PS_CLI_MODEL_OPTIONS_H
#define PS_CLI_MODEL_OPTIONS_H

#include <glib.h>

#include "models/family.h"
#include "topology/hardware.h"
#include "topology/slice.h"

typedef struct PsModelOptions PsModelOptions;

/* `entries` (the command's own options, may be NULL) are borrowed until
 * ps_model_options_group. `base_option` (may be NULL; "--grid" for sweep)
 * is one of those entries naming a file that, when it has a [model]
 * section, is the base like --config (its [vary] and [sweep] sections are
 * the command's). */
PsModelOptions *ps_model_options_new (int argc, char **argv, const GOptionEntry *entries,
                                      const char *base_option);
void ps_model_options_free (PsModelOptions *mo);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsModelOptions, ps_model_options_free)

/* A main group holding the command's entries, then --preset, --config,
 * --set and every parameter's option. */
GOptionGroup *ps_model_options_group (PsModelOptions *mo);

/* The run's parameters after parsing. `word` is the positional FAMILY or
 * FILE (or NULL); a family must agree with the preset's or the file's.
 * Errors name the option or FILE:LINE:COL. transfer full. */
PsParams *ps_model_options_params (PsModelOptions *mo, const char *word, GError **error);

/* The same from a command's arguments after parsing: at most one
 * positional word, FAMILY or FILE (argv[1]). */
PsParams *ps_model_options_params_argv (PsModelOptions *mo, int argc, char **argv, GError **error);

/* The run's name: the published run it equals (and *published its
 * throughput), else "BASE modified (settings)" when it started from a
 * preset or file and differs from it, else the preset's or file's name,
 * else the family's. transfer full. */
char *ps_model_options_name (const PsModelOptions *mo, const PsParams *p, double *published);

/* The command-line option of parameter s, as every command that takes
 * parameters declares them: `--key VALUE` with the spec's doc, default and
 * choices in --help, or for a boolean `--key` and a hidden `--no-key`.
 * Writes 1 or 2 entries to out (returns how many), each calling cb with
 * its group's user data; strings they need are added to keep. */
int ps_cli_param_entries (const PsParamSpec *s, GOptionArgFunc cb, GPtrArray *keep, GOptionEntry *out);

/* In cb: when option `name` ("--cache", "--no-cache") is s's, *text gets
 * the value to set ("false" for --no-key) and TRUE is returned. */

gboolean ps_cli_param_option_value (const PsParamSpec *s, const char *name, const char *value, const char **text);

#endif
