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

// ---- HEIF: what the HEVC streams will decode, before libde265 decodes them -------------------
//
// A HEIF image's stated size (its `ispe` box, which the header check above reads) need not be the
// size its HEVC stream codes (the SPS): a 15 KB file stating 64x64 can code 8192x8192, and a grid
// can code any number of such tiles, each decoded whole (up to 4 at once) and then cut to the size
// its `ispe` states. libheif 1.15 has no accessor for a coded size, nor a limit below the 16384
// that libvips sets, so the image is decoded once beforehand through a decoder plugin of our own,
// registered on that context only (`heif_register_decoder`): libheif hands it exactly the NAL
// units libde265 will get (the `hvcC` parameter sets, then the item's data) for every picture it
// will decode (grid tiles, alpha), and it reads the size in each SPS, and checks each stream is
// one IDR picture, without decoding any, returning a 2x2 picture in its place. The pictures'
// pixels, three samples each, two bytes a sample above 8 bits, are held to the same budget as
// the header's size. Nothing is decoded twice; the cost is the canvas libheif allocates.

#include <libheif/heif.h>
#include <libheif/heif_plugin.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    uint64_t budget;      // bytes
    uint64_t coded;       // bytes of every picture so far
    int pictures;
    int max_width, max_height;
    int over;             // the budget was exceeded: pushing stopped
    char why[160];        // why the probe failed, when it did
} heif_probe_tally;

// The probe's callbacks get no context: libheif runs them on the calling thread (tiles too, with
// `heif_context_set_max_decoding_threads(ctx, 0)`).
static __thread heif_probe_tally *probe_tally;

typedef struct {
    int width, height, chroma_format, bit_depth;  // of the largest SPS seen (0 before one)
    uint64_t picture_bytes;
    int pictures;
    int pictures_begun;  // a slice has come: a parameter set after it is refused
} heif_probe_decoder;

typedef struct {
    const uint8_t *p;
    size_t n, bit;  // RBSP bytes (emulation prevention removed) and the bit read next
} bits;

static uint32_t read_bits(bits *b, int count, int *bad) {
    uint32_t v = 0;
    for (int i = 0; i < count; i++) {
        if (b->bit >= b->n * 8) { *bad = 1; return 0; }
        v = (v << 1) | ((b->p[b->bit >> 3] >> (7 - (b->bit & 7))) & 1);
        b->bit++;
    }
    return v;
}

static uint32_t read_ue(bits *b, int *bad) {
    int zeros = 0;
    while (!*bad && read_bits(b, 1, bad) == 0) {
        if (++zeros > 31) { *bad = 1; return 0; }
    }
    if (*bad) return 0;
    return (uint32_t)(((uint64_t)1 << zeros) - 1 + read_bits(b, zeros, bad));
}

