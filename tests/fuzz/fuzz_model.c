/* libFuzzer target: the model-file reader (models/family.c over the ini
 * reader of common/params.c), as `podsim run --config FILE` reads a file:
 * its text (ps_ini_load_text refuses a NUL byte, so the text ends at the
 * first). A file it accepts prints (ps_params_print) to a file that
 * reads back and prints the same text: the round trip `podsim sweep`
 * relies on when it writes a base file for its children. Build and run:
 * doc/robustness.md ("Fuzzing"). */
#include "config.h"

#include "tests/fuzz/fuzz_check.h"

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
      fuzz_check_error (error);
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
  /* Printing names paths absolutely (the file may be saved anywhere), so
   * the keys of p and back may differ by a relative path's folder: what
   * must hold is that the printed file prints itself. */
  char *again = ps_params_print (back, NULL);
  fuzz_check_fixed_point ("read back to other parameters", printed, again);
  g_free (again);
  g_free (printed);
  ps_params_free (back);
  ps_params_free (p);
  g_free (text);
  return 0;
}
