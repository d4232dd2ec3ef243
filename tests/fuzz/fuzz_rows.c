/* libFuzzer target: the row reader of `podsim sweep --resume` and
 * `--merge` (ps_study_parse_row, driver/study.c), which reads back every
 * line of an output file or a task's part. The first byte chooses CSV (odd)
 * or JSONL (even); the rest is split into lines as the sweep splits its file, each
 * read against a study of the dense family over layers and mesh (4
 * configurations). A row the study writes itself reads back as its own.
 * Build and run: doc/robustness.md ("Fuzzing"). */
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

static PsStudy *
make_study (void)
{
  ps_target_init ();
  const PsModelFamily *fam = ps_model_family_find ("dense", NULL);
  if (!fam)
    abort ();
  PsParams *base = ps_params_new (fam);
  static const char *const keys[] = { "layers", "mesh", NULL };
  PsStudy *s = ps_study_new (base, keys);
  static const char *const configs[][2] = { { "2", "4x2" }, { "2", "2x4" }, { "4", "4x2" }, { "4", "2x4" } };
  for (guint i = 0; i < G_N_ELEMENTS (configs); i++)
    {
      GError *error = NULL;
      guint id;
      if (!ps_study_add (s, configs[i], "fuzz", &id, &error))
        {
          fprintf (stderr, "study: %s\n", error->message);
          abort ();
        }
    }
  ps_params_free (base);
  return s;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static PsStudy *s;
  if (!s)
    s = make_study ();
  if (size == 0)
    return 0;
  /* Odd: CSV ('C'), even: JSONL ('J'), as the seeds start. */
  PsStudyFormat f = (data[0] & 1) ? PS_STUDY_CSV : PS_STUDY_JSONL;
  char *text = g_strndup ((const char *) data + 1, size - 1);
  gchar **lines = g_strsplit (text, "\n", -1);
  for (int i = 0; lines[i]; i++)
    {
      GError *error = NULL;
      guint id = G_MAXUINT;
      char *no_result = NULL;
      if (ps_study_parse_row (s, lines[i], f, &id, &no_result, &error))
        {
          if (id >= ps_study_n_configs (s))
            abort ();
          g_free (no_result);
        }
      else
        {
          if (no_result != NULL)
            abort ();
          fuzz_check_error (error);
        }
    }
  g_strfreev (lines);

  /* The writer's own row, with the input's first bytes as its error. */
  PsStudyRow r = { .id = data[0] % 4, .ran = TRUE, .fits = (data[0] & 2) != 0, .step_time_s = 1.5,
                   .unit = (char *) "tokens", .model = (char *) "fuzz" };
  char *err = g_strndup (text, strcspn (text, "\n\r"));
  if (*err)
    r.error = err;
  char *line = ps_study_format_row (s, &r, f);
  line[strcspn (line, "\n")] = '\0';
  GError *error = NULL;
  guint id;
  if (!ps_study_parse_row (s, line, f, &id, NULL, &error) || id != r.id)
    {
      fprintf (stderr, "own row not read back: %s\n%s\n", error ? error->message : "other id", line);
      abort ();
    }
  g_free (line);
  g_free (err);
  g_free (text);
  return 0;
}
