#include "CShareCard.h"

#include <cairo.h>
#include <math.h>
#include <pango/pangocairo.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double r, g, b;
} colour;

static colour hex(uint32_t rgb) {
    return (colour){((rgb >> 16) & 0xff) / 255.0, ((rgb >> 8) & 0xff) / 255.0, (rgb & 0xff) / 255.0};
}

static void set_colour(cairo_t *cr, colour c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

#define FONT_FAMILY "DejaVu Sans, sans-serif"

static const double margin = 72;
/// The left column (name, calories, macros) ends before the badge's column.
static const double text_width = 680;
static const double badge_x = SHARE_CARD_WIDTH - 72 - 150;
static const double badge_y = 300;
static const double badge_radius = 132;

/// A badge colour with the colour its text needs to stay readable on it (amber takes dark text).
typedef struct {
    colour fill;
    colour text;
} band_style;

static band_style style_for_band(const char *band) {
    if (strcmp(band, "great") == 0) return (band_style){hex(0x2E9E5B), hex(0xFFFFFF)};
    if (strcmp(band, "ok") == 0) return (band_style){hex(0xF0A81C), hex(0x1F2A24)};
    if (strcmp(band, "poor") == 0) return (band_style){hex(0xD64541), hex(0xFFFFFF)};
    return (band_style){hex(0x8A948E), hex(0xFFFFFF)};
}

/// Valid UTF-8 without line breaks or other control characters (a name with a newline would
/// otherwise start a line of its own). Free with g_free.
static char *clean_text(const char *text) {
    char *valid = g_utf8_make_valid(text, -1);
    for (unsigned char *c = (unsigned char *)valid; *c != 0; c++) {
        if (*c < 0x20 || *c == 0x7f) *c = ' ';
    }
    return valid;
}

static double clamp_amount(double value, double max) {
    if (!isfinite(value) || value < 0) return 0;
    return value > max ? max : value;
}

/// Whole grams from 10 up, one decimal below ("2.5 g", "4 g", "32 g"). Integer arithmetic, so the
/// process locale cannot turn the point into a comma.
static void format_grams(char *buffer, size_t size, double grams) {
    long tenths = lround(clamp_amount(grams, 9999) * 10);
    if (tenths >= 100 || tenths % 10 == 0) {
        snprintf(buffer, size, "%ld g", (tenths + 5) / 10);
    } else {
        snprintf(buffer, size, "%ld.%ld g", tenths / 10, tenths % 10);
    }
}

/// A layout of one text in one font; `width` (> 0) wraps or ellipsises it, `max_lines` bounds the lines
/// (ellipsising the last), 1 keeps it on one line.
static PangoLayout *make_layout(PangoContext *context, const char *text, PangoWeight weight, double pixels, double width, int max_lines) {
    PangoLayout *layout = pango_layout_new(context);
    PangoFontDescription *font = pango_font_description_from_string(FONT_FAMILY);
    pango_font_description_set_weight(font, weight);
    pango_font_description_set_absolute_size(font, pixels * PANGO_SCALE);
    pango_layout_set_font_description(layout, font);
    pango_font_description_free(font);
    if (width > 0) {
        pango_layout_set_width(layout, (int)(width * PANGO_SCALE));
        pango_layout_set_wrap(layout, PANGO_WRAP_WORD_CHAR);
        pango_layout_set_ellipsize(layout, PANGO_ELLIPSIZE_END);
        // A negative height is a number of lines.
        pango_layout_set_height(layout, -max_lines);
    }
    pango_layout_set_text(layout, text, -1);
    return layout;
}

static double layout_width(PangoLayout *layout) {
    PangoRectangle logical;
    pango_layout_get_pixel_extents(layout, NULL, &logical);
    return logical.width;
}

static double layout_height(PangoLayout *layout) {
    PangoRectangle logical;
    pango_layout_get_pixel_extents(layout, NULL, &logical);
    return logical.height;
}

static double layout_baseline(PangoLayout *layout) { return (double)pango_layout_get_baseline(layout) / PANGO_SCALE; }

static void draw_layout(cairo_t *cr, PangoLayout *layout, double x, double y, colour c) {
    set_colour(cr, c);
    cairo_move_to(cr, x, y);
    pango_cairo_show_layout(cr, layout);
}

/// Draws `text` once and frees its layout; returns its width.
static double draw_text(cairo_t *cr, PangoContext *context, const char *text, PangoWeight weight, double pixels, double x, double y, colour c) {
    PangoLayout *layout = make_layout(context, text, weight, pixels, 0, 1);
    draw_layout(cr, layout, x, y, c);
    double width = layout_width(layout);
    g_object_unref(layout);
    return width;
}

static void rounded_rectangle(cairo_t *cr, double x, double y, double width, double height, double radius) {
    cairo_new_sub_path(cr);
    cairo_arc(cr, x + width - radius, y + radius, radius, -G_PI / 2, 0);
    cairo_arc(cr, x + width - radius, y + height - radius, radius, 0, G_PI / 2);
    cairo_arc(cr, x + radius, y + height - radius, radius, G_PI / 2, G_PI);
    cairo_arc(cr, x + radius, y + radius, radius, G_PI, 3 * G_PI / 2);
    cairo_close_path(cr);
}

/// The meal's name as large as it fits: one or two lines big, else three smaller, ellipsised after that.
static void draw_title(cairo_t *cr, PangoContext *context, const char *title, colour ink) {
    static const struct {
        double pixels;
        int lines;
    } sizes[] = {{66, 2}, {54, 2}, {46, 3}};
    size_t count = sizeof sizes / sizeof sizes[0];
    for (size_t i = 0; i < count; i++) {
        PangoLayout *layout = make_layout(context, title, PANGO_WEIGHT_BOLD, sizes[i].pixels, text_width, sizes[i].lines);
        if (i + 1 < count && pango_layout_is_ellipsized(layout)) {
            g_object_unref(layout);
            continue;
        }
        // Centred in the band between the header (y 112) and the calories (y 300).
        double height = layout_height(layout);
        double y = 112 + fmax(0, (188 - height) / 2);
        draw_layout(cr, layout, margin, y, ink);
        g_object_unref(layout);
        return;
    }
}

static void draw_macro(cairo_t *cr, PangoContext *context, double x, const char *label, double grams, colour accent, colour ink, colour muted) {
    char value[32];
    format_grams(value, sizeof value, grams);
    set_colour(cr, accent);
    rounded_rectangle(cr, x, 468, 8, 96, 4);
    cairo_fill(cr);
    draw_text(cr, context, label, PANGO_WEIGHT_NORMAL, 26, x + 24, 466, muted);
    draw_text(cr, context, value, PANGO_WEIGHT_BOLD, 46, x + 24, 504, ink);
}

/// A ring that fills clockwise from the top in proportion to the score, the score inside, the band
/// below in a pill of its colour.
static void draw_badge(cairo_t *cr, PangoContext *context, int score, const char *band, colour ink, colour muted, colour track) {
    band_style style = style_for_band(band);

    PangoLayout *caption = make_layout(context, "Diet score", PANGO_WEIGHT_NORMAL, 28, 0, 1);
    draw_layout(cr, caption, badge_x - layout_width(caption) / 2, 92, muted);
    g_object_unref(caption);

    cairo_set_line_width(cr, 22);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
    set_colour(cr, track);
    cairo_new_path(cr);
    cairo_arc(cr, badge_x, badge_y, badge_radius, 0, 2 * G_PI);
    cairo_stroke(cr);
    if (score > 0) {
        set_colour(cr, style.fill);
        cairo_new_path(cr);
        cairo_arc(cr, badge_x, badge_y, badge_radius, -G_PI / 2, -G_PI / 2 + 2 * G_PI * score / 100.0);
        cairo_stroke(cr);
    }
    cairo_new_path(cr);

    char number[8];
    snprintf(number, sizeof number, "%d", score);
    PangoLayout *value = make_layout(context, number, PANGO_WEIGHT_BOLD, 96, 0, 1);
    PangoLayout *out_of = make_layout(context, "/ 100", PANGO_WEIGHT_NORMAL, 26, 0, 1);
    double value_height = layout_height(value);
    double value_y = badge_y - value_height / 2 - 14;
    draw_layout(cr, value, badge_x - layout_width(value) / 2, value_y, ink);
    draw_layout(cr, out_of, badge_x - layout_width(out_of) / 2, value_y + value_height - 10, muted);
    g_object_unref(value);
    g_object_unref(out_of);

    if (band[0] == 0) return;
    PangoLayout *label = make_layout(context, band, PANGO_WEIGHT_BOLD, 32, 260, 1);
    double label_width = layout_width(label);
    double label_height = layout_height(label);
    double pill_width = label_width + 56;
    double pill_height = label_height + 16;
    double pill_y = badge_y + badge_radius + 34;
    set_colour(cr, style.fill);
    rounded_rectangle(cr, badge_x - pill_width / 2, pill_y, pill_width, pill_height, pill_height / 2);
    cairo_fill(cr);
    draw_layout(cr, label, badge_x - label_width / 2, pill_y + 8, style.text);
    g_object_unref(label);
}

static void draw_card(cairo_t *cr, PangoContext *context, const char *title, const char *app_name, double calories, double protein_g, double carbs_g,
                      double fat_g, int score, const char *band, int with_strip) {
    colour background = hex(0xFBFAF7);
    colour ink = hex(0x1F2A24);
    colour muted = hex(0x6B7770);
    colour brand = hex(0x2E7D4F);
    colour track = hex(0xE7E9E4);

    set_colour(cr, background);
    cairo_paint(cr);

    // The app's name with a dot of its colour, top left.
    set_colour(cr, brand);
    cairo_arc(cr, margin + 11, 74, 11, 0, 2 * G_PI);
    cairo_fill(cr);
    PangoLayout *app = make_layout(context, app_name, PANGO_WEIGHT_BOLD, 30, text_width - 34, 1);
    draw_layout(cr, app, margin + 34, 74 - layout_height(app) / 2, brand);
    g_object_unref(app);

    draw_title(cr, context, title, ink);

    // Calories: the number large, "kcal" beside it on the same baseline.
    char kcal[16];
    snprintf(kcal, sizeof kcal, "%ld", lround(clamp_amount(calories, 99999)));
    PangoLayout *number = make_layout(context, kcal, PANGO_WEIGHT_BOLD, 96, 0, 1);
    PangoLayout *unit = make_layout(context, "kcal", PANGO_WEIGHT_NORMAL, 40, 0, 1);
    double number_y = 306;
    draw_layout(cr, number, margin, number_y, ink);
    draw_layout(cr, unit, margin + layout_width(number) + 14, number_y + layout_baseline(number) - layout_baseline(unit), muted);
    g_object_unref(number);
    g_object_unref(unit);

    draw_macro(cr, context, margin, "Protein", protein_g, hex(0x3D7BD9), ink, muted);
    draw_macro(cr, context, margin + 230, "Carbs", carbs_g, hex(0x8E6CD1), ink, muted);
    draw_macro(cr, context, margin + 460, "Fat", fat_g, hex(0xC2558A), ink, muted);

    draw_badge(cr, context, score, band, ink, muted, track);

    // A strip in the band's colour along the bottom edge: the verdict reads even as a thumbnail.
    if (!with_strip) return;
    set_colour(cr, style_for_band(band).fill);
    cairo_rectangle(cr, 0, SHARE_CARD_HEIGHT - 14, SHARE_CARD_WIDTH, 14);
    cairo_fill(cr);
}

typedef struct {
    unsigned char *data;
    size_t length;
    size_t capacity;
} png_buffer;

static cairo_status_t append_png(void *closure, const unsigned char *data, unsigned int length) {
    png_buffer *buffer = closure;
    if (length > buffer->capacity - buffer->length) {
        size_t capacity = buffer->capacity * 2;
        while (length > capacity - buffer->length) capacity *= 2;
        unsigned char *grown = realloc(buffer->data, capacity);
        if (grown == NULL) return CAIRO_STATUS_NO_MEMORY;
        buffer->data = grown;
        buffer->capacity = capacity;
    }
    memcpy(buffer->data + buffer->length, data, length);
    buffer->length += length;
    return CAIRO_STATUS_SUCCESS;
}

typedef struct {
    const unsigned char *data;
    size_t length;
    size_t offset;
} png_source;

static cairo_status_t read_png(void *closure, unsigned char *data, unsigned int length) {
    png_source *source = closure;
    if (length > source->length - source->offset) return CAIRO_STATUS_READ_ERROR;
    memcpy(data, source->data + source->offset, length);
    source->offset += length;
    return CAIRO_STATUS_SUCCESS;
}

/// The photo in its place on the left, scaled to fill it if it is not of its size.
static void draw_photo(cairo_t *cr, cairo_surface_t *photo) {
    double width = cairo_image_surface_get_width(photo);
    double height = cairo_image_surface_get_height(photo);
    cairo_save(cr);
    cairo_rectangle(cr, 0, 0, SHARE_CARD_PHOTO_WIDTH, SHARE_CARD_PHOTO_HEIGHT);
    cairo_clip(cr);
    cairo_scale(cr, SHARE_CARD_PHOTO_WIDTH / width, SHARE_CARD_PHOTO_HEIGHT / height);
    cairo_set_source_surface(cr, photo, 0, 0);
    cairo_paint(cr);
    cairo_restore(cr);
}

share_card_status share_card_png(const char *title, const char *app_name, double calories, double protein_g, double carbs_g, double fat_g, int score,
                                 const char *band, unsigned char **out, size_t *out_len) {
    return share_card_png_photo(title, app_name, calories, protein_g, carbs_g, fat_g, score, band, NULL, 0, out, out_len);
}

share_card_status share_card_png_photo(const char *title, const char *app_name, double calories, double protein_g, double carbs_g, double fat_g, int score,
                                       const char *band, const unsigned char *photo_png, size_t photo_len, unsigned char **out, size_t *out_len) {
    if (out == NULL || out_len == NULL) return SHARE_CARD_INVALID_ARGUMENT;
    *out = NULL;
    *out_len = 0;
    if (title == NULL || app_name == NULL || band == NULL) return SHARE_CARD_INVALID_ARGUMENT;

    char *clean_title = clean_text(title);
    char *clean_app_name = clean_text(app_name);
    char *clean_band = clean_text(band);
    score = score < 0 ? 0 : score > 100 ? 100 : score;

    share_card_status status = SHARE_CARD_FAILED;
    png_buffer buffer = {malloc(64 * 1024), 0, 64 * 1024};
    cairo_surface_t *surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, SHARE_CARD_WIDTH, SHARE_CARD_HEIGHT);
    cairo_t *cr = cairo_create(surface);
    // Pango's default font map is per thread, so concurrent cards share no Pango state; the context
    // is this card's own.
    PangoContext *context = pango_font_map_create_context(pango_cairo_font_map_get_default());
    // Unhinted outlines with greyscale antialiasing: the same pixels whatever fontconfig's
    // defaults are on the machine.
    cairo_font_options_t *options = cairo_font_options_create();
    cairo_font_options_set_antialias(options, CAIRO_ANTIALIAS_GRAY);
    cairo_font_options_set_hint_style(options, CAIRO_HINT_STYLE_NONE);
    cairo_font_options_set_hint_metrics(options, CAIRO_HINT_METRICS_OFF);
    pango_cairo_context_set_font_options(context, options);
    cairo_font_options_destroy(options);

    if (buffer.data != NULL && cairo_status(cr) == CAIRO_STATUS_SUCCESS) {
        cairo_surface_t *photo = NULL;
        if (photo_png != NULL && photo_len > 0) {
            png_source source = {photo_png, photo_len, 0};
            photo = cairo_image_surface_create_from_png_stream(read_png, &source);
            if (cairo_surface_status(photo) != CAIRO_STATUS_SUCCESS || cairo_image_surface_get_width(photo) == 0) {
                cairo_surface_destroy(photo);
                photo = NULL;
            }
        }
        if (photo == NULL) {
            pango_cairo_update_context(cr, context);
            draw_card(cr, context, clean_title, clean_app_name, calories, protein_g, carbs_g, fat_g, score, clean_band, 1);
        } else {
            // The card as without a photo, scaled into the space beside it and centred in height;
            // then the photo, and the band's strip along the whole bottom edge again.
            double scale = (double)(SHARE_CARD_WIDTH - SHARE_CARD_PHOTO_WIDTH) / SHARE_CARD_WIDTH;
            cairo_save(cr);
            cairo_translate(cr, SHARE_CARD_PHOTO_WIDTH, (SHARE_CARD_PHOTO_HEIGHT - SHARE_CARD_HEIGHT * scale) / 2);
            cairo_scale(cr, scale, scale);
            pango_cairo_update_context(cr, context);
            draw_card(cr, context, clean_title, clean_app_name, calories, protein_g, carbs_g, fat_g, score, clean_band, 0);
            cairo_restore(cr);
            draw_photo(cr, photo);
            cairo_surface_destroy(photo);
            set_colour(cr, style_for_band(clean_band).fill);
            cairo_rectangle(cr, 0, SHARE_CARD_HEIGHT - 14, SHARE_CARD_WIDTH, 14);
            cairo_fill(cr);
        }
        cairo_surface_flush(surface);
        if (cairo_status(cr) == CAIRO_STATUS_SUCCESS && cairo_surface_write_to_png_stream(surface, append_png, &buffer) == CAIRO_STATUS_SUCCESS) {
            status = SHARE_CARD_OK;
        }
    }

    g_object_unref(context);
    cairo_destroy(cr);
    cairo_surface_destroy(surface);
    g_free(clean_title);
    g_free(clean_app_name);
    g_free(clean_band);
    if (status == SHARE_CARD_OK) {
        *out = buffer.data;
        *out_len = buffer.length;
    } else {
        free(buffer.data);
    }
    return status;
}

void share_card_free(unsigned char *data) { free(data); }
