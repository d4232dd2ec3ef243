/* Slices, wrap links, device assignment and routes. */
#include "config.h"

#include <check.h>
#include <string.h>

#include "tests/suite_main.h"
#include "topology/platform.h"
#include "topology/slice.h"

static PsHardware
test_hw (void)
{
  PsHardware hw = { 0 };
  hw.tensorcores_per_chip = 2;
  hw.ici_link_bw_bytes_per_s = 82e9;
  hw.ici_hop_latency_s = 1e-6;
  hw.onchip_bw_bytes_per_s = 100e9;
  hw.onchip_latency_s = 0.5e-6;
  return hw;
}

START_TEST (test_slices)
{
  GError *error = NULL;
  g_autoptr (PsSlice) s = ps_slice_new ("v3-64", PS_WRAP_AUTO, 2, &error);
  ck_assert_ptr_nonnull (s);
  ck_assert_int_eq (s->chips_x, 4);
  ck_assert_int_eq (s->chips_y, 8);
  ck_assert (!s->wrap_x && !s->wrap_y);
  ck_assert_int_eq (ps_slice_n_cores (s), 64);
  g_autoptr (PsSlice) h = ps_slice_new ("v3-1024", PS_WRAP_AUTO, 2, &error);
  ck_assert (!h->wrap_x && h->wrap_y);
  g_autoptr (PsSlice) pod = ps_slice_new ("v3-2048", PS_WRAP_AUTO, 2, &error);
  ck_assert (pod->wrap_x && pod->wrap_y);
  g_autoptr (PsSlice) off = ps_slice_new ("v3-2048", PS_WRAP_OFF, 2, &error);
  ck_assert (!off->wrap_x && !off->wrap_y);
  g_autoptr (PsSlice) on = ps_slice_new ("v3-32", PS_WRAP_ON, 2, &error);
  ck_assert (on->wrap_x && on->wrap_y);
  ck_assert_ptr_null (ps_slice_new ("v3-12", PS_WRAP_AUTO, 2, &error));
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_OPTION));
  ck_assert_ptr_nonnull (strstr (error->message, "unknown slice 'v3-12'"));
  g_clear_error (&error);
  PsWrapMode m;
  ck_assert (!ps_wrap_mode_parse ("maybe", &m, &error));
  g_clear_error (&error);
}
END_TEST

START_TEST (test_core_numbering)
{
  g_autoptr (PsSlice) s = ps_slice_new ("v3-64", PS_WRAP_AUTO, 2, NULL);
  for (int core = 0; core < ps_slice_n_cores (s); core++)
    {
      int x, y, c;
      ps_slice_core_coords (s, core, &x, &y, &c);
      ck_assert_int_eq (ps_slice_core_index (s, x, y, c), core);
    }
  int x, y, c;
  /* (x * chips_y + y) * 2 + c: device 17 is chip 8 = (1, 0), core 1. */
  ps_slice_core_coords (s, 17, &x, &y, &c);
  ck_assert_int_eq (x, 1);
  ck_assert_int_eq (y, 0);
  ck_assert_int_eq (c, 1);
}
END_TEST

START_TEST (test_assignment)
{
  GError *error = NULL;
  g_autoptr (PsSlice) s = ps_slice_new ("v3-8", PS_WRAP_AUTO, 2, NULL);
  g_autoptr (PsDeviceAssignment) d = ps_device_assignment_default (s, 8, &error);
  ck_assert_int_eq (d->core_of_device[5], 5);
  ck_assert_ptr_null (ps_device_assignment_default (s, 16, &error));
  ck_assert_ptr_nonnull (strstr (error->message, "16 devices do not fit slice v3-8"));
  g_clear_error (&error);
  g_autoptr (PsDeviceAssignment) l = ps_device_assignment_parse (s, "1:1:1, 0, 3", &error);
  ck_assert_ptr_nonnull (l);
  ck_assert_int_eq (l->n_devices, 3);
  ck_assert_int_eq (l->core_of_device[0], 7);
  ck_assert_ptr_null (ps_device_assignment_parse (s, "1,1", &error));
  g_clear_error (&error);
  ck_assert_ptr_null (ps_device_assignment_parse (s, "2:0:0", &error));
  g_clear_error (&error);
}
END_TEST