// seq_parameter_set_rbsp (H.265 7.3.2.2) up to the bit depths. 0 when it reads whole.
static int parse_sps(const uint8_t *nal, size_t size, heif_probe_decoder *out) {
    if (size > 4096) size = 4096;  // the fields read sit in the first few dozen bytes
    uint8_t rbsp[4096];
    size_t n = 0;
    for (size_t i = 2, zeros = 0; i < size; i++) {  // after the 2-byte NAL unit header
        if (zeros >= 2 && nal[i] == 3) { zeros = 0; continue; }
        zeros = nal[i] == 0 ? zeros + 1 : 0;
        rbsp[n++] = nal[i];
    }
    bits b = {rbsp, n, 0};
    int bad = 0;
    read_bits(&b, 4, &bad);                               // sps_video_parameter_set_id
    uint32_t sub_layers = read_bits(&b, 3, &bad);         // sps_max_sub_layers_minus1
    read_bits(&b, 1, &bad);                               // sps_temporal_id_nesting_flag
    b.bit += 88 + 8;                                      // general profile, general_level_idc
    int profile_present[8] = {0}, level_present[8] = {0};
    for (uint32_t i = 0; i < sub_layers; i++) {
        profile_present[i] = (int)read_bits(&b, 1, &bad);
        level_present[i] = (int)read_bits(&b, 1, &bad);
    }
    if (sub_layers > 0) b.bit += 2 * (8 - sub_layers);     // reserved_zero_2bits
    for (uint32_t i = 0; i < sub_layers; i++) b.bit += (profile_present[i] ? 88 : 0) + (level_present[i] ? 8 : 0);
    read_ue(&b, &bad);                                    // sps_seq_parameter_set_id
    uint32_t chroma = read_ue(&b, &bad);
    if (chroma == 3) read_bits(&b, 1, &bad);              // separate_colour_plane_flag
    uint32_t width = read_ue(&b, &bad), height = read_ue(&b, &bad);
    uint64_t crop_x = 0, crop_y = 0;
    if (read_bits(&b, 1, &bad)) {                         // conformance_window_flag: left, right, top, bottom
        uint64_t unit_x = chroma == 1 || chroma == 2 ? 2 : 1, unit_y = chroma == 1 ? 2 : 1;
        crop_x = unit_x * ((uint64_t)read_ue(&b, &bad) + read_ue(&b, &bad));
        crop_y = unit_y * ((uint64_t)read_ue(&b, &bad) + read_ue(&b, &bad));
    }
    uint64_t depth = (uint64_t)read_ue(&b, &bad) + 8;     // bit_depth_luma_minus8
    uint64_t depth_c = (uint64_t)read_ue(&b, &bad) + 8;
    if (bad || chroma > 3 || width == 0 || height == 0 || width > 65535 || height > 65535 || depth > 16 || depth_c > 16) return -1;
    if (depth_c > depth) depth = depth_c;
    // Counted at its size cropped by its conformance window (as libde265 hands it over), so an
    // image the header check lets through is not refused for the few rows and columns its encoder
    // added up to a whole coding block (5790x5794 is coded 5792x5808). A window takes off at most
    // 64 of them each way here: the decoder still decodes every coded one.
    uint64_t counted_w = width - (crop_x < 64 ? crop_x : 64), counted_h = height - (crop_y < 64 ? crop_y : 64);
    if (crop_x >= width || crop_y >= height) return -1;
    // Three samples a pixel whatever the chroma format: libheif turns a monochrome picture into
    // RGB for libvips.
    uint64_t bytes = counted_w * counted_h * 3 * (depth > 8 ? 2 : 1);
    if (bytes > out->picture_bytes) {
        out->picture_bytes = bytes;
        out->width = (int)width;
        out->height = (int)height;
        out->chroma_format = (int)chroma;
        out->bit_depth = (int)depth;
    }
    return 0;
}

static const char *probe_name(void) { return "image_scrub HEVC size probe"; }

static int probe_supports(enum heif_compression_format format) { return format == heif_compression_HEVC ? 1000 : 0; }

static struct heif_error probe_error(const char *message) {
    struct heif_error error = {heif_error_Decoder_plugin_error, heif_suberror_Unspecified, message};
    return error;
}

static struct heif_error probe_new(void **decoder) {
    *decoder = calloc(1, sizeof(heif_probe_decoder));
    if (*decoder == NULL || probe_tally == NULL) {
        free(*decoder);
        *decoder = NULL;
        return probe_error("no probe running");
    }
    struct heif_error ok = {heif_error_Ok, heif_suberror_Unspecified, "Success"};
    return ok;
}

static void probe_free(void *decoder) { free(decoder); }

