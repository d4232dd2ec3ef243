/* Pictures (cli/picture.c): sizes, the hottest link drawn in the hottest
 * color, wrap links drawn only where the slice has them, every picture
 * kind renders as PNG and SVG. Pixels are read back from the PNG. */
#include "config.h"

#include <cairo.h>
#include <check.h>
#include <math.h>
#include <string.h>

#include "tests/suite_main.h"
#include "cli/picture.h"
#include "sim/collectives.h"
#include "topology/hardware.h"
#include "topology/platform.h"
#include "topology/slice.h"

typedef struct {
  const GString *s;
  gsize at;
} Reader;

static cairo_status_t
read_bytes (void *closure, unsigned char *data, unsigned int length)
{
  Reader *r = closure;
  if (r->at + length > r->s->len)
    return CAIRO_STATUS_READ_ERROR;
  memcpy (data, r->s->str + r->at, length);
  r->at += length;
  return CAIRO_STATUS_SUCCESS;
}

static cairo_surface_t *
decode (const GString *png)
{
  Reader r = { png, 0 };
  cairo_surface_t *s = cairo_image_surface_create_from_png_stream (read_bytes, &r);
  ck_assert_int_eq (cairo_surface_status (s), CAIRO_STATUS_SUCCESS);
  return s;
}

/* RGB of the pixel at (x, y), 0..1. */
static void
pixel (cairo_surface_t *s, double x, double y, double rgb[3])
{
  cairo_surface_flush (s);
  int stride = cairo_image_surface_get_stride (s);
  const unsigned char *d = cairo_image_surface_get_data (s);
  int ix = (int) floor (x), iy = (int) floor (y);
  ck_assert (ix >= 0 && iy >= 0 && ix < cairo_image_surface_get_width (s)
             && iy < cairo_image_surface_get_height (s));
  guint32 v = *(const guint32 *) (d + iy * stride + 4 * ix);
  rgb[0] = ((v >> 16) & 0xff) / 255.0;
  rgb[1] = ((v >> 8) & 0xff) / 255.0;
  rgb[2] = (v & 0xff) / 255.0;
}

static gboolean
near (const double a[3], const double b[3])
{
  for (int k = 0; k < 3; k++)
    if (fabs (a[k] - b[k]) > 2.5 / 255)
      return FALSE;
  return TRUE;
}

static PsPlatform *
platform (const char *slice, PsWrapMode wrap)
{
  GError *error = NULL;
  g_autoptr (PsHardware) hw = ps_hardware_load_or_default (NULL, &error);
  ck_assert (hw != NULL);
  g_autoptr (PsSlice) s = ps_slice_new (slice, wrap, hw->tensorcores_per_chip, &error);
  ck_assert (s != NULL);
  PsPlatform *p = ps_platform_new (s, hw, &error);
  ck_assert (p != NULL);
  return p;
}

static int
link_id (const PsPlatform *p, int x, int y, PsLinkDir dir)
{
  return ps_slice_chip_index (&p->slice, x, y) * PS_LINKS_PER_CHIP + dir;
}

