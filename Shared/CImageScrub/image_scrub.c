#include "CImageScrub.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <vips/vips.h>

static pthread_once_t started = PTHREAD_ONCE_INIT;
static int start_failed = 0;

static void start(void) {
    if (VIPS_INIT("image_scrub")) {
        start_failed = 1;
        return;
    }
    // Each image is handled once: nothing to gain from libvips' operation cache, only memory held.
    vips_cache_set_max(0);
    // One thread per image; the caller's thread pool bounds how many run at once.
    vips_concurrency_set(1);
    // Only the loaders libvips counts as fuzzed and safe for untrusted input.
    vips_block_untrusted_set(TRUE);
}

static image_scrub_status fail(image_scrub_result *result, image_scrub_status status, const char *reason) {
    snprintf(result->reason, sizeof result->reason, "%s", reason);
    return status;
}

/// libvips' error buffer is shared by every thread: take (and clear) it in one step.
static image_scrub_status fail_with_vips_error(image_scrub_result *result, image_scrub_status status) {
    char *reason = vips_error_buffer_copy();
    fail(result, status, reason != NULL ? reason : "libvips failed");
    g_free(reason);
    return status;
}

static int load(const void *data, size_t length, image_scrub_format format, int shrink, VipsImage **image) {
    switch (format) {
    case IMAGE_SCRUB_JPEG:
        return vips_jpegload_buffer((void *)data, length, image, "fail_on", VIPS_FAIL_ON_ERROR, "shrink", shrink, NULL);
    case IMAGE_SCRUB_PNG:
        return vips_pngload_buffer((void *)data, length, image, "fail_on", VIPS_FAIL_ON_ERROR, NULL);
    case IMAGE_SCRUB_WEBP:
        return vips_webpload_buffer((void *)data, length, image, "fail_on", VIPS_FAIL_ON_ERROR, NULL);
    case IMAGE_SCRUB_HEIF:
        // The primary image only, turned by its `irot`/`imir` boxes as libheif decodes it.
        return vips_heifload_buffer((void *)data, length, image, "fail_on", VIPS_FAIL_ON_ERROR, NULL);
    default:
        return -1;
    }
}

// Whether libjpeg will hold the coefficients of the whole image while it decodes this JPEG,
// whatever the scale it writes at: libjpeg's own answer as libvips' header read records it
// (`jpeg-multiscan`, from `jpeg_has_multiple_scans`: a progressive frame, or a first scan without
// every component). Without the field, it is assumed to.
static int jpeg_holds_every_coefficient(VipsImage *header) {
    int multiscan = 1;
    if (vips_image_get_typeof(header, "jpeg-multiscan") != 0 && vips_image_get_int(header, "jpeg-multiscan", &multiscan) != 0) {
        g_free(vips_error_buffer_copy());
        return 1;
    }
    return multiscan != 0;
}

image_scrub_status image_scrub(const void *data, size_t length, image_scrub_format format, int max_side, size_t max_bytes, image_scrub_result *result) {
    return image_scrub_resized(data, length, format, max_side, max_bytes, 0, format, 1, result);
}