// Length-prefixed NAL units, as libheif's libde265 plugin reads them (4-byte sizes).
static struct heif_error probe_push(void *raw, const void *data, size_t size) {
    heif_probe_decoder *decoder = raw;
    const uint8_t *p = data;
    size_t at = 0;
    while (at < size) {
        if (size - at < 4) return probe_error("NAL unit length cut");
        size_t length = ((size_t)p[at] << 24) | ((size_t)p[at + 1] << 16) | ((size_t)p[at + 2] << 8) | p[at + 3];
        at += 4;
        if (length > size - at) return probe_error("NAL unit cut");
        const uint8_t *nal = p + at;
        at += length;
        if (length < 3) continue;
        int type = (nal[0] >> 1) & 0x3f;
        if (type >= 32 && type <= 34 && decoder->pictures_begun) {
            // One sent after the picture began could change its size from what was counted.
            return probe_error("a parameter set after the picture");
        } else if (type == 33) {
            if (parse_sps(nal, length, decoder) != 0) return probe_error("unreadable SPS");
        } else if (type < 32) {
            decoder->pictures_begun = 1;
            // A HEIF image item codes one picture, an IDR one as cameras write it (NAL unit type
            // 19 or 20). Another picture after it is decoded too (300 in a 300 KB file took 7
            // s here), and one that refers to earlier pictures makes libde265 fill a stand-in for
            // each missing one (a 4 KB file stating 4096x4096 took 475 MiB instead of 172).
            if (type != 19 && type != 20) return probe_error("not an IDR picture");
            if ((nal[2] & 0x80) == 0) continue;  // first_slice_segment_in_pic_flag: a new picture
            if (++decoder->pictures > 1) return probe_error("more than one picture");
            probe_tally->pictures++;
            probe_tally->coded += decoder->picture_bytes;
            if (decoder->width > probe_tally->max_width) probe_tally->max_width = decoder->width;
            if (decoder->height > probe_tally->max_height) probe_tally->max_height = decoder->height;
            if (probe_tally->coded > probe_tally->budget) {
                probe_tally->over = 1;
                snprintf(probe_tally->why, sizeof probe_tally->why, "the coded pictures are over the budget");
                return probe_error("coded pictures over the budget");
            }
        }
    }
    struct heif_error ok = {heif_error_Ok, heif_suberror_Unspecified, "Success"};
    return ok;
}

// A 2x2 picture of the SPS's chroma format and bit depth, zeroed, in place of the real one.
static struct heif_error probe_decode(void *raw, struct heif_image **out) {
    heif_probe_decoder *decoder = raw;
    *out = NULL;
    if (decoder->picture_bytes == 0) return probe_error("no SPS");
    static const enum heif_chroma chroma[] = {heif_chroma_monochrome, heif_chroma_420, heif_chroma_422, heif_chroma_444};
    int mono = decoder->chroma_format == 0;
    struct heif_error error = heif_image_create(2, 2, mono ? heif_colorspace_monochrome : heif_colorspace_YCbCr, chroma[decoder->chroma_format], out);
    if (error.code != heif_error_Ok) return error;
    static const enum heif_channel channels[] = {heif_channel_Y, heif_channel_Cb, heif_channel_Cr};
    for (int i = 0; i < (mono ? 1 : 3); i++) {
        error = heif_image_add_plane(*out, channels[i], 2, 2, decoder->bit_depth);
        if (error.code != heif_error_Ok) break;
        int stride = 0;
        uint8_t *plane = heif_image_get_plane(*out, channels[i], &stride);
        if (plane != NULL) memset(plane, 0, (size_t)stride * 2);
    }
    if (error.code != heif_error_Ok) {
        heif_image_release(*out);
        *out = NULL;
    }
    return error;
}

static void probe_strict(void *decoder, int flag) { (void)decoder; (void)flag; }

// A HEIF file may code its pictures in AV1 (an AVIF under a `mif1` brand, which the caller lets
// through as HEIC), with the same gap between `ispe` and coded size: refused here, so that only
// HEVC is ever decoded, and only after the probe.
static int probe_av1_supports(enum heif_compression_format format) { return format == heif_compression_AV1 ? 1000 : 0; }

static struct heif_error probe_av1_new(void **decoder) {
    *decoder = NULL;
    return probe_error("only HEVC is decoded");
}

static const struct heif_decoder_plugin heif_probe_av1_plugin = {
    .plugin_api_version = 3,
    .get_plugin_name = probe_name,
    .does_support_format = probe_av1_supports,
    .new_decoder = probe_av1_new,
    .free_decoder = probe_free,
    .push_data = probe_push,
    .decode_image = probe_decode,
    .set_strict_decoding = probe_strict,
    .id_name = "image_scrub_probe_av1",
};

