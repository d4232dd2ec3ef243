/* Tests of the hardware-file loader (topology/hardware.c). */
#include "config.h"

#include <check.h>
#include <string.h>

#include "tests/suite_main.h"
#include "common/error.h"
#include "topology/hardware.h"

static char *
bundled_path (void)
{
  return g_build_filename (PS_SRCDIR, "topology", "tpu-v3.ini", NULL);
}

static char *
bundled_text (void)
{
  g_autofree char *path = bundled_path ();
  char *text = NULL;
  ck_assert (g_file_get_contents (path, &text, NULL, NULL));
  return text;
}

/* Loads the bundled text with `from` replaced by `to` (exactly one match). */
static PsHardware *
load_edited (const char *from, const char *to, GError **error)
{
  g_autofree char *text = bundled_text ();
  char *at = strstr (text, from);
  ck_assert_msg (at != NULL, "'%s' not in tpu-v3.ini", from);
  ck_assert_msg (strstr (at + 1, from) == NULL, "'%s' twice in tpu-v3.ini", from);
  g_autofree char *edited = g_strdup_printf ("%.*s%s%s", (int) (at - text), text, to,
                                             at + strlen (from));
  return ps_hardware_load_data (edited, strlen (edited), "edited.ini", error);
}

static void
expect_error (const char *from, const char *to, const char *message)
{
  GError *error = NULL;
  PsHardware *hw = load_edited (from, to, &error);
  ck_assert_ptr_null (hw);
  ck_assert_ptr_nonnull (error);
  ck_assert_msg (g_error_matches (error, PS_ERROR, PS_ERROR_PARSE), "%s", error->message);
  ck_assert_msg (strstr (error->message, message) != NULL, "got '%s', expected '%s'",
                 error->message, message);
  g_error_free (error);
}

START_TEST (test_embedded_equals_file)
{
  g_autofree char *text = bundled_text ();
  ck_assert_str_eq (ps_hardware_default_text (), text);
}
END_TEST

START_TEST (test_default_values)
{
  g_autoptr (PsHardware) hw = ps_hardware_default ();
  ck_assert_str_eq (hw->name, "TPU v3");
  ck_assert_double_eq (hw->clock_hz, 940e6);
  ck_assert_int_eq (hw->tensorcores_per_chip, 2);
  ck_assert_int_eq (hw->mxus_per_core, 2);
  ck_assert_int_eq (hw->mxu_rows, 128);
  ck_assert_int_eq (hw->mxu_cols, 128);
  ck_assert (hw->mxu_weight_double_buffered);
  ck_assert_int_eq (hw->f32_passes[PS_MXU_PRECISION_DEFAULT], 1);
  ck_assert_int_eq (hw->f32_passes[PS_MXU_PRECISION_HIGH], 3);
  ck_assert_int_eq (hw->f32_passes[PS_MXU_PRECISION_HIGHEST], 6);
  ck_assert_int_eq (hw->vector_lanes * hw->vector_sublanes, 1024);
  ck_assert_uint_eq (hw->vmem_bytes, 16u << 20);
  ck_assert_uint_eq (hw->hbm_bytes_per_core, G_GUINT64_CONSTANT (16) << 30);
  ck_assert_double_eq (hw->hbm_bw_bytes_per_s, 450e9);
  ck_assert_int_eq (hw->ici_links_per_chip, 4);
  ck_assert_double_eq (hw->ici_link_bw_bytes_per_s, 82e9);
  /* 2 x 2 x 128 x 128 x 940 MHz: within 0.2 % of the published 61.5 TFLOP/s. */
  ck_assert_double_eq_tol (ps_hardware_peak_flops_per_core (hw), 61.6e12, 0.1e12);
}
END_TEST

/* Every value key of the bundled file names its source. */
START_TEST (test_every_key_has_source)
{
  g_autofree char *text = bundled_text ();
  g_autoptr (GKeyFile) kf = g_key_file_new ();
  ck_assert (g_key_file_load_from_data (kf, text, strlen (text), G_KEY_FILE_NONE, NULL));
  g_auto (GStrv) groups = g_key_file_get_groups (kf, NULL);
  int n_values = 0;
  for (int g = 0; groups[g]; g++)
    {
      g_auto (GStrv) keys = g_key_file_get_keys (kf, groups[g], NULL, NULL);
      for (int k = 0; keys[k]; k++)
        {
          if (g_str_has_suffix (keys[k], "_source"))
            continue;
          n_values++;
          g_autofree char *src_key = g_strconcat (keys[k], "_source", NULL);
          g_autofree char *src = g_key_file_get_string (kf, groups[g], src_key, NULL);
          ck_assert_msg (src != NULL && strlen (src) > 10, "[%s] %s has no source",
                         groups[g], keys[k]);
        }
    }
  ck_assert_int_eq (n_values, 26);
}
END_TEST

