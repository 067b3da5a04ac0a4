"""Makes the avatar fixtures: small photos carrying what a phone puts in them (EXIF with GPS, the
camera, an orientation; comments; XMP), and images whose header states sizes too large to decode.
Run with Pillow installed: python3 make_fixtures.py"""
from PIL import Image

exif = Image.Exif()
exif[0x010F] = "EvilCam"  # Make
exif[0x0112] = 6  # Orientation: the stored pixels are turned; rotate 90° clockwise to show
gps = exif.get_ifd(0x8825)
gps[1], gps[2], gps[3], gps[4] = "N", (52.0, 31.0, 12.0), "E", (13.0, 24.0, 1.0)
xmp = b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF><rdf:Description secret-xmp="yes"/></rdf:RDF></x:xmpmeta>'

photo = Image.new("RGB", (64, 48), (200, 80, 40))
photo.save("photo.jpg", exif=exif, comment=b"secret-comment", quality=90)
photo.save("photo.webp", exif=exif, xmp=xmp, quality=90)

from PIL import PngImagePlugin

info = PngImagePlugin.PngInfo()
info.add_text("Comment", "secret-comment")
photo.save("photo.png", pnginfo=info, exif=exif)

# 3000 x 2000, as a phone's camera makes them: under every limit, and stored scaled down. A gradient,
# so it is a photo's size in bytes and not one colour's.
gradient = Image.new("RGB", (3000, 2000))
gradient.putdata([(x * 255 // 2999, y * 255 // 1999, 128) for y in range(2000) for x in range(3000)])
gradient.save("camera.jpg", quality=85)

# 5000 x 5000, real pixels (one colour compresses to little).
Image.new("L", (5000, 5000), 128).save("wide.png", optimize=True)


# A decompression bomb: 20000 x 20000 of one grey compresses to a few hundred KiB and would take
# 400 MB (1.6 GB as RGBA) to decode. Refused from its header alone.
Image.new("L", (20000, 20000), 0).save("bomb.png", optimize=True)


# 3000 x 3000, 16 bits per channel, RGBA: under the 4096-pixel side, but 72 MB decoded (twice what
# its pixel count at 8 bits would say), over IMAGE_DECODE_MAX_BYTES' 64 MiB. Written by hand (zeros
# compress to 70 KB): Pillow does not write 16-bit RGBA.
import struct
import zlib


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


side = 3000
packer = zlib.compressobj(9)
row = b"\x00" * (1 + side * 8)
pixels = b"".join(packer.compress(row) for _ in range(side)) + packer.flush()
with open("deep16.png", "wb") as out:
    out.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 16, 6, 0, 0, 0)) + chunk(b"IDAT", pixels) + chunk(b"IEND", b""))