static const struct heif_decoder_plugin heif_probe_plugin = {
    .plugin_api_version = 3,
    .get_plugin_name = probe_name,
    .does_support_format = probe_supports,
    .new_decoder = probe_new,
    .free_decoder = probe_free,
    .push_data = probe_push,
    .decode_image = probe_decode,
    .set_strict_decoding = probe_strict,
    .id_name = "image_scrub_probe",
};

// ---- HEIF: the `meta` box, read as libheif 1.15 reads it ------------------------------------
//
// libheif 1.15 has no API for an item's type or data, so the `meta` box is walked here, before
// libvips or libheif read anything but the header:
// - `iinf`: a metadata item stored compressed (`mime` with a content encoding) is inflated whole
//   when libvips reads the header (100 KB of deflated XMP made 359 MiB here): refused. The grid,
//   overlay and identity items are noted.
// - `iref`: one derived image taking another as an input (camera files never nest them) makes a
//   canvas for each reference (a 2 KB file made 32 canvases of 8192x8192): refused.
// - `iloc` (and `idat`): each grid's and overlay's canvas, at the size its own data states, which
//   need not be its `ispe`. libheif allocates it (and zeroes it) before decoding any tile.
//   Field layouts libheif reads otherwise than the standard (an index in a version 1 box, sizes
//   other than 0, 4 or 8 bytes) are refused, so that both read the same data.
// - `ipco`: the largest bit depth any `hvcC` or `pixi` states, which the canvases take.

