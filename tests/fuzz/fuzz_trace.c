/* libFuzzer target: the step-trace reader (traces/trace_reader.c), through
 * the same path `podsim simulate` and `trace check` take: a file, gzip or
 * plain (detected from its content), read and validated whole. The bytes
 * are handed over as an in-memory file (memfd). Build and run:
 * doc/robustness.md ("Fuzzing"). */
#define _GNU_SOURCE
#include "config.h"

#include "tests/fuzz/fuzz_check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "traces/trace.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  int fd = memfd_create ("fuzz.pst", 0);
  if (fd < 0 || write (fd, data, size) != (ssize_t) size)
    abort ();
  char path[64];
  snprintf (path, sizeof path, "/proc/self/fd/%d", fd);
  GError *error = NULL;
  PsTrace *t = ps_trace_read (path, &error);
  if (t == NULL)
    {
      fuzz_check_error (error);
    }
  else
    {
      /* What the reader accepted, the validator accepts too. */
      if (!ps_trace_validate (t, &error))
        {
          fprintf (stderr, "read but invalid: %s\n", error->message);
          abort ();
        }
      ps_trace_free (t);
    }
  close (fd);
  return 0;
}