START_TEST (test_routes)
{
  PsHardware hw = test_hw ();
  g_autoptr (PsSlice) mesh = ps_slice_new ("v3-2048", PS_WRAP_OFF, 2, NULL);
  g_autoptr (PsSlice) torus = ps_slice_new ("v3-2048", PS_WRAP_AUTO, 2, NULL);
  g_autoptr (PsPlatform) pm = ps_platform_new (mesh, &hw, NULL);
  g_autoptr (PsPlatform) pt = ps_platform_new (torus, &hw, NULL);
  int links[80];
  double lat;
  int a = ps_slice_core_index (mesh, 0, 0, 0), b = ps_slice_core_index (mesh, 31, 0, 0);
  /* Without wrap links the ring closes the long way; with them, in one hop. */
  ck_assert_int_eq (ps_platform_route (pm, b, a, links, &lat), 31);
  ck_assert_double_eq_tol (lat, 31e-6, 1e-12);
  ck_assert_int_eq (ps_platform_route (pt, b, a, links, &lat), 1);
  ck_assert_int_eq (links[0] % PS_LINKS_PER_CHIP, PS_LINK_X_PLUS);
  ck_assert (ps_platform_link_present (pt, links[0]));
  /* Edge ports exist only with wrap. */
  ck_assert (!ps_platform_link_present (pm, links[0]));
  /* Dimension order: x first, then y. */
  int n = ps_platform_route (pm, ps_slice_core_index (mesh, 0, 0, 1),
                             ps_slice_core_index (mesh, 2, 3, 0), links, NULL);
  ck_assert_int_eq (n, 5);
  ck_assert_int_eq (links[0] % PS_LINKS_PER_CHIP, PS_LINK_X_PLUS);
  ck_assert_int_eq (links[1] % PS_LINKS_PER_CHIP, PS_LINK_X_PLUS);
  ck_assert_int_eq (links[2] % PS_LINKS_PER_CHIP, PS_LINK_Y_PLUS);
  ck_assert_int_eq (links[2] / PS_LINKS_PER_CHIP, ps_slice_chip_index (mesh, 2, 0));
  /* The two cores of a chip use the on-chip link, both ways. */
  n = ps_platform_route (pm, 6, 7, links, &lat);
  ck_assert_int_eq (n, 1);
  ck_assert_str_eq (ps_platform_link_kind (pm, links[0]), "onchip");
  ck_assert_double_eq_tol (lat, 0.5e-6, 1e-12);
  ck_assert_int_eq (ps_platform_route (pm, 7, 7, links, NULL), 0);
  /* Half way round a wrapped ring: even sources go +, odd ones -. */
  n = ps_platform_route (pt, ps_slice_core_index (torus, 0, 0, 0),
                         ps_slice_core_index (torus, 16, 0, 0), links, NULL);
  ck_assert_int_eq (n, 16);
  ck_assert_int_eq (links[0] % PS_LINKS_PER_CHIP, PS_LINK_X_PLUS);
  n = ps_platform_route (pt, ps_slice_core_index (torus, 1, 0, 0),
                         ps_slice_core_index (torus, 17, 0, 0), links, NULL);
  ck_assert_int_eq (links[0] % PS_LINKS_PER_CHIP, PS_LINK_X_MINUS);
  g_autofree char *name = ps_platform_link_name (pt, links[0]);
  ck_assert_str_eq (name, "x1.y0.-x");
  /* The y part of a route along column x = 3, the short way round the wrap. */
  n = ps_platform_dim_route (pt, FALSE, 3, 30, 1, links);
  ck_assert_int_eq (n, 3);
  ck_assert_int_eq (links[0], ps_slice_chip_index (torus, 3, 30) * PS_LINKS_PER_CHIP + PS_LINK_Y_PLUS);
  ck_assert_int_eq (links[2], ps_slice_chip_index (torus, 3, 0) * PS_LINKS_PER_CHIP + PS_LINK_Y_PLUS);
  ck_assert_int_eq (ps_platform_chip_hops (pm, 0, ps_slice_chip_index (mesh, 31, 31)), 62);
  ck_assert_int_eq (ps_platform_chip_hops (pt, 0, ps_slice_chip_index (torus, 31, 31)), 2);
}
END_TEST

static Suite *
topology_suite (void)
{
  Suite *s = suite_create ("topology");
  ps_check_case (s, "slices_and_routes", 0,
                 PS_CHECK_TESTS (test_slices, test_core_numbering,
                                 test_assignment, test_routes));
  return s;
}

int
main (void)
{
  return ps_check_run (topology_suite (), CK_FORK_GETENV);
}
