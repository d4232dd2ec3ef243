/* The target's options for the commands that take no model (`simulate`,
 * `bench`, `tables`): a command names the target keys it reads (as tmux's
 * cmd_entry names what a command needs), and gets their options generated
 * from the declarations of the modules that read them (driver/target.h),
 * with the same names, docs, defaults and choices as `podsim run`'s, and
 * the typed PsTarget they make.
 *
 * Usage:
 *   static const char *const keys[] = { "slice", "wrap", "hw", NULL };
 *   g_autoptr (PsTargetOptions) to = ps_target_options_new (keys);
 *   g_option_context_set_main_group (ctx, ps_target_options_group (to, entries));
 *   ... parse ...
 *   g_autoptr (PsTarget) t = ps_target_options_target (to, TRUE, &error);
 *
 * Ownership: PsTargetOptions is transfer full; the group is transfer full
 * (the context takes it) and borrows `to` and the command's entries.
 */
#ifndef PS_CLI_TARGET_OPTIONS_H
#define PS_CLI_TARGET_OPTIONS_H

#include <glib.h>

#include "driver/target.h"

typedef struct PsTargetOptions PsTargetOptions;

/* keys: NULL-terminated target keys (ps_target_specs) in the order --help
 * lists them. */
PsTargetOptions *ps_target_options_new (const char *const *keys);
/* The same with the command's other options declared by the modules that
 * read them (extra[0..n_extra-1], static): keys may name these too, and
 * their values are read with ps_target_options_int/_mesh/_str. */
PsTargetOptions *ps_target_options_new_with (const char *const *keys, const PsParamSpec *const *extra,
                                             int n_extra);
void ps_target_options_free (PsTargetOptions *to);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsTargetOptions, ps_target_options_free)

/* A main group holding the command's entries (may be NULL), then the
 * target's options. */
GOptionGroup *ps_target_options_group (PsTargetOptions *to, const GOptionEntry *entries);

/* After parsing: whether the option of `key` was given, and its value as
 * text (the default when not given). transfer none. */
gboolean ps_target_options_given (const PsTargetOptions *to, const char *key);
const char *ps_target_options_str (const PsTargetOptions *to, const char *key);
int64_t ps_target_options_int (const PsTargetOptions *to, const char *key);
/* A MESH value: its rank (0 when empty), dims filled
 * (PS_PARAM_MESH_MAX_RANK entries). */
int ps_target_options_mesh (const PsTargetOptions *to, const char *key, int64_t *dims);

/* The target the options name; without a slice when with_slice is FALSE.
 * Errors name the option. transfer full. */
PsTarget *ps_target_options_target (const PsTargetOptions *to, gboolean with_slice, GError **error);

#endif