image_scrub_status image_scrub_resized(const void *data, size_t length, image_scrub_format format, int max_side, size_t max_bytes, int max_long_side,
                                       image_scrub_format output_format, int compact, image_scrub_result *result) {
    memset(result, 0, sizeof *result);
    if (output_format == IMAGE_SCRUB_HEIF) return fail(result, IMAGE_SCRUB_FAILED, "HEIF is not written");
    pthread_once(&started, start);
    if (start_failed) return fail(result, IMAGE_SCRUB_FAILED, "libvips did not start");

    // Loading reads the header only; pixels are decoded when the image is written below.
    VipsImage *image = NULL;
    if (format < IMAGE_SCRUB_JPEG || format > IMAGE_SCRUB_HEIF) return fail(result, IMAGE_SCRUB_UNREADABLE, "unknown format");
    if (load(data, length, format, 1, &image) != 0 || image == NULL) return fail_with_vips_error(result, IMAGE_SCRUB_UNREADABLE);

    result->width = vips_image_get_width(image);
    result->height = vips_image_get_height(image);
    if (result->width > max_side || result->height > max_side) {
        g_object_unref(image);
        return fail(result, IMAGE_SCRUB_TOO_LARGE, "the stated size is over the limit");
    }
    // What the whole image takes decoded, as its header states it.
    size_t whole_bytes = (size_t)VIPS_IMAGE_SIZEOF_IMAGE(image);
    int every_coefficient = format == IMAGE_SCRUB_JPEG && jpeg_holds_every_coefficient(image);

    // A JPEG shrinks by 2, 4 or 8 while it decodes (its DCT blocks scaled), far cheaper than
    // decoding every pixel and resizing them: the largest factor that keeps the long side at least
    // nine tenths of `max_long_side` (a 4032-pixel phone photo decodes at 2016 for 2048).
    int long_side = result->width > result->height ? result->width : result->height;
    if (format == IMAGE_SCRUB_JPEG && max_long_side > 0) {
        int shrink = 1;
        while (shrink < 8 && (long_side / (shrink * 2)) * 10 >= max_long_side * 9) shrink *= 2;
        if (shrink > 1) {
            VipsImage *smaller = NULL;
            if (load(data, length, format, shrink, &smaller) != 0 || smaller == NULL) {
                g_object_unref(image);
                return fail_with_vips_error(result, IMAGE_SCRUB_UNREADABLE);
            }
            g_object_unref(image);
            image = smaller;
        }
    }

    // The pixels as the loader will hand them over: a 16-bit PNG takes two bytes a channel, a
    // palette one is expanded to RGB or RGBA, a JPEG of one scan comes at the scale chosen above (a
    // 24-megapixel phone photo decodes at a quarter of its pixels). A JPEG of several scans holds
    // every coefficient of the whole image meanwhile, two bytes for each sample of each component
    // (fewer for a subsampled one): it counts twice its whole size. Counted before anything is
    // decoded.
    result->decoded_bytes = (size_t)VIPS_IMAGE_SIZEOF_IMAGE(image);
    if (every_coefficient) result->decoded_bytes = 2 * whole_bytes;
    if (result->decoded_bytes > max_bytes) {
        g_object_unref(image);
        return fail(result, IMAGE_SCRUB_TOO_MANY_BYTES, "the decoded size is over the budget");
    }

    VipsImage *upright = NULL;
    if (vips_autorot(image, &upright, NULL) != 0) {
        g_object_unref(image);
        return fail_with_vips_error(result, IMAGE_SCRUB_UNREADABLE);
    }
    g_object_unref(image);

    // A profile (Display P3 from an iPhone) goes with the metadata: convert to sRGB first, so that
    // the colours stay as they looked.
    if (vips_image_get_typeof(upright, VIPS_META_ICC_NAME) != 0) {
        VipsImage *srgb = NULL;
        if (vips_icc_transform(upright, &srgb, "srgb", "embedded", TRUE, NULL) == 0) {
            g_object_unref(upright);
            upright = srgb;
        } else {
            g_free(vips_error_buffer_copy());
        }
    }

    int now_long = vips_image_get_width(upright) > vips_image_get_height(upright) ? vips_image_get_width(upright) : vips_image_get_height(upright);
    if (max_long_side > 0 && now_long > max_long_side) {
        VipsImage *resized = NULL;
        if (vips_resize(upright, &resized, (double)max_long_side / now_long, NULL) != 0) {
            g_object_unref(upright);
            return fail_with_vips_error(result, IMAGE_SCRUB_UNREADABLE);
        }
        g_object_unref(upright);
        upright = resized;
    }

    // Without any metadata field: savers' "strip" leaves some behind (WebP's EXIF and XMP in this
    // libvips), so the fields go from a copy of the image (the pixels are shared, not copied).
    VipsImage *bare = NULL;
    if (vips_copy(upright, &bare, NULL) != 0) {
        g_object_unref(upright);
        return fail_with_vips_error(result, IMAGE_SCRUB_FAILED);
    }
    g_object_unref(upright);
    upright = bare;
    gchar **fields = vips_image_get_fields(upright);
    for (gchar **field = fields; field != NULL && *field != NULL; field++) {
        // The header's own fields (width, bands, …) cannot be removed and are not metadata.
        (void)vips_image_remove(upright, *field);
    }
    g_strfreev(fields);

    void *output = NULL;
    size_t output_length = 0;
    int saved;
    switch (output_format) {
    case IMAGE_SCRUB_JPEG:
        saved = vips_jpegsave_buffer(upright, &output, &output_length, "strip", TRUE, "Q", 90, "optimize_coding", compact ? TRUE : FALSE, NULL);
        break;
    case IMAGE_SCRUB_PNG:
        saved = vips_pngsave_buffer(upright, &output, &output_length, "strip", TRUE, NULL);
        break;
    default:
        saved = vips_webpsave_buffer(upright, &output, &output_length, "strip", TRUE, "Q", 90, NULL);
        break;
    }
    result->width = vips_image_get_width(upright);
    result->height = vips_image_get_height(upright);
    g_object_unref(upright);
    if (saved != 0 || output == NULL) return fail_with_vips_error(result, IMAGE_SCRUB_UNREADABLE);
    result->data = output;
    result->length = output_length;
    return IMAGE_SCRUB_OK;
}

