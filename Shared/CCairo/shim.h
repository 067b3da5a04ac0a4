// Cairo (2D drawing, PNG output) and Pango (text layout on Cairo: line wrapping, ellipsising, font
// fallback for any UTF-8), Debian: libcairo2-dev and libpango1.0-dev. Only CShareCard's C calls
// them: their API is pointer-heavy and GObject-based, so Swift calls one C function instead.
// pkg-config "pangocairo" brings the flags of both (and of glib, harfbuzz, freetype beneath them).
#ifndef CCAIRO_SHIM_H
#define CCAIRO_SHIM_H
#include <cairo.h>
#include <pango/pangocairo.h>
#endif
