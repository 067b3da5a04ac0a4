#ifndef CSHARECARD_H
#define CSHARECARD_H

#include <stddef.h>

/// The size link previews expect (Open Graph, Twitter/X large card).
#define SHARE_CARD_WIDTH 1200
#define SHARE_CARD_HEIGHT 630
/// The meal's photo, when the card has one: the left of the card, above the band's strip.
#define SHARE_CARD_PHOTO_WIDTH 440
#define SHARE_CARD_PHOTO_HEIGHT 616

typedef enum {
    SHARE_CARD_OK = 0,
    /// A required pointer was NULL.
    SHARE_CARD_INVALID_ARGUMENT = 1,
    /// Cairo or Pango could not draw or encode, or memory ran out.
    SHARE_CARD_FAILED = 2,
} share_card_status;

/// Draws a meal's share card and encodes it as a SHARE_CARD_WIDTH x SHARE_CARD_HEIGHT PNG into a
/// malloc'd buffer (`*out`, `*out_len`; free it with share_card_free, also after a failure).
///
/// Text is UTF-8; invalid sequences are replaced and control characters become spaces. A long title
/// is drawn smaller, wrapped, and ellipsised past three lines. Numbers are clamped to what fits (a
/// negative or non-finite amount is drawn as 0, `score` is clamped to 0...100). `band` picks the
/// badge colour: "great" green, "ok" amber, "poor" red, anything else grey; it is drawn as given.
///
/// Blocking (tens of milliseconds); thread-safe: each call draws on its own surface, and Pango's
/// default font map is per thread.
share_card_status share_card_png(const char *title, const char *app_name, double calories, double protein_g, double carbs_g, double fat_g, int score,
                                 const char *band, unsigned char **out, size_t *out_len);

/// As share_card_png, with the meal's photo on the left: `photo_png` is a PNG of exactly
/// SHARE_CARD_PHOTO_WIDTH x SHARE_CARD_PHOTO_HEIGHT (another size is scaled to fit), and the rest of
/// the card is drawn smaller beside it. NULL (or a PNG Cairo cannot read) draws the card without one.
share_card_status share_card_png_photo(const char *title, const char *app_name, double calories, double protein_g, double carbs_g, double fat_g, int score,
                                       const char *band, const unsigned char *photo_png, size_t photo_len, unsigned char **out, size_t *out_len);

void share_card_free(unsigned char *data);

#endif
