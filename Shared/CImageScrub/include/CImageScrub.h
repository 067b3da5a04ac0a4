#ifndef CIMAGESCRUB_H
#define CIMAGESCRUB_H

#include <stddef.h>

/// The formats an image may be; the caller tells them apart by their first bytes. HEIF (HEIC, what
/// an iPhone camera writes) is read, never written.
typedef enum {
    IMAGE_SCRUB_JPEG = 1,
    IMAGE_SCRUB_PNG = 2,
    IMAGE_SCRUB_WEBP = 3,
    IMAGE_SCRUB_HEIF = 4,
} image_scrub_format;

typedef enum {
    IMAGE_SCRUB_OK = 0,
    /// Not a decodable image of the format named.
    IMAGE_SCRUB_UNREADABLE = 1,
    /// The header states a width or height over the limit; nothing was decoded.
    IMAGE_SCRUB_TOO_LARGE = 2,
    /// The library could not start, or ran out of memory.
    IMAGE_SCRUB_FAILED = 3,
    /// The header states an image whose pixels, at its bit depth and channels, take more than
    /// `max_bytes` decoded; nothing was decoded.
    IMAGE_SCRUB_TOO_MANY_BYTES = 4,
} image_scrub_status;

typedef struct {
    /// The re-encoded image (free with image_scrub_free), when the status is IMAGE_SCRUB_OK.
    void *data;
    size_t length;
    /// As stated by the header (IMAGE_SCRUB_TOO_LARGE, IMAGE_SCRUB_TOO_MANY_BYTES) or as stored
    /// (after turning it upright).
    int width;
    int height;
    /// The bytes its pixels take decoded (width × height × channels × bytes per channel, 2 at 16
    /// bits), from the header; set once the header was read.
    size_t decoded_bytes;
    /// Why, when the status is not IMAGE_SCRUB_OK (NUL-terminated, possibly cut).
    char reason[200];
} image_scrub_result;

/// Reads the header of `data`, refuses an image wider or taller than `max_side`, or whose pixels take
/// more than `max_bytes` decoded, before decoding any pixel, then decodes it, turns it upright by its EXIF orientation, converts it to sRGB when it
/// carries a colour profile, and encodes it again in the same format without any metadata (EXIF and
/// its GPS position, XMP, IPTC, comments, text chunks, the profile). Blocking; thread-safe.
image_scrub_status image_scrub(const void *data, size_t length, image_scrub_format format, int max_side, size_t max_bytes, image_scrub_result *result);

/// As image_scrub, then scaled down (never up) to at most `max_long_side` pixels on its long side
/// (0 keeps its size), and written as `output_format` (JPEG, PNG or WebP). A JPEG is decoded at a
/// half, quarter or eighth of its size when that keeps at least nine tenths of `max_long_side`, so a
/// phone photo is not decoded whole to be shrunk. `compact` (JPEG only) makes the encoder find the
/// image's own Huffman tables, a second pass over it: a smaller file for one kept and served, not
/// worth its time for a copy sent once.
image_scrub_status image_scrub_resized(const void *data, size_t length, image_scrub_format format, int max_side, size_t max_bytes, int max_long_side,
                                       image_scrub_format output_format, int compact, image_scrub_result *result);

/// An image this library wrote (trusted: it is not checked again), scaled and cropped around its
/// centre to fill exactly `width` x `height`, as a PNG (for Cairo, which reads PNG only).
image_scrub_status image_scrub_cover_png(const void *data, size_t length, int width, int height, image_scrub_result *result);

/// An image this library wrote (trusted) decoded to 8-bit sRGB pixels, three bytes each, row by row
/// (`width` x `height` x 3 bytes in `data`): for checking what was drawn.
image_scrub_status image_scrub_rgb(const void *data, size_t length, image_scrub_result *result);

void image_scrub_free(void *data);

#endif