static uint64_t be(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

typedef struct {
    const uint8_t *p, *end;
} span;

// Takes `n` bytes (0 to 8) from the front of `s` as a big-endian number; -1 when it is too short.
static int take(span *s, size_t n, uint64_t *v) {
    if ((size_t)(s->end - s->p) < n) return -1;
    *v = be(s->p, n);
    s->p += n;
    return 0;
}

// Skips a NUL-terminated string, as libheif reads one (to the end when unterminated); its length.
static size_t skip_string(span *s) {
    const uint8_t *start = s->p;
    while (s->p < s->end && *s->p != 0) s->p++;
    size_t length = (size_t)(s->p - start);
    if (s->p < s->end) s->p++;
    return length;
}

// The next box of `s`: 1 with its type and body, 0 at the end, -1 when malformed.
static int next_box(span *s, uint32_t *type, span *body) {
    size_t left = (size_t)(s->end - s->p);
    if (left == 0) return 0;
    if (left < 8) return -1;
    uint64_t size = be(s->p, 4);
    size_t header = 8;
    *type = (uint32_t)be(s->p + 4, 4);
    if (size == 1) {
        if (left < 16) return -1;
        size = be(s->p + 8, 8);
        header = 16;
    } else if (size == 0) {
        size = left;
    }
    if (size < header || size > left) return -1;
    body->p = s->p + header;
    body->end = s->p + size;
    s->p += size;
    return 1;
}

#define FOURCC(a, b, c, d) ((uint32_t)(a) << 24 | (uint32_t)(b) << 16 | (uint32_t)(c) << 8 | (uint32_t)(d))

static int find_box(span s, uint32_t want, span *out) {
    uint32_t type;
    int found;
    while ((found = next_box(&s, &type, out)) == 1) {
        if (type == want) return 1;
    }
    out->p = out->end = NULL;
    return found;
}

typedef struct {
    uint32_t id, type;
} heif_item;

static int field_size_read(size_t size) { return size == 0 || size == 4 || size == 8; }

typedef struct {
    uint64_t canvas_pixels;  // of the largest grid or overlay canvas (0 without one)
    int bit_depth;           // the largest any `hvcC` or `pixi` states (8 at least)
    char why[160];           // why the walk refused it, when it did
} heif_meta;

// 0 when the `meta` box reads as above, -1 when it does not (`meta->why` says why).
static int heif_check_meta(const void *data, size_t length, heif_meta *meta_out) {
    memset(meta_out, 0, sizeof *meta_out);
    meta_out->bit_depth = 8;
    char *why = meta_out->why;
    size_t why_size = sizeof meta_out->why;
    span file = {data, (const uint8_t *)data + length}, meta, box, iinf, iref, iloc, iprp = {NULL, NULL}, ipco, idat = {NULL, NULL};
    int got;
    uint32_t type;
    snprintf(why, why_size, "its meta box could not be read");
    if (find_box(file, FOURCC('m', 'e', 't', 'a'), &meta) != 1 || meta.end - meta.p < 4) return -1;
    // libheif takes the last `meta` box, this walk the first: a file with two is refused. Its
    // top-level boxes are read as libheif reads them, up to the first malformed one.
    span top = file;
    int metas = 0;
    while ((got = next_box(&top, &type, &box)) == 1) metas += type == FOURCC('m', 'e', 't', 'a');
    if (metas != 1) {
        snprintf(why, why_size, "it has more than one meta box");
        return -1;
    }
    meta.p += 4;  // FullBox version and flags
    if (find_box(meta, FOURCC('i', 'i', 'n', 'f'), &iinf) != 1 || iinf.end - iinf.p < 4) return -1;
    // The derived items: a camera file has one or two (the image, its gain map).
    heif_item derived[64];
    int n_derived = 0;
    uint64_t v;
    if (take(&iinf, 4, &v) != 0 || take(&iinf, (v >> 24) == 0 ? 2 : 4, &v) != 0) return -1;
    while ((got = next_box(&iinf, &type, &box)) == 1) {
        uint64_t version_flags, id, protection, item_type;
        if (type != FOURCC('i', 'n', 'f', 'e') || take(&box, 4, &version_flags) != 0 || (version_flags >> 24) < 2) continue;
        if (take(&box, (version_flags >> 24) == 2 ? 2 : 4, &id) != 0 || take(&box, 2, &protection) != 0 || take(&box, 4, &item_type) != 0) return -1;
        if (item_type == FOURCC('m', 'i', 'm', 'e')) {
            skip_string(&box);  // item_name
            skip_string(&box);  // content_type
            if (skip_string(&box) > 0) {
                snprintf(why, why_size, "a metadata item is stored compressed");
                return -1;
            }
            continue;
        }
        if (item_type != FOURCC('g', 'r', 'i', 'd') && item_type != FOURCC('i', 'o', 'v', 'l') && item_type != FOURCC('i', 'd', 'e', 'n')) continue;
        if (n_derived == 64) return -1;
        derived[n_derived++] = (heif_item){(uint32_t)id, (uint32_t)item_type};
    }
    if (got < 0) return -1;

    // The bit depths a canvas may take: hvcC's bitDepthLumaMinus8 and bitDepthChromaMinus8 sit
    // at bytes 17 and 18; pixi holds a count and then each channel's depth. Each property's type is
    // kept for the associations below (a camera file has a few dozen).
    uint32_t properties[1024];
    size_t n_properties = 0;
    if (find_box(meta, FOURCC('i', 'p', 'r', 'p'), &iprp) == 1 && find_box(iprp, FOURCC('i', 'p', 'c', 'o'), &ipco) == 1) {
        while ((got = next_box(&ipco, &type, &box)) == 1) {
            if (n_properties == sizeof properties / sizeof *properties) return -1;
            properties[n_properties++] = type;
            if (type == FOURCC('h', 'v', 'c', 'C') && box.end - box.p >= 19) {
                for (int i = 17; i <= 18; i++) {
                    if (8 + (box.p[i] & 7) > meta_out->bit_depth) meta_out->bit_depth = 8 + (box.p[i] & 7);
                }
            } else if (type == FOURCC('p', 'i', 'x', 'i') && box.end - box.p >= 5) {
                for (const uint8_t *bits = box.p + 5; bits < box.end && bits < box.p + 5 + box.p[4]; bits++) {
                    if (*bits > meta_out->bit_depth) meta_out->bit_depth = *bits;
                }
            }
        }
        if (got < 0) return -1;
    }

    // libheif applies every `irot`, `imir` and `clap` an item is associated with, each on a new
    // copy of the image, and an association may be listed 255 times: more than one of each kind
    // for an item is refused. libheif joins every `ipma` box; each is read here.
    span props = iprp;
    while (iprp.p != NULL && (got = next_box(&props, &type, &box)) == 1) {
        uint64_t version_flags, entries, item, associations, index;
        if (type != FOURCC('i', 'p', 'm', 'a')) continue;
        if (take(&box, 4, &version_flags) != 0 || take(&box, 4, &entries) != 0) return -1;
        for (uint64_t e = 0; e < entries && box.p < box.end; e++) {
            if (take(&box, (version_flags >> 24) < 1 ? 2 : 4, &item) != 0 || take(&box, 1, &associations) != 0) return -1;
            int rotations = 0, mirrors = 0, crops = 0;
            for (uint64_t a = 0; a < associations; a++) {
                if (take(&box, version_flags & 1 ? 2 : 1, &index) != 0) return -1;
                index &= version_flags & 1 ? 0x7fff : 0x7f;
                if (index == 0 || index > n_properties) continue;
                uint32_t kind = properties[index - 1];
                rotations += kind == FOURCC('i', 'r', 'o', 't');
                mirrors += kind == FOURCC('i', 'm', 'i', 'r');
                crops += kind == FOURCC('c', 'l', 'a', 'p');
            }
            if (rotations > 1 || mirrors > 1 || crops > 1) {
                snprintf(why, why_size, "an image has more than one transformation of a kind");
                return -1;
            }
        }
    }
    if (iprp.p != NULL && got < 0) return -1;

    // No derived image as another's input.
    got = find_box(meta, FOURCC('i', 'r', 'e', 'f'), &iref);
    if (got < 0) return -1;
    if (got == 1 && n_derived > 0) {
        if (take(&iref, 4, &v) != 0) return -1;
        size_t id_size = (v >> 24) == 0 ? 2 : 4;
        while ((got = next_box(&iref, &type, &box)) == 1) {
            uint64_t from, count, to;
            if (type != FOURCC('d', 'i', 'm', 'g')) continue;
            if (take(&box, id_size, &from) != 0 || take(&box, 2, &count) != 0) return -1;
            for (uint64_t i = 0; i < count; i++) {
                if (take(&box, id_size, &to) != 0) return -1;
                for (int d = 0; d < n_derived; d++) {
                    if (derived[d].id == to) {
                        snprintf(why, why_size, "a grid or overlay takes another derived image as an input");
                        return -1;
                    }
                }
            }
        }
        if (got < 0) return -1;
    }

    // Each grid's and overlay's canvas, from its data (in the file, or in `idat`).
    if (find_box(meta, FOURCC('i', 'l', 'o', 'c'), &iloc) != 1) return -1;
    if (find_box(meta, FOURCC('i', 'd', 'a', 't'), &idat) < 0) return -1;
    uint64_t version, sizes, count;
    if (take(&iloc, 4, &version) != 0 || take(&iloc, 2, &sizes) != 0) return -1;
    version >>= 24;
    size_t offset_size = (sizes >> 12) & 15, length_size = (sizes >> 8) & 15, base_size = (sizes >> 4) & 15;
    size_t index_size = version == 1 || version == 2 ? sizes & 15 : 0;
    // libheif 1.15 reads an index in version 2 only, and a field of 4 or 8 bytes only.
    if (version > 2 || index_size != 0 || !field_size_read(offset_size) || !field_size_read(length_size) || !field_size_read(base_size)) {
        snprintf(why, why_size, "its iloc box has a layout libheif reads otherwise");
        return -1;
    }
    // libheif's own limits on items and on extents an item.
    if (take(&iloc, version < 2 ? 2 : 4, &count) != 0 || count > 20000) return -1;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t id, method = 0, reference, base, extents, offset, extent_length;
        if (take(&iloc, version < 2 ? 2 : 4, &id) != 0) return -1;
        if ((version == 1 || version == 2) && take(&iloc, 2, &method) != 0) return -1;
        if (take(&iloc, 2, &reference) != 0 || take(&iloc, base_size, &base) != 0 || take(&iloc, 2, &extents) != 0 || extents > 32) return -1;
        // The item's first bytes, as libheif reads its data: every extent in turn, each its stated
        // length (none for a length of 0), from the file or from `idat`.
        uint8_t item[16];
        size_t item_length = 0;
        int readable = (method & 15) <= 1;
        for (uint64_t e = 0; e < extents; e++) {
            if (take(&iloc, offset_size, &offset) != 0 || take(&iloc, length_size, &extent_length) != 0) return -1;
            span from = (method & 15) == 0 ? file : idat;
            size_t size = (size_t)(from.end - from.p);
            if (!readable || from.p == NULL || base > size || offset > size - base || extent_length > size - base - offset) {
                readable = 0;
                continue;
            }
            size_t copied = extent_length < sizeof item - item_length ? (size_t)extent_length : sizeof item - item_length;
            memcpy(item + item_length, from.p + base + offset, copied);
            item_length += copied;
        }
        for (int d = 0; d < n_derived; d++) {
            if (derived[d].id != id || derived[d].type == FOURCC('i', 'd', 'e', 'n')) continue;
            // grid: version, flags, rows - 1, columns - 1; iovl: version, flags, 4 fill values
            // of 16 bits. Then width and height, of 32 bits when flags & 1, else 16.
            span fields = {item, item + item_length};
            uint64_t head, flags, skip, width, height;
            size_t skipped = derived[d].type == FOURCC('g', 'r', 'i', 'd') ? 2 : 8;
            if (!readable || take(&fields, 1, &head) != 0 || take(&fields, 1, &flags) != 0 || take(&fields, skipped, &skip) != 0 ||
                take(&fields, flags & 1 ? 4 : 2, &width) != 0 || take(&fields, flags & 1 ? 4 : 2, &height) != 0) {
                snprintf(why, why_size, "a grid's or overlay's data could not be read");
                return -1;
            }
            uint64_t pixels = (width < 0xfffff ? width : 0xfffff) * (height < 0xfffff ? height : 0xfffff);
            if (pixels > meta_out->canvas_pixels) meta_out->canvas_pixels = pixels;
        }
    }
    return 0;
}

