/* libFuzzer target: the sweep grid reader, as `podsim sweep --grid FILE`
 * reads a file (cli/cmd_sweep.c): the base model of the same file
 * (ps_params_read_extra skipping [vary] and [sweep]), the [vary] and
 * [sweep] sections (ps_ini_read_section), each [vary] value list split at
 * ',' and the combinations checked and added by ps_study_add_grid. The
 * splitting mirrors cmd_sweep.c's few lines (static there); the readers
 * and the grid are the library's own. The grid is capped at 4096
 * combinations here (the command's cap, 10^7, would only make a run
 * slow). Build and run: doc/robustness.md ("Fuzzing"). */
#include "config.h"

#include "tests/fuzz/fuzz_check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "driver/study.h"
#include "driver/target.h"
#include "models/family.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static const char *const grid_sections[] = { "vary", "sweep", NULL };

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static gboolean init;
  if (!init)
    {
      ps_target_init ();
      init = TRUE;
    }
  char *text = g_strndup ((const char *) data, size);
  GError *error = NULL;
  PsParams *base = ps_params_read_extra ("grid.ini", text, grid_sections, &error);
  GPtrArray *vary = base ? ps_ini_read_section ("grid.ini", text, grid_sections, "vary", NULL, &error) : NULL;
  if (!vary)
    {
      fuzz_check_error (error);
      goto out;
    }
  guint n = vary->len;
  const char **keys = g_new0 (const char *, n + 1);
  const char **where = g_new0 (const char *, n + 1);
  GPtrArray **values = g_new0 (GPtrArray *, n + 1);
  gboolean ok = TRUE;
  for (guint i = 0; i < n && ok; i++)
    {
      PsIniEntry *e = vary->pdata[i];
      const PsParamSpec *s = ps_model_family_find_spec (ps_params_family (base), e->key);
      for (guint j = 0; s && j < i; j++)
        if (strcmp (keys[j], s->key) == 0)
          s = NULL;
      if (!s)
        {
          ok = FALSE;
          break;
        }
      keys[i] = s->key;
      where[i] = e->key_where;
      values[i] = g_ptr_array_new_with_free_func (g_free);
      gchar **parts = g_strsplit (e->value, ",", -1);
      for (int k = 0; parts[k]; k++)
        g_ptr_array_add (values[i], g_strdup (g_strstrip (parts[k])));
      g_strfreev (parts);
      if (values[i]->len == 0)
        ok = FALSE;
    }
  if (ok && n > 0)
    {
      PsStudy *s = ps_study_new (base, keys);
      if (ps_study_add_grid (s, values, where, 4096, &error))
        {
          guint64 expect = 1;
          for (guint i = 0; i < n; i++)
            expect *= values[i]->len;
          if (ps_study_n_configs (s) != expect)
            abort ();
          /* Every configuration's parameters exist and print. */
          for (guint id = 0; id < ps_study_n_configs (s); id++)
            {
              PsParams *p = ps_study_params (s, id);
              if (!p)
                abort ();
              ps_params_free (p);
            }
        }
      else
        fuzz_check_error (error);
      ps_study_free (s);
    }
  for (guint i = 0; i < n; i++)
    if (values[i])
      g_ptr_array_free (values[i], TRUE);
  g_free (values);
  g_free (keys);
  g_free (where);
  g_ptr_array_free (vary, TRUE);
out:
  if (base)
    ps_params_free (base);
  g_free (text);
  return 0;
}