image_scrub_status image_scrub_cover_png(const void *data, size_t length, int width, int height, image_scrub_result *result) {
    memset(result, 0, sizeof *result);
    pthread_once(&started, start);
    if (start_failed) return fail(result, IMAGE_SCRUB_FAILED, "libvips did not start");
    VipsImage *cover = NULL;
    if (vips_thumbnail_buffer((void *)data, length, &cover, width, "height", height, "crop", VIPS_INTERESTING_CENTRE, NULL) != 0) {
        return fail_with_vips_error(result, IMAGE_SCRUB_UNREADABLE);
    }
    void *output = NULL;
    size_t output_length = 0;
    int saved = vips_pngsave_buffer(cover, &output, &output_length, "strip", TRUE, "compression", 1, NULL);
    result->width = vips_image_get_width(cover);
    result->height = vips_image_get_height(cover);
    g_object_unref(cover);
    if (saved != 0 || output == NULL) return fail_with_vips_error(result, IMAGE_SCRUB_FAILED);
    result->data = output;
    result->length = output_length;
    return IMAGE_SCRUB_OK;
}

image_scrub_status image_scrub_rgb(const void *data, size_t length, image_scrub_result *result) {
    memset(result, 0, sizeof *result);
    pthread_once(&started, start);
    if (start_failed) return fail(result, IMAGE_SCRUB_FAILED, "libvips did not start");
    VipsImage *image = vips_image_new_from_buffer(data, length, "", NULL);
    if (image == NULL) return fail_with_vips_error(result, IMAGE_SCRUB_UNREADABLE);
    VipsImage *steps[4] = {NULL, NULL, NULL, NULL};
    int failed = vips_colourspace(image, &steps[0], VIPS_INTERPRETATION_sRGB, NULL) ||
                 (vips_image_hasalpha(steps[0]) ? vips_flatten(steps[0], &steps[1], NULL) : vips_copy(steps[0], &steps[1], NULL)) ||
                 vips_cast_uchar(steps[1], &steps[2], NULL) ||
                 vips_extract_band(steps[2], &steps[3], 0, "n", 3, NULL);
    g_object_unref(image);
    if (!failed) {
        result->width = vips_image_get_width(steps[3]);
        result->height = vips_image_get_height(steps[3]);
        result->data = vips_image_write_to_memory(steps[3], &result->length);
    }
    for (int i = 0; i < 4; i++) if (steps[i] != NULL) g_object_unref(steps[i]);
    if (failed || result->data == NULL) return fail_with_vips_error(result, IMAGE_SCRUB_FAILED);
    return IMAGE_SCRUB_OK;
}

void image_scrub_free(void *data) { g_free(data); }
