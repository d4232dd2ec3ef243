/* libFuzzer target: the model-file reader (models/family.c over the ini
 * reader of common/params.c), as `podsim run --config FILE` reads a file:
 * its text (ps_ini_load_text refuses a NUL byte, so the text ends at the
 * first). A file it accepts prints (ps_params_print) to a file it reads
 * back to the same parameters: the round trip `podsim sweep` relies on
 * when it writes a base file for its children. Build and run:
 * doc/robustness.md ("Fuzzing"). */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "driver/target.h"
#include "models/family.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

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
  PsParams *p = ps_params_read ("fuzz.ini", text, &error);
  if (p == NULL)
    {
      if (error == NULL || error->domain != PS_ERROR || strchr (error->message, '\n'))
        abort ();
      g_error_free (error);
      g_free (text);
      return 0;
    }
  char *printed = ps_params_print (p, NULL);
  PsParams *back = ps_params_read ("printed.ini", printed, &error);
  if (back == NULL)
    {
      fprintf (stderr, "printed file not read back: %s\n%s", error->message, printed);
      abort ();
    }
  char *k1 = ps_params_key (p), *k2 = ps_params_key (back);
  if (strcmp (k1, k2) != 0)
    {
      fprintf (stderr, "read back to other parameters:\n%s\n%s\n", k1, k2);
      abort ();
    }
  g_free (k1);
  g_free (k2);
  g_free (printed);
  ps_params_free (back);
  ps_params_free (p);
  g_free (text);
  return 0;
}