START_TEST (test_load_file_and_io_error)
{
  g_autofree char *path = bundled_path ();
  GError *error = NULL;
  g_autoptr (PsHardware) hw = ps_hardware_load (path, &error);
  ck_assert_ptr_nonnull (hw);
  PsHardware *none = ps_hardware_load ("/nonexistent/hw.ini", &error);
  ck_assert_ptr_null (none);
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_IO));
  g_clear_error (&error);
  g_autoptr (PsHardware) dflt = ps_hardware_load_or_default (NULL, &error);
  ck_assert_ptr_nonnull (dflt);
}
END_TEST

START_TEST (test_what_if_edit)
{
  GError *error = NULL;
  g_autoptr (PsHardware) hw = load_edited ("link_bw_bytes_per_s = 82e9", "link_bw_bytes_per_s = 164e9",
                                           &error);
  ck_assert_ptr_nonnull (hw);
  ck_assert_double_eq (hw->ici_link_bw_bytes_per_s, 164e9);
  g_autoptr (PsHardware) sz = load_edited ("hbm_bytes_per_core = 16GiB", "hbm_bytes_per_core = 32GiB",
                                           &error);
  ck_assert_uint_eq (sz->hbm_bytes_per_core, G_GUINT64_CONSTANT (32) << 30);
  g_autoptr (PsHardware) nodb = load_edited ("weight_double_buffered = true",
                                             "weight_double_buffered = false", &error);
  ck_assert (!nodb->mxu_weight_double_buffered);
  /* Files saved on Windows: CRLF line ends and a byte-order mark. */
  g_autofree char *text = bundled_text ();
  g_autoptr (GString) dos = g_string_new ("\xef\xbb\xbf");
  for (const char *p = text; *p; p++)
    {
      if (*p == '\n')
        g_string_append_c (dos, '\r');
      g_string_append_c (dos, *p);
    }
  g_autoptr (PsHardware) crlf = ps_hardware_load_data (dos->str, dos->len, "dos.ini", &error);
  ck_assert_ptr_nonnull (crlf);
  ck_assert_double_eq (crlf->clock_hz, 940e6);
  ck_assert_str_eq (crlf->name, "TPU v3");
  g_autoptr (PsHardware) copy = ps_hardware_copy (hw);
  ck_assert_str_eq (copy->name, hw->name);
  ck_assert_ptr_ne (copy->name, hw->name);
}
END_TEST

START_TEST (test_errors_with_line)
{
  expect_error ("clock_hz = 940e6", "clock_hz = 940 MHz",
                "edited.ini:16:12: [chip] clock_hz: '940 MHz' is not a number");
  /* The column is the value's, leading blanks and all. */
  expect_error ("clock_hz = 940e6", "  clock_hz =   940 MHz", "edited.ini:16:16: [chip] clock_hz:");
  expect_error ("lanes = 128", "\tlanes 128", "edited.ini:46:2: expected 'key = value'");
  expect_error ("link_bw_bytes_per_s = 82e9", "link_bw_bytes_per_s = -82e9",
                "[ici] link_bw_bytes_per_s: must be positive, got -82e9");
  expect_error ("hop_latency_s = 1e-6", "hop_latency_s = -1e-6",
                "must be zero or positive, got -1e-6");
  expect_error ("hop_latency_s = 1e-6", "hop_latncy_s = 1e-6",
                "unknown key 'hop_latncy_s' in [ici]");
  expect_error ("[onchip]", "[on-chip]", "unknown section [on-chip]");
  expect_error ("lanes = 128", "lanes 128", "expected 'key = value'");
  expect_error ("mxus_per_core = 2", "mxus_per_core = 2.5", "'2.5' is not a whole number");
  expect_error ("mxus_per_core = 2", "mxus_per_core = 0", "must be positive");
  expect_error ("vmem_bytes = 16MiB", "vmem_bytes = 16 parsecs", "unknown unit");
  expect_error ("weight_double_buffered = true", "weight_double_buffered = yes",
                "'yes' is not true or false");
  expect_error ("f32_passes_high = 3", "f32_passes_high = 9", "must not decrease");
  expect_error ("f32_passes_high = 3", "f32_passes_high = 3\nf32_passes_high = 4",
                "key 'f32_passes_high' appears twice in [mxu]");
  expect_error ("[chip]", "stray = 1\n[chip]", "key 'stray' before the first [section]");
  expect_error ("clock_hz = 940e6", "clock_hz =", "[chip] clock_hz: empty value");
  expect_error ("[mxu]", "[mxu", "malformed section header");
  expect_error ("clock_hz = 940e6", "clock_hz = nan", "is not a number");
}
END_TEST