START_TEST (test_links_colors_and_wraps)
{
  g_autoptr (PsPlatform) p = platform ("v3-32", PS_WRAP_AUTO);   /* 4x4 chips, no wrap links */
  g_autofree double *bytes = g_new0 (double, p->n_links);
  for (int k = 0; k < p->n_links; k++)
    if (ps_platform_link_present (p, k))
      bytes[k] = (k % 7) * 1e6;
  int hot = link_id (p, 1, 2, PS_LINK_X_PLUS), cool = link_id (p, 2, 1, PS_LINK_Y_MINUS);
  int idle = link_id (p, 0, 0, PS_LINK_Y_PLUS);
  bytes[hot] = 50e6;
  bytes[cool] = 12.5e6;
  bytes[idle] = 0;
  double time_s = 1e-3;
  g_autoptr (GString) png = g_string_new (NULL);
  GError *error = NULL;
  ck_assert (ps_picture_links (p, bytes, time_s, "test", PS_PICTURE_PNG, png, &error));
  cairo_surface_t *s = decode (png);
  PsSliceLayout l;
  ps_slice_layout_init (&l, p, 56);
  ck_assert_int_eq (cairo_image_surface_get_width (s), (int) ceil (l.width));
  ck_assert_int_eq (cairo_image_surface_get_height (s), (int) ceil (l.height));
  double x, y, have[3], want[3];
  /* The hottest link has the hottest color; another its share of it. */
  ps_slice_layout_link_point (&l, p, hot, &x, &y);
  pixel (s, x, y, have);
  ps_picture_colormap (1.0, want);
  ck_assert_msg (near (have, want), "hottest link drawn as %g %g %g", have[0], have[1], have[2]);
  ps_slice_layout_link_point (&l, p, cool, &x, &y);
  pixel (s, x, y, have);
  ps_picture_colormap (0.25, want);
  ck_assert_msg (near (have, want), "a quarter-loaded link drawn as %g %g %g", have[0], have[1], have[2]);
  /* No link elsewhere is drawn in the hottest color. */
  for (int k = 0; k < p->n_links; k++)
    if (k != hot && ps_platform_link_present (p, k))
      {
        ps_slice_layout_link_point (&l, p, k, &x, &y);
        pixel (s, x, y, have);
        ps_picture_colormap (1.0, want);
        ck_assert (!near (have, want));
      }
  /* Wrap links the slice lacks are not drawn: background where they would be. */
  double white[3] = { 1, 1, 1 };
  int absent[] = { link_id (p, 3, 1, PS_LINK_X_PLUS), link_id (p, 0, 2, PS_LINK_X_MINUS),
                   link_id (p, 2, 3, PS_LINK_Y_PLUS), link_id (p, 1, 0, PS_LINK_Y_MINUS) };
  for (gsize i = 0; i < G_N_ELEMENTS (absent); i++)
    {
      ck_assert (!ps_platform_link_present (p, absent[i]));
      ps_slice_layout_link_point (&l, p, absent[i], &x, &y);
      pixel (s, x, y, have);
      ck_assert_msg (near (have, white), "absent wrap link %d drawn", absent[i]);
    }
  cairo_surface_destroy (s);

  /* The same slice with wrap links: now they are drawn, in their color. */
  g_autoptr (PsPlatform) w = platform ("v3-32", PS_WRAP_ON);
  g_autofree double *wb = g_new0 (double, w->n_links);
  int wrap = link_id (w, 3, 1, PS_LINK_X_PLUS);
  ck_assert (ps_platform_link_present (w, wrap));
  wb[wrap] = 8e6;
  wb[link_id (w, 0, 0, PS_LINK_X_PLUS)] = 2e6;
  ck_assert (ps_picture_links (w, wb, time_s, "wrap", PS_PICTURE_PNG, png, &error));
  s = decode (png);
  ps_slice_layout_link_point (&l, w, wrap, &x, &y);
  pixel (s, x, y, have);
  ps_picture_colormap (1.0, want);
  ck_assert_msg (near (have, want), "wrap link drawn as %g %g %g", have[0], have[1], have[2]);
  cairo_surface_destroy (s);
}
END_TEST

/* An all-reduce over each row of chips (groups along x), as planned. */
static PsCollPlan *
row_rings (PsPlatform *p)
{
  int n = ps_slice_n_cores (&p->slice), X = p->slice.chips_x, C = p->slice.cores_per_chip;
  g_autofree int *cores = g_new (int, n);
  int i = 0;
  for (int y = 0; y < p->slice.chips_y; y++)
    for (int x = 0; x < X; x++)
      for (int c = 0; c < C; c++)
        cores[i++] = ps_slice_core_index (&p->slice, x, y, c);
  GError *error = NULL;
  PsCollPlan *plan = ps_coll_plan_new (p, PS_COLL_TORUS2D, PS_TRACE_ALL_REDUCE, 1 << 20, cores, p->slice.chips_y,
                                       X * C, 0, &error);
  ck_assert (plan != NULL);
  return plan;
}

