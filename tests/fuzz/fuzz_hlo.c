/* libFuzzer target: the HLO text reader and the module verifier it ends with
 * (partitioner/hlo, ps_module_validate). Whatever the bytes, the reader
 * returns a module or a located error; never crashes, hangs or allocates
 * more than the input justifies. A module it accepts must print, read back,
 * and print the same text again (the printer's fixed point, doc/hlo.md).
 * Build and run: doc/robustness.md ("Fuzzing"). */
#include "config.h"

#include "tests/fuzz/fuzz_check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/hlo_printer.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  GError *error = NULL;
  PsModule *m = ps_hlo_parse ((const char *) data, size, "fuzz.hlo", &error);
  if (m == NULL)
    {
      fuzz_check_error (error);
      return 0;
    }
  char *p1 = ps_hlo_print (m, NULL);
  PsModule *m2 = ps_hlo_parse (p1, strlen (p1), "printed.hlo", &error);
  if (m2 == NULL)
    {
      fprintf (stderr, "printed module does not read back: %s\n%s\n", error->message, p1);
      abort ();
    }
  char *p2 = ps_hlo_print (m2, NULL);
  fuzz_check_fixed_point ("printing is not a fixed point", p1, p2);
  g_free (p1);
  g_free (p2);
  ps_module_free (m2);
  ps_module_free (m);
  return 0;
}