START_TEST (test_errors_without_line)
{
  expect_error ("rows = 128\n", "", "edited.ini: key [mxu] rows: missing");
  expect_error ("[overhead]", "# no overhead section\n[onchip]",
                "section [onchip] appears twice");
  GError *error = NULL;
  const char nul[] = "[chip]\0name = x";
  ck_assert_ptr_null (ps_hardware_load_data (nul, sizeof nul, "nul.ini", &error));
  ck_assert (strstr (error->message, "nul.ini: not a text file") != NULL);
  g_clear_error (&error);
  ck_assert_ptr_null (ps_hardware_load_data ("", 0, "empty.ini", &error));
  ck_assert_str_eq (error->message, "empty.ini: section [chip]: missing");
  g_clear_error (&error);
}
END_TEST

/* The files the end-to-end test feeds to podsim: their errors, here without
 * the CLI, so a loader change shows which file broke. */
START_TEST (test_bad_files)
{
  static const struct { const char *file; const char *message; } cases[] = {
    { "hw-missing-key.ini", "hw-missing-key.ini: key [mxu] rows: missing" },
    { "hw-bad-number.ini", "hw-bad-number.ini:16:12: [chip] clock_hz: '940 MHz' is not a number" },
    { "hw-negative-bandwidth.ini", "hw-negative-bandwidth.ini:69:23: [ici] link_bw_bytes_per_s: must be positive" },
    { "hw-key-typo.ini", "hw-key-typo.ini:71:1: unknown key 'hop_latncy_s' in [ici]" },
    { "hw-unknown-section.ini", "hw-unknown-section.ini:74:1: unknown section [on-chip]" },
    { "hw-malformed-line.ini", "hw-malformed-line.ini:46:1: expected 'key = value'" },
    { "hw-missing-section.ini", "hw-missing-section.ini: section [overhead]: missing" },
  };
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *path = g_build_filename (PS_SRCDIR, "tests", "data", "bad", cases[i].file, NULL);
      GError *error = NULL;
      PsHardware *hw = ps_hardware_load (path, &error);
      ck_assert_msg (hw == NULL, "%s loaded", cases[i].file);
      ck_assert_msg (strstr (error->message, cases[i].message) != NULL, "%s: got '%s'",
                     cases[i].file, error->message);
      g_error_free (error);
    }
}
END_TEST

/* Values no machine has, which made simulated times infinite (issue 17):
 * NaN, infinities, 1e308 s per op, 1e-300 B/s, a billion cores per chip. */
START_TEST (test_out_of_range)
{
  expect_error ("per_op_s = 1e-6", "per_op_s = nan", "[overhead] per_op_s: 'nan' is not a number");
  expect_error ("per_op_s = 1e-6", "per_op_s = inf", "[overhead] per_op_s: 'inf' is not a number");
  expect_error ("per_op_s = 1e-6", "per_op_s = 1e308", "[overhead] per_op_s: must be at most 1, got 1e308");
  expect_error ("link_bw_bytes_per_s = 82e9", "link_bw_bytes_per_s = 1e-300",
                "[ici] link_bw_bytes_per_s: must be between 1000 and 1e+15, got 1e-300");
  expect_error ("clock_hz = 940e6", "clock_hz = 1e300", "[chip] clock_hz: must be between 1000 and 1e+12");
  expect_error ("tensorcores_per_chip = 2", "tensorcores_per_chip = 1000000",
                "[chip] tensorcores_per_chip: must be at most 64, got 1000000");
  expect_error ("rows = 128", "rows = 100000000", "[mxu] rows: must be at most 1e+06");
  expect_error ("hbm_bytes_per_core = 16GiB", "hbm_bytes_per_core = 16EiB", "[memory] hbm_bytes_per_core:");
  expect_error ("hbm_bytes_per_core = 16GiB", "hbm_bytes_per_core = 4096TiB",
                "[memory] hbm_bytes_per_core: must be at most 1.1259e+15, got 4096TiB");
}
END_TEST

START_TEST (test_precision_names)
{
  PsMxuPrecision p;
  ck_assert (ps_precision_parse ("HIGHEST", &p) && p == PS_MXU_PRECISION_HIGHEST);
  ck_assert (!ps_precision_parse ("max", &p));
  ck_assert_str_eq (ps_precision_name (PS_MXU_PRECISION_HIGH), "high");
  g_autoptr (PsHardware) hw = ps_hardware_default ();
  ck_assert_int_eq (ps_hardware_mxu_passes (hw, FALSE, PS_MXU_PRECISION_HIGHEST), 1);
  ck_assert_int_eq (ps_hardware_mxu_passes (hw, TRUE, PS_MXU_PRECISION_HIGHEST), 6);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("hardware");
  ps_check_case (s, "loader", 0,
                 PS_CHECK_TESTS (test_embedded_equals_file,
                                 test_default_values,
                                 test_every_key_has_source,
                                 test_load_file_and_io_error,
                                 test_what_if_edit, test_errors_with_line,
                                 test_errors_without_line, test_bad_files,
                                 test_out_of_range, test_precision_names));
  return ps_check_run (s, CK_FORK_GETENV);
}
