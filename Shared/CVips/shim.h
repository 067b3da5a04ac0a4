// libvips (Debian: libvips-dev), for CImageScrub: its options are C variadic arguments, which Swift
// cannot pass, so only CImageScrub's small C functions call it.
#include <vips/vips.h>