START_TEST (test_every_kind_renders)
{
  g_autoptr (PsPlatform) p = platform ("v3-32", PS_WRAP_AUTO);
  GError *error = NULL;
  g_autoptr (GString) out = g_string_new (NULL);
  /* Groups: rows of chips along x, and their rings. */
  int C = p->slice.cores_per_chip;
  g_autoptr (PsCollPlan) plan = row_rings (p);
  ck_assert (ps_picture_groups (p, plan, NULL, "groups", PS_PICTURE_PNG, out, &error));
  cairo_surface_t *s = decode (out);
  /* Core 0's square has group 0's color (Tableau blue), not the background. */
  PsSliceLayout l;
  ps_slice_layout_init (&l, p, 36);
  double x, y, have[3], blue[3] = { 0x4e / 255.0, 0x79 / 255.0, 0xa7 / 255.0 };
  ps_slice_layout_core_point (&l, p, 0, &x, &y);
  double s0 = l.cell - 2 * l.pad, w = 0.9 * s0 / C;
  pixel (s, x - 0.4 * w, y - 0.4 * w, have);
  ck_assert_msg (near (have, blue), "core 0 drawn as %g %g %g", have[0], have[1], have[2]);
  cairo_surface_destroy (s);

  PsBreakdownRow rows[2] = { { "a", 1.0, 0.5, 0.1, 2.0 }, { "b", 0.3, 0.2, 0.0, 0 } };
  ck_assert (ps_picture_breakdown (rows, 2, "steps", PS_PICTURE_PNG, out, &error));
  s = decode (out);
  ck_assert_int_gt (cairo_image_surface_get_width (s), 600);
  cairo_surface_destroy (s);
  PsScalingPoint pts[3] = { { "a", 128, 4000, 3700, 0.5 }, { "c", 2048, 60000, 62000, 0.45 },
                            { "b", 512, 17000, 18000, 0.48 } };
  ck_assert (ps_picture_scaling (pts, 3, "tokens", "scaling", PS_PICTURE_PNG, out, &error));
  s = decode (out);
  ck_assert_int_eq (cairo_image_surface_get_width (s), 840);
  cairo_surface_destroy (s);
  ck_assert (ps_picture_scaling (pts, 3, "tokens", "scaling", PS_PICTURE_SVG, out, &error));
  ck_assert (g_str_has_prefix (out->str, "<?xml"));
  ck_assert (strstr (out->str, "<svg") != NULL);
  g_autofree double *bytes = g_new0 (double, p->n_links);
  ck_assert (ps_picture_links (p, bytes, 1.0, "idle", PS_PICTURE_SVG, out, &error));
  ck_assert (strstr (out->str, "</svg>") != NULL);

  PsPictureFormat f;
  ck_assert (ps_picture_format_for ("a.svg", "--picture", &f, NULL) && f == PS_PICTURE_SVG);
  ck_assert (ps_picture_format_for ("a.png", "--picture", &f, NULL) && f == PS_PICTURE_PNG);
  ck_assert (!ps_picture_format_for ("a.jpg", "--picture", &f, &error));
  ck_assert_str_eq (error->message, "--picture a.jpg: a picture is FILE.png or FILE.svg");
  g_clear_error (&error);
}
END_TEST

/* Dark (text, ticks, arrows) pixels in the box [x0, x1) x [y0, y1). */
static int
dark_pixels (cairo_surface_t *s, double x0, double y0, double x1, double y1)
{
  int n = 0;
  double rgb[3];
  for (int y = (int) y0; y < (int) y1; y++)
    for (int x = (int) x0; x < (int) x1; x++)
      {
        pixel (s, x, y, rgb);
        n += rgb[0] + rgb[1] + rgb[2] < 1.5;
      }
  return n;
}

/* What a slide needs (issue 27): chip coordinates under every column and
 * beside every row, a colour bar with ticks, ring transfers whose heads
 * show, a time axis under the step bars. */
