/* png_stats FILE.png: prints "WIDTH HEIGHT NON_WHITE DISTINCT" (pixels that
 * are not white, distinct colors, up to 4096) so shell tests can tell a
 * rendered page or picture from a blank one. Exit 1 if it is not a PNG. */
#include "config.h"

#include <cairo.h>
#include <glib.h>
#include <stdio.h>

int
main (int argc, char **argv)
{
  if (argc != 2)
    {
      fprintf (stderr, "usage: png_stats FILE.png\n");
      return 2;
    }
  cairo_surface_t *s = cairo_image_surface_create_from_png (argv[1]);
  if (cairo_surface_status (s) != CAIRO_STATUS_SUCCESS)
    {
      fprintf (stderr, "png_stats: %s: %s\n", argv[1], cairo_status_to_string (cairo_surface_status (s)));
      return 1;
    }
  int w = cairo_image_surface_get_width (s), h = cairo_image_surface_get_height (s);
  int stride = cairo_image_surface_get_stride (s);
  const unsigned char *d = cairo_image_surface_get_data (s);
  GHashTable *colors = g_hash_table_new (NULL, NULL);
  long non_white = 0;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      {
        guint32 v = *(const guint32 *) (d + y * stride + 4 * x) & 0xffffff;
        non_white += v != 0xffffff;
        if (g_hash_table_size (colors) < 4096)
          g_hash_table_add (colors, GUINT_TO_POINTER (v + 1));
      }
  printf ("%d %d %ld %u\n", w, h, non_white, g_hash_table_size (colors));
  g_hash_table_destroy (colors);
  cairo_surface_destroy (s);
  return 0;
}