// The image libvips' heifload will decode, decoded through the probe. 0 when it went through
// within `budget`; 1 when over it (`tally` says what was counted); -1 when it could not be read.
static int heif_probe(const void *data, size_t length, const heif_meta *meta, uint64_t budget, heif_probe_tally *tally) {
    memset(tally, 0, sizeof *tally);
    tally->budget = budget;
    // From 1.16 on, `heif_register_decoder` registers for every context, libvips' too: the probe
    // would stand in for the real decoder everywhere. Refused rather than decoded unchecked.
    if (heif_get_version_number() >= 0x01100000) {
        snprintf(tally->why, sizeof tally->why, "HEIF is not probed with libheif %s", heif_get_version());
        return -1;
    }
    // Every canvas, at the largest bit depth stated: libheif makes a grid's RGB canvas at its
    // `pixi` depth or its first tile's, two bytes a sample above 8 bits.
    uint64_t canvas_bytes = meta->canvas_pixels * 3 * (meta->bit_depth > 8 ? 2 : 1);
    if (canvas_bytes > budget) {
        tally->coded = canvas_bytes;
        tally->over = 1;
        snprintf(tally->why, sizeof tally->why, "a canvas is over the budget");
        return 1;
    }
    struct heif_context *ctx = heif_context_alloc();
    if (ctx == NULL) return -1;
    heif_context_set_max_decoding_threads(ctx, 0);  // tiles on this thread, for `probe_tally`
    int status = -1;
    snprintf(tally->why, sizeof tally->why, "libheif could not read it");
    struct heif_image_handle *handle = NULL;
    struct heif_image *image = NULL;
    struct heif_decoding_options *options = heif_decoding_options_alloc();
    heif_item_id primary = 0, top_level[64];
    if (options != NULL && heif_register_decoder(ctx, &heif_probe_plugin).code == heif_error_Ok &&
        heif_register_decoder(ctx, &heif_probe_av1_plugin).code == heif_error_Ok &&
        heif_context_read_from_memory_without_copy(ctx, data, length, NULL).code == heif_error_Ok &&
        heif_context_get_primary_image_ID(ctx, &primary).code == heif_error_Ok) {
        // libvips decodes the primary image when it is a top-level one (neither a thumbnail nor
        // an auxiliary image of another), else the first top-level image: a file whose primary is
        // not one is refused, so that the image probed is the image decoded.
        int n_top = heif_context_get_number_of_top_level_images(ctx), top = 0;
        if (n_top > 64) n_top = 64;
        n_top = heif_context_get_list_of_top_level_image_IDs(ctx, top_level, n_top);
        while (top < n_top && top_level[top] != primary) top++;
        if (top == n_top) {
            snprintf(tally->why, sizeof tally->why, "its primary image is not a top-level one");
        } else if (heif_context_get_image_handle(ctx, primary, &handle).code == heif_error_Ok) {
            // libheif's only bound on a canvas is per side, checked as the canvas is made (and
            // against each SPS): here the stated long side, and 64 more for the coding blocks
            // an SPS rounds up to. libvips' own context allows 16384.
            int ispe_w = heif_image_handle_get_ispe_width(handle), ispe_h = heif_image_handle_get_ispe_height(handle);
            heif_context_set_maximum_image_size_limit(ctx, (ispe_w > ispe_h ? ispe_w : ispe_h) + 64 + 1);
            options->ignore_transformations = 1;  // nothing to turn or crop in the 2x2 stand-ins
            probe_tally = tally;
            struct heif_error error = heif_decode_image(handle, &image, heif_colorspace_undefined, heif_chroma_undefined, options);
            probe_tally = NULL;
            status = tally->over ? 1 : error.code == heif_error_Ok ? 0 : -1;
            if (status < 0) snprintf(tally->why, sizeof tally->why, "%s", error.message != NULL ? error.message : "libheif failed");
            // A canvas of another size than `ispe` fails in libvips only once decoded: fail it now.
            if (status == 0) {
                int w = heif_image_get_primary_width(image), h = heif_image_get_primary_height(image);
                if (!(w == 2 && h == 2) && (w != ispe_w || h != ispe_h)) {
                    snprintf(tally->why, sizeof tally->why, "the canvas is %dx%d, its ispe %dx%d", w, h, ispe_w, ispe_h);
                    status = -1;
                }
            }
        }
    }
    if (image != NULL) heif_image_release(image);
    if (handle != NULL) heif_image_handle_release(handle);
    if (options != NULL) heif_decoding_options_free(options);
    heif_context_free(ctx);
    return status;
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

    // Loading reads the header only; pixels are decoded when the image is written below. A HEIF
    // header read may inflate metadata: its `meta` box is read first (see heif_check_meta).
    VipsImage *image = NULL;
    if (format < IMAGE_SCRUB_JPEG || format > IMAGE_SCRUB_HEIF) return fail(result, IMAGE_SCRUB_UNREADABLE, "unknown format");
    heif_meta meta;
    if (format == IMAGE_SCRUB_HEIF && heif_check_meta(data, length, &meta) != 0) return fail(result, IMAGE_SCRUB_UNREADABLE, meta.why);
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
    // A HEIF image's HEVC streams may code more than its header states (see heif_probe).
    if (format == IMAGE_SCRUB_HEIF) {
        heif_probe_tally tally;
        int probed = heif_probe(data, length, &meta, max_bytes, &tally);
        if (probed != 0) {
            g_object_unref(image);
            if (probed < 0) return fail(result, IMAGE_SCRUB_UNREADABLE, tally.why);
            result->decoded_bytes = (size_t)tally.coded;
            return fail(result, IMAGE_SCRUB_TOO_MANY_BYTES, tally.why);
        }
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