START_TEST (test_axes_ticks_and_heads)
{
  g_autoptr (PsPlatform) p = platform ("v3-32", PS_WRAP_AUTO);
  g_autofree double *bytes = g_new0 (double, p->n_links);
  bytes[link_id (p, 1, 2, PS_LINK_X_PLUS)] = 1e6;
  g_autoptr (GString) png = g_string_new (NULL);
  GError *error = NULL;
  ck_assert (ps_picture_links (p, bytes, 1e-3, "axes", PS_PICTURE_PNG, png, &error));
  cairo_surface_t *s = decode (png);
  PsSliceLayout l;
  ps_slice_layout_init (&l, p, 56);
  for (int x = 0; x < l.chips_x; x++)
    {
      double cx = l.left + (x + 0.5) * l.cell;
      ck_assert_msg (dark_pixels (s, cx - 6, l.axis_x_baseline - 10, cx + 6, l.axis_x_baseline + 1) > 5,
                     "no coordinate under chip column %d", x);
    }
  for (int y = 0; y < l.chips_y; y++)
    {
      double cy = l.top + (y + 0.5) * l.cell;
      ck_assert_msg (dark_pixels (s, l.axis_y_right - 12, cy - 6, l.axis_y_right + 1, cy + 6) > 5,
                     "no coordinate beside chip row %d", y);
    }
  /* "chip x" under the numbers. */
  double mid = l.left + 0.5 * l.chips_x * l.cell;
  ck_assert (dark_pixels (s, mid - 20, l.axis_x_baseline + 5, mid + 20, l.axis_x_baseline + 17) > 20);
  /* Five ticks under the colour bar (cli/picture.c: the bar at 20, 14 px
   * into the legend, 12 px high), dark just below the bar, white between. */
  double lw = MIN (260.0, l.width - 200), ly = l.height - 56 + 14 + 12;
  for (int i = 0; i <= 4; i++)
    {
      double tx = floor (20 + (lw - 1) * i / 4.0) + 0.5;
      ck_assert_msg (dark_pixels (s, tx - 1, ly + 1, tx + 1, ly + 4) > 0, "no tick %d under the colour bar", i);
    }
  ck_assert_int_eq (dark_pixels (s, 20 + lw / 8 - 2, ly + 1, 20 + lw / 8 + 2, ly + 3), 0);
  cairo_surface_destroy (s);

  /* Rings: every transfer's head ends outside its destination's square,
   * where the device id patch cannot hide it. */
  int C = p->slice.cores_per_chip;
  g_autoptr (PsCollPlan) plan = row_rings (p);
  ck_assert (ps_picture_groups (p, plan, NULL, "rings", PS_PICTURE_PNG, png, &error));
  s = decode (png);
  ps_slice_layout_init (&l, p, 36);
  double w = 0.9 * (l.cell - 2 * l.pad) / C;
  int checked = 0;
  PsPhase *phase = plan->groups[0].phases->pdata[0];
  for (guint k = 0; k < phase->flows->len; k++)
    {
      PsFlow *fl = &g_array_index (phase->flows, PsFlow, k);
      double x1, y1, x0, y0;
      ps_slice_layout_core_point (&l, p, fl->dst_core, &x1, &y1);
      ps_slice_layout_core_point (&l, p, fl->src_core, &x0, &y0);
      if (fabs (y1 - y0) > 1 || fabs (x1 - x0) < l.cell / 2)
        continue;          /* between chips of a row: the head is left or right of the square */
      double side = x1 > x0 ? -1 : 1;
      /* Just outside the square on the side the transfer comes from, a
       * column as dark as a head is wide (the line alone is 1 or 2 px). */
      int d = 0;
      for (int dx = 1; dx <= 8; dx++)
        {
          double cx = x1 + side * (w / 2 + dx);
          d = MAX (d, dark_pixels (s, cx, y1 - 0.6 * w, cx + 1, y1 + 0.6 * w));
        }
      ck_assert_msg (d >= 5, "the head of a transfer to core %d is hidden (a column of %d dark pixels)",
                     fl->dst_core, d);
      checked++;
    }
  ck_assert_int_gt (checked, 0);
  cairo_surface_destroy (s);

  /* The step bars' time axis: a line under the bars, ticks with labels. */
  PsBreakdownRow rows[1] = { { "a", 1.0, 0.5, 0.1, 0 } };
  ck_assert (ps_picture_breakdown (rows, 1, "steps", PS_PICTURE_PNG, png, &error));
  s = decode (png);
  double ay = 40 + 46 + 4;   /* top + one row + 4 (cli/picture.c) */
  ck_assert (dark_pixels (s, 230, ay - 1, 750, ay + 2) > 400);
  ck_assert (dark_pixels (s, 200, ay + 7, 760, ay + 20) > 30);
  cairo_surface_destroy (s);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("picture");
  ps_check_case (s, "picture", 0,
                 PS_CHECK_TESTS (test_links_colors_and_wraps,
                                 test_every_kind_renders,
                                 test_axes_ticks_and_heads));
  return ps_check_run (s, CK_FORK_GETENV);
}
